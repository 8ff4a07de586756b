"""termd._wsync: a blocking WebSocket client of the package's own (stdlib
only; websockets 10, Debian 12's, has no synchronous client) for the
synchronous API's action connection: the opening handshake over TCP, TLS
or a unix socket (an Endpoint's URL, token, headers and TLS context),
masked client frames, whole messages read with pings answered, waits
bounded with poll(2) so that another thread may send meanwhile."""

from __future__ import annotations

import base64
import hashlib
import os
import select
import socket
import struct
import threading
import time
from typing import Any, Optional, Tuple
from urllib.parse import urlsplit

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_HEAD_MAX = 64 << 10
OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0, 1, 2, 8, 9, 10


class Refused(Exception):
    """The server answered the upgrade with an HTTP status other than 101."""

    def __init__(self, status: int, line: str):
        super().__init__("server rejected WebSocket connection: HTTP %d (%s)" % (status, line))
        self.status_code = status


class ProtocolError(Exception):
    """An answer or a frame that is not WebSocket as RFC 6455 has it."""


class Closed(Exception):
    """The connection ended (a close frame, EOF, or a reset)."""


def _mask(data: bytes, key: bytes) -> bytes:
    n = len(data)
    if not n:
        return b""
    k = int.from_bytes((key * (n // 4 + 1))[:n], "little")
    return (int.from_bytes(data, "little") ^ k).to_bytes(n, "little")


def _header(opcode: int, n: int) -> bytes:
    if n < 126:
        return struct.pack("!BB", 0x80 | opcode, 0x80 | n)
    if n < 1 << 16:
        return struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
    return struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)


def frame(opcode: int, data: bytes) -> bytes:
    """One whole masked client frame."""
    key = os.urandom(4)
    return _header(opcode, len(data)) + key + _mask(data, key)


class SyncWebSocket:
    """One open client WebSocket over a blocking socket. `send_text` and
    `recv` may run in two threads at once (one reader; senders serialized
    by the caller); `shutdown` from any thread wakes a reader with Closed."""

    def __init__(self, sock: Any, buf: bytes, max_size: Optional[int]):
        self.sock = sock
        self.buf = bytearray(buf)
        self.max_size = max_size
        self.tls = hasattr(sock, "pending")
        # OpenSSL's SSL object is not for two threads at once: with TLS,
        # each read and write holds this (a plain socket needs nothing)
        self.io = threading.Lock() if self.tls else None
        self.closed = False
        self._poll = select.poll()
        self._poll.register(sock.fileno(), select.POLLIN)
        self._parts: list = []     # a fragmented message's frames so far
        self._part_op = 0

    def _send(self, data: bytes) -> None:
        if self.io is None:
            self.sock.sendall(data)
        else:
            with self.io:
                self.sock.sendall(data)

    def send_text(self, text: str) -> None:
        self._send(frame(OP_TEXT, text.encode("utf-8")))

    def _pending(self) -> int:
        if self.io is None:
            return 0
        with self.io:
            return self.sock.pending()

    def _fill(self, deadline: Optional[float]) -> bool:
        """More bytes into buf; False when the deadline passed first."""
        if not self._pending():
            while True:
                if deadline is None:
                    ms = -1
                else:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    ms = max(1, int(left * 1000 + 0.999))
                if self._poll.poll(ms):
                    break
        if self.io is None:
            data = self.sock.recv(65536)
        else:
            with self.io:
                data = self.sock.recv(65536)
        if not data:
            raise Closed("the connection was closed (EOF)")
        self.buf += data
        return True

    def _frame(self) -> Optional[Tuple[bool, int, bytes]]:
        """The next whole frame in buf (fin, opcode, payload), or None."""
        b = self.buf
        if len(b) < 2:
            return None
        b0, b1 = b[0], b[1]
        if b0 & 0x70:
            raise ProtocolError("a frame with RSV bits set (no extension was agreed)")
        n, hl = b1 & 0x7F, 2
        if n == 126:
            if len(b) < 4:
                return None
            n, hl = struct.unpack_from("!H", b, 2)[0], 4
        elif n == 127:
            if len(b) < 10:
                return None
            n, hl = struct.unpack_from("!Q", b, 2)[0], 10
        if self.max_size is not None and n > self.max_size:
            raise ProtocolError("a frame of %d bytes is over max_size %d" % (n, self.max_size))
        key = None
        if b1 & 0x80:
            if len(b) < hl + 4:
                return None
            key = bytes(b[hl:hl + 4])
            hl += 4
        if len(b) < hl + n:
            return None
        payload = bytes(b[hl:hl + n])
        del b[:hl + n]
        if key is not None:
            payload = _mask(payload, key)
        return bool(b0 & 0x80), b0 & 0x0F, payload

    def recv(self, deadline: Optional[float] = None) -> Optional[Tuple[int, bytes]]:
        """The next whole message as (OP_TEXT or OP_BINARY, payload bytes);
        None when the deadline (time.monotonic()) passed first. Pings are
        answered; a close frame or EOF raises Closed."""
        while True:
            f = self._frame()
            if f is None:
                if not self._fill(deadline):
                    return None
                continue
            fin, op, payload = f
            if op >= 8:
                if op == OP_PING:
                    self._send(frame(OP_PONG, payload))
                elif op == OP_CLOSE:
                    try:
                        self._send(frame(OP_CLOSE, payload[:2]))
                    except OSError:
                        pass
                    raise Closed("the server closed the connection (%r)" % payload[:2])
                continue
            if op == OP_CONT:
                if not self._parts:
                    raise ProtocolError("a continuation frame with no message begun")
            elif self._parts:
                raise ProtocolError("a new message inside a fragmented one")
            else:
                self._part_op = op
            if fin and not self._parts:
                return op, payload
            self._parts.append(payload)
            if self.max_size is not None and sum(len(p) for p in self._parts) > self.max_size:
                raise ProtocolError("a message over max_size %d" % self.max_size)
            if fin:
                msg, self._parts = b"".join(self._parts), []
                return self._part_op, msg

    def shutdown(self) -> None:
        """Wake a reader (it sees Closed) without freeing the socket."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self, polite: bool = False) -> None:
        """Close the socket (after a close frame when `polite`)."""
        if self.closed:
            return
        self.closed = True
        if polite:
            try:
                self._send(frame(OP_CLOSE, struct.pack("!H", 1000)))
            except OSError:
                pass
        try:
            self.sock.close()
        except OSError:
            pass


def _read_head(sock: Any) -> Tuple[bytes, bytes]:
    buf = b""
    while b"\r\n\r\n" not in buf:
        if len(buf) > _HEAD_MAX:
            raise ProtocolError("an HTTP answer head over %d bytes" % _HEAD_MAX)
        data = sock.recv(4096)
        if not data:
            raise EOFError("the connection closed during the opening handshake")
        buf += data
    head, _, rest = buf.partition(b"\r\n\r\n")
    return head, rest


def connect(endpoint: Any, path: str, subprotocol: str, timeout: Optional[float] = None) -> SyncWebSocket:
    """A new WebSocket to `path` on `endpoint` (a termd._ws.Endpoint), each
    step of the connection and handshake bounded by `timeout` (default
    endpoint.open_timeout). Raises OSError (ssl.SSLError and socket.timeout
    among them), EOFError, Refused or ProtocolError."""
    if timeout is None:
        timeout = endpoint.open_timeout
    if endpoint.unix_path is not None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        host = "localhost"
        try:
            sock.settimeout(timeout)
            sock.connect(endpoint.unix_path)
        except BaseException:
            sock.close()
            raise
    else:
        u = urlsplit(endpoint.base)
        port = u.port or (443 if u.scheme == "wss" else 80)
        host = u.netloc
        sock = socket.create_connection((u.hostname, port), timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if endpoint.ssl is not None:
                sock = endpoint.ssl.wrap_socket(sock, server_hostname=u.hostname)
        except BaseException:
            sock.close()
            raise
    try:
        key = base64.b64encode(os.urandom(16)).decode("ascii")
        hdrs = dict(endpoint.headers)
        if endpoint.token:
            hdrs["Authorization"] = "Bearer " + endpoint.token
        lines = ["GET %s HTTP/1.1" % path, "Host: %s" % host, "Upgrade: websocket", "Connection: Upgrade",
                 "Sec-WebSocket-Key: %s" % key, "Sec-WebSocket-Version: 13",
                 "Sec-WebSocket-Protocol: %s" % subprotocol]
        lines += ["%s: %s" % (k, v) for k, v in hdrs.items()]
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        head, rest = _read_head(sock)
        status_line, *fields = head.decode("latin-1").split("\r\n")
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise ProtocolError("not an HTTP answer: %r" % status_line[:100])
        status = int(parts[1])
        if status != 101:
            raise Refused(status, status_line)
        got = {}
        for f in fields:
            k, _, v = f.partition(":")
            got[k.strip().lower()] = v.strip()
        want = base64.b64encode(hashlib.sha1(key.encode("ascii") + _GUID).digest()).decode("ascii")
        if got.get("sec-websocket-accept") != want:
            raise ProtocolError("a 101 answer without the right Sec-WebSocket-Accept")
        proto = got.get("sec-websocket-protocol")
        if proto is not None and proto != subprotocol:
            raise ProtocolError("the server chose subprotocol %r, not %r" % (proto, subprotocol))
        if "sec-websocket-extensions" in got:
            raise ProtocolError("the server named extensions none were offered: %r" % got["sec-websocket-extensions"])
        sock.settimeout(None)
        return SyncWebSocket(sock, rest, endpoint.max_size)
    except BaseException:
        sock.close()
        raise
