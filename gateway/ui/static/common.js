// Shared by the signed-in admin pages (approvals.html, upstreams.html):
// the key kept in this tab's sessionStorage under the page's own name, the
// JSON API call with it, text-only table cells (textContent; Trusted Types
// forbid HTML sinks), the error banner, and the sign-in and sign-out flow
// with a refresh every 5 s. Loaded before the page's own script.
'use strict';
window.portcullisPage = function (KEY) {
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
    td.textContent = text === undefined || text === null ? '' : String(text);
    if (cls) td.className = cls;
    return td;
  }

  function showError(msg) {
    $('error').textContent = msg;
    $('error').hidden = !msg;
  }

  let load = () => {};

  function show() {
    const signedIn = !!getKey();
    $('login').hidden = signedIn;
    $('view').hidden = !signedIn;
    $('session').hidden = !signedIn;
    if (signedIn) load();
  }

  // loadFailed handles an error of the page's load: a refused key signs
  // out and is said at the login form; any other error takes the banner.
  function loadFailed(e) {
    if (e.status === 401 || e.status === 403) { setKey(''); show(); $('login-error').textContent = e.message; $('login-error').hidden = false; return; }
    showError(e.message);
  }

  // start wires the login form and the sign-out button once the page is
  // parsed, shows the page, and calls pageLoad every 5 s while signed in
  // and canRefresh (if given) allows.
  function start(pageLoad, canRefresh) {
    load = pageLoad;
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
      setInterval(() => { if (getKey() && (!canRefresh || canRefresh())) load(); }, 5000);
    });
  }

  return Object.freeze({ $, api, cell, showError, loadFailed, start });
};
