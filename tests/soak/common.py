"""common.py — the soak's shared pieces: the context every client kind and
fault gets (termd's URL and token, the seeded random source, the ledger,
the counters), and Conn, an /events connection that reconnects and re-sends
the same id after a drop (the way the Python package and termctl do)."""

import json
import os
import re
import random
import threading
import time

import wsclient

GONE = (wsclient.ConnectionClosed, wsclient.WSError, wsclient.HandshakeError, OSError,
        EOFError, AssertionError)


class Stats:
    """Counters the figures at the end are made of; every method takes the
    lock (clients are threads)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.actions = {}        # kind -> answered count
        self.errors = {}         # kind:code -> count
        self.problems = []       # strings: a check that failed
        self.reconnects = {}     # cause -> [seconds]
        self.faults = {}         # fault kind -> [dict]
        self.notes = []          # strings: things seen, not failures
        self.lat_true = []       # (t, seconds) of `run true`
        self.samples = []        # (t, rss_kib, fds, threads)
        self.metrics = []        # (t, {name: value}) from /metrics, with each sample
        self.health = []         # (t, seconds)

    def count(self, kind, n=1):
        with self.lock:
            self.actions[kind] = self.actions.get(kind, 0) + n

    def error(self, kind, code):
        with self.lock:
            k = "%s:%s" % (kind, code)
            self.errors[k] = self.errors.get(k, 0) + 1

    def problem(self, msg):
        with self.lock:
            self.problems.append("%.1fs %s" % (time.monotonic() - T0[0], msg))
        print("SOAK PROBLEM: %s" % msg, flush=True)

    def note(self, msg):
        with self.lock:
            self.notes.append("%.1fs %s" % (time.monotonic() - T0[0], msg))
        print("soak: %s" % msg, flush=True)

    def reconnected(self, cause, secs):
        with self.lock:
            self.reconnects.setdefault(cause, []).append(secs)

    def fault(self, kind, **info):
        with self.lock:
            info["t"] = round(time.monotonic() - T0[0], 1)
            self.faults.setdefault(kind, []).append(info)


T0 = [time.monotonic()]


class Ctx:
    def __init__(self, url, token, pid, tmp, seed, stop, stats, opts):
        self.url = url
        self.token = token
        self.pid = pid
        self.tmp = tmp
        self.seed = seed
        self.stop = stop            # threading.Event: the soak is over
        self.stats = stats
        self.opts = opts            # dict: things the faults and kinds share (paths, ports)
        self.ledger = os.path.join(tmp, "ledger")
        os.makedirs(self.ledger, exist_ok=True)
        self._n = 0
        self._lock = threading.Lock()
        self.sent = {}              # id -> kind, for runs that append to the ledger
        self.answered = {}          # id -> count of final answers seen
        self.upgrading = threading.Event()  # set while an upgrade is in flight

    def rng(self, name):
        return random.Random("%s:%s" % (self.seed, name))

    def new_id(self, tag):
        with self._lock:
            self._n += 1
            return "s%s-%s-%d" % (self.seed, tag, self._n)

    def auth(self):
        return {"Authorization": "Bearer " + self.token}

    def http(self, method, path, body=b"", headers=None, timeout=30.0):
        h = self.auth()
        h.update(headers or {})
        return wsclient.http_request(self.url, path, method, h, body, timeout)

    def ledger_cmd(self, aid, kind, cmd=""):
        """A shell command that appends one line to the id's ledger file."""
        with self._lock:
            self.sent[aid] = kind
        return "%secho x >> %s/%s" % (cmd, self.ledger, aid)

    def answered_once(self, aid):
        with self._lock:
            self.answered[aid] = self.answered.get(aid, 0) + 1


class Conn:
    """One /events connection that comes back: call() sends an action and
    returns its answer, reconnecting and re-sending the same id when the
    connection goes (an upgrade's 1012, a fault's drop). Answers to ids it
    already took are duplicates, and are counted as problems."""

    def __init__(self, ctx, kind, subscribe=False):
        self.ctx = ctx
        self.kind = kind
        self.ev = None
        self.done_ids = set()
        self.last_close = None

    def connect(self, why="start", deadline=None):
        t0 = time.monotonic()
        deadline = deadline or t0 + 60
        last = None
        while time.monotonic() < deadline:
            try:
                self.ev = wsclient.Events(self.ctx.url, token=self.ctx.token, timeout=10)
                if why != "start":
                    self.ctx.stats.reconnected(why, time.monotonic() - t0)
                return self.ev
            except GONE as e:
                last = e
                time.sleep(0.1)
        raise RuntimeError("%s: no connection within 60 s: %r" % (self.kind, last))

    def drop(self):
        if self.ev is not None:
            try:
                self.ev.ws.abort()
            except Exception:
                pass
        self.ev = None

    def _check_others(self):
        if self.ev is None:
            return
        keep = []
        for o in self.ev.others:
            c = o.get("cause")
            if c is not None and c in self.done_ids:
                self.ctx.stats.problem("%s: a second answer to %s: %.200s" % (self.kind, c, json.dumps(o)))
            else:
                keep.append(o)
        self.ev.others[:] = keep[-200:]

    def call(self, action, args=None, aid=None, timeout=120.0, drop_after=None):
        """drop_after: seconds after sending to cut the connection (a fault:
        the client gone mid-action), then reconnect and re-send."""
        aid = aid or self.ctx.new_id(self.kind)
        deadline = time.monotonic() + timeout
        why = None
        while True:
            if time.monotonic() > deadline:
                raise TimeoutError("%s: no answer to %s (%s) within %.0fs" % (self.kind, aid, action, timeout))
            try:
                if self.ev is None:
                    self.connect(why or "start", deadline)
                self.ev.send_action(action, args, id=aid)
                if drop_after is not None:
                    time.sleep(drop_after)
                    drop_after = None
                    self.drop()
                    why = "fault-drop"
                    continue
                obs = self.ev.wait_for(lambda o: o.get("cause") == aid, max(0.1, deadline - time.monotonic()))
                self.done_ids.add(aid)
                self._check_others()
                return obs
            except TimeoutError:
                raise
            except wsclient.ConnectionClosed as e:
                self.last_close = e.code
                why = "close-%s" % e.code
                self.drop()
                time.sleep(0.05)
            except GONE as e:
                why = "drop-%s" % type(e).__name__
                self.drop()
                time.sleep(0.05)

    def close(self):
        if self.ev is not None:
            try:
                self.ev.close()
            except Exception:
                pass
        self.ev = None


def _socket_kinds():
    """inode -> kind of every socket in this network namespace"""
    kinds = {}
    for f, k in (("unix", "unix"), ("tcp", "tcp"), ("tcp6", "tcp"), ("udp", "udp"),
                 ("udp6", "udp"), ("netlink", "netlink")):
        try:
            with open("/proc/net/" + f) as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        for r in rows:
            c = r.split()
            ino = c[6] if k == "unix" else c[9] if k != "netlink" else c[-1]
            if k == "unix":
                # unix: state 01 listening (flags 00010000), else connected;
                # the path if it has one
                kind = "unix listen" if c[3] == "00010000" else "unix"
                if len(c) > 7:
                    kind += " " + os.path.basename(c[7])
            elif k == "tcp":
                kind = "tcp listen" if c[3] == "0A" else "tcp"
            else:
                kind = k
            kinds[ino] = kind
    return kinds


def fd_kinds(pid):
    """pid's open fds counted by kind (sockets by family and state, pipes,
    anon inodes, ptys, files by folder), most first: a report line"""
    socks = None
    out = {}
    try:
        names = os.listdir("/proc/%d/fd" % pid)
    except OSError:
        return "(gone)"
    for n in names:
        try:
            t = os.readlink("/proc/%d/fd/%s" % (pid, n))
        except OSError:
            continue
        if t.startswith("socket:["):
            if socks is None:
                socks = _socket_kinds()
            k = "socket " + socks.get(t[8:-1], "?")
        elif t.startswith("pipe:"):
            k = "pipe"
        elif t.startswith("anon_inode:"):
            k = t
        elif t.startswith("/dev/pts/"):
            k = "/dev/pts/*"
        elif t.startswith("/sys/fs/cgroup/"):
            # a session's (or spare's) cgroup file: s-main-1/pids.events
            k = "cgroup " + re.sub(r"\d+$", "N", os.path.basename(os.path.dirname(t))) \
                + "/" + os.path.basename(t)
        elif t.startswith("/"):
            k = t if t.startswith("/dev/") else os.path.dirname(t) + "/*"
        else:
            k = t
        out[k] = out.get(k, 0) + 1
    return ", ".join("%s: %d" % kv for kv in sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


def client_conns(pid):
    """How many TCP connections clients hold open to pid's listeners (the
    established sockets whose local port is one pid listens on)."""
    mine = set()
    try:
        for n in os.listdir("/proc/%d/fd" % pid):
            try:
                t = os.readlink("/proc/%d/fd/%s" % (pid, n))
            except OSError:
                continue
            if t.startswith("socket:["):
                mine.add(t[8:-1])
    except OSError:
        return 0
    rows = []
    for f in ("tcp", "tcp6"):
        try:
            with open("/proc/net/" + f) as fh:
                rows += [r.split() for r in fh.read().splitlines()[1:]]
        except OSError:
            pass
    ports = {r[1].rsplit(":", 1)[1] for r in rows if r[9] in mine and r[3] == "0A"}
    return sum(1 for r in rows if r[9] in mine and r[3] == "01" and r[1].rsplit(":", 1)[1] in ports)
