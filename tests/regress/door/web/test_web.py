"""The web page (PROTOCOL §9) in headless Chromium over the DevTools pipe
(cdp.py): the embedded files as HTTP answers, a session's text in the page,
live output, read-only pages that type nothing, the token rules, taking the
keyboard, resizing, reconnecting after termd went away, the session list, a
screenshot, and the recording player. termd listens on loopback TCP (a
browser cannot use a unix socket). Waits poll with deadlines."""

import gzip
import http.client
import json
import struct
import zlib

import pytest

import cdp
import wsclient
import wsserver
from tdtest import free_port, run_done, wait_until

# the page's Content-Security-Policy (web.c), every directive
CSP = {"default-src 'none'", "script-src 'self'", "style-src 'self' 'unsafe-inline'", "connect-src 'self'",
       "img-src 'self' data:", "font-src 'self'", "base-uri 'none'", "form-action 'self'",
       "frame-ancestors 'none'"}

TOKEN = "web-full-token-0123456789"
VIEW = "web-view-token-9876543210"
WAIT = 30.0

BUFFER_JS = """(() => { const b = term.buffer.active, out = [];
  for (let i = 0; i < b.length; i++) out.push(b.getLine(i).translateToString(true));
  while (out.length && out[out.length - 1] === '') out.pop();
  return out.join('\\n'); })()"""


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    b = cdp.Browser(str(tmp_path_factory.mktemp("chromium") / "chromium.log"))
    yield b
    b.close()


@pytest.fixture
def pages(browser):
    """new(url, width, height) -> a Page; every page is checked for script
    exceptions and CSP refusals, and closed, when the test ends."""
    made = []

    def new(url=None, width=1000, height=600):
        p = browser.new_page(url, width, height)
        made.append(p)
        return p

    yield new
    bad = []
    for p in made:
        bad += [x for x in p.problems() if x.startswith("exception") or "Content Security Policy" in x]
        p.close()
    assert not bad, "problems on the page: %r" % bad


def http_get(t, path, headers=None):
    host, port = t.url.split("//")[1].split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=10)
    c.request("GET", path, headers=headers or {})
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, body


def base(t):
    return t.url.replace("ws://", "http://")


def start(termd_factory, tmp_path, token=True, view=False, listen=None):
    args = []
    if view:
        vf = tmp_path / "view-token"
        vf.write_text(VIEW + "\n")
        args += ["--view-token-file", str(vf)]
    if listen:
        return termd_factory(args=args, token=TOKEN if token else None, listen=listen)
    return termd_factory(args=args, token=TOKEN if token else None, tcp=True)


def screen_text(page):
    return page.eval(BUFFER_JS)


def wait_text(page, text, timeout=WAIT):
    return page.wait(lambda: text in (screen_text(page) or ""), timeout, "%r in the page's terminal" % text)


def open_session_page(pages, t, session="main", token=TOKEN, width=1000, height=600):
    q = "?token=" + token if token else ""
    p = pages(base(t) + "/s/" + session + q, width, height)
    p.wait_js("window.tdPage && tdPage.connected && tdPage.snapshots > 0", WAIT, "the page's first snapshot")
    return p


def session_info(ev, name="main"):
    obs = ev.call("session.list")
    return next(s for s in obs["extras"]["sessions"] if s["name"] == name)


# ---------------------------------------------------------------- HTTP only

def test_files_gzipped_or_plain_with_headers(termd_factory, tmp_path):
    t = start(termd_factory, tmp_path)
    st, h, gz = http_get(t, "/assets/xterm.js", {"Accept-Encoding": "gzip, deflate"})
    assert st == 200 and h.get("content-encoding") == "gzip", (st, h)
    assert h["content-type"].startswith("text/javascript")
    st2, h2, plain = http_get(t, "/assets/xterm.js")
    assert st2 == 200 and "content-encoding" not in h2, (st2, h2)
    assert gzip.decompress(gz) == plain and b"Terminal" in plain
    # gzip;q=0 is a refusal
    st3, h3, plain3 = http_get(t, "/assets/xterm.js", {"Accept-Encoding": "gzip;q=0, identity"})
    assert st3 == 200 and "content-encoding" not in h3 and plain3 == plain
    # the ETag revalidates; the kept-alive connection serves the next request after a 304
    host, port = t.url.split("//")[1].split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=10)
    c.request("GET", "/assets/xterm.js", headers={"If-None-Match": h2["etag"]})
    r = c.getresponse()
    assert r.status == 304 and r.read() == b""
    c.request("GET", "/assets/list.js")
    r = c.getresponse()
    assert r.status == 200 and b"session.list" in r.read()
    c.close()
    for path, ctype in (("/", "text/html"), ("/s/main", "text/html"), ("/r/main-1.cast", "text/html"),
                        ("/assets/xterm.css", "text/css"), ("/assets/term.js", "text/javascript"),
                        ("/assets/LICENSES.txt", "text/plain")):
        st, h, body = http_get(t, path)
        assert st == 200 and h["content-type"].startswith(ctype), (path, st, h)
        csp = h.get("content-security-policy", "")
        # the whole policy, directive by directive: none missing, none added
        got = {d.strip() for d in csp.split(";") if d.strip()}
        assert got == CSP, (path, sorted(got ^ CSP))
        assert h.get("x-content-type-options") == "nosniff" and h.get("referrer-policy") == "no-referrer"
        assert h.get("cache-control") and h.get("etag"), h
    for path in ("/assets/nope.js", "/assets/../list.html", "/s/bad name", "/s/", "/r/.hidden", "/sx"):
        st, _, _ = http_get(t, path.replace(" ", "%20"))
        assert st in (401, 404), (path, st)
    # /auth says what the token admits; every data path still wants it
    assert http_get(t, "/auth")[0] == 401
    st, _, body = http_get(t, "/auth", {"Authorization": "Bearer " + TOKEN})
    assert st == 200 and json.loads(body) == {"auth": "full"}
    with pytest.raises(wsclient.HandshakeError) as e:
        wsclient.connect(t.url, "/tty/main", wsclient.TTY_SUBPROTOCOL)
    assert e.value.status == 401


# ---------------------------------------------------------------- the page

def test_session_text_then_live_output(termd_factory, tmp_path, pages):
    t = start(termd_factory, tmp_path)
    ev = t.events()
    run_done(ev, "echo BEFORE-$((6*7))")
    p = open_session_page(pages, t)
    wait_text(p, "BEFORE-42")
    # the session's size, not the window's: read-only pages never resize
    assert p.eval("[term.cols, term.rows]") == [160, 48]
    # the text is in the DOM (the DOM renderer's rows), not only in a canvas
    p.wait(lambda: "BEFORE-42" in p.eval("document.querySelector('.xterm-rows').innerText"), WAIT,
           "the text in .xterm-rows")
    assert p.eval("term.options.screenReaderMode") is True
    run_done(ev, "echo LIVE-$((7*8)); printf '\\033]0;web-title\\007'")
    wait_text(p, "LIVE-56")
    p.wait_js("document.title.startsWith('web-title')", WAIT, "the title from a 'T' frame")
    # the status line from /events
    p.wait(lambda: "last exit codes: 0" in p.eval("document.getElementById('status').innerText"), WAIT,
           "the exit code in the status line")
    assert session_info(ev)["cols"] == 160


def test_read_only_page_types_nothing(termd_factory, tmp_path, pages):
    t = start(termd_factory, tmp_path)
    ev = t.events()
    sub = t.events()
    sub.call("subscribe")
    p = open_session_page(pages, t)
    assert p.eval("document.getElementById('mode').textContent") == "read-only"
    assert p.eval("term.options.disableStdin") is True
    p.eval("term.focus()")
    p.type("echo TYPED-IN-RO\n")
    # something the page does see, after the keys: then nothing typed may have reached the session
    run_done(ev, "echo AFTER-KEYS")
    wait_text(p, "AFTER-KEYS")
    assert "TYPED-IN-RO" not in screen_text(p)
    scr = ev.call("screen")
    assert "TYPED-IN-RO" not in scr["content"]
    typed = [o for o in sub.others if o.get("observation") == "user.input"]
    sub.ping()
    typed += [o for o in sub.others if o.get("observation") == "user.input"]
    assert typed == [], typed


def test_no_token_says_so_and_shows_nothing(termd_factory, tmp_path, pages):
    t = start(termd_factory, tmp_path)
    ev = t.events()
    run_done(ev, "echo SECRET-OUTPUT")
    p = pages(base(t) + "/s/main")
    p.wait_js("!document.getElementById('notice').hidden", WAIT, "the notice")
    assert "needs a token" in p.eval("document.getElementById('notice').innerText")
    assert p.eval("!!document.getElementById('token-input')")
    assert "SECRET-OUTPUT" not in (screen_text(p) or "")
    assert p.eval("tdPage.connected") is False
    # a wrong token: refused the same way
    p2 = pages(base(t) + "/?token=wrong")
    p2.wait_js("!document.getElementById('notice').hidden", WAIT, "the notice")
    assert "refused this token" in p2.eval("document.getElementById('notice').innerText")
    assert p2.eval("document.querySelectorAll('#sessions tbody tr').length") == 0
    # giving it in the box works, and it is not put in the address bar
    p.eval("document.getElementById('token-input').value = %s; "
           "document.getElementById('token-form').requestSubmit(); true" % json.dumps(TOKEN))
    p.wait_js("window.tdPage && tdPage.connected && tdPage.snapshots > 0", WAIT, "the page after the token box")
    wait_text(p, "SECRET-OUTPUT")
    assert "token" not in p.eval("location.href")


def test_token_leaves_the_address_bar_and_stays_for_the_tab(termd_factory, tmp_path, pages):
    t = start(termd_factory, tmp_path)
    p = open_session_page(pages, t)
    assert p.eval("location.href") == base(t) + "/s/main"
    assert p.eval("sessionStorage.getItem('termd.token')") == TOKEN
    p.reload()
    p.wait_js("window.tdPage && tdPage.connected && tdPage.snapshots > 0", WAIT, "the page after a reload")
    # the list page in the same tab needs no ?token= either
    p.goto(base(t) + "/")
    p.wait_js("document.querySelectorAll('#sessions tbody tr[data-session=main]').length === 1", WAIT,
              "main in the list")


def test_view_token_watches_and_cannot_type(termd_factory, tmp_path, pages):
    t = start(termd_factory, tmp_path, view=True)
    ev = t.events()
    run_done(ev, "echo VIEW-SEES-THIS")
    p = open_session_page(pages, t, token=VIEW)
    wait_text(p, "VIEW-SEES-THIS")
    assert p.eval("document.getElementById('kbd').disabled") is True
    assert "view token" in p.eval("document.getElementById('kbd-why').textContent")
    # a rw connection with the view token is refused before it opens
    got = p.eval("""new Promise(r => { const w = new WebSocket(TD.wsURL('/tty/main', {mode: 'rw'}), ['termd.tty.v1']);
        w.onopen = () => r('open'); w.onclose = () => r('closed'); })""")
    assert got == "closed"
    p.eval("term.focus()")
    p.type("echo VIEWER-TYPED\n")
    run_done(ev, "echo AFTER-VIEW-KEYS")
    wait_text(p, "AFTER-VIEW-KEYS")
    assert "VIEWER-TYPED" not in ev.call("screen")["content"]
    p2 = pages(base(t) + "/?token=" + VIEW)
    p2.wait_js("document.querySelectorAll('#sessions tbody tr').length >= 1", WAIT, "the list")
    assert p2.eval("document.getElementById('access').textContent") == "view token: read-only"


def take_keyboard(p):
    assert p.eval("document.getElementById('kbd').disabled") is False
    p.eval("document.getElementById('kbd').click(); true")
    p.wait_js("tdPage.mode === 'rw' && tdPage.connected", WAIT, "the rw connection")
    assert p.eval("term.options.disableStdin") is False


def test_take_keyboard_type_and_release(termd_factory, tmp_path, pages):
    t = start(termd_factory, tmp_path)
    sub = t.events()
    sub.call("subscribe")
    p = open_session_page(pages, t)
    take_keyboard(p)
    assert p.eval("document.getElementById('kbd').textContent") == "Release keyboard"
    p.eval("term.focus()")
    p.type("echo RW-$((6*7))\n")
    wait_text(p, "RW-42")
    start_ev = sub.wait_for(lambda o: o.get("observation") == "command.start", WAIT)
    assert start_ev["extras"]["by"] == "viewer" and "RW-" in start_ev["extras"]["command"]
    end_ev = sub.wait_for(lambda o: o.get("observation") == "command.end", WAIT)
    assert end_ev["extras"]["exit_code"] == 0
    p.eval("document.getElementById('kbd').click(); true")
    p.wait_js("tdPage.mode === 'ro' && tdPage.connected", WAIT, "read-only again")
    p.eval("term.focus()")
    p.type("echo RELEASED\n")
    ev = t.events()
    run_done(ev, "echo AFTER-RELEASE")
    wait_text(p, "AFTER-RELEASE")
    assert "RELEASED" not in ev.call("screen")["content"].replace("AFTER-RELEASE", "")


def test_resize_follows_the_window_only_with_the_keyboard(termd_factory, tmp_path, pages):
    t = start(termd_factory, tmp_path)
    ev = t.events()
    p = open_session_page(pages, t, width=1000, height=600)
    p.viewport(700, 400)
    run_done(ev, "true")   # the page has had time to act on the resize event, had it wanted to
    p.wait_js("document.documentElement.clientWidth === 700", WAIT, "the new viewport")
    assert [session_info(ev)["cols"], session_info(ev)["rows"]] == [160, 48]
    take_keyboard(p)
    # the session takes the window's fitted size, and the page follows the session's 'Z'
    size = p.wait_js("(() => { const d = new FitAddon.FitAddon(); term.loadAddon(d); const x = d.proposeDimensions();"
                     " d.dispose(); return x.cols === term.cols && x.rows === term.rows && [term.cols, term.rows]; })()",
                     WAIT, "the page's terminal fitted to 700x400")
    assert size[0] < 160 and size[1] < 48
    wait_until(lambda: [session_info(ev)["cols"], session_info(ev)["rows"]] == size, WAIT,
               what="the session at the page's size %r" % (size,))
    p.viewport(1200, 700)
    size2 = p.wait_js("(() => { const d = new FitAddon.FitAddon(); term.loadAddon(d); const x = d.proposeDimensions();"
                      " d.dispose(); return x.cols === term.cols && x.rows === term.rows && [term.cols, term.rows]; })()",
                      WAIT, "the page's terminal fitted to 1200x700")
    assert size2[0] > size[0] and size2[1] > size[1]
    wait_until(lambda: [session_info(ev)["cols"], session_info(ev)["rows"]] == size2, WAIT,
               what="the session at the page's new size %r" % (size2,))
    out = run_done(ev, "stty size")
    assert out["content"].strip() == "%d %d" % (size2[1], size2[0])


def test_reconnect_after_termd_went_away(termd_factory, tmp_path, pages):
    port = free_port()
    t1 = start(termd_factory, tmp_path / "a", listen="127.0.0.1:%d" % port)
    ev = t1.events()
    run_done(ev, "echo FIRST-TERMD")
    p = open_session_page(pages, t1)
    wait_text(p, "FIRST-TERMD")
    problem = t1.stop()
    t1.proc = None   # stopped here, not again at teardown
    assert problem is None, problem
    p.wait_js("!tdPage.connected", WAIT, "the page noticing the drop")
    p.wait(lambda: "trying again" in p.eval("document.getElementById('conn').textContent"), WAIT,
           "the reconnect line")
    t2 = start(termd_factory, tmp_path / "b", listen="127.0.0.1:%d" % port)
    ev2 = t2.events()
    run_done(ev2, "echo SECOND-TERMD")
    wait_text(p, "SECOND-TERMD", timeout=60)
    assert p.eval("tdPage.connected") is True
    # a fresh snapshot: the first termd's screen is gone
    assert "FIRST-TERMD" not in screen_text(p)
    # and its status line found the new /events too
    run_done(ev2, "false", exit_code=1)
    p.wait(lambda: "last exit codes: 1" in p.eval("document.getElementById('status').innerText"), 60,
           "the status line after the reconnect")


def test_list_page(termd_factory, tmp_path, pages):
    t = start(termd_factory, tmp_path)
    ev = t.events()
    ev.call("session.open", {"name": "build", "command": "sleep 300", "cols": 100, "rows": 30})
    p = pages(base(t) + "/?token=" + TOKEN)
    rows_js = """[...document.querySelectorAll('#sessions tbody tr')].map(tr =>
        [...tr.querySelectorAll('td')].map(td => td.textContent))"""
    rows = p.wait_js("(() => { const r = %s; return r.length === 2 && r; })()" % rows_js, WAIT, "two rows")
    assert [r[0] for r in rows] == ["main", "build"]
    assert rows[1][3] == "100×30" and rows[0][3] == "160×48"
    assert rows[0][1] == "live" and rows[0][4] == "0"
    assert p.eval("document.querySelector('#sessions a').getAttribute('href')") == "/s/main"
    assert "token" not in p.eval("location.href")
    # a new session, a viewer, a running command: the list follows without a reload
    ev.call("session.open", {"name": "extra"})
    p.wait_js("document.querySelectorAll('#sessions tbody tr[data-session=extra]').length === 1", WAIT,
              "the new session in the list")
    viewer = wsclient.connect(t.url, "/tty/build", wsclient.TTY_SUBPROTOCOL, token=TOKEN)
    p.wait_js("document.querySelector('tr[data-session=build] .viewers').textContent === '1'", WAIT,
              "one viewer on build")
    viewer.close()
    p.wait_js("document.querySelector('tr[data-session=build] .viewers').textContent === '0'", WAIT,
              "no viewer on build")
    ev.send_action("run", {"command": "sleep 30", "timeout": 1})
    p.wait_js("document.querySelector('tr[data-session=main] .cmd').textContent === 'sleep 30'", WAIT,
              "the running command")
    ev.call("session.signal", {"session": "main", "signal": "INT"})


def png_size_and_rows(data):
    """(width, height, number of distinct pixel rows) of an 8-bit PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, w, h, bpp = 8, b"", 0, 0, 3
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", chunk[:10])
            assert depth == 8 and ctype in (2, 6), (depth, ctype)
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp + 1
    # unfilter only as far as needed to tell rows apart: compare the filtered bytes
    rows = {raw[i * stride + 1:(i + 1) * stride] for i in range(h)}
    distinct_colours = len(set(raw[1:stride]))
    return w, h, len(rows), distinct_colours


def test_screenshot(termd_factory, tmp_path, pages):
    t = start(termd_factory, tmp_path)
    ev = t.events()
    run_done(ev, "printf 'plain \\033[1;31mbold red\\033[0m \\033[42mgreen bg\\033[0m\\n'; ls -la /")
    p = open_session_page(pages, t, width=1000, height=600)
    wait_text(p, "green bg")
    png = p.screenshot()
    (tmp_path / "web-session.png").write_bytes(png)
    w, h, rows, _ = png_size_and_rows(png)
    assert (w, h) == (1000, 600)
    assert rows > 20, "the screenshot looks blank (%d distinct rows)" % rows


# ---------------------------------------------------------------- recordings

def test_player_plays_a_recording(termd_factory, tmp_path, pages):
    rec = tmp_path / "rec"
    rec.mkdir()
    t = termd_factory(args=["--record", str(rec)], token=TOKEN, tcp=True)
    ev = t.events()
    run_done(ev, "echo PLAYED-$((5*5))")
    run_done(ev, "false", exit_code=1)
    st, _, body = http_get(t, "/record/", {"Authorization": "Bearer " + TOKEN})
    assert st == 200, (st, body)
    files = json.loads(body)
    main = next(f for f in files if f["session"] == "main")
    name = main["file"][:-5] if main["file"].endswith(".cast") else main["file"]
    p = pages(base(t) + "/r/" + name + "?token=" + TOKEN)
    p.wait_js("window.player && player.ended", 60, "the player at the end")
    # ended is set as the last output is handed to xterm.js, which writes
    # it into its buffer later (asynchronously): the text is awaited
    wait_text(p, "PLAYED-25", 60)
    markers = p.eval("player.markers")
    assert any("PLAYED" in (m["label"] or "") for m in markers), markers
    assert p.eval("document.querySelectorAll('#markers li').length") == len(markers)
    # back to the start, at another speed: the screen is rebuilt to that point
    p.eval("player.pause(); player.setSpeed(4); player.seek(0); true")
    p.wait(lambda: "PLAYED-25" not in (screen_text(p) or ""), 60, "the screen rebuilt to the start")
    assert p.eval("player.speed") == 4
    p.eval("player.play(); true")
    p.wait_js("player.ended", 60, "the second play to the end")
    wait_text(p, "PLAYED-25", 60)
    # /r/<session>: the session's current recording
    p.goto(base(t) + "/r/main")
    p.wait_js("window.player && player.ended", 60, "the session's recording played")
    wait_text(p, "PLAYED-25", 60)
    # the list page links the recording
    p.goto(base(t) + "/")
    p.wait_js("document.querySelector('#recordings a[href=\"/r/%s\"]') !== null" % name, WAIT,
              "the recording in the list page")


# ---------------------------------------------------------------- cross-site requests

def test_no_token_termd_refuses_other_sites(termd_factory, tmp_path, pages):
    """With no token, a page on another site must not get a shell through the
    person's browser (cross-site WebSocket hijacking), nor through a DNS name
    rebound to 127.0.0.1; programs (no Origin) and termd's own page may."""
    import http.server
    import threading
    t = start(termd_factory, tmp_path, token=False)
    host, port = t.url.split("//")[1].split(":")
    own = "http://%s:%s" % (host, port)
    # termd's own page works without a token
    p = open_session_page(pages, t, token=None)
    assert p.eval("document.getElementById('kbd').disabled") is False
    # a program: no Origin
    wsclient.connect(t.url, "/events").close()
    # the same origin, as the page sends it
    wsclient.connect(t.url, "/events", headers={"Origin": own}).close()
    # (a rebound DNS name may be 253 bytes long: with its port, more than
    # termd copies of a Host, which must not make it look absent)
    long_name = ".".join(["a" * 62] * 4) + ".example"
    foreign = ({"Origin": "http://evil.example"}, {"Origin": "null"},
               {"Origin": "http://127.0.0.1:1"}, {"Host": "evil.example:%s" % port},
               {"Host": "evil.example:%s" % port, "Origin": "http://evil.example:%s" % port},
               {"Host": "%s:%s" % (long_name, port)},
               {"Origin": "http://%s:%s/%s" % (long_name, port, "x" * 300)})
    for headers in foreign:
        with pytest.raises(wsclient.HandshakeError) as e:
            wsclient.connect(t.url, "/tty/main", wsclient.TTY_SUBPROTOCOL, headers=headers)
        assert e.value.status == 403, headers
        for path in ("/record/", "/", "/auth"):
            st, _, _ = http_get(t, path, headers)
            assert st == 403, (path, headers, st)
    # a real page on another origin (another port) cannot open termd's channels
    www = tmp_path / "www"
    www.mkdir()
    (www / "index.html").write_text("<!doctype html><title>elsewhere</title>")
    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(*a, directory=str(www), **k)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        other = pages("http://127.0.0.1:%d/index.html" % srv.server_address[1])
        got = other.eval("""new Promise(r => { const w = new WebSocket(%s, ['termd.events.v1']);
            w.onopen = () => r('open'); w.onclose = () => r('closed'); })""" % json.dumps(
            "ws://%s:%s/events" % (host, port)))
        assert got == "closed"
    finally:
        srv.shutdown()
        srv.server_close()


def test_session_end_then_shell_started_again(termd_factory, tmp_path, pages):
    t = start(termd_factory, tmp_path)
    ev = t.events()
    p = open_session_page(pages, t)
    ev.send_action("run", {"command": "exit 3"})
    p.wait_js("tdPage.exited === 3", WAIT, "the 'X' frame")
    assert "exit code 3" in p.eval("document.getElementById('notice').innerText")
    # the next action on main starts a new shell; the page attaches to it
    obs = run_done(ev, "echo BACK-AGAIN")
    assert obs["extras"].get("restarted") is True
    wait_text(p, "BACK-AGAIN")
    assert p.eval("tdPage.connected") is True


def test_list_page_shows_ports_as_links(termd_factory, tmp_path, pages):
    t = start(termd_factory, tmp_path)
    ev = t.events()
    (t.home / "index.html").write_text("<h1>PREVIEW-PAGE</h1>")
    port = free_port()
    out = run_done(ev, "python3 -m http.server %d --bind 127.0.0.1 >/dev/null 2>&1 & echo PID=$!" % port)
    pid = int([ln for ln in out["content"].splitlines() if ln.startswith("PID=")][0][4:])
    try:
        p = pages(base(t) + "/?token=" + TOKEN)
        sel = "tr[data-session=main] .ports a[href='/proxy/%d/']" % port
        p.wait_js("!!document.querySelector(\"%s\")" % sel, WAIT, "the port's link in main's row")
        # what a click does before it opens the tab: the cookie, then the preview loads with it
        html = p.eval("""(async () => {
            await fetch('/proxy/%d/?token=' + encodeURIComponent(TD.token), {redirect: 'manual'});
            const r = await fetch('/proxy/%d/', {credentials: 'same-origin'});
            return r.status + ' ' + await r.text(); })()""" % (port, port))
        assert html.startswith("200 ") and "PREVIEW-PAGE" in html, html
        import os
        import signal
        os.kill(pid, signal.SIGKILL)
        p.wait_js("!document.querySelector(\"%s\")" % sel, WAIT, "the link gone with the server")
    finally:
        try:
            import os
            import signal
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# a dev server in miniature: files from its folder, and a WebSocket echo on
# any path asked with Upgrade (plain Python, no package)
DEVSERVER = wsserver.script(r'''
import os, socket, sys, threading
def serve(c):
    r = read_head(c)
    if r is None:
        c.close()
        return
    line, h, rest = r
    path = line.split()[1].split("?")[0]
    if "upgrade" not in h:
        name = path.strip("/") or "index.html"
        try:
            body = open(name, "rb").read()
            st = "200 OK"
        except OSError:
            body, st = b"nope", "404 Not Found"
        ct = {"html": "text/html", "js": "text/javascript", "css": "text/css"}.get(name.rsplit(".", 1)[-1], "text/plain")
        c.sendall(("HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                   % (st, ct, len(body))).encode() + body)
        c.close()
        return
    c.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Accept: %s\r\n\r\n" % accept_key(h["sec-websocket-key"])).encode())
    rd = Reader(c, rest)
    try:
        while True:
            b0, op, p = rd.frame()
            if op == 8:
                return
            c.sendall(frame(1, b"echo:" + p))
    except EOFError:
        pass
    finally:
        c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(16)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
''')

DEV_INDEX = """<!doctype html><html><head><link rel="stylesheet" href="style.css">
<script src="app.js"></script></head><body><h1 id="h">DEV-PAGE</h1></body></html>"""
DEV_JS = """window.devState = 'js loaded';
const ws = new WebSocket(location.href.replace(/^http/, 'ws').replace(/index\\.html$/, '') + 'hmr');
ws.onopen = () => ws.send('ping');
ws.onmessage = (e) => { window.devState = 'ws ' + e.data; };
ws.onerror = () => { window.devState = 'ws error'; };"""


def test_preview_page_with_subresources_and_websocket(termd_factory, tmp_path, pages):
    import os
    import signal
    t = start(termd_factory, tmp_path)
    ev = t.events()
    (t.home / "dev.py").write_text(DEVSERVER)
    (t.home / "index.html").write_text(DEV_INDEX)
    (t.home / "app.js").write_text(DEV_JS)
    (t.home / "style.css").write_text("h1 { color: rgb(1, 2, 3); }")
    port = free_port()
    out = run_done(ev, "python3 dev.py %d >/dev/null 2>&1 & echo PID=$!" % port)
    pid = int([ln for ln in out["content"].splitlines() if ln.startswith("PID=")][0][4:])
    try:
        p = pages(base(t) + "/?token=" + TOKEN)
        sel = "tr[data-session=main] .ports a[href='/proxy/%d/']" % port
        p.wait_js("!!document.querySelector(\"%s\")" % sel, WAIT, "the port's link")
        p.eval("fetch('/proxy/%d/?token=' + encodeURIComponent(TD.token), {redirect: 'manual'}).then(() => 1)"
               % port)
        p.goto(base(t) + "/proxy/%d/index.html" % port)
        p.wait_js("window.devState === 'ws echo:ping'", WAIT, "the page's WebSocket echo through the proxy")
        assert p.eval("document.getElementById('h').textContent") == "DEV-PAGE"
        assert p.eval("getComputedStyle(document.getElementById('h')).color") == "rgb(1, 2, 3)"
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
