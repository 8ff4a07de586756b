"""bench_envd.py — `make bench`: `commands.run('true')` through the published
e2b SDK (tests/e2b/drive.mjs bench: Connect Start stream, a new
`bash -l -c true` each time, as envd runs it) next to termd's own /events
`run true` (the persistent shell) and a bare Connect `Start` of /bin/true
from Python, in one termd, p50/p99 of each. Env: TERMD_BIN, BENCH_ENVD_N
(round trips each, default 200). Needs `make deps` (npm ci in tests/e2b)."""

import http.client
import json
import os
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

TERMD_BIN = os.environ.get("TERMD_BIN") or os.path.join(REPO, "build", "termd")
N = int(os.environ.get("BENCH_ENVD_N", "200"))
E2B = os.path.join(REPO, "tests", "e2b")


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


def line(name, ms):
    print("  %-44s p50 %8.2f ms   p99 %8.2f ms   (n=%d)" % (name, pct(ms, 50), pct(ms, 99), len(ms)))


def bare_start(port):
    body = json.dumps({"process": {"cmd": "/bin/true"}}).encode()
    env = struct.pack(">BI", 0, len(body)) + body
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    t0 = time.perf_counter()
    c.request("POST", "/process.Process/Start", env,
              {"Content-Type": "application/connect+json"})
    data = c.getresponse().read()
    dt = (time.perf_counter() - t0) * 1000
    c.close()
    assert b"exit status 0" in data, data
    return dt


def main():
    if not shutil.which("node") or not os.path.isdir(os.path.join(E2B, "node_modules", "e2b")):
        print("bench_envd: skipped (no node or no tests/e2b/node_modules: make deps)")
        return
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    tmp = tempfile.mkdtemp(prefix="tdbench-envd-")
    log = open(os.path.join(tmp, "termd.log"), "wb")
    env = dict(os.environ, HOME=tmp)
    env.pop("TERMD_TOKEN", None)
    p = subprocess.Popen([TERMD_BIN, "--listen", "127.0.0.1:%d" % port, "--cwd", tmp],
                         stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         env=env, start_new_session=True)
    try:
        url = "ws://127.0.0.1:%d" % port
        deadline = time.monotonic() + 30
        while True:
            try:
                if wsclient.http_request(url, "/healthz", timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("termd did not start")
            time.sleep(0.05)
        e = dict(os.environ, E2B_DEBUG="true", E2B_SANDBOX_URL="http://127.0.0.1:%d" % port,
                 BENCH_N=str(N))
        e.pop("TERMD_TOKEN", None)
        r = subprocess.run(["node", os.path.join(E2B, "drive.mjs"), "bench"], cwd=E2B, env=e,
                           capture_output=True, text=True, timeout=600)
        sdk = json.loads(r.stdout.strip().splitlines()[-1])["ms"]
        bare = [bare_start(port) for _ in range(10)]
        bare = [bare_start(port) for _ in range(N)]
        ev = wsclient.Events(url)
        for _ in range(10):
            ev.call("run", {"command": "true"})
        own = []
        for _ in range(N):
            t0 = time.perf_counter()
            ev.call("run", {"command": "true"})
            own.append((time.perf_counter() - t0) * 1000)
        print("envd door (e2b SDK %s, node %s):" % (
            json.load(open(os.path.join(E2B, "node_modules", "e2b", "package.json")))["version"],
            subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()))
        line("commands.run('true') via the e2b SDK", sdk)
        line("Connect Start /bin/true from Python", bare)
        line("/events run true (termd's own, main shell)", own)
    finally:
        p.terminate()
        p.wait(10)


if __name__ == "__main__":
    main()
