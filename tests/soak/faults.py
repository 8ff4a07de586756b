"""faults.py — the soak's faults, on a schedule: upgrades in place every
few minutes, and one other fault every so often, in a seeded order. Each
records what it did and what it cost in stats.faults; what it finds wrong
goes to stats.problem. cleanup() undoes whatever a fault left behind (a
stopped child, a lowered RLIMIT_NOFILE, a filled disk)."""

import json
import os
import resource
import signal
import subprocess
import threading
import time

import wsclient
from common import Conn, GONE, fd_kinds

STATE = {"rlimit": None, "stopped": None, "filler": None}


def sessions(conn):
    o = conn.call("session.list", {}, timeout=60)
    return {s["name"]: s for s in (o.get("extras") or {}).get("sessions", [])}


def healthz(s):
    st, _, body = wsclient.http_request(s.url, "/healthz", timeout=30)
    return json.loads(body) if st == 200 else {}


def ref_events(s, since_t, names, pred, timeout):
    """Wait for the reference subscriber to have seen each event named in
    names (with pred(name, extras)) after since_t; return {name: t}."""
    subs = s.ctx.opts.get("subscribers") or []
    if not subs:
        return {}
    ref = subs[0]
    found = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(found) < len(names):
        with ref.lock:
            evs = list(ref.events)
        for t, n, x in evs:
            if t >= since_t and n in names and n not in found and pred(n, x):
                found[n] = t
        time.sleep(0.2)
    return found


# ---------------------------------------------------------------- faults

def alive(pid):
    """pid runs (not a zombie)"""
    try:
        with open("/proc/%d/stat" % int(pid)) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, TypeError, ValueError, IndexError):
        return False


def upgrade(s):
    c = Conn(s.ctx, "upgrader")
    before = sessions(c)
    h0 = healthz(s)
    kept = s.ctx.opts.get("kept_sessions", [])
    t0 = time.monotonic()
    refused = 0
    while True:
        r = s.termctl("upgrade", timeout=120)
        # termd's designed refusal while file work is in flight: try again
        if r.returncode == 0 or "try again in a moment" not in r.stderr or refused >= 40:
            break
        refused += 1
        time.sleep(0.25)
    dt = time.monotonic() - t0
    c.drop()
    after = sessions(c)
    h1 = healthz(s)
    info = {"cost": round(dt, 2), "termctl_rc": r.returncode, "sessions_before": len(before),
            "sessions_after": len(after), "upgraded": h1.get("upgraded"),
            "refused_busy": refused}
    if r.returncode != 0:
        s.stats.problem("termctl upgrade: status %d: %s %s" % (r.returncode, r.stdout[-300:], r.stderr[-300:]))
    if s.termd.poll() is not None:
        s.stats.problem("termd gone after an upgrade")
    for name in ["main"] + kept:
        if name not in before:
            continue
        if name not in after:
            s.stats.problem("upgrade lost session %s" % name)
        elif before[name].get("pid") != after[name].get("pid"):
            s.stats.problem("upgrade changed %s's pid %s -> %s" % (name, before[name].get("pid"), after[name].get("pid")))
    # a session gone across the upgrade is lost if its process still runs
    # (the soak's own churn closes sessions at any time; a door's per-command
    # session is closed by its door once its command ended)
    lost = [n for n in before if n not in after and not n.startswith(("churn", "mem", "bomb", "listen"))
            and alive(before[n].get("pid"))]
    if r.returncode != 0 or lost:
        s.stats.note("upgrade: termctl said %r %r" % (r.stdout[-200:], r.stderr[-200:]))
    if lost:
        s.stats.problem("upgrade lost sessions %s" % lost)
    if h0.get("upgraded") is not None and h1.get("upgraded") != h0.get("upgraded") + 1:
        s.stats.problem("healthz upgraded %s -> %s" % (h0.get("upgraded"), h1.get("upgraded")))
    c.close()
    s.stats.fault("upgrade", **info)


def drop_mid_action(s):
    evs = s.ctx.opts["by_kind"].get("events", [])
    if evs:
        k = evs[int(time.monotonic()) % len(evs)]
        k.flags["drop_next"] = True


def drop_subscriber(s):
    subs = s.ctx.opts.get("subscribers") or []
    if len(subs) > 1:
        subs[1].flags["drop"] = True


def stall_reader(s):
    subs = s.ctx.opts.get("subscribers") or []
    if len(subs) > 2 and "stall" not in subs[2].flags:
        subs[2].flags["stall"] = 20


def sigstop_child(s):
    p = s.ctx.opts.get("child")
    if p is None or p.poll() is not None:
        return
    STATE["stopped"] = p.pid
    os.kill(p.pid, signal.SIGSTOP)
    time.sleep(10)
    os.kill(p.pid, signal.SIGCONT)
    STATE["stopped"] = None
    s.stats.fault("sigstop_child", secs=10)


def mem_limit(s):
    c = Conn(s.ctx, "memfault")
    name = "mem%d" % int(time.monotonic())
    o = c.call("session.open", {"name": name, "limits": {"memory": "48M"}})
    lim = ((o.get("extras") or {}).get("limits") or {}).get("memory")
    if o.get("observation") != "session.open" or not lim:
        s.stats.fault("mem_limit", skipped="no memory limit here: %s" % json.dumps(o)[:200])
        if o.get("observation") == "session.open":
            c.call("session.close", {"name": name})
        c.close()
        return
    t0 = time.monotonic()
    o = c.call("run", {"command": "/usr/bin/python3 -c 'b=[bytearray(1<<20) for _ in range(300)]'; echo rc=$?",
                       "session": name, "timeout": 30})
    got = ref_events(s, t0, ("session.limit",), lambda n, x: x.get("session") == name, 10)
    out = (o.get("content") or "")[-200:]
    c.call("session.close", {"name": name})
    c.close()
    if "session.limit" not in got:
        s.stats.problem("mem_limit: no session.limit event for %s (run said %r)" % (name, out))
    s.stats.fault("mem_limit", event="session.limit" in got, output=out[-60:],
                  cost=round(time.monotonic() - t0, 2))


def fork_bomb(s):
    c = Conn(s.ctx, "bombfault")
    name = "bomb%d" % int(time.monotonic())
    o = c.call("session.open", {"name": name, "limits": {"pids": 40}})
    lim = ((o.get("extras") or {}).get("limits") or {}).get("pids")
    if o.get("observation") != "session.open" or lim != 40:
        # never a fork bomb without a pids limit: this machine is shared
        s.stats.fault("fork_bomb", skipped="no pids limit here: %s" % json.dumps(o)[:200])
        if o.get("observation") == "session.open":
            c.call("session.close", {"name": name})
        c.close()
        return
    t0 = time.monotonic()
    c.call("run", {"command": "b(){ b | b & }; b", "session": name, "timeout": 3})
    time.sleep(3)
    got = ref_events(s, t0, ("session.limit",), lambda n, x: x.get("session") == name, 5)
    o = c.call("session.signal", {"session": name, "signal": "KILL", "tree": True})
    sig_ok = o.get("observation") == "session.signal"
    o = c.call("session.close", {"name": name})
    t1 = time.monotonic()
    gone = False
    while time.monotonic() - t1 < 15:
        if name not in sessions(c):
            gone = True
            break
        time.sleep(0.5)
    c.close()
    if not gone:
        s.stats.problem("fork_bomb: session %s still listed 15 s after session.close" % name)
    if not sig_ok:
        s.stats.problem("fork_bomb: session.signal tree: %s" % json.dumps(o)[:300])
    s.stats.fault("fork_bomb", limit_event="session.limit" in got, closed=gone,
                  cost=round(time.monotonic() - t0, 2))


def listen_stop(s):
    c = Conn(s.ctx, "listenfault")
    port = s_free_port()
    name = "listen%d" % port
    t0 = time.monotonic()
    o = c.call("session.open", {"name": name, "kind": "pipe", "command":
                                "timeout 4 /usr/bin/python3 -m http.server %d --bind 127.0.0.1" % port})
    got = ref_events(s, t0, ("port.open", "port.close"), lambda n, x: x.get("port") == port, 20)
    c.call("session.close", {"name": name})
    c.close()
    if "port.close" not in got:
        s.stats.problem("listen_stop: port %d: no port.close (%s seen)" % (port, sorted(got)))
    if "port.open" not in got:
        s.stats.problem("listen_stop: port %d: no port.open" % port)
    s.stats.fault("listen_stop", port=port, open="port.open" in got, close="port.close" in got,
                  close_after_open=round(got["port.close"] - got["port.open"], 2)
                  if len(got) == 2 else None)


def accept_errors(s):
    n = 0
    with open(s.log, "rb") as f:
        for line in f:
            if b"accept: errno" in line:
                n += 1
    return n


def listen_across_upgrade(s):
    """Open question 2: a port.close missed across an upgrade? A listener
    killed while termd upgrades (between the old one's last port scan and
    the new one's first), then port.close must still come."""
    c = Conn(s.ctx, "listenup")
    port = s_free_port()
    name = "listenup%d" % port
    t0 = time.monotonic()
    c.call("session.open", {"name": name, "kind": "pipe", "command":
                            "exec /usr/bin/python3 -m http.server %d --bind 127.0.0.1" % port})
    got = ref_events(s, t0, ("port.open",), lambda n, x: x.get("port") == port, 10)
    o = c.call("ports.list", {})
    pid = [p.get("pid") for p in (o.get("extras") or {}).get("ports", []) if p.get("port") == port]
    c.close()
    if not pid:
        s.stats.fault("listen_across_upgrade", skipped="port %d not listed" % port)
        return
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERMD_")}
    env.update({"TERMD_URL": s.url, "TERMD_TOKEN": s.token, "HOME": s.home})
    t_up = time.monotonic()
    up = subprocess.Popen([s.ctx.opts["termctl"], "upgrade"], env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    time.sleep(s.ctx.rng("lu%d" % port).uniform(0.0, 0.3))
    try:
        os.kill(pid[0], signal.SIGKILL)
    except OSError:
        pass
    t_kill = time.monotonic() - t_up
    rc = up.wait(120)
    got.update(ref_events(s, t0, ("port.close",), lambda n, x: x.get("port") == port, 15))
    c = Conn(s.ctx, "listenup")
    c.call("session.close", {"name": name})
    c.close()
    if "port.close" not in got:
        s.stats.problem("listen_across_upgrade: port %d killed %.2fs into an upgrade: no port.close (%s seen)"
                        % (port, t_kill, sorted(got)))
    s.stats.fault("listen_across_upgrade", port=port, open="port.open" in got, close="port.close" in got,
                  killed_after=round(t_kill, 2), termctl_rc=rc)


def s_free_port():
    import socket
    x = socket.socket()
    x.bind(("127.0.0.1", 0))
    p = x.getsockname()[1]
    x.close()
    return p


def link_away(s):
    links = s.ctx.opts["by_kind"].get("link", [])
    if links:
        links[0].flags["away"] = 8


def disk_full(s):
    if not s.ctx.opts.get("mounted"):
        s.stats.fault("disk_full", skipped="no tmpfs")
        return
    full = s.ctx.opts["full"]
    filler = os.path.join(full, "filler")
    STATE["filler"] = filler
    subprocess.run(["dd", "if=/dev/zero", "of=" + filler, "bs=64k"], capture_output=True)
    t0 = time.monotonic()
    c = Conn(s.ctx, "diskfault")
    # a recorded session printing while the disk is full
    c.call("run", {"command": "seq 1 20000 | tail -1", "session": "ev0" if "ev0" in sessions(c) else "main"})
    o = c.call("write", {"path": os.path.join(s.ctx.opts["upload_dir"], "w.txt"), "content": "x" * 100000})
    write_code = (o.get("extras") or {}).get("code") if o.get("observation") == "error" else "ok"
    st, _, body = s.ctx.http("POST", "/files?path=%s" % os.path.join(s.ctx.opts["upload_dir"], "up.bin"),
                             os.urandom(200000), {"X-Access-Token": s.ctx.token,
                                                  "Content-Type": "application/octet-stream"})
    time.sleep(5)
    os.unlink(filler)
    STATE["filler"] = None
    for n in os.listdir(s.ctx.opts["upload_dir"]):
        try:
            os.unlink(os.path.join(s.ctx.opts["upload_dir"], n))
        except OSError:
            pass
    o = c.call("write", {"path": os.path.join(s.ctx.opts["upload_dir"], "w.txt"), "content": "after"})
    if o.get("observation") != "write":
        s.stats.problem("disk_full: write after the disk was freed: %s" % json.dumps(o)[:300])
    c.close()
    if write_code == "ok":
        s.stats.problem("disk_full: a write to a full disk answered ok")
    s.stats.fault("disk_full", write=write_code, upload_status=st, cost=round(time.monotonic() - t0, 2))


def fd_exhaust(s):
    pid = s.pid
    soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    n = len(os.listdir("/proc/%d/fd" % pid))
    STATE["rlimit"] = (pid, soft, hard)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (n + 3, hard))
    t0 = time.monotonic()
    fails = 0
    held = []
    for _ in range(6):
        try:
            held.append(wsclient.Events(s.url, token=s.ctx.token, timeout=5))
        except GONE:
            fails += 1
        time.sleep(0.5)
    lines0 = accept_errors(s)
    low_fds = fd_kinds(pid)   # what holds them while the limit is low
    t_h = time.monotonic()
    try:
        # (10 s: the limit stays low while it waits)
        st, _, _ = wsclient.http_request(s.url, "/healthz", timeout=10)
    except GONE as e:
        st = repr(e)
    health_low = round(time.monotonic() - t_h, 2)
    time.sleep(1)
    spin = accept_errors(s) - lines0
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
    STATE["rlimit"] = None
    for e in held:
        try:
            e.ws.abort()
        except Exception:
            pass
    t1 = time.monotonic()
    ok = False
    while time.monotonic() - t1 < 30:
        try:
            ev = wsclient.Events(s.url, token=s.ctx.token, timeout=5)
            o = ev.call("ping", timeout=10)
            ev.close()
            ok = o.get("observation") == "pong"
            if ok:
                break
        except GONE:
            time.sleep(0.2)
    if not ok:
        s.stats.problem("fd_exhaust: no working connection 30 s after the limit was restored")
    if spin > 1000:
        s.stats.problem("fd_exhaust: termd logged %d 'lws: accept: errno' lines in %.1f s (a busy accept loop)"
                        % (spin, time.monotonic() - t_h))
    s.stats.fault("fd_exhaust", fds=n, connects_refused=fails, connects_ok=len(held),
                  healthz_while_low=health_low, healthz_status=st, accept_error_lines=spin,
                  fds_while_low=low_fds,
                  cost=round(time.monotonic() - t1, 2))


FAULTS = [drop_mid_action, drop_subscriber, stall_reader, sigstop_child, mem_limit, fork_bomb,
          listen_stop, link_away, disk_full, fd_exhaust, listen_across_upgrade]


class Schedule:
    def __init__(self, soak, upgrade_every, fault_every):
        self.s = soak
        # SOAK_SKIP_FAULTS=a,b: leave those faults out (names as in FAULTS)
        skip = set(x for x in os.environ.get("SOAK_SKIP_FAULTS", "").split(",") if x)
        self.faults = [f for f in FAULTS if f.__name__ not in skip]
        self.upgrade_every = upgrade_every
        self.fault_every = fault_every
        self.rng = soak.ctx.rng("faults")

    def run(self, seconds):
        s = self.s
        t0 = time.monotonic()
        end = t0 + seconds
        next_up = t0 + self.upgrade_every
        next_f = t0 + self.fault_every
        order = []
        while time.monotonic() < end and not s.stop.is_set():
            now = time.monotonic()
            try:
                if now >= next_up and now < end - 20:
                    upgrade(s)
                    next_up = time.monotonic() + self.upgrade_every
                elif now >= next_f and now < end - 25 and self.faults:
                    if not order:
                        order = list(self.faults)
                        self.rng.shuffle(order)
                    f = order.pop()
                    s.stats.note("fault %s" % f.__name__)
                    f(s)
                    next_f = time.monotonic() + self.fault_every
            except Exception as e:  # noqa: BLE001
                s.stats.problem("fault runner: %r" % e)
            if s.termd.poll() is not None:
                s.stats.problem("termd exited (status %s)" % s.termd.returncode)
                return
            time.sleep(0.5)


def cleanup(s):
    if STATE["rlimit"]:
        pid, soft, hard = STATE["rlimit"]
        try:
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
        except OSError:
            pass
    if STATE["stopped"]:
        try:
            os.kill(STATE["stopped"], signal.SIGCONT)
        except OSError:
            pass
    if STATE["filler"]:
        try:
            os.unlink(STATE["filler"])
        except OSError:
            pass
