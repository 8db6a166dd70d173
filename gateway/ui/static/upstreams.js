// Upstream MCP servers (docs/upstreams.md): each server's health (GET
// /v1/upstreams) and its tools with their served and pinned definition
// digests; a quarantined tool (changed or new definition) is listed first
// and approved with the digest served now (POST
// /v1/upstreams/{name}/tools/{tool}/approve). Data reaches the page as text
// only (textContent; Trusted Types forbid HTML sinks). The admin key lives
// in this tab's sessionStorage under its own name.
'use strict';
(function () {
  const { $, api, cell, showError, loadFailed, start } = window.portcullisPage('portcullis.admin-key');

  // ownName is the upstream's own name of a tool listed as "<upstream>.<tool>".
  function ownName(upstream, tool) {
    return tool.startsWith(upstream + '.') ? tool.slice(upstream.length + 1) : tool;
  }

  function actionCell(u, t) {
    const td = document.createElement('td');
    if (!t.quarantined) return td;
    const b = document.createElement('button');
    b.type = 'button';
    b.className = 'btn btn-primary approve';
    b.textContent = 'Approve';
    b.setAttribute('aria-label', 'approve ' + t.name + ' at ' + t.served_sha256);
    b.addEventListener('click', async () => {
      b.disabled = true;
      try {
        await api('POST', '/v1/upstreams/' + encodeURIComponent(u.name) + '/tools/' + encodeURIComponent(ownName(u.name, t.name)) + '/approve',
          { definition_sha256: t.served_sha256 });
        showError('');
        $('summary').dataset.approved = t.name;
        $('summary').textContent = t.name + ': definition ' + t.served_sha256 + ' approved';
      } catch (e) {
        showError(e.message);
      }
      load();
    });
    td.appendChild(b);
    return td;
  }

  function hints(t) {
    const out = [];
    if (t.read_only_hint) out.push('readOnly');
    if (t.destructive_hint === true) out.push('destructive');
    if (t.destructive_hint === false) out.push('not destructive');
    return out.join(', ');
  }

  async function load() {
    let list;
    try {
      list = await api('GET', '/v1/upstreams');
    } catch (e) {
      loadFailed(e);
      return;
    }
    const servers = $('servers');
    const tools = $('tools');
    servers.replaceChildren();
    const rows = [];
    let quarantined = 0;
    for (const u of list.upstreams) {
      const tr = document.createElement('tr');
      tr.dataset.upstream = u.name;
      tr.dataset.state = u.state;
      tr.append(cell(u.name), cell(u.transport), cell(u.state, 'state-' + u.state), cell(u.since), cell(u.restarts),
        cell(u.last_error), cell(u.launch_receipt_id, 'mono'));
      servers.appendChild(tr);
      for (const t of u.tools || []) {
        if (t.quarantined) quarantined++;
        const row = document.createElement('tr');
        row.dataset.tool = t.name;
        row.dataset.quarantined = t.quarantined ? 'true' : 'false';
        if (t.quarantined) row.className = 'quarantined';
        row.append(cell(t.name, 'mono'), cell(t.quarantined ? 'quarantined' : 'pinned'), cell(t.served_sha256, 'mono'),
          cell(t.pinned_sha256 || '(none)', 'mono'), cell(hints(t)), actionCell(u, t));
        rows.push([t.quarantined ? 0 : 1, t.name, row]);
      }
    }
    rows.sort((a, b) => a[0] - b[0] || (a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0));
    tools.replaceChildren(...rows.map((r) => r[2]));
    $('summary').dataset.quarantined = String(quarantined);
    if (!$('summary').dataset.approved) {
      $('summary').textContent = list.upstreams.length + ' upstream(s), ' + quarantined + ' quarantined tool(s)';
    }
  }

  start(load);
})();
