"""bench_ports.py — `make bench`: ports and the preview proxy. A GET of a
small page through termd's /proxy/<port>/ next to the same GET straight to
the server (a new connection each, p50/p99); downloads of 1, 10 and 100 MiB
through the proxy next to direct (MiB/s, median of BENCH_PORTS_RUNS turn
about, default 9: a single 100 MiB run swings 0.4x-1.2x on a busy box), from an app
that writes 1 MiB at a time and from one that sends a file with
sendfile(2); and how long after listen() termd's port.open event arrives.
Each download is also timed through tests/bench/relay.c, a minimal splice
relay (the same two loopback TCP hops as the proxy, nothing else): the
ideal a relaying proxy can reach on this machine, with the system-wide
busy CPU ticks (/proc/stat, every process's: other load counts too) per
100 MiB for direct, relay and termd, to say where the time goes.
All in one run. Env: TERMD_BIN, BENCH_RELAY_BIN (default build/bench-relay;
left out when absent), BENCH_PORTS_N (GETs each way, default 200),
BENCH_PORTS_SIZES (MiB, default "1 10 100"), BENCH_PORTS_RUNS."""

import http.client
import os
import shutil
import socket
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
N = int(os.environ.get("BENCH_PORTS_N", "200"))
SIZES = [int(x) for x in os.environ.get("BENCH_PORTS_SIZES", "1 10 100").split()]
RUNS = int(os.environ.get("BENCH_PORTS_RUNS", "9"))
RELAY_BIN = os.environ.get("BENCH_RELAY_BIN") or os.path.join(REPO, "build", "bench-relay")

SERVER = r'''
import os, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a):
        pass
    def do_GET(self):
        if self.path.startswith("/file"):
            n = int(self.path.split("=")[1]) << 20
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            self.wfile.flush()
            with open("big.bin", "rb") as f:
                self.connection.sendfile(f, 0, n)
            return
        if self.path.startswith("/big"):
            n = int(self.path.split("=")[1]) << 20
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            chunk = b"x" * (1 << 20)
            for _ in range(n >> 20):
                self.wfile.write(chunk)
            return
        body = b"<html><body>hello</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
'''

LISTENER = r'''
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(8)
print("%.6f" % time.time(), file=open(sys.argv[2], "w"), flush=True)
time.sleep(60)
'''


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


def line(name, ms):
    print("  %-46s p50 %7.2f ms   p99 %7.2f ms   (n=%d)" % (name, pct(ms, 50), pct(ms, 99), len(ms)))


def get(port, path):
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", path)
    r = c.getresponse()
    n = 0
    while True:
        b = r.read(1 << 20)
        if not b:
            break
        n += len(b)
    c.close()
    assert r.status == 200, r.status
    return time.perf_counter() - t0, n


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        x = f.read().rsplit(")", 1)[1].split()
    return (int(x[11]) + int(x[12])) / os.sysconf("SC_CLK_TCK")


def busy_ticks():
    """the whole machine's busy CPU ticks (all but idle and iowait)"""
    with open("/proc/stat") as f:
        x = [int(v) for v in f.readline().split()[1:]]
    return sum(x) - x[3] - x[4]


def timed(port, path, mb, busy):
    b0 = busy_ticks()
    dt, n = get(port, path)
    busy.append(busy_ticks() - b0)
    assert n == mb << 20, (n, mb)
    return dt


def run(ev, cmd):
    o = ev.call("run", {"command": cmd}, timeout=60)
    return o.get("content", "")


def main():
    tmp = tempfile.mkdtemp(prefix="tdbench-ports-", dir="/tmp")
    home = os.path.join(tmp, "home")
    os.makedirs(home)
    with open(os.path.join(home, "srv.py"), "w") as f:
        f.write(SERVER)
    with open(os.path.join(home, "big.bin"), "wb") as f:
        for _ in range(max(SIZES)):
            f.write(b"x" * (1 << 20))
    with open(os.path.join(home, "listen.py"), "w") as f:
        f.write(LISTENER)
    tdport = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("TERMD_TOKEN", "ENV", "BASH_ENV")}
    env["HOME"] = home
    td = subprocess.Popen([TERMD_BIN, "--listen", "127.0.0.1:%d" % tdport, "--cwd", home],
                          env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = "ws://127.0.0.1:%d" % tdport
    relay = rport = None
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if wsclient.http_request(url, "/healthz", timeout=2)[0] == 200:
                    break
            except Exception:
                time.sleep(0.05)
        ev = wsclient.Events(url)
        sub = wsclient.Events(url)
        sub.call("subscribe", {})
        port = free_port()
        run(ev, "python3 srv.py %d >/dev/null 2>&1 &" % port)

        def opened(p):
            while True:
                o = sub.recv_obs(30)
                if o["observation"] == "port.open" and o["extras"]["port"] == p:
                    return time.time()
        opened(port)
        proxied, direct = [], []
        for i in range(N + 10):   # the first 10 warm up
            a, _ = get(tdport, "/proxy/%d/" % port)
            b, _ = get(port, "/")
            if i >= 10:
                proxied.append(a * 1000)
                direct.append(b * 1000)
        if os.path.exists(RELAY_BIN):
            relay = subprocess.Popen([RELAY_BIN, str(port)], stdout=subprocess.PIPE)
            rport = int(relay.stdout.readline())
        # (what, MiB, proxied s, direct s, relayed s, termd's CPU s, busy ticks: direct, relay, termd)
        downloads = []
        for kind, what in (("big", "writes"), ("file", "sendfile")):
            for mb in SIZES:
                big_p, big_d, big_r, cpu = [], [], [], []
                bd, br, bp = [], [], []
                path = "/%s?mb=%d" % (kind, mb)
                for _ in range(RUNS):   # turn about: proxy, direct, relay
                    c0 = cpu_s(td.pid)
                    big_p.append(timed(tdport, "/proxy/%d%s" % (port, path), mb, bp))
                    cpu.append(cpu_s(td.pid) - c0)
                    big_d.append(timed(port, path, mb, bd))
                    if rport:
                        big_r.append(timed(rport, path, mb, br))
                per = 100.0 / (mb * RUNS)   # ticks per 100 MiB
                downloads.append((what, mb, pct(big_p, 50), pct(big_d, 50),
                                  pct(big_r, 50) if big_r else None, pct(cpu, 50),
                                  sum(bd) * per, sum(br) * per if br else None, sum(bp) * per))
        lat = []
        stamp = os.path.join(tmp, "stamp")
        for i in range(10):
            p = free_port()
            out = run(ev, "python3 listen.py %d %s >/dev/null 2>&1 & echo PID=$!" % (p, stamp))
            pid = int([ln for ln in out.splitlines() if ln.startswith("PID=")][0][4:])
            got = opened(p)
            with open(stamp) as f:
                lat.append((got - float(f.read())) * 1000)
            os.kill(pid, 9)
        print("ports (termd %s, %d cores, load %s; baselines in this same run):"
              % (TERMD_BIN, os.cpu_count(), " ".join("%.2f" % x for x in os.getloadavg())))
        line("GET / through /proxy/<port>/", proxied)
        line("GET / direct (baseline)", direct)
        print("  %-46s +%.2f ms at p50" % ("added by the proxy", pct(proxied, 50) - pct(direct, 50)))
        hz = os.sysconf("SC_CLK_TCK")
        for what, mb, tp, td_, tr, cpu, kd, kr, kp in downloads:
            ideal = ""
            if tr:
                ideal = "; ideal relay %.2fx; termd/ideal %.2fx" % (td_ / tr, tr / tp)
            print("  %-46s median %6.0f MiB/s   direct %6.0f MiB/s   (%.2fx direct%s; termd %.2f s CPU)"
                  % ("%d MiB download through the proxy (%s)" % (mb, what), mb / tp, mb / td_,
                     td_ / tp, ideal, cpu))
            print("  %-46s busy CPU ticks (1/%d s, whole machine) per 100 MiB: direct %.0f, relay %s, "
                  "termd %.0f (of %d MiB each)"
                  % ("", hz, kd, "%.0f" % kr if kr is not None else "-", kp, mb * RUNS))
        line("port.open after listen()", lat)
        ev.close()
        sub.close()
    finally:
        if relay:
            relay.kill()
            relay.wait()
            relay.stdout.close()
        td.terminate()
        td.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
