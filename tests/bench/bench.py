"""bench.py — owns `make bench`: starts a private termd, measures it next to
baselines taken in the same run (pexpect-driven bash, a bare pty), prints one
table of figures, ratios and targets. Informational only: the exit status is 0
whenever the measurements could be taken, met targets or not.

Environment: TERMD_BIN (required), BENCH_RTT_BIN (the C round-trip client,
default build/bench-rtt), BENCH_N (timed round trips, default 2000)."""

import base64
import json
import os
import pty
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import pexpect

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TERMD_BIN = os.environ.get("TERMD_BIN") or os.path.join(REPO, "build", "termd")
RTT_BIN = os.environ.get("BENCH_RTT_BIN") or os.path.join(REPO, "build", "bench-rtt")
N = int(os.environ.get("BENCH_N", "2000"))
WARMUP = 200
SEQ_CMD = "seq 1 2000000"
SEQ_REPS = 3
RTT_TARGET_MS = 1.0
SEQ_TARGET_RATIO = 1.15

# Never leak the caller's shell setup into termd or the baseline bash.
_SCRUB = ("TERMD_TOKEN", "TERMD_URL", "PROMPT_COMMAND", "PS1", "PS2", "BASH_ENV", "ENV",
          "VIRTUAL_ENV", "TMUX", "HISTFILE", "TMPDIR")


def clean_env(home, **extra):
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env["HOME"] = home
    env.update(extra)
    return env


# ---------------------------------------------------------------- WebSocket
# A minimal RFC 6455 client for the events channel (unix socket only), kept
# here so the bench does not depend on the regress suite's helpers.

class WS:
    def __init__(self, sock_path, path="/events", subproto="termd.events.v1"):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(120)
        self.s.connect(sock_path)
        key = base64.b64encode(os.urandom(16)).decode()
        self.s.sendall(("GET %s HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n"
                        "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                        "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: %s\r\n\r\n"
                        % (path, key, subproto)).encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            c = self.s.recv(65536)
            if not c:
                raise RuntimeError("EOF during WebSocket handshake")
            buf += c
        head, _, rest = buf.partition(b"\r\n\r\n")
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise RuntimeError("handshake refused: %r" % head[:200])
        self.buf = bytearray(rest)
        self.counter = 0

    def send_text(self, text):
        data = text.encode()
        n = len(data)
        if n < 126:
            hdr = struct.pack("!BB", 0x81, 0x80 | n)
        elif n < 65536:
            hdr = struct.pack("!BBH", 0x81, 0x80 | 126, n)
        else:
            hdr = struct.pack("!BBQ", 0x81, 0x80 | 127, n)
        key = os.urandom(4)
        full = (key * (n // 4 + 1))[:n]
        masked = (int.from_bytes(data, "big") ^ int.from_bytes(full, "big")).to_bytes(n, "big")
        self.s.sendall(hdr + key + masked)

    def _need(self, k):
        while len(self.buf) < k:
            c = self.s.recv(1 << 16)
            if not c:
                raise RuntimeError("EOF from termd")
            self.buf += c

    def recv_msg(self):
        """Next whole text/binary message (bytes); pings answered."""
        parts = []
        while True:
            self._need(2)
            b0, b1 = self.buf[0], self.buf[1]
            n, pos = b1 & 0x7F, 2
            if n == 126:
                self._need(4)
                n, pos = struct.unpack_from("!H", self.buf, 2)[0], 4
            elif n == 127:
                self._need(10)
                n, pos = struct.unpack_from("!Q", self.buf, 2)[0], 10
            self._need(pos + n)
            payload = bytes(self.buf[pos:pos + n])
            del self.buf[:pos + n]
            op = b0 & 0x0F
            if op == 0x9:
                self._send_ctl(0xA, payload)
                continue
            if op == 0xA:
                continue
            if op == 0x8:
                raise RuntimeError("termd closed the connection")
            parts.append(payload)
            if b0 & 0x80:
                return b"".join(parts)

    def _send_ctl(self, op, payload):
        key = os.urandom(4)
        self.s.sendall(struct.pack("!BB", 0x80 | op, 0x80 | len(payload)) + key +
                       bytes(b ^ key[i % 4] for i, b in enumerate(payload)))

    def call(self, action, args):
        self.counter += 1
        aid = "bench-py-%d-%d" % (os.getpid(), self.counter)
        self.send_text(json.dumps({"id": aid, "action": action, "args": args}))
        while True:
            obs = json.loads(self.recv_msg())
            if obs.get("cause") == aid:
                return obs

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass


# ---------------------------------------------------------------- termd

class Termd:
    def __init__(self, tmp):
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
            [TERMD_BIN, "--listen", self.url, "--cwd", self.home],
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
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])  # kB
        return None

    def cpu_s(self):
        """utime + stime of termd so far, in seconds (clock-tick resolution)."""
        with open("/proc/%d/stat" % self.proc.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


# ---------------------------------------------------------------- measurements

def pctl(sorted_v, p):
    k = max(0, min(len(sorted_v) - 1, int(p / 100.0 * len(sorted_v) + 0.999999) - 1))
    return sorted_v[k]


def summary_us(samples_s):
    v = sorted(x * 1e6 for x in samples_s)
    return {"n": len(v), "min_us": v[0], "p50_us": pctl(v, 50), "p99_us": pctl(v, 99),
            "max_us": v[-1], "mean_us": sum(v) / len(v)}


def rtt_c(td):
    out = subprocess.run([RTT_BIN, td.url, str(N), str(WARMUP), "true"], capture_output=True,
                         text=True, timeout=150, env=clean_env(td.home))
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

        sys.stdout.write("1/4 round trip, C client ... ")
        sys.stdout.flush()
        c = rtt_c(td)
        sys.stdout.write("done\n2/4 round trip, Python client ... ")
        sys.stdout.flush()
        py = rtt_py(td)
        sys.stdout.write("done\n3/4 round trip, pexpect bash ... ")
        sys.stdout.flush()
        pexp_home = os.path.join(tmp, "pexpect-home")
        os.makedirs(pexp_home)
        px = rtt_pexpect(pexp_home)
        sys.stdout.write("done\n4/4 %s x%d, alternating termd / bare pty ... " % (SEQ_CMD, SEQ_REPS))
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
        rss_after = td.status("VmRSS")
        hwm_after = td.status("VmHWM")
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
             ratio(py["p50_us"], px["p50_us"]), "-", "-"),
            ("run `true` RTT p99, Python client", ms(py["p99_us"]), ms(px["p99_us"]) + " (pexpect)",
             ratio(py["p99_us"], px["p99_us"]), "-", "-"),
            ("`%s` median of %d" % (SEQ_CMD, SEQ_REPS), "%.3f s" % med_td,
             "%.3f s (bare pty)" % med_pty, "%.2fx" % seq_ratio,
             "<= %.2fx bare pty" % SEQ_TARGET_RATIO, "yes" if seq_ratio <= SEQ_TARGET_RATIO else "NO"),
            ("  reading side's CPU per seq run", "%.2f s (termd)" % cmed_td,
             "%.2f s (python reader)" % cmed_pty, ratio(cmed_td, cmed_pty), "-", "-"),
            ("termd RSS after the seq runs", "%.1f MiB" % (rss_after / 1024.0),
             "%.1f MiB at start" % (rss_start / 1024.0), ratio(rss_after, rss_start), "-", "-"),
            ("termd peak RSS (VmHWM)", "%.1f MiB" % (hwm_after / 1024.0), "-", "-", "-", "-"),
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
        print("bench took %.0f s" % (time.monotonic() - started))
        return 0
    finally:
        if ws is not None:
            ws.close()
        td.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
