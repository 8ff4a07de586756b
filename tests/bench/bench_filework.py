"""bench_filework.py — `make bench`: file work off the loop (issue 31).
(1) what the worker hop costs: `read` of a 1 KiB file through /events next
to `ping` (answered in the loop), p50/p99; (2) what a big listing costs the
other clients: /healthz round trips while e2b's ListDir walks 20,000
entries (--list-max's default), next to idle /healthz in the same run; (3)
the loop's longest turn during that listing, from inside
(termd_loop_turn_max_seconds: the loop thread's CPU time in one turn, so
the machine's load is not in it; issue 50's goal 20 ms), next to the
longest over idle /healthz and over a listing of 199 in the same run; the
/healthz figure for a 1,000-part POST /files. All in one run. Env:
TERMD_BIN, BENCH_FILEWORK_N (reads and pings, default 500)."""

import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "regress"))
import wsclient  # noqa: E402
from tdtest import free_port  # noqa: E402

TERMD_BIN = os.environ.get("TERMD_BIN") or os.path.join(REPO, "build", "termd")
N = int(os.environ.get("BENCH_FILEWORK_N", "500"))


PORT = free_port()


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


def line(name, ms):
    print("  %-56s p50 %8.2f ms   p99 %8.2f ms   max %8.2f ms   (n=%d)"
          % (name, pct(ms, 50), pct(ms, 99), max(ms), len(ms)))


def req(method, path, body=b"", headers=None):
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=300)
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def healthz_ms():
    t0 = time.perf_counter()
    req("GET", "/healthz")
    return (time.perf_counter() - t0) * 1000


def loop_cpu_ms(pid):
    """termd's loop (its main thread): time on a CPU so far, ms."""
    with open("/proc/%d/task/%d/schedstat" % (pid, pid)) as f:
        return int(f.read().split()[0]) / 1e6


def loop_turn_ms():
    """the loop's longest turn since the last scrape (termd_loop_turn_max_seconds,
    its thread's CPU time; a scrape starts a new window), ms"""
    st, body = req("GET", "/metrics")
    assert st == 200, st
    m = re.search(rb"^termd_loop_turn_max_seconds (\S+)$", body, re.M)
    return float(m.group(1)) * 1000


def longest_turn(work, n=5):
    """the loop's longest turn during work(), n times: [ms]"""
    out = []
    for _ in range(n):
        loop_turn_ms()
        work()
        out.append(loop_turn_ms())
    return out


def during(attack):
    box = {}
    th = threading.Thread(target=lambda: box.setdefault("r", attack()))
    th.start()
    lat = []
    while th.is_alive():
        lat.append(healthz_ms())
        time.sleep(0.005)
    th.join()
    return lat, box["r"]


def main():
    tmp = tempfile.mkdtemp(prefix="bench-filework-")
    td = None
    try:
        big = os.path.join(tmp, "big")
        os.mkdir(big)
        for i in range(100):
            d = os.path.join(big, "d%03d" % i)
            os.mkdir(d)
            for k in range(199):
                open(os.path.join(d, "f%03d" % k), "w").close()
        small = os.path.join(tmp, "small.txt")
        with open(small, "w") as f:
            f.write("x" * 1023 + "\n")
        home = os.path.join(tmp, "home")
        os.mkdir(home)
        td = subprocess.Popen([TERMD_BIN, "--listen", "127.0.0.1:%d" % PORT, "--cwd", home],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                if td.poll() is not None:
                    raise SystemExit("bench_filework: termd did not start")
                req("GET", "/healthz")
                break
            except OSError:
                time.sleep(0.05)
        ev = wsclient.Events("ws://127.0.0.1:%d" % PORT)
        print("bench_filework: file work in workers (termd %s)" % TERMD_BIN)
        pings, reads = [], []
        for _ in range(N):
            t0 = time.perf_counter()
            ev.call("ping", {})
            pings.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            o = ev.call("read", {"path": small})
            reads.append((time.perf_counter() - t0) * 1000)
            assert o["observation"] == "read", o
        line("ping (answered in the loop; baseline)", pings)
        line("read 1 KiB (a worker, as the user)", reads)
        idle = [healthz_ms() for _ in range(200)]
        line("/healthz idle (baseline)", idle)
        lat, r = during(lambda: req("POST", "/filesystem.Filesystem/ListDir",
                                    json.dumps({"path": big, "depth": 2}).encode(),
                                    {"Content-Type": "application/json"}))
        assert r[0] == 200 and len(json.loads(r[1])["entries"]) == 20000, r[0]
        line("/healthz during ListDir of 20,000 entries", lat)
        # the loop's longest turn, seen from outside: the worst /healthz
        # during the listing beyond an idle one (the machine's scheduling
        # is in it too; the figure from inside is below)
        turn = max(lat) - pct(idle, 50)
        print("  %-56s %8.2f ms" % ("worst /healthz beyond idle during it", turn))
        # the loop thread's own CPU time over a ListDir alone (schedstat, ns):
        # all its turns for the listing together, free of the machine's noise
        cpu = []
        for _ in range(5):
            c0 = loop_cpu_ms(td.pid)
            r = req("POST", "/filesystem.Filesystem/ListDir", json.dumps({"path": big, "depth": 2}).encode(),
                    {"Content-Type": "application/json"})
            cpu.append(loop_cpu_ms(td.pid) - c0)
            assert r[0] == 200
        c = sorted(cpu)[len(cpu) // 2]
        print("  %-56s %8.2f ms   (all its turns together)"
              % ("loop thread CPU for a ListDir of 20,000 (median of 5)", c))
        # the loop's longest turn, seen from inside (termd_loop_turn_max_seconds:
        # its thread's CPU time in one turn, free of the machine's noise)
        # during a listing, beside idle and a small listing in the same run
        def listdir(path, n):
            r = req("POST", "/filesystem.Filesystem/ListDir", json.dumps({"path": path, "depth": 2}).encode(),
                    {"Content-Type": "application/json"})
            assert r[0] == 200 and len(json.loads(r[1])["entries"]) == n, r[0]

        def turns(name, ms, goal=False):
            ms = sorted(ms)
            print("  %-56s med %7.2f ms   max %7.2f ms   (n=%d%s)"
                  % (name, ms[len(ms) // 2], ms[-1], len(ms),
                     "" if not goal else "; goal <= 20 ms" + ("" if ms[-1] <= 20 else ", MISSED")))
        turns("longest loop turn over 50 /healthz (baseline)",
              longest_turn(lambda: [healthz_ms() for _ in range(50)]))
        turns("longest loop turn over a ListDir of 199 (baseline)",
              longest_turn(lambda: listdir(os.path.join(big, "d000"), 199)))
        turns("longest loop turn over a ListDir of 20,000", longest_turn(lambda: listdir(big, 20000)),
              goal=True)
        parts = b"".join(
            b"--BB\r\nContent-Disposition: form-data; name=\"file\"; filename=\"" +
            os.path.join(tmp, "up", "p%d" % i, "f.txt").encode() + b"\"\r\n\r\n" + b"x" * 100 +
            b"\r\n" for i in range(1000)) + b"--BB--\r\n"
        lat, r = during(lambda: req("POST", "/files", parts,
                                    {"Content-Type": "multipart/form-data; boundary=BB"}))
        assert r[0] == 200, r
        line("/healthz during a 1,000-part POST /files", lat)
        ev.close()
    finally:
        if td:
            td.terminate()
            td.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
