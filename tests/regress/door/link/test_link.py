"""Dial-out links (--connect URL, PROTOCOL.md section 10): termd dials a test
backend (a websockets server on loopback, started here) and serves /events
over that connection: hello first, actions, the bearer credential and
X-Termd-Sandbox, reconnects with backoff, replay of what the backend missed,
re-sent ids not run twice, certificate checks, garbage and oversized frames,
a stalled peer, --listen none."""

import asyncio
import json
import os
import signal
import socket
import ssl
import struct
import subprocess
import threading
import time

import pytest
import websockets

from conftest import TERMD_BIN, VALGRIND_FACTOR, base_env
from tdtest import free_port, make_cert
import wsserver

SUB = "termd.events.v1"
TTY = "termd.tty.v1"
PROXY = "termd.proxy.v1"


class Link:
    """One connection termd made to the backend, driven synchronously."""

    def __init__(self, backend, ws):
        self.b = backend
        self.ws = ws
        self.headers = ws.request_headers   # case-insensitive
        self.path = ws.path
        self.subprotocol = ws.subprotocol
        self.closed = asyncio.Event()

    def send(self, obj):
        data = obj if isinstance(obj, (str, bytes)) else json.dumps(obj)
        self.b.call(self.ws.send(data), timeout=60)

    def recv(self, timeout=10):
        return json.loads(self.b.call(asyncio.wait_for(self.ws.recv(), timeout), timeout + 5))

    def until(self, pred, timeout=20):
        end = time.monotonic() + timeout
        seen = []
        while time.monotonic() < end:
            m = self.recv(timeout=max(0.1, end - time.monotonic()))
            seen.append(m)
            if pred(m):
                return m, seen
        raise AssertionError("not seen; got %r" % seen[-5:])

    def answer(self, id_, timeout=20):
        return self.until(lambda m: m.get("cause") == id_, timeout)[0]

    def close(self):
        self.b.call(self.ws.close(), timeout=10)

    def reset(self):
        """Cut the TCP connection with a RST (SO_LINGER 0)."""
        def cut():
            sock = self.ws.transport.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.ws.transport.abort()
        self.b.loop.call_soon_threadsafe(cut)


class Backend:
    """A websockets server on 127.0.0.1 in a thread; termd's links arrive
    in self.links (a queue of Link)."""

    def __init__(self, ssl_ctx=None, host="127.0.0.1"):
        self.loop = asyncio.new_event_loop()
        self.accepted = 0
        self.pending = None
        self.ssl_ctx = ssl_ctx
        self.host = host
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.call(self._start())

    async def _start(self):
        self.pending = asyncio.Queue()

        async def handler(ws, path):
            self.accepted += 1
            link = Link(self, ws)
            await self.pending.put(link)
            await ws.wait_closed()

        self.server = await websockets.serve(handler, self.host, 0, subprotocols=[SUB, TTY, PROXY],
                                             ssl=self.ssl_ctx, max_size=None,
                                             ping_interval=None)
        self.port = self.server.sockets[0].getsockname()[1]

    def call(self, coro, timeout=30):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def url(self, path="/termd"):
        scheme = "wss" if self.ssl_ctx else "ws"
        host = "localhost" if self.ssl_ctx else "127.0.0.1"
        return "%s://%s:%d%s" % (scheme, host, self.port, path)

    def accept_raw(self, timeout=20):
        return self.call(asyncio.wait_for(self.pending.get(), timeout * VALGRIND_FACTOR),
                         timeout * VALGRIND_FACTOR + 5)

    def accept(self, timeout=20):
        link = self.accept_raw(timeout)
        hello = link.recv()
        assert hello["observation"] == "hello", hello
        link.hello = hello
        return link

    def stop(self):
        async def down():
            self.server.close()
            await self.server.wait_closed()
        try:
            self.call(down(), timeout=10)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)


@pytest.fixture
def backend():
    b = Backend()
    yield b
    b.stop()


def link_args(url, tmp_path, extra=()):
    tok = tmp_path / "connect.token"
    tok.write_text("link-secret-1\n")
    return ["--connect", url, "--connect-token-file", str(tok), "--sandbox-id", "sb-42",
            "--connect-backoff", "0.1:0.5"] + list(extra)


def health(td):
    status, _, body = td.healthz()
    assert status == 200
    return json.loads(body)


def wait_for(pred, timeout=20, step=0.05):
    end = time.monotonic() + timeout * VALGRIND_FACTOR
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(step)
    raise AssertionError("condition not met in %.0fs" % timeout)


def test_actions_over_link(termd_factory, backend, tmp_path):
    td = termd_factory(args=link_args(backend.url("/ws/sandboxes"), tmp_path))
    link = backend.accept()
    # identity in the handshake, before any action
    assert link.headers.get("Authorization") == "Bearer link-secret-1"
    assert link.headers.get("X-Termd-Sandbox") == "sb-42"
    assert link.subprotocol == SUB
    assert link.path == "/ws/sandboxes"
    # a dial-out link is never a viewer: the full set of actions
    assert link.hello["extras"]["readonly"] is False
    assert "run" in link.hello["extras"]["actions"]
    link.send({"id": "r1", "action": "run", "args": {"command": "echo linked-$((6*7))"}})
    a = link.answer("r1")
    assert a["observation"] == "run", a
    assert "linked-42" in a["content"]
    link.send({"id": "w1", "action": "write", "args": {"path": str(tmp_path / "f.txt"),
                                                        "content": "x"}})
    assert link.answer("w1")["observation"] != "error"
    assert (tmp_path / "f.txt").read_text() == "x"
    # errors as on /events
    link.send({"id": "e1", "action": "no.such.action"})
    e = link.answer("e1")
    assert e["observation"] == "error" and e["extras"]["code"]
    # the event stream
    link.send({"id": "s1", "action": "subscribe"})
    link.answer("s1")
    c = td.events()
    c.send_action("run", {"command": "echo from-direct"}, id="d1")
    m, _ = link.until(lambda m: m["observation"] == "command.end" or
                      (m["observation"] == "run" and m.get("cause") == "d1"))
    h = health(td)
    assert len(h["links"]) == 1
    L = h["links"][0]
    assert L["url"] == backend.url("/ws/sandboxes")
    assert L["connected"] is True and L["since"] > 0 and L["reconnects"] == 0


@pytest.mark.parametrize("cut", ["close", "reset"])
def test_cut_mid_command_replayed_not_run_twice(termd_factory, backend, tmp_path, cut):
    td = termd_factory(args=link_args(backend.url(), tmp_path))
    link = backend.accept()
    count = tmp_path / "count"
    link.send({"id": "s0", "action": "subscribe"})
    link.answer("s0")
    seq0 = link.hello["extras"]["seq"]
    cmd = {"id": "slow-1", "action": "run",
           "args": {"command": "echo x >> %s; sleep 1; echo finished-$((40+2))" % count}}
    link.send(cmd)
    wait_for(lambda: count.exists())
    if cut == "close":
        link.close()
    else:
        link.reset()
    time.sleep(1.5)   # the command ends while the link is down
    link2 = backend.accept()
    assert link2.hello["extras"]["seq"] > seq0
    # what the backend missed: subscribe since the seq it had seen
    link2.send({"id": "s1", "action": "subscribe", "args": {"since": seq0}})
    ans, seen = link2.until(lambda m: m.get("cause") == "s1")
    ends = [m for m in seen if m.get("cause") == "slow-1"]
    assert ends and "finished-42" in ends[0]["content"], seen
    # re-sent with the same id: the answer again, the command not run again
    link2.send(cmd)
    again = link2.answer("slow-1")
    assert "finished-42" in again["content"]
    assert again["extras"].get("replayed") is True
    time.sleep(0.5)
    assert count.read_text() == "x\n"
    h = health(td)["links"][0]
    assert h["connected"] is True and h["reconnects"] >= 1 and h["last_error"]


def test_resent_while_running_answered_once(termd_factory, backend, tmp_path):
    termd_factory(args=link_args(backend.url(), tmp_path))
    link = backend.accept()
    count = tmp_path / "count"
    cmd = {"id": "run-2", "action": "run",
           "args": {"command": "echo y >> %s; sleep 2; echo done-2" % count}}
    link.send(cmd)
    wait_for(lambda: count.exists())
    link.close()
    link2 = backend.accept()
    link2.send(cmd)   # still running: this connection gets its answer
    a = link2.answer("run-2", timeout=30)
    assert "done-2" in a["content"]
    assert count.read_text() == "y\n"


def test_backoff_bounds_against_refusing_port(termd_factory, tmp_path):
    port = free_port()   # nothing listens there: every attempt is refused
    td = termd_factory(args=link_args("ws://127.0.0.1:%d/" % port, tmp_path)[:-2] +
                       ["--connect-backoff", "0.2:0.8"])
    t0 = time.monotonic()
    time.sleep(4.0)
    h = health(td)["links"][0]
    elapsed = time.monotonic() - t0
    n = h["attempts"]
    # delays are min*2^k capped at max, jittered to [half, all], never under
    # min: 0.2, 0.2-0.4, 0.4-0.8, 0.4-0.8, ... so 4 s hold 6..12 attempts
    assert 5 <= n <= 4 + int(elapsed / 0.4) + 1, (n, elapsed)
    assert h["connected"] is False and h["since"] is None
    assert h["last_error"]
    # and it goes on trying (no give-up), slowly
    time.sleep(2.0)
    n2 = health(td)["links"][0]["attempts"]
    assert 2 <= n2 - n <= 6, (n, n2)


def test_backoff_counted_by_accepts(termd_factory, tmp_path):
    """A backend that accepts TCP and hangs up at once: attempts are still
    spaced by the backoff (no hot loop)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    srv.settimeout(0.2)
    port = srv.getsockname()[1]
    accepts = []
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except socket.timeout:
                continue
            accepts.append(time.monotonic())
            c.close()
    th = threading.Thread(target=loop, daemon=True)
    th.start()
    try:
        termd_factory(args=link_args("ws://127.0.0.1:%d/" % port, tmp_path)[:-2] +
                      ["--connect-backoff", "0.3:1"])
        time.sleep(4.0)
    finally:
        stop.set()
        th.join(2)
        srv.close()
    assert 3 <= len(accepts) <= 12, accepts
    gaps = [b - a for a, b in zip(accepts, accepts[1:])]
    assert min(gaps) >= 0.25, gaps


def test_wrong_certificate_refused(termd_factory, tmp_path):
    crt, key = make_cert(tmp_path, "backend")
    other, _ = make_cert(tmp_path, "other")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(crt), str(key))
    b = Backend(ssl_ctx=ctx, host="localhost")
    try:
        # a CA that did not sign the backend's certificate (and the system's
        # CAs, with no --cacert, do not know it either): never connected
        for extra in (["--cacert", str(other)], []):
            td = termd_factory(args=link_args(b.url(), tmp_path, extra))
            h = wait_for(lambda: (lambda L: L if L["attempts"] >= 2 else None)(
                health(td)["links"][0]))
            assert h["connected"] is False and "certificate" in h["last_error"], h
        assert b.accepted == 0
        # the right CA: connected, actions work over wss
        td = termd_factory(args=link_args(b.url(), tmp_path, ["--cacert", str(crt)]))
        link = b.accept()
        link.send({"id": "t1", "action": "run", "args": {"command": "echo over-tls"}})
        assert "over-tls" in link.answer("t1")["content"]
        assert health(td)["links"][0]["connected"] is True
    finally:
        b.stop()


def test_garbage_and_huge_frames(termd_factory, backend, tmp_path):
    td = termd_factory(args=link_args(backend.url(), tmp_path))
    link = backend.accept()
    link.send("this is not json {{{")
    e = link.recv()
    assert e["observation"] == "error" and e["extras"]["code"] == "bad_json", e
    link.send(b"\x00\xff\xfe binary garbage")
    e = link.recv()
    assert e["observation"] == "error", e
    link.send("x" * (100 * 1024 * 1024))   # 100 MB in one frame
    e = link.recv(timeout=60)
    assert e["observation"] == "error" and e["extras"]["code"] == "too_large", e
    # the link is still good
    link.send({"id": "p1", "action": "ping"})
    assert link.answer("p1")["observation"] == "pong"
    assert health(td)["links"][0]["reconnects"] == 0


def raw_backend(behaviour):
    """A TCP server on loopback that answers the WebSocket handshake by hand
    and then does `behaviour(conn)`. Returns (port, accepted list, stop)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    accepted = []
    stop = threading.Event()

    def handshake(c):
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = c.recv(4096)
            if not chunk:
                return False
            data += chunk
        key = [l.split(b":", 1)[1].strip() for l in data.split(b"\r\n")
               if l.lower().startswith(b"sec-websocket-key:")][0]
        acc = wsserver.accept_key(key).encode()
        c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                  b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + acc +
                  b"\r\nSec-WebSocket-Protocol: " + SUB.encode() + b"\r\n\r\n")
        return True

    def loop():
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except socket.timeout:
                continue
            accepted.append((time.monotonic(), c))
            c.settimeout(5)

            def serve(c=c):
                try:
                    if handshake(c):
                        behaviour(c)
                except OSError:
                    pass
            threading.Thread(target=serve, daemon=True).start()
    th = threading.Thread(target=loop, daemon=True)
    th.start()

    def halt():
        stop.set()
        th.join(3)
        srv.close()
        for _, c in accepted:
            c.close()
    return srv.getsockname()[1], accepted, halt


def test_backend_sending_garbage_bytes(termd_factory, tmp_path):
    """Bytes that are no WebSocket frame: termd drops the link, survives,
    and dials again."""
    def garbage(c):
        time.sleep(0.2)
        c.sendall(os.urandom(4096))
        time.sleep(0.3)
    port, accepted, halt = raw_backend(garbage)
    try:
        td = termd_factory(args=link_args("ws://127.0.0.1:%d/" % port, tmp_path))
        wait_for(lambda: len(accepted) >= 3)
        assert td.alive()
        assert health(td)["links"][0]["reconnects"] >= 1
    finally:
        halt()


def test_stalled_peer_detected(termd_factory, tmp_path):
    """A backend that completes the handshake and then neither reads nor
    answers pings: termd finds the link dead after --connect-ping (1 s)
    and twice that, and dials again."""
    def stall(c):
        stop_stall.wait(30)
    stop_stall = threading.Event()
    port, accepted, halt = raw_backend(stall)
    try:
        td = termd_factory(args=link_args("ws://127.0.0.1:%d/" % port, tmp_path,
                                          ["--connect-ping", "1"]))
        wait_for(lambda: len(accepted) >= 1)
        t0 = accepted[0][0]
        wait_for(lambda: health(td)["links"][0]["connected"] is True, timeout=5)
        # dead within ping + hangup (2 s) and some slack, then dialed again
        wait_for(lambda: len(accepted) >= 2, timeout=8)
        took = accepted[1][0] - t0
        assert 1.0 <= took <= 6.0 * VALGRIND_FACTOR, took
    finally:
        stop_stall.set()
        halt()


def test_listen_none(backend, tmp_path):
    tok = tmp_path / "tok"
    tok.write_text("s3cret\n")
    home = tmp_path / "home"
    home.mkdir()
    log = open(tmp_path / "termd.log", "wb")
    p = subprocess.Popen([TERMD_BIN, "--listen", "none", "--connect", backend.url(),
                          "--connect-token-file", str(tok), "--cwd", str(home)],
                         stdout=log, stderr=subprocess.STDOUT, env=base_env(home),
                         start_new_session=True)
    try:
        link = backend.accept(timeout=30)
        # the sandbox id defaults to the host name
        assert link.headers.get("X-Termd-Sandbox") == socket.gethostname()
        link.send({"id": "n1", "action": "run", "args": {"command": "echo no-listener"}})
        assert "no-listener" in link.answer("n1")["content"]
        # nothing listens on the default port on termd's behalf
        out = subprocess.run(["ss", "-ltnp"], capture_output=True, text=True).stdout
        assert "pid=%d," % p.pid not in out, out
    finally:
        p.send_signal(signal.SIGTERM)
        rc = p.wait(10 * VALGRIND_FACTOR)
        log.close()
    assert rc == 0, (tmp_path / "termd.log").read_text()


def test_listen_none_needs_connect(tmp_path):
    r = subprocess.run([TERMD_BIN, "--listen", "none"], capture_output=True, text=True,
                       env=base_env(tmp_path))
    assert r.returncode == 2 and "--connect" in r.stderr


@pytest.mark.parametrize("url", ["http://x/", "ws://", "ws://h:0/", "wss://h:99999/",
                                 "ws://a b/"])
def test_bad_connect_url(tmp_path, url):
    r = subprocess.run([TERMD_BIN, "--connect", url], capture_output=True, text=True,
                       env=base_env(tmp_path))
    assert r.returncode == 2 and "--connect" in r.stderr, r.stderr


def test_link_tty_viewer_through_backend(termd_factory, backend, tmp_path):
    td = termd_factory(args=link_args(backend.url(), tmp_path))
    link = backend.accept()
    link.send({"id": "v1", "action": "link.tty",
               "args": {"session": "main", "url": backend.url("/view/main"), "mode": "rw"}})
    view = backend.accept_raw()
    assert view.subprotocol == TTY and view.path == "/view/main"
    assert view.headers.get("X-Termd-Sandbox") == "sb-42"
    a = link.answer("v1")
    assert a["observation"] == "link.tty", a
    assert a["extras"] == {"session": "main", "url": backend.url("/view/main"), "mode": "rw"}

    def frame(timeout=10):
        return backend.call(asyncio.wait_for(view.ws.recv(), timeout), timeout + 5)
    kinds = set()
    for _ in range(2):
        f = frame()
        assert isinstance(f, bytes)
        kinds.add(f[:1])
    assert kinds == {b"Z", b"S"}, kinds
    # rw: typing through the backend reaches the shell, its output comes back
    view.send(b"Iecho via-$((20+3))-tty\r")
    got = b""
    end = time.monotonic() + 20
    while b"via-23-tty" not in got and time.monotonic() < end:
        f = frame()
        if f[:1] == b"O":
            got += f[1:]
    assert b"via-23-tty" in got
    # a dialed-in client may not make termd dial anywhere
    c = td.events()
    c.send_action("link.tty", {"session": "main", "url": backend.url("/x")}, id="v2")
    e = c.recv_obs()
    assert e["observation"] == "error" and e["extras"]["code"] == "forbidden", e
    # a viewer URL off the link's own scheme, host and port: refused, not
    # dialed (the link's credential stays with its backend), the link stays
    link.send({"id": "v3", "action": "link.tty",
               "args": {"session": "main", "url": "ws://127.0.0.1:%d/" % free_port()}})
    e = link.answer("v3")
    assert e["observation"] == "error" and e["extras"]["code"] == "forbidden", e
    link.send({"id": "v4", "action": "link.tty", "args": {"session": "nope", "url": "ws://h/"}})
    assert link.answer("v4")["extras"]["code"] == "no_such_session"


def test_example_backend_routes_by_sandbox_id(termd_factory, tmp_path):
    """share/examples/link_backend.py: two termds dial it with their sandbox
    ids; a client of each sandbox reaches that sandbox's termd."""
    import wsclient
    from conftest import REPO
    port = free_port()
    tok = tmp_path / "link.token"
    tok.write_text("example-link-token\n")
    blog = open(tmp_path / "backend.log", "wb")
    be = subprocess.Popen(["/usr/bin/python3", str(REPO / "share/examples/link_backend.py"),
                           "--listen", "127.0.0.1:%d" % port, "--link-token-file", str(tok)],
                          stdout=blog, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: socket.socket().connect_ex(("127.0.0.1", port)) == 0)
        url = "ws://127.0.0.1:%d/termd" % port
        tds = {}
        for sid in ("sb-a", "sb-b"):
            (tmp_path / sid).mkdir()
            tds[sid] = termd_factory(args=["--connect", url, "--connect-token-file", str(tok),
                                           "--sandbox-id", sid, "--cwd", str(tmp_path / sid),
                                           "--connect-backoff", "0.1:0.5"])
        # a termd with the wrong credential is refused by the backend
        bad = tmp_path / "bad.token"
        bad.write_text("wrong\n")
        td_bad = termd_factory(args=["--connect", url, "--connect-token-file", str(bad),
                                     "--sandbox-id", "sb-x"])

        def listed():
            st, _, body = wsclient.http_request("http://127.0.0.1:%d" % port, "/sandboxes")
            return st == 200 and json.loads(body) == ["sb-a", "sb-b"]
        wait_for(listed)
        for sid in ("sb-a", "sb-b"):
            with wsclient.Events("ws://127.0.0.1:%d" % port,
                                 path="/sandboxes/%s/events" % sid) as c:
                a = c.call("run", {"command": "pwd"}, id={"mine": sid})
                assert a["cause"] == {"mine": sid}
                assert a["content"].strip().endswith("/" + sid), a
        # a viewer through the backend: termd dials back, frames relayed both ways
        v = wsclient.connect("ws://127.0.0.1:%d" % port, "/sandboxes/sb-b/tty/main?mode=rw",
                             "termd.tty.v1", timeout=20)
        kinds = set()
        while kinds != {b"Z", b"S"}:
            op, payload = v.recv(timeout=20)
            kinds.add(payload[:1])
        v.send_binary(b"Iecho relayed-$((5*5))\r")
        got = b""
        end = time.monotonic() + 20
        while b"relayed-25" not in got and time.monotonic() < end:
            op, payload = v.recv(timeout=20)
            if payload[:1] == b"O":
                got += payload[1:]
        assert b"relayed-25" in got
        v.close()
        h = health(td_bad)["links"][0]
        assert h["connected"] is False and h["attempts"] >= 1
    finally:
        be.terminate()
        be.wait(5)
        blog.close()


def test_runtime_start_passes_the_link_settings(tmp_path):
    """od-runtime-start (the od_runtime images' entrypoint) turns
    TERMD_CONNECT_URL, the connect token file and TERMD_SANDBOX_ID into
    termd's options (a stand-in termd prints what it was given)."""
    from conftest import REPO
    import shutil
    bindir = tmp_path / "bin"
    bindir.mkdir()
    shutil.copy(REPO / "share/runtime/od-runtime-start", bindir / "od-runtime-start")
    fake = bindir / "termd"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    fake.chmod(0o755)
    ctok = tmp_path / "ctok"
    ctok.write_text("c\n")
    env = base_env(tmp_path)
    env.update({"TERMD_CONNECT_URL": "wss://a.example/termd ws://127.0.0.1:9/x",
                "TERMD_CONNECT_TOKEN_FILE": str(ctok), "TERMD_SANDBOX_ID": "sb-7",
                "TERMD_LISTEN": "none", "TERMD_TOKEN_FILE": str(tmp_path / "absent")})
    r = subprocess.run(["sh", str(bindir / "od-runtime-start"), "-v"], env=env,
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:-1] == [
        "--listen", "none", "--connect", "wss://a.example/termd", "--connect",
        "ws://127.0.0.1:9/x", "--sandbox-id", "sb-7", "--connect-token-file", str(ctok), "-v"]
    assert "no token" not in r.stderr
    # without TERMD_CONNECT_URL nothing changes
    del env["TERMD_CONNECT_URL"]
    env["TERMD_LISTEN"] = "0.0.0.0:1"
    r = subprocess.run(["sh", str(bindir / "od-runtime-start")], env=env,
                       capture_output=True, text=True, timeout=10)
    assert r.stdout.split("\n")[:-1] == ["--listen", "0.0.0.0:1"]


def test_k8s_templates(tmp_path):
    """share/k8s: kubectl parses both files without a cluster, and the fields
    are where Pod v1 and agent-sandbox's SandboxTemplate put them."""
    import shutil
    from conftest import REPO
    kubectl = shutil.which("kubectl")
    if not kubectl:
        pytest.skip("no kubectl on this machine")
    docs = {}
    for name in ("pod.yaml", "sandbox-template.yaml"):
        r = subprocess.run([kubectl, "label", "--local", "-o", "json", "-f",
                            str(REPO / "share/k8s" / name), "checked=yes"],
                           capture_output=True, text=True, timeout=60,
                           env=dict(base_env(tmp_path), KUBECONFIG=str(tmp_path / "none")))
        assert r.returncode == 0, r.stderr
        docs[name] = json.loads(r.stdout)
    pod, tpl = docs["pod.yaml"], docs["sandbox-template.yaml"]
    assert (pod["apiVersion"], pod["kind"]) == ("v1", "Pod")
    assert (tpl["apiVersion"], tpl["kind"]) == ("extensions.agents.x-k8s.io/v1beta1",
                                                "SandboxTemplate")
    spec = pod["spec"]
    # the same Pod spec in both
    assert tpl["spec"]["podTemplate"]["spec"] == spec
    assert tpl["spec"]["service"] is False
    (c,) = spec["containers"]
    env = {e["name"]: e for e in c["env"]}
    assert env["TERMD_CONNECT_URL"]["value"].startswith("wss://")
    assert env["TERMD_SANDBOX_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["TERMD_LISTEN"]["value"].startswith("127.0.0.1:")
    for probe in ("readinessProbe", "livenessProbe"):
        cmd = c[probe]["exec"]["command"]
        assert cmd[0] == "/opt/od_runtime/bin/termd-healthz" and cmd[1] == env["TERMD_LISTEN"]["value"]
    req = c["resources"]["requests"]
    assert set(req) == {"cpu", "memory"}
    (m,) = c["volumeMounts"]
    assert m["mountPath"] == "/run/secrets/termd_connect_token" and m["readOnly"] is True
    vols = {v["name"]: v for v in spec["volumes"]}
    assert vols[m["name"]]["secret"]["secretName"] == "termd-connect-token"
    assert vols[m["name"]]["secret"]["defaultMode"] == 0o400
    assert "ports" not in c   # nothing reaches into the sandbox
    # Prometheus' pod discovery: /metrics on termd's port
    for meta in (pod["metadata"], tpl["spec"]["podTemplate"]["metadata"]):
        a = meta["annotations"]
        assert a["prometheus.io/scrape"] == "true" and a["prometheus.io/path"] == "/metrics"
        assert a["prometheus.io/port"] == env["TERMD_LISTEN"]["value"].rsplit(":", 1)[1]


def test_termd_healthz_prints_links(termd_factory, backend, tmp_path):
    """The bundle's termd-healthz (share/bundle/multicall.c, built here with
    stand-in mains) says ok and each link's state."""
    import shutil
    from conftest import REPO
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    stub = tmp_path / "stub.c"
    stub.write_text("int termd_main(int c, char **v) { (void)c; (void)v; return 0; }\n"
                    "int termctl_main(int c, char **v) { (void)c; (void)v; return 0; }\n"
                    "int odattach_main(int c, char **v) { (void)c; (void)v; return 0; }\n")
    exe = tmp_path / "multicall"
    subprocess.run([cc, "-O1", "-Wall", "-Wextra", "-Werror", "-D_GNU_SOURCE", "-o", str(exe),
                    str(REPO / "share/bundle/multicall.c"), str(stub)], check=True, timeout=120)
    (tmp_path / "termd-healthz").symlink_to(exe)
    refused = "ws://127.0.0.1:%d/gone" % free_port()
    td = termd_factory(args=link_args(backend.url(), tmp_path) + ["--connect", refused], tcp=True)
    backend.accept()
    wait_for(lambda: health(td)["links"][1]["last_error"])
    r = subprocess.run([str(tmp_path / "termd-healthz"), td.url[len("ws://"):]],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "ok"
    assert lines[1] == "link %s connected" % backend.url()
    assert lines[2].startswith("link %s down: " % refused), lines


def test_stalled_peer_mid_command_replayed(termd_factory, tmp_path):
    """The backend sends a command and then stops reading (and answering
    pings): termd drops that link within 2 x --connect-ping, dials again,
    and the same id sent on the new link gets the command's answer; the
    command ran once."""
    import sys
    from conftest import REPO
    sys.path.insert(0, str(REPO / "tests" / "bench"))
    from bench_link import LinkEnd   # the backend's end of a link, blocking
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    srv.settimeout(15 * VALGRIND_FACTOR)
    port = srv.getsockname()[1]
    count = tmp_path / "count"
    args = {"command": "echo s >> %s; sleep 1; echo stalled-$((2*21))" % count}
    try:
        termd_factory(args=link_args("ws://127.0.0.1:%d/" % port, tmp_path,
                                     ["--connect-ping", "1"]))
        c1, _ = srv.accept()
        e1 = LinkEnd(c1)
        assert json.loads(e1.recv_msg())["observation"] == "hello"
        e1.call("run", args, "st-1")
        t0 = time.monotonic()
        # stalled from here: nothing read, no pong
        c2, _ = srv.accept()
        took = time.monotonic() - t0
        assert took <= 6.0 * VALGRIND_FACTOR, took
        e2 = LinkEnd(c2)
        assert json.loads(e2.recv_msg())["observation"] == "hello"
        a = e2.call("run", args, "st-1")
        assert "stalled-42" in a["content"], a
        time.sleep(0.3)
        assert count.read_text() == "s\n"
        c1.close()
        c2.close()
    finally:
        srv.close()


@pytest.mark.parametrize("args,msg", [
    (["--sandbox-id", "has space"], "--sandbox-id"),
    (["--sandbox-id", ""], "--sandbox-id"),
    (["--connect-backoff", "5:1"], "--connect-backoff"),
    (["--connect-backoff", "0:1"], "--connect-backoff"),
    (["--connect-backoff", "1"], "--connect-backoff"),
    (["--connect-ping", "0"], "--connect-ping"),
    (["--connect", "ws://127.0.0.1:9/", "--cacert", "/nonexistent/ca.pem"], "--cacert"),
])
def test_bad_link_options(tmp_path, args, msg):
    r = subprocess.run([TERMD_BIN] + args, capture_output=True, text=True,
                       env=base_env(tmp_path), timeout=30)
    assert r.returncode == 2 and msg in r.stderr, r.stderr


def test_a_connection_resets_the_backoff(termd_factory, tmp_path):
    """Attempts that fail grow the delay; one that connects starts it
    again: after a cut, the first redial comes --connect-backoff MIN later,
    not the delay the failures before had grown to."""
    lo, hi = 0.2, 8.0
    refuse = 5                         # delays grow to 0.2*2^5 = 6.4 s (jittered 3.2-6.4)
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.1)
    port = srv.getsockname()[1]
    accepts, cut = [], []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except socket.timeout:
                continue
            accepts.append(time.monotonic())
            if len(accepts) <= refuse or len(accepts) > refuse + 1:
                c.close()              # a failed attempt (and the redial after the cut)
                continue
            # this one connects: the handshake, termd's hello, then a cut
            c.settimeout(10)
            data = b""
            while b"\r\n\r\n" not in data:
                data += c.recv(4096)
            key = [ln.split(b":", 1)[1].strip() for ln in data.split(b"\r\n")
                   if ln.lower().startswith(b"sec-websocket-key:")][0]
            acc = wsserver.accept_key(key).encode()
            c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                      b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + acc +
                      b"\r\nSec-WebSocket-Protocol: " + SUB.encode() + b"\r\n\r\n")
            got = c.recv(65536)        # hello: termd is connected
            assert got, "no hello"
            time.sleep(0.2)
            cut.append(time.monotonic())
            c.close()
    th = threading.Thread(target=serve, daemon=True)
    th.start()
    try:
        td = termd_factory(args=link_args("ws://127.0.0.1:%d/" % port, tmp_path)[:-2] +
                           ["--connect-backoff", "%g:%g" % (lo, hi)])
        wait_for(lambda: len(accepts) >= refuse + 2, timeout=40)
        h = health(td)["links"][0]
    finally:
        stop.set()
        th.join(5)
        srv.close()
    assert cut, accepts
    before = accepts[refuse] - accepts[refuse - 1]   # the grown delay, for the record
    redial = accepts[refuse + 1] - cut[0]
    assert before >= 4 * lo * 0.9, (before, accepts)
    # MIN (0.2 s) after the cut, plus what a loaded machine adds (termd
    # seeing the close, its timer, the dial, this thread's accept): held to
    # 8 x MIN, half the least a delay not started again could be (the 6th
    # in a row: 0.2 * 2^5 = 6.4 s, jittered down to 3.2 s). Before: 3 x
    # MIN, 0.4 s for all that load adds.
    assert lo * 0.9 <= redial < 8 * lo, ("the first redial after a connection waited %.2f s "
                                         "(MIN %.1f; the grown delay was %.2f s)" % (redial, lo, before))
    assert h["attempts"] >= refuse + 2, h


# a TCP server that takes one connection, waits for the file argv[2] (a
# gate) before reading, then reads to the end, writing how many bytes it got
# to argv[3] as it goes
SINK = r"""
import os, socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(1)
c, _ = s.accept()
while not os.path.exists(sys.argv[2]):
    time.sleep(0.05)
got = 0
while True:
    d = c.recv(65536)
    if not d:
        break
    got += len(d)
    with open(sys.argv[3] + ".tmp", "w") as f:
        f.write(str(got))
    os.replace(sys.argv[3] + ".tmp", sys.argv[3])
"""


def test_link_proxy_carries_an_upload_bigger_than_it_holds(termd_factory, backend, tmp_path):
    """link.proxy: 8 MiB from the backend to a program that reads only
    later, and slowly (a 4 KiB receive buffer), arrive whole: termd holds
    about 1 MiB (the backend's frames wait), then writes it out as the
    program reads, over many turns, letting the backend go on each time.
    (The pty, plugin and preview proxy lost their wish to write again made
    in a WRITEABLE callback; here each frame from the backend asks again,
    and this test shows no stall.)"""
    td = termd_factory(args=link_args(backend.url(), tmp_path))
    link = backend.accept()
    sink, gate, count = tmp_path / "sink.py", tmp_path / "gate", tmp_path / "count"
    sink.write_text(SINK)
    port = free_port()
    link.send({"id": "r1", "action": "run", "args": {
        "command": "python3 %s %d %s %s >/dev/null 2>&1 &" % (sink, port, gate, count)}})
    assert link.answer("r1")["observation"] == "run"

    asked = [0]

    def listed():
        asked[0] += 1
        i = "l%d" % asked[0]   # a new id each time (a re-sent one gets the old answer)
        link.send({"id": i, "action": "ports.list"})
        return port in [p["port"] for p in link.answer(i)["extras"]["ports"]]
    wait_for(listed, 30)
    link.send({"id": "p1", "action": "link.proxy",
               "args": {"port": port, "url": backend.url("/relay/1")}})
    relay = backend.accept_raw()
    assert relay.subprotocol == PROXY and relay.path == "/relay/1"
    assert link.answer("p1")["observation"] == "link.proxy"
    size, chunk = 8 << 20, bytes(range(256)) * 256
    sent = {"n": 0}

    async def upload():
        for _ in range(size // len(chunk)):
            await relay.ws.send(chunk)
            sent["n"] += len(chunk)
    job = asyncio.run_coroutine_threadsafe(upload(), backend.loop)
    # termd takes what it holds and the kernel's buffers fill: the
    # backend's sending stops (a second unchanged) or it is all sent
    seen = {"v": -1, "since": 0.0}

    def stopped():
        v, now = sent["n"], time.monotonic()
        if v != seen["v"]:
            seen["v"], seen["since"] = v, now
            return v == size
        return v > 0 and now - seen["since"] >= 1.0
    wait_for(stopped, 60, 0.1)
    gate.write_text("")

    def got():
        try:
            return int(count.read_text() or 0)
        except (OSError, ValueError):
            return 0
    try:
        wait_for(lambda: got() >= size, 60, 0.1)
    except AssertionError:
        raise AssertionError("the program got %d of %d bytes (the backend sent %d)"
                             % (got(), size, sent["n"]))
    job.result(30)
    assert got() == size
    relay.close()
