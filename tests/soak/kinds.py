"""kinds.py — the soak's client kinds, one class per kind of client.

A kind is pluggable: a class with `name`, `period` (seconds between its
steps; the sum of 1/period is the soak's rate), `probe(ctx)` (None when its
door is in this build, else why not: a route probed, so a door still being
written is skipped, not failed), `setup()`, `step()` (one action, counted in
ctx.stats), `teardown()`. Add a door's kind by writing one and listing it in
KINDS; `make soak` runs whatever probes present."""

import base64
import json
import os
import socket
import struct
import sys
import threading
import time

import wsclient
import wsserver
from common import Conn, GONE


class Kind:
    name = "?"
    period = 1.0
    count = 1   # how many clients of this kind

    def __init__(self, ctx, idx=0):
        self.ctx = ctx
        self.idx = idx
        self.rng = ctx.rng("%s-%d" % (self.name, idx))
        self.flags = {}   # faults set these: {"drop_next": True, "stall": secs}

    @classmethod
    def probe(cls, ctx):
        return None

    def setup(self):
        pass

    def step(self):
        raise NotImplementedError

    def teardown(self):
        pass

    def ok(self, what):
        self.ctx.stats.count(what)

    def bad(self, what, obs):
        code = (obs.get("extras") or {}).get("code") if isinstance(obs, dict) else obs
        self.ctx.stats.error(what, code)
        return code


# ---------------------------------------------------------------- /events

class EventsRunner(Kind):
    """A client on its own pty session: short, long and big-output commands,
    a prompt answered with is_input, keys and screen, files and file
    actions. Every command appends one line to its id's ledger file."""
    name = "events"
    period = 1.0
    count = 2

    def setup(self):
        self.sess = "ev%d" % self.idx
        self.conn = Conn(self.ctx, "events%d" % self.idx)
        o = self.conn.call("session.open", {"name": self.sess})
        if o.get("observation") != "session.open":
            raise RuntimeError("session.open %s: %s" % (self.sess, json.dumps(o)[:300]))
        self.ctx.opts.setdefault("kept_sessions", []).append(self.sess)
        self.dir = os.path.join(self.ctx.tmp, "files%d" % self.idx)
        os.makedirs(self.dir, exist_ok=True)

    def run(self, cmd, what, drop=False, **kw):
        aid = self.ctx.new_id("r%d" % self.idx)
        args = {"command": self.ctx.ledger_cmd(aid, what, cmd), "session": self.sess}
        args.update(kw)
        obs = self.conn.call("run", args, aid=aid, drop_after=0.3 if drop else None)
        self.ctx.answered_once(aid)
        if obs.get("observation") != "run":
            self.bad(what, obs)
            return obs
        x = obs.get("extras") or {}
        if x.get("running"):      # timed out by its own rule: wait for the end
            for _ in range(20):
                o2 = self.conn.call("run", {"command": "", "session": self.sess, "timeout": 10})
                if o2.get("observation") != "run" or not (o2.get("extras") or {}).get("running"):
                    break
        self.ok(what)
        return obs

    def step(self):
        drop = self.flags.pop("drop_next", False)
        r = self.rng.random()
        if drop:
            t0 = time.monotonic()
            self.run("sleep 1; ", "run.long", drop=True, timeout=30)
            self.ctx.stats.fault("drop_mid_action", client=self.sess, cost=round(time.monotonic() - t0, 2))
        elif r < 0.30:
            self.run("echo short-%d; " % self.idx, "run.short")
        elif r < 0.40:
            self.run("sleep %d; " % self.rng.randint(2, 5), "run.long", timeout=30)
        elif r < 0.47:
            self.run("seq 1 %d | tail -c 100; seq 1 200000 >/dev/null; seq 1 30000; " % self.rng.randint(1000, 50000),
                     "run.big", max_output=20000)
        elif r < 0.55:
            self.prompt()
        elif r < 0.63:
            o = self.conn.call("keys", {"session": self.sess, "keys": ["echo keys-%d" % self.idx, "Enter"]})
            (self.ok if o.get("observation") in ("keys", "screen") else lambda w: self.bad(w, o))("keys")
            o = self.conn.call("screen", {"session": self.sess})
            (self.ok if o.get("observation") == "screen" else lambda w: self.bad(w, o))("screen")
        elif r < 0.85:
            self.files()
        else:
            self.fsops()

    def prompt(self):
        aid = self.ctx.new_id("p%d" % self.idx)
        cmd = self.ctx.ledger_cmd(aid, "run.prompt", "read -p 'name? ' n && echo got-$n; ")
        o = self.conn.call("run", {"command": cmd, "session": self.sess, "timeout": 20}, aid=aid)
        self.ctx.answered_once(aid)
        x = o.get("extras") or {}
        if o.get("observation") != "run" or not x.get("running"):
            self.bad("run.prompt", o if o.get("observation") != "run" else "not_waiting")
            self.run("", "run.short")
            return
        o2 = self.conn.call("run", {"command": "soak%d" % self.idx, "is_input": True,
                                    "session": self.sess, "timeout": 20})
        c = o2.get("content") or ""
        if o2.get("observation") == "run" and "got-soak%d" % self.idx in c:
            self.ok("run.prompt")
        else:
            self.bad("run.prompt", o2 if o2.get("observation") != "run" else "no_answer")

    def files(self):
        p = os.path.join(self.dir, "f%d.txt" % self.rng.randint(0, 9))
        body = "".join("line %d %d\n" % (self.idx, i) for i in range(self.rng.randint(1, 400)))
        o = self.conn.call("write", {"path": p, "content": body})
        if o.get("observation") != "write":
            self.bad("write", o)
            return
        self.ok("write")
        o = self.conn.call("read", {"path": p})
        if o.get("observation") == "read" and o.get("content") == body:
            self.ok("read")
        else:
            self.bad("read", o if o.get("observation") != "read" else "content_differs")
        o = self.conn.call("edit", {"command": "str_replace", "path": p, "old_str": "line %d 0\n" % self.idx,
                                    "new_str": "LINE %d 0\n" % self.idx})
        (self.ok if o.get("observation") == "edit" else lambda w: self.bad(w, o))("edit")

    def fsops(self):
        d = os.path.join(self.dir, "d%d" % self.rng.randint(0, 3))
        for action, args in (("file.mkdir", {"path": d}), ("file.stat", {"path": d}),
                             ("file.list", {"path": self.dir}), ("file.remove", {"path": d})):
            o = self.conn.call(action, args)
            if o.get("observation") == action:
                self.ok(action)
            else:
                self.bad(action, o)

    def teardown(self):
        try:
            self.conn.call("session.close", {"name": self.sess}, timeout=20)
        except Exception:
            pass
        self.conn.close()


class ProbeTrue(EventsRunner):
    """`run true` once a second on its own session: the latency figure."""
    name = "probe"
    period = 1.0
    count = 1

    def setup(self):
        self.sess = "probe"
        self.conn = Conn(self.ctx, "probe")
        self.conn.call("session.open", {"name": self.sess})
        self.ctx.opts.setdefault("kept_sessions", []).append(self.sess)

    def step(self):
        t0 = time.monotonic()
        o = self.conn.call("run", {"command": "true", "session": self.sess})
        dt = time.monotonic() - t0
        if o.get("observation") == "run" and (o.get("extras") or {}).get("exit_code") == 0:
            with self.ctx.stats.lock:
                self.ctx.stats.lat_true.append((t0, dt))
            self.ok("run.true")
        else:
            self.bad("run.true", o)


class SessionChurn(Kind):
    """Sessions opened and closed, pty and pipe, a command in each."""
    name = "sessions"
    period = 3.0

    def setup(self):
        self.conn = Conn(self.ctx, "sessions")
        self.n = 0

    def step(self):
        self.n += 1
        pipe = self.rng.random() < 0.5
        name = "churn%d" % self.n
        args = {"name": name}
        if pipe:
            args.update({"kind": "pipe", "command": "echo pipe-%d; sleep 1; echo err >&2" % self.n})
        o = self.conn.call("session.open", args)
        if o.get("observation") != "session.open":
            self.bad("session.open", o)
            return
        self.ok("session.open")
        if not pipe:
            o = self.conn.call("run", {"command": "echo churn", "session": name})
            (self.ok if o.get("observation") == "run" else lambda w: self.bad(w, o))("run.short")
        else:
            time.sleep(1.2)
        o = self.conn.call("session.close", {"name": name})
        (self.ok if o.get("observation") == "session.close" else lambda w: self.bad(w, o))("session.close")

    def teardown(self):
        self.conn.close()


class Watcher(Kind):
    """A watch on a folder, files made in it; every so often stopped and
    started again."""
    name = "watch"
    period = 4.0

    def setup(self):
        self.conn = Conn(self.ctx, "watch")
        self.dir = os.path.join(self.ctx.tmp, "watched")
        os.makedirs(self.dir, exist_ok=True)
        self.wid = None
        self.n = 0

    def step(self):
        if self.wid is None:
            o = self.conn.call("watch", {"path": self.dir, "recursive": True})
            if o.get("observation") != "watch":
                self.bad("watch", o)
                return
            self.ok("watch")
            self.wid = o["extras"]["watch"]
        self.n += 1
        p = os.path.join(self.dir, "w%d" % (self.n % 20))
        with open(p, "w") as f:
            f.write("x" * self.n)
        if self.rng.random() < 0.2:
            o = self.conn.call("watch.stop", {"watch": self.wid})
            (self.ok if o.get("observation") == "watch.stop" else lambda w: self.bad(w, o))("watch.stop")
            self.wid = None

    def teardown(self):
        if self.wid:
            try:
                self.conn.call("watch.stop", {"watch": self.wid}, timeout=10)
            except Exception:
                pass
        self.conn.close()


class Subscriber(Kind):
    """A subscriber: every seq it sees, in order, none twice. After a drop
    it comes back with `subscribe since` its last seq. The reference one
    (idx 0) is dropped only by upgrades; idx 1 by faults too; idx 2 is the
    one that stops reading for 20 s."""
    name = "subscriber"
    period = 0.0
    count = 3

    def setup(self):
        self.seqs = []          # every seq seen, in arrival order
        self.bytes = 0
        self.last = None
        self.gaps = []
        self.dups = 0
        self.events = []        # (t, obs name, extras) of port.* and session.limit
        self.resumes = 0
        self.lock = threading.Lock()
        self.ev = None
        self._subscribe()

    def _subscribe(self):
        t0 = time.monotonic()
        deadline = t0 + 60
        while True:
            try:
                self.ev = wsclient.Events(self.ctx.url, token=self.ctx.token, timeout=10)
                args = {} if self.last is None else {"since": self.last}
                self.ev.send_action("subscribe", args, id=self.ctx.new_id("sub%d" % self.idx))
                break
            except GONE:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        if self.last is not None:
            self.resumes += 1
            self.ctx.stats.reconnected("subscriber-resume", time.monotonic() - t0)

    def take(self, obs, n):
        self.bytes += n
        s = obs.get("seq")
        name = obs.get("observation")
        if name == "gap":
            self.gaps.append(obs.get("extras"))
            self.ctx.stats.problem("subscriber%d: gap %s" % (self.idx, obs.get("extras")))
        if name in ("port.open", "port.close", "session.limit", "session.exit", "watch.event"):
            with self.lock:
                self.events.append((time.monotonic(), name, obs.get("extras") or {}))
        if not isinstance(s, int) or name == "subscribe" and obs.get("cause") is not None and False:
            return
        if self.last is not None and s <= self.last:
            if name != "subscribe":
                self.dups += 1
                if self.dups <= 5:
                    self.ctx.stats.problem("subscriber%d: seq %d after %d (%s)" % (self.idx, s, self.last, name))
            return
        with self.lock:
            self.seqs.append(s)
        self.last = s

    def loop(self):
        """Runs instead of step(): reads until the soak stops."""
        while not self.ctx.stop.is_set():
            stall = self.flags.pop("stall", None)
            if stall:
                self.stall(stall)
                continue
            if self.flags.pop("drop", False):
                t0 = time.monotonic()
                self.ev.ws.abort()
                self._subscribe()
                self.ctx.stats.fault("drop_subscriber", client="subscriber%d" % self.idx,
                                     cost=round(time.monotonic() - t0, 2))
                continue
            try:
                op, payload = self.ev.ws.recv(0.5)
                self.take(json.loads(payload), len(payload))
            except (TimeoutError, socket.timeout):
                continue
            except GONE:
                self._subscribe()

    def stall(self, secs):
        """Stop reading for secs; then read on. If termd cut us meanwhile,
        resume with since. What the reference subscriber was sent
        meanwhile tells how much was waiting for us."""
        ref = self.ctx.opts["subscribers"][0]
        b0 = ref.bytes
        t0 = time.monotonic()
        time.sleep(secs)
        sent_meanwhile = ref.bytes - b0
        cut = False
        t1 = time.monotonic()
        try:
            while time.monotonic() - t1 < 30:
                op, payload = self.ev.ws.recv(0.5)
                self.take(json.loads(payload), len(payload))
        except (TimeoutError, socket.timeout):
            pass
        except GONE as e:
            cut = True
            code = getattr(e, "code", None)
            self._subscribe()
        self.ctx.stats.fault("stall_reader", secs=secs, cut=cut, close_code=code if cut else None,
                             bytes_for_it=sent_meanwhile, cost=round(time.monotonic() - t0 - secs, 2))

    def step(self):
        pass


# ---------------------------------------------------------------- /tty

class TtyViewer(Kind):
    """Viewers attaching and leaving: read-only to a random session,
    read-write to its own session typing a line."""
    name = "tty"
    period = 3.0

    def setup(self):
        c = Conn(self.ctx, "tty")
        c.call("session.open", {"name": "ttyrw"})
        c.close()
        self.ctx.opts.setdefault("kept_sessions", []).append("ttyrw")

    def step(self):
        rw = self.rng.random() < 0.4
        sess = "ttyrw" if rw else self.rng.choice(["main", "ev0", "ev1", "probe"])
        try:
            ws = wsclient.connect(self.ctx.url, "/tty/%s?mode=%s" % (sess, "rw" if rw else "ro"),
                                  wsclient.TTY_SUBPROTOCOL, self.ctx.token, timeout=10)
        except GONE as e:
            self.bad("tty.attach", type(e).__name__)
            return
        got = set()
        try:
            if rw:
                ws.send_binary(b"Iecho tty-%d\r" % self.rng.randint(0, 999))
            t_end = time.monotonic() + self.rng.uniform(0.5, 3)
            while time.monotonic() < t_end:
                try:
                    op, p = ws.recv(0.3)
                    if p:
                        got.add(p[:1])
                except (TimeoutError, socket.timeout):
                    pass
            if b"Z" in got and b"S" in got:
                self.ok("tty.rw" if rw else "tty.ro")
            else:
                self.bad("tty", "no_snapshot")
        except GONE:
            self.bad("tty", "dropped")
        finally:
            try:
                ws.close(timeout=1)
            except Exception:
                ws.abort()


# ---------------------------------------------------------------- HTTP doors

def envelope(msg, flags=0):
    data = json.dumps(msg).encode()
    return struct.pack(">BI", flags, len(data)) + data


def envelopes(data):
    out, off = [], 0
    while off + 5 <= len(data):
        flags, n = struct.unpack(">BI", data[off:off + 5])
        out.append((flags, json.loads(data[off + 5:off + 5 + n])))
        off += 5 + n
    return out


class E2b(Kind):
    """e2b's envd door: process.Process/Start streams, /files up and down."""
    name = "e2b"
    period = 2.0

    @classmethod
    def probe(cls, ctx):
        st, _, _ = ctx.http("POST", "/filesystem.Filesystem/Stat", json.dumps({"path": "/"}).encode(),
                            cls.hdr(ctx, "application/json"))
        return None if st == 200 else "POST /filesystem.Filesystem/Stat: %s" % st

    @staticmethod
    def hdr(ctx, ctype):
        return {"X-Access-Token": ctx.token, "Content-Type": ctype, "Connect-Protocol-Version": "1"}

    def step(self):
        if self.rng.random() < 0.6:
            tag = "e2b-%d" % self.rng.randint(0, 10 ** 6)
            msg = {"process": {"cmd": "/bin/sh", "args": ["-c", "echo %s; sleep 0.%d" % (tag, self.rng.randint(0, 5))]}}
            st, _, body = self.ctx.http("POST", "/process.Process/Start", envelope(msg),
                                        self.hdr(self.ctx, "application/connect+json"))
            if st != 200:
                self.bad("e2b.start", "http%d" % st)
                return
            envs = envelopes(body)
            out = "".join(base64.b64decode(m.get("event", {}).get("data", {}).get("stdout", "") or "").decode(
                "utf-8", "replace") for f, m in envs if f == 0)
            if tag in out and envs and envs[-1][0] == 2 and not envs[-1][1].get("error"):
                self.ok("e2b.start")
            else:
                self.bad("e2b.start", "stream:%s" % json.dumps(envs[-2:])[:200])
        else:
            where = self.ctx.opts.get("upload_dir") if self.rng.random() < 0.3 else None
            where = where or os.path.join(self.ctx.tmp, "e2bfiles")
            p = os.path.join(where, "u%d.bin" % self.rng.randint(0, 5))
            data = os.urandom(self.rng.randint(1, 200000))
            st, _, body = self.ctx.http("POST", "/files?path=%s" % p, data,
                                        {"X-Access-Token": self.ctx.token,
                                         "Content-Type": "application/octet-stream"})
            if st != 200:
                self.bad("e2b.upload", "http%d" % st)
                return
            self.ok("e2b.upload")
            st, _, got = self.ctx.http("GET", "/files?path=%s" % p, b"", {"X-Access-Token": self.ctx.token})
            if st == 200 and got == data:
                self.ok("e2b.download")
            else:
                self.bad("e2b.download", "http%d" % st if st != 200 else "differs")


class OpenHandsV0(Kind):
    """OpenHands V0's action execution server: /execute_action run, /list_files."""
    name = "openhands"
    period = 3.0

    @classmethod
    def probe(cls, ctx):
        st, _, body = ctx.http("GET", "/alive")
        return None if st == 200 and b"ok" in body else "GET /alive: %s" % st

    def step(self):
        h = {"X-Session-API-Key": self.ctx.token, "Content-Type": "application/json"}
        if self.rng.random() < 0.7:
            tag = "oh-%d" % self.rng.randint(0, 10 ** 6)
            body = {"action": {"action": "run", "args": {"command": "echo %s" % tag, "blocking": False}}}
            st, _, b = self.ctx.http("POST", "/execute_action", json.dumps(body).encode(), h, timeout=90)
            try:
                o = json.loads(b)
            except ValueError:
                o = {}
            if st == 200 and tag in (o.get("content") or "") and o.get("observation") == "run":
                self.ok("openhands.run")
            else:
                self.bad("openhands.run", "http%d:%s" % (st, (o.get("content") or "")[:80]))
        else:
            st, _, b = self.ctx.http("POST", "/list_files", json.dumps({"path": "."}).encode(), h)
            (self.ok if st == 200 else lambda w: self.bad(w, "http%d" % st))("openhands.list_files")


class Preview(Kind):
    """Previews through /proxy/<port>/ to a web server a session runs."""
    name = "preview"
    period = 2.0

    def setup(self):
        self.port = self.ctx.opts["web_port"]

    def step(self):
        st, _, body = self.ctx.http("GET", "/proxy/%d/" % self.port)
        if st == 200 and b"soak-page" in body:
            self.ok("preview")
        else:
            self.bad("preview", "http%d" % st)


# ---------------------------------------------------------------- the link

class LinkEnd:
    """The backend's end of one dial-out link (bench_link's, with timeouts)."""

    def __init__(self, conn):
        self.s = conn
        self.s.settimeout(30)
        r = wsserver.read_head(self.s)
        if r is None:
            raise EOFError("EOF from termd")
        _, h, rest = r
        self.rd = wsserver.Reader(self.s, rest)
        self.s.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                        "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n"
                        "Sec-WebSocket-Protocol: termd.events.v1\r\n\r\n"
                        % wsserver.accept_key(h["sec-websocket-key"])).encode())

    def recv_msg(self):
        parts = []
        while True:
            b0, op, payload = self.rd.frame()
            if op == 0x9:
                self.s.sendall(wsserver.frame(0xA, payload))
                continue
            if op == 0xA:
                continue
            if op == 0x8:
                raise EOFError("termd closed the link")
            parts.append(payload)
            if b0 & 0x80:
                return b"".join(parts)

    def call(self, action, args, aid):
        self.s.sendall(wsserver.frame(0x1, json.dumps({"id": aid, "action": action, "args": args}).encode()))
        while True:
            obs = json.loads(self.recv_msg())
            if obs.get("cause") == aid:
                return obs


class LinkBackend:
    """The backend termd dials (--connect): a thread accepting from the
    soak's start, each connection's handshake and hello taken at once, the
    newest one current. away(secs) closes it and stops listening for secs."""

    def __init__(self, ctx, lsock):
        self.ctx = ctx
        self.lsock = lsock
        self.port = lsock.getsockname()[1]
        self.end = None
        self.cv = threading.Condition()
        self.accepted = 0
        self.th = threading.Thread(target=self.loop, name="link-backend", daemon=True)
        self.th.start()

    def loop(self):
        while not self.ctx.stop.is_set():
            ls = self.lsock
            if ls is None:
                time.sleep(0.1)
                continue
            try:
                ls.settimeout(0.5)
                conn, _ = ls.accept()
            except (socket.timeout, TimeoutError):
                continue
            except OSError:
                time.sleep(0.1)
                continue
            try:
                end = LinkEnd(conn)
                hello = json.loads(end.recv_msg())
                if hello.get("observation") != "hello":
                    raise EOFError("first frame %r" % hello)
            except (OSError, EOFError, ValueError) as e:
                self.ctx.stats.note("link backend: a connection without its hello: %r" % e)
                conn.close()
                continue
            with self.cv:
                if self.end:
                    self.end.s.close()
                self.end = end
                self.accepted += 1
                self.cv.notify_all()

    def current(self, timeout=60):
        with self.cv:
            self.cv.wait_for(lambda: self.end is not None or self.ctx.stop.is_set(), timeout)
            return self.end

    def lost(self, end):
        with self.cv:
            if self.end is end:
                self.end = None
        try:
            end.s.close()
        except OSError:
            pass

    def away(self, secs):
        with self.cv:
            ls, self.lsock = self.lsock, None
            if self.end:
                self.end.s.close()
                self.end = None
        ls.close()
        time.sleep(secs)
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", self.port))
        ls.listen(4)
        n = self.accepted
        t1 = time.monotonic()
        self.lsock = ls
        with self.cv:
            self.cv.wait_for(lambda: self.accepted > n or self.ctx.stop.is_set(), 60)
        return time.monotonic() - t1

    def close(self):
        with self.cv:
            if self.end:
                self.end.s.close()
            if self.lsock:
                self.lsock.close()


class Link(Kind):
    """Commands over termd's dial-out link (LinkBackend). The fault
    `link_away` closes the backend and stops listening for a while; termd
    must dial again, and a command sent meanwhile is re-sent with its id."""
    name = "link"
    period = 2.0

    def setup(self):
        self.be = self.ctx.opts["link_backend"]

    def step(self):
        away = self.flags.pop("away", None)
        if away:
            n = self.be.accepted
            cost = self.be.away(away)
            if self.be.accepted == n:
                st, _, body = self.ctx.http("GET", "/healthz")
                self.ctx.stats.problem("link_away: termd did not dial again within 60 s of the backend's return;"
                                       " /healthz links: %s" % json.dumps(json.loads(body).get("links")))
            self.ctx.stats.fault("link_away", secs=away, cost=round(cost, 2), redialed=self.be.accepted > n)
            self.ctx.stats.reconnected("link-redial", cost)
        aid = self.ctx.new_id("link")
        args = {"command": self.ctx.ledger_cmd(aid, "link.run", "echo link; ")}
        for attempt in range(3):
            end = self.be.current()
            if end is None:
                raise TimeoutError("link: no connection from termd within 60 s")
            try:
                o = end.call("run", args, aid)
                break
            except (OSError, EOFError, ValueError) as e:
                # an upgrade takes the link down too: termd dials again, the same id is re-sent
                self.be.lost(end)
                self.ctx.stats.note("link: re-sending %s after %r" % (aid, e))
        else:
            raise TimeoutError("link: %s not answered in 3 tries" % aid)
        self.ctx.answered_once(aid)
        (self.ok if o.get("observation") == "run" else lambda w: self.bad(w, o))("link.run")


# ---------------------------------------------------------------- the newer doors

def multipart(files, fields=None):
    """A multipart/form-data body: files {field: (filename, bytes)}, fields
    {name: text}; returns (body, headers)."""
    b = "soakboundary%s" % os.urandom(8).hex()
    parts = []
    for k, v in (fields or {}).items():
        parts.append(("--%s\r\nContent-Disposition: form-data; name=\"%s\"\r\n\r\n%s\r\n" % (b, k, v)).encode())
    for k, (fn, data) in files.items():
        parts.append(("--%s\r\nContent-Disposition: form-data; name=\"%s\"; filename=\"%s\"\r\n"
                      "Content-Type: application/octet-stream\r\n\r\n" % (b, k, fn)).encode() + data + b"\r\n")
    parts.append(("--%s--\r\n" % b).encode())
    return b"".join(parts), {"Content-Type": "multipart/form-data; boundary=" + b}


def as_json(body):
    try:
        return json.loads(body)
    except ValueError:
        return None


class DoorKind(Kind):
    """A kind of the newer doors: each error is also noted with its time,
    to be laid beside the faults' times (they are rare)."""

    def bad(self, what, obs):
        self.ctx.stats.note("%s%d: %s: %.200s" % (self.name, self.idx, what, obs))
        return Kind.bad(self, what, obs)


class OpenHandsV1(DoorKind):
    """OpenHands V1's agent-server API (termd/door/ohv1/) on termd's own
    listener: execute_bash_command (exit code and output checked),
    start_bash_command then its BashOutputs polled through
    bash_events/search until the last carries the exit code (pieces in
    order, output whole), file upload and download (bytes round-trip).
    Every command appends to its id's ledger file."""
    name = "ohv1"
    period = 3.0

    @classmethod
    def probe(cls, ctx):
        st, _, body = ctx.http("GET", "/api/bash/bash_events/search?limit=1", b"", cls.hdr(ctx))
        return None if st == 200 and b"items" in body else "GET /api/bash/bash_events/search: %s" % st

    @staticmethod
    def hdr(ctx, ctype=None):
        h = {"X-Session-API-Key": ctx.token}
        if ctype:
            h["Content-Type"] = ctype
        return h

    def post(self, path, obj, timeout=90):
        st, _, b = self.ctx.http("POST", path, json.dumps(obj).encode(), self.hdr(self.ctx, "application/json"),
                                 timeout=timeout)
        return st, as_json(b)

    def step(self):
        r = self.rng.random()
        if r < 0.4:
            self.execute()
        elif r < 0.7:
            self.start_and_poll()
        else:
            self.files()

    def execute(self):
        aid = self.ctx.new_id("v1x")
        tag = "v1-%d" % self.rng.randint(0, 10 ** 6)
        code = self.rng.choice([0, 0, 0, 3])
        cmd = self.ctx.ledger_cmd(aid, "ohv1.execute", "echo %s; " % tag) + "; exit %d" % code
        st, ev = self.post("/api/bash/execute_bash_command", {"command": cmd, "timeout": 60})
        if st == 200 and isinstance(ev, dict) and ev.get("exit_code") != -1:   # -1: not started, or ended by termd
            self.ctx.answered_once(aid)
        if st == 200 and isinstance(ev, dict) and ev.get("kind") == "BashOutput" \
                and ev.get("exit_code") == code and ev.get("stdout") == tag + "\n":
            self.ok("ohv1.execute")
        else:
            self.bad("ohv1.execute", "http%d:%.120s" % (st, json.dumps(ev)))

    def start_and_poll(self):
        aid = self.ctx.new_id("v1s")
        tag = "v1s-%d" % self.rng.randint(0, 10 ** 6)
        n = self.rng.randint(1, 3000)
        cmd = self.ctx.ledger_cmd(aid, "ohv1.start", "echo %s; sleep 0.%d; seq 1 %d; " % (tag, self.rng.randint(0, 5), n))
        st, cev = self.post("/api/bash/start_bash_command", {"command": cmd, "timeout": 60})
        if st != 200 or not isinstance(cev, dict) or cev.get("kind") != "BashCommand":
            self.bad("ohv1.start", "http%d:%.120s" % (st, json.dumps(cev)))
            return
        deadline = time.monotonic() + 90
        outs = []
        while time.monotonic() < deadline:
            # every piece of the command, a page of 100 at a time
            outs, page = [], None
            while True:
                q = "/api/bash/bash_events/search?command_id__eq=%s&kind__eq=BashOutput&limit=100" % cev["id"]
                if page:
                    q += "&page_id=%s" % page
                st, _, b = self.ctx.http("GET", q, b"", self.hdr(self.ctx))
                res = as_json(b) if st == 200 else None
                if not isinstance(res, dict):
                    break
                outs.extend(res.get("items") or [])
                page = res.get("next_page_id")
                if not page:
                    break
            if outs and outs[-1].get("exit_code") is not None:
                break
            time.sleep(0.25)
        else:
            self.bad("ohv1.start", "no_end")
            return
        if outs[-1].get("exit_code") != -1:   # -1: not started, or ended by termd
            self.ctx.answered_once(aid)
        out = "".join(o.get("stdout") or "" for o in outs)
        want = tag + "\n" + "".join("%d\n" % i for i in range(1, n + 1))
        orders = [o.get("order") for o in outs]
        if outs[-1].get("exit_code") == 0 and out == want and orders == list(range(len(outs))):
            self.ok("ohv1.start")
        else:
            self.bad("ohv1.start", "exit=%s orders_ok=%s out_ok=%s" % (
                outs[-1].get("exit_code"), orders == list(range(len(outs))), out == want))

    def files(self):
        d = os.path.join(self.ctx.tmp, "ohv1files")
        p = os.path.join(d, "sub%d" % self.rng.randint(0, 2), "v%d.bin" % self.rng.randint(0, 5))
        data = os.urandom(self.rng.randint(1, 200000))
        body, h = multipart({"file": ("v.bin", data)})
        h.update(self.hdr(self.ctx))
        st, _, b = self.ctx.http("POST", "/api/file/upload?path=%s" % p, body, h)
        if st != 200 or as_json(b) != {"success": True}:
            self.bad("ohv1.upload", "http%d:%.80s" % (st, b))
            return
        self.ok("ohv1.upload")
        st, _, got = self.ctx.http("GET", "/api/file/download?path=%s" % p, b"", self.hdr(self.ctx))
        if st == 200 and got == data:
            self.ok("ohv1.download")
        else:
            self.bad("ohv1.download", "http%d" % st if st != 200 else "differs")


class SweRex(DoorKind):
    """SWE-ReX's remote runtime (termd/door/swerex/) on its own listener,
    in plain HTTP as RemoteRuntime sends it: a bash session (create, runs
    checked for output and exit code, closed and made again now and then),
    /execute with a shell, write_file/read_file and /upload round-trips.
    Runs append to the ledger; now and then a run's X-Request-ID is sent
    again, which must replay the answer without running it a second time."""
    name = "swerex"
    period = 4.0

    @classmethod
    def probe(cls, ctx):
        url = ctx.opts.get("swerex_url")
        if not url:
            return "no swerex listener"
        st, _, body = wsclient.http_request(url, "/", "GET", {"X-API-Key": ctx.token}, b"", 30)
        return None if st == 200 and b"hello world" in body else "GET / on the swerex listener: %s" % st

    def req(self, path, obj=None, raw=None, headers=None, rid=None, timeout=90):
        h = {"X-API-Key": self.ctx.token, "X-Request-ID": rid or os.urandom(16).hex()}
        if raw is None:
            raw = json.dumps(obj).encode()
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        st, _, b = wsclient.http_request(self.url, path, "POST", h, raw, timeout)
        return st, as_json(b), b

    def setup(self):
        self.url = self.ctx.opts["swerex_url"]
        self.sess = "soak%d" % self.idx
        self.n = 0
        self.open_session()

    def session_lost(self):
        """The door says the session does not exist though nothing closed
        it. If termd's pty session is still there (create_session refused
        with 'exists'), that is a problem: the door forgot a session termd
        kept (across an upgrade). Either way the session is made again,
        closing termd's leftover through /events first."""
        if self.open_session(quiet=True):
            self.ctx.stats.note("swerex: session %s gone and made again" % self.sess)
            return
        st, o, _ = self.last_create
        if "exists" not in json.dumps(o):
            # refused for another reason (termd out of fds, say): nothing
            # kept that the door forgot; the next step makes it again
            self.ctx.stats.note("swerex: session %s not made again: %d %.160s" % (self.sess, st, json.dumps(o)))
            return
        try:
            up = json.loads(self.ctx.http("GET", "/healthz")[2]).get("upgraded")
        except GONE + (ValueError,):
            up = "?"
        self.ctx.stats.problem("swerex: session %s unknown to the door, but termd still has %s (create_session:"
                               " %d %.160s); upgrades in place so far: %s" % (
                                   self.sess, "swerex-" + self.sess, st, json.dumps(o), up))
        c = Conn(self.ctx, "swerex-fix")
        try:
            c.call("session.close", {"name": "swerex-" + self.sess}, timeout=30)
            deadline = time.monotonic() + 30   # gone from session.list before it is made again
            while time.monotonic() < deadline:
                o = c.call("session.list", {}, timeout=30)
                if "swerex-" + self.sess not in [x.get("name") for x in (o.get("extras") or {}).get("sessions", [])]:
                    break
                time.sleep(0.2)
        finally:
            c.close()
        self.open_session()

    def open_session(self, quiet=False):
        st, o, _ = self.last_create = self.req("/create_session", {"session": self.sess, "startup_source": [], "session_type": "bash",
                                                "startup_timeout": 10.0})
        if st == 200 and isinstance(o, dict) and o.get("session_type") == "bash":
            self.ok("swerex.create_session")
            return True
        if quiet:
            return False
        self.bad("swerex.create_session", "http%d:%.120s" % (st, json.dumps(o)))
        return False

    def step(self):
        self.n += 1
        r = self.rng.random()
        if self.n % 25 == 0:
            st, o, _ = self.req("/close_session", {"session": self.sess, "session_type": "bash"})
            if st == 200:
                self.ok("swerex.close_session")
            else:
                self.bad("swerex.close_session", "http%d:%.160s" % (st, json.dumps(o)))
            if not self.open_session(quiet=True):
                self.session_lost()
        elif r < 0.45:
            self.run()
        elif r < 0.65:
            self.execute()
        else:
            self.files()

    def run(self):
        aid = self.ctx.new_id("swr")
        tag = "swr-%d" % self.rng.randint(0, 10 ** 6)
        code = self.rng.choice([0, 0, 0, 3])
        cmd = self.ctx.ledger_cmd(aid, "swerex.run", "echo %s; " % tag) + "; (exit %d)" % code
        rid = os.urandom(16).hex()
        body = {"command": cmd, "session": self.sess, "timeout": 60.0, "is_interactive_command": False,
                "is_interactive_quit": False, "check": "silent", "error_msg": "", "expect": [],
                "action_type": "bash"}
        st, o, raw = self.req("/run_in_session", body, rid=rid)
        if st == 200:
            self.ctx.answered_once(aid)
        if st == 511 and "SessionDoesNotExistError" in json.dumps(o):
            self.bad("swerex.run", "SessionDoesNotExistError")
            self.session_lost()
            return
        if not (st == 200 and isinstance(o, dict) and o.get("exit_code") == code
                and (o.get("output") or "").strip() == tag):
            self.bad("swerex.run", "http%d:%.160s" % (st, json.dumps(o)))
            return
        self.ok("swerex.run")
        if self.rng.random() < 0.2:
            # the same X-Request-ID again: the stored answer, nothing run (the ledger tells)
            st2, _, raw2 = self.req("/run_in_session", body, rid=rid)
            if st2 == 200 and raw2 == raw:
                self.ok("swerex.replay")
            else:
                self.bad("swerex.replay", "http%d" % st2 if st2 != 200 else "differs")

    def execute(self):
        aid = self.ctx.new_id("swx")
        tag = "swx-%d" % self.rng.randint(0, 10 ** 6)
        cmd = self.ctx.ledger_cmd(aid, "swerex.execute", "echo %s; echo e >&2; " % tag)
        st, o, _ = self.req("/execute", {"command": cmd, "shell": True, "timeout": 60.0, "check": False,
                                         "error_msg": "", "env": None, "cwd": None,
                                         "merge_output_streams": False})
        if st == 200:
            self.ctx.answered_once(aid)
        if st == 200 and isinstance(o, dict) and o.get("exit_code") == 0 and o.get("stdout") == tag + "\n" \
                and o.get("stderr") == "e\n":
            self.ok("swerex.execute")
        else:
            self.bad("swerex.execute", "http%d:%.160s" % (st, json.dumps(o)))

    def files(self):
        d = os.path.join(self.ctx.tmp, "swerexfiles")
        p = os.path.join(d, "x%d.txt" % self.rng.randint(0, 5))
        if self.rng.random() < 0.5:
            text = "".join("line %d %s\n" % (i, "ü" * (i % 3)) for i in range(self.rng.randint(1, 2000)))
            st, o, _ = self.req("/write_file", {"path": p, "content": text})
            if st != 200:
                self.bad("swerex.write_file", "http%d:%.120s" % (st, json.dumps(o)))
                return
            self.ok("swerex.write_file")
        else:
            data = os.urandom(self.rng.randint(1, 100000))
            text = base64.b64encode(data).decode()
            body, h = multipart({"file": ("x.txt", text.encode())}, {"target_path": p, "unzip": "false"})
            st, o, _ = self.req("/upload", raw=body, headers=h)
            if st != 200:
                self.bad("swerex.upload", "http%d:%.120s" % (st, json.dumps(o)))
                return
            self.ok("swerex.upload")
        st, o, _ = self.req("/read_file", {"path": p, "encoding": None, "errors": None})
        if st == 200 and isinstance(o, dict) and o.get("content") == text:
            self.ok("swerex.read_file")
        else:
            self.bad("swerex.read_file", "http%d" % st if st != 200 else "differs")

    def teardown(self):
        try:
            self.req("/close_session", {"session": self.sess, "session_type": "bash"}, timeout=20)
        except GONE:
            pass


class AgentSandbox(DoorKind):
    """agent-sandbox's in-pod runtime (termd/door/sandbox/) on its own
    listener (no credential, loopback): /execute (no shell: `sh -c` given
    as words; stdout and exit code checked, a ledger line each), /upload
    then /download/ (bytes round-trip), /exists/ and /list/."""
    name = "sandbox"
    period = 4.5

    @classmethod
    def probe(cls, ctx):
        url = ctx.opts.get("sandbox_url")
        if not url:
            return "no agent-sandbox listener"
        st, _, body = wsclient.http_request(url, "/", "GET", None, b"", 30)
        return None if st == 200 and b"Sandbox Runtime is active" in body else "GET / on the agent-sandbox listener: %s" % st

    def setup(self):
        self.url = self.ctx.opts["sandbox_url"]
        self.base = self.ctx.opts["sandbox_base"]

    def http(self, method, path, body=b"", headers=None, timeout=90):
        return wsclient.http_request(self.url, path, method, headers, body, timeout)

    def step(self):
        if self.rng.random() < 0.5:
            self.execute()
        else:
            self.files()

    def execute(self):
        aid = self.ctx.new_id("sbx")
        tag = "sbx-%d" % self.rng.randint(0, 10 ** 6)
        code = self.rng.choice([0, 0, 0, 3])
        inner = self.ctx.ledger_cmd(aid, "sandbox.execute", "echo %s; " % tag) + "; exit %d" % code
        st, _, b = self.http("POST", "/execute", json.dumps({"command": "sh -c '%s'" % inner}).encode(),
                             {"Content-Type": "application/json"})
        o = as_json(b)
        # 200 with "Failed to execute command: ..." is upstream's answer for
        # a command that never started (e.g. termd shutting down): not run
        failed = isinstance(o, dict) and str(o.get("stderr", "")).startswith("Failed to execute command")
        if st == 200 and not failed:
            self.ctx.answered_once(aid)
        if st == 200 and o == {"stdout": tag + "\n", "stderr": "", "exit_code": code}:
            self.ok("sandbox.execute")
        else:
            self.bad("sandbox.execute", "http%d:%.160s" % (st, b))

    def files(self):
        name = "s%d-%d.bin" % (self.idx, self.rng.randint(0, 5))
        data = os.urandom(self.rng.randint(1, 200000))
        body, h = multipart({"file": (name, data)})
        st, _, b = self.http("POST", "/upload", body, h)
        if st != 200 or name not in (as_json(b) or {}).get("message", ""):
            self.bad("sandbox.upload", "http%d:%.80s" % (st, b))
            return
        self.ok("sandbox.upload")
        st, _, got = self.http("GET", "/download/" + name)
        if st == 200 and got == data:
            self.ok("sandbox.download")
        else:
            self.bad("sandbox.download", "http%d" % st if st != 200 else "differs")
        st, _, b = self.http("GET", "/exists/" + name)
        (self.ok if st == 200 and as_json(b) == {"path": name, "exists": True}
         else lambda w: self.bad(w, "http%d:%.80s" % (st, b)))("sandbox.exists")
        if self.rng.random() < 0.3:
            st, _, b = self.http("GET", "/list/")
            lst = as_json(b) if st == 200 else None
            ent = [e for e in (lst or []) if isinstance(e, dict) and e.get("name") == name]
            if ent and ent[0].get("type") == "file" and ent[0].get("size") == len(data):
                self.ok("sandbox.list")
            else:
                self.bad("sandbox.list", "http%d:%.80s" % (st, b))


KINDS = [EventsRunner, ProbeTrue, SessionChurn, Watcher, Subscriber, TtyViewer, E2b, OpenHandsV0,
         OpenHandsV1, SweRex, AgentSandbox, Preview, Link]
