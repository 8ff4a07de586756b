"""bench_swerex.py — `make bench`: run_in_session("true") through SWE-ReX's
own RemoteRuntime (the pinned venv of `make deps-swerex`) against termd
started as swerex-remote and against SWE-ReX's swerex-remote from the same
venv, both on loopback in the same run, alternating in blocks; p50/p99 of
each. Env: TERMD_BIN, TERMD_SWEREX_VENV (default build/swerex-venv),
BENCH_SWEREX_N (round trips each, default 200). Without the venv it says
so and skips."""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TERMD_BIN = os.environ.get("TERMD_BIN") or os.path.join(REPO, "build", "termd")
VENV = os.environ.get("TERMD_SWEREX_VENV") or os.path.join(REPO, "build", "swerex-venv")
VPY = os.path.join(VENV, "bin", "python")
CLIENT = os.path.join(REPO, "tests", "regress", "swerex_client.py")
N = int(os.environ.get("BENCH_SWEREX_N", "200"))
BLOCKS = 4
TOKEN = "bench-swerex-token"


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_alive(port, proc):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the server exited during start-up")
        try:
            req = urllib.request.Request("http://127.0.0.1:%d/is_alive" % port,
                                         headers={"X-API-Key": TOKEN})
            if urllib.request.urlopen(req, timeout=2).status == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError("the server did not answer /is_alive")


def start(argv, tmp, name):
    env = {k: v for k, v in os.environ.items() if k not in ("TERM", "TERMD_TOKEN")}
    log = open(os.path.join(tmp, name + ".log"), "wb")
    # SIGINT at its default (a server started from a script inherits it
    # ignored, and SWE-ReX's interrupt needs it)
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            cwd=tmp, env=env, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def block(port, n):
    p = subprocess.run([VPY, CLIENT, "bench", str(port), TOKEN, str(n)], capture_output=True,
                       text=True, timeout=600)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("SWEREX-JSON:")]
    if p.returncode != 0 or not lines:
        raise RuntimeError("bench client failed: %s %s" % (p.stdout[-2000:], p.stderr[-2000:]))
    out = json.loads(lines[-1][len("SWEREX-JSON:"):])
    return out["times"], out["no_exit_code"]


def main():
    if not os.path.exists(VPY):
        print("bench_swerex: skipped: no SWE-ReX venv at %s (`make deps-swerex`; offline it "
              "cannot be made)" % VENV)
        return
    tmp = tempfile.mkdtemp(prefix="tdbench-swx-")
    link = os.path.join(tmp, "swerex-remote")
    os.symlink(os.path.abspath(TERMD_BIN), link)
    tport, sport = free_port(), free_port()
    procs = [start([link, "--auth-token", TOKEN, "--host", "127.0.0.1", "--port", str(tport)],
                   tmp, "termd"),
             start([os.path.join(VENV, "bin", "swerex-remote"), "--auth-token", TOKEN,
                    "--host", "127.0.0.1", "--port", str(sport)], tmp, "swerex")]
    try:
        wait_alive(tport, procs[0])
        wait_alive(sport, procs[1])
        t, s, tn, sn = [], [], 0, 0
        for _ in range(BLOCKS):
            times, miss = block(tport, N // BLOCKS)
            t += times
            tn += miss
            times, miss = block(sport, N // BLOCKS)
            s += times
            sn += miss
        print("bench_swerex: run_in_session('true') through RemoteRuntime, %d each, alternating "
              "in %d blocks" % (len(t), BLOCKS))
        print("  termd (swerex-remote)   p50 %7.2f ms  p99 %7.2f ms  no exit code %d" %
              (pct(t, 50) * 1e3, pct(t, 99) * 1e3, tn))
        print("  SWE-ReX swerex-remote   p50 %7.2f ms  p99 %7.2f ms  no exit code %d" %
              (pct(s, 50) * 1e3, pct(s, 99) * 1e3, sn))
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)


if __name__ == "__main__":
    main()
