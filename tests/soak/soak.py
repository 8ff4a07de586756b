#!/usr/bin/python3
"""soak.py — issue 52, "Hours, not minutes": one termd for SOAK_MINUTES
(default 60) under a seeded (SOAK_SEED), modest, mixed workload through
every door at once (kinds.py: /events runs, keys, screen, files, file
actions, watches, sessions opened and closed, subscribers, /tty viewers,
e2b's envd, OpenHands V0 and V1, SWE-ReX and agent-sandbox on listeners of
their own, previews, a dial-out link, a client in a process of its own),
with faults on a schedule (faults below), checks along the way and at the
end, and figures printed at the end. Exit status 0 when no check failed.

Environment: TERMD_BIN, TERMCTL_BIN (default build/), SOAK_MINUTES (float),
SOAK_SEED, SOAK_RATE_SCALE (multiplies every kind's rate; default 1, about
8.5 actions/s), SOAK_UPGRADE_EVERY (seconds, default 180, or a third of a
short run), SOAK_SKIP_FAULTS (names, comma-separated), SOAK_FAULT_EVERY (seconds between faults, default 8 for runs
under 10 minutes, else 30), SOAK_ASAN=1 (termd is a sanitizer build: its
report files are looked for), SOAK_KEEP=1 (keep the scratch folder).

Loopback only; everything it starts it ends, and what it mounts it
unmounts, in finally blocks. Runs niced (make soak)."""

import json
import os
import random
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "regress"))

import wsclient  # noqa: E402
from common import Conn, Ctx, Stats, T0, GONE, fd_kinds, client_conns  # noqa: E402
from tdtest import stub_children  # noqa: E402
import kinds  # noqa: E402
import faults  # noqa: E402

TERMD_BIN = os.environ.get("TERMD_BIN") or os.path.join(ROOT, "build", "termd")
TERMCTL_BIN = os.environ.get("TERMCTL_BIN") or os.path.join(ROOT, "build", "termctl")
PY = "/usr/bin/python3"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def proc_figures(pid):
    rss = fds = thr = 0
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("Threads:"):
                thr = int(line.split()[1])
    fds = len(os.listdir("/proc/%d/fd" % pid))
    return rss, fds, thr


def healthz_time(ctx):
    t0 = time.monotonic()
    st, _, _ = wsclient.http_request(ctx.url, "/healthz", "GET", None, b"", 30)
    dt = time.monotonic() - t0
    return dt if st == 200 else None


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))]


def slope(points):
    """Least-squares slope of [(t, y)], per second."""
    n = len(points)
    if n < 3:
        return 0.0
    mt = sum(t for t, _ in points) / n
    my = sum(y for _, y in points) / n
    den = sum((t - mt) ** 2 for t, _ in points)
    return sum((t - mt) * (y - my) for t, y in points) / den if den else 0.0


# ---------------------------------------------------------------- the child

def child_main(url, token, ledger, seed, seconds, out):
    """A client in a process of its own (the SIGSTOP/SIGCONT fault's
    target): short runs with the ledger, re-sending after drops."""
    stop = threading.Event()
    stats = Stats()
    ctx = Ctx(url, token, 0, os.path.dirname(ledger), seed + "c", stop, stats, {})
    c = Conn(ctx, "child")
    c.call("session.open", {"name": "child"})
    end = time.monotonic() + seconds
    sent = []
    while time.monotonic() < end:
        aid = ctx.new_id("child")
        t0 = time.monotonic()
        o = c.call("run", {"command": ctx.ledger_cmd(aid, "child", "echo child; "), "session": "child"},
                   aid=aid, timeout=120)
        sent.append([aid, o.get("observation"), round(time.monotonic() - t0, 3)])
        with open(out, "w") as f:
            json.dump({"sent": sent, "reconnects": stats.reconnects, "problems": stats.problems}, f)
        time.sleep(1.0)
    c.call("session.close", {"name": "child"})
    c.close()


# ---------------------------------------------------------------- the soak

class Soak:
    def __init__(self):
        self.minutes = float(os.environ.get("SOAK_MINUTES", "60"))
        self.seconds = self.minutes * 60
        self.seed = os.environ.get("SOAK_SEED", "52")
        self.scale = float(os.environ.get("SOAK_RATE_SCALE", "1"))
        self.asan = os.environ.get("SOAK_ASAN") == "1"
        short = self.seconds < 600
        self.upgrade_every = float(os.environ.get("SOAK_UPGRADE_EVERY") or (max(50, self.seconds / 3.2) if short else 180))
        self.fault_every = float(os.environ.get("SOAK_FAULT_EVERY") or (8 if short else 30))
        self.tmp = tempfile.mkdtemp(prefix="soak-", dir="/tmp")
        self.stats = Stats()
        self.stop = threading.Event()
        self.procs = []
        self.mounts = []
        self.threads = []
        self.clients = []
        self.termd = None

    # -- termd -----------------------------------------------------------

    def start_termd(self):
        self.token = "soak-token-%s-0123456789abcdef" % self.seed
        tokf = os.path.join(self.tmp, "token")
        with open(tokf, "w") as f:
            f.write(self.token + "\n")
        os.chmod(tokf, 0o600)
        self.port = free_port()
        self.link_lsock = socket.socket()
        self.link_lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.link_lsock.bind(("127.0.0.1", 0))
        self.link_lsock.listen(4)
        self.link_port = self.link_lsock.getsockname()[1]
        self.home = os.path.join(self.tmp, "home")
        os.makedirs(self.home)
        self.full = os.path.join(self.tmp, "full")      # the small disk: --record and uploads
        os.makedirs(self.full)
        self.record = os.path.join(self.full, "record")
        self.mounted = False
        if os.geteuid() == 0:
            r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m,mode=0755", "soak52", self.full],
                               capture_output=True, text=True)
            if r.returncode == 0:
                self.mounted = True
                self.mounts.append(self.full)
            else:
                self.stats.note("no tmpfs (%s): the disk-full fault is skipped" % r.stderr.strip())
        os.makedirs(self.record, exist_ok=True)
        os.chmod(self.record, 0o700)
        os.makedirs(os.path.join(self.full, "uploads"), exist_ok=True)
        # the doors that need a listener of their own (PROTOCOL.md §14):
        # SWE-ReX (X-API-Key = the token) and agent-sandbox (no credential;
        # loopback), with its base folder
        self.swerex_port = free_port()
        self.sandbox_port = free_port()
        self.sandbox_base = os.path.join(self.tmp, "sandbox")
        os.makedirs(self.sandbox_base)
        argv = [TERMD_BIN, "--listen", "127.0.0.1:%d" % self.port, "--token-file", tokf,
                "--listen", "127.0.0.1:%d,api=swerex" % self.swerex_port,
                "--listen", "127.0.0.1:%d,api=agent-sandbox" % self.sandbox_port,
                "--sandbox-base", self.sandbox_base,
                "--cwd", self.home, "--record", self.record,
                "--connect", "ws://127.0.0.1:%d/termd" % self.link_port, "--connect-token-file", tokf,
                "--sandbox-id", "soak", "--connect-backoff", "0.2:2",
                "--event-log", os.path.join(self.tmp, "events.jsonl")]
        env = {k: v for k, v in os.environ.items() if not k.startswith("TERMD_")}
        env["HOME"] = self.home
        if self.asan:
            env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=1:log_path=%s/asan" % self.tmp
            env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1:log_path=%s/ubsan" % self.tmp
        self.log = os.path.join(self.tmp, "termd.log")
        self.logf = open(self.log, "wb")
        self.termd = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.logf, stderr=subprocess.STDOUT,
                                      env=env, cwd=self.home, start_new_session=True)
        self.url = "ws://127.0.0.1:%d" % self.port
        deadline = time.monotonic() + 60
        while True:
            if self.termd.poll() is not None:
                raise RuntimeError("termd exited at start: %s" % open(self.log).read()[-2000:])
            try:
                st, _, _ = wsclient.http_request(self.url, "/healthz", timeout=5)
                if st == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("termd did not answer /healthz")
            time.sleep(0.1)
        self.pid = self.termd.pid
        self.link_backend = None
        self.ctx = Ctx(self.url, self.token, self.pid, self.tmp, self.seed, self.stop, self.stats,
                       {"link_port": self.link_port,
                        "upload_dir": os.path.join(self.full, "uploads"), "full": self.full,
                        "mounted": self.mounted, "termctl": TERMCTL_BIN, "home": self.home,
                        "swerex_url": "ws://127.0.0.1:%d" % self.swerex_port,
                        "sandbox_url": "ws://127.0.0.1:%d" % self.sandbox_port,
                        "sandbox_base": self.sandbox_base})
        self.link_backend = kinds.LinkBackend(self.ctx, self.link_lsock)
        self.ctx.opts["link_backend"] = self.link_backend

    def termctl(self, *args, timeout=120):
        env = {k: v for k, v in os.environ.items() if not k.startswith("TERMD_")}
        env.update({"TERMD_URL": self.url, "TERMD_TOKEN": self.token, "HOME": self.home})
        return subprocess.run([TERMCTL_BIN] + list(args), env=env, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    # -- the sampler -----------------------------------------------------

    def sample(self):
        t = time.monotonic()
        try:
            rss, fds, thr = proc_figures(self.pid)
        except OSError:
            return
        m = {}
        try:
            st, _, body = self.ctx.http("GET", "/metrics", timeout=30)
            for line in body.decode("utf-8", "replace").splitlines():
                for name in ("termd_events_retained", "termd_events_retained_bytes", "termd_connections",
                             "termd_sessions", "termd_events_total", "termd_heap_in_use_bytes",
                             "termd_ohv1_events_kept", "termd_ohv1_events_kept_bytes"):
                    if line.startswith(name + " "):
                        m[name] = float(line.split()[1])
        except GONE + (ValueError,):
            pass
        with self.stats.lock:
            self.stats.samples.append((t, rss, fds, thr))
            self.stats.metrics.append((t, m))
        low = faults.STATE["rlimit"] is not None
        try:
            dt = healthz_time(self.ctx)
        except GONE as e:
            dt = None
            self.stats.note("healthz failed: %r" % e)
        # a probe while fd_exhaust holds termd's fd limit low waits for an
        # fd like any client then: noted, not held to the bound
        low = low or faults.STATE["rlimit"] is not None
        if dt is not None and low:
            self.stats.note("/healthz took %.3fs while termd's fd limit was low" % dt)
        elif dt is not None:
            with self.stats.lock:
                self.stats.health.append((t, dt))
            if dt > self.health_bound:
                self.stats.problem("/healthz took %.3fs (bound %.3fs)" % (dt, self.health_bound))

    def sampler(self):
        while not self.stop.wait(5.0):
            try:
                self.sample()
            except Exception as e:  # noqa: BLE001 — the sampler must outlive any one sample
                self.stats.note("sample failed: %r" % e)
            if self.termd.poll() is not None:
                self.stats.problem("termd exited: status %s" % self.termd.returncode)
                self.stop.set()

    def baseline(self):
        xs = []
        for _ in range(40):
            xs.append(healthz_time(self.ctx))
            time.sleep(0.1)
        xs = [x for x in xs if x is not None]
        self.base_p50 = pct(xs, 50)
        self.base_p99 = pct(xs, 99)
        # a bound a shared two-core machine keeps: 50 times the idle median,
        # never under a second (an upgrade's hand-over is in it)
        self.health_bound = max(50 * self.base_p50, 1.0)
        self.stats.note("idle /healthz p50 %.1f ms p99 %.1f ms; bound %.0f ms"
                        % (self.base_p50 * 1e3, self.base_p99 * 1e3, self.health_bound * 1e3))

    # -- clients ---------------------------------------------------------

    def web_server(self):
        """A session serving a page for the previews."""
        self.web_port = free_port()
        self.ctx.opts["web_port"] = self.web_port
        os.makedirs(os.path.join(self.tmp, "www"), exist_ok=True)
        with open(os.path.join(self.tmp, "www", "index.html"), "w") as f:
            f.write("<p>soak-page</p>\n")
        c = Conn(self.ctx, "setup")
        o = c.call("session.open", {"name": "web", "kind": "pipe", "command":
                                    "exec %s -m http.server %d --bind 127.0.0.1 --directory %s"
                                    % (PY, self.web_port, os.path.join(self.tmp, "www"))})
        assert o.get("observation") == "session.open", o
        o = c.call("port.wait", {"port": self.web_port, "timeout": 30})
        assert (o.get("extras") or {}).get("ready"), o
        self.ctx.opts.setdefault("kept_sessions", []).append("web")
        c.close()

    def client_loop(self, k):
        gap = k.period / self.scale
        nxt = time.monotonic() + k.rng.uniform(0, gap)
        while not self.stop.is_set():
            d = nxt - time.monotonic()
            if d > 0 and self.stop.wait(d):
                break
            nxt = max(nxt + gap, time.monotonic())
            try:
                k.step()
            except Exception as e:  # noqa: BLE001 — counted, the client goes on
                self.stats.error(k.name, type(e).__name__)
                self.stats.note("%s%d: %s" % (k.name, k.idx, "".join(
                    traceback.format_exception_only(type(e), e)).strip()[:300]))
                time.sleep(1)

    def start_clients(self):
        self.skipped = {}
        self.by_kind = {}
        for cls in kinds.KINDS:
            why = None
            try:
                why = cls.probe(self.ctx)
            except Exception as e:  # noqa: BLE001
                why = repr(e)
            if why:
                self.skipped[cls.name] = why
                self.stats.note("kind %s skipped: %s" % (cls.name, why))
                continue
            for i in range(cls.count):
                k = cls(self.ctx, i)
                k.setup()
                self.clients.append(k)
                self.by_kind.setdefault(cls.name, []).append(k)
        self.ctx.opts["subscribers"] = self.by_kind.get("subscriber", [])
        self.ctx.opts["by_kind"] = self.by_kind
        for k in self.clients:
            target = k.loop if isinstance(k, kinds.Subscriber) else (lambda k=k: self.client_loop(k))
            th = threading.Thread(target=target, name="%s%d" % (k.name, k.idx), daemon=True)
            th.start()
            self.threads.append(th)
        # the client in a process of its own
        self.child_out = os.path.join(self.tmp, "child.json")
        p = subprocess.Popen(["nice", "-n", "10", PY, os.path.abspath(__file__), "--child", self.url, self.token,
                              self.ctx.ledger, self.seed, str(self.seconds), self.child_out],
                             stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs.append(p)
        self.ctx.opts["child"] = p

    # -- checks ----------------------------------------------------------

    def check_ledger(self):
        ids = dict(self.ctx.sent)
        child = {}
        try:
            with open(self.child_out) as f:
                child = json.load(f)
            for aid, obs, _ in child.get("sent", []):
                ids[aid] = "child"
                self.ctx.answered[aid] = self.ctx.answered.get(aid, 0) + 1
            for p in child.get("problems", []):
                self.stats.problem("child: " + p)
        except (OSError, ValueError) as e:
            self.stats.problem("child's record unreadable: %r" % e)
        twice = missing = unanswered = 0
        for aid, kind in ids.items():
            n = self.ctx.answered.get(aid, 0)
            try:
                with open(os.path.join(self.ctx.ledger, aid)) as f:
                    lines = len(f.readlines())
            except OSError:
                lines = 0
            if lines > 1:
                twice += 1
                self.stats.problem("%s (%s) ran %d times" % (aid, kind, lines))
            if n == 1 and lines == 0:
                missing += 1
                self.stats.problem("%s (%s) answered but never ran" % (aid, kind))
            if n == 0:
                unanswered += 1
                self.stats.note("%s (%s) sent when the soak stopped, not answered" % (aid, kind))
            if n > 1:
                self.stats.problem("%s answered %d times" % (aid, n))
        self.ledger_figures = {"ids": len(ids), "ran_twice": twice, "answered_not_run": missing,
                               "unanswered_at_stop": unanswered}

    def check_subscribers(self):
        subs = self.by_kind.get("subscriber", [])
        if not subs:
            return
        ref = subs[0]
        out = {}
        for s in subs:
            out["subscriber%d" % s.idx] = {"seen": len(s.seqs), "resumes": s.resumes, "gaps": len(s.gaps),
                                           "dups": s.dups, "bytes": s.bytes}
            if s is ref or not s.seqs or not ref.seqs:
                continue
            lo, hi = max(s.seqs[0], ref.seqs[0]), min(s.seqs[-1], ref.seqs[-1])
            a = set(x for x in s.seqs if lo <= x <= hi)
            b = set(x for x in ref.seqs if lo <= x <= hi)
            if a != b:
                self.stats.problem("subscriber%d and the reference differ over %d..%d: %d only here, %d only there"
                                   " (first: %s / %s)" % (s.idx, lo, hi, len(a - b), len(b - a),
                                                          sorted(a - b)[:5], sorted(b - a)[:5]))
            out["subscriber%d" % s.idx]["compared"] = len(a)
        self.sub_figures = out

    def check_growth(self):
        s = self.stats.samples
        if len(s) < 4:
            return
        half = [x for x in s if x[0] >= s[0][0] + (s[-1][0] - s[0][0]) / 2]
        self.growth = {
            "rss_kib_per_min": slope([(t, r) for t, r, _, _ in half]) * 60,
            "fds_per_min": slope([(t, f) for t, _, f, _ in half]) * 60,
            "threads_per_min": slope([(t, h) for t, _, _, h in half]) * 60,
        }
        if self.seconds >= 600:   # too noisy to judge in a short run
            # (under ASan the RSS is its quarantine of freed memory, 256 MiB
            # by default, filling: a figure, not a leak; its leak check at
            # termd's exit is the judge there)
            if self.growth["rss_kib_per_min"] > 512 and not self.asan:
                self.stats.problem("RSS grows %.0f KiB/min over the last half" % self.growth["rss_kib_per_min"])
            if self.growth["fds_per_min"] > 1.0:
                self.stats.problem("fds grow %.2f/min over the last half" % self.growth["fds_per_min"])
            if self.growth["threads_per_min"] > 0.5:
                self.stats.problem("threads grow %.2f/min over the last half" % self.growth["threads_per_min"])

    # -- the run ---------------------------------------------------------

    def run(self):
        T0[0] = time.monotonic()
        self.start_termd()
        print("soak: termd pid %d on %s, %.1f min, seed %s, scratch %s" % (self.pid, self.url, self.minutes,
                                                                          self.seed, self.tmp), flush=True)
        self.baseline()
        self.start_figures = proc_figures(self.pid)
        self.start_fds = fd_kinds(self.pid)
        self.start_held = (client_conns(self.pid), len(stub_children(self.pid)))
        self.sample()
        self.web_server()
        self.start_clients()
        th = threading.Thread(target=self.sampler, daemon=True)
        th.start()
        self.threads.append(th)
        sched = faults.Schedule(self, self.upgrade_every, self.fault_every)
        sched.run(self.seconds)          # returns at the soak's end (or when termd died)
        self.stop.set()
        print("soak: stopping clients", flush=True)
        for t in self.threads:
            t.join(120)
            if t.is_alive():
                self.stats.problem("thread %s did not stop within 120 s" % t.name)
        for p in self.procs:
            try:
                p.wait(150)
            except subprocess.TimeoutExpired:
                self.stats.problem("the child client did not end")
        for k in self.clients:
            try:
                k.teardown()
            except Exception:
                pass
        # idle: the figures should come back near the start, once the
        # sessions the soak opened are closed
        c = Conn(self.ctx, "idle")
        for name in ("web", "ttyrw", "probe", "ev0", "ev1"):
            try:
                c.call("session.close", {"name": name}, timeout=20)
            except Exception:
                pass
        left = [n for n in faults.sessions(c) if n != "main"]
        if left:
            self.stats.note("sessions left at the end: %s" % left)
        c.close()
        time.sleep(10)
        self.sample()
        self.idle_figures = proc_figures(self.pid)
        idle_fds = fd_kinds(self.pid)
        idle_held = (client_conns(self.pid), len(stub_children(self.pid)))
        self.stats.note("termd's fds at start: %s" % self.start_fds)
        self.stats.note("termd's fds once idle: %s" % idle_fds)
        if self.termd.poll() is not None or self.termd.pid != self.pid:
            self.stats.problem("termd is not alive with pid %d" % self.pid)
        self.check_ledger()
        self.check_subscribers()
        self.check_growth()
        r0, f0, h0 = self.start_figures
        r1, f1, h1 = self.idle_figures
        # what termd holds for what is still open is no leak: a client's
        # connection through the front holds up to 5 fds (its socket, the
        # front's pair to lws, a splice pipe's two ends), a spare stub 3
        # (its socket, two cgroup files); the rest may grow by 8 at most
        # (things made once: the file workers' pipe, V1's /dev/urandom: +3
        # in a 3-minute run)
        c0, sp0 = self.start_held
        c1, sp1 = idle_held
        held = 5 * max(0, c1 - c0) + 3 * max(0, sp1 - sp0)
        if f1 > f0 + held + 8:
            self.stats.problem("fds once idle %d, at start %d (%d for the %d client connections and %d "
                               "spare stubs open then, %d and %d at start); by kind once idle: %s; "
                               "at start: %s" % (f1, f0, held, c1, sp1, c0, sp0, idle_fds, self.start_fds))
        else:
            self.stats.note("fds once idle %d, at start %d, %d of them for %d client connections and %d "
                            "spare stubs (%d and %d at start)" % (f1, f0, held, c1, sp1, c0, sp0))
        if h1 > h0 + 8:
            self.stats.problem("threads once idle %d, at start %d" % (h1, h0))

    def shutdown(self):
        self.stop.set()
        rc = None
        if self.termd is not None:
            if self.termd.poll() is None:
                self.termd.send_signal(signal.SIGTERM)
                try:
                    rc = self.termd.wait(30 if self.asan else 10)
                except subprocess.TimeoutExpired:
                    self.termd.kill()
                    rc = self.termd.wait(10)
                    self.stats.problem("termd did not exit within the wait after SIGTERM")
            else:
                rc = self.termd.returncode
            try:
                os.killpg(self.termd.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            if rc != 0:
                self.stats.problem("termd's exit status after SIGTERM: %s" % rc)
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        faults.cleanup(self)
        if self.link_backend:
            self.link_backend.close()
        for m in reversed(self.mounts):
            r = subprocess.run(["umount", m], capture_output=True, text=True)
            if r.returncode != 0:
                time.sleep(1)
                subprocess.run(["umount", "-l", m], capture_output=True)
        if self.asan:
            for n in os.listdir(self.tmp):
                if n.startswith("asan") or n.startswith("ubsan"):
                    txt = open(os.path.join(self.tmp, n), errors="replace").read()
                    self.stats.problem("sanitizer report %s:\n%s" % (n, txt[:4000]))
            if self.termd is not None:
                txt = open(self.log, errors="replace").read()
                for pat in ("runtime error:", "AddressSanitizer", "LeakSanitizer"):
                    if pat in txt:
                        i = txt.index(pat)
                        self.stats.problem("sanitizer output in termd's log:\n%s" % txt[max(0, i - 200):i + 3000])
        try:
            self.logf.close()
        except Exception:
            pass
        return rc

    # -- the figures -----------------------------------------------------

    def report(self):
        st = self.stats
        el = max(1.0, self.seconds)
        print("\n==== soak figures (%.1f min, seed %s) ====" % (self.minutes, self.seed))
        if self.skipped:
            print("kinds skipped (door not in this build): %s" % json.dumps(self.skipped))
        print("actions/s by kind:")
        tot = 0
        for k in sorted(st.actions):
            tot += st.actions[k]
            print("  %-24s %7d  %6.2f/s" % (k, st.actions[k], st.actions[k] / el))
        print("  %-24s %7d  %6.2f/s" % ("all", tot, tot / el))
        if st.errors:
            print("errors answered (kind:code): %s" % json.dumps(st.errors, sort_keys=True))
        print("run true, per minute (p50 / p99 / n):")
        if st.lat_true:
            t0 = st.lat_true[0][0]
            by = {}
            for t, d in st.lat_true:
                by.setdefault(int((t - t0) // 60), []).append(d)
            for m in sorted(by):
                print("  min %2d  %7.1f ms %7.1f ms  %d" % (m, pct(by[m], 50) * 1e3, pct(by[m], 99) * 1e3, len(by[m])))
        if st.samples:
            rs = [s[1] for s in st.samples]
            fs = [s[2] for s in st.samples]
            hs = [s[3] for s in st.samples]
            print("termd RSS MiB start %.1f end(idle) %.1f max %.1f; fds start %d end %d max %d; threads start %d end %d max %d"
                  % (self.start_figures[0] / 1024, self.idle_figures[0] / 1024, max(rs) / 1024,
                     self.start_figures[1], self.idle_figures[1], max(fs),
                     self.start_figures[2], self.idle_figures[2], max(hs)))
            # heap: malloc's bytes in use (glibc; -1 without): growth in RSS
            # but not here is the allocator's; the bounded stores beside it
            # (the event ring, V1's events) fill before they level off
            print("per minute: RSS MiB / heap MiB / fds / threads / events retained / retained MiB / "
                  "V1 events kept / V1 kept MiB / connections / sessions")
            by = {}
            for (t, r, f, h), (_, m) in zip(st.samples, st.metrics):
                by[int((t - st.samples[0][0]) // 60)] = (r, f, h, m)
            for mi in sorted(by):
                r, f, h, m = by[mi]
                print("  min %2d  %6.1f  %6.1f  %4d  %3d  %6d  %6.1f  %6d  %6.1f  %3d  %3d" % (
                    mi, r / 1024, m.get("termd_heap_in_use_bytes", -1048576) / 1048576, f, h,
                    m.get("termd_events_retained", -1), m.get("termd_events_retained_bytes", 0) / 1048576,
                    m.get("termd_ohv1_events_kept", -1), m.get("termd_ohv1_events_kept_bytes", 0) / 1048576,
                    m.get("termd_connections", -1), m.get("termd_sessions", -1)))
            print("last-half slopes: %s" % json.dumps({k: round(v, 2) for k, v in getattr(self, "growth", {}).items()}))
        if st.health:
            hv = [d for _, d in st.health]
            print("/healthz: idle p50 %.1f ms; under load p50 %.1f ms p99 %.1f ms max %.1f ms (bound %.0f ms)"
                  % (self.base_p50 * 1e3, pct(hv, 50) * 1e3, pct(hv, 99) * 1e3, max(hv) * 1e3, self.health_bound * 1e3))
        print("faults injected (kind: count; cost):")
        for k in sorted(st.faults):
            v = st.faults[k]
            costs = [x.get("cost") for x in v if isinstance(x.get("cost"), (int, float))]
            extra = ""
            if costs:
                extra = " cost p50 %.2fs max %.2fs" % (pct(costs, 50), max(costs))
            print("  %-20s %3d%s" % (k, len(v), extra))
            for x in v:
                print("      %s" % json.dumps(x, sort_keys=True))
        print("reconnects (cause: n, p50, max seconds):")
        for k in sorted(st.reconnects):
            v = st.reconnects[k]
            print("  %-24s %4d  %.3f  %.3f" % (k, len(v), pct(v, 50), max(v)))
        print("ledger: %s" % json.dumps(getattr(self, "ledger_figures", {})))
        print("subscribers: %s" % json.dumps(getattr(self, "sub_figures", {})))
        if st.notes:
            print("notes (%d):" % len(st.notes))
            for n in st.notes[-60:]:
                print("  " + n)
        if st.problems:
            print("PROBLEMS (%d):" % len(st.problems))
            for p in st.problems[:80]:
                print("  " + p)
            print("soak: FAILED (termd log: %s)" % self.log)
        else:
            print("soak: lost nothing; every check passed")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child_main(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], float(sys.argv[6]), sys.argv[7])
        return 0
    os.nice(5)
    s = Soak()
    # ^C or a TERM: end the soak early, with its checks and figures
    signal.signal(signal.SIGINT, lambda *a: s.stop.set())
    signal.signal(signal.SIGTERM, lambda *a: s.stop.set())
    ok = False
    try:
        s.run()
        ok = True
    except Exception:
        traceback.print_exc()
        s.stats.problem("the soak itself failed: %s" % traceback.format_exc().strip().splitlines()[-1])
    finally:
        s.shutdown()
    try:
        s.report()
    except Exception:
        traceback.print_exc()
    if os.environ.get("SOAK_KEEP") != "1" and not s.stats.problems:
        shutil.rmtree(s.tmp, ignore_errors=True)
    return 0 if ok and not s.stats.problems else 1


if __name__ == "__main__":
    sys.exit(main())
