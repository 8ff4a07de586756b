"""Every door over TLS and HTTP/2 (termd/net/front*.c): termd's TCP
listener is served by its front, which ends TLS, offers h2 and http/1.1 by
ALPN and carries each HTTP/2 stream to lws as an HTTP/1.1 request. Each
door's routes answer over h2 as over HTTP/1.1 (envd unary, a server stream,
multi-MiB /files both ways with X-Access-Token; OpenHands with
X-Session-API-Key; /record; the web page; /healthz; /metrics); a reader that
stops reading stalls nobody else; RST_STREAM closes the stream's request
behind it; a head over the limit is 431; a connection that sends no whole
head is closed after --head-timeout; HEAD over h2 is answered by HEADERS
alone; a WebSocket still works over TLS HTTP/1.1; h2c with prior knowledge
on a plain listener; the e2b JS SDK's driver over https:// negotiates h2."""
import json
import os
import socket
import ssl
import struct
import subprocess
import time

import pytest

import wsclient
from tdtest import content, free_port, make_cert, run_done, upgrade_while_connecting

h2 = pytest.importorskip("h2.connection", reason="python3-h2 is needed (make deps)")
import h2.config  # noqa: E402
import h2.events  # noqa: E402
import h2.settings  # noqa: E402
import h2.errors  # noqa: E402

TOKEN = "h2-test-token-0123456789"


class Stream:
    def __init__(self):
        self.status = None
        self.headers = {}
        self.data = bytearray()
        self.ended = False
        self.reset = None
        self.ended_on_headers = False   # END_STREAM on the HEADERS frame itself
        self.data_frames = 0            # DATA frames, empty ones too


class H2:
    """A small HTTP/2 client (python3-h2) on one connection: TLS with ALPN
    h2, or h2c with prior knowledge. ack=False leaves received DATA
    unacknowledged (the server's window for that stream fills and stays)."""

    def __init__(self, port, cafile=None, window=None):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if cafile:
            ctx = ssl.create_default_context(cafile=str(cafile))
            ctx.set_alpn_protocols(["h2"])
            s = ctx.wrap_socket(s, server_hostname="localhost")
            assert s.selected_alpn_protocol() == "h2"
        self.sock = s
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        if window:
            self.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        self.streams = {}
        self.noack = set()
        self.flush()

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def pump(self, timeout=0.2):
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(1 << 20)
        except (socket.timeout, ssl.SSLWantReadError):
            return True
        if not data:
            return False
        for ev in self.conn.receive_data(data):
            st = self.streams.get(getattr(ev, "stream_id", None))
            if isinstance(ev, h2.events.ResponseReceived) and st:
                hd = dict(ev.headers)
                st.status = int(hd[":status"])
                st.headers = hd
                st.ended_on_headers = ev.stream_ended is not None
            elif isinstance(ev, h2.events.DataReceived):
                if st:
                    st.data += ev.data
                    st.data_frames += 1
                if ev.stream_id not in self.noack:
                    self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded) and st:
                st.ended = True
            elif isinstance(ev, h2.events.StreamReset) and st:
                st.reset = ev.error_code
        self.flush()
        return True

    def wait(self, cond, what, timeout=60):
        deadline = time.monotonic() + timeout
        while not cond():
            assert time.monotonic() < deadline, "h2: no %s within %ss" % (what, timeout)
            assert self.pump(), "h2: the connection closed waiting for %s" % what

    def start(self, method, path, headers=None, body=None, ack=True, end=True):
        sid = self.conn.get_next_available_stream_id()
        hdrs = [(":method", method), (":path", path), (":scheme", "https"),
                (":authority", "localhost")] + list((headers or {}).items())
        self.streams[sid] = Stream()
        if not ack:
            self.noack.add(sid)
        self.conn.send_headers(sid, hdrs, end_stream=body is None and end)
        self.flush()
        if body is not None:
            self.send_body(sid, body, end)
        return sid

    def send_body(self, sid, body, end=True):
        off = 0
        while off < len(body):
            room = min(self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size)
            if room <= 0:
                self.pump()
                continue
            self.conn.send_data(sid, body[off:off + room])
            off += room
            self.flush()
        if end:
            self.conn.end_stream(sid)
            self.flush()

    def request(self, method, path, headers=None, body=None, timeout=60):
        sid = self.start(method, path, headers, body)
        st = self.streams[sid]
        self.wait(lambda: st.ended or st.reset is not None, "answer to %s %s" % (method, path),
                  timeout)
        assert st.reset is None, "stream reset: %r" % st.reset
        return st.status, st.headers, bytes(st.data)


def envelope(msg, flags=0):
    data = json.dumps(msg).encode()
    return struct.pack(">BI", flags, len(data)) + data


def parse_envelopes(data):
    out, off = [], 0
    while off < len(data):
        flags, n = struct.unpack(">BI", data[off:off + 5])
        out.append((flags, json.loads(data[off + 5:off + 5 + n])))
        off += 5 + n
    return out


@pytest.fixture
def tls_td(termd_factory, tmp_path, monkeypatch):
    cert, key = make_cert(tmp_path)
    monkeypatch.setattr(wsclient, "tls_cafile", str(cert))
    rec = tmp_path / "rec"
    rec.mkdir()
    td = termd_factory(args=["--tls-cert", str(cert), "--tls-key", str(key), "--record", str(rec)],
                       token=TOKEN, listen="127.0.0.1:%d" % free_port(), scheme="wss",
                       env={"NO_CHANGE_TIMEOUT_SECONDS": "2"})
    td.cert = cert
    td.port = int(td.url.rsplit(":", 1)[1])
    return td


def metric(td, name, h=None, token=TOKEN):
    c = h or H2(td.port, td.cert)
    status, _, body = c.request("GET", "/metrics", {"authorization": "Bearer " + token})
    assert status == 200
    for line in body.decode().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            if line.rsplit(" ", 1)[0] == name:
                return float(line.rsplit(" ", 1)[1])
    return None


ENVD = {"x-access-token": TOKEN}


def test_every_door_over_h2(tls_td, tmp_path):
    td = tls_td
    c = H2(td.port, td.cert)
    # termd's own: /healthz, /metrics, the web page
    status, _, body = c.request("GET", "/healthz")
    assert status == 200 and json.loads(body)["ok"] is True
    status, hd, body = c.request("GET", "/metrics", {"authorization": "Bearer " + TOKEN})
    assert status == 200 and hd["content-type"].startswith("text/plain")
    status, hd, body = c.request("GET", "/?token=" + TOKEN)
    assert status == 200 and hd["content-type"].startswith("text/html") and b"<html" in body.lower()
    # envd: /health, a unary call (and its token check), a server stream
    status, _, body = c.request("GET", "/health")
    assert status == 204 and body == b""
    h = dict(ENVD, **{"content-type": "application/json", "connect-protocol-version": "1"})
    status, _, body = c.request("POST", "/filesystem.Filesystem/Stat", h,
                                json.dumps({"path": str(td.home)}).encode())
    assert status == 200, body
    assert json.loads(body)["entry"]["type"] == "FILE_TYPE_DIRECTORY"
    status, _, body = c.request("POST", "/filesystem.Filesystem/Stat",
                                {"content-type": "application/json"},
                                json.dumps({"path": "/"}).encode())
    assert status == 401 and json.loads(body)["code"] == "unauthenticated"
    h = dict(ENVD, **{"content-type": "application/connect+json", "connect-protocol-version": "1"})
    status, hd, body = c.request("POST", "/process.Process/Start", h, envelope(
        {"process": {"cmd": "/bin/bash", "args": ["-c", "for i in 1 2 3; do echo line$i; "
                                                  "sleep 0.1; done; exit 4"]}}))
    assert status == 200 and hd["content-type"] == "application/connect+json", body
    envs = parse_envelopes(body)
    assert envs[-1][0] == 2, envs[-1]   # the end-of-stream envelope
    events = [m["event"] for f, m in envs if f == 0]
    import base64
    out = b"".join(base64.b64decode(e["data"]["stdout"]) for e in events
                   if "data" in e and "stdout" in e["data"])
    assert out == b"line1\nline2\nline3\n"
    assert [e["end"] for e in events if "end" in e][0]["exitCode"] == 4
    # /files: a multi-MiB upload and download, both ways over flow control
    blob = os.urandom(5 << 20) + b"end"
    dest = td.home / "big.bin"
    status, _, body = c.request("POST", "/files?path=%s" % dest,
                                dict(ENVD, **{"content-type": "application/octet-stream"}), blob)
    assert status == 200, body
    assert dest.read_bytes() == blob
    status, hd, body = c.request("GET", "/files?path=%s" % dest, ENVD)
    assert status == 200 and body == blob and hd["content-type"] == "application/octet-stream"
    # a multipart upload (the SDK's files.write), its size unknown in advance
    boundary = "----h2test"
    mp = ("--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"m.txt\"\r\n"
          "Content-Type: application/octet-stream\r\n\r\n" % boundary).encode() + blob[:300000] + \
        ("\r\n--%s--\r\n" % boundary).encode()
    sid = c.start("POST", "/files?path=%s" % (td.home / "m.txt"),
                  dict(ENVD, **{"content-type": "multipart/form-data; boundary=" + boundary}),
                  body=mp)
    st = c.streams[sid]
    c.wait(lambda: st.ended, "the multipart upload's answer")
    assert st.status == 200, bytes(st.data)
    assert (td.home / "m.txt").read_bytes() == blob[:300000]
    # OpenHands: /execute_action, /upload_file, /download_files
    oh = {"x-session-api-key": TOKEN, "content-type": "application/json"}
    status, _, body = c.request("POST", "/execute_action", oh, json.dumps(
        {"action": {"action": "run", "args": {"command": "echo oh-over-h2", "is_input": False,
                                              "blocking": True}, "timeout": 30}}).encode())
    assert status == 200, body
    assert json.loads(body)["content"].strip().startswith("oh-over-h2")
    status, _, body = c.request("POST", "/execute_action", {"content-type": "application/json"},
                                b"{}")
    assert status == 403
    up = ("--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"oh.bin\"\r\n"
          "Content-Type: application/octet-stream\r\n\r\n" % boundary).encode() + blob[:2 << 20] + \
        ("\r\n--%s--\r\n" % boundary).encode()
    status, _, body = c.request("POST", "/upload_file?destination=%s&recursive=false" %
                                (td.home / "ohup"),
                                {"x-session-api-key": TOKEN,
                                 "content-type": "multipart/form-data; boundary=" + boundary}, up)
    assert status == 200, body
    assert (td.home / "ohup" / "oh.bin").read_bytes() == blob[:2 << 20]
    status, hd, body = c.request("GET", "/download_files?path=%s" % (td.home / "ohup"),
                                 {"x-session-api-key": TOKEN})
    assert status == 200 and body[:2] == b"PK", (status, body[:100])
    import io
    import zipfile
    z = zipfile.ZipFile(io.BytesIO(body))
    assert z.read([n for n in z.namelist() if n.endswith("oh.bin")][0]) == blob[:2 << 20]
    # /record: the list and main's recording
    auth = {"authorization": "Bearer " + TOKEN}
    status, _, body = c.request("GET", "/record/", auth)
    assert status == 200, body
    status, hd, body = c.request("GET", "/record/main", auth)
    assert status == 200 and json.loads(body.split(b"\n", 1)[0])["version"] == 2
    # every one of them was an HTTP/2 stream of the front's
    assert metric(td, "termd_front_h2_streams_total", c) >= 15
    c.close()


def test_h2_and_h1_on_one_tls_listener(tls_td):
    td = tls_td
    # an HTTP/1.1 client over TLS (ALPN http/1.1) gets HTTP/1.1, WebSockets included
    status, _, body = wsclient.http_request(td.url.replace("wss://", "https://"), "/healthz")
    assert status == 200
    ev = td.events(token=TOKEN)
    assert content(run_done(ev, "echo ws-over-tls-front")) == "ws-over-tls-front"
    ev.close()
    c = H2(td.port, td.cert)
    assert c.request("GET", "/healthz")[0] == 200
    assert metric(td, 'termd_front_connections_total{protocol="h2"}', c) >= 1
    c.close()


def test_slow_reader_stalls_nobody_and_rst_closes_the_request(termd_factory, tmp_path,
                                                             monkeypatch):
    cert, key = make_cert(tmp_path)
    monkeypatch.setattr(wsclient, "tls_cafile", str(cert))
    if True:
        td = termd_factory(args=["--tls-cert", str(cert), "--tls-key", str(key),
                                 "--max-streams-per-client", "1"],
                           token=TOKEN, listen="127.0.0.1:%d" % free_port(), scheme="wss")
        port = int(td.url.rsplit(":", 1)[1])
        big = td.home / "big.bin"
        with open(big, "wb") as f:
            f.truncate(256 << 20)
        slow = H2(port, cert)
        sid = slow.start("GET", "/files?path=%s" % big, ENVD, ack=False)
        st = slow.streams[sid]
        slow.wait(lambda: len(st.data) > 0, "the first bytes of the download")
        # the slow reader's window is full: others are served meanwhile,
        # over h2 and over HTTP/1.1
        other = H2(port, cert)
        t0 = time.monotonic()
        for _ in range(20):
            assert other.request("GET", "/healthz")[0] == 200
        status, _, body = wsclient.http_request(td.url.replace("wss://", "https://"), "/healthz")
        assert status == 200
        assert time.monotonic() - t0 < 10
        # the slow download holds this client's one stream
        h = dict(ENVD, **{"content-type": "application/connect+json",
                          "connect-protocol-version": "1"})
        held = len(st.data)
        assert held <= (1 << 20) + (256 << 10) and not st.ended, held
        # RST_STREAM: its request behind ends, so the client's stream limit
        # (--max-streams-per-client 1) lets a new one in
        slow.conn.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
        slow.flush()
        deadline = time.monotonic() + 20
        while True:
            status, _, body = other.request("POST", "/process.Process/Start", h, envelope(
                {"process": {"cmd": "/bin/echo", "args": ["after-rst"]}}))
            if status == 200:
                break
            assert status == 429, (status, body)
            assert time.monotonic() < deadline, "the reset stream still holds the client's limit"
            time.sleep(0.05)
        # and the connection that reset it still works
        assert slow.request("GET", "/healthz")[0] == 200
        slow.close()
        other.close()


def test_head_over_the_limit_is_431(tls_td):
    td = tls_td
    c = H2(td.port, td.cert)
    status, _, body = c.request("GET", "/healthz", {"x-filler": "a" * 5000})
    assert status == 431, (status, body)
    assert c.request("GET", "/healthz")[0] == 200   # the connection goes on
    c.close()
    ctx = ssl.create_default_context(cafile=str(td.cert))
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", td.port), timeout=30),
                        server_hostname="localhost")
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Filler: " + b"a" * 5000 + b"\r\n\r\n")
    data = b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        data += d
    assert data.startswith(b"HTTP/1.1 431 "), data[:200]
    s.close()


def test_h2c_prior_knowledge_on_a_plain_listener(termd_factory):
    td = termd_factory(token=TOKEN, tcp=True)
    port = int(td.url.rsplit(":", 1)[1])
    c = H2(port)
    status, _, body = c.request("GET", "/healthz")
    assert status == 200 and json.loads(body)["ok"] is True
    h = dict(ENVD, **{"content-type": "application/json", "connect-protocol-version": "1"})
    status, _, body = c.request("POST", "/process.Process/List", h, b"{}")
    assert status == 200 and "processes" in json.loads(body)
    c.close()


def test_front_off_tls_offers_http1_only(termd_factory, tmp_path, monkeypatch):
    """--front off: lws does TLS itself, and its HTTP/2 (which drops the
    doors' headers) is not offered: ALPN gives http/1.1."""
    cert, key = make_cert(tmp_path)
    monkeypatch.setattr(wsclient, "tls_cafile", str(cert))
    td = termd_factory(args=["--tls-cert", str(cert), "--tls-key", str(key), "--front", "off"],
                       token=TOKEN, listen="127.0.0.1:%d" % free_port(), scheme="wss")
    port = int(td.url.rsplit(":", 1)[1])
    ctx = ssl.create_default_context(cafile=str(cert))
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=30),
                        server_hostname="localhost")
    assert s.selected_alpn_protocol() in (None, "http/1.1")
    s.close()
    ev = td.events(token=TOKEN)
    assert ev.ping()["observation"] == "pong"


def test_front_off_serves_lws_directly(termd_factory):
    td = termd_factory(token=TOKEN, tcp=True, args=["--front", "off"])
    port = int(td.url.rsplit(":", 1)[1])
    status, _, _ = wsclient.http_request(td.url.replace("ws://", "http://"), "/healthz")
    assert status == 200
    # no HTTP/2 there: lws answers the preface as a bad HTTP/1 request
    with pytest.raises(Exception):
        c = H2(port)
        c.request("GET", "/healthz", timeout=5)


def test_upgrade_in_place_keeps_tls_and_every_listener(termd_factory, tmp_path, monkeypatch):
    """The front's listening sockets (the first --listen and the extra one)
    go across an upgrade in place: a connect loop on each is never refused,
    and TLS with h2 answers on both after it."""
    cert, key = make_cert(tmp_path)
    monkeypatch.setattr(wsclient, "tls_cafile", str(cert))
    extra = free_port()
    td = termd_factory(args=["--tls-cert", str(cert), "--tls-key", str(key),
                             "--listen", "127.0.0.1:%d" % extra],
                       token=TOKEN, listen="127.0.0.1:%d" % free_port(), scheme="wss")
    port = int(td.url.rsplit(":", 1)[1])
    for p in (port, extra):
        assert H2(p, cert).request("GET", "/healthz")[0] == 200
    ev = td.events(token=TOKEN)
    ev2, ans, _, errors = upgrade_while_connecting(td, ev, [("127.0.0.1", p) for p in (port, extra)])
    assert ans["extras"].get("ok") is True, ans
    assert not errors, errors[:5]
    for p in (port, extra):
        c = H2(p, cert)
        status, _, body = c.request("GET", "/healthz")
        assert status == 200 and json.loads(body)["upgraded"] == 1, body
        c.close()
    assert ev2.ping().get("observation") == "pong"


@pytest.mark.parametrize("case", ["commands", "files", "reconnect", "pty", "watch_dir", "users",
                                  "quick"])
def test_e2b_sdk_over_https_negotiates_h2(case, termd_factory, tmp_path, monkeypatch, request):
    """tests/e2b's driver again, over https:// (the certificate trusted with
    NODE_EXTRA_CA_CERTS): the SDK's undici (allowH2) speaks HTTP/2 to the
    front, and test_envd.py's assertions hold as over plain HTTP/1.1."""
    import test_envd
    cert, key = make_cert(tmp_path)
    monkeypatch.setattr(wsclient, "tls_cafile", str(cert))
    started = []

    def start_tls(factory, token=test_envd.TOKEN, args=()):
        td = factory(token=token, listen="127.0.0.1:%d" % free_port(), scheme="wss",
                     args=["--tls-cert", str(cert), "--tls-key", str(key)] + list(args))
        started.append(td)
        return td

    orig = test_envd.drive

    def drive_https(td, scenario, token=test_envd.TOKEN, extra_env=None, timeout=120):
        env = dict(extra_env or {})
        env["E2B_SANDBOX_URL"] = "https://localhost:%d" % test_envd.port_of(td)
        env["NODE_EXTRA_CA_CERTS"] = str(cert)
        return orig(td, scenario, token, env, timeout)

    def request_https(td, method, path, body=b"", headers=None, token=test_envd.TOKEN,
                      timeout=30):
        import http.client
        ctx = ssl.create_default_context(cafile=str(cert))
        c = http.client.HTTPSConnection("localhost", test_envd.port_of(td), timeout=timeout,
                                        context=ctx)
        h = {"X-Access-Token": token} if token else {}
        h.update(headers or {})
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data

    monkeypatch.setattr(test_envd, "start", start_tls)
    monkeypatch.setattr(test_envd, "drive", drive_https)
    monkeypatch.setattr(test_envd, "request", request_https)
    name = {"reconnect": "reconnect_loses_nothing", "users": "users_when_root",
            "quick": "short_programs_end_with_their_own_code"}.get(case, case)
    if case in ("files", "watch_dir"):
        d = tmp_path / "sdk"
        d.mkdir()
        getattr(test_envd, "test_sdk_" + name)(termd_factory, d)
    elif case == "users":
        if os.geteuid() != 0:
            pytest.skip("acting as another user needs termd to be root")
        test_envd.test_sdk_users_when_root(termd_factory, request)
    else:
        getattr(test_envd, "test_sdk_" + name)(termd_factory)
    assert started
    td = started[0]
    td.port = test_envd.port_of(td)
    td.cert = cert
    c = H2(td.port, cert)
    n = metric(td, 'termd_front_connections_total{protocol="h2"}', c, test_envd.TOKEN)
    assert n and n >= 2, n   # the SDK's connection(s) and this one
    c.close()


def _raw_http(sock, path, headers):
    req = "GET %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n" % path
    req += "".join("%s: %s\r\n" % kv for kv in headers.items()) + "\r\n"
    sock.sendall(req.encode())
    data = b""
    while True:
        d = sock.recv(65536)
        if not d:
            break
        data += d
    sock.close()
    head, body = data.split(b"\r\n\r\n", 1)
    return int(head.split(b" ")[1]), body


def test_front_headers_trusted_only_from_the_front(termd_factory, tmp_path):
    """X-Termd-Peer and X-Termd-Tls are the front's: a client's own are
    dropped by the front, and never read on a connection that did not come
    through it (the unix --listen, lws's own). Seen from a preview's program:
    X-Forwarded-For and X-Forwarded-Proto."""
    import test_ports
    extra = free_port()
    td = termd_factory(token="fullsecret", args=["--listen", "127.0.0.1:%d" % extra])
    assert td.url.startswith("unix:")
    ev = td.events(token="fullsecret")
    port, pid = test_ports.echo_server(td, ev)
    spoof = {"Authorization": "Bearer fullsecret", "X-Termd-Peer": "6.6.6.6",
             "X-Termd-Tls": "1"}
    try:
        # through the front (TCP): the client's own are replaced
        s = socket.create_connection(("127.0.0.1", extra), timeout=30)
        status, body = _raw_http(s, "/proxy/%d/x" % port, spoof)
        assert status == 200, body
        hd = json.loads(body)["headers"]
        assert hd["x-forwarded-for"] == "127.0.0.1" and hd["x-forwarded-proto"] == "http", hd
        # lws's own unix socket: nothing the client says is taken as the front's
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(30)
        s.connect(td.url[len("unix:"):])
        status, body = _raw_http(s, "/proxy/%d/x" % port, spoof)
        assert status == 200, body
        hd = json.loads(body)["headers"]
        assert hd.get("x-forwarded-for") != "6.6.6.6" and hd["x-forwarded-proto"] == "http", hd
    finally:
        test_ports.kill(pid)


def _cpu_s(pid):
    """termd's CPU seconds so far, all its threads."""
    f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def test_silent_tls_client_is_dropped_and_no_fd_left_does_not_spin(termd_factory, tmp_path,
                                                                    monkeypatch):
    """A client that never finishes its TLS handshake is closed after 10 s
    while others are served; with no fd left to accept with, the front's
    listener rests instead of spinning, and serves again once fds are back."""
    cert, key = make_cert(tmp_path)
    monkeypatch.setattr(wsclient, "tls_cafile", str(cert))
    td = termd_factory(args=["--tls-cert", str(cert), "--tls-key", str(key)], token=TOKEN,
                       listen="127.0.0.1:%d" % free_port(), scheme="wss")
    port = int(td.url.rsplit(":", 1)[1])
    pid = td.proc.pid
    silent = socket.create_connection(("127.0.0.1", port), timeout=30)
    t0 = time.monotonic()
    assert H2(port, cert).request("GET", "/healthz")[0] == 200
    silent.settimeout(25)
    assert silent.recv(1) == b""   # closed by termd
    assert 8 < time.monotonic() - t0 < 20
    silent.close()
    # no fd left: connections wait in the backlog, termd does not spin
    nfd = len(os.listdir("/proc/%d/fd" % pid))
    lim = [ln.split()[3:5] for ln in open("/proc/%d/limits" % pid) if ln.startswith("Max open files")][0]
    subprocess.run(["prlimit", "--pid", str(pid), "--nofile=%d:" % (nfd + 4)], check=True)
    held = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(12)]
    time.sleep(0.3)
    cpu0, w0 = _cpu_s(pid), time.monotonic()
    deadline = w0 + 2
    while time.monotonic() < deadline:
        time.sleep(0.1)
    used = _cpu_s(pid) - cpu0
    assert used < 0.6 * (time.monotonic() - w0), "termd spun with no fd to accept with: %.2fs" % used
    for s in held:
        s.close()
    subprocess.run(["prlimit", "--pid", str(pid), "--nofile=%s:" % lim[0]], check=True)
    deadline = time.monotonic() + 20
    while True:
        try:
            c = H2(port, cert)
            assert c.request("GET", "/healthz", timeout=10)[0] == 200
            c.close()
            break
        except (OSError, AssertionError, ssl.SSLError):
            assert time.monotonic() < deadline, "the listener did not serve again"
            time.sleep(0.2)


def _read_answer(s, buf):
    """One HTTP/1.1 answer (Content-Length or none) from s: (status, body, rest)."""
    while b"\r\n\r\n" not in buf:
        d = s.recv(65536)
        assert d, "closed before an answer: %r" % buf
        buf += d
    head, rest = buf.split(b"\r\n\r\n", 1)
    n = 0
    for ln in head.split(b"\r\n")[1:]:
        k, v = ln.split(b":", 1)
        if k.strip().lower() == b"content-length":
            n = int(v)
    while len(rest) < n:
        d = s.recv(65536)
        assert d
        rest += d
    return int(head.split(b" ")[1]), rest[:n], rest[n:]


def test_h1_keep_alive_with_sized_and_chunked_bodies(tls_td):
    """HTTP/1.1 through the front: requests one after another on one TLS
    connection (bodies with Content-Length, then a chunked one with a
    trailer) are each found past the one before and answered."""
    td = tls_td
    ctx = ssl.create_default_context(cafile=str(td.cert))
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", td.port), timeout=30),
                        server_hostname="localhost")
    body = json.dumps({"path": str(td.home)}).encode()
    hdr = ("Host: localhost\r\nContent-Type: application/json\r\nX-Access-Token: %s\r\n"
           % TOKEN).encode()
    sized = (b"POST /filesystem.Filesystem/Stat HTTP/1.1\r\n" + hdr +
             b"Content-Length: %d\r\n\r\n" % len(body) + body)
    chunked = (b"POST /filesystem.Filesystem/Stat HTTP/1.1\r\n" + hdr +
               b"Transfer-Encoding: chunked\r\n\r\n" +
               b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 5]), body[i:i + 5])
                        for i in range(0, len(body), 5)) + b"0\r\nX-Trailer: t\r\n\r\n")
    rest = b""
    for req, want in ((sized, 200), (b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n", 204),
                      (sized, 200), (chunked, 200)):
        s.sendall(req)
        status, answer, rest = _read_answer(s, rest)
        assert status == want, (status, answer)
        if want == 200:
            assert json.loads(answer)["entry"]["type"] == "FILE_TYPE_DIRECTORY"
    s.close()
    # pipelined: written in one go, each answered in order (lws itself
    # answers only the first: the front hands it one at a time)
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", td.port), timeout=30),
                        server_hostname="localhost")
    s.sendall(sized + b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n" + sized +
              b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n" + chunked)
    rest = b""
    for want, head in ((200, False), (204, False), (200, False), (200, True), (200, False)):
        status, answer, rest = _read_answer(s, rest)
        assert status == want, (status, answer, rest)
        if head:
            assert json.loads(answer)["ok"] is True
        elif want == 200:
            assert json.loads(answer)["entry"]["type"] == "FILE_TYPE_DIRECTORY"
    s.close()


def test_h1_plain_sized_answer_then_the_next_request_on_the_kept_connection(termd_factory):
    """A plain HTTP/1.1 client's sized answer of lws's own past 64 KiB (the
    web page's xterm.js: all but its first piece spliced through the
    front's pipe, never read into termd) ends by its Content-Length: the
    next request on the kept connection is answered, again and again."""
    td = termd_factory(token=TOKEN, tcp=True)
    port = int(td.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        rest, size = b"", None
        for _ in range(3):
            s.sendall(b"GET /assets/xterm.js HTTP/1.1\r\nHost: localhost\r\n\r\n")
            status, answer, rest = _read_answer(s, rest)
            assert status == 200 and len(answer) > 256 << 10, (status, len(answer))
            assert size in (None, len(answer)) and b"Terminal" in answer
            size = len(answer)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
            status, answer, rest = _read_answer(s, rest)
            assert status == 204, (status, answer)


def test_fast_h2_downloads_never_stall(tls_td):
    """curl (a reader as fast as the front) takes a 64 MiB download over h2
    whole, again and again: the front keeps sending while its output drains
    (it once stopped when its buffer emptied with DATA still to send)."""
    import shutil
    if not shutil.which("curl"):
        pytest.skip("curl is not installed")
    td = tls_td
    big = td.home / "big64.bin"
    with open(big, "wb") as f:
        f.truncate(64 << 20)
    url = "https://localhost:%d/files?path=%s" % (td.port, big)
    for _ in range(20):
        p = subprocess.run(["curl", "-s", "--http2", "--max-time", "20", "--cacert", str(td.cert),
                            "-H", "X-Access-Token: " + TOKEN, "-o", "/dev/null",
                            "-w", "%{http_version} %{http_code} %{size_download}", url],
                           capture_output=True, text=True, timeout=60)
        assert p.stdout == "2 200 %d" % (64 << 20), (p.stdout, p.stderr)


def test_h1_expect_100_continue_is_answered(tls_td):
    """Expect: 100-continue (curl's, for bodies over 1 MiB) gets its 100 from
    the front at once: lws never sends one, and the client waited a second."""
    td = tls_td
    ctx = ssl.create_default_context(cafile=str(td.cert))
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", td.port), timeout=30),
                        server_hostname="localhost")
    body = os.urandom(2 << 20)
    dest = td.home / "expect.bin"
    s.sendall(("POST /files?path=%s HTTP/1.1\r\nHost: localhost\r\nX-Access-Token: %s\r\n"
               "Content-Type: application/octet-stream\r\nContent-Length: %d\r\n"
               "Expect: 100-continue\r\n\r\n" % (dest, TOKEN, len(body))).encode())
    s.settimeout(5)
    got = b""
    while b"\r\n\r\n" not in got:
        d = s.recv(4096)   # a timeout here: no 100 Continue
        assert d
        got += d
    assert got.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), got
    s.settimeout(30)
    s.sendall(body)
    status, answer, _ = _read_answer(s, got[len(b"HTTP/1.1 100 Continue\r\n\r\n"):])
    assert status == 200, answer
    assert dest.read_bytes() == body
    s.close()


def _head_over_h2(c, path, headers):
    """HEAD path over h2: its stream, once ended."""
    sid = c.start("HEAD", path, headers)
    st = c.streams[sid]
    c.wait(lambda: st.ended or st.reset is not None, "answer to HEAD %s" % path, 30)
    return st


@pytest.mark.parametrize("tls", [True, False], ids=["h2", "h2c"])
def test_h2_head_answers_headers_alone_and_the_connection_goes_on(tls, termd_factory, tmp_path,
                                                                  monkeypatch):
    """HEAD over HTTP/2 (TLS with ALPN h2, and h2c): the answer's HEADERS
    carry END_STREAM and no DATA follows (not even an empty one), for
    /healthz (lws sends its body after the head: the front drops it) and for
    a download (a body to the end of lws's connection); the next request on
    the same connection is answered. A front that took HEAD's answer as a
    GET's sent the body as DATA, or never ended the stream."""
    if tls:
        cert, key = make_cert(tmp_path)
        monkeypatch.setattr(wsclient, "tls_cafile", str(cert))
        td = termd_factory(args=["--tls-cert", str(cert), "--tls-key", str(key)], token=TOKEN,
                           listen="127.0.0.1:%d" % free_port(), scheme="wss")
    else:
        cert = None
        td = termd_factory(token=TOKEN, tcp=True)
    port = int(td.url.rsplit(":", 1)[1])
    big = td.home / "head.bin"
    big.write_bytes(os.urandom(300000))
    c = H2(port, cert)
    try:
        for path, hdrs, ctype in (("/healthz", {}, "application/json"),
                                  ("/files?path=%s" % big, ENVD, "application/octet-stream")):
            st = _head_over_h2(c, path, hdrs)
            assert st.reset is None, "HEAD %s: stream reset %r" % (path, st.reset)
            assert st.status == 200, (path, st.status, st.headers)
            assert st.ended_on_headers, "HEAD %s: no END_STREAM on the HEADERS" % path
            assert st.data_frames == 0 and not st.data, (path, st.data_frames, st.data[:100])
            assert st.headers.get("content-type") == ctype, (path, st.headers)
            # the same connection serves the next request
            status, _, body = c.request("GET", "/healthz", timeout=30)
            assert status == 200 and json.loads(body)["ok"] is True
        status, _, body = c.request("GET", "/files?path=%s" % big, ENVD, timeout=30)
        assert status == 200 and body == big.read_bytes()
    finally:
        c.close()


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_idle_http1_connection_is_closed_after_the_head_timeout(tls, termd_factory, tmp_path,
                                                                  monkeypatch):
    """A connection that sends nothing (on a plain listener; over TLS, after
    its handshake) is closed by the front after --head-timeout, and so is
    one that sent part of a head; a client that asks is served meanwhile.
    The front once kept an idle connection open for good."""
    args = ["--head-timeout", "2"]
    if tls:
        cert, key = make_cert(tmp_path)
        monkeypatch.setattr(wsclient, "tls_cafile", str(cert))
        td = termd_factory(args=args + ["--tls-cert", str(cert), "--tls-key", str(key)],
                           token=TOKEN, listen="127.0.0.1:%d" % free_port(), scheme="wss")
        ctx = ssl.create_default_context(cafile=str(cert))
        ctx.set_alpn_protocols(["http/1.1"])
    else:
        td = termd_factory(args=args, token=TOKEN, tcp=True)
    port = int(td.url.rsplit(":", 1)[1])

    def connect():
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        if tls:
            s = ctx.wrap_socket(s, server_hostname="localhost")
            assert s.selected_alpn_protocol() == "http/1.1"
        return s

    idle, partial = connect(), connect()
    try:
        t0 = time.monotonic()
        partial.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n")
        # another client is served while the two wait
        c = connect()
        c.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        status, body, _ = _read_answer(c, b"")
        assert status == 200 and json.loads(body)["ok"] is True
        c.close()
        for s in (idle, partial):
            s.settimeout(30)   # the timeout is 2 s: a loaded machine gets 28 more
            try:
                assert s.recv(1) == b"", "the front answered a connection that sent no head"
            except (ConnectionResetError, ssl.SSLError):
                pass           # closed too
            except socket.timeout:
                raise AssertionError("the front kept a connection without a request head open")
        assert time.monotonic() - t0 > 1, "closed before --head-timeout"
    finally:
        idle.close()
        partial.close()
