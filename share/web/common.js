// share/web/common.js — what termd's pages share: the token (taken from ?token= once, kept in
// sessionStorage, removed from the address bar), what it admits (/auth), the token box, WebSocket
// URLs, and an /events connection that subscribes, lists sessions and comes back after a drop.
'use strict';

const TD = {};

TD.token = (() => {
  const u = new URL(location.href);
  const t = u.searchParams.get('token');
  if (t !== null) {
    sessionStorage.setItem('termd.token', t);
    u.searchParams.delete('token');
    history.replaceState(history.state, '', u.pathname + u.search + u.hash);
  }
  return sessionStorage.getItem('termd.token') || '';
})();

TD.setToken = (t) => {
  sessionStorage.setItem('termd.token', t);
  TD.token = t;
};

TD.headers = () => (TD.token ? { Authorization: 'Bearer ' + TD.token } : {});

// 'full', 'view' or 'none' (no token, or a wrong one, where termd wants one)
TD.auth = async () => {
  try {
    const r = await fetch('/auth', { headers: TD.headers(), cache: 'no-store' });
    return (await r.json()).auth || 'none';
  } catch (e) {
    return 'unreachable';
  }
};

// ws:// or wss:// URL for a path on this termd, with the token as ?token=
// (a browser cannot set headers on a WebSocket)
TD.wsURL = (path, params) => {
  const u = new URL(path, location.href);
  u.protocol = location.protocol === 'https:' ? 'wss:' : 'ws:';
  for (const [k, v] of Object.entries(params || {})) u.searchParams.set(k, v);
  if (TD.token) u.searchParams.set('token', TD.token);
  return u.href;
};

TD.el = (tag, attrs, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k);
  return e;
};

// a message at the top of the page (null hides it)
TD.notice = (text, kind) => {
  const n = document.getElementById('notice');
  if (!n) return;
  n.replaceChildren();
  n.hidden = !text;
  n.className = kind || 'info';
  if (text) n.append(TD.el('p', { text }));
  return n;
};

// "this page needs a token": the message and a box to give one
TD.askToken = (why) => {
  const n = TD.notice(why, 'error');
  const input = TD.el('input', { type: 'password', id: 'token-input', autocomplete: 'off',
                                 placeholder: 'token', 'aria-label': 'token' });
  const form = TD.el('form', { id: 'token-form' }, input, TD.el('button', { type: 'submit', text: 'Use token' }));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    TD.setToken(input.value.trim());
    location.reload();
  });
  n.append(form);
  input.focus();
};

TD.tokenMessage = (auth) => (TD.token
  ? (TD.token.includes(' ')
    ? 'termd refused this token: it has a space where the token has a +; percent-encode it in ?token= (+ is %2B) or type it here.'
    : 'termd refused this token: this page shows nothing without a valid one.')
  : 'termd needs a token: open this page with ?token=… once, or give it here.');

TD.showAccess = (auth) => {
  const a = document.getElementById('access');
  if (!a) return;
  a.textContent = auth === 'full' ? 'full access' : auth === 'view' ? 'view token: read-only' : '';
  a.className = 'badge ' + (auth === 'full' ? 'live' : 'ro');
};

// The /events channel: on(name, fn) for observations by name ('hello', 'session.list', events);
// onstate(text) for the connection line. It subscribes to new events and asks for the session
// list on every (re)connect, and reconnects with backoff after a drop.
class TDEvents {
  constructor() {
    this.handlers = {};
    this.n = 0;
    this.tag = Math.random().toString(36).slice(2, 10);
    this.backoff = 500;
    this.onstate = () => {};
    this.onrefused = () => {};
  }
  on(name, fn) {
    (this.handlers[name] = this.handlers[name] || []).push(fn);
    return this;
  }
  send(action, args) {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) return null;
    const id = 'web-' + this.tag + '-' + (++this.n);
    this.ws.send(JSON.stringify(args ? { id, action, args } : { id, action }));
    return id;
  }
  listSessions() {
    return this.send('session.list');
  }
  connect() {
    let opened = false;
    const ws = new WebSocket(TD.wsURL('/events'), ['termd.events.v1']);
    this.ws = ws;
    ws.onopen = () => {
      opened = true;
      this.backoff = 500;
      this.onstate('');
      this.send('subscribe');
      this.listSessions();
    };
    ws.onmessage = (e) => {
      let o;
      try { o = JSON.parse(e.data); } catch (err) { return; }
      for (const fn of this.handlers[o.observation] || []) fn(o, o.extras || {});
      for (const fn of this.handlers['*'] || []) fn(o, o.extras || {});
    };
    ws.onclose = async () => {
      if (this.ws !== ws) return;
      if (!opened) {
        const auth = await TD.auth();
        if (auth === 'none') { this.onrefused(auth); return; }
      }
      this.onstate('events: disconnected, trying again in ' + Math.round(this.backoff / 1000) + ' s');
      setTimeout(() => this.connect(), this.backoff);
      this.backoff = Math.min(this.backoff * 2, 10000);
    };
  }
}
