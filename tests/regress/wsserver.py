"""wsserver.py — the server side of RFC 6455 on a blocking socket, stdlib
only: the opening handshake's request head and Sec-WebSocket-Accept, frames
read from a client (masked or not) and frames written to it (unmasked).

The client side is wsclient.py. Used in-process (tests/bench/bench_link.py)
and by the small servers the tests start inside termd's sessions: script()
puts this file's text in front of such a server's own, so the program
written into the session's home needs nothing beside it."""

import base64
import hashlib
import struct

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def accept_key(key):
    """Sec-WebSocket-Accept (str) for a Sec-WebSocket-Key (str or bytes)."""
    if isinstance(key, str):
        key = key.encode()
    return base64.b64encode(hashlib.sha1(key + GUID).digest()).decode()


def read_head(c, data=b""):
    """The HTTP request head from socket c: (request line, {lower-case header
    name: value}, the bytes read past the head); None on EOF before its end."""
    while b"\r\n\r\n" not in data:
        d = c.recv(4096)
        if not d:
            return None
        data += d
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    h = {k.strip().lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:])}
    return lines[0], h, rest


def frame(op, payload, fin=True):
    """One unmasked frame (a server's), header and payload."""
    b0 = (0x80 if fin else 0) | op
    n = len(payload)
    if n < 126:
        hd = struct.pack("!BB", b0, n)
    elif n < 65536:
        hd = struct.pack("!BBH", b0, 126, n)
    else:
        hd = struct.pack("!BBQ", b0, 127, n)
    return hd + payload


class Reader:
    """Frames from a client on socket c, after the bytes already read (buf)."""

    def __init__(self, c, buf=b""):
        self.c = c
        self.buf = bytearray(buf)

    def need(self, k):
        """At least k bytes buffered; EOFError when the peer closes first."""
        while len(self.buf) < k:
            d = self.c.recv(1 << 16)
            if not d:
                raise EOFError
            self.buf += d

    def frame(self):
        """The next frame: (first header byte, opcode, payload unmasked)."""
        self.need(2)
        b0, b1 = self.buf[0], self.buf[1]
        n, pos = b1 & 0x7F, 2
        if n == 126:
            self.need(4)
            n, pos = struct.unpack_from("!H", self.buf, 2)[0], 4
        elif n == 127:
            self.need(10)
            n, pos = struct.unpack_from("!Q", self.buf, 2)[0], 10
        mask = None
        if b1 & 0x80:
            self.need(pos + 4)
            mask, pos = bytes(self.buf[pos:pos + 4]), pos + 4
        self.need(pos + n)
        payload = bytes(self.buf[pos:pos + n])
        del self.buf[:pos + n]
        if mask and n:
            full = (mask * (n // 4 + 1))[:n]
            payload = (int.from_bytes(payload, "big") ^ int.from_bytes(full, "big")).to_bytes(n, "big")
        return b0, b0 & 0x0F, payload


def script(body):
    """A standalone program's text: this module, then body (which uses its
    names directly)."""
    with open(__file__) as f:
        return f.read() + "\n\n# ---- the program\n" + body
