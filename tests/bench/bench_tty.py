"""bench_tty.py — the live terminal channel's figures (issue 4), on a private
termd:

  1. keystroke-to-echo latency through od-attach's protocol path: an 'I'
     frame on /tty/main?mode=rw -> the pty -> bash's readline echoes it ->
     the first 'O' frame back; p50/p99 over BENCH_TTY_KEYS keystrokes
     (alternating a letter and DEL, so the line stays short), BENCH_TTY_GAP_MS
     (default 5) apart as when typing — back to back they are faster, an
     idle machine's wake-up latency is part of what a person feels;
  2. fan-out: the time `run` takes for a command printing ~15 MB, with no
     viewer and with BENCH_TTY_VIEWERS (50) read-only viewers attached and
     read as fast as this process can; target: within 1.2x.

Informational: exit status 0 whenever the figures could be taken. Run it
alone (`TERMD_BIN=build/termd /usr/bin/python3 tests/bench/bench_tty.py`)
or from bench.py (`import bench_tty; rows = bench_tty.measure(TERMD_BIN)`,
rows being (name, value, target/ratio text) tuples).

Environment: TERMD_BIN (default build/termd), BENCH_TTY_KEYS (default 500),
BENCH_TTY_GAP_MS (default 5), BENCH_TTY_VIEWERS (default 50), BENCH_TTY_REPS
(default 3)."""

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
REPS = int(os.environ.get("BENCH_TTY_REPS", "3"))
GAP_S = float(os.environ.get("BENCH_TTY_GAP_MS", "5")) / 1000.0   # between keystrokes, like typing
TTY = "termd.tty.v1"
# 210000 lines of 71 bytes (+ CR from the pty): ~15 MB through the pty
FLOOD_CMD = "yes 0123456789012345678901234567890123456789012345678901234567890123456789 | head -n 210000"
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


def flood_time(td, viewers, drain=True):
    """Wall time of `run FLOOD_CMD` with `viewers` read-only viewers, drained
    by this process (or never read, drain=False); also the bytes each viewer
    received."""
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


def measure(termd_bin=TERMD_BIN, keys=KEYS, viewers=VIEWERS, reps=REPS):
    """Returns rows (name, value, note)."""
    td = Termd(termd_bin)
    rows = []
    try:
        lat = keystroke_latency(td, keys)
        rows.append(("tty keystroke->echo p50", "%.3f ms" % (pct(lat, 50) * 1e3),
                     "n=%d, %.0f ms apart" % (len(lat), GAP_S * 1e3)))
        rows.append(("tty keystroke->echo p99", "%.3f ms" % (pct(lat, 99) * 1e3), ""))
        base, fan, stalled, rx = [], [], [], []
        flood_time(td, 0)                                # warm-up (page cache, shell)
        for _ in range(reps):
            base.append(flood_time(td, 0)[0])
            t, per = flood_time(td, viewers)
            fan.append(t)
            rx.extend(per)
            stalled.append(flood_time(td, viewers, drain=False)[0])
        b, f = statistics.median(base), statistics.median(fan)
        st = statistics.median(stalled)
        rows.append(("~15 MB output, no viewer", "%.2f s" % b, "median of %d" % reps))
        ratio = f / b if b else float("inf")
        rows.append(("~15 MB output, %d ro viewers" % viewers, "%.2f s" % f,
                     "%.2fx (target <= %.1fx) %s" % (ratio, FLOOD_TARGET,
                                                    "met" if ratio <= FLOOD_TARGET else "NOT met")))
        rows.append(("~15 MB output, %d ro viewers not reading" % viewers, "%.2f s" % st,
                     "%.2fx (no reader competing for the CPU)" % (st / b if b else float("inf"))))
        rows.append(("  bytes per reading viewer (min/median)", "%.1f / %.1f MB"
                     % (min(rx) / 1e6, statistics.median(rx) / 1e6),
                     "less than the output = dropped backlog, resnapshotted"))
    finally:
        td.stop()
    return rows


def main():
    if not os.access(TERMD_BIN, os.X_OK):
        print("bench_tty: no termd at %s (set TERMD_BIN or run make)" % TERMD_BIN, file=sys.stderr)
        return 2
    rows = measure()
    w = max(len(r[0]) for r in rows)
    print("== live terminal channel (/tty)")
    for name, value, note in rows:
        print("%-*s  %14s  %s" % (w, name, value, note))
    return 0


if __name__ == "__main__":
    sys.exit(main())
