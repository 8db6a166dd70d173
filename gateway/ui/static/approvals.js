// Pending approvals (docs/approvals.md): lists the calls parked for a
// person (GET /v1/approvals?status=pending) with their redacted args and
// the policy's reason, and approves or rejects them (POST
// /v1/approvals/{id}). Data reaches the page as text only (textContent;
// Trusted Types forbid HTML sinks). The key lives in this tab's
// sessionStorage under its own name, apart from the explorer's auditor key.
'use strict';
(function () {
  const KEY = 'portcullis.approver-key';
  const $ = (id) => document.getElementById(id);
  const getKey = () => { try { return window.sessionStorage.getItem(KEY) || ''; } catch (e) { return ''; } };
  const setKey = (k) => { try { if (k) window.sessionStorage.setItem(KEY, k); else window.sessionStorage.removeItem(KEY); } catch (e) { /* memory only */ } };

  async function api(method, path, body) {
    const headers = { Authorization: 'Bearer ' + getKey(), Accept: 'application/json' };
    if (body) headers['Content-Type'] = 'application/json';
    const resp = await fetch(path, { method, headers, body: body ? JSON.stringify(body) : undefined, credentials: 'omit', cache: 'no-store' });
    let data = null;
    try { data = await resp.json(); } catch (e) { /* not JSON */ }
    if (!resp.ok) {
      const msg = data && data.error ? data.error.code + ': ' + data.error.message : 'HTTP ' + resp.status;
      const err = new Error(msg);
      err.status = resp.status;
      throw err;
    }
    return data;
  }

  function cell(text, cls) {
    const td = document.createElement('td');
    td.textContent = text;
    if (cls) td.className = cls;
    return td;
  }

  function showError(msg) {
    $('error').textContent = msg;
    $('error').hidden = !msg;
  }

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
      if (e.status === 401 || e.status === 403) { setKey(''); show(); $('login-error').textContent = e.message; $('login-error').hidden = false; return; }
      showError(e.message);
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

  function show() {
    const signedIn = !!getKey();
    $('login').hidden = signedIn;
    $('view').hidden = !signedIn;
    $('session').hidden = !signedIn;
    if (signedIn) load();
  }

  document.addEventListener('DOMContentLoaded', () => {
    $('login-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      setKey($('api-key').value.trim());
      $('api-key').value = '';
      $('login-error').hidden = true;
      show();
    });
    $('logout').addEventListener('click', () => { setKey(''); show(); });
    show();
    // Refresh, but never under a reason being typed.
    setInterval(() => { if (getKey() && !(document.activeElement && document.activeElement.tagName === 'INPUT')) load(); }, 5000);
  });
})();
