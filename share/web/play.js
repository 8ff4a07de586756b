// share/web/play.js — the recording player at /r/<file>: GET /record/<file>.cast, else
// /record/<file> as a session's current recording (asciicast v2; the token in the Authorization
// header), played into xterm.js by its timestamps: "o" output, "r" resize, "m" markers (a list to
// jump to). Idle gaps longer than the header's idle_time_limit (default 2 s) are shortened to it.
// Play/pause, speed, a seek bar; window.player for tests.
'use strict';

(async () => {
  const $ = (id) => document.getElementById(id);
  const file = decodeURIComponent(location.pathname.slice(3)).replace(/\.cast$/, '');
  $('name').textContent = file;
  document.title = file + ' — termd recording';

  const get = (path) => fetch(path, { headers: TD.headers(), cache: 'no-store' }).catch(() => null);
  let r = await get('/record/' + encodeURIComponent(file) + '.cast');
  // /r/<session>: that session's current recording
  if (r && r.status === 404) r = await get('/record/' + encodeURIComponent(file));
  if (!r) { TD.notice('termd does not answer.', 'error'); return; }
  if (r.status === 401) { TD.askToken(TD.tokenMessage()); return; }
  if (!r.ok) { TD.notice('No recording ' + file + '.cast here (' + r.status + ').', 'error'); return; }
  const lines = (await r.text()).split('\n');

  let header;
  try { header = JSON.parse(lines[0]); } catch (e) { header = null; }
  if (!header || header.version !== 2) {
    TD.notice('This is not an asciicast v2 recording.', 'error');
    return;
  }
  // events, with the idle gaps shortened: t is the time on the player's clock
  const limit = header.idle_time_limit > 0 ? header.idle_time_limit : 2;
  const evs = [];
  let last = 0, clock = 0;
  for (const line of lines.slice(1)) {
    if (!line.trim()) continue;
    let e;
    try { e = JSON.parse(line); } catch (err) { continue; }   // a line being written
    if (!Array.isArray(e) || e.length < 3 || typeof e[0] !== 'number') continue;
    clock += Math.min(Math.max(e[0] - last, 0), limit);
    last = Math.max(last, e[0]);
    evs.push({ t: clock, code: e[1], data: String(e[2]) });
  }
  const duration = evs.length ? evs[evs.length - 1].t : 0;

  const term = new Terminal({
    cols: header.width || 80, rows: header.height || 24, disableStdin: true,
    screenReaderMode: true, scrollback: 5000, fontSize: 14,
    fontFamily: '"DejaVu Sans Mono", "Liberation Mono", monospace',
    // a cell a little taller than the font: at line height 1 the DOM renderer clips the
    // underline row of '_' at 14 px DejaVu Sans Mono (xterm.js #1138; test_web_glyphs.py)
    lineHeight: 1.15,
  });
  term.open($('term'));
  window.term = term;

  const fmt = (s) => Math.floor(s / 60) + ':' + String(Math.floor(s % 60)).padStart(2, '0');
  const markers = [];
  evs.forEach((e) => {
    if (e.code !== 'm') return;
    const li = TD.el('li', {}, TD.el('button', { type: 'button', title: e.data, text: fmt(e.t) + '  ' + (e.data || '(marker)') }));
    li.firstChild.addEventListener('click', () => player.seek(e.t));
    markers.push({ t: e.t, label: e.data, li });
    $('markers').append(li);
  });

  const player = window.player = {
    duration, speed: 1, playing: false, ended: false, pos: 0, time: 0,
    markers: markers.map((m) => ({ time: m.t, label: m.label })),
  };
  let base = { wall: 0, t: 0 }, timer = null;

  const resize = (d) => {
    const m = /^(\d+)x(\d+)$/.exec(d);
    if (m) term.resize(+m[1], +m[2]);
  };
  const mark = (t) => {   // the last marker passed is the current one
    let cur = null;
    for (const m of markers) if (m.t <= t) cur = m;
    for (const m of markers) m.li.classList.toggle('current', m === cur);
  };
  // apply the events up to time t, writing runs of output at once
  const advance = (t) => {
    let out = '';
    while (player.pos < evs.length && evs[player.pos].t <= t) {
      const e = evs[player.pos++];
      if (e.code === 'o') out += e.data;
      else if (e.code === 'r') { if (out) term.write(out); out = ''; resize(e.data); }
    }
    if (out) term.write(out);
    player.time = Math.min(t, duration);
    mark(player.time);
    $('time').textContent = fmt(player.time) + ' / ' + fmt(duration);
    $('seek').value = duration ? Math.round(player.time / duration * 1000) : 1000;
  };
  const now = () => base.t + (performance.now() - base.wall) / 1000 * player.speed;
  const tick = () => {
    timer = null;
    if (!player.playing) return;
    advance(now());
    if (player.pos >= evs.length) {
      player.playing = false;
      player.ended = true;
      $('play').textContent = 'Play';
      return;
    }
    const wait = (evs[player.pos].t - now()) / player.speed * 1000;
    timer = setTimeout(tick, Math.max(0, Math.min(wait, 250)));
  };
  player.play = () => {
    if (player.ended) player.seek(0);
    player.playing = true;
    player.ended = false;
    base = { wall: performance.now(), t: player.time };
    $('play').textContent = 'Pause';
    clearTimeout(timer);
    tick();
  };
  player.pause = () => {
    player.playing = false;
    clearTimeout(timer);
    $('play').textContent = 'Play';
  };
  player.seek = (t) => {
    t = Math.max(0, Math.min(t, duration));
    term.reset();
    term.resize(header.width || 80, header.height || 24);
    player.pos = 0;
    player.ended = false;
    advance(t);
    base = { wall: performance.now(), t };
    if (player.playing) { clearTimeout(timer); tick(); }
  };
  player.setSpeed = (s) => {
    base = { wall: performance.now(), t: player.playing ? now() : player.time };
    player.speed = s;
    $('speed').value = String(s);
  };

  $('play').addEventListener('click', () => (player.playing ? player.pause() : player.play()));
  $('speed').addEventListener('change', (e) => player.setSpeed(parseFloat(e.target.value) || 1));
  $('seek').addEventListener('input', (e) => player.seek(e.target.value / 1000 * duration));
  advance(0);
  player.play();
})();
