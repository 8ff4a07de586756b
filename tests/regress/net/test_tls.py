"""Optional TLS (--tls-cert, --tls-key): wss:// and https:// with a
self-signed certificate made here with the openssl command; the token rules
hold over TLS; plain text is not served on a TLS listener; bad certificate
options are refused at start-up."""
import json
import os
import shutil
import subprocess

import pytest

import wsclient
from conftest import TERMD_BIN, base_env
from tdtest import content, free_port, make_cert, run_done

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None,
                                reason="the openssl command is needed to make a certificate")


@pytest.fixture
def tls_termd(termd_factory, tmp_path, monkeypatch):
    cert, key = make_cert(tmp_path)
    # the client verifies termd's certificate against the one made here
    monkeypatch.setattr(wsclient, "tls_cafile", str(cert))
    return termd_factory(args=["--tls-cert", str(cert), "--tls-key", str(key)], token="tlssecret",
                         listen="127.0.0.1:%d" % free_port(), scheme="wss")


def test_wss_events_and_https_healthz(tls_termd):
    t = tls_termd
    status, _, body = wsclient.http_request(t.url.replace("wss://", "https://"), "/healthz")
    assert status == 200 and json.loads(body)["ok"] is True
    ev = t.events(token="tlssecret")
    assert ev.ping()["observation"] == "pong"
    assert content(run_done(ev, "echo over-tls")) == "over-tls"


def test_token_still_required_over_tls(tls_termd):
    t = tls_termd
    with pytest.raises(wsclient.HandshakeError) as e:
        wsclient.connect(t.url, "/events", wsclient.EVENTS_SUBPROTOCOL)
    assert e.value.status == 401
    with pytest.raises(wsclient.HandshakeError) as e:
        wsclient.connect(t.url, "/events", wsclient.EVENTS_SUBPROTOCOL, token="wrong")
    assert e.value.status == 401


def test_tty_over_tls(tls_termd):
    ws = wsclient.connect(tls_termd.url, "/tty/main", wsclient.TTY_SUBPROTOCOL, token="tlssecret")
    op, payload = ws.recv(10)
    assert op == wsclient.OP_BINARY and payload[:1] == b"Z"
    ws.abort()


def test_plain_text_is_not_served_on_a_tls_listener(tls_termd):
    plain = tls_termd.url.replace("wss://", "ws://")
    # a plain WebSocket handshake must never be upgraded
    try:
        ws = wsclient.connect(plain, "/events", wsclient.EVENTS_SUBPROTOCOL, token="tlssecret",
                              timeout=5)
    except (wsclient.HandshakeError, OSError, wsclient.WSError, ValueError, TimeoutError):
        pass
    else:
        ws.abort()
        pytest.fail("a plain-text client was upgraded on the TLS listener")
    # and the listener still serves TLS afterwards
    assert tls_termd.events(token="tlssecret").ping()["observation"] == "pong"


def _start_fails(tmp_path, *extra, lws_leaks=False):
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = base_env(home)
    if lws_leaks:
        # libwebsockets 4.1.6 leaks 72 bytes of its own when it rejects a
        # certificate and the context fails; LeakSanitizer would report it
        env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":detect_leaks=0").lstrip(":")
    p = subprocess.run([TERMD_BIN, "--listen", "127.0.0.1:%d" % free_port(), "--cwd", str(home)]
                       + [str(x) for x in extra], env=env, capture_output=True,
                       text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert p.returncode != 0 and p.returncode > 0, (p.returncode, p.stderr)
    assert p.stderr.strip()
    return p.stderr


def test_cert_without_key_is_refused(tmp_path):
    cert, _ = make_cert(tmp_path)
    assert "--tls-key" in _start_fails(tmp_path, "--tls-cert", cert)


def test_unreadable_cert_is_refused(tmp_path):
    err = _start_fails(tmp_path, "--tls-cert", tmp_path / "nope.pem", "--tls-key", tmp_path / "nope.key")
    assert "nope.pem" in err


def test_garbage_cert_is_refused(tmp_path):
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate\n")
    err = _start_fails(tmp_path, "--tls-cert", bad, "--tls-key", bad, lws_leaks=True)
    assert "TLS" in err or "certificate" in err


# ------------------------------------------------- the C clients over wss://

def _tls_env(**extra):
    env = {"TERMD_TOKEN": "tlssecret"}
    env.update(extra)
    return env


def test_termctl_run_over_wss_with_cacert(tls_termd, tmp_path):
    cert = str(tmp_path / "cert.pem")
    p = tls_termd.termctl("run", "echo termctl-over-wss && (exit 3)",
                          env=_tls_env(TERMD_CACERT=cert))
    assert p.returncode == 3, (p.returncode, p.stdout, p.stderr)
    assert p.stdout.strip() == "termctl-over-wss", p.stdout
    # --cacert does the same; and the host name "localhost" is checked too
    url = tls_termd.url.replace("127.0.0.1", "localhost")
    p = tls_termd.termctl("--url", url, "--cacert", cert, "run", "seq 1 20000 | tail -n 1",
                          env=_tls_env())
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    assert p.stdout.strip() == "20000", p.stdout


def test_termctl_refuses_an_unverified_certificate(tls_termd, tmp_path):
    p = tls_termd.termctl("run", "echo must-not-run", env=_tls_env())
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "certificate verify failed" in p.stderr, p.stderr
    assert "self-signed" in p.stderr or "self signed" in p.stderr, p.stderr
    assert "must-not-run" not in p.stdout
    # a CA file that does not exist is an error, not a fallback to no check
    p = tls_termd.termctl("ping", env=_tls_env(TERMD_CACERT=str(tmp_path / "nope.pem")))
    assert p.returncode == 2 and "nope.pem" in p.stderr, (p.returncode, p.stderr)


def test_termctl_checks_the_certificate_names_the_address(termd_factory, tmp_path, monkeypatch):
    # a certificate for another name, trusted, but not for 127.0.0.1
    cert, key = tmp_path / "other.pem", tmp_path / "other.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=other.example", "-addext", "subjectAltName=DNS:other.example",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    monkeypatch.setattr(wsclient, "tls_cafile", None)   # the start-up probe does not verify
    t = termd_factory(args=["--tls-cert", str(cert), "--tls-key", str(key)], token="tlssecret",
                      listen="127.0.0.1:%d" % free_port(), scheme="wss")
    p = t.termctl("ping", env=_tls_env(TERMD_CACERT=str(cert)))
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "certificate verify failed" in p.stderr and "mismatch" in p.stderr, p.stderr


def test_termctl_insecure_skips_verification(tls_termd, tmp_path):
    p = tls_termd.termctl("run", "echo insecure-ok", env=_tls_env(TERMD_TLS_INSECURE="1"))
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    assert p.stdout.strip() == "insecure-ok", p.stdout


def test_od_attach_over_wss(tls_termd, tmp_path):
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    from test_od_attach import OD_ATTACH_BIN, Viewer, attached, output_line
    if not os.access(OD_ATTACH_BIN, os.X_OK):
        pytest.fail("od-attach not found at %s (set OD_ATTACH_BIN)" % OD_ATTACH_BIN)
    cert = str(tmp_path / "cert.pem")
    v = Viewer(tls_termd.url, ("--cacert", cert), env={"TERMD_TOKEN": "tlssecret"})
    reports = ""
    try:
        attached(v)
        # a burst larger than one TLS record, then a last line: all of it
        # must be drawn without more bytes arriving to wake the viewer
        p = tls_termd.termctl("run", "seq 1 30000; echo wss-last-line",
                              env=_tls_env(TERMD_CACERT=cert))
        assert p.returncode == 0, (p.returncode, p.stderr)
        v.wait(lambda t: output_line(t, "wss-last-line"), what="the last line")
        # the status line comes over the second (events) connection
        v.wait(lambda t: "last exit 0" in t, what="the last exit code")
    finally:
        reports = v.kill()
    assert not reports, reports
