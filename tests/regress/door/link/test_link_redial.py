"""Issue 52: the dial-out link is dialed again after every upgrade in
place, with the backend up, away and back, or taking the connection and
never answering the WebSocket upgrade: such a dial is given up after twice
--connect-ping (lws puts no deadline on it; the link waited for good) and
the next attempt made."""

import json
import os
import signal
import socket
import time

from conftest import VALGRIND_FACTOR
import wsserver
from test_link import health, link_args, wait_for

T = 60 * VALGRIND_FACTOR


class RawBackend:
    """A listening socket on loopback; each of termd's dials accepted by
    the test, answered (or not) by hand."""

    def __init__(self):
        self.port = None
        self.ls = None
        self.listen()
        self.held = []

    def listen(self):
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", self.port or 0))
        ls.listen(8)
        self.port = ls.getsockname()[1]
        self.ls = ls

    def away(self):
        """Stop listening and drop every connection: termd's dials are refused."""
        self.ls.close()
        self.ls = None
        self.drop()

    def drop(self):
        for c in self.held:
            c.close()
        self.held = []

    def url(self):
        return "ws://127.0.0.1:%d/termd" % self.port

    def accept(self):
        """The next dial, its request read (nothing answered yet)."""
        self.ls.settimeout(T)
        c, _ = self.ls.accept()
        c.settimeout(T)
        self.held.append(c)
        r = wsserver.read_head(c)
        assert r is not None, "termd closed its dial before its request"
        return c, r

    def answer(self, c, r):
        """101 and termd's hello: the link is up."""
        _, h, rest = r
        c.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                   "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n"
                   "Sec-WebSocket-Protocol: termd.events.v1\r\n\r\n"
                   % wsserver.accept_key(h["sec-websocket-key"])).encode())
        rd = wsserver.Reader(c, rest)
        while True:
            b0, op, payload = rd.frame()
            if op == 0x1:
                hello = json.loads(payload)
                assert hello.get("observation") == "hello", hello
                return hello

    def up(self):
        c, r = self.accept()
        return self.answer(c, r)

    def close(self):
        self.drop()
        if self.ls:
            self.ls.close()


def upgraded(td):
    """/healthz's count of upgrades, None while termd execs (the request cut)"""
    try:
        return health(td).get("upgraded")
    except (OSError, TimeoutError):
        return None


def start(termd_factory, tmp_path, b):
    args = link_args(b.url(), tmp_path, ["--connect-ping", "1"])
    args[args.index("--connect-backoff") + 1] = "0.1:0.5"
    return termd_factory(args=args)


def test_silent_backend_given_up_and_dialed_again(termd_factory, tmp_path):
    """The backend takes the connection and never answers: termd dials
    again (after 2 s here), says why on /healthz, and the link comes up."""
    b = RawBackend()
    try:
        td = start(termd_factory, tmp_path, b)
        b.accept()                      # taken, never answered
        b.up()                          # the next dial: answered
        lk = wait_for(lambda: [x for x in health(td)["links"] if x["connected"]], T)[0]
        # given up by termd's deadline (lws's own idle hang-up, later and
        # coarser, is the fallback: a dial closed unseen counts too)
        assert "no WebSocket handshake" in (lk.get("last_error") or ""), lk
    finally:
        b.close()


def test_dialed_again_after_every_upgrade(termd_factory, tmp_path):
    """Upgrades with the backend up, with the backend away (it comes back
    after the upgrade), and with the new image's dial taken and not
    answered: each time the link comes up again on the new image."""
    b = RawBackend()
    try:
        td = start(termd_factory, tmp_path, b)
        b.up()
        n = 0
        for i in range(3):
            # the backend up
            os.kill(td.proc.pid, signal.SIGUSR2)
            b.up()
            n += 1
            wait_for(lambda: upgraded(td) == n, T)
            # the backend away during the upgrade, back after it
            b.away()
            os.kill(td.proc.pid, signal.SIGUSR2)
            n += 1
            wait_for(lambda: upgraded(td) == n, T)
            b.listen()
            b.up()
            # the new image's dial taken and never answered
            os.kill(td.proc.pid, signal.SIGUSR2)
            b.accept()
            b.up()
            n += 1
            wait_for(lambda: upgraded(td) == n, T)
        wait_for(lambda: all(x["connected"] for x in health(td)["links"]), T)
    finally:
        b.close()
