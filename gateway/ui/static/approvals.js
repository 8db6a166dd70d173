// Pending approvals (docs/approvals.md): lists the calls parked for a
// person (GET /v1/approvals?status=pending) with their redacted args and
// the policy's reason, and approves or rejects them (POST
// /v1/approvals/{id}). Data reaches the page as text only (textContent;
// Trusted Types forbid HTML sinks). The key lives in this tab's
// sessionStorage under its own name, apart from the explorer's auditor key.
'use strict';
(function () {
  const { $, api, cell, showError, loadFailed, start } = window.portcullisPage('portcullis.approver-key');

  function decisionCell(a) {
    const td = document.createElement('td');
    const reason = document.createElement('input');
    reason.type = 'text';
    reason.placeholder = 'reason';
    reason.setAttribute('aria-label', 'reason for ' + a.id);
    td.appendChild(reason);
    for (const [label, decision, cls] of [['Approve', 'approve', 'btn btn-primary'], ['Reject', 'reject', 'btn btn-ghost']]) {
      const b = document.createElement('button');
      b.type = 'button';
      b.className = cls;
      b.textContent = label;
      b.addEventListener('click', async () => {
        b.disabled = true;
        try {
          const out = await api('POST', '/v1/approvals/' + encodeURIComponent(a.id), { decision, reason: reason.value });
          showError('');
          $('summary').textContent = a.id + ': ' + out.approval.status + ' (the call answered HTTP ' + out.status + ')';
        } catch (e) {
          showError(e.message);
        }
        load();
      });
      td.appendChild(b);
    }
    return td;
  }

  async function load() {
    let list;
    try {
      list = await api('GET', '/v1/approvals?status=pending');
    } catch (e) {
      loadFailed(e);
      return;
    }
    const rows = $('rows');
    rows.replaceChildren();
    for (const a of list.approvals) {
      const tr = document.createElement('tr');
      tr.append(cell(a.created_at), cell(a.principal_id), cell(a.tool), cell(JSON.stringify(a.args || {}), 'mono'),
        cell(a.reason), cell(a.expires_at), decisionCell(a));
      rows.appendChild(tr);
    }
    if (!$('summary').textContent) $('summary').textContent = list.approvals.length + ' pending';
  }

  // Refresh, but never under a reason being typed.
  start(load, () => !(document.activeElement && document.activeElement.tagName === 'INPUT'));
})();
