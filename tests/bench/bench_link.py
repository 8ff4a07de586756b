"""bench_link.py — `make bench`: `run true` round trips over a dial-out link
(termd --connect to a backend on loopback TCP, PROTOCOL.md section 10) next to
a direct /events connection (bench.py's Python client on termd's unix
socket), same termd, same run, both driven by the same kind of single-threaded
Python code. Informational: exit status 0 whenever the figures could be taken.

Environment: TERMD_BIN (as bench.py), BENCH_N (timed round trips, default
2000)."""

import base64
import hashlib
import json
import os
import shutil
import socket
import struct
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench  # noqa: E402

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class LinkEnd:
    """The backend's end of one link: a blocking socket, the server side of
    RFC 6455 (frames from termd are masked, ours are not)."""

    def __init__(self, conn):
        self.s = conn
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        while b"\r\n\r\n" not in self.buf:
            self.buf += self.s.recv(4096)
        head, _, rest = bytes(self.buf).partition(b"\r\n\r\n")
        self.buf = bytearray(rest)
        key = [l.split(b":", 1)[1].strip() for l in head.split(b"\r\n")
               if l.lower().startswith(b"sec-websocket-key:")][0]
        acc = base64.b64encode(hashlib.sha1(key + GUID).digest())
        self.s.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                       b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + acc +
                       b"\r\nSec-WebSocket-Protocol: termd.events.v1\r\n\r\n")

    def _need(self, k):
        while len(self.buf) < k:
            c = self.s.recv(1 << 16)
            if not c:
                raise RuntimeError("EOF from termd")
            self.buf += c

    def recv_msg(self):
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
            mask = None
            if b1 & 0x80:
                self._need(pos + 4)
                mask, pos = bytes(self.buf[pos:pos + 4]), pos + 4
            self._need(pos + n)
            payload = bytes(self.buf[pos:pos + n])
            del self.buf[:pos + n]
            if mask:
                full = (mask * (n // 4 + 1))[:n]
                payload = (int.from_bytes(payload, "big") ^ int.from_bytes(full, "big")) \
                    .to_bytes(n, "big") if n else b""
            op = b0 & 0x0F
            if op == 0x9:
                self._send(0x8A, payload)
                continue
            if op in (0xA,):
                continue
            if op == 0x8:
                raise RuntimeError("termd closed the link")
            parts.append(payload)
            if b0 & 0x80:
                return b"".join(parts)

    def _send(self, b0, data):
        n = len(data)
        if n < 126:
            hdr = struct.pack("!BB", b0, n)
        elif n < 65536:
            hdr = struct.pack("!BBH", b0, 126, n)
        else:
            hdr = struct.pack("!BBQ", b0, 127, n)
        self.s.sendall(hdr + data)

    def call(self, action, args, aid):
        self._send(0x81, json.dumps({"id": aid, "action": action, "args": args}).encode())
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
