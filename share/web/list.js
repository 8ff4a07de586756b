// share/web/list.js — the session list at /: session.list over /events, asked again whenever a
// session opens or exits, a viewer comes or goes, a command starts or ends, or a session is
// resized; and the recordings (GET /record/) when termd keeps them.
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
  const refresh = () => {
    if (timer) return;
    timer = setTimeout(() => { timer = null; ev.listSessions(); loadRecordings(); }, 150);
  };

  const render = (sessions) => {
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
        TD.el('td', { class: 'muted', text: s.cwd || '' }));
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
  for (const name of ['session.open', 'session.exit', 'viewer.attach', 'viewer.detach',
                      'command.start', 'command.end', 'session.resize']) ev.on(name, refresh);
  ev.onstate = (t) => { conn.textContent = t; };
  ev.onrefused = () => TD.askToken(TD.tokenMessage());
  ev.connect();
  loadRecordings();
})();
