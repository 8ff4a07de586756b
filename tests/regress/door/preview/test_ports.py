"""PROTOCOL.md §11 Ports (contract 1.3): termd notices the TCP sockets its
sessions' programs listen on (IPv4 and IPv6, any address) and says so on
the stream (`port.open`/`port.close`, naming the session and the pid),
`ports.list` lists them, `port.wait` answers once a port of theirs accepts
connections (1.4: it is in ports.list then) or at its timeout (saying what
listens instead). A socket of a
process that is not termd's is never listed. A view token may list (it sees
the events anyway) but not probe with port.wait."""

import os
import signal
import socket
import struct
import time

import tdtest
import wsserver
from tdtest import assert_error, fmt, subscribed

T = 60.0


def wait_event(sub, pred, timeout, what):
    deadline = time.monotonic() + timeout
    seen = []
    while True:
        left = deadline - time.monotonic()
        assert left > 0, "no %s within %.1f s; saw %r" % (what, timeout, seen)
        try:
            o = sub.recv_obs(left)
        except TimeoutError:
            raise AssertionError("no %s within %.1f s; saw %r" % (what, timeout, seen))
        if o.get("observation") in ("port.open", "port.close"):
            seen.append((o["observation"], o.get("extras")))
            assert o.get("cause") is None, fmt(o)
            if pred(o):
                return o


def serve(ev, port, bind):
    """python3 -m http.server in main's background; its pid."""
    o = tdtest.run_done(ev, "python3 -m http.server %d --bind %s >/dev/null 2>&1 & echo PID=$!"
                        % (port, bind))
    for line in tdtest.content(o).splitlines():
        if line.startswith("PID="):
            return int(line[4:])
    raise AssertionError("no pid: %s" % fmt(o))


def listening(port, timeout=60):
    """The moment the port first accepted a connection of the test's own."""
    def accepts():
        try:
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
            return True
        except OSError:
            return False

    tdtest.wait_until(accepts, timeout, 0.02, what="a listener on %d" % port)
    return time.monotonic()


def kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def is_open(port, pid=None):
    def pred(o):
        x = o["extras"]
        return o["observation"] == "port.open" and x["port"] == port and (
            pid is None or x["pid"] == pid)
    return pred


def test_open_list_wait_close(termd, ev):
    sub = subscribed(termd)
    port = tdtest.free_port()
    # a wait for a port nobody listens on yet: answered when the server is up
    wid = ev.send_action("port.wait", {"port": port, "timeout": 30})
    pid = serve(ev, port, "127.0.0.1")
    try:
        # termd's 2 s start when the server listens: python's own start-up
        # (long on a loaded machine) is not termd's to make up for
        t0 = listening(port)
        o = wait_event(sub, is_open(port), 2.0 - (time.monotonic() - t0), "port.open for %d" % port)
        x = o["extras"]
        assert x["session"] == "main" and x["pid"] == pid, fmt(o)
        assert x["address"] == "127.0.0.1", fmt(o)
        assert "http.server" in x["command"], fmt(o)
        assert time.monotonic() - t0 < 2.0
        w = ev.wait_for(lambda o: o.get("cause") == wid, T)
        assert w["observation"] == "port.wait" and w["extras"]["ready"] is True, fmt(w)
        lst = ev.call("ports.list", {}, timeout=T)
        assert lst["observation"] == "ports.list", fmt(lst)
        ports = [(p["port"], p["session"], p["pid"]) for p in lst["extras"]["ports"]]
        assert (port, "main", pid) in ports, fmt(lst)
        # ready at once now
        w = ev.call("port.wait", {"port": port, "timeout": 5}, timeout=T)
        assert w["extras"]["ready"] is True, fmt(w)
    finally:
        kill(pid)
    o = wait_event(sub, lambda o: o["observation"] == "port.close" and o["extras"]["port"] == port,
                   5.0, "port.close for %d" % port)
    assert o["extras"]["session"] == "main" and o["extras"]["address"] == "127.0.0.1", fmt(o)
    lst = ev.call("ports.list", {}, timeout=T)
    assert port not in [p["port"] for p in lst["extras"]["ports"]], fmt(lst)


def test_ipv6_and_any_address_and_other_session(termd, ev):
    sub = subscribed(termd)
    p6, p4 = tdtest.free_port(), tdtest.free_port()
    pid6 = serve(ev, p6, "::1")
    other = None
    try:
        o = wait_event(sub, is_open(p6, pid6), 5.0, "port.open on ::1")
        assert o["extras"]["address"] == "::1", fmt(o)
        # a server in another session, on every address
        r = ev.call("session.open", {"name": "web"}, timeout=T)
        assert r["observation"] == "session.open", fmt(r)
        o = tdtest.run_done(ev, "python3 -m http.server %d --bind 0.0.0.0 >/dev/null 2>&1 & "
                            "echo PID=$!" % p4, session="web")
        other = int([ln for ln in tdtest.content(o).splitlines() if ln.startswith("PID=")][0][4:])
        o = wait_event(sub, is_open(p4, other), 5.0, "port.open on 0.0.0.0")
        assert o["extras"]["address"] == "0.0.0.0" and o["extras"]["session"] == "web", fmt(o)
        w = ev.call("port.wait", {"port": p6, "timeout": 5}, timeout=T)
        assert w["extras"]["ready"] is True, fmt(w)   # through ::1
    finally:
        kill(pid6)
        if other:
            kill(other)
    wait_event(sub, lambda o: o["observation"] == "port.close" and o["extras"]["port"] == p6,
               5.0, "port.close on ::1")


def test_foreign_listener_not_listed_and_timeout_says_what_listens(termd, ev):
    sub = subscribed(termd)
    # the test's own listening socket: not a process of termd's
    mine = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    mine.bind(("127.0.0.1", 0))
    mine.listen(4)
    foreign = mine.getsockname()[1]
    port = tdtest.free_port()
    pid = serve(ev, port, "127.0.0.1")
    try:
        wait_event(sub, is_open(port, pid), 5.0, "port.open")
        lst = ev.call("ports.list", {}, timeout=T)
        listed = [p["port"] for p in lst["extras"]["ports"]]
        assert port in listed and foreign not in listed, fmt(lst)
        # a listener not a session's answers no wait (1.4: ready means in
        # ports.list, where the proxy admits it)
        w = ev.call("port.wait", {"port": foreign, "timeout": 0.3}, timeout=T)
        assert w["extras"]["ready"] is False, fmt(w)
        assert "not a session's" in w["content"], fmt(w)
        mine.close()
        t0 = time.monotonic()
        w = ev.call("port.wait", {"port": foreign, "timeout": 0.5}, timeout=T)
        assert w["observation"] == "port.wait" and w["extras"]["ready"] is False, fmt(w)
        assert 0.4 < time.monotonic() - t0 < 5
        assert "%d (main, pid %d" % (port, pid) in w["content"], fmt(w)
        assert port in [p["port"] for p in w["extras"]["listening"]], fmt(w)
        assert_error(ev.call("port.wait", {"port": 70000}, timeout=T), "bad_request")
        assert_error(ev.call("port.wait", {}, timeout=T), "bad_request")
    finally:
        mine.close()
        kill(pid)
    # nothing from the foreign socket ever reached the stream
    for o in tdtest.drain(sub, 0.6):
        if o.get("observation") in ("port.open", "port.close"):
            assert o["extras"]["port"] != foreign, fmt(o)


# python3 -m http.server that binds only once its parent (argv[1], the
# subshell that started it) is gone: by then it is termd's child
ORPHAN_SERVER = """import os, runpy, sys, time
parent = int(sys.argv[1])
while os.getppid() == parent:
    time.sleep(0.01)
sys.argv = ["http.server", sys.argv[2], "--bind", "127.0.0.1"]
runpy.run_module("http.server", run_name="__main__", alter_sys=True)
"""


def test_a_listener_left_to_termd_is_still_the_sessions(termd, ev):
    """`(python3 -m http.server P &)` in main: the subshell exits at once and
    the server, orphaned, is re-parented to termd (a subreaper), so no
    session's shell is its ancestor any more: it is matched by its session
    id, and port.open and ports.list name main. (The server listens only
    once it has been re-parented, so it cannot be matched through the
    subshell.)"""
    sub = subscribed(termd)
    script = os.path.join(str(termd.home), "orphan_server.py")
    with open(script, "w") as f:
        f.write(ORPHAN_SERVER)
    port = tdtest.free_port()
    o = tdtest.run_done(ev, "(sub=$BASHPID; %s %s $sub %d >/dev/null 2>&1 & echo PID=$!)"
                        % (tdtest.PY, script, port))
    pids = [int(l[4:]) for l in tdtest.lines(o) if l.startswith("PID=")]
    assert len(pids) == 1, fmt(o)
    pid = pids[0]
    try:
        listening(port)
        with open("/proc/%d/status" % pid) as f:
            ppid = [int(l.split()[1]) for l in f if l.startswith("PPid:")][0]
        assert ppid == termd.proc.pid, "the server's parent is %d, not termd" % ppid
        o = wait_event(sub, is_open(port), 20.0, "port.open for %d" % port)
        x = o["extras"]
        assert x["session"] == "main" and x["pid"] == pid, fmt(o)
        assert "orphan_server.py" in x["command"], fmt(o)
        lst = ev.call("ports.list", {}, timeout=T)
        ports = [(p["port"], p["session"], p["pid"]) for p in lst["extras"]["ports"]]
        assert (port, "main", pid) in ports, fmt(lst)
    finally:
        kill(pid)
    o = wait_event(sub, lambda o: o["observation"] == "port.close" and o["extras"]["port"] == port,
                   20.0, "port.close for %d" % port)
    assert o["extras"]["session"] == "main", fmt(o)


def test_view_token_lists_but_cannot_wait(termd_factory, tmp_path):
    vt = tmp_path / "view"
    vt.write_text("viewsecret\n")
    t = termd_factory(args=("--view-token-file", str(vt)), token="fullsecret")
    ro = t.events(token="viewsecret")
    assert ro.call("ports.list", {}, timeout=T)["observation"] == "ports.list"
    assert_error(ro.call("port.wait", {"port": 1, "timeout": 0}, timeout=T), "forbidden")


# ------------------------------------------------------------- the proxy

ECHO = r'''
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a):
        pass
    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        if self.path.startswith("/big"):
            # MiB k is "%07d\n" % k over and over: bytes out of order show
            size = int(self.path.split("=")[1]) << 20
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            if self.path.startswith("/bigclose"):
                self.close_connection = True   # no length: it ends with the connection
            else:
                self.send_header("Content-Length", str(size))
            self.end_headers()
            if self.command == "HEAD":
                return
            for k in range(size >> 20):
                self.wfile.write((b"%07d\n" % k) * (1 << 17))
            return
        if self.path.startswith("/redirect"):
            self.send_response(302)
            self.send_header("Location", "/landed")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        out = json.dumps({"method": self.command, "path": self.path,
                          "headers": {k.lower(): v for k, v in self.headers.items()},
                          "body": body.decode()}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Echo", "yes")
        if self.path.startswith("/chunked"):
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(0, len(out), 7):
                part = out[i:i + 7]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")
            return
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = answer
ThreadingHTTPServer((sys.argv[2], int(sys.argv[1])), H).serve_forever()
'''


def proxy_termd(termd_factory, tmp_path, env=None):
    (tmp_path / "view").write_text("viewsecret\n")
    (tmp_path / "preview").write_text("previewsecret\n")
    return termd_factory(args=("--view-token-file", str(tmp_path / "view"),
                               "--preview-token-file", str(tmp_path / "preview"),
                               "--preview-host-suffix", ".preview.test"),
                         token="fullsecret", tcp=True, env=env)


def echo_server(t, ev, bind="127.0.0.1"):
    (t.home / "echo.py").write_text(ECHO)
    sub = subscribed(t)
    port = tdtest.free_port()
    o = tdtest.run_done(ev, "python3 echo.py %d %s >/dev/null 2>&1 & echo PID=$!" % (port, bind))
    pid = int([ln for ln in tdtest.content(o).splitlines() if ln.startswith("PID=")][0][4:])
    wait_event(sub, is_open(port, pid), 10.0, "port.open of the echo server")
    sub.close()
    return port, pid


def get(t, path, headers=None, method="GET", body=None):
    import http.client
    host, port = t.url.split("://")[1].rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=30)
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, data


FULL = {"Authorization": "Bearer fullsecret"}


def test_proxy_fetches_and_keeps_path_query_body(termd_factory, tmp_path):
    import json
    t = proxy_termd(termd_factory, tmp_path)
    ev = t.events()
    port, pid = echo_server(t, ev)
    try:
        st, h, body = get(t, "/proxy/%d/a/b%%20c?x=1&y=two%%26three" % port, FULL)
        assert st == 200 and h.get("x-echo") == "yes", (st, h, body)
        e = json.loads(body)
        assert e["path"] == "/a/b%20c?x=1&y=two%26three", e
        hd = e["headers"]
        assert hd["x-forwarded-prefix"] == "/proxy/%d" % port, hd
        assert hd["x-forwarded-proto"] == "http" and "x-forwarded-host" in hd, hd
        assert "x-forwarded-for" in hd, hd
        assert "authorization" not in hd, hd          # termd's token never reaches the app
        st, h, body = get(t, "/proxy/%d/post" % port, FULL, method="POST", body=b"hello body")
        e = json.loads(body)
        assert st == 200 and e["method"] == "POST" and e["body"] == "hello body", body
        # a chunked answer, decoded
        st, h, body = get(t, "/proxy/%d/chunked" % port, FULL)
        assert st == 200 and json.loads(body)["path"] == "/chunked", body
        # an absolute redirect stays under the prefix
        st, h, _ = get(t, "/proxy/%d/redirect" % port, FULL)
        assert st == 302 and h["location"] == "/proxy/%d/landed" % port, h
        # the Host route: the path unchanged
        st, h, body = get(t, "/x/y?z=1", {"Host": "%d-sandbox.preview.test" % port,
                                           "Authorization": "Bearer previewsecret"})
        assert st == 200 and json.loads(body)["path"] == "/x/y?z=1", (st, body)
    finally:
        kill(pid)


def test_preview_token_never_reaches_the_app(termd_factory, tmp_path):
    """The preview token in Authorization opens the preview and stays with
    termd, by the path route and by the Host route: the app (which echoes
    the headers it got) sees no Authorization, nor the token anywhere. An
    Authorization of the app's own still reaches it (access then by the
    preview cookie), so the check is not empty."""
    import json
    t = proxy_termd(termd_factory, tmp_path)
    ev = t.events()
    port, pid = echo_server(t, ev)
    try:
        preview = {"Authorization": "Bearer previewsecret"}
        for path, extra in (("/proxy/%d/seen?a=1" % port, {}),
                            ("/seen?a=1", {"Host": "%d-box.preview.test" % port})):
            for method, body in (("GET", None), ("POST", b"x=1")):
                st, h, out = get(t, path, dict(preview, **extra), method=method, body=body)
                assert st == 200 and h.get("x-echo") == "yes", (path, method, st, h, out)
                e = json.loads(out)
                assert e["path"] == "/seen?a=1" and e["method"] == method, e
                assert "authorization" not in e["headers"], (path, method, e["headers"])
                assert b"previewsecret" not in out, (path, method, out)
        # the app's own credential, with access by termd's cookie, passes
        st, h, _ = get(t, "/proxy/%d/own?token=previewsecret" % port)
        assert st == 302, (st, h)
        cookie = h["set-cookie"].split(";")[0]
        st, h, out = get(t, "/proxy/%d/own" % port,
                         {"Cookie": cookie, "Authorization": "Bearer app-own-credential"})
        assert st == 200, (st, out)
        assert json.loads(out)["headers"].get("authorization") == "Bearer app-own-credential", out
    finally:
        kill(pid)


def test_proxy_big_post_reaches_the_app_whole(termd_factory, tmp_path):
    """A 7 MiB POST (under --max-frame's 8 MiB) reaches the app whole: more
    than the socket to the app takes at once, so termd writes it over
    several turns (a wish to write again that lws dropped once left the rest
    of such a body unsent for good)."""
    import json
    t = proxy_termd(termd_factory, tmp_path)
    ev = t.events()
    port, pid = echo_server(t, ev)
    try:
        body = b"".join(b"%07d\n" % i for i in range((7 << 20) // 8))
        st, h, out = get(t, "/proxy/%d/post" % port, FULL, method="POST", body=body)
        assert st == 200 and h.get("x-echo") == "yes", (st, h, out[:200])
        e = json.loads(out)
        assert e["method"] == "POST" and e["body"].encode() == body, len(e["body"])
    finally:
        kill(pid)


def test_proxy_access(termd_factory, tmp_path):
    t = proxy_termd(termd_factory, tmp_path)
    ev = t.events()
    port, pid = echo_server(t, ev)
    try:
        path = "/proxy/%d/page" % port
        assert get(t, path)[0] == 401
        assert get(t, path, {"Authorization": "Bearer viewsecret"})[0] == 401
        assert get(t, path + "?token=viewsecret")[0] == 401
        assert get(t, path, {"Cookie": "termd_preview=previewsecret"})[0] == 401
        assert get(t, path, {"Authorization": "Bearer previewsecret"})[0] == 200
        # ?token= once: a cookie, and the URL again without the token
        st, h, _ = get(t, path + "?a=1&token=previewsecret")
        assert st == 302 and h["location"] == path + "?a=1", h
        cookie = h["set-cookie"].split(";")[0]
        assert "HttpOnly" in h["set-cookie"] and "Path=/proxy/%d/" % port in h["set-cookie"], h
        assert "previewsecret" not in cookie
        st, _, body = get(t, path + "?b=2", {"Cookie": "app=1; " + cookie})
        import json
        e = json.loads(body)
        assert st == 200 and e["headers"]["cookie"] == "app=1", e   # termd's cookie stays home
        # the preview token opens previews and nothing else
        import wsclient
        st, _, _ = wsclient.http_request(t.url, "/events",
                                         headers={"Authorization": "Bearer previewsecret"})
        assert st == 401, st
        refused = False
        try:
            t.events(token="previewsecret")
        except Exception:
            refused = True
        assert refused, "the preview token opened /events"
    finally:
        kill(pid)


def test_proxy_never_another_host_or_port(termd_factory, tmp_path):
    t = proxy_termd(termd_factory, tmp_path)
    ev = t.events()
    port, pid = echo_server(t, ev)
    mine = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    mine.bind(("127.0.0.1", 0))
    mine.listen(4)
    foreign = mine.getsockname()[1]
    try:
        # a port no program of termd's listens on: 404 even with the full token
        assert get(t, "/proxy/%d/" % foreign, FULL)[0] == 404
        for path in ("/proxy/example.com/", "/proxy/example.com:%d/" % port,
                     "/proxy/127.0.0.2:%d/" % port, "/proxy/%d@example.com/" % port,
                     "/proxy/0%d/" % port, "/proxy/-%d/" % port, "/proxy/99999/"):
            assert get(t, path, FULL)[0] == 404, path
        for host in ("example.com", "%d-x.preview.test.example.com" % port,
                     "%d.preview.test" % port, "%d-x.example.com" % foreign,
                     "%d-x.preview.test" % foreign):
            st, h, _ = get(t, "/", dict(FULL, Host=host))
            assert "x-echo" not in h, (host, st)          # termd's own page, or nothing
        # an absolute URL in the request line names no other host
        with socket.create_connection(tuple_addr(t)) as s:
            s.sendall(b"GET http://example.com/proxy/%d/ HTTP/1.1\r\nHost: example.com\r\n"
                      b"Authorization: Bearer fullsecret\r\nConnection: close\r\n\r\n" % port)
            s.settimeout(10)
            data = b""
            while True:
                d = s.recv(65536)
                if not d:
                    break
                data += d
            assert b" 200 " not in data.split(b"\r\n")[0], data[:200]
    finally:
        mine.close()
        kill(pid)


def tuple_addr(t):
    host, port = t.url.split("://")[1].rsplit(":", 1)
    return host, int(port)


def big_body(mb):
    return b"".join((b"%07d\n" % k) * (1 << 17) for k in range(mb))


def test_proxy_spliced_bodies_end_by_their_framing_on_a_kept_connection(termd_factory, tmp_path):
    """A plain body goes socket to socket (spliced through a pipe in lws and
    again in the front, never read into termd): each answer still arrives
    whole and in order, ends by its framing, and the client's connection
    carries the next request (a big sized body, a small one, the big one
    again); then a chunked one, HEAD, and one that ends with the
    connection."""
    import http.client
    import json
    t = proxy_termd(termd_factory, tmp_path)
    ev = t.events()
    port, pid = echo_server(t, ev)
    try:
        c = http.client.HTTPConnection(*tuple_addr(t), timeout=60)

        def ask(method, path):
            c.request(method, "/proxy/%d%s" % (port, path), headers=FULL)
            r = c.getresponse()
            return r, r.read()

        r, d = ask("GET", "/big?mb=6")
        assert r.status == 200 and r.getheader("content-length") == str(6 << 20), r.getheaders()
        assert len(d) == 6 << 20 and d == big_body(6), len(d)
        kept = c.sock
        assert kept is not None, "the connection closed after a sized answer"
        r, d = ask("GET", "/x")
        assert r.status == 200 and json.loads(d)["path"] == "/x", d[:200]
        assert c.sock is kept
        r, d = ask("GET", "/big?mb=3")
        assert r.status == 200 and d == big_body(3), len(d)
        assert c.sock is kept
        r, d = ask("GET", "/chunked")   # (passed on ending with the connection)
        assert r.status == 200 and json.loads(d)["path"] == "/chunked", d[:200]
        r, d = ask("HEAD", "/big?mb=2")
        assert r.status == 200 and d == b"", d[:200]
        r, d = ask("GET", "/bigclose?mb=5")
        assert r.status == 200 and r.getheader("content-length") is None, r.getheaders()
        assert len(d) == 5 << 20 and d == big_body(5), len(d)
        assert c.sock is None, "an answer without a length must end with the connection"
        c.close()
    finally:
        kill(pid)


def test_proxy_big_download_slow_reader_bounded(termd_factory, tmp_path):
    # under AddressSanitizer freed buffers wait in its quarantine (256 MiB by
    # default) and count in RSS: keep it small, as test_bounds and test_flood do
    asan = os.environ.get("ASAN_OPTIONS")
    t = proxy_termd(termd_factory, tmp_path,
                    env={"ASAN_OPTIONS": asan + ":quarantine_size_mb=16"} if asan else None)
    ev = t.events()
    port, pid = echo_server(t, ev)
    try:
        base = tdtest.rss_mb(t.proc.pid)
        size = 200 << 20
        with socket.create_connection(tuple_addr(t)) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            s.sendall(b"GET /proxy/%d/big?mb=200 HTTP/1.1\r\nHost: localhost\r\n"
                      b"Authorization: Bearer fullsecret\r\n\r\n" % port)
            s.settimeout(60)
            got, peak, head = 0, base, b""
            # a reader that stops for a while, then reads slowly
            time.sleep(1.5)
            peak = max(peak, tdtest.rss_mb(t.proc.pid))
            while True:
                d = s.recv(65536)
                if not d:
                    break
                if head is not None:
                    head += d
                    i = head.find(b"\r\n\r\n")
                    if i < 0:
                        continue
                    assert b" 200 " in head[:20], head[:200]
                    got += len(head) - i - 4
                    head = None
                else:
                    got += len(d)
                if got % (16 << 20) < 65536:
                    peak = max(peak, tdtest.rss_mb(t.proc.pid))
                    time.sleep(0.05)
        assert got == size, got
        print("rss base %.1f peak %.1f MiB" % (base, peak))
        assert peak - base < 40, "termd grew from %.1f to %.1f MiB" % (base, peak)
    finally:
        kill(pid)



def read_head(s):
    """An answer's head from s: (head, the body bytes that came with it)."""
    got = b""
    while b"\r\n\r\n" not in got:
        d = s.recv(65536)
        assert d, got[:200]
        got += d
    i = got.index(b"\r\n\r\n") + 4
    return got[:i], got[i:]


def test_proxy_handed_body_client_reset_leaves_no_fd(termd_factory, tmp_path):
    """A sized body's rest goes from the app's socket to the client's by the
    front itself (handed over by the proxy, one hop): a client that resets
    its connection mid-body leaves nothing open in termd, the app's socket
    closed with it (its socket count back to where it was)."""
    t = proxy_termd(termd_factory, tmp_path)
    ev = t.events()
    port, pid = echo_server(t, ev)
    try:
        # a whole one first: what termd opens once for previews is open
        st, _, d = get(t, "/proxy/%d/big?mb=2" % port, headers=FULL)
        assert st == 200 and d == big_body(2), len(d)
        base = tdtest.socket_fds(t.proc.pid)
        for _ in range(3):
            s = socket.create_connection(tuple_addr(t))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            s.settimeout(60)
            s.sendall(b"GET /proxy/%d/big?mb=256 HTTP/1.1\r\nHost: localhost\r\n"
                      b"Authorization: Bearer fullsecret\r\n\r\n" % port)
            head, body = read_head(s)
            assert b" 200 " in head[:20] and b"content-length: %d" % (256 << 20) in head.lower(), head
            got = len(body)
            while got < 8 << 20:   # well past what goes through lws before the hand-over
                d = s.recv(1 << 20)
                assert d, got
                got += len(d)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()   # a reset, the app still writing
        tdtest.wait_until(lambda: tdtest.socket_fds(t.proc.pid) <= base, 60,
                          what="termd's sockets back to %d (now %d)"
                          % (base, tdtest.socket_fds(t.proc.pid)))
        # and previews go on
        st, _, d = get(t, "/proxy/%d/big?mb=3" % port, headers=FULL)
        assert st == 200 and d == big_body(3), len(d)
    finally:
        kill(pid)


def test_proxy_handed_body_outlasting_lws_idle_keeps_the_connection(termd_factory, tmp_path):
    """A handed-over body the client takes longer to read than lws keeps an
    idle connection (5 s): once it is whole, the same client connection
    still carries the next request (the front asks lws on a new
    connection of its own)."""
    import http.client
    import json
    t = proxy_termd(termd_factory, tmp_path)
    ev = t.events()
    port, pid = echo_server(t, ev)
    try:
        c = http.client.HTTPConnection(*tuple_addr(t), timeout=60)
        c.request("GET", "/proxy/%d/big?mb=16" % port, headers=FULL)
        r = c.getresponse()
        assert r.status == 200 and r.getheader("content-length") == str(16 << 20), r.getheaders()
        first = r.read(6 << 20)
        time.sleep(7)   # the pause is the case: longer than lws's idle timeout
        d = first + r.read()
        assert len(d) == 16 << 20 and d == big_body(16), len(d)
        kept = c.sock
        assert kept is not None, "the connection closed after a sized answer"
        c.request("GET", "/proxy/%d/after" % port, headers=FULL)
        r = c.getresponse()
        d = r.read()
        assert r.status == 200 and json.loads(d)["path"] == "/after", d[:200]
        assert c.sock is kept
        c.close()
    finally:
        kill(pid)


def test_proxy_handed_body_ends_the_connection_the_client_asked_to_close(termd_factory, tmp_path):
    """A handed-over body for a request that said Connection: close (or an
    HTTP/1.0 one) ends with the connection, as lws would have ended it: a
    client that reads until the close gets the whole answer and the close
    (the front's own wait for a next request made long here). lws closes
    its side right after it handed the body over, the hand-over perhaps
    still queued for the front: each asked several times, for the front
    must take it before it ends on lws's close."""
    t = termd_factory(args=("--head-timeout", "600"), token="fullsecret", tcp=True)
    ev = t.events()
    port, pid = echo_server(t, ev)
    try:
        for req in 8 * (b"GET /proxy/%d/big?mb=4 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n",
                        b"GET /proxy/%d/big?mb=4 HTTP/1.0\r\n"):
            with socket.create_connection(tuple_addr(t)) as s:
                s.settimeout(120)
                s.sendall(req % port + b"Authorization: Bearer fullsecret\r\n\r\n")
                head, body = read_head(s)
                assert b" 200 " in head[:20], head
                while True:
                    d = s.recv(1 << 20)
                    if not d:
                        break
                    body += d
                assert len(body) == 4 << 20 and body == big_body(4), (req, len(body))
    finally:
        kill(pid)

# ------------------------------------------------ termctl and the Python client

def test_termctl_and_python_client(termd, ev, client):
    import termd as termd_client
    port = tdtest.free_port()
    pid = serve(ev, port, "127.0.0.1")
    try:
        w = client.port_wait(port, timeout=20)
        assert isinstance(w, termd_client.PortWaitResult) and w and w.port == port, w
        # discovery may lag the first connection by a tick: wait for the listing
        tdtest.wait_until(lambda: port in [p.port for p in client.ports()], 10, what="listed")
        lst = client.ports()
        p = [p for p in lst if p.port == port][0]
        assert isinstance(p, termd_client.PortInfo) and p.session == "main" and p.pid == pid, p
        r = termd.termctl("ports")
        assert r.returncode == 0, r.stderr
        assert any(ln.split()[:4] == [str(port), "127.0.0.1", "main", str(pid)]
                   for ln in r.stdout.splitlines()), r.stdout
        r = termd.termctl("port", "wait", str(port), "--timeout", "5")
        assert r.returncode == 0 and "accepts" in r.stdout, (r.stdout, r.stderr)
        other = tdtest.free_port()
        r = termd.termctl("port", "wait", str(other), "--timeout", "0.3")
        assert r.returncode == 1 and "listening instead: %d" % port in r.stdout, (r.stdout, r.stderr)
        miss = client.port_wait(other, timeout=0.2)
        assert not miss and miss.timed_out and [q.port for q in miss.listening] == [port], miss
        # the events come typed
        evs = client.events(since=0, wait=30)
        for e in evs:
            if e.observation == "port.open" and e.port == port:
                assert isinstance(e, termd_client.PortEvent) and e.pid == pid, e
                break
        evs.close()
    finally:
        kill(pid)


# a WebSocket echo server in plain Python (no package needed): it answers
# with the subprotocol asked for and echoes each frame's payload, prefixed
# with the request path once
WSECHO = wsserver.script(r'''
import socket, sys, threading
def serve(c):
    r = read_head(c)
    if r is None:
        return
    line, h, rest = r
    path = line.split()[1]
    resp = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" \
           "Sec-WebSocket-Accept: %s\r\n" % accept_key(h["sec-websocket-key"])
    if "sec-websocket-protocol" in h:
        resp += "Sec-WebSocket-Protocol: %s\r\n" % h["sec-websocket-protocol"].split(",")[0].strip()
    c.sendall((resp + "\r\n").encode())
    c.sendall(frame(1, ("path " + path + " fwd " + h.get("x-forwarded-prefix", "-")).encode()))
    rd = Reader(c, rest)
    try:
        while True:
            b0, op, p = rd.frame()
            if op == 8:
                c.sendall(frame(8, p[:2]))
                return
            c.sendall(frame(op, p))
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


def test_proxy_websocket_passes_through(termd_factory, tmp_path):
    import wsclient
    t = proxy_termd(termd_factory, tmp_path)
    ev = t.events()
    (t.home / "wsecho.py").write_text(WSECHO)
    sub = subscribed(t)
    port = tdtest.free_port()
    o = tdtest.run_done(ev, "python3 wsecho.py %d >/dev/null 2>&1 & echo PID=$!" % port)
    pid = int([ln for ln in tdtest.content(o).splitlines() if ln.startswith("PID=")][0][4:])
    try:
        wait_event(sub, is_open(port, pid), 10.0, "port.open of the WebSocket server")
        fds = tdtest.socket_fds(t.proc.pid)
        ws = wsclient.connect(t.url, "/proxy/%d/hmr?x=1" % port, "vite-hmr", token="fullsecret")
        assert ws.subprotocol == "vite-hmr" if hasattr(ws, "subprotocol") else True
        op, first = ws.recv(10)
        assert first == b"path /hmr?x=1 fwd /proxy/%d" % port, first
        big = os.urandom(300000)
        for payload in (b"hello", big):
            ws.send_binary(payload)
            op, got = ws.recv(30)
            assert got == payload, (len(got), len(payload))
        ws.send_text("text frame")
        assert ws.recv(10)[1] == b"text frame"
        ws.close()
        # the preview token and the Host route too; the view token and no token refused
        ws = wsclient.connect(t.url, "/live", None, token="previewsecret",
                              headers={"Host": "%d-box.preview.test" % port})
        assert ws.recv(10)[1] == b"path /live fwd -"
        ws.close()
        for tok in (None, "viewsecret"):
            try:
                wsclient.connect(t.url, "/proxy/%d/hmr" % port, None, token=tok)
                raise AssertionError("upgrade allowed with token %r" % tok)
            except wsclient.HandshakeError as e:
                assert e.status == 401, e
        # a port not termd's: 404
        try:
            wsclient.connect(t.url, "/proxy/%d/" % tdtest.free_port(), None, token="fullsecret")
            raise AssertionError("upgrade to a port nobody of termd's listens on")
        except wsclient.HandshakeError as e:
            assert e.status == 404, e
        # every tunnel's two sockets closed with it
        tdtest.wait_until(lambda: tdtest.socket_fds(t.proc.pid) <= fds, 10, what="sockets closed")
        # /events still works beside it
        assert t.events().call("ping", {}, timeout=T)["observation"] == "pong"
    finally:
        kill(pid)


# a WebSocket server that sends 10 MiB (160 binary frames of 64 KiB) on an
# upgrade to /flood, writing how many bytes it has sent to the file argv[2]
# after each frame, then waits; any other path gets one text frame "hello"
WSFLOOD = r"""
import base64, hashlib, os, socket, struct, sys, threading
def serve(c):
    data = b""
    while b"\r\n\r\n" not in data:
        d = c.recv(4096)
        if not d:
            return
        data += d
    lines = data.split(b"\r\n\r\n")[0].decode().split("\r\n")
    path = lines[0].split()[1]
    h = {k.strip().lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:])}
    acc = base64.b64encode(hashlib.sha1((h["sec-websocket-key"] +
          "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
    c.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
               "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n" % acc).encode())
    if path != "/flood":
        c.sendall(b"\x81\x05hello")
    else:
        frame = b"\x82\x7f" + struct.pack(">Q", 65536) + b"f" * 65536
        sent = 0
        for _ in range(160):
            c.sendall(frame)
            sent += len(frame)
            with open(sys.argv[2] + ".tmp", "w") as f:
                f.write(str(sent))
            os.replace(sys.argv[2] + ".tmp", sys.argv[2])
    try:
        while c.recv(65536):
            pass
    except OSError:
        pass
    c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(16)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""
FLOOD_FRAME = 10 + 65536
FLOOD = 160 * FLOOD_FRAME


def test_proxy_websocket_to_a_client_that_reads_nothing(termd_factory, tmp_path):
    """A tunnel whose client reads nothing while the app sends 10 MiB:
    termd stays responsive (/healthz, /events, another tunnel, a proxied
    GET) and its memory bounded (it keeps about 1 MiB of the tunnel's
    bytes); once the client reads, all 10 MiB arrive. A tunnel whose
    writes to the client could block would stop termd's loop; one whose
    wish to write again, made while writing, was lost (lws takes POLLOUT
    off a raw file's wsi after its WRITEABLE callback) stalled for good."""
    import http.client
    import json
    import wsclient
    asan = os.environ.get("ASAN_OPTIONS")
    t = proxy_termd(termd_factory, tmp_path,
                    env={"ASAN_OPTIONS": asan + ":quarantine_size_mb=16"} if asan else None)
    ev = t.events()
    (t.home / "wsflood.py").write_text(WSFLOOD)
    progress = t.home / "flood.sent"
    sub = subscribed(t)
    port = tdtest.free_port()
    o = tdtest.run_done(ev, "python3 wsflood.py %d %s >/dev/null 2>&1 & echo PID=$!"
                        % (port, progress))
    fpid = int([ln for ln in tdtest.content(o).splitlines() if ln.startswith("PID=")][0][4:])
    eport, epid = None, None
    client = None
    try:
        wait_event(sub, is_open(port, fpid), 10.0, "port.open of the WebSocket server")
        sub.close()
        eport, epid = echo_server(t, ev)
        base = tdtest.rss_mb(t.proc.pid)
        client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.connect(tuple_addr(t))
        client.sendall(b"GET /proxy/%d/flood HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n"
                       b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                       b"Sec-WebSocket-Version: 13\r\nAuthorization: Bearer fullsecret\r\n\r\n"
                       % port)

        def sent():
            try:
                return int(progress.read_text() or 0)
            except (OSError, ValueError):
                return 0

        # the app sends until the way to the client is full (its count
        # stays a second), or all of it (the kernel's socket buffers on
        # loopback hold megabytes): termd then has more than the client
        # takes, and no way to write it without waiting
        seen = {"v": -1, "since": 0.0}

        def app_done():
            v = sent()
            now = time.monotonic()
            if v != seen["v"]:
                seen["v"], seen["since"] = v, now
                return v == FLOOD
            return v > 0 and now - seen["since"] >= 1.0

        tdtest.wait_until(app_done, 60, 0.1, what="the app's sending to stop")
        # termd is responsive: a new connection's /healthz, /events, another
        # tunnel, a proxied GET
        for _ in range(3):
            c = http.client.HTTPConnection(*tuple_addr(t), timeout=20)
            c.request("GET", "/healthz")
            r = c.getresponse()
            assert r.status == 200 and json.loads(r.read())["ok"] is True
            c.close()
        assert t.events().call("ping", {}, timeout=20)["observation"] == "pong"
        ws = wsclient.connect(t.url, "/proxy/%d/other" % port, None, token="fullsecret")
        assert ws.recv(20)[1] == b"hello"
        ws.close()
        st, h, _ = get(t, "/proxy/%d/x" % eport, FULL)
        assert st == 200 and h.get("x-echo") == "yes", (st, h)
        grown = tdtest.rss_mb(t.proc.pid) - base
        print("rss base %.1f MiB, grown %.1f MiB, the app sent %d" % (base, grown, sent()))
        assert grown < 6, "termd grew %.1f MiB holding a tunnel's bytes" % grown
        # the client reads: every byte arrives, the head first
        client.settimeout(30)
        data = b""
        while b"\r\n\r\n" not in data:
            d = client.recv(65536)
            assert d, "closed before the 101: %r" % data
            data += d
        head, rest = data.split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 101"), head
        got = len(rest)
        while got < FLOOD:
            try:
                d = client.recv(1 << 20)
            except socket.timeout:
                raise AssertionError("the tunnel stopped after %d of %d bytes (the app sent %d)"
                                     % (got, FLOOD, sent()))
            assert d, "closed after %d of %d bytes" % (got, FLOOD)
            got += len(d)
        assert got == FLOOD and sent() == FLOOD, (got, sent())
    finally:
        if client:
            client.close()
        kill(fpid)
        if epid:
            kill(epid)


def test_proxy_reaches_the_address_the_program_bound(termd_factory, tmp_path):
    # a server on 127.0.0.2 (loopback, but not 127.0.0.1): reached there, and
    # a foreign server on 127.0.0.1 with the same port is never what answers
    t = proxy_termd(termd_factory, tmp_path)
    ev = t.events()
    port, pid = echo_server(t, ev, bind="127.0.0.2")
    mine = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    mine.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    mine.bind(("127.0.0.1", port))
    mine.listen(4)
    try:
        st, h, body = get(t, "/proxy/%d/where" % port, FULL)
        assert st == 200 and h.get("x-echo") == "yes", (st, h, body)
    finally:
        mine.close()
        kill(pid)


# ------------------------------------------------------- over a dial-out link

def test_link_proxy_through_the_example_backend(termd_factory, tmp_path):
    """share/examples/link_backend.py serves /sandboxes/<id>/proxy/<port>/…
    from a termd with no listener at all: termd dials back (link.proxy) and
    carries one TCP connection to the session's program."""
    import subprocess
    import wsclient
    from conftest import REPO
    bport = tdtest.free_port()
    tok = tmp_path / "link.token"
    tok.write_text("example-link-token\n")
    blog = open(tmp_path / "backend.log", "wb")
    be = subprocess.Popen(["/usr/bin/python3", str(REPO / "share/examples/link_backend.py"),
                           "--listen", "127.0.0.1:%d" % bport, "--link-token-file", str(tok)],
                          stdout=blog, stderr=subprocess.STDOUT)
    pid = td = None
    try:
        tdtest.wait_until(lambda: socket.socket().connect_ex(("127.0.0.1", bport)) == 0, 20,
                          what="the backend listening")
        home = tmp_path / "sb"
        home.mkdir()
        (home / "page.html").write_text("<p>THROUGH-THE-LINK</p>")
        from conftest import TERMD_BIN, base_env
        tlog = open(tmp_path / "termd.log", "wb")
        td = subprocess.Popen([TERMD_BIN, "--listen", "none", "--connect",
                               "ws://127.0.0.1:%d/termd" % bport, "--connect-token-file", str(tok),
                               "--sandbox-id", "sb-p", "--cwd", str(home), "--connect-backoff", "0.1:0.5"],
                              stdout=tlog, stderr=subprocess.STDOUT, env=base_env(home),
                              start_new_session=True)

        def listed():
            st, _, body = wsclient.http_request("http://127.0.0.1:%d" % bport, "/sandboxes")
            return st == 200 and b"sb-p" in body
        tdtest.wait_until(listed, 30, what="the sandbox's link up")
        burl = "ws://127.0.0.1:%d" % bport
        c = wsclient.Events(burl, path="/sandboxes/sb-p/events")
        port = tdtest.free_port()
        o = tdtest.run_done(c, "cd %s && python3 -m http.server %d --bind 127.0.0.1 >/dev/null 2>&1 "
                            "& echo PID=$!" % (home, port))
        pid = int([ln for ln in tdtest.content(o).splitlines() if ln.startswith("PID=")][0][4:])
        tdtest.wait_until(lambda: port in [p["port"] for p in
                                           c.call("ports.list", {})["extras"]["ports"]],
                          10, what="the port listed")
        st, h, body = wsclient.http_request("http://127.0.0.1:%d" % bport,
                                            "/sandboxes/sb-p/proxy/%d/page.html" % port, timeout=30)
        assert st == 200 and b"THROUGH-THE-LINK" in body, (st, body[:300])
        # a port termd's programs do not listen on: refused, nothing dialed
        st, _, _ = wsclient.http_request("http://127.0.0.1:%d" % bport,
                                         "/sandboxes/sb-p/proxy/%d/" % tdtest.free_port(), timeout=30)
        assert st == 502, st
        # only the link's backend may ask, and only for its own origin
        r = c.call("link.proxy", {"port": port, "url": "ws://127.0.0.2:%d/relay/1" % bport})
        assert_error(r, "forbidden")
        c.close()
    finally:
        if pid:
            kill(pid)
        if td is not None:
            td.send_signal(signal.SIGTERM)
            rc = td.wait(10)
            tlog.close()
            assert rc == 0, (tmp_path / "termd.log").read_text()
        be.terminate()
        be.wait(5)
        blog.close()


def test_link_proxy_refused_on_a_connection_that_dialed_in(termd, ev):
    port = tdtest.free_port()
    pid = serve(ev, port, "127.0.0.1")
    try:
        tdtest.wait_until(lambda: port in [p["port"] for p in
                                           ev.call("ports.list", {})["extras"]["ports"]],
                          10, what="the port listed")
        # no --connect: link.proxy is not even offered
        assert_error(ev.call("link.proxy", {"port": port, "url": "ws://127.0.0.1:1/x"}),
                     "unknown_action")
    finally:
        kill(pid)


def test_termd_stops_cleanly_with_previews_in_flight(termd_factory, tmp_path):
    """a download held by a client that does not read and a WebSocket tunnel,
    both open when termd stops: it exits 0 (teardown checks the status; under
    ASan, no leak or use after free)."""
    import wsclient
    t = proxy_termd(termd_factory, tmp_path)
    ev = t.events()
    port, pid = echo_server(t, ev)
    (t.home / "wsecho.py").write_text(WSECHO)
    wport = tdtest.free_port()
    sub = subscribed(t)
    o = tdtest.run_done(ev, "python3 wsecho.py %d >/dev/null 2>&1 & echo PID=$!" % wport)
    wpid = int([ln for ln in tdtest.content(o).splitlines() if ln.startswith("PID=")][0][4:])
    try:
        wait_event(sub, is_open(wport, wpid), 10.0, "port.open of the WebSocket server")
        s = socket.create_connection(tuple_addr(t))
        s.sendall(b"GET /proxy/%d/big?mb=50 HTTP/1.1\r\nHost: localhost\r\n"
                  b"Authorization: Bearer fullsecret\r\n\r\n" % port)
        s.settimeout(10)
        assert b" 200 " in s.recv(4096)[:20]
        ws = wsclient.connect(t.url, "/proxy/%d/x" % wport, None, token="fullsecret")
        ws.recv(10)
        assert t.stop() is None
        t.proc = None
        s.close()
    finally:
        kill(pid)
        kill(wpid)
