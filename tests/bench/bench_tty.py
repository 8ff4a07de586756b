"""bench_tty.py — the live terminal channel's figures (issues 4 and 16), on
a private termd:

  1. keystroke-to-echo latency through od-attach's protocol path: an 'I'
     frame on /tty/main?mode=rw -> the pty -> bash's readline echoes it ->
     the first 'O' frame back; p50/p99 over BENCH_TTY_KEYS keystrokes
     (alternating a letter and DEL, so the line stays short), BENCH_TTY_GAP_MS
     (default 5) apart as when typing — back to back they are faster, an
     idle machine's wake-up latency is part of what a person feels;
  2. fan-out (the headline): the time `run` takes for a command printing
     ~15 MB, alone and with BENCH_TTY_VIEWERS (50) read-only viewers attached
     and drained as fast as they come by bench-viewers (tests/bench/viewers.c:
     one C process, one poll loop, so the readers cost little CPU); target:
     within 1.2x. The command ends by printing a marker unique to the rep;
     every viewer must see it, in its 'O' stream or in a later 'S' snapshot,
     else the figure is reported as failed. Past termd's --viewer-rate (the
     bytes a session's viewers are sent together, per second) the viewers get
     the screen 20 times a second instead of every byte: the rows say how many
     snapshots they got and how many output bytes, and when the last of them
     had the marker. The same with BENCH_TTY_FEW (8) viewers, under the rate:
     each must get every byte;
  3. informational: the same with the viewers attached but never read, and
     (one rep, BENCH_TTY_PY_READERS=0 skips it) with this Python process
     reading them, as measured before bench-viewers existed.

Informational: exit status 0 whenever the figures could be taken. Run it
alone (`TERMD_BIN=build/termd BENCH_VIEWERS_BIN=build/bench-viewers
/usr/bin/python3 tests/bench/bench_tty.py`) or from bench.py (`import
bench_tty; rows = bench_tty.measure(TERMD_BIN)`, rows being (name, value,
target/ratio text) tuples).

Environment: TERMD_BIN (default build/termd), BENCH_VIEWERS_BIN (default
build/bench-viewers), BENCH_TTY_KEYS (default 500), BENCH_TTY_GAP_MS
(default 5), BENCH_TTY_VIEWERS (default 50), BENCH_TTY_FEW (default 8; 0
skips), BENCH_TTY_REPS (default 5),
BENCH_TTY_PY_READERS (default 1)."""

import json
import os
import selectors
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tests", "regress"))
import wsclient  # noqa: E402  (the regress suite's stdlib WebSocket client)

TERMD_BIN = os.path.abspath(os.environ.get("TERMD_BIN") or os.path.join(REPO, "build", "termd"))
KEYS = int(os.environ.get("BENCH_TTY_KEYS", "500"))
VIEWERS = int(os.environ.get("BENCH_TTY_VIEWERS", "50"))
FEW = int(os.environ.get("BENCH_TTY_FEW", "8"))
REPS = int(os.environ.get("BENCH_TTY_REPS", "5"))
PY_READERS = os.environ.get("BENCH_TTY_PY_READERS", "1") not in ("", "0")
VIEWERS_BIN = os.path.abspath(os.environ.get("BENCH_VIEWERS_BIN")
                              or os.path.join(REPO, "build", "bench-viewers"))
GAP_S = float(os.environ.get("BENCH_TTY_GAP_MS", "5")) / 1000.0   # between keystrokes, like typing
TTY = "termd.tty.v1"
# 210000 lines of 71 bytes (+ CR from the pty): ~15 MB through the pty
FLOOD_CMD = "yes 0123456789012345678901234567890123456789012345678901234567890123456789 | head -n 210000"
# then a marker unique to the rep; the quotes keep the typed command line
# (which the pty echoes) from containing it
MARKER_CMD = '; echo "flood-end"-%s'
FLOOD_TARGET = 1.2

_SCRUB = ("TERMD_TOKEN", "TERMD_URL", "PROMPT_COMMAND", "PS1", "PS2", "BASH_ENV", "ENV",
          "VIRTUAL_ENV", "TMUX", "HISTFILE")


class Termd:
    def __init__(self, termd_bin):
        self.dir = tempfile.mkdtemp(prefix="bench-tty-")
        self.home = os.path.join(self.dir, "home")
        os.mkdir(self.home)
        self.sock = os.path.join(self.dir, "t.sock")
        self.url = "unix:" + self.sock
        env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
        env["HOME"] = self.home
        self.log = open(os.path.join(self.dir, "termd.log"), "wb")
        self.proc = subprocess.Popen([termd_bin, "--listen", self.url, "--cwd", self.home],
                                     stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, env=env, cwd=self.home,
                                     start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("termd exited during start-up (status %d)" % self.proc.returncode)
            if os.path.exists(self.sock):
                try:
                    if wsclient.http_request(self.url, "/healthz", timeout=5)[0] == 200:
                        return
                except Exception:
                    pass
            time.sleep(0.05)
        raise RuntimeError("termd did not start")

    def stop(self):
        try:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(5)
        except Exception:
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def tty(url, mode):
    ws = wsclient.connect(url, "/tty/main?mode=" + mode, TTY)
    for want in ("Z", "S"):
        op, p = ws.recv(30)
        if chr(p[0]) != want:
            raise RuntimeError("expected %r first, got %r" % (want, p[:40]))
    return ws


def pct(sorted_v, p):
    return sorted_v[min(len(sorted_v) - 1, int(round(p / 100.0 * (len(sorted_v) - 1))))]


def keystroke_latency(td, n):
    """Seconds from an 'I' frame to the first 'O' frame after it."""
    ev = wsclient.Events(td.url)
    ev.call("run", {"command": "true"}, timeout=60)     # the prompt is up and idle
    ws = tty(td.url, "rw")
    samples = []
    try:
        for i in range(n + 20):
            # a letter (cycling, so a late echo of an earlier one is not
            # mistaken for this one's), then DEL, whose echo starts with BS
            key = bytes([ord("a") + (i // 2) % 26]) if i % 2 == 0 else b"\x7f"
            want = key if i % 2 == 0 else b"\x08"
            t0 = time.perf_counter()
            ws.send_binary(b"I" + key)
            while True:
                op, p = ws.recv(10)
                if p[:1] == b"O" and want in p:
                    break
            if i >= 20:                                 # warm-up
                samples.append(time.perf_counter() - t0)
            time.sleep(GAP_S)
        ws.send_binary(b"I\x15")                        # C-u: an empty line again
        time.sleep(0.2)
    finally:
        ws.abort()
        ev.close()
    return sorted(samples)


def cpu_s(pid):
    """User + system CPU seconds process pid has used so far."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def flood_cmd(nonce):
    return FLOOD_CMD + MARKER_CMD % nonce, "flood-end-%s" % nonce


def run_flood(ev, cmd):
    """Seconds `run cmd` took (answer included), on the events client ev."""
    t0 = time.perf_counter()
    obs = ev.call("run", {"command": cmd, "timeout": 300, "max_output": 1000}, timeout=330)
    dt = time.perf_counter() - t0
    if obs.get("observation") != "run" or obs["extras"].get("running") \
            or obs["extras"].get("exit_code") != 0:
        raise RuntimeError("flood run did not finish: %.300s" % json.dumps(obs))
    return dt


def _read_line(proc, timeout):
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        if not sel.select(timeout):
            raise RuntimeError("bench-viewers said nothing within %d s" % timeout)
    finally:
        sel.close()
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError("bench-viewers exited (status %s)" % proc.wait())
    return json.loads(line)


def flood_time_c(td, viewers, nonce):
    """`run` of the flood command with `viewers` read-only viewers attached
    and drained by bench-viewers (none: the command alone). Returns (seconds,
    bench-viewers' figures or None, seconds from the run's start until the
    last viewer had the marker or None, termd's CPU seconds from the run's
    start until then, bench-viewers' CPU seconds or None)."""
    cmd, marker = flood_cmd(nonce)
    ev = wsclient.Events(td.url)
    proc = None
    try:
        if not viewers:
            c0 = cpu_s(td.proc.pid)
            dt = run_flood(ev, cmd)
            return dt, None, None, cpu_s(td.proc.pid) - c0, None
        proc = subprocess.Popen([VIEWERS_BIN, "-n", str(viewers), "-m", marker, "-w", "600", td.url],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
        ready = _read_line(proc, 60)
        if ready.get("open") != viewers:
            raise RuntimeError("bench-viewers: only %s of %d viewers attached" % (ready.get("open"), viewers))
        c0 = cpu_s(td.proc.pid)
        t0m = time.monotonic()                   # CLOCK_MONOTONIC, as bench-viewers' "mono"
        dt = run_flood(ev, cmd)
        try:
            figs = _read_line(proc, 120)         # every viewer has the marker, or closed
        except RuntimeError:
            proc.send_signal(signal.SIGTERM)
            figs = _read_line(proc, 30)
        cpu = cpu_s(td.proc.pid) - c0
        vcpu = None
        for _ in range(300):                     # its CPU time once it has exited
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                proc.returncode = status
                vcpu = ru.ru_utime + ru.ru_stime
                break
            time.sleep(0.1)
        last = figs.get("last_marker_mono")
        return dt, figs, (last - t0m) if last else None, cpu, vcpu
    finally:
        if proc and proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc:
            proc.stdout.close()
        ev.ws.abort()


def flood_time_py(td, viewers, drain=True):
    """Wall time of `run FLOOD_CMD` with `viewers` read-only viewers, drained
    by this Python process (or never read, drain=False); also the bytes each
    viewer received."""
    conns = [tty(td.url, "ro") for _ in range(viewers)]
    sel = selectors.DefaultSelector()
    got = {}
    for ws in conns:
        got[ws] = 0
        if drain:
            ws.sock.setblocking(False)
            sel.register(ws.sock, selectors.EVENT_READ, ws)
    buf = bytearray(1 << 20)
    ev = wsclient.Events(td.url)
    try:
        aid = ev.send_action("run", {"command": FLOOD_CMD, "timeout": 300, "max_output": 1000})
        ev.ws.sock.setblocking(False)
        sel.register(ev.ws.sock, selectors.EVENT_READ, None)
        t0 = time.perf_counter()
        done = None
        while done is None:
            for key, _ in sel.select(1.0):
                if key.data is None:
                    ev.ws.sock.setblocking(True)
                    try:
                        obs = ev.recv_obs(30)
                    finally:
                        ev.ws.sock.setblocking(False)
                    if obs.get("cause") == aid:
                        done = time.perf_counter() - t0
                        if obs.get("observation") != "run" or obs["extras"].get("running"):
                            raise RuntimeError("flood run did not finish: %.300s" % json.dumps(obs))
                    continue
                try:
                    k = key.fileobj.recv_into(buf)
                except BlockingIOError:
                    continue
                if k == 0:
                    sel.unregister(key.fileobj)
                got[key.data] += k
        return done, [got[ws] for ws in conns]
    finally:
        sel.close()
        for ws in conns:
            ws.abort()
        ev.ws.abort()


def fanout(td, viewers=VIEWERS, reps=REPS, py_readers=PY_READERS):
    """The fan-out rows: (name, value, note)."""
    rows = []
    nonce = [int(time.time() * 1000) % 1000000]

    def next_nonce():
        nonce[0] += 1
        return "%d-%d" % (os.getpid(), nonce[0])

    flood_time_c(td, 0, next_nonce())                    # warm-up (page cache, shell)
    base, fan, lag, stalled = [], [], [], []
    figs, cpu_base, cpu_fan, cpu_viewers = [], [], [], []
    few, few_figs = [], []
    for _ in range(reps):
        if FEW:
            t, f, _l, _c, _v = flood_time_c(td, FEW, next_nonce())
            few.append(t)
            few_figs.append(f)
        t, _f, _l, cpu, _v = flood_time_c(td, 0, next_nonce())
        base.append(t)
        cpu_base.append(cpu)
        t, f, last, cpu, vcpu = flood_time_c(td, viewers, next_nonce())
        fan.append(t)
        figs.append(f)
        cpu_fan.append(cpu)
        if vcpu is not None:
            cpu_viewers.append(vcpu)
        if last is not None:
            lag.append(last)
        stalled.append(flood_time_py(td, viewers, drain=False)[0])
    b, f = statistics.median(base), statistics.median(fan)
    ratio = f / b if b else float("inf")
    ok = all(x["got_marker"] == viewers for x in figs)
    rows.append(("~15 MB output, no viewer", "%.2f s" % b,
                 "median of %d: %s" % (reps, " ".join("%.2f" % x for x in base))))
    rows.append(("~15 MB output, %d ro C viewers" % viewers, "%.2f s" % f,
                 "%.2fx (target <= %.1fx) %s; reps %s" % (
                     ratio, FLOOD_TARGET,
                     ("met" if ratio <= FLOOD_TARGET else "NOT met") if ok
                     else "FAILED: a viewer missed the end of the output",
                     " ".join("%.2fx" % (x / b) for x in fan))))
    if lag:
        rows.append(("  until the last viewer had the end", "%.2f s" % statistics.median(lag),
                     "%.2fx the no-viewer run" % (statistics.median(lag) / b if b else float("inf"))))
    cb, cf = statistics.median(cpu_base), statistics.median(cpu_fan)
    rows.append(("  termd CPU, no viewer / %d viewers" % viewers, "%.2f / %.2f s" % (cb, cf),
                 "%.2fx; bench-viewers itself %s" % (
                     cf / cb if cb else float("inf"),
                     "%.2f s" % statistics.median(cpu_viewers) if cpu_viewers else "?")))
    rows.append(("  viewers with the end (O / later S)", "%d / %d" % (
        sum(x["marker_in_O"] for x in figs), sum(x["marker_in_S"] for x in figs)),
        "of %d over %d reps%s" % (viewers * reps, reps, "" if ok else ": %d missed" % (
            viewers * reps - sum(x["got_marker"] for x in figs)))))
    rows.append(("  viewers sent screens for output", "%d" % sum(x["resnapshotted"] for x in figs),
                 "%d snapshots after the first; O bytes per viewer min/max %.1f / %.1f MB" % (
                     sum(x["resnaps"] for x in figs),
                     min(x["O_bytes_min"] for x in figs) / 1e6,
                     max(x["O_bytes_max"] for x in figs) / 1e6)))
    if few:
        fw = statistics.median(few)
        exact = all(x["got_marker"] == FEW and x["resnapshotted"] == 0 for x in few_figs)
        rows.append(("~15 MB output, %d ro C viewers" % FEW, "%.2f s" % fw,
                     "%.2fx; %s; O bytes per viewer min %.1f MB" % (
                         fw / b if b else float("inf"),
                         "every byte to each (under --viewer-rate)" if exact
                         else "NOT every byte: %d snapshots after the first" % sum(
                             x["resnaps"] for x in few_figs),
                         min(x["O_bytes_min"] for x in few_figs) / 1e6)))
    st = statistics.median(stalled)
    rows.append(("~15 MB output, %d ro viewers not reading" % viewers, "%.2f s" % st,
                 "%.2fx (their backlogs dropped at the cap)" % (st / b if b else float("inf"))))
    if py_readers:
        t, per = flood_time_py(td, viewers)
        rows.append(("~15 MB output, %d ro Python viewers" % viewers, "%.2f s" % t,
                     "%.2fx, one rep (the readers compete for the CPU); "
                     "%.1f MB per viewer min" % (t / b if b else float("inf"), min(per) / 1e6)))
    return rows


def measure(termd_bin=TERMD_BIN, keys=KEYS, viewers=VIEWERS, reps=REPS):
    """Returns rows (name, value, note)."""
    td = Termd(termd_bin)
    rows = []
    try:
        if keys > 0:
            lat = keystroke_latency(td, keys)
            rows.append(("tty keystroke->echo p50", "%.3f ms" % (pct(lat, 50) * 1e3),
                         "n=%d, %.0f ms apart" % (len(lat), GAP_S * 1e3)))
            rows.append(("tty keystroke->echo p99", "%.3f ms" % (pct(lat, 99) * 1e3), ""))
        rows.extend(fanout(td, viewers, reps))
    finally:
        td.stop()
    return rows


def main():
    for what, path in (("termd", TERMD_BIN), ("bench-viewers", VIEWERS_BIN)):
        if not os.access(path, os.X_OK):
            print("bench_tty: no %s at %s (set TERMD_BIN / BENCH_VIEWERS_BIN or run make bench)"
                  % (what, path), file=sys.stderr)
            return 2
    rows = measure()
    w = max(len(r[0]) for r in rows)
    print("== live terminal channel (/tty)")
    for name, value, note in rows:
        print("%-*s  %14s  %s" % (w, name, value, note))
    return 0


if __name__ == "__main__":
    sys.exit(main())
