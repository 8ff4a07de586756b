"""termd._ws: the one place that talks to the websockets library: URLs
(ws://, wss://, unix:/path), the token header, TLS, and the differences
between websockets' legacy (10-12) and new (13+) asyncio clients."""

from __future__ import annotations

import os
import ssl as _ssl
from typing import Any, Dict, Optional
from urllib.parse import quote, urlsplit

import websockets

try:  # websockets >= 13: the new asyncio implementation
    from websockets.asyncio.client import connect as _connect, unix_connect as _unix_connect
    _HEADERS_KW = "additional_headers"
except ImportError:  # websockets 10-12 (Debian 12 has 10.4)
    from websockets import connect as _connect, unix_connect as _unix_connect  # type: ignore
    _HEADERS_KW = "extra_headers"

ConnectionClosed = websockets.exceptions.ConnectionClosed
EVENTS_PROTOCOL = "termd.events.v1"
TTY_PROTOCOL = "termd.tty.v1"
DEFAULT_URL = "ws://127.0.0.1:8421"


def read_token_file(path: str) -> str:
    """The token in a token file (first line, whitespace stripped)."""
    with open(path, encoding="utf-8") as f:
        return f.read().strip()


class Endpoint:
    """Where termd is and how to reach it: `url` (ws://HOST:PORT,
    wss://HOST:PORT or unix:/path), `token`, TLS (`cacert` file or an
    `ssl` context) and the frame size limit."""

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None,
                 token_file: Optional[str] = None, cacert: Optional[str] = None,
                 ssl: Optional[_ssl.SSLContext] = None, max_size: Optional[int] = 64 << 20,
                 open_timeout: float = 10.0, headers: Optional[Dict[str, str]] = None):
        self.url = (url or os.environ.get("TERMD_URL") or DEFAULT_URL).rstrip("/")
        if token is None and token_file:
            token = read_token_file(token_file)
        if token is None:
            token = os.environ.get("TERMD_TOKEN") or None
        self.token = token
        self.max_size = max_size
        self.open_timeout = open_timeout
        self.headers = dict(headers or {})
        self.unix_path = None
        if self.url.startswith("unix:"):
            self.unix_path = self.url[5:]
            if self.unix_path.startswith("//"):
                self.unix_path = self.unix_path[2:]
            self.base = "ws://localhost"
            self.ssl = None
        else:
            u = urlsplit(self.url)
            if u.scheme not in ("ws", "wss", "http", "https"):
                raise ValueError("termd URL must be ws://, wss:// or unix:/path, not %r" % self.url)
            scheme = {"http": "ws", "https": "wss"}.get(u.scheme, u.scheme)
            self.base = "%s://%s" % (scheme, u.netloc)
            if scheme == "wss":
                if ssl is None:
                    ssl = _ssl.create_default_context(cafile=cacert) if cacert else _ssl.create_default_context()
                self.ssl = ssl
            else:
                self.ssl = None

    async def refusal_status(self, path: str, subprotocol: str) -> Optional[int]:
        """The HTTP status termd answers an upgrade of `path` with, read from a
        plain request. Used when websockets could not parse the answer (termd
        answers refusals such as 401 as HTTP/1.0, which websockets rejects)."""
        import asyncio
        import base64
        import os as _os
        from urllib.parse import urlsplit as _split
        try:
            if self.unix_path is not None:
                r, w = await asyncio.wait_for(asyncio.open_unix_connection(self.unix_path), self.open_timeout)
                host = "localhost"
            else:
                u = _split(self.base)
                port = u.port or (443 if u.scheme == "wss" else 80)
                r, w = await asyncio.wait_for(asyncio.open_connection(
                    u.hostname, port, ssl=self.ssl, server_hostname=u.hostname if self.ssl else None),
                    self.open_timeout)
                host = u.netloc
            lines = ["GET %s HTTP/1.1" % path, "Host: %s" % host, "Upgrade: websocket", "Connection: Upgrade",
                     "Sec-WebSocket-Key: %s" % base64.b64encode(_os.urandom(16)).decode(),
                     "Sec-WebSocket-Version: 13", "Sec-WebSocket-Protocol: %s" % subprotocol]
            if self.token:
                lines.append("Authorization: Bearer %s" % self.token)
            w.write(("\r\n".join(lines) + "\r\n\r\n").encode())
            status = await asyncio.wait_for(r.readline(), self.open_timeout)
            w.close()
            parts = status.split()
            return int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else None
        except Exception:
            return None

    async def open(self, path: str, subprotocol: str) -> Any:
        """A new WebSocket to `path` (e.g. "/events", "/tty/main?mode=rw")."""
        hdrs = dict(self.headers)
        if self.token:
            hdrs["Authorization"] = "Bearer " + self.token
        kw = {"subprotocols": [subprotocol], "max_size": self.max_size, _HEADERS_KW: hdrs,
              "open_timeout": self.open_timeout, "compression": None}
        if self.ssl is not None:
            kw["ssl"] = self.ssl
        uri = self.base + path
        if self.unix_path is not None:
            return await _unix_connect(self.unix_path, uri, **kw)
        return await _connect(uri, **kw)


def tty_path(session: str, mode: str) -> str:
    """The /tty path for a session and mode ("ro" or "rw")."""
    return "/tty/%s?mode=%s" % (quote(session, safe=""), quote(mode, safe=""))
