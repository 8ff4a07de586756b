"""bench_e2b.py — `make bench`: termd's envd door beside envd's own design
in the same run, through the same pinned e2b SDK (tests/e2b/drive.mjs,
debug mode, plain HTTP): tests/bench/envd-standin.mjs (Node spawning what
Start asks, as the user, streaming Connect envelopes) and termd started
with `--user USER`. Both run the processes as the same user (nobody when
termd is root, else the current user) in /tmp. Measured, alternating
termd and the stand-in: `commands.run('true')` p50/p99, and 54 MB of
output (`head -c 40000000 /dev/zero | base64`) in MB/s (termd with
`--stream-max 256 MiB`: the stand-in holds whatever its client has not
read, termd's default 8 MiB cuts a client that falls behind further, as
PROTOCOL.md promises, and the SDK on a busy machine does); the ratios say
how far termd is from the stand-in (start: termd/stand-in, ≤ 1.0 is the
goal; streaming: termd/stand-in, ≥ 1.0 is the goal). Env: TERMD_BIN,
BENCH_E2B_N (round trips per turn, default 200), BENCH_E2B_ROUNDS
(turns each, default 2), BENCH_E2B_STREAMS (streams per turn, default 3),
BENCH_E2B_TERMD_ARGS (more options for termd, split on spaces).
The SDK's own base64 and JSON decoding bound its streaming (node
--cpu-prof: setFromBase64, checkDuplicateKeys), so the same stream is also
read raw from Python (the server's side alone, termd's CPU for it).
Needs node and tests/e2b/node_modules (make deps)."""

import http.client
import json
import os
import pwd
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "regress"))
import wsclient  # noqa: E402
from tdtest import free_port  # noqa: E402

TERMD_BIN = os.environ.get("TERMD_BIN") or os.path.join(REPO, "build", "termd")
N = int(os.environ.get("BENCH_E2B_N", "200"))
ROUNDS = int(os.environ.get("BENCH_E2B_ROUNDS", "2"))
STREAMS = int(os.environ.get("BENCH_E2B_STREAMS", "3"))
E2B = os.path.join(REPO, "tests", "e2b")


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


def wait_port(port, proc, what):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("%s exited at start (%s)" % (what, proc.returncode))
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("%s did not listen" % what)


def drive(port, scenario, **extra):
    e = dict(os.environ, E2B_DEBUG="true", E2B_SANDBOX_URL="http://127.0.0.1:%d" % port,
             BENCH_CWD="/tmp", **{k: str(v) for k, v in extra.items()})
    e.pop("TERMD_TOKEN", None)
    r = subprocess.run(["node", os.path.join(E2B, "drive.mjs"), scenario], cwd=E2B, env=e,
                       capture_output=True, text=True, timeout=900)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    if "fatal" in out:
        raise RuntimeError("%s on port %d: %s" % (scenario, port, out["fatal"]))
    return out


def raw_stream(port, pid=None):
    """The 54 MB stream read as fast as Python reads: (MB/s of output,
    the server's CPU seconds for it, when its pid is given)."""
    def cpu():
        if not pid:
            return 0.0
        with open("/proc/%d/stat" % pid) as f:
            x = f.read().rsplit(")", 1)[1].split()
        return (int(x[11]) + int(x[12])) / os.sysconf("SC_CLK_TCK")
    msg = json.dumps({"process": {"cmd": "/bin/bash", "cwd": "/tmp", "args": [
        "-l", "-c", "head -c 40000000 /dev/zero | base64"]}}).encode()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    c0, t0 = cpu(), time.perf_counter()
    c.request("POST", "/process.Process/Start", struct.pack(">BI", 0, len(msg)) + msg,
              {"Content-Type": "application/connect+json"})
    r = c.getresponse()
    n = 0
    while True:
        d = r.read(1 << 20)
        if not d:
            break
        n += len(d)
    dt = time.perf_counter() - t0
    c.close()
    assert n > 70000000, n
    return 54.035 / dt, cpu() - c0


def main():
    if not shutil.which("node") or not os.path.isdir(os.path.join(E2B, "node_modules", "e2b")):
        print("bench_e2b: skipped (no node or no tests/e2b/node_modules: make deps)")
        return
    user = "nobody" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
    tmp = tempfile.mkdtemp(prefix="tdbench-e2b-")
    tport, sport = free_port(), free_port()
    env = dict(os.environ, HOME=tmp)
    env.pop("TERMD_TOKEN", None)
    procs = []
    try:
        log = open(os.path.join(tmp, "termd.log"), "wb")
        procs.append(subprocess.Popen(
            [TERMD_BIN, "--listen", "127.0.0.1:%d" % tport, "--cwd", tmp, "--user", user,
             "--stream-max", str(256 << 20)] + os.environ.get("BENCH_E2B_TERMD_ARGS", "").split(),
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True))
        wait_port(tport, procs[-1], "termd")
        procs.append(subprocess.Popen(
            ["node", os.path.join(HERE, "envd-standin.mjs"), str(sport), user],
            stdin=subprocess.DEVNULL, env=env, start_new_session=True))
        wait_port(sport, procs[-1], "the stand-in")
        ms = {tport: [], sport: []}
        mbs = {tport: [], sport: []}
        for _ in range(ROUNDS):
            for port in (tport, sport):
                ms[port] += drive(port, "bench", BENCH_N=N)["ms"]
            for port in (tport, sport):
                r = drive(port, "stream", BENCH_STREAM_N=STREAMS)
                assert r["bytes"] > 54000000, r
                mbs[port] += r["mbs"]
        raw = {tport: [], sport: []}
        for _ in range(3):
            for port in (tport, sport):
                raw[port].append(raw_stream(port, procs[0].pid if port == tport else procs[1].pid))
        ver = json.load(open(os.path.join(E2B, "node_modules", "e2b", "package.json")))["version"]
        node = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
        print("e2b SDK %s (node %s), processes as %s, termd beside envd-standin.mjs:" % (ver, node, user))
        for name, port in (("termd", tport), ("stand-in", sport)):
            print("  %-9s commands.run('true') p50 %7.2f ms  p99 %7.2f ms (n=%d)   "
                  "54 MB stream %6.1f MB/s (median of %d)" % (
                      name, pct(ms[port], 50), pct(ms[port], 99), len(ms[port]),
                      pct(mbs[port], 50), len(mbs[port])))
        for name, port in (("termd", tport), ("stand-in", sport)):
            print("  %-9s the same stream read raw from Python: %6.1f MB/s, its server's CPU %.2f s"
                  " (median of %d)" % (name, pct([m for m, _ in raw[port]], 50),
                                       pct([c for _, c in raw[port]], 50), len(raw[port])))
        print("  ratio     start p50 %.2fx  p99 %.2fx (goal <= 1.0)   streaming %.2fx (goal >= 1.0),"
              " raw %.2fx" % (
                  pct(ms[tport], 50) / pct(ms[sport], 50), pct(ms[tport], 99) / pct(ms[sport], 99),
                  pct(mbs[tport], 50) / pct(mbs[sport], 50),
                  pct([m for m, _ in raw[tport]], 50) / pct([m for m, _ in raw[sport]], 50)))
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
