// share/web/term.js — one session live at /s/<session>: xterm.js (DOM renderer, screen-reader mode,
// so the text is in the DOM) fed by /tty/<session> frames (PROTOCOL §6). Read-only by default: the
// terminal takes the session's size and never resizes it. "Take keyboard" reconnects with mode=rw
// (full token only): keys go out as 'I', and the window's fitted size as 'R'. A dropped connection
// comes back with backoff and a fresh snapshot. The status line comes from /events.
'use strict';

(async () => {
  const name = decodeURIComponent(location.pathname.slice(3));
  document.getElementById('name').textContent = name;
  document.title = name + ' — termd';

  const term = new Terminal({
    disableStdin: true, screenReaderMode: true, scrollback: 5000, cursorBlink: false,
    fontSize: 14, fontFamily: '"DejaVu Sans Mono", "Liberation Mono", monospace',
    // a cell a little taller than the font: at line height 1 the DOM renderer clips the
    // underline row of '_' at 14 px DejaVu Sans Mono (xterm.js #1138; test_web_glyphs.py)
    lineHeight: 1.15,
  });
  const fit = new FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open(document.getElementById('term'));
  window.term = term;   // for tests and the curious

  const page = window.tdPage = { mode: 'ro', connected: false, snapshots: 0, exited: null, error: '' };
  const enc = new TextEncoder(), dec = new TextDecoder();
  const $ = (id) => document.getElementById(id);
  const kbd = $('kbd'), why = $('kbd-why'), conn = $('conn');

  let ws = null, backoff = 500, retry = null, sessionKnown = null, viewers = 0;
  const exits = [];

  let authState = null;
  const setAuth = (auth) => {
    authState = auth;
    kbd.disabled = auth !== 'full';
    why.textContent = auth === 'full' ? '' : auth === 'view'
      ? 'the view token can watch, never type' : 'termd does not answer';
    kbd.title = why.textContent;
  };
  const auth = await TD.auth();
  if (auth === 'none') { TD.askToken(TD.tokenMessage()); return; }
  setAuth(auth);

  const send = (type, payload) => {
    if (!ws || ws.readyState !== WebSocket.OPEN) return;
    const b = new Uint8Array(payload.length + 1);
    b[0] = type.charCodeAt(0);
    b.set(payload, 1);
    ws.send(b);
  };

  // rw only: ask termd for the size that fits the window
  const fitToWindow = () => {
    if (page.mode !== 'rw') return;
    const d = fit.proposeDimensions();
    if (!d || !d.cols || !d.rows) return;
    if (d.cols !== term.cols || d.rows !== term.rows)
      send('R', enc.encode(JSON.stringify({ cols: d.cols, rows: d.rows })));
  };
  // ro only: the session's size stays; the font shrinks (14 px down to 9) until its width fits
  const fitFont = () => {
    if (page.mode !== 'ro') { if (term.options.fontSize !== 14) term.options.fontSize = 14; return; }
    const box = $('term'), screen = term.element && term.element.querySelector('.xterm-screen');
    if (!screen) return;
    const avail = box.clientWidth - 24, now = screen.getBoundingClientRect().width;
    if (!now || avail <= 0) return;
    const size = Math.max(9, Math.min(14, Math.floor(term.options.fontSize * avail / now)));
    if (size !== term.options.fontSize) term.options.fontSize = size;
  };
  let rt = null;
  window.addEventListener('resize', () => {
    clearTimeout(rt);
    rt = setTimeout(() => { fitFont(); fitToWindow(); }, 100);
  });

  term.onData((d) => { if (page.mode === 'rw') send('I', enc.encode(d)); });
  term.onBinary((d) => {
    if (page.mode !== 'rw') return;
    send('I', Uint8Array.from(d, (c) => c.charCodeAt(0) & 255));
  });

  const showMode = () => {
    const rw = page.mode === 'rw';
    $('mode').textContent = rw ? 'keyboard: yours' : 'read-only';
    $('mode').className = 'badge ' + (rw ? 'live' : 'ro');
    kbd.textContent = rw ? 'Release keyboard' : 'Take keyboard';
    document.body.classList.toggle('rw', rw);
    term.options.disableStdin = !rw;
    fitFont();
  };

  const frame = (b) => {
    const type = String.fromCharCode(b[0]), p = b.subarray(1);
    switch (type) {
      case 'Z': {
        const z = JSON.parse(dec.decode(p));
        term.resize(z.cols, z.rows);
        fitFont();
        if (!page.connected) {
          page.connected = true;
          backoff = 500;
          conn.textContent = '';
          TD.notice(null);
          if (page.mode === 'rw') { fitToWindow(); term.focus(); }
          if (authState === 'unreachable') TD.auth().then(setAuth);
        }
        break;
      }
      case 'S':
        term.reset();
        term.write(p, () => { page.snapshots++; });
        break;
      case 'O': term.write(p); break;
      case 'T': document.title = dec.decode(p) + ' — ' + name + ' — termd'; break;
      case 'X': {
        const x = JSON.parse(dec.decode(p));
        page.exited = x.exit_code;
        TD.notice('The session ended (exit code ' + x.exit_code + ').', 'info');
        $('st-session').textContent = 'session exited: ' + x.exit_code;
        break;
      }
      case 'E':
        page.error = dec.decode(p);
        TD.notice('termd: ' + page.error, 'error');
        break;
    }
  };

  const later = (text) => {
    conn.textContent = text + ', trying again in ' + (backoff / 1000).toFixed(1) + ' s';
    clearTimeout(retry);
    retry = setTimeout(connect, backoff);
    backoff = Math.min(backoff * 2, 10000);
  };

  function connect() {
    clearTimeout(retry);
    if (ws) { const old = ws; ws = null; old.close(); }
    page.connected = false;
    page.exited = null;
    let opened = false;
    const w = new WebSocket(TD.wsURL('/tty/' + encodeURIComponent(name), { mode: page.mode }),
                            ['termd.tty.v1']);
    w.binaryType = 'arraybuffer';
    ws = w;
    w.onopen = () => { opened = true; };
    w.onmessage = (e) => { if (ws === w) frame(new Uint8Array(e.data)); };
    w.onclose = async () => {
      if (ws !== w) return;   // replaced on purpose
      page.connected = false;
      if (page.exited !== null) return;   // comes back on session.open
      if (opened) { later('disconnected'); return; }
      const a = await TD.auth();
      if (a === 'none') { TD.askToken(TD.tokenMessage()); return; }
      if (page.mode === 'rw' && a !== 'full') {
        page.mode = 'ro';
        showMode();
        TD.notice('termd refused the keyboard: it needs the full token.', 'error');
        connect();
        return;
      }
      if (sessionKnown === false) {
        TD.notice('There is no session named ' + name + ' (yet): waiting for it.', 'info');
        return;
      }
      later('cannot connect');
    };
  }

  kbd.addEventListener('click', () => {
    page.mode = page.mode === 'rw' ? 'ro' : 'rw';
    showMode();
    backoff = 500;
    connect();
  });

  // the status line
  const ev = new TDEvents();
  const mine = (x) => x.session === name;
  const showViewers = () => {
    $('st-viewers').textContent = viewers <= 1 ? 'watching: only you'
      : 'watching: you and ' + (viewers - 1) + ' other' + (viewers > 2 ? 's' : '');
  };
  ev.on('session.list', (o, x) => {
    const s = (x.sessions || []).find((s) => s.name === name);
    const was = sessionKnown;
    sessionKnown = !!s;
    if (!s) return;
    viewers = s.viewers || 0;
    showViewers();
    $('st-cmd').textContent = s.command ? 'running: ' + s.command : (s.alive ? 'idle' : '');
    if (!s.alive) $('st-session').textContent = 'session exited: ' + s.exit_code;
    if (s.alive && !page.connected && (was === false || page.exited !== null)) connect();
  });
  ev.on('command.start', (o, x) => {
    if (!mine(x)) return;
    $('st-cmd').textContent = 'running: ' + x.command + (x.by === 'viewer' ? ' (typed by a viewer)' : '');
    // a shell that ended is started again by the next action on it
    if (page.exited !== null && !page.connected) { $('st-session').textContent = ''; backoff = 500; connect(); }
  });
  ev.on('command.end', (o, x) => {
    if (!mine(x)) return;
    exits.unshift(x.exit_code);
    exits.length = Math.min(exits.length, 5);
    $('st-cmd').textContent = 'idle';
    $('st-exits').textContent = 'last exit codes: ' + exits.join(', ');
  });
  for (const n of ['viewer.attach', 'viewer.detach']) ev.on(n, (o, x) => { if (mine(x)) ev.listSessions(); });
  ev.on('session.exit', (o, x) => {
    if (x.name === name) $('st-session').textContent = 'session exited: ' + x.exit_code;
  });
  ev.on('session.open', (o, x) => {
    if (x.name !== name) return;
    $('st-session').textContent = '';
    sessionKnown = true;
    if (!page.connected) { backoff = 500; connect(); }
  });
  ev.onrefused = () => {};

  showMode();
  connect();
  ev.connect();
})();
