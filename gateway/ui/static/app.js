// Portcullis evidence explorer.
//
// Plain JavaScript, no dependencies, no build step. All data comes from the
// gateway's authenticated JSON API, called with the auditor key the user
// typed in. The key lives in this tab's sessionStorage (or only in memory
// when storage is unavailable): never in a URL, a cookie or the page.
//
// Receipts carry attacker-influenced strings (argv, paths, tool names,
// reasons), so everything is rendered with DOM APIs and textContent. The page
// is served with Trusted Types enforced and no policy, so an HTML sink would
// throw rather than parse.
'use strict';

(function () {
  const KEY_STORAGE = 'portcullis.explorer.key';
  const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
  const SVG_NS = 'http://www.w3.org/2000/svg';
  // Okabe-Ito-derived palette: distinguishable with common colour-vision deficiencies.
  const PALETTE = ['#0072b2', '#e69f00', '#009e73', '#cc79a7', '#56b4e9', '#d55e00', '#7a6fca', '#8c8c3a', '#333f50'];
  const DECISION_COLORS = { allow: '#1a7f4b', deny: '#b42318', invalid: '#d08a00' };
  const MAX_SERIES = 8;

  const $ = (id) => document.getElementById(id);

  // ---- key handling ------------------------------------------------------

  let memoryKey = '';

  function storedKey() {
    try {
      return window.sessionStorage.getItem(KEY_STORAGE) || '';
    } catch (e) {
      return memoryKey;
    }
  }

  function storeKey(key) {
    memoryKey = key;
    try {
      if (key) {
        window.sessionStorage.setItem(KEY_STORAGE, key);
      } else {
        window.sessionStorage.removeItem(KEY_STORAGE);
      }
    } catch (e) {
      // Storage disabled: the key stays in memory for this page only.
    }
  }

  // ---- DOM helpers (text only) -------------------------------------------

  // el creates an element. attrs holds attribute names chosen by this file
  // (never by data); children are nodes or strings, added as text.
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    setAttrs(node, attrs);
    append(node, children);
    return node;
  }

  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(SVG_NS, tag);
    setAttrs(node, attrs);
    append(node, children);
    return node;
  }

  function setAttrs(node, attrs) {
    if (!attrs) return;
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (/^on/i.test(k)) throw new Error('event handler attributes are not allowed');
      node.setAttribute(k, v === true ? '' : String(v));
    }
  }

  function append(node, children) {
    for (const c of children) {
      if (c === undefined || c === null || c === false) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
  }

  function show(node, visible) {
    node.hidden = !visible;
  }

  function setBanner(node, text) {
    node.textContent = text || '';
    show(node, Boolean(text));
  }

  function badge(value, extraClass) {
    const v = value || 'none';
    const cls = 'badge badge-' + String(v).replace(/[^a-z_]/gi, '') + (extraClass ? ' ' + extraClass : '');
    return el('span', { class: cls }, v);
  }

  function fmtTime(iso) {
    if (!iso) return '';
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return String(iso);
    return d.toISOString().replace('T', ' ').slice(0, 19);
  }

  function fmtInt(n) {
    return Number(n || 0).toLocaleString('en-US');
  }

  // ---- API ---------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  // request GETs path from this gateway with the key as a bearer token:
  // never a cookie, never a URL, never another origin.
  async function request(path, key, accept) {
    try {
      return await fetch(path, {
        method: 'GET',
        headers: { Authorization: 'Bearer ' + (key || storedKey()), Accept: accept },
        cache: 'no-store',
        credentials: 'omit',
        redirect: 'error',
        referrerPolicy: 'no-referrer',
      });
    } catch (e) {
      throw new ApiError(0, 'network', 'could not reach the gateway (' + e.message + ')');
    }
  }

  // failure is the ApiError a non-2xx answer carries.
  async function failure(resp) {
    let body = null;
    try {
      body = await resp.json();
    } catch (e) {
      body = null;
    }
    const err = body && body.error ? body.error : {};
    return new ApiError(resp.status, err.code || 'http_' + resp.status, err.message || resp.statusText || 'request failed');
  }

  async function api(path, key) {
    const resp = await request(path, key, 'application/json');
    if (!resp.ok) throw await failure(resp);
    try {
      return await resp.json();
    } catch (e) {
      return null;
    }
  }

  function describeError(e) {
    if (!(e instanceof ApiError)) return String(e && e.message ? e.message : e);
    if (e.status === 0) return 'Could not reach the gateway: ' + e.message;
    return 'HTTP ' + e.status + ' ' + e.code + ': ' + e.message;
  }

  // handleSessionError signs out when the key stopped working mid-session.
  function handleSessionError(e) {
    if (e instanceof ApiError && (e.status === 401 || e.status === 403)) {
      signOut(loginMessage(e));
      return true;
    }
    return false;
  }

  function loginMessage(e) {
    if (!(e instanceof ApiError)) return describeError(e);
    if (e.status === 401) {
      return 'This API key was refused (401 unauthenticated): the gateway does not know it. Check the key and try again.';
    }
    if (e.status === 403) {
      return 'This key is valid but was refused (403 forbidden): its principal does not hold the auditor role. ' +
        'Agent keys may call tools but may not read receipts; sign in with an auditor key.';
    }
    return 'Sign-in failed. ' + describeError(e);
  }

  // ---- sign in / out -----------------------------------------------------

  async function signIn(key) {
    const submit = $('login-submit');
    submit.disabled = true;
    setBanner($('login-error'), '');
    $('login').dataset.state = 'checking';
    try {
      await api('/v1/receipts?limit=1', key);
    } catch (e) {
      storeKey('');
      setBanner($('login-error'), loginMessage(e));
      $('login').dataset.state = 'refused';
      submit.disabled = false;
      $('api-key').focus();
      return;
    }
    submit.disabled = false;
    storeKey(key);
    $('api-key').value = '';
    $('login').dataset.state = 'ok';
    enterApp();
  }

  function signOut(message) {
    storeKey('');
    seq.results++;
    seq.detail++;
    seq.chart++;
    seq.exportRun++;
    $('export-status').textContent = '';
    delete $('export').dataset.state;
    state.pages = [''];
    state.page = 0;
    state.selected = '';
    lastStats = null;
    clearTimeout(resizeTimer);
    $('results-body').replaceChildren();
    $('results-status').textContent = '';
    $('page-info').textContent = '';
    $('chart').replaceChildren();
    $('chart-legend').replaceChildren();
    $('chart-legend-decisions').replaceChildren();
    $('top-rules').replaceChildren();
    $('chart-summary').textContent = '';
    $('tool-names').replaceChildren();
    $('detail-body').replaceChildren();
    show($('detail'), false);
    $('workspace').classList.remove('has-detail');
    $('filters').reset();
    setBanner($('app-error'), '');
    show($('app'), false);
    show($('session'), false);
    show($('login'), true);
    $('login').dataset.state = message ? 'refused' : 'signed-out';
    setBanner($('login-error'), message || '');
    if (window.location.hash) history.replaceState(null, '', window.location.pathname);
    $('api-key').focus();
  }

  function enterApp() {
    show($('login'), false);
    show($('app'), true);
    show($('session'), true);
    loadChart();
    loadResults();
    const m = /^#receipt=([0-9a-f-]{36})$/i.exec(window.location.hash);
    if (m && UUID_RE.test(m[1])) openReceipt(m[1]);
  }

  // ---- receipts list -----------------------------------------------------

  const state = { pages: [''], page: 0, selected: '', query: '' };
  const seq = { results: 0, detail: 0, chart: 0, exportRun: 0 };

  // toRFC3339 accepts an RFC 3339 time, or a date and time without an
  // offset (read as UTC), or a date alone (00:00 UTC). It keeps the digits
  // given, so a receipt's microsecond time can be pasted as a bound.
  const TIME_RE = /^(\d{4}-\d{2}-\d{2})(?:[T ](\d{2}:\d{2})(:\d{2}(?:\.\d{1,9})?)?)?\s*(Z|[+-]\d{2}:\d{2})?$/i;

  function toRFC3339(label, v) {
    v = v.trim();
    if (!v) return '';
    const m = TIME_RE.exec(v);
    const s = m ? m[1] + 'T' + (m[2] || '00:00') + (m[3] || ':00') + (m[4] || 'Z').toUpperCase() : '';
    if (!m || Number.isNaN(new Date(s).getTime())) {
      throw new Error(label + ': use an RFC 3339 time such as 2026-11-22T10:00:00Z (UTC when no offset is given)');
    }
    return s;
  }

  function filterQuery() {
    const f = $('filters');
    const q = new URLSearchParams();
    for (const name of ['principal', 'tool', 'decision', 'outcome', 'error_code', 'rule', 'session_id', 'q']) {
      const v = f.elements[name].value.trim();
      if (v) q.set(name, v);
    }
    const since = toRFC3339('Since', f.elements.since.value);
    const until = toRFC3339('Until', f.elements.until.value);
    if (since) q.set('since', since);
    if (until) q.set('until', until);
    q.set('limit', f.elements.limit.value || '25');
    return q;
  }

  async function loadResults() {
    const mine = ++seq.results;
    const table = $('results');
    const status = $('results-status');
    let q;
    try {
      q = filterQuery();
    } catch (e) {
      setBanner($('app-error'), e.message);
      table.dataset.state = 'error';
      return;
    }
    setBanner($('app-error'), '');
    state.query = q.toString();
    const cursor = state.pages[state.page];
    if (cursor) q.set('cursor', cursor);
    table.dataset.state = 'loading';
    status.textContent = 'Loading…';
    setPager(false);
    let list;
    try {
      list = await api('/v1/receipts?' + q.toString());
    } catch (e) {
      if (mine !== seq.results) return;
      if (handleSessionError(e)) return;
      table.dataset.state = 'error';
      status.textContent = '';
      setBanner($('app-error'), 'Could not load receipts. ' + describeError(e));
      setPager(true);
      return;
    }
    if (mine !== seq.results) return;
    const receipts = Array.isArray(list.receipts) ? list.receipts : [];
    renderRows(receipts);
    state.next = list.next_cursor || '';
    const n = receipts.length;
    status.textContent = n === 0 ? 'No receipts match.' : n + (n === 1 ? ' receipt' : ' receipts') + ' on this page';
    $('page-info').textContent = 'Page ' + (state.page + 1) + (state.next ? '' : ' (last)');
    table.dataset.query = state.query;
    table.dataset.page = String(state.page + 1);
    table.dataset.count = String(n);
    table.dataset.state = 'ready';
    setPager(true);
  }

  function setPager(enabled) {
    $('page-first').disabled = !enabled || state.page === 0;
    $('page-prev').disabled = !enabled || state.page === 0;
    $('page-next').disabled = !enabled || !state.next;
  }

  function argsSummary(r) {
    const a = r.args;
    if (a === null || a === undefined) return '';
    if (typeof a !== 'object') return String(a);
    if (Array.isArray(a.argv)) return a.argv.map(String).join(' ');
    for (const k of ['path', 'url', 'pattern']) {
      if (typeof a[k] === 'string') return a[k];
    }
    const s = JSON.stringify(a);
    return s.length > 120 ? s.slice(0, 119) + '…' : s;
  }

  function renderRows(receipts) {
    const body = $('results-body');
    if (receipts.length === 0) {
      body.replaceChildren(el('tr', null, el('td', { class: 'empty', colspan: 10 }, 'No receipts match these filters.')));
      return;
    }
    const rows = receipts.map((r) => {
      const outcome = r.outcome || {};
      const idButton = el('button', { type: 'button', class: 'btn-link', title: r.id, 'aria-label': 'Open receipt ' + r.id },
        String(r.id || '').slice(0, 8) + '…');
      const args = argsSummary(r);
      const reason = Array.isArray(r.reasons) ? r.reasons.map(String).join('; ') : '';
      const tr = el('tr', { 'data-id': r.id, 'data-decision': r.decision, 'data-tool': r.tool },
        el('td', { class: 'mono', title: r.time }, fmtTime(r.time).slice(5)),
        el('td', { title: r.tool }, r.tool),
        el('td', { title: r.principal_id }, r.principal_id),
        el('td', null, badge(r.decision)),
        el('td', null, badge(outcome.status || 'pending')),
        el('td', { class: 'mono' }, outcome.error_code || ''),
        el('td', { class: 'reason-cell col-reason', title: reason }, reason),
        el('td', { class: 'col-wide', title: r.session_id }, r.session_id || ''),
        el('td', { class: 'mono args-cell col-wide', title: args }, args),
        el('td', null, idButton));
      if (r.id === state.selected) tr.classList.add('selected');
      tr.addEventListener('click', () => openReceipt(r.id));
      return tr;
    });
    body.replaceChildren(...rows);
  }

  // ---- export ------------------------------------------------------------

  // exportFilter downloads every receipt matching the filters as they are
  // applied now (not just this page) from GET /v1/receipts/export. The key
  // goes in the Authorization header, never in a URL, so the download is
  // fetched here and handed to the browser as a Blob.
  async function exportFilter(format) {
    const mine = ++seq.exportRun;
    const box = $('export');
    const status = $('export-status');
    let q;
    try {
      q = filterQuery();
    } catch (e) {
      setBanner($('app-error'), e.message);
      return;
    }
    q.delete('limit');
    q.set('format', format);
    box.dataset.state = 'loading';
    status.textContent = 'Exporting…';
    let blob;
    let name = 'receipts.' + format;
    try {
      const resp = await request('/v1/receipts/export?' + q.toString(), '', '*/*');
      if (!resp.ok) throw await failure(resp);
      const m = /filename="([A-Za-z0-9._-]+)"/.exec(resp.headers.get('Content-Disposition') || '');
      if (m) name = m[1];
      blob = await resp.blob();
    } catch (e) {
      if (mine !== seq.exportRun) return;
      if (handleSessionError(e)) return;
      box.dataset.state = 'error';
      status.textContent = '';
      setBanner($('app-error'), 'Could not export receipts. ' + describeError(e));
      return;
    }
    if (mine !== seq.exportRun) return;
    const url = URL.createObjectURL(blob);
    const a = el('a', { href: url, download: name, hidden: '' });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60e3);
    box.dataset.state = 'done';
    box.dataset.file = name;
    box.dataset.query = q.toString();
    status.textContent = 'Exported ' + name + ' (' + fmtInt(blob.size) + ' bytes)';
  }

  function markSelected() {
    for (const tr of $('results-body').querySelectorAll('tr')) {
      tr.classList.toggle('selected', tr.dataset.id === state.selected);
    }
  }

  // ---- receipt detail ----------------------------------------------------

  function dl(pairs) {
    const list = el('dl');
    for (const [label, value, field] of pairs) {
      if (value === undefined) continue;
      const dd = el('dd', field ? { 'data-field': field } : null);
      if (value === null || value === '') {
        dd.append(el('span', { class: 'muted' }, '—'));
      } else {
        append(dd, [value]);
      }
      list.append(el('dt', null, label), dd);
    }
    return list;
  }

  function mono(v) {
    return el('span', { class: 'mono' }, v);
  }

  async function openReceipt(id) {
    if (!UUID_RE.test(id)) return;
    const mine = ++seq.detail;
    state.selected = id;
    markSelected();
    const pane = $('detail');
    const body = $('detail-body');
    pane.dataset.state = 'loading';
    pane.dataset.id = id;
    show(pane, true);
    $('workspace').classList.add('has-detail');
    body.replaceChildren(el('p', { class: 'muted' }, 'Loading receipt…'));
    history.replaceState(null, '', '#receipt=' + id);
    let r;
    try {
      r = await api('/v1/receipts/' + encodeURIComponent(id));
    } catch (e) {
      if (mine !== seq.detail) return;
      if (handleSessionError(e)) return;
      pane.dataset.state = 'error';
      body.replaceChildren(el('div', { class: 'banner banner-error', role: 'alert' }, 'Could not load receipt. ' + describeError(e)));
      return;
    }
    if (mine !== seq.detail) return;
    body.replaceChildren(...renderReceipt(r));
    pane.dataset.state = 'ready';
    loadProof(id, mine);
  }

  function renderReceipt(r) {
    const out = [];
    const outcome = r.outcome;
    out.push(el('div', { class: 'decision-line' }, badge(r.decision), el('strong', null, r.tool), el('span', { class: 'muted' }, 'by'), el('span', null, r.principal_id)));

    out.push(el('h3', null, 'Decision'));
    const reasons = Array.isArray(r.reasons) ? r.reasons : [];
    const reasonList = reasons.length
      ? el('ul', { class: 'reasons', 'data-field': 'reasons' }, ...reasons.map((x) => el('li', null, x)))
      : el('span', { class: 'muted', 'data-field': 'reasons' }, 'no reasons recorded');
    const ruleIDs = Array.isArray(r.rule_ids) ? r.rule_ids : [];
    const ruleList = ruleIDs.length
      ? el('ul', { class: 'rule-ids', 'data-field': 'rule_ids' }, ...ruleIDs.map((x) => el('li', null, mono(x))))
      : el('span', { class: 'muted', 'data-field': 'rule_ids' }, 'no rule ids recorded');
    out.push(dl([
      ['Decision', badge(r.decision), 'decision'],
      ['Reasons', reasonList],
      ['Rule ids', ruleList],
      ['Policy revision', r.policy_revision ? mono(r.policy_revision) : null, 'policy_revision'],
    ]));

    out.push(el('h3', null, 'Outcome'));
    if (!outcome) {
      out.push(el('p', { class: 'muted' }, 'No outcome recorded.'));
    } else {
      const pairs = [
        ['Status', badge(outcome.status), 'outcome_status'],
        ['Error code', outcome.error_code ? mono(outcome.error_code) : null, 'error_code'],
        ['Exit code', outcome.exit_code === null || outcome.exit_code === undefined ? null : mono(String(outcome.exit_code)), 'exit_code'],
        ['Duration', outcome.duration_ms === undefined ? null : fmtInt(outcome.duration_ms) + ' ms'],
        ['Backend', outcome.backend || null],
        ['Completed', outcome.time ? mono(outcome.time) : null],
        ['Output SHA-256', outcome.output_sha256 ? mono(outcome.output_sha256) : null],
      ];
      const net = outcome.network;
      if (net) {
        pairs.push(['Connections', fmtInt(net.connections)]);
        pairs.push(['Allowed hosts', (net.allowed || []).join(', ') || null]);
        pairs.push(['Refused hosts', (net.refused || []).join(', ') || null]);
        pairs.push(['Bytes out / in', fmtInt(net.bytes_out) + ' / ' + fmtInt(net.bytes_in)]);
      }
      out.push(dl(pairs));
    }

    out.push(el('h3', null, 'Enforced scope'));
    out.push(renderScope(r.scope));

    out.push(el('h3', null, 'Integrity'));
    out.push(el('div', { class: 'proof', id: 'proof', 'data-state': 'loading' }, el('span', { class: 'muted' }, 'Checking the inclusion proof…')));

    out.push(el('h3', null, 'Identifiers'));
    let parent = null;
    if (r.parent_receipt_id) {
      const b = el('button', { type: 'button', class: 'btn-link' }, r.parent_receipt_id);
      b.addEventListener('click', () => openReceipt(r.parent_receipt_id));
      parent = b;
    }
    const chain = r.chain;
    out.push(dl([
      ['Receipt id', mono(r.id), 'id'],
      ['Time', mono(r.time), 'time'],
      ['Principal', r.principal_id, 'principal_id'],
      ['Session id', r.session_id ? mono(r.session_id) : null, 'session_id'],
      ['Call id', r.call_id ? mono(r.call_id) : null, 'call_id'],
      ['Trace id', r.trace_id ? mono(r.trace_id) : null, 'trace_id'],
      ['Parent receipt', parent, 'parent_receipt_id'],
      ['Instance', r.instance_id ? mono(r.instance_id) : null],
      ['Chain', chain ? mono(chain.id + ' · seq ' + chain.seq) : null, 'chain'],
      ['Chain hash', chain ? mono(chain.hash) : null],
      ['Args SHA-256', r.args_sha256 ? mono(r.args_sha256) : null],
    ]));

    const argsText = r.args === null || r.args === undefined ? 'null' : JSON.stringify(r.args, null, 2);
    out.push(el('details', { open: true },
      el('summary', null, 'Arguments (redacted copy as recorded)'),
      el('pre', { 'data-field': 'args' }, argsText)));
    out.push(el('details', null,
      el('summary', null, 'Raw receipt JSON'),
      el('pre', null, JSON.stringify(r, null, 2))));
    return out;
  }

  function renderScope(scope) {
    if (!scope) {
      return el('p', { class: 'muted', 'data-field': 'scope' }, 'None: the call was not allowed, so it was given nothing.');
    }
    const wrap = el('div', { 'data-field': 'scope' });
    const grants = Array.isArray(scope.fs_grants) ? scope.fs_grants : [];
    const grantView = grants.length
      ? el('table', { class: 'grants' },
        el('thead', null, el('tr', null, el('th', null, 'Path'), el('th', null, 'Mode'), el('th', null, 'Alias'))),
        el('tbody', null, ...grants.map((g) => el('tr', null, el('td', { class: 'mono' }, g.path), el('td', null, g.mode), el('td', { class: 'mono' }, g.alias || '')))))
      : el('span', { class: 'muted' }, 'no file system access');
    const net = scope.network || {};
    const netText = (net.posture || 'off') + (Array.isArray(net.allow) && net.allow.length ? ': ' + net.allow.join(', ') : '');
    const limits = scope.limits || {};
    const limitText = Object.keys(limits).sort().map((k) => k + '=' + limits[k]).join('  ');
    wrap.append(dl([
      ['File system', grantView],
      ['Hidden paths', Array.isArray(scope.fs_deny) && scope.fs_deny.length ? mono(scope.fs_deny.join(', ')) : undefined],
      ['Network', netText],
      ['Environment', Array.isArray(scope.env_names) && scope.env_names.length ? mono(scope.env_names.join(', ')) : null],
      ['Limits', limitText ? mono(limitText) : null],
      ['Backend', scope.backend || null],
    ]));
    return wrap;
  }

  async function loadProof(id, mine) {
    const box = () => document.getElementById('proof');
    let p;
    try {
      p = await api('/v1/receipts/' + encodeURIComponent(id) + '/proof');
    } catch (e) {
      if (mine !== seq.detail || !box()) return;
      if (e instanceof ApiError && e.status === 401) {
        handleSessionError(e);
        return;
      }
      renderProofProblem(box(), e, id, mine);
      return;
    }
    if (mine !== seq.detail || !box()) return;
    const b = box();
    b.dataset.state = 'included';
    b.replaceChildren(
      el('div', { class: 'decision-line' }, fieldBadge('included'), el('span', null, 'Included in a signed checkpoint')),
      dl([
        ['Tree size', fmtInt(p.tree_size)],
        ['Decision leaf', p.decision ? mono('#' + p.decision.leaf_index) : null],
        ['Outcome leaf', p.outcome ? mono('#' + p.outcome.leaf_index) : 'no outcome event yet'],
        ['Verifier key', p.verifier_key ? mono(p.verifier_key) : null],
      ]),
      el('p', { class: 'muted small' },
        'Verify offline with a verifier key pinned out of band (gateway evidence verify, or evidence.VerifyInclusion); ' +
        'the key served here is a convenience, not a trust root.'));
  }

  // fieldBadge is the proof status badge, addressable as data-field.
  function fieldBadge(status, extraClass) {
    const b = badge(status, extraClass);
    b.setAttribute('data-field', 'proof_status');
    return b;
  }

  function renderProofProblem(b, e, id, mine) {
    let status = 'error';
    let text = 'Could not fetch the proof. ' + describeError(e);
    if (e instanceof ApiError && e.status === 412) {
      status = 'pending';
      text = 'Not yet under a signed checkpoint; the next checkpoint will cover it.';
    } else if (e instanceof ApiError && e.status === 503) {
      status = 'unavailable';
      text = 'Checkpoints are off on this gateway (no evidence.signing_key), so there is no inclusion proof.';
    } else if (e instanceof ApiError && e.status === 403) {
      status = 'forbidden';
      text = 'This key may not read proofs (403 forbidden).';
    } else if (e instanceof ApiError && e.status === 404) {
      status = 'not_found';
      text = 'The gateway knows no such receipt.';
    }
    b.dataset.state = status;
    const retry = el('button', { type: 'button', class: 'btn btn-ghost' }, 'Check again');
    retry.addEventListener('click', () => {
      if (mine !== seq.detail) return;
      b.dataset.state = 'loading';
      loadProof(id, mine);
    });
    b.replaceChildren(
      el('div', { class: 'decision-line' }, fieldBadge(status, status === 'pending' ? 'badge-pendingproof' : 'badge-failedproof'), el('span', null, text)),
      status === 'pending' || status === 'error' ? retry : null);
  }

  function closeDetail() {
    seq.detail++;
    state.selected = '';
    show($('detail'), false);
    $('workspace').classList.remove('has-detail');
    $('detail-body').replaceChildren();
    markSelected();
    if (window.location.hash) history.replaceState(null, '', window.location.pathname);
  }

  // ---- chart -------------------------------------------------------------

  const RANGES = {
    '24h': { interval: 'hour', span: 24 * 3600e3, step: 3600e3 },
    '7d': { interval: 'day', span: 7 * 86400e3, step: 86400e3 },
    '30d': { interval: 'day', span: 30 * 86400e3, step: 86400e3 },
  };
  let lastStats = null;
  let resizeTimer = 0;

  async function loadChart() {
    const mine = ++seq.chart;
    const range = RANGES[$('chart-range').value] || RANGES['24h'];
    const now = Date.now();
    const q = new URLSearchParams({
      interval: range.interval,
      // Whole intervals: the server widens the range to them anyway.
      since: new Date(Math.floor((now - range.span) / range.step) * range.step + range.step).toISOString(),
      until: new Date(now).toISOString(),
    });
    const chart = $('chart');
    chart.dataset.state = 'loading';
    let stats;
    try {
      stats = await api('/v1/evidence/stats?' + q.toString());
    } catch (e) {
      if (mine !== seq.chart) return;
      if (handleSessionError(e)) return;
      lastStats = null;
      chart.dataset.state = e instanceof ApiError && e.status === 503 ? 'unavailable' : 'error';
      const msg = e instanceof ApiError && e.status === 503
        ? 'No chart: evidence checkpoints are off on this gateway (evidence.signing_key is not set).'
        : 'Could not load decision counts. ' + describeError(e);
      chart.replaceChildren(el('p', { class: 'chart-empty' }, msg));
      $('chart-legend').replaceChildren();
      $('chart-legend-decisions').replaceChildren();
      $('top-rules').replaceChildren();
      $('chart-summary').textContent = '';
      return;
    }
    if (mine !== seq.chart) return;
    lastStats = stats;
    drawChart();
  }

  // Decisions in stacking order (bottom first); others seen are appended.
  const DECISION_ORDER = ['allow', 'deny', 'invalid'];
  // How a decision is drawn inside its tool's colour: allow solid, deny
  // hatched, invalid dotted, anything else cross-hatched.
  const DECISION_STYLE = { allow: 'solid', deny: 'hatch', invalid: 'dots' };
  const OTHER_RULES = '(other)'; // the API's key for rule ids beyond top
  const TOP_RULES = 6;

  function toolSeries(stats) {
    const totals = new Map();
    for (const b of stats.buckets || []) {
      for (const [k, v] of Object.entries(b.by_tool || {})) totals.set(k, (totals.get(k) || 0) + v);
    }
    let keys = [...totals.keys()].sort((a, b) => totals.get(b) - totals.get(a) || (a < b ? -1 : 1));
    let other = false;
    if (keys.length > MAX_SERIES) {
      keys = keys.slice(0, MAX_SERIES - 1);
      other = true;
    }
    const series = keys.map((k, i) => ({ key: k, label: k, color: PALETTE[i % PALETTE.length], total: totals.get(k) || 0 }));
    if (other) {
      const shown = new Set(keys);
      let rest = 0;
      for (const [k, v] of totals) if (!shown.has(k)) rest += v;
      series.push({ key: '\u0000other', label: 'other tools', color: '#9aa5b4', total: rest, other: true, shown });
    }
    return series;
  }

  function decisionsOf(stats) {
    const totals = new Map();
    for (const b of stats.buckets || []) {
      for (const [k, v] of Object.entries(b.by_decision || {})) totals.set(k, (totals.get(k) || 0) + v);
    }
    const keys = DECISION_ORDER.filter((k) => totals.has(k));
    for (const k of [...totals.keys()].sort()) if (!keys.includes(k)) keys.push(k);
    return keys.map((k) => ({ key: k, style: DECISION_STYLE[k] || 'cross', total: totals.get(k) || 0 }));
  }

  // countOf is a bucket's count of one tool series and one decision, from
  // by_tool_decision.
  function countOf(bucket, se, decision) {
    const td = bucket.by_tool_decision || {};
    if (!se.other) return (td[se.key] || {})[decision] || 0;
    let n = 0;
    for (const [k, m] of Object.entries(td)) if (!se.shown.has(k)) n += (m || {})[decision] || 0;
    return n;
  }

  // patternFor returns the fill of a decision drawn in colour, adding the
  // pattern it needs to defs once (ids are built from indexes, never data).
  function patternFor(defs, made, id, color, style) {
    if (style === 'solid') return color;
    if (!made.has(id)) {
      made.add(id);
      const p = svg('pattern', { id, width: 6, height: 6, patternUnits: 'userSpaceOnUse',
        patternTransform: style === 'hatch' || style === 'cross' ? 'rotate(45)' : null });
      p.append(svg('rect', { width: 6, height: 6, fill: color }));
      if (style === 'dots') {
        p.append(svg('circle', { cx: 3, cy: 3, r: 1.4, fill: '#ffffff', 'fill-opacity': 0.85 }));
      } else {
        p.append(svg('rect', { x: 0, y: 0, width: 2.2, height: 6, fill: '#ffffff', 'fill-opacity': 0.75 }));
        if (style === 'cross') p.append(svg('rect', { x: 0, y: 0, width: 6, height: 2.2, fill: '#ffffff', 'fill-opacity': 0.75 }));
      }
      defs.append(p);
    }
    return 'url(#' + id + ')';
  }

  function swatch(color, style, id) {
    const root = svg('svg', { width: 14, height: 14, viewBox: '0 0 14 14', 'aria-hidden': 'true' });
    const defs = svg('defs');
    root.append(defs);
    root.append(svg('rect', { width: 14, height: 14, rx: 2, fill: patternFor(defs, new Set(), id, color, style) }));
    return root;
  }

  function niceMax(v) {
    if (v <= 4) return 4;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) {
      if (m * p >= v) return m * p;
    }
    return 10 * p;
  }

  function drawTopRules(stats) {
    const list = $('top-rules');
    const totals = new Map();
    let other = 0;
    for (const b of stats.buckets || []) {
      for (const [k, v] of Object.entries(b.by_rule || {})) {
        if (k === OTHER_RULES) other += v;
        else totals.set(k, (totals.get(k) || 0) + v);
      }
    }
    const keys = [...totals.keys()].sort((a, b) => totals.get(b) - totals.get(a) || (a < b ? -1 : 1));
    for (const k of keys.slice(TOP_RULES)) other += totals.get(k);
    const items = keys.slice(0, TOP_RULES).map((k) => el('li', { 'data-rule': k },
      el('button', { type: 'button', class: 'rule-chip', title: 'Show the receipts of rule ' + k, 'data-rule': k },
        el('code', null, k), el('span', { class: 'count' }, fmtInt(totals.get(k))))));
    if (other > 0) items.push(el('li', { class: 'rule-rest' }, '+' + fmtInt(other) + ' under other rules'));
    if (items.length === 0) items.push(el('li', { class: 'rule-rest' }, 'No rule ids recorded in this range.'));
    list.replaceChildren(...items);
    list.dataset.state = 'ready';
  }

  function drawChart() {
    const stats = lastStats;
    const chart = $('chart');
    const legend = $('chart-legend');
    const dlegend = $('chart-legend-decisions');
    if (!stats || $('app').hidden) return;
    const step = stats.interval === 'day' ? 86400e3 : 3600e3;
    const since = new Date(stats.since).getTime();
    const until = new Date(stats.until).getTime();
    const byStart = new Map();
    for (const b of stats.buckets || []) byStart.set(new Date(b.start).getTime(), b);
    // Empty intervals are omitted by the API; the chart shows them as gaps.
    const slots = [];
    for (let t = since; t < until && slots.length < 1000; t += step) {
      slots.push({ t, b: byStart.get(t) || { by_decision: {}, by_tool: {}, by_tool_decision: {}, total: 0 } });
    }
    const series = toolSeries(stats);
    const decisions = decisionsOf(stats);
    const dcount = { allow: 0, deny: 0, invalid: 0 };
    let total = 0;
    for (const b of stats.buckets || []) total += b.total || 0;
    for (const d of decisions) dcount[d.key] = d.total;
    $('chart-summary').textContent = fmtInt(total) + (total === 1 ? ' decision' : ' decisions') + ' checkpointed in this range · ' +
      fmtInt(dcount.allow) + ' allow · ' + fmtInt(dcount.deny) + ' deny · ' + fmtInt(dcount.invalid) + ' invalid';
    chart.dataset.total = String(total);
    drawTopRules(stats);
    if (total === 0 || slots.length === 0) {
      chart.replaceChildren(el('p', { class: 'chart-empty' }, 'No checkpointed decisions in this range yet.'));
      legend.replaceChildren();
      dlegend.replaceChildren();
      chart.dataset.state = 'empty';
      return;
    }

    const W = Math.max(480, Math.round(chart.clientWidth || 960));
    const H = 240;
    const m = { top: 12, right: 12, bottom: 30, left: 44 };
    const pw = W - m.left - m.right;
    const ph = H - m.top - m.bottom;
    let max = 0;
    for (const s of slots) {
      let sum = 0;
      for (const se of series) for (const d of decisions) sum += countOf(s.b, se, d.key);
      max = Math.max(max, sum);
    }
    const yMax = niceMax(max);
    const y = (v) => m.top + ph - (v / yMax) * ph;
    const slotW = pw / slots.length;
    const barW = Math.max(2, Math.min(48, slotW * 0.72));

    const root = svg('svg', {
      id: 'chart-svg', viewBox: '0 0 ' + W + ' ' + H, role: 'img', preserveAspectRatio: 'xMidYMid meet',
      'aria-label': 'Stacked bar chart of decisions per tool per ' + stats.interval +
        ', each tool split by decision (allow solid, deny hatched, invalid dotted), ' + total + ' in total',
    });
    const defs = svg('defs');
    root.append(defs);
    const made = new Set();
    const grid = svg('g', { class: 'grid-lines' });
    for (let i = 0; i <= 4; i++) {
      const v = (yMax / 4) * i;
      const yy = Math.round(y(v)) + 0.5;
      grid.append(svg('line', { class: i === 0 ? 'axis' : 'grid', x1: m.left, x2: W - m.right, y1: yy, y2: yy }));
      grid.append(svg('text', { class: 'tick', x: m.left - 6, y: yy + 4, 'text-anchor': 'end' }, Number.isInteger(v) ? String(v) : v.toFixed(1)));
    }
    root.append(grid);

    const bars = svg('g', { class: 'bars' });
    slots.forEach((s, i) => {
      let acc = 0;
      const x = m.left + i * slotW + (slotW - barW) / 2;
      const when = fmtTime(new Date(s.t).toISOString()).slice(0, stats.interval === 'day' ? 10 : 16) + ' UTC';
      series.forEach((se, si) => {
        decisions.forEach((d, di) => {
          const v = countOf(s.b, se, d.key);
          if (!v) return;
          const y0 = y(acc);
          const y1 = y(acc + v);
          acc += v;
          bars.append(svg('rect', {
            class: 'bar', x: x.toFixed(1), y: y1.toFixed(1), width: barW.toFixed(1), height: Math.max(1, y0 - y1).toFixed(1),
            fill: patternFor(defs, made, 'pat-' + si + '-' + di, se.color, d.style),
            'data-series': se.label, 'data-decision': d.key, 'data-count': v, 'data-start': new Date(s.t).toISOString(),
          }, svg('title', null, se.label + ' · ' + d.key + ' · ' + when + ': ' + v)));
        });
      });
    });
    root.append(bars);

    const labels = svg('g', { class: 'x-labels' });
    const every = Math.max(1, Math.ceil(slots.length / Math.max(2, Math.floor(pw / 70))));
    slots.forEach((s, i) => {
      if (i % every !== 0) return;
      const d = new Date(s.t);
      const text = stats.interval === 'day'
        ? d.toISOString().slice(5, 10)
        : (d.getUTCHours() === 0 || i === 0 ? d.toISOString().slice(5, 10) + ' ' : '') + d.toISOString().slice(11, 16);
      labels.append(svg('text', { class: 'tick', x: (m.left + i * slotW + slotW / 2).toFixed(1), y: H - 10, 'text-anchor': 'middle' }, text));
    });
    root.append(labels);
    chart.replaceChildren(root);

    legend.replaceChildren(...series.map((se, si) => el('li', { 'data-series': se.label },
      swatch(se.color, 'solid', 'lg-tool-' + si),
      el('span', null, se.label),
      el('span', { class: 'count' }, fmtInt(se.total)))));
    dlegend.replaceChildren(...decisions.map((d, di) => el('li', { 'data-decision': d.key },
      swatch('#5b6678', d.style, 'lg-dec-' + di),
      el('span', null, d.key),
      el('span', { class: 'count' }, fmtInt(d.total)))));
    chart.dataset.state = 'ready';

    // Tool names for the filter's suggestions.
    $('tool-names').replaceChildren(...series.filter((s) => !s.other).map((s) => el('option', { value: s.key })));
  }

  // ---- wiring ------------------------------------------------------------

  function init() {
    $('login-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const key = $('api-key').value.trim();
      if (!key) {
        setBanner($('login-error'), 'Enter an API key.');
        return;
      }
      signIn(key);
    });
    $('logout').addEventListener('click', () => signOut(''));
    $('filters').addEventListener('submit', (ev) => {
      ev.preventDefault();
      state.pages = [''];
      state.page = 0;
      loadResults();
    });
    $('reset-filters').addEventListener('click', () => {
      $('filters').reset();
      state.pages = [''];
      state.page = 0;
      loadResults();
    });
    $('page-next').addEventListener('click', () => {
      if (!state.next) return;
      state.pages = state.pages.slice(0, state.page + 1);
      state.pages.push(state.next);
      state.page++;
      loadResults();
    });
    $('page-prev').addEventListener('click', () => {
      if (state.page === 0) return;
      state.page--;
      loadResults();
    });
    $('page-first').addEventListener('click', () => {
      state.page = 0;
      loadResults();
    });
    $('detail-close').addEventListener('click', closeDetail);
    $('export-csv').addEventListener('click', () => exportFilter('csv'));
    $('export-jsonl').addEventListener('click', () => exportFilter('jsonl'));
    $('chart-range').addEventListener('change', loadChart);
    $('chart-refresh').addEventListener('click', loadChart);
    $('top-rules').addEventListener('click', (ev) => {
      const b = ev.target instanceof Element ? ev.target.closest('button[data-rule]') : null;
      if (!b) return;
      $('filters').reset();
      $('f-rule').value = b.dataset.rule;
      state.pages = [''];
      state.page = 0;
      loadResults();
    });
    window.addEventListener('resize', () => {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(drawChart, 150);
    });
    document.addEventListener('keydown', (ev) => {
      if (ev.key === 'Escape' && !$('detail').hidden) closeDetail();
    });

    if (storedKey()) {
      // Re-check a key kept from earlier in this tab before showing data.
      show($('login'), true);
      signIn(storedKey());
    } else {
      show($('login'), true);
      $('login').dataset.state = 'signed-out';
      $('api-key').focus();
    }
  }

  if (document.readyState === 'loading') {
    document.addEventListener('DOMContentLoaded', init);
  } else {
    init();
  }
}());
