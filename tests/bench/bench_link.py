"""bench_link.py — `make bench`: `run true` round trips over a dial-out link
(termd --connect to a backend on loopback TCP, PROTOCOL.md section 10) next to
a direct /events connection (bench.py's Python client on termd's unix
socket), same termd, same run, both driven by the same kind of single-threaded
Python code. Informational: exit status 0 whenever the figures could be taken.

Environment: TERMD_BIN (as bench.py), BENCH_N (timed round trips, default
2000)."""

import json
import os
import shutil
import socket
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests", "regress"))

import bench  # noqa: E402
import wsserver  # noqa: E402  (the server side of RFC 6455, shared with the regress tests)


class LinkEnd:
    """The backend's end of one link: a blocking socket, the server side of
    RFC 6455 (tests/regress/wsserver.py: frames from termd are masked, ours
    are not)."""

    def __init__(self, conn):
        self.s = conn
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        r = wsserver.read_head(self.s)
        if r is None:
            raise RuntimeError("EOF from termd")
        _, h, rest = r
        self.rd = wsserver.Reader(self.s, rest)
        self.s.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                        "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n"
                        "Sec-WebSocket-Protocol: termd.events.v1\r\n\r\n"
                        % wsserver.accept_key(h["sec-websocket-key"])).encode())

    def recv_msg(self):
        parts = []
        while True:
            try:
                b0, op, payload = self.rd.frame()
            except EOFError:
                raise RuntimeError("EOF from termd")
            if op == 0x9:
                self.s.sendall(wsserver.frame(0xA, payload))
                continue
            if op in (0xA,):
                continue
            if op == 0x8:
                raise RuntimeError("termd closed the link")
            parts.append(payload)
            if b0 & 0x80:
                return b"".join(parts)

    def call(self, action, args, aid):
        self.s.sendall(wsserver.frame(0x1, json.dumps({"id": aid, "action": action, "args": args}).encode()))
        while True:
            obs = json.loads(self.recv_msg())
            if obs.get("cause") == aid:
                return obs


def rtt_link(end, n=bench.N, warmup=bench.WARMUP):
    samples = []
    for i in range(warmup + n):
        t0 = time.perf_counter()
        obs = end.call("run", {"command": "true"}, "b%d" % i)
        if i >= warmup:
            samples.append(time.perf_counter() - t0)
        if obs.get("observation") != "run" or obs["extras"].get("exit_code") != 0:
            raise RuntimeError("unexpected observation: %.300s" % json.dumps(obs))
    return bench.summary_us(samples)


def main():
    tmp = tempfile.mkdtemp(prefix="bench-link-")
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(1)
    lsock.settimeout(30)
    port = lsock.getsockname()[1]
    td = bench.Termd(tmp, args=["--connect", "ws://127.0.0.1:%d/termd" % port])
    try:
        td.start()
        conn, _ = lsock.accept()
        end = LinkEnd(conn)
        hello = json.loads(end.recv_msg())
        assert hello["observation"] == "hello"
        sys.stdout.write("bench_link: run true x%d: dial-out link ... " % bench.N)
        sys.stdout.flush()
        link = rtt_link(end)
        sys.stdout.write("direct /events ... ")
        sys.stdout.flush()
        direct = bench.rtt_py(td)
        print("done")
        rows = [("connection", "p50", "p99", "p50 vs direct")]
        for name, r in (("dial-out link (loopback TCP)", link),
                        ("direct /events (unix socket)", direct)):
            rows.append((name, bench.ms(r["p50_us"]), bench.ms(r["p99_us"]),
                         bench.ratio(r["p50_us"], direct["p50_us"])))
        w = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
        for r in rows:
            print("  ".join(str(x).ljust(w[i]) for i, x in enumerate(r)))
        for name, r in (("link", link), ("direct", direct)):
            print("RTT detail (us) %-6s min %.0f p50 %.0f p99 %.0f max %.0f"
                  % (name, r["min_us"], r["p50_us"], r["p99_us"], r["max_us"]))
    finally:
        td.stop()
        lsock.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
