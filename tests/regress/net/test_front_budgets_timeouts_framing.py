"""The front and the preview proxy against hostile clients and apps (issue
46): HTTP/2 streams that never read hold a bounded share of memory and fds,
and wait their turn to lws; unfinished HTTP/2 header blocks and streams
that make no progress time out; one address cannot take the connection cap;
a preview app's extra bytes after a whole answer never reach the client and
an app that keeps its socket open does not keep the answer open."""
import os
import socket
import time

import pytest

from tdtest import free_port, rss_mb, socket_fds, wait_until

h2 = pytest.importorskip("h2.connection", reason="python3-h2 is needed (make deps)")
import h2.config  # noqa: E402
import h2.events  # noqa: E402
import h2.settings  # noqa: E402
import h2.errors  # noqa: E402

from test_h2 import H2  # noqa: E402

TOKEN = "front4-test-token-0123456789"


def _metric(port, name):
    c = H2(port)
    try:
        status, _, body = c.request("GET", "/metrics", {"authorization": "Bearer " + TOKEN})
    finally:
        c.close()
    assert status == 200
    for line in body.decode().splitlines():
        if line.split(" ")[0] == name:
            return float(line.rsplit(" ", 1)[1])
    return None


def _h2(port, window=None, src=None):
    """An h2c connection (test_h2.H2) from address src; window: the
    receive window its streams start with (0 allowed)."""
    if src is None:
        c = H2(port)
    else:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((src, 0))
        s.connect(("127.0.0.1", port))
        c = H2.__new__(H2)
        c.sock = s
        c.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        c.conn.initiate_connection()
        c.streams, c.noack = {}, set()
    if window is not None:
        c.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
    c.flush()
    return c


def _all_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def test_h2_streams_that_never_read_hold_bounded_memory_and_fds(termd_factory):
    """10 h2c connections each open 100 streams for /assets/xterm.js with a
    zero receive window and never read: termd's memory and fds grow by a
    bounded amount (a few streams per connection forwarded to lws at once,
    lws's answer not copied per request, nothing read from lws past what
    the client may take), and every stream of a client that reads is
    served, the ones over the per-connection share in their turn."""
    port = free_port()
    td = termd_factory(token=TOKEN, listen="127.0.0.1:%d" % port)
    pid = td.proc.pid
    warm = H2(port)
    status, _, js = warm.request("GET", "/assets/xterm.js")
    assert status == 200 and len(js) > 400000
    warm.close()
    streams0 = _metric(port, "termd_front_h2_streams_total")
    rss0, fd0 = rss_mb(pid), _all_fds(pid)
    hogs = []
    for _ in range(10):
        c = _h2(port, window=0)
        for _ in range(100):
            c.start("GET", "/assets/xterm.js", ack=False)
        hogs.append(c)
    wait_until(lambda: _metric(port, "termd_front_h2_streams_total") >= streams0 + 1000 + 1,
               timeout=60, what="the 1000 streams taken by the front")
    # lws has served what it was given: a few more requests one after another
    for _ in range(3):
        assert _metric(port, "termd_front_h2_streams_total") is not None
    drss, dfd = rss_mb(pid) - rss0, _all_fds(pid) - fd0
    print("unread streams: +%.1f MiB, +%d fds" % (drss, dfd))
    assert dfd < 300, "1000 unread streams took %d more fds" % dfd
    assert drss < 64, "1000 unread streams took %.0f MiB more" % drss
    # a client that reads gets all 30 of its streams, whole
    c = H2(port)
    sids = [c.start("GET", "/assets/xterm.js") for _ in range(30)]
    c.wait(lambda: all(c.streams[s].ended for s in sids), "30 downloads")
    assert all(c.streams[s].status == 200 and bytes(c.streams[s].data) == js for s in sids)
    c.close()
    for h in hogs:
        h.close()
    wait_until(lambda: _all_fds(pid) < fd0 + 20, timeout=30, what="the fds given back")


PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
# HEADERS on stream 1, ":method: GET" (HPACK index 2) and no END_HEADERS: the
# header block is never finished
HALF_HEADERS = b"\x00\x00\x01\x01\x00\x00\x00\x00\x01\x82"


def _half_h2(port, src):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    s.sendall(PREFACE + HALF_HEADERS)
    return s


def _closed(s, timeout):
    """Read s until termd closes it (True) or timeout seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        s.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            if not s.recv(65536):
                return True
        except socket.timeout:
            return False
        except ConnectionResetError:
            return True
    return False


def test_unfinished_h2_header_block_times_out(termd_factory):
    """An HTTP/2 HEADERS frame without END_HEADERS holds its connection no
    longer than a request head (--head-timeout) may take."""
    port = free_port()
    termd_factory(token=TOKEN, listen="127.0.0.1:%d" % port, args=["--head-timeout", "2"])
    s = _half_h2(port, "127.0.0.2")
    assert _closed(s, 30), "a header block never finished still holds its connection"
    s.close()
    c = H2(port)
    assert c.request("GET", "/healthz")[0] == 200
    c.close()


def test_one_address_cannot_take_the_connection_cap(termd_factory):
    """1030 connections from 127.0.0.2, each with an unfinished HTTP/2
    header block, take at most its share of the front's 1024: a client at
    127.0.0.3 is still served, over HTTP/1.1 and HTTP/2."""
    port = free_port()
    termd_factory(token=TOKEN, listen="127.0.0.1:%d" % port)
    held = []
    try:
        for _ in range(1030):
            held.append(_half_h2(port, "127.0.0.2"))
        # the front has seen every one of them: the last is either held or closed
        c = socket.create_connection(("127.0.0.1", port), timeout=10,
                                     source_address=("127.0.0.3", 0))
        c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        got = b""
        try:
            while True:
                d = c.recv(65536)
                if not d:
                    break
                got += d
        except ConnectionResetError:
            pass
        c.close()
        assert got.startswith(b"HTTP/1.1 200"), "127.0.0.3 was locked out: %r" % got[:80]
        c = _h2(port, src="127.0.0.4")
        assert c.request("GET", "/healthz", timeout=30)[0] == 200
        c.close()
        # of 127.0.0.2's, those past its share were closed at once
        closed = sum(_closed(h, 0.01) for h in held[-100:])
        assert closed == 100, "only %d of 127.0.0.2's last 100 were refused" % closed
    finally:
        for h in held:
            h.close()


def test_h2_stream_nobody_reads_is_reset_and_the_connection_goes_on(termd_factory):
    """A stream whose answer the client takes nothing of (its window closed)
    is reset (CANCEL) after --stall-timeout; its connection goes on."""
    port = free_port()
    termd_factory(token=TOKEN, listen="127.0.0.1:%d" % port, args=["--stall-timeout", "2"])
    c = _h2(port, window=0)
    sid = c.start("GET", "/assets/xterm.js", ack=False)
    st = c.streams[sid]
    c.wait(lambda: st.reset is not None, "the stalled stream's reset", timeout=30)
    assert st.reset == h2.errors.ErrorCodes.CANCEL
    c.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 65535})
    c.flush()
    assert c.request("GET", "/healthz")[0] == 200
    c.close()


# A preview app that misbehaves, by path: /1xx answers 100 Continue, then two
# whole answers as one; /keep answers with a Content-Length and keeps its
# connection open (Connection: close ignored). It never closes a connection.
BAD_APP = r'''
import socket, sys, threading, time
def serve(c):
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = c.recv(65536)
        if not d:
            return
        buf += d
    path = buf.split(b" ")[1]
    if path.endswith(b"/1xx"):
        c.sendall(b"HTTP/1.1 100 Continue\r\n\r\n"
                  b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst"
                  b"HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\nsecond, from the app")
    else:
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\nhello")
    time.sleep(3600)
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(16)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
'''


def _bad_app(termd_factory, tmp_path):
    import tdtest
    import test_ports
    t = test_ports.proxy_termd(termd_factory, tmp_path)
    ev = t.events(token="fullsecret")
    (t.home / "bad.py").write_text(BAD_APP)
    sub = tdtest.subscribed(t)
    port = free_port()
    o = tdtest.run_done(ev, "python3 bad.py %d >/dev/null 2>&1 & echo PID=$!" % port)
    pid = int([ln for ln in tdtest.content(o).splitlines() if ln.startswith("PID=")][0][4:])
    test_ports.wait_event(sub, test_ports.is_open(port, pid), 10.0, "port.open of the app")
    sub.close()
    return t, port, pid


def _answer(s, buf, timeout):
    """One HTTP/1.1 answer, framed by Content-Length or by the connection's
    end: (status, body, rest; None when closed); fails when it does not end
    within timeout seconds."""
    deadline = time.monotonic() + timeout

    def more():
        s.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            d = s.recv(65536)
        except socket.timeout:
            raise AssertionError("the answer did not end within %ss: %r" % (timeout, buf))
        assert d, "closed before the answer ended: %r" % buf
        return d
    while b"\r\n\r\n" not in buf:
        buf += more()
    head, rest = buf.split(b"\r\n\r\n", 1)
    n = None
    for ln in head.split(b"\r\n")[1:]:
        k, v = ln.split(b":", 1)
        if k.strip().lower() == b"content-length":
            n = int(v)
    if n is None:   # the answer ends with the connection
        while True:
            s.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                d = s.recv(65536)
            except socket.timeout:
                raise AssertionError("the answer did not end within %ss: %r" % (timeout, buf))
            if not d:
                return int(head.split(b" ")[1]), rest, None
            rest += d
    while len(rest) < n:
        rest += more()
    return int(head.split(b" ")[1]), rest[:n], rest[n:]


def _ask(port, path):
    return ("GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nAuthorization: Bearer fullsecret\r\n\r\n"
            % (path, port)).encode()


def test_preview_app_extra_answers_after_a_1xx_never_reach_the_client(termd_factory, tmp_path):
    """An app answers 100 Continue, then two whole answers: the client gets
    the first one, and its next request on the same kept-alive connection
    (GET /healthz) is answered by termd, not by the app's extra bytes."""
    import test_ports
    t, app, pid = _bad_app(termd_factory, tmp_path)
    try:
        tport = int(t.url.rsplit(":", 1)[1])
        s = socket.create_connection(("127.0.0.1", tport), timeout=30)
        s.sendall(_ask(tport, "/proxy/%d/1xx" % app))
        status, body, rest = _answer(s, b"", 20)
        assert (status, body) == (200, b"first")
        assert rest is not None, "the connection was not kept alive"
        assert rest == b"", "the app's extra bytes reached the client: %r" % rest
        s.sendall(_ask(tport, "/healthz"))
        status, body, rest = _answer(s, rest, 20)
        assert status == 200 and b"second" not in body and b"ok" in body, body
        s.close()
    finally:
        test_ports.kill(pid)


def test_preview_app_that_keeps_its_socket_open_still_ends_the_answer(termd_factory, tmp_path):
    """An app keeps its connection open after a whole answer (Content-Length
    given): the proxied answer ends by its Content-Length all the same, and
    the client's next request on that connection is served."""
    import test_ports
    t, app, pid = _bad_app(termd_factory, tmp_path)
    try:
        tport = int(t.url.rsplit(":", 1)[1])
        s = socket.create_connection(("127.0.0.1", tport), timeout=30)
        s.sendall(_ask(tport, "/proxy/%d/keep" % app))
        status, body, rest = _answer(s, b"", 20)
        assert (status, body, rest) == (200, b"hello", b"")
        # the answer is over for termd too: the next request is served
        s.sendall(_ask(tport, "/healthz"))
        status, body, rest = _answer(s, rest, 20)
        assert status == 200 and b"ok" in body, body
        s.close()
    finally:
        test_ports.kill(pid)


def test_upgrade_through_the_front_sends_1012_and_termctl_exits_0(termd_factory):
    """An upgrade in place through the front (a TCP listener): every
    /events client (12 at once) gets the close frame 1012 before its
    connection ends, and `termctl upgrade` exits 0 once the new termd
    answered its id."""
    import test_upgrade
    td = termd_factory(tcp=True)
    for i in range(4):
        others = [td.events() for _ in range(12)]
        for o in others:
            o.call("session.list", {}, timeout=60)   # each one served before the upgrade
        ev = td.events()
        code, ev2, ans = test_upgrade.upgrade(td, ev, cid="up-front-%d" % i)
        assert code == 1012, "upgrade %d: the connection ended with %r, not 1012" % (i, code)
        assert ans["extras"].get("ok") is True, ans
        codes = [test_upgrade.wait_closed(o) for o in others]
        assert codes == [1012] * 12, "upgrade %d: the others' ends: %r" % (i, codes)
        ev2.close()
    for i in range(4):
        r = td.termctl("upgrade", timeout=60)
        assert r.returncode == 0 and r.stdout.strip() == "upgraded", (i, r.returncode, r.stderr)


def test_two_host_headers_are_400(termd_factory):
    """A request with two Host headers is refused by the front (400, RFC 9112
    3.2): no Host another hop reads one way and termd's preview routing
    (--preview-host-suffix) the other."""
    port = free_port()
    termd_factory(token=TOKEN, listen="127.0.0.1:%d" % port,
                  args=["--preview-host-suffix", ".preview.test"])
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: 1234-x.preview.test\r\n\r\n")
    status, body, _ = _answer(s, b"", 20)
    assert status == 400, (status, body)
    s.close()


def test_streams_others_hold_do_not_starve_a_new_client(termd_factory):
    """40 h2c connections whose unread streams hold more than the front's
    budget of connections to lws in all: a new client is served at once
    (its first stream is never kept waiting for theirs)."""
    port = free_port()
    termd_factory(token=TOKEN, listen="127.0.0.1:%d" % port, args=["--stall-timeout", "3600"])
    hogs = []
    try:
        for i in range(40):
            c = _h2(port, window=0, src="127.0.0.%d" % (2 + i // 10))
            for _ in range(10):
                c.start("GET", "/assets/xterm.js", ack=False)
            hogs.append(c)
        wait_until(lambda: _metric(port, "termd_front_h2_streams_total") >= 400,
                   timeout=60, what="the 400 streams taken by the front")
        c = _h2(port, src="127.0.0.200")
        assert c.request("GET", "/healthz", timeout=20)[0] == 200
        c.close()
    finally:
        for h in hogs:
            h.close()
