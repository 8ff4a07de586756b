"""wsclient.py — a small RFC 6455 WebSocket client on the Python stdlib only,
over TCP (ws://host:port), TLS (wss://host:port, https://host:port; the
certificate is checked against `tls_cafile` when set) or a unix socket
(unix:/path.sock), plus plain HTTP
requests on the same kind of URL and `Events`, a helper for termd's /events
channel (subprotocol termd.events.v1, PROTOCOL.md section 2).

Used by the regress tests; nothing here knows about termd's behaviour beyond
the framing of the events channel."""

import base64
import hashlib
import json
import os
import socket
import ssl
import struct
import time
import uuid

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

OP_CONT = 0x0
OP_TEXT = 0x1
OP_BINARY = 0x2
OP_CLOSE = 0x8
OP_PING = 0x9
OP_PONG = 0xA

EVENTS_SUBPROTOCOL = "termd.events.v1"
TTY_SUBPROTOCOL = "termd.tty.v1"

# CA file that TLS connections must verify against; None = do not verify.
tls_cafile = None


class WSError(Exception):
    """Protocol violation by the peer."""


class ConnectionClosed(Exception):
    """The peer closed the connection (close frame or EOF)."""

    def __init__(self, code=None, reason="", clean=False):
        super().__init__("connection closed (code=%r reason=%r clean=%r)" % (code, reason, clean))
        self.code = code
        self.reason = reason
        self.clean = clean


class HandshakeError(Exception):
    """The server did not upgrade the connection."""

    def __init__(self, status, headers, body, msg=None):
        super().__init__(msg or "handshake failed: HTTP %s %r" % (status, body[:200]))
        self.status = status
        self.headers = headers
        self.body = body


# --------------------------------------------------------------------------
# transport

def parse_url(url):
    """'unix:/p.sock' -> ('unix', '/p.sock'); 'ws://h:p[/x]' or 'http://h:p'
    or 'h:p' -> ('tcp', (host, port)); 'wss://h:p' or 'https://h:p' ->
    ('tls', (host, port))."""
    if url.startswith("unix:"):
        path = url[len("unix:"):]
        if path.startswith("//"):
            path = path[2:]
        return "unix", path
    rest = url
    kind = "tcp"
    for scheme in ("ws://", "http://", "wss://", "https://"):
        if rest.startswith(scheme):
            rest = rest[len(scheme):]
            kind = "tls" if scheme in ("wss://", "https://") else "tcp"
            break
    rest = rest.split("/", 1)[0]
    if rest.startswith("["):
        host, _, port = rest[1:].partition("]:")
    else:
        host, _, port = rest.rpartition(":")
    return kind, (host or "127.0.0.1", int(port or (443 if kind == "tls" else 80)))


def open_socket(url, timeout=10.0):
    kind, addr = parse_url(url)
    if kind == "unix":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    else:
        s = socket.socket(socket.AF_INET6 if ":" in addr[0] else socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(addr)
    except BaseException:
        s.close()
        raise
    if kind != "unix":
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if kind == "tls":
        if tls_cafile:
            ctx = ssl.create_default_context(cafile=tls_cafile)
        else:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        try:
            s = ctx.wrap_socket(s, server_hostname=addr[0])
        except BaseException:
            s.close()
            raise
    return s


def _host_header(url):
    kind, addr = parse_url(url)
    return "localhost" if kind == "unix" else "%s:%d" % addr


def _read_http_head(sock, deadline):
    """Read up to and including the blank line; return (status, headers, rest)."""
    data = b""
    while b"\r\n\r\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no HTTP response head within the timeout")
        sock.settimeout(left)
        chunk = sock.recv(65536)
        if not chunk:
            if data:
                break
            raise ConnectionClosed(None, "EOF before HTTP response")
        data += chunk
        if len(data) > 1 << 20:
            raise WSError("HTTP response head too large")
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("iso-8859-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/"):
        raise WSError("bad HTTP status line %r" % lines[0])
    status = int(parts[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            k = k.strip().lower()
            v = v.strip()
            headers[k] = headers[k] + ", " + v if k in headers else v
    return status, headers, rest


def _read_http_body(sock, headers, rest, deadline):
    def more():
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("HTTP body not complete within the timeout")
        sock.settimeout(left)
        return sock.recv(65536)

    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = b""
        buf = rest
        while True:
            while b"\r\n" not in buf:
                c = more()
                if not c:
                    return body
                buf += c
            line, _, buf = buf.partition(b"\r\n")
            size = int(line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                return body
            while len(buf) < size + 2:
                c = more()
                if not c:
                    return body + buf[:size]
                buf += c
            body += buf[:size]
            buf = buf[size + 2:]
    if "content-length" in headers:
        n = int(headers["content-length"])
        body = rest
        while len(body) < n:
            c = more()
            if not c:
                break
            body += c
        return body[:n]
    body = rest
    while True:
        try:
            c = more()
        except (TimeoutError, socket.timeout):
            return body
        if not c:
            return body
        body += c


def http_request(url, path="/", method="GET", headers=None, body=b"", timeout=10.0):
    """One HTTP/1.1 request; returns (status, headers{lowercase: value}, body)."""
    deadline = time.monotonic() + timeout
    sock = open_socket(url, timeout)
    try:
        given = {k.lower() for k in (headers or {})}
        req = ["%s %s HTTP/1.1" % (method, path)]
        if "host" not in given:   # the caller's own Host replaces it (two Hosts are a 400)
            req.append("Host: " + _host_header(url))
        req.append("Connection: close")
        if body:
            req.append("Content-Length: %d" % len(body))
        for k, v in (headers or {}).items():
            req.append("%s: %s" % (k, v))
        sock.sendall(("\r\n".join(req) + "\r\n\r\n").encode("iso-8859-1") + body)
        status, hdrs, rest = _read_http_head(sock, deadline)
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return status, hdrs, b""
        return status, hdrs, _read_http_body(sock, hdrs, rest, deadline)
    finally:
        sock.close()


# --------------------------------------------------------------------------
# WebSocket

def mask_bytes(data, key, offset=0):
    """XOR data with the 4-byte key, as if data started at payload offset."""
    if not data:
        return b""
    r = offset % 4
    k = key[r:] + key[:r]
    n = len(data)
    reps = (n + 3) // 4
    full = (k * reps)[:n]
    return (int.from_bytes(data, "big") ^ int.from_bytes(full, "big")).to_bytes(n, "big")


def frame_header(opcode, length, fin=True, masked=True, rsv=0):
    b0 = (0x80 if fin else 0) | (rsv << 4) | (opcode & 0x0F)
    mbit = 0x80 if masked else 0
    if length < 126:
        return struct.pack("!BB", b0, mbit | length)
    if length < 1 << 16:
        return struct.pack("!BBH", b0, mbit | 126, length)
    return struct.pack("!BBQ", b0, mbit | 127, length)


class WebSocket:
    def __init__(self, sock, leftover=b"", subprotocol=None, response_headers=None):
        self.sock = sock
        self._buf = bytearray(leftover)
        self._frag_op = None
        self.data_frames = 0      # data frames received (fragments counted one by one)
        self.max_data_frame = 0   # the largest data frame's payload
        self._frag = bytearray()
        self.subprotocol = subprotocol
        self.response_headers = response_headers or {}
        self.closed = False
        self.close_code = None
        self.close_reason = ""
        self.pongs = []

    # -- sending --------------------------------------------------------

    def send_frame(self, opcode, payload, fin=True, mask=True, rsv=0):
        if isinstance(payload, str):
            payload = payload.encode("utf-8")
        hdr = frame_header(opcode, len(payload), fin, mask, rsv)
        if mask:
            key = os.urandom(4)
            data = hdr + key + mask_bytes(payload, key)
        else:
            data = hdr + payload
        self.sock.settimeout(60)
        self.sock.sendall(data)

    def send_text(self, text):
        self.send_frame(OP_TEXT, text.encode("utf-8") if isinstance(text, str) else text)

    def send_binary(self, data):
        self.send_frame(OP_BINARY, data)

    def send_ping(self, payload=b""):
        self.send_frame(OP_PING, payload)

    def send_large(self, opcode, length, chunks, send_timeout=60):
        """Send one frame of `length` bytes whose payload is the concatenation
        of the byte strings yielded by `chunks`, masking as it goes, without
        building the whole payload in memory."""
        key = os.urandom(4)
        self.sock.settimeout(send_timeout)
        self.sock.sendall(frame_header(opcode, length) + key)
        off = 0
        for c in chunks:
            self.sock.sendall(mask_bytes(c, key, off))
            off += len(c)
        if off != length:
            raise ValueError("chunks gave %d bytes, header said %d" % (off, length))

    def close(self, code=1000, reason="", timeout=5.0):
        """Clean close: send a close frame, wait briefly for the peer's."""
        if self.closed:
            return
        try:
            self.send_frame(OP_CLOSE, struct.pack("!H", code) + reason.encode("utf-8"))
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                self.recv(deadline - time.monotonic())
        except Exception:
            pass
        finally:
            self.abort()

    def abort(self):
        """Drop the TCP/unix connection without a close frame."""
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass

    # -- receiving ------------------------------------------------------

    def _fill(self, deadline):
        if self.closed:
            raise ConnectionClosed(self.close_code, self.close_reason or "closed")
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise TimeoutError("no WebSocket message within the timeout")
        self.sock.settimeout(left)
        try:
            chunk = self.sock.recv(1 << 16)
        except socket.timeout:
            raise TimeoutError("no WebSocket message within the timeout")
        except OSError as e:
            self.closed = True
            raise ConnectionClosed(None, "connection error: %s" % e)
        if not chunk:
            self.closed = True
            raise ConnectionClosed(None, "EOF")
        self._buf += chunk

    def _parse_frame(self):
        """One complete frame from the buffer, or None if incomplete."""
        b = self._buf
        if len(b) < 2:
            return None
        b0, b1 = b[0], b[1]
        fin = bool(b0 & 0x80)
        rsv = (b0 >> 4) & 7
        op = b0 & 0x0F
        masked = bool(b1 & 0x80)
        n = b1 & 0x7F
        pos = 2
        if n == 126:
            if len(b) < 4:
                return None
            n = struct.unpack_from("!H", b, 2)[0]
            pos = 4
        elif n == 127:
            if len(b) < 10:
                return None
            n = struct.unpack_from("!Q", b, 2)[0]
            pos = 10
        if masked:
            if len(b) < pos + 4:
                return None
            pos += 4
        if len(b) < pos + n:
            return None
        payload = bytes(b[pos:pos + n])
        del b[:pos + n]
        if masked:
            raise WSError("server sent a masked frame")
        if rsv:
            raise WSError("server set RSV bits %d without an extension" % rsv)
        return fin, op, payload

    def recv_frame(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            f = self._parse_frame()
            if f is not None:
                return f
            self._fill(deadline)

    def recv(self, timeout=30.0):
        """Next whole data message as (opcode, payload bytes). Answers pings,
        records pongs, reassembles fragments. Raises TimeoutError or
        ConnectionClosed."""
        if self.closed and not self._buf:
            raise ConnectionClosed(self.close_code, self.close_reason)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            f = self._parse_frame()
            if f is None:
                self._fill(deadline)
                continue
            fin, op, payload = f
            if op & 0x8:  # control frame
                if not fin or len(payload) > 125:
                    raise WSError("bad control frame")
                if op == OP_PING:
                    try:
                        self.send_frame(OP_PONG, payload)
                    except OSError:
                        pass
                    continue
                if op == OP_PONG:
                    self.pongs.append(payload)
                    continue
                if op == OP_CLOSE:
                    code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
                    reason = payload[2:].decode("utf-8", "replace")
                    self.close_code, self.close_reason = code, reason
                    try:
                        if not self.closed:
                            self.send_frame(OP_CLOSE, payload[:2])
                    except OSError:
                        pass
                    self.abort()
                    raise ConnectionClosed(code, reason, clean=True)
                raise WSError("unknown control opcode %d" % op)
            self.data_frames += 1
            self.max_data_frame = max(self.max_data_frame, len(payload))
            if op == OP_CONT:
                if self._frag_op is None:
                    raise WSError("continuation frame without a start")
                self._frag += payload
                if fin:
                    op, data = self._frag_op, bytes(self._frag)
                    self._frag_op, self._frag = None, bytearray()
                    return op, data
                continue
            if op in (OP_TEXT, OP_BINARY):
                if self._frag_op is not None:
                    raise WSError("new data frame inside a fragmented message")
                if fin:
                    return op, payload
                self._frag_op, self._frag = op, bytearray(payload)
                continue
            raise WSError("unknown data opcode %d" % op)


def handshake(sock, url, path, subprotocol=None, token=None, headers=None, timeout=10.0):
    deadline = time.monotonic() + timeout
    key = base64.b64encode(os.urandom(16)).decode("ascii")
    headers = dict(headers or {})
    host = headers.pop("Host", None) or _host_header(url)   # a test may pose as another host
    req = ["GET %s HTTP/1.1" % path, "Host: " + host, "Upgrade: websocket",
           "Connection: Upgrade", "Sec-WebSocket-Key: " + key, "Sec-WebSocket-Version: 13"]
    if subprotocol:
        req.append("Sec-WebSocket-Protocol: " + subprotocol)
    if token is not None:
        req.append("Authorization: Bearer " + token)
    for k, v in headers.items():
        req.append("%s: %s" % (k, v))
    sock.settimeout(timeout)
    sock.sendall(("\r\n".join(req) + "\r\n\r\n").encode("iso-8859-1"))
    status, hdrs, rest = _read_http_head(sock, deadline)
    if status != 101:
        try:
            body = _read_http_body(sock, hdrs, rest, min(deadline, time.monotonic() + 2))
        except Exception:
            body = rest
        raise HandshakeError(status, hdrs, body)
    want = base64.b64encode(hashlib.sha1((key + WS_GUID).encode("ascii")).digest()).decode("ascii")
    if hdrs.get("sec-websocket-accept") != want:
        raise HandshakeError(status, hdrs, rest, "bad Sec-WebSocket-Accept %r (want %r)"
                             % (hdrs.get("sec-websocket-accept"), want))
    if "websocket" not in hdrs.get("upgrade", "").lower():
        raise HandshakeError(status, hdrs, rest, "101 without Upgrade: websocket")
    got_proto = hdrs.get("sec-websocket-protocol")
    if subprotocol and got_proto != subprotocol:
        raise HandshakeError(status, hdrs, rest, "subprotocol %r, asked for %r" % (got_proto, subprotocol))
    return WebSocket(sock, rest, got_proto, hdrs)


def connect(url, path="/events", subprotocol=EVENTS_SUBPROTOCOL, token=None, timeout=10.0, headers=None):
    """Open a WebSocket: url 'unix:/path.sock' or 'ws://host:port'; path may
    carry a query string. token, when given, goes in Authorization: Bearer."""
    sock = open_socket(url, timeout)
    try:
        return handshake(sock, url, path, subprotocol, token, headers, timeout)
    except BaseException:
        sock.close()
        raise


# --------------------------------------------------------------------------
# termd /events helper

_id_prefix = uuid.uuid4().hex[:12]
_id_counter = [0]


def new_id(tag="a"):
    """An action id unique across this test process (termd replays ids it
    has already answered, so ids must never repeat per termd instance)."""
    _id_counter[0] += 1
    return "%s-%s-%d" % (tag, _id_prefix, _id_counter[0])


class Events:
    """One /events connection. `hello` holds the hello observation; `others`
    the observations received while waiting for something else."""

    def __init__(self, url, token=None, path="/events", timeout=30.0, headers=None, read_hello=True):
        self.ws = connect(url, path, EVENTS_SUBPROTOCOL, token, timeout, headers)
        self.others = []
        self.hello = None
        if read_hello:
            self.hello = self.recv_obs(timeout)
            if self.hello.get("observation") != "hello":
                raise AssertionError("first observation is not hello: %r" % (self.hello,))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send_raw(self, data):
        if isinstance(data, (bytes, bytearray)):
            self.ws.send_frame(OP_TEXT, bytes(data))
        else:
            self.ws.send_text(data)

    def send_action(self, action, args=None, id=None):
        if id is None:
            id = new_id()
        msg = {"id": id, "action": action}
        if args is not None:
            msg["args"] = args
        self.ws.send_text(json.dumps(msg))
        return id

    def recv_obs(self, timeout=30.0):
        """Next observation from the wire (ignores `others`)."""
        op, payload = self.ws.recv(timeout)
        if op != OP_TEXT:
            raise AssertionError("binary frame on /events: %r" % payload[:100])
        try:
            obs = json.loads(payload.decode("utf-8"))
        except ValueError as e:
            raise AssertionError("server sent a frame that is not JSON: %r (%s)" % (payload[:200], e))
        if not isinstance(obs, dict):
            raise AssertionError("server sent JSON that is not an object: %r" % (obs,))
        return obs

    def wait_for(self, pred, timeout=30.0):
        """First observation (from `others`, then the wire) for which pred is
        true; it is removed from `others`. Non-matching ones go to `others`."""
        for i, o in enumerate(self.others):
            if pred(o):
                return self.others.pop(i)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no matching observation within %.1fs; others: %r"
                                   % (timeout, self.others[-5:]))
            obs = self.recv_obs(left)
            if pred(obs):
                return obs
            self.others.append(obs)

    def call(self, action, args=None, id=None, timeout=60.0):
        """Send an action, return the observation whose cause is its id."""
        id = self.send_action(action, args, id)
        return self.wait_for(lambda o: o.get("cause") == id and "cause" in o, timeout)

    def ping(self, timeout=30.0):
        return self.call("ping", timeout=timeout)

    def close(self):
        self.ws.close(timeout=2.0)
