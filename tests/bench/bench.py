"""bench.py — owns `make bench`: starts a private termd, measures it next to
baselines taken in the same run (pexpect-driven bash, a bare pty, a private
tmux server), prints one table of figures, ratios and targets. Informational
only: the exit status is 0 whenever the measurements could be taken, met
targets or not. Everything started here (termd and its sessions, tmux, `yes`)
is ended in finally blocks.

Figures: `run true` round trips; `seq` through `run` vs a bare pty; termd's
own RSS with 1 and with BENCH_SESSIONS idle sessions vs a tmux server's;
`run true` in session B while session A floods with `yes`, vs A idle, and
termd's peak RSS meanwhile.

Environment: TERMD_BIN (required), BENCH_RTT_BIN (the C round-trip client,
default build/bench-rtt), BENCH_N (timed round trips, default 2000),
BENCH_SESSIONS (idle sessions, default 200)."""

import base64
import json
import os
import pty
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import pexpect

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tests", "regress"))
import wsclient  # noqa: E402  (the regress suite's stdlib WebSocket client)

TERMD_BIN = os.environ.get("TERMD_BIN") or os.path.join(REPO, "build", "termd")
RTT_BIN = os.environ.get("BENCH_RTT_BIN") or os.path.join(REPO, "build", "bench-rtt")
N = int(os.environ.get("BENCH_N", "2000"))
WARMUP = 200
SEQ_CMD = "seq 1 2000000"
SEQ_REPS = 3
RTT_TARGET_MS = 1.0
SEQ_TARGET_RATIO = 1.0   # issue 50
IDLE_SESSIONS = int(os.environ.get("BENCH_SESSIONS", "200"))
IDLE_TARGET_KB = 16.0       # issue 50: termd's own RSS per idle session beyond the first
TERM_COLS, TERM_ROWS = 160, 48  # termd's default size; tmux sessions get the same
FLOOD_S = 10                # `yes` in session A runs this long (run's hard timeout)
FLOOD_RAMP_S = 0.5          # let `yes` get going before timing session B
FLOOD_RTT_S = 8.5           # timed window in B (A flooding, and A idle); ends before A's run
FLOOD_RTT_CAP = 200000      # round trips at most per window
FLOOD_P99_TARGET = 2.0      # B's p99 with A flooding <= 2x B's p99 with A idle
FLOOD_RSS_TARGET_MIB = 64.0
TMUX_SHELL = "bash --norc --noprofile"

# Never leak the caller's shell setup into termd or the baseline bash.
_SCRUB = ("TERMD_TOKEN", "TERMD_URL", "PROMPT_COMMAND", "PS1", "PS2", "BASH_ENV", "ENV",
          "VIRTUAL_ENV", "TMUX", "HISTFILE", "TMPDIR")


def clean_env(home, **extra):
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env["HOME"] = home
    env.update(extra)
    return env


# ---------------------------------------------------------------- WebSocket
# The events channel (unix socket only) through the regress suite's stdlib
# WebSocket client (tests/regress/wsclient.py), plus the bench's own action
# ids and batch waits.

class WS:
    def __init__(self, sock_path, path="/events", subproto=wsclient.EVENTS_SUBPROTOCOL):
        try:
            self.ws = wsclient.connect("unix:" + sock_path, path, subproto, timeout=120)
        except wsclient.HandshakeError as e:
            raise RuntimeError("handshake refused: %s" % e)
        self.s = self.ws.sock
        self.counter = 0
        # ids must be unique per termd instance (an id already answered is
        # replayed, not run again), across all of this process's connections
        self.tag = base64.b32encode(os.urandom(5)).decode().lower()

    def send_text(self, text):
        self.ws.send_text(text)

    @staticmethod
    def frame_text(text):
        """text as one masked client frame, ready to send."""
        data = text.encode()
        key = os.urandom(4)
        return wsclient.frame_header(wsclient.OP_TEXT, len(data)) + key + wsclient.mask_bytes(data, key)

    def recv_msg(self):
        """Next whole text/binary message (bytes); pings answered."""
        try:
            return self.ws.recv(120)[1]
        except wsclient.ConnectionClosed as e:
            raise RuntimeError("termd closed the connection (%s)" % e)

    def send_action(self, action, args):
        """Send one action without waiting; returns its id."""
        self.counter += 1
        aid = "bench-py-%d-%s-%d" % (os.getpid(), self.tag, self.counter)
        self.send_text(json.dumps({"id": aid, "action": action, "args": args}))
        return aid

    def wait(self, aids):
        """The observations answering the ids in aids (any order), as a dict."""
        want, got = set(aids), {}
        while want:
            obs = json.loads(self.recv_msg())
            c = obs.get("cause")
            if c in want:
                want.discard(c)
                got[c] = obs
        return got

    def call(self, action, args):
        aid = self.send_action(action, args)
        obs = self.wait([aid])[aid]
        if (obs.get("extras") or {}).get("replayed"):
            raise RuntimeError("termd replayed an answer instead of running %s: %.300s"
                               % (action, json.dumps(obs)))
        return obs

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass


# ---------------------------------------------------------------- processes

def proc_status(pid, field):
    """A kB field (VmRSS, VmHWM) of /proc/<pid>/status; None if pid is gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def proc_ids(pid):
    """(ppid, pgrp, sid) of pid, or None if it is gone (or a zombie)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        if fields[0] in ("Z", "X"):
            return None
        return int(fields[1]), int(fields[2]), int(fields[3])
    except (OSError, ValueError, IndexError):
        return None


def all_pids():
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def kill_sids(sids, grace_s=1.0):
    """End every process left in the given sessions (ids of processes this
    bench started, recorded while their parent was alive): wait up to grace_s
    for them to go after their hang-up, then SIGKILL each by pid. Returns how
    many had to be killed. Never touches this process's own session."""
    sids = set(sids) - {os.getsid(0), 0, 1}
    if not sids:
        return 0
    deadline = time.monotonic() + grace_s
    while True:
        left = [p for p in all_pids() if (proc_ids(p) or (0, 0, 0))[2] in sids]
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    for p in left:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    return len(left)


def settle_rss(pid, max_s=5.0, every_s=0.25):
    """VmRSS of pid once two readings every_s apart agree (or after max_s)."""
    prev, deadline = None, time.monotonic() + max_s
    while True:
        time.sleep(every_s)
        cur = proc_status(pid, "VmRSS")
        if cur is None or cur == prev or time.monotonic() >= deadline:
            return cur
        prev = cur


def rss_parts(pid):
    """Resident kB of pid by kind of mapping, from /proc/<pid>/smaps:
    heap (brk), anon (other anonymous, e.g. malloc's mmap arenas), file, other."""
    out = {"heap": 0, "anon": 0, "file": 0, "other": 0}
    kind = "other"
    try:
        with open("/proc/%d/smaps" % pid) as f:
            for line in f:
                parts = line.split()
                if not parts:
                    continue
                if not parts[0].endswith(":"):  # a mapping's header line
                    name = parts[5] if len(parts) > 5 else ""
                    kind = ("heap" if name == "[heap]" else "anon" if name == "" else
                            "file" if name.startswith("/") else "other")
                elif parts[0] == "Rss:":
                    out[kind] += int(parts[1])
    except (OSError, ValueError, IndexError):
        pass
    return out


def reset_hwm(pid):
    """Reset pid's VmHWM to its current RSS (clear_refs 5); False if refused."""
    try:
        with open("/proc/%d/clear_refs" % pid, "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


# ---------------------------------------------------------------- termd

class Termd:
    def __init__(self, tmp, args=()):
        self.args = list(args)
        self.home = os.path.join(tmp, "home")
        self.tmpdir = os.path.join(tmp, "tmp")
        os.makedirs(self.home)
        os.makedirs(self.tmpdir)
        self.sock = os.path.join(tmp, "termd.sock")
        self.url = "unix:" + self.sock
        self.log_path = os.path.join(tmp, "termd.log")
        self.proc = None

    def start(self):
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [TERMD_BIN, "--listen", self.url, "--cwd", self.home] + self.args,
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=self.home,
            env=clean_env(self.home, TMPDIR=self.tmpdir), start_new_session=True)
        log.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("termd exited during start-up (%s):\n%s"
                                   % (self.proc.returncode, self.log_tail()))
            if os.path.exists(self.sock):
                try:
                    ws = WS(self.sock)
                    ws.call("ping", {})
                    ws.close()
                    return
                except (OSError, RuntimeError):
                    pass
            time.sleep(0.05)
        raise RuntimeError("termd did not come up within 30 s:\n" + self.log_tail())

    def log_tail(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-30:])
        except OSError:
            return ""

    def status(self, field):
        return proc_status(self.proc.pid, field)  # kB

    def cpu_s(self):
        """utime + stime of termd so far, in seconds (clock-tick resolution)."""
        with open("/proc/%d/stat" % self.proc.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        """SIGTERM termd (SIGKILL after 5 s), then end whatever is left of its
        sessions (shells, `yes`); returns how many leftovers were killed."""
        if self.proc is None or self.proc.poll() is not None:
            return 0
        me = self.proc.pid
        # each session's shell leads its own session (setsid on its pty);
        # record them now, while they are still termd's children
        sids = {me}
        for p in all_pids():
            ids = proc_ids(p)
            if ids and ids[0] == me:
                sids.add(ids[2])
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        return kill_sids(sids)


# ---------------------------------------------------------------- measurements

def pctl(sorted_v, p):
    k = max(0, min(len(sorted_v) - 1, int(p / 100.0 * len(sorted_v) + 0.999999) - 1))
    return sorted_v[k]


def summary_us(samples_s):
    v = sorted(x * 1e6 for x in samples_s)
    return {"n": len(v), "min_us": v[0], "p50_us": pctl(v, 50), "p99_us": pctl(v, 99),
            "max_us": v[-1], "mean_us": sum(v) / len(v)}


def pooled(*results):
    """One summary over the samples of several rtt_c(..., samples=True) results."""
    v = [x / 1e6 for r in results for x in r["samples_us"]]
    s = summary_us(v)
    s["p90_us"] = pctl(sorted(x * 1e6 for x in v), 90)
    return s


def rtt_c(td, session=None, seconds=None, n=None, warmup=WARMUP, samples=False):
    argv = [RTT_BIN, td.url, str(n or N), str(warmup), "true"]
    if session or seconds:
        argv += [session or "", str(seconds or 0)]
    env = clean_env(td.home)
    if samples:
        env["BENCH_RTT_SAMPLES"] = "1"
    out = subprocess.run(argv, capture_output=True, text=True, timeout=150, env=env)
    if out.returncode != 0:
        raise RuntimeError("bench-rtt failed (%d): %s" % (out.returncode, out.stderr.strip()))
    return json.loads(out.stdout.strip().splitlines()[-1])


def rtt_py(td):
    ws = WS(td.sock)
    try:
        for _ in range(WARMUP):
            ws.call("run", {"command": "true"})
        t = []
        for _ in range(N):
            t0 = time.perf_counter()
            obs = ws.call("run", {"command": "true"})
            t.append(time.perf_counter() - t0)
            if obs.get("observation") != "run" or obs["extras"].get("exit_code") != 0:
                raise RuntimeError("unexpected observation: %.300s" % json.dumps(obs))
        return summary_us(t)
    finally:
        ws.close()


def rtt_pexpect(home):
    prompt = "@@bench-%d@@$ " % os.getpid()
    env = clean_env(home, PS1=prompt, TERM="xterm-256color", LANG="C.UTF-8")
    child = pexpect.spawn("bash", ["--norc", "--noprofile"], env=env, cwd=home,
                          encoding="utf-8", dimensions=(48, 160), timeout=30)
    child.delaybeforesend = None
    try:
        child.expect_exact(prompt)
        for _ in range(WARMUP):
            child.sendline("true")
            child.expect_exact(prompt)
        t = []
        for _ in range(N):
            t0 = time.perf_counter()
            child.sendline("true")
            child.expect_exact(prompt)
            t.append(time.perf_counter() - t0)
        return summary_us(t)
    finally:
        child.close(force=True)


RTT_BLOCK = 100


class PexpectBash:
    """bash --norc driven by pexpect in a pty: the peer `run true` is
    measured against (one() = sendline true, wait for the prompt)."""
    def __init__(self, home):
        self.prompt = "@@bench-%d@@$ " % os.getpid()
        env = clean_env(home, PS1=self.prompt, TERM="xterm-256color", LANG="C.UTF-8")
        self.child = pexpect.spawn("bash", ["--norc", "--noprofile"], env=env, cwd=home,
                                   encoding="utf-8", dimensions=(48, 160), timeout=30)
        self.child.delaybeforesend = None
        self.child.expect_exact(self.prompt)

    def one(self):
        self.child.sendline("true")
        self.child.expect_exact(self.prompt)

    def close(self):
        self.child.close(force=True)


def rtt_interleaved(td, pexp_home, others=(), n=N, warmup=WARMUP, block=RTT_BLOCK):
    """`run true` round trips of the C client (bench-rtt), this Python
    client and pexpect bash, plus `others` ((name, connect): connect()
    gives (one, close), one() makes one round trip), n of each after a
    warm-up, taken in turn `block` at a time: a load swing on the shared
    machine hits them all alike (measured one after the other, the Python
    client's p50 read 5.3x pexpect's in one run and 1.2x in the next). The
    clients of termd connect for their block only: a connection left open
    meanwhile would have the others' events to read through. {name:
    summary_us}, names "c", "py", "pexpect" and the others'."""
    px = PexpectBash(pexp_home)

    def py_connect():
        ws = WS(td.sock)

        def one():
            obs = ws.call("run", {"command": "true"})
            if obs.get("observation") != "run" or obs["extras"].get("exit_code") != 0:
                raise RuntimeError("unexpected observation: %.300s" % json.dumps(obs))
        return one, ws.close

    clients = [("py", py_connect), ("pexpect", lambda: (px.one, lambda: None))] + list(others)
    got = {name: [] for name, _ in clients}
    c_parts = []
    try:
        done = 0
        while done < n:
            k = min(block, n - done)
            first = not c_parts
            c_parts.append(rtt_c(td, n=k, warmup=warmup if first else 10, samples=True))
            for name, connect in clients:
                one, close = connect()
                try:
                    for _ in range(warmup if first else 10):
                        one()
                    for _ in range(k):
                        t0 = time.perf_counter()
                        one()
                        got[name].append(time.perf_counter() - t0)
                finally:
                    close()
            done += k
    finally:
        px.close()
    out = {name: summary_us(v) for name, v in got.items()}
    out["c"] = pooled(*c_parts)
    return out


START_N = int(os.environ.get("BENCH_START_N", "20"))
START_TARGET_RATIO = 2.0    # issue 50: a new session's first answer <= 2x pexpect's
PY_TARGET_RATIO = 0.5       # issue 50: run `true` p50, Python client <= 0.5x pexpect


def start_termd(ws, i):
    """session.open, then the first `run true` in it (termd's rc file and
    shell integration): seconds; the session is closed after."""
    name = "st%d" % i
    t0 = time.perf_counter()
    expect_obs(ws.call("session.open", {"name": name}), "session.open", "session.open")
    x = expect_obs(ws.call("run", {"session": name, "command": "true"}), "run", "first run")
    dt = time.perf_counter() - t0
    if x.get("exit_code") != 0:
        raise RuntimeError("first run true in %s: %.300s" % (name, json.dumps(x)))
    ws.call("session.close", {"name": name})
    return dt


def start_pexpect(home):
    """pexpect spawning `bash --noprofile --norc -i` in a pty, its prompt,
    `true`, the prompt again: seconds."""
    prompt = "@@start-%d@@$ " % os.getpid()
    env = clean_env(home, PS1=prompt, TERM="xterm-256color", LANG="C.UTF-8")
    t0 = time.perf_counter()
    child = pexpect.spawn("bash", ["--noprofile", "--norc", "-i"], env=env, cwd=home,
                          encoding="utf-8", dimensions=(48, 160), timeout=30)
    child.delaybeforesend = None
    try:
        child.expect_exact(prompt)
        child.sendline("true")
        child.expect_exact(prompt)
        return time.perf_counter() - t0
    finally:
        child.close(force=True)


def session_start(td, home):
    """A new session's first answer next to pexpect's, alternating."""
    ws = WS(td.sock)
    a, b = [], []
    try:
        start_termd(ws, -1)
        start_pexpect(home)
        for i in range(START_N):
            a.append(start_termd(ws, i))
            b.append(start_pexpect(home))
    finally:
        ws.close()
    return statistics.median(a), statistics.median(b)


HEALTHZ_N = 10
HEALTHZ_TARGET_MS = 15.0    # issue 50: termd started to its first /healthz answer


def start_to_healthz(tmp):
    """termd's exec to its first 200 on GET /healthz over loopback TCP
    (polled every millisecond), median of HEALTHZ_N fresh termds, and the
    same with --cgroups off, the two taken in turn: (seconds, seconds)."""
    got, off = [], []
    for _ in range(HEALTHZ_N):
        # each start after a quiet half second (not timed): back to back, a
        # start met the last termd's cgroup teardown still in the kernel
        # (its folders removed, their RCU-deferred release under way), which
        # a sandbox's one start never does: 31.7 ms back to back against 8.4
        # ms after a pause, --cgroups off 15.8 / 8.0 ms (load 2, same run)
        time.sleep(0.5)
        got.append(healthz_once(tmp, []))
        time.sleep(0.5)
        off.append(healthz_once(tmp, ["--cgroups", "off"]))
    return statistics.median(got), statistics.median(off)


def healthz_once(tmp, args):
    """one fresh termd (with args): its exec to its first /healthz 200, seconds"""
    import http.client
    from tdtest import free_port
    home = os.path.join(tmp, "healthz-home")
    os.makedirs(home, exist_ok=True)
    port = free_port()
    t0 = time.perf_counter()
    p = subprocess.Popen([TERMD_BIN, "--listen", "127.0.0.1:%d" % port, "--cwd", home] + args,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, env=clean_env(home),
                         start_new_session=True)
    try:
        while True:
            if p.poll() is not None:
                raise RuntimeError("termd exited during start-up (%s)" % p.returncode)
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("GET", "/healthz")
                ok = c.getresponse().status == 200
                c.close()
                if ok:
                    break
            except OSError:
                pass
            time.sleep(0.001)
        dt = time.perf_counter() - t0
    finally:
        sids = {p.pid}
        for q in all_pids():
            ids = proc_ids(q)
            if ids and ids[0] == p.pid:
                sids.add(ids[2])
        p.terminate()
        p.wait(10)
        kill_sids(sids)
    return dt


# `yes` writing into a bare pty that this reader drains as fast as it can, for
# argv[1] seconds; prints yes's pid first, then "bytes seconds".
FLOOD_READER = r"""
import os, pty, subprocess, sys, time
m, s = pty.openpty()
p = subprocess.Popen(["yes"], stdin=s, stdout=s, stderr=s, close_fds=True, start_new_session=True)
os.close(s)
print(p.pid, flush=True)
n, t0 = 0, time.monotonic()
end = t0 + float(sys.argv[1])
try:
    while time.monotonic() < end:
        n += len(os.read(m, 65536))
finally:
    p.kill()
    p.wait()
print(n, time.monotonic() - t0, flush=True)
"""


def flood_bare(home):
    """No-termd reference for the flood figure: `true` round trips in a
    pexpect-driven bash with nothing else going on, then while another
    process drains `yes` from a bare pty (separate processes, no GIL shared)."""
    prompt = "@@bench-%d@@$ " % os.getpid()
    env = clean_env(home, PS1=prompt, TERM="xterm-256color", LANG="C.UTF-8")
    child = pexpect.spawn("bash", ["--norc", "--noprofile"], env=env, cwd=home,
                          encoding="utf-8", dimensions=(TERM_ROWS, TERM_COLS), timeout=30)
    child.delaybeforesend = None
    reader, sids, r = None, set(), {}

    def window(seconds):
        t, end = [], time.perf_counter() + seconds
        while True:
            t0 = time.perf_counter()
            child.sendline("true")
            child.expect_exact(prompt)
            t1 = time.perf_counter()
            t.append(t1 - t0)
            if t1 >= end:
                return t

    try:
        child.expect_exact(prompt)
        for _ in range(50):
            child.sendline("true")
            child.expect_exact(prompt)
        win = FLOOD_RTT_S - FLOOD_RAMP_S
        idle = window(win / 2)  # idle: half before the flood, half after, as for termd
        reader = subprocess.Popen([sys.executable, "-c", FLOOD_READER, str(FLOOD_S)],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True,
                                  env=clean_env(home), cwd=home, start_new_session=True)
        sids.add(reader.pid)
        sids.add(int(reader.stdout.readline()))
        time.sleep(FLOOD_RAMP_S)
        r["flood"] = summary_us(window(win))
        out = reader.communicate(timeout=FLOOD_S + 30)[0].split()
        r["bytes"], r["secs"] = int(out[0]), float(out[1])
        r["idle"] = summary_us(idle + window(win / 2))
        return r
    finally:
        child.close(force=True)
        if reader is not None and reader.poll() is None:
            reader.kill()
            reader.wait()
        kill_sids(sids, grace_s=0.2)


def seq_termd(td, ws):
    cpu0 = td.cpu_s()
    t0 = time.perf_counter()
    obs = ws.call("run", {"command": SEQ_CMD})
    dt = time.perf_counter() - t0
    cpu = td.cpu_s() - cpu0
    x = obs.get("extras") or {}
    if obs.get("observation") != "run" or x.get("exit_code") != 0 or x.get("running"):
        raise RuntimeError("unexpected observation for %s: %.300s" % (SEQ_CMD, json.dumps(obs)))
    size = None
    if x.get("output_file"):
        try:
            size = os.path.getsize(x["output_file"])
        except OSError:
            pass
    return dt, cpu, {"truncated": x.get("truncated"), "content_chars": len(obs.get("content") or ""),
                "output_file_bytes": size, "duration_ms": x.get("duration_ms")}


def seq_pty():
    """seq writing to a bare pty, read from the master in 64 KiB chunks until
    EIO (every slave closed). Also returns the reader's (this process's) CPU."""
    master, slave = pty.openpty()
    try:
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        p = subprocess.Popen(SEQ_CMD.split(), stdin=slave, stdout=slave, stderr=slave,
                             close_fds=True, start_new_session=True)
        os.close(slave)
        slave = -1
        n = 0
        while True:
            try:
                b = os.read(master, 65536)
            except OSError:  # EIO: the slave side is gone
                break
            if not b:
                break
            n += len(b)
        dt = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        p.wait()
        return dt, cpu, n
    finally:
        if slave >= 0:
            os.close(slave)
        os.close(master)


HEREDOC_BYTES = 1024 * 1024
HEREDOC_REPS = 5
HEREDOC_TARGET_RATIO = 1.1   # issue 50; against the floor: the same text run by `bash FILE`


def heredoc_body():
    n = HEREDOC_BYTES // 48
    return "".join("%047d\n" % i for i in range(n))


def heredoc_termd(ws, path, body):
    """A 1 MiB heredoc through `run`, from the first byte of its frame sent to
    the answer. The frame (JSON, masked) is built before the clock starts:
    encoding 1 MiB is the client's cost (this Python client masks at about
    50 MB/s), not termd's, and a C client does it in a few ms."""
    cmd = "cat > %s <<'EOF'\n%sEOF" % (path, body)
    ws.counter += 1
    rid = "bench-hd-%d-%s-%d" % (os.getpid(), ws.tag, ws.counter)
    frame = ws.frame_text(json.dumps({"id": rid, "action": "run", "args": {"command": cmd, "timeout": 120}}))
    t0 = time.perf_counter()
    ws.s.sendall(frame)
    obs = ws.wait([rid])[rid]
    dt = time.perf_counter() - t0
    x = expect_obs(obs, "run", "1 MiB heredoc")
    if x.get("exit_code") != 0 or x.get("running") or os.path.getsize(path) != len(body):
        raise RuntimeError("1 MiB heredoc: %.300s" % json.dumps(obs))
    return dt


def heredoc_bash_file(path, body, script):
    """The floor: the same command text run by `bash FILE` (a fresh bash
    reads and runs it; no terminal, no client)."""
    with open(script, "w") as f:
        f.write("cat > %s <<'EOF'\n%sEOF\n" % (path, body))
    t0 = time.perf_counter()
    subprocess.run(["bash", script], check=True)
    dt = time.perf_counter() - t0
    if os.path.getsize(path) != len(body):
        raise RuntimeError("bash FILE wrote %d bytes" % os.path.getsize(path))
    return dt


def heredoc_pipe(path, body):
    """The baseline: the same bytes written to the file by `cat` from a pipe."""
    data = body.encode()
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        subprocess.run(["cat"], input=data, stdout=f, check=True)
    return time.perf_counter() - t0


def expect_obs(obs, kind, what):
    if obs.get("observation") != kind:
        raise RuntimeError("%s: expected a %s observation, got %.300s" % (what, kind, json.dumps(obs)))
    return obs.get("extras") or {}


def idle_sessions_termd(tmp, n):
    """A fresh termd's own VmRSS with its main session, then with n sessions
    (n - 1 opened with session.open, no command: an interactive bash each),
    all idle (a `run true` answered in each, then RSS left to settle)."""
    # the default --max-sessions (64) is below the sessions opened here
    td = Termd(os.path.join(tmp, "idle"), args=["--max-sessions", str(n + 8)])
    ws = None
    r = {}
    try:
        td.start()
        ws = WS(td.sock)
        x = expect_obs(ws.call("run", {"command": "true"}), "run", "run true in main")
        if x.get("exit_code") != 0:
            raise RuntimeError("run true in main: exit %s" % x.get("exit_code"))
        r["rss1"] = settle_rss(td.proc.pid)
        r["parts1"] = rss_parts(td.proc.pid)
        names = ["s%d" % i for i in range(1, n)]
        t0 = time.monotonic()
        got = ws.wait([ws.send_action("session.open", {"name": nm}) for nm in names])
        for obs in got.values():
            expect_obs(obs, "session.open", "session.open")
        got = ws.wait([ws.send_action("run", {"session": nm, "command": "true"}) for nm in names])
        for obs in got.values():
            x = expect_obs(obs, "run", "run true in a new session")
            if x.get("exit_code") != 0 or x.get("running"):
                raise RuntimeError("run true in %s: %.300s" % (x.get("session"), json.dumps(obs)))
        r["open_s"] = time.monotonic() - t0
        time.sleep(1.0)
        r["rssn"] = settle_rss(td.proc.pid)
        r["partsn"] = rss_parts(td.proc.pid)
        r["hwm"] = td.status("VmHWM")
        sessions = expect_obs(ws.call("session.list", {}), "session.list", "session.list")["sessions"]
        alive = [x for x in sessions if x.get("alive")]
        r["alive"] = len(alive)
        shells = [proc_status(x["pid"], "VmRSS") for x in alive if x.get("pid")]
        shells = [v for v in shells if v]
        r["shell_rss"] = statistics.median(shells) if shells else None
        return r
    finally:
        if ws is not None:
            ws.close()
        r["leftovers"] = td.stop()


class Tmux:
    """A tmux server of our own: private socket (-L) in our own TMUX_TMPDIR,
    no config; kill-server (then pids) on stop."""

    def __init__(self, tmp):
        self.home = os.path.join(tmp, "tmux-home")
        os.makedirs(self.home)
        self.label = "bench%d" % os.getpid()
        self.env = clean_env(self.home, TMUX_TMPDIR=tmp, TERM="xterm-256color", LANG="C.UTF-8")
        self.base = ["tmux", "-L", self.label, "-f", "/dev/null"]
        self.server_pid = None
        self.pane_pids = set()

    def cmd(self, *args):
        out = subprocess.run(self.base + list(args), env=self.env, cwd=self.home, text=True,
                             capture_output=True, stdin=subprocess.DEVNULL, timeout=60)
        if out.returncode != 0:
            raise RuntimeError("tmux %s: %s" % (" ".join(args[:3]), out.stderr.strip()))
        return out.stdout

    def new_sessions(self, names, batch=50):
        """new-session -d for each name, several per tmux invocation."""
        for i in range(0, len(names), batch):
            argv = []
            for nm in names[i:i + batch]:
                if argv:
                    argv.append(";")
                argv += ["new-session", "-d", "-s", nm, "-x", str(TERM_COLS), "-y", str(TERM_ROWS),
                         TMUX_SHELL]
            self.cmd(*argv)
        if self.server_pid is None:
            self.server_pid = int(self.cmd("display-message", "-p", "#{pid}").strip())

    def wait_prompts(self, n, timeout_s=60):
        """Until n panes exist and each shell has drawn its prompt (cursor_x > 0)."""
        deadline = time.monotonic() + timeout_s
        while True:
            rows = [ln.split() for ln in self.cmd("list-panes", "-a", "-F",
                                                  "#{pane_pid} #{cursor_x}").splitlines()]
            self.pane_pids.update(int(r[0]) for r in rows if r)
            ready = sum(1 for r in rows if len(r) == 2 and r[1] != "0")
            if ready >= n:
                return
            if time.monotonic() >= deadline:
                raise RuntimeError("tmux: only %d of %d shells showed a prompt" % (ready, n))
            time.sleep(0.1)

    def stop(self):
        """kill-server; then SIGKILL the server and panes if any is left.
        Returns how many leftovers had to be killed."""
        try:
            subprocess.run(self.base + ["kill-server"], env=self.env, cwd=self.home,
                           capture_output=True, stdin=subprocess.DEVNULL, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        sids = set(self.pane_pids)  # each pane's shell leads its own session
        if self.server_pid:
            deadline = time.monotonic() + 2
            while proc_ids(self.server_pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            sids.add(self.server_pid)  # the server is a session leader too (daemon)
        return kill_sids(sids)


def idle_sessions_tmux(tmp, n):
    """The tmux server's VmRSS with 1, then n sessions of `bash --norc`, idle."""
    tm = Tmux(tmp)
    r = {}
    try:
        tm.new_sessions(["s0"])
        tm.wait_prompts(1)
        r["rss1"] = settle_rss(tm.server_pid)
        t0 = time.monotonic()
        tm.new_sessions(["s%d" % i for i in range(1, n)])
        tm.wait_prompts(n)
        r["open_s"] = time.monotonic() - t0
        time.sleep(1.0)
        r["rssn"] = settle_rss(tm.server_pid)
        r["alive"] = len([p for p in tm.pane_pids if proc_ids(p)])
        shells = [v for v in (proc_status(p, "VmRSS") for p in tm.pane_pids) if v]
        r["shell_rss"] = statistics.median(shells) if shells else None
        return r
    finally:
        r["leftovers"] = tm.stop()


class RssPoller:
    """Polls a pid's VmRSS every 100 ms in a thread; .peak is the max seen."""

    def __init__(self, pid, every_s=0.1):
        self.pid, self.every_s, self.peak, self.samples = pid, every_s, 0, 0
        self.stop_ev = threading.Event()
        self.th = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.stop_ev.is_set():
            v = proc_status(self.pid, "VmRSS")
            if v:
                self.peak = max(self.peak, v)
                self.samples += 1
            self.stop_ev.wait(self.every_s)

    def __enter__(self):
        self.th.start()
        return self

    def __exit__(self, *exc):
        self.stop_ev.set()
        self.th.join()


def flood(td):
    """Session B's `run true` round trips (C client) with session A idle, then
    while A runs `yes` for FLOOD_S s (a `run` with that hard timeout); termd's
    RSS polled meanwhile and its VmHWM reset just before. Then INT to A, and
    how long A takes to be back at its prompt."""
    ctl = WS(td.sock)
    r = {}
    a_open = False
    try:
        expect_obs(ctl.call("session.open", {"name": "A"}), "session.open", "session.open A")
        a_open = True
        for sess in ("A", "B"):  # B is opened by run naming it
            x = expect_obs(ctl.call("run", {"session": sess, "command": "true"}), "run",
                           "run true in " + sess)
            if x.get("exit_code") != 0:
                raise RuntimeError("run true in %s: exit %s" % (sess, x.get("exit_code")))
        # A-idle figures: half the window before the flood, half after (pooled),
        # so a change in the machine's load during the run weighs on both sides
        idle1 = rtt_c(td, session="B", seconds=FLOOD_RTT_S / 2, n=FLOOD_RTT_CAP, warmup=50,
                      samples=True)
        time.sleep(0.5)
        r["rss_before"] = settle_rss(td.proc.pid, max_s=2)
        r["hwm_reset"] = reset_hwm(td.proc.pid)
        cpu0 = td.cpu_s()
        t0 = time.monotonic()
        with RssPoller(td.proc.pid) as poll:
            aid = ctl.send_action("run", {"session": "A", "command": "yes", "timeout": FLOOD_S})
            time.sleep(FLOOD_RAMP_S)
            r["flood"] = rtt_c(td, session="B", seconds=FLOOD_RTT_S, n=FLOOD_RTT_CAP, warmup=20)
            r["rtt_end_s"] = time.monotonic() - t0
            obs = ctl.wait([aid])[aid]
            r["flood_s"] = time.monotonic() - t0
            r["cpu"] = td.cpu_s() - cpu0
            x = expect_obs(obs, "run", "run yes in A")
            r["yes_extras"] = {k: x.get(k) for k in ("running", "timed_out", "truncated", "exit_code")}
            try:
                r["yes_bytes"] = os.path.getsize(x["output_file"]) if x.get("output_file") else None
            except OSError:
                r["yes_bytes"] = None
            t1 = time.monotonic()
            expect_obs(ctl.call("session.signal", {"session": "A", "signal": "INT"}), "session.signal",
                       "session.signal INT A")
            # until A takes a command again (`busy` while yes's output drains)
            r["a_back_s"] = None
            while time.monotonic() - t1 < 30:
                obs = ctl.call("run", {"session": "A", "command": "true", "timeout": 30})
                if obs.get("observation") == "error" and (obs.get("extras") or {}).get("code") == "busy":
                    time.sleep(0.02)
                    continue
                x = expect_obs(obs, "run", "run true in A after INT")
                if not x.get("running"):
                    r["a_back_s"] = time.monotonic() - t1
                break
        r["poll_peak"], r["poll_n"] = poll.peak, poll.samples
        r["hwm"] = td.status("VmHWM")
        r["rss_after"] = td.status("VmRSS")
        idle2 = rtt_c(td, session="B", seconds=FLOOD_RTT_S / 2, n=FLOOD_RTT_CAP, warmup=50,
                      samples=True)
        r["idle"] = pooled(idle1, idle2)
        r["idle_p99s"] = (idle1["p99_us"], idle2["p99_us"])
        expect_obs(ctl.call("session.close", {"name": "A"}), "session.close", "session.close A")
        a_open = False
        return r
    finally:
        if a_open:  # stop `yes` if anything above failed; termd's stop reaps the rest
            try:
                ctl.s.settimeout(10)
                ctl.call("session.close", {"name": "A"})
            except (OSError, RuntimeError, ValueError):
                pass
        ctl.close()


# ---------------------------------------------------------------- output

def ms(us):
    return "%.3f ms" % (us / 1000.0)


def ratio(a, b):
    return "%.2fx" % (a / b) if b else "-"


def table(rows):
    head = ("figure", "termd", "baseline", "termd/base", "target", "met")
    w = [max(len(str(r[i])) for r in [head] + rows) for i in range(len(head))]
    line = "  ".join("%-*s" % (w[i], head[i]) for i in range(len(head)))
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join("%-*s" % (w[i], r[i]) for i in range(len(r))))


def main():
    for b in (TERMD_BIN, RTT_BIN):
        if not os.access(b, os.X_OK):
            print("bench: %s not found or not executable (run `make bench`)" % b, file=sys.stderr)
            return 2
    # a SIGTERM (e.g. from a CI timeout) unwinds through the finally blocks below
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    started = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="tdbench-", dir="/tmp")  # short: unix socket path limit
    td = Termd(tmp)
    ws = None
    try:
        td.start()
        rss_start = td.status("VmRSS")
        print("termd bench: %s, pid %d, %d cores, load %s, N=%d after %d warm-up"
              % (TERMD_BIN, td.proc.pid, os.cpu_count(),
                 " ".join("%.2f" % x for x in os.getloadavg()), N, WARMUP))
        print("(baselines measured in this same run; the machine is shared, so read the ratios)\n")

        sys.stdout.write("1-3/8 round trip: C client, Python client, pexpect bash, "
                         "%d at a time in turn ... " % RTT_BLOCK)
        sys.stdout.flush()
        pexp_home = os.path.join(tmp, "pexpect-home")
        os.makedirs(pexp_home)
        rt = rtt_interleaved(td, pexp_home)
        c, py, px = rt["c"], rt["py"], rt["pexpect"]
        sys.stdout.write("done\n3b/8 new session: session.open + first `run true` vs pexpect "
                         "spawning bash, x%d ... " % START_N)
        sys.stdout.flush()
        st_td, st_px = session_start(td, pexp_home)
        sys.stdout.write("done\n4/8 %s x%d, alternating termd / bare pty ... " % (SEQ_CMD, SEQ_REPS))
        sys.stdout.flush()
        ws = WS(td.sock)
        ws.call("run", {"command": "true"})
        t_td, t_pty, c_td, c_pty, info, pty_bytes = [], [], [], [], None, None
        for _ in range(SEQ_REPS):
            dt, cpu, info = seq_termd(td, ws)
            t_td.append(dt)
            c_td.append(cpu)
            dt, cpu, pty_bytes = seq_pty()
            t_pty.append(dt)
            c_pty.append(cpu)
        sys.stdout.write("done\n4b/8 1 MiB heredoc x%d, alternating termd `run` / `bash FILE` / `cat` from a pipe ... "
                         % HEREDOC_REPS)
        sys.stdout.flush()
        body = heredoc_body()
        hd_path = os.path.join(tmp, "heredoc.txt")
        h_td, h_pipe, h_bash = [], [], []
        hd_script = os.path.join(tmp, "heredoc.sh")
        for _ in range(HEREDOC_REPS):
            h_td.append(heredoc_termd(ws, hd_path, body))
            h_bash.append(heredoc_bash_file(hd_path, body, hd_script))
            h_pipe.append(heredoc_pipe(hd_path, body))
        rss_after = td.status("VmRSS")
        hwm_after = td.status("VmHWM")
        ws.close()
        ws = None
        sys.stdout.write("done\n5/8 run `true` in session B, A idle then A running `yes` (%d s) ... "
                         % FLOOD_S)
        sys.stdout.flush()
        fl = flood(td)
        sys.stdout.write("done\n6/8 termd RSS, 1 then %d idle sessions (fresh termd) ... "
                         % IDLE_SESSIONS)
        sys.stdout.flush()
        it = idle_sessions_termd(tmp, IDLE_SESSIONS)
        sys.stdout.write("done\n7/8 tmux server RSS, 1 then %d idle sessions ... " % IDLE_SESSIONS)
        sys.stdout.flush()
        ix = idle_sessions_tmux(tmp, IDLE_SESSIONS)
        sys.stdout.write("done\n8/8 reference without termd: pexpect bash `true`, idle then with "
                         "`yes` into a bare pty ... ")
        sys.stdout.flush()
        ref_home = os.path.join(tmp, "flood-home")
        os.makedirs(ref_home)
        fb = flood_bare(ref_home)
        sys.stdout.write("done\n9/9 termd start to its first /healthz, x%d ... " % HEALTHZ_N)
        sys.stdout.flush()
        hz, hz_off = start_to_healthz(tmp)
        print("done\n")

        med_td, med_pty = statistics.median(t_td), statistics.median(t_pty)
        cmed_td, cmed_pty = statistics.median(c_td), statistics.median(c_pty)
        seq_ratio = med_td / med_pty
        rows = [
            ("run `true` RTT p50, C client", ms(c["p50_us"]), ms(px["p50_us"]) + " (pexpect)",
             ratio(c["p50_us"], px["p50_us"]), "termd p50 < %.0f ms" % RTT_TARGET_MS,
             "yes" if c["p50_us"] / 1000.0 < RTT_TARGET_MS else "NO"),
            ("run `true` RTT p99, C client", ms(c["p99_us"]), ms(px["p99_us"]) + " (pexpect)",
             ratio(c["p99_us"], px["p99_us"]), "-", "-"),
            ("run `true` RTT p50, Python client", ms(py["p50_us"]), ms(px["p50_us"]) + " (pexpect)",
             ratio(py["p50_us"], px["p50_us"]), "<= %.1fx pexpect" % PY_TARGET_RATIO,
             "yes" if py["p50_us"] <= PY_TARGET_RATIO * px["p50_us"] else "NO"),
            ("run `true` RTT p99, Python client", ms(py["p99_us"]), ms(px["p99_us"]) + " (pexpect)",
             ratio(py["p99_us"], px["p99_us"]), "-", "-"),
            ("new session + first `run true`, median of %d" % START_N, "%.1f ms" % (st_td * 1000),
             "%.1f ms (pexpect bash -i)" % (st_px * 1000), ratio(st_td, st_px),
             "<= %.0fx pexpect" % START_TARGET_RATIO,
             "yes" if st_td <= START_TARGET_RATIO * st_px else "NO"),
            ("`%s` median of %d" % (SEQ_CMD, SEQ_REPS), "%.3f s" % med_td,
             "%.3f s (bare pty)" % med_pty, "%.2fx" % seq_ratio,
             "<= %.2fx bare pty" % SEQ_TARGET_RATIO, "yes" if seq_ratio <= SEQ_TARGET_RATIO else "NO"),
            ("  reading side's CPU per seq run", "%.2f s (termd)" % cmed_td,
             "%.2f s (python reader)" % cmed_pty, ratio(cmed_td, cmed_pty), "-", "-"),
            ("1 MiB heredoc by `run`, median of %d" % HEREDOC_REPS,
             "%.1f ms" % (statistics.median(h_td) * 1000),
             "%.1f ms (bash FILE)" % (statistics.median(h_bash) * 1000),
             ratio(statistics.median(h_td), statistics.median(h_bash)),
             "<= %.1fx bash FILE" % HEREDOC_TARGET_RATIO,
             "yes" if statistics.median(h_td) <= HEREDOC_TARGET_RATIO * statistics.median(h_bash)
             else "NO"),
            ("  the same bytes by `cat` from a pipe", "-",
             "%.1f ms (cat)" % (statistics.median(h_pipe) * 1000),
             ratio(statistics.median(h_td), statistics.median(h_pipe)), "-", "-"),
            ("termd RSS after the seq runs", "%.1f MiB" % (rss_after / 1024.0),
             "%.1f MiB at start" % (rss_start / 1024.0), ratio(rss_after, rss_start), "-", "-"),
            ("termd peak RSS (VmHWM)", "%.1f MiB" % (hwm_after / 1024.0), "-", "-", "-", "-"),
        ]
        rows.append(("start to the first /healthz, median of %d" % HEALTHZ_N, "%.1f ms" % (hz * 1000),
                     "%.1f ms (--cgroups off)" % (hz_off * 1000), ratio(hz, hz_off),
                     "<= %.0f ms" % HEALTHZ_TARGET_MS,
                     "yes" if hz * 1000 <= HEALTHZ_TARGET_MS else "NO"))
        k = IDLE_SESSIONS - 1
        per_td = (it["rssn"] - it["rss1"]) / k
        per_tx = (ix["rssn"] - ix["rss1"]) / k
        rows += [
            ("RSS, 1 idle session", "%.1f MiB" % (it["rss1"] / 1024.0),
             "%.1f MiB (tmux server)" % (ix["rss1"] / 1024.0), ratio(it["rss1"], ix["rss1"]), "-", "-"),
            ("RSS, %d idle sessions" % IDLE_SESSIONS, "%.1f MiB" % (it["rssn"] / 1024.0),
             "%.1f MiB (tmux server)" % (ix["rssn"] / 1024.0), ratio(it["rssn"], ix["rssn"]), "-", "-"),
            ("  RSS per idle session beyond the first", "%.1f kB" % per_td,
             "%.1f kB (tmux server)" % per_tx, ratio(per_td, per_tx),
             "termd < %.0f kB" % IDLE_TARGET_KB, "yes" if per_td < IDLE_TARGET_KB else "NO"),
        ]
        fi, ff = fl["idle"], fl["flood"]
        f_ratio = ff["p99_us"] / fi["p99_us"]
        peak = max(fl["hwm"] if fl["hwm_reset"] else 0, fl["poll_peak"])
        rows += [
            ("run `true` in B p50, A running `yes`", ms(ff["p50_us"]), ms(fi["p50_us"]) + " (A idle)",
             ratio(ff["p50_us"], fi["p50_us"]), "-", "-"),
            ("run `true` in B p99, A running `yes`", ms(ff["p99_us"]), ms(fi["p99_us"]) + " (A idle)",
             "%.2fx" % f_ratio, "<= %.0fx A idle" % FLOOD_P99_TARGET,
             "yes" if f_ratio <= FLOOD_P99_TARGET else "NO"),
            ("termd peak RSS during `yes`", "%.1f MiB" % (peak / 1024.0),
             "%.1f MiB before" % (fl["rss_before"] / 1024.0), ratio(peak, fl["rss_before"]),
             "< %.0f MiB" % FLOOD_RSS_TARGET_MIB, "yes" if peak / 1024.0 < FLOOD_RSS_TARGET_MIB else "NO"),
        ]
        table(rows)
        print()
        print("RTT detail (us)  C: min %.0f p50 %.0f p90 %.0f p99 %.0f max %.0f | "
              "py: min %.0f p50 %.0f p99 %.0f max %.0f | pexpect: min %.0f p50 %.0f p99 %.0f max %.0f"
              % (c["min_us"], c["p50_us"], c["p90_us"], c["p99_us"], c["max_us"],
                 py["min_us"], py["p50_us"], py["p99_us"], py["max_us"],
                 px["min_us"], px["p50_us"], px["p99_us"], px["max_us"]))
        print("seq runs (s)     termd: %s | bare pty: %s   (CPU: termd %s | reader %s)"
              % (" ".join("%.3f" % x for x in t_td), " ".join("%.3f" % x for x in t_pty),
                 " ".join("%.2f" % x for x in c_td), " ".join("%.2f" % x for x in c_pty)))
        print("seq output       bare pty read %d bytes; termd: truncated=%s, content %d chars, "
              "output_file %s bytes, extras.duration_ms %s"
              % (pty_bytes, info["truncated"], info["content_chars"], info["output_file_bytes"],
                 info["duration_ms"]))
        print("B while A idle   %d round trips in 2 x %.2f s (before / after the flood: p99 %.0f / %.0f), "
              "us: min %.0f p50 %.0f p90 %.0f p99 %.0f max %.0f"
              % (fi["n"], FLOOD_RTT_S / 2, fl["idle_p99s"][0], fl["idle_p99s"][1], fi["min_us"],
                 fi["p50_us"], fi["p90_us"], fi["p99_us"], fi["max_us"]))
        print("B while A `yes`  %d round trips in %.1f s, us: min %.0f p50 %.0f p90 %.0f p99 %.0f max %.0f"
              % (ff["n"], FLOOD_RTT_S, ff["min_us"], ff["p50_us"], ff["p90_us"], ff["p99_us"],
                 ff["max_us"]))
        bi, bf = fb["idle"], fb["flood"]
        print("no-termd ref.    pexpect bash `true` p99 %.0f us idle (%d), %.0f us with `yes` into a bare "
              "pty (%d; p50 %.0f, max %.0f) = %.2fx; the reader drained %.1f MB/s"
              % (bi["p99_us"], bi["n"], bf["p99_us"], bf["n"], bf["p50_us"], bf["max_us"],
                 bf["p99_us"] / bi["p99_us"], fb["bytes"] / 1e6 / fb["secs"]))
        yb = fl["yes_bytes"]
        print("`yes` in A       run answered after %.1f s (%s); B's window ended at %.1f s; "
              "rendered output %s; termd CPU %.1f s over the flood (%.0f%% of a core); "
              "A back at its prompt %s after INT"
              % (fl["flood_s"], ", ".join("%s=%s" % kv for kv in fl["yes_extras"].items()),
                 fl["rtt_end_s"],
                 "%.1f MB (%.1f MB/s)" % (yb / 1e6, yb / 1e6 / fl["flood_s"]) if yb else "?",
                 fl["cpu"], 100.0 * fl["cpu"] / fl["flood_s"],
                 "%.2f s" % fl["a_back_s"] if fl["a_back_s"] is not None else "not"))
        print("termd RSS, flood VmHWM %s (reset before the flood: %s), max of %d polls every 100 ms "
              "%.1f MiB, %.1f MiB once A was back at its prompt"
              % ("%.1f MiB" % (fl["hwm"] / 1024.0) if fl["hwm_reset"] else "-",
                 "yes" if fl["hwm_reset"] else "refused", fl["poll_n"], fl["poll_peak"] / 1024.0,
                 fl["rss_after"] / 1024.0))
        p1, pn = it["parts1"], it["partsn"]
        print("termd idle RSS   1 -> %d sessions (%d alive), opened + `run true` in %.1f s; growth by "
              "mapping kind, kB: heap %+d, anon mmap %+d, file %+d, other %+d; VmHWM %.1f MiB"
              % (IDLE_SESSIONS, it["alive"], it["open_s"], pn["heap"] - p1["heap"],
                 pn["anon"] - p1["anon"], pn["file"] - p1["file"], pn["other"] - p1["other"],
                 it["hwm"] / 1024.0))
        print("tmux idle RSS    1 -> %d sessions (%d alive, %dx%d, `%s`), opened in %.1f s"
              % (IDLE_SESSIONS, ix["alive"], TERM_COLS, TERM_ROWS, TMUX_SHELL, ix["open_s"]))
        print("shell processes  median VmRSS of one: %s kB under termd (with its shell integration), "
              "%s kB under tmux (not counted above)"
              % tuple("%.0f" % v if v is not None else "?" for v in (it["shell_rss"], ix["shell_rss"])))
        for what, n_left in (("termd (idle sessions)", it["leftovers"]),
                             ("tmux", ix["leftovers"])):
            if n_left:
                print("cleanup          %d process(es) of %s outlived their server and were killed"
                      % (n_left, what))
        print("bench took %.0f s" % (time.monotonic() - started))
        return 0
    finally:
        if ws is not None:
            ws.close()
        left = td.stop()
        if left:
            print("cleanup: %d process(es) of termd's sessions outlived it and were killed" % left)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
