"""Access: the read-only view token on /events (PROTOCOL.md section 1)
admits subscribe, session.list, screen and ping only; every other action is
answered `forbidden` and nothing is carried out. The unix socket is private
(0600), and --listen unix: replaces a stale socket but never a file. A
loopback TCP listener is bound to loopback only."""
import os
import socket
import stat
import subprocess

import pytest

import tdtest
import wsclient
from conftest import TERMCTL_BIN, TERMD_BIN, base_env
from tdtest import assert_error


def start(termd_factory, tmp_path):
    vt = tmp_path / "view"
    vt.write_text("viewsecret\n")
    return termd_factory(args=("--view-token-file", str(vt)), token="fullsecret")


def test_view_token_may_watch(termd_factory, tmp_path):
    t = start(termd_factory, tmp_path)
    ro = t.events(token="viewsecret")
    assert ro.call("ping", {})["observation"] == "pong"
    assert ro.call("screen", {})["observation"] == "screen"
    assert ro.call("subscribe", {})["observation"] == "subscribe"
    names = [s["name"] for s in ro.call("session.list", {})["extras"]["sessions"]]
    assert "main" in names


def test_view_token_cannot_act(termd_factory, tmp_path):
    t = start(termd_factory, tmp_path)
    ro = t.events(token="viewsecret")
    marker = tmp_path / "must-not-exist"
    forbidden = [
        ("run", {"command": "touch %s" % marker}),
        ("run", {"command": "touch %s" % marker, "session": "other"}),
        ("keys", {"keys": ["touch %s" % marker, "Enter"]}),
        ("expect", {"pattern": "x", "timeout": 1}),
        ("session.open", {"name": "ro-opened"}),
        ("session.signal", {"signal": "INT"}),
        ("session.close", {"name": "main"}),
        ("write", {"path": str(marker), "content": "x"}),
        ("edit", {"command": "create", "path": str(marker), "file_text": "x"}),
        ("read", {"path": "/etc/hostname"}),
        ("plugin.list", {}),
        ("session.stdin", {"content": "touch %s\r" % marker}),
        ("file.stat", {"path": "/etc/hostname"}),
        ("file.list", {"path": "/"}),
        ("file.mkdir", {"path": str(marker)}),
        ("file.move", {"source": "/etc/hostname", "destination": str(marker)}),
        ("file.remove", {"path": str(tmp_path)}),
        ("watch", {"path": str(tmp_path)}),
        ("watch.stop", {"watch": "watch-1"}),
        ("watch.list", {}),
        ("port.wait", {"port": 1, "timeout": 0}),
        ("termd.upgrade", {"binary": "/bin/false"}),
    ]
    for action, args in forbidden:
        assert_error(ro.call(action, args), "forbidden")
    # every action termd offers is either allowed to a viewer or tested here
    offered = set(ro.hello["extras"]["actions"])
    allowed = {"ping", "screen", "subscribe", "session.list", "ports.list"}
    assert offered - allowed == {a for a, _ in forbidden}, offered
    full = t.events(token="fullsecret")
    tdtest.run_done(full, "true")   # anything typed would have run by now
    assert not os.path.exists(marker)
    names = [s["name"] for s in full.call("session.list", {})["extras"]["sessions"]]
    assert names == ["main"]        # neither "other" nor "ro-opened" appeared


def test_unix_socket_is_private(termd_factory):
    # created 0600 whatever the umask termd inherited
    old = os.umask(0)
    try:
        t = termd_factory()
    finally:
        os.umask(old)
    st = os.stat(t.sock)
    assert stat.S_ISSOCK(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o600, oct(st.st_mode)


def test_unix_listen_never_replaces_a_file(tmp_path):
    victim = tmp_path / "important.txt"
    victim.write_text("keep me\n")
    home = tmp_path / "home"
    home.mkdir()
    p = subprocess.run([TERMD_BIN, "--listen", "unix:%s" % victim, "--cwd", str(home)],
                       env=base_env(home), capture_output=True, text=True, timeout=30,
                       stdin=subprocess.DEVNULL)
    assert p.returncode > 0, (p.returncode, p.stderr)
    assert "not a socket" in p.stderr
    assert victim.read_text() == "keep me\n"


def test_unix_listen_replaces_a_stale_socket(tmp_path):
    # a socket file left by a termd that was killed
    path = "/tmp/td-stale-%d.sock" % os.getpid()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.close()
    home = tmp_path / "home"
    home.mkdir()
    p = subprocess.Popen([TERMD_BIN, "--listen", "unix:" + path, "--cwd", str(home)],
                         env=base_env(home), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        def healthy():
            try:
                return wsclient.http_request("unix:" + path, "/healthz", timeout=2)[0] == 200
            except OSError:
                return False
        tdtest.wait_until(healthy, timeout=30, what="termd on the stale socket's path")
    finally:
        p.terminate()
        rc = p.wait(15)
        try:
            os.killpg(p.pid, 9)
        except OSError:
            pass
    assert rc == 0
    assert not os.path.exists(path), "termd left its socket behind"


def test_token_not_in_session_environment(termd_factory):
    t = termd_factory(token="envsecret")
    ev = t.events(token="envsecret")
    obs = tdtest.run_done(ev, 'echo "[${TERMD_TOKEN-unset}]"; env | grep -c envsecret', exit_code=1)
    assert tdtest.content(obs) == "[unset]\n0", tdtest.fmt(obs)
    # nor in a session opened later, with a program of its own
    o = ev.call("session.open", {"name": "job", "command": "env > %s/job-env; sleep 60" % t.home})
    assert o["observation"] == "session.open"
    tdtest.wait_until(lambda: (t.home / "job-env").exists() and (t.home / "job-env").stat().st_size,
                      what="the job's environment dump")
    assert "envsecret" not in (t.home / "job-env").read_text()


def _listeners(port):
    """Local addresses (hex, as in /proc/net/tcp*) listening on port."""
    found = []
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = open(f).read().splitlines()[1:]
        except OSError:
            continue
        for r in rows:
            cols = r.split()
            addr, p = cols[1].split(":")
            if int(p, 16) == port and cols[3] == "0A":
                found.append(addr)
    return found


@pytest.mark.parametrize("host,want", [("127.0.0.1", ["0100007F"]), ("localhost", ["0100007F"]),
                                       ("[::1]", ["00000000000000000000000001000000"])])
def test_loopback_listen_binds_loopback_only(termd_factory, host, want):
    # lws, given an IPv4 address, used to open a dual-stack socket on every
    # interface: termd "on 127.0.0.1" answered from the network
    port = tdtest.free_port()
    t = termd_factory(listen="%s:%d" % (host, port))
    assert t.events().ping()["observation"] == "pong"
    assert _listeners(port) == want


def test_listen_port_in_use_is_refused(tmp_path):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    port = s.getsockname()[1]
    home = tmp_path / "home"
    home.mkdir()
    try:
        p = subprocess.run([TERMD_BIN, "--listen", "127.0.0.1:%d" % port, "--cwd", str(home)],
                           env=base_env(home), capture_output=True, text=True, timeout=30,
                           stdin=subprocess.DEVNULL)
    finally:
        s.close()
    assert p.returncode > 0, (p.returncode, p.stderr)
    assert "cannot listen" in p.stderr and str(port) in p.stderr, p.stderr


# One rule for a token file, in termd and in its clients (proto/url.c,
# README "Tokens"): the first line, whitespace trimmed at both ends.
@pytest.mark.parametrize("content", [
    "tok-9f3a\n",
    "tok-9f3a\nsecond line\n",
    "  tok-9f3a \t\r\n",
    "\ttok-9f3a\r\n\n# notes\n",
], ids=["trailing-newline", "second-line", "surrounding-spaces-crlf", "tab-then-more-lines"])
def test_token_file_reads_the_same_in_termd_and_termctl(termd_factory, tmp_path, content):
    full = tmp_path / "full"
    full.write_bytes(content.encode())
    view = tmp_path / "view"
    view.write_bytes(content.replace("tok-", "view-").encode())
    t = termd_factory(args=("--token-file", str(full), "--view-token-file", str(view)))
    # termctl with the same files gets in, as full and as view client
    p = t.termctl("--token-file", full, "run", "echo full-in")
    assert p.returncode == 0 and p.stdout == "full-in\n", (p.returncode, p.stdout, p.stderr)
    p = t.termctl("--token-file", view, "ping")
    assert p.returncode == 0 and p.stdout == "pong\n", (p.returncode, p.stdout, p.stderr)
    p = t.termctl("--token-file", view, "run", "echo view-in")
    assert p.returncode == 2 and "forbidden" in p.stderr, (p.returncode, p.stdout, p.stderr)
    # the token termd took is exactly the trimmed first line
    assert t.events(token="tok-9f3a").ping()["observation"] == "pong"
    for wrong in (" tok-9f3a", "tok-9f3a ", "tok-9f3"):
        p = t.termctl("--token", wrong, "ping")
        assert p.returncode == 2 and "401" in p.stderr, (wrong, p.returncode, p.stderr)


def test_token_file_with_an_empty_first_line_is_refused_by_both(tmp_path):
    f = tmp_path / "tok"
    f.write_text("\nsecret-on-line-two\n")
    home = tmp_path / "home"
    home.mkdir()
    sock = "/tmp/td-emptytok-%d.sock" % os.getpid()
    p = subprocess.run([TERMD_BIN, "--listen", "unix:" + sock, "--cwd", str(home), "--token-file",
                        str(f)], env=base_env(home), capture_output=True, text=True, timeout=30,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "token file %s: empty" % f in p.stderr, p.stderr
    assert not os.path.exists(sock)
    p = subprocess.run([TERMCTL_BIN, "--url", "unix:" + sock, "--token-file", str(f), "ping"],
                       env=base_env(home), capture_output=True, text=True, timeout=30,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "token file %s: empty" % f in p.stderr, p.stderr


def test_token_with_plus_in_the_query(termd_factory):
    """issue 51: a token with + / = (base64's) in ?token=: percent-encoded
    it is admitted everywhere; raw, its + reads as a space and the refusal
    says to percent-encode it."""
    import urllib.parse
    tok = "ab+c/d=e="
    t = termd_factory(token=tok, tcp=True)
    enc = urllib.parse.quote(tok, safe="")
    st, _, body = wsclient.http_request(t.url, "/metrics?token=" + enc)
    assert st == 200, (st, body)
    st, _, body = wsclient.http_request(t.url, "/proxy/1/?token=" + enc)
    assert st == 404, (st, body)                      # admitted: no such port
    ev = wsclient.Events(t.url, token=None, path="/events?token=" + enc)
    assert ev.call("ping", {})["observation"] == "pong"
    ev.close()
    for path in ("/proxy/1/?token=" + tok, "/metrics?token=" + tok):
        st, _, body = wsclient.http_request(t.url, path)
        body = body.decode() if isinstance(body, bytes) else body
        assert st == 401 and "percent-encode" in body and "%2B" in body, (path, st, body)
    st, _, body = wsclient.http_request(t.url, "/metrics?token=wrong")
    assert st == 401 and b"percent" not in body, body   # no hint for a plainly wrong one
