"""bench_front.py — `make bench`: what termd's front (termd/net/front*.c)
costs and gives, in one run: /events `run true` through the front next to
`--front off` (lws listening itself), and an envd unary call
(filesystem.Filesystem/Stat) over HTTP/1.1 keep-alive next to HTTP/2 (one
connection, h2c with prior knowledge), both through the front, plus the
same call over TLS both ways. p50/p99 of each. Env: TERMD_BIN, BENCH_FRONT_N
(round trips each, default 300)."""

import http.client
import json
import os
import ssl
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
N = int(os.environ.get("BENCH_FRONT_N", "300"))
TOKEN = "bench-front-token"


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


def line(name, ms):
    print("  %-48s p50 %7.3f ms   p99 %7.3f ms   (n=%d)" % (name, pct(ms, 50), pct(ms, 99), len(ms)))


def start(tmp, name, args, scheme="ws"):
    port = free_port()
    log = open(os.path.join(tmp, name + ".log"), "wb")
    env = dict(os.environ, HOME=tmp, TERMD_TOKEN=TOKEN)
    p = subprocess.Popen([TERMD_BIN, "--listen", "127.0.0.1:%d" % port, "--cwd", tmp] + args,
                         stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         env=env, start_new_session=True)
    url = "%s://127.0.0.1:%d" % (scheme, port)
    deadline = time.monotonic() + 30
    while True:
        try:
            if wsclient.http_request(url.replace("ws", "http", 1), "/healthz", timeout=2)[0] == 200:
                return p, port, url
        except OSError:
            pass
        if time.monotonic() > deadline:
            p.kill()
            raise RuntimeError("termd did not start: see %s" % log.name)
        time.sleep(0.05)


def events_rtt(url):
    ev = wsclient.Events(url, token=TOKEN)
    for _ in range(10):
        ev.call("run", {"command": "true"})
    out = []
    for _ in range(N):
        t0 = time.perf_counter()
        ev.call("run", {"command": "true"})
        out.append((time.perf_counter() - t0) * 1000)
    ev.close()
    return out


BODY = json.dumps({"path": "/"}).encode()
HDRS = {"Content-Type": "application/json", "Connect-Protocol-Version": "1",
        "X-Access-Token": TOKEN}


def unary_h1(conn):
    out = []
    for i in range(N + 10):
        t0 = time.perf_counter()
        conn.request("POST", "/filesystem.Filesystem/Stat", BODY, HDRS)
        r = conn.getresponse()
        data = r.read()
        assert r.status == 200, data
        if i >= 10:
            out.append((time.perf_counter() - t0) * 1000)
    conn.close()
    return out


def unary_h2(port, cafile=None):
    sys.path.insert(0, os.path.join(REPO, "tests", "regress", "net"))  # regroup.py: test_h2.py moved to tests/regress/net/
    from test_h2 import H2
    c = H2(port, cafile)
    h = {k.lower(): v for k, v in HDRS.items()}
    out = []
    for i in range(N + 10):
        t0 = time.perf_counter()
        status, _, data = c.request("POST", "/filesystem.Filesystem/Stat", h, BODY)
        assert status == 200, data
        if i >= 10:
            out.append((time.perf_counter() - t0) * 1000)
    c.close()
    return out


def main():
    tmp = tempfile.mkdtemp(prefix="tdbench-front-")
    cert, key = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", key, "-out", cert], check=True, capture_output=True, timeout=60)
    procs = []
    try:
        pon, port_on, url_on = start(tmp, "front-on", [])
        procs.append(pon)
        poff, port_off, url_off = start(tmp, "front-off", ["--front", "off"])
        procs.append(poff)
        wsclient.tls_cafile = cert
        ptls, port_tls, _ = start(tmp, "front-tls", ["--tls-cert", cert, "--tls-key", key],
                                  scheme="wss")
        procs.append(ptls)
        print("the front (termd/net/front*.c), one run:")
        line("/events run true, --front on", events_rtt(url_on))
        line("/events run true, --front off", events_rtt(url_off))
        line("envd Stat, HTTP/1.1 keep-alive, --front off",
             unary_h1(http.client.HTTPConnection("127.0.0.1", port_off, timeout=30)))
        line("envd Stat, HTTP/1.1 keep-alive, --front on",
             unary_h1(http.client.HTTPConnection("127.0.0.1", port_on, timeout=30)))
        line("envd Stat, HTTP/2 (h2c), --front on", unary_h2(port_on))
        ctx = ssl.create_default_context(cafile=cert)
        line("envd Stat, HTTP/1.1 over TLS", unary_h1(
            http.client.HTTPSConnection("localhost", port_tls, timeout=30, context=ctx)))
        line("envd Stat, HTTP/2 over TLS", unary_h2(port_tls, cert))
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(10)


if __name__ == "__main__":
    main()
