// share/web/list.js — the session list at /: session.list over /events, asked again whenever a
// session opens or exits, a viewer comes or goes, a command starts or ends, or a session is
// resized; each session's listening ports (ports.list, asked again on port.open/close) as links to
// their previews (/proxy/<port>/, opened in a new tab once the cookie is set); and the recordings
// (GET /record/) when termd keeps them.
'use strict';

(async () => {
  const auth = await TD.auth();
  TD.showAccess(auth);
  if (auth === 'none') { TD.askToken(TD.tokenMessage()); return; }
  if (auth === 'unreachable') { TD.notice('termd does not answer.', 'error'); }

  const body = document.querySelector('#sessions tbody');
  const conn = document.getElementById('conn');
  const ev = new TDEvents();
  let timer = null;
  let lastSessions = [];
  let ports = [];
  const refresh = () => {
    if (timer) return;
    timer = setTimeout(() => { timer = null; ev.listSessions(); ev.send('ports.list'); loadRecordings(); }, 150);
  };

  // a preview: the cookie first (the token in a fetch, never in the address bar), then a new tab
  const openPreview = async (e) => {
    e.preventDefault();
    const href = e.currentTarget.getAttribute('href');
    if (TD.token) {
      try {
        await fetch(href + '?token=' + encodeURIComponent(TD.token), { redirect: 'manual', cache: 'no-store' });
      } catch (err) { /* the tab says why */ }
    }
    window.open(href, '_blank', 'noopener');
  };
  const portCell = (name) => {
    const td = TD.el('td', { class: 'ports' });
    const seen = new Set();
    for (const p of ports.filter((q) => q.session === name).sort((a, b) => a.port - b.port)) {
      if (seen.has(p.port)) continue;
      seen.add(p.port);
      if (td.childNodes.length) td.append(' ');
      const title = p.address + ' · pid ' + p.pid + ' · ' + (p.command || '');
      if (auth === 'full') {
        const a = TD.el('a', { href: '/proxy/' + p.port + '/', text: String(p.port), title });
        a.addEventListener('click', openPreview);
        td.append(a);
      } else {
        td.append(TD.el('span', { text: String(p.port), title }));
      }
    }
    return td;
  };

  const render = (sessions) => {
    lastSessions = sessions;
    body.replaceChildren();
    for (const s of [...sessions].sort((a, b) => (a.name === 'main' ? -1 : b.name === 'main' ? 1 : a.name.localeCompare(b.name)))) {
      const link = TD.el('a', { href: '/s/' + encodeURIComponent(s.name), text: s.name });
      const state = s.alive
        ? TD.el('span', { class: 'badge live', text: auth === 'full' ? 'live' : 'live, read-only' })
        : TD.el('span', { class: 'badge exited', text: 'exited ' + (s.exit_code ?? '') });
      const tr = TD.el('tr', { 'data-session': s.name },
        TD.el('td', {}, link), TD.el('td', {}, state),
        TD.el('td', { class: 'cmd', text: s.command || '—' }),
        TD.el('td', { text: s.cols + '×' + s.rows }),
        TD.el('td', { class: 'viewers', text: String(s.viewers ?? 0) }),
        TD.el('td', { class: 'muted', text: s.cwd || '' }),
        portCell(s.name));
      body.append(tr);
    }
    document.body.dataset.loaded = '1';
  };

  const loadRecordings = async () => {
    const sec = document.getElementById('recordings');
    let list;
    try {
      const r = await fetch('/record/', { headers: TD.headers(), cache: 'no-store' });
      if (!r.ok) { sec.hidden = true; return; }
      list = await r.json();
    } catch (e) { sec.hidden = true; return; }
    const tb = sec.querySelector('tbody');
    tb.replaceChildren();
    for (const f of list) {
      const name = String(f.file).replace(/\.cast$/, '');
      tb.append(TD.el('tr', {},
        TD.el('td', {}, TD.el('a', { href: '/r/' + encodeURIComponent(name), text: f.file })),
        TD.el('td', { text: f.session || '' }),
        TD.el('td', { text: f.start ? new Date(f.start * 1000).toLocaleString() : '' }),
        TD.el('td', { text: String(f.bytes ?? '') })));
    }
    sec.hidden = list.length === 0;
  };

  ev.on('session.list', (o, x) => render(x.sessions || []));
  ev.on('ports.list', (o, x) => { ports = x.ports || []; render(lastSessions); });
  ev.on('subscribe', () => ev.send('ports.list'));
  for (const name of ['port.open', 'port.close']) ev.on(name, refresh);
  for (const name of ['session.open', 'session.exit', 'viewer.attach', 'viewer.detach',
                      'command.start', 'command.end', 'session.resize']) ev.on(name, refresh);
  ev.onstate = (t) => { conn.textContent = t; };
  ev.onrefused = () => TD.askToken(TD.tokenMessage());
  ev.connect();
  loadRecordings();
})();
