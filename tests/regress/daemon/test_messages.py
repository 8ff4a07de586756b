"""Issue 34 items 7, 8 and 10 (versions): every program says its version and
the contract's (-V, --version) and its usage (-h, --help); a wrong option is
one line naming it; messages say what to do (a port in use names --listen, a
wrong token names --token-file / TERMD_TOKEN, busy says how to go on, a
top-level argument names args.<name>, a misspelt plugin lists the plugins,
od-attach --speed without --replay is refused, a run creating a session says
so; wss:// to a plain listener says it is plain, an untrusted certificate
names --cacert / cacert=, in termctl, od-attach and the Python client; a
wrong link token is said plainly, naming --connect-token-file)."""

import os
import socket
import subprocess
from pathlib import Path

import pytest

import conftest
import tdtest

REPO = Path(__file__).resolve().parents[3]
OD_ATTACH_BIN = os.environ.get("OD_ATTACH_BIN") or str(REPO / "build" / "od-attach")
PROGRAMS = {"termd": conftest.TERMD_BIN, "termctl": conftest.TERMCTL_BIN, "od-attach": OD_ATTACH_BIN}


def prog(name, *args):
    return subprocess.run([PROGRAMS[name]] + list(args), capture_output=True, text=True, timeout=30,
                          stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_version_names_the_contract(name, flag):
    r = prog(name, flag)
    assert r.returncode == 0, r
    assert r.stdout.startswith(name + " ") and "contract 1.4" in r.stdout, r


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help(name, flag):
    r = prog(name, flag)
    assert r.returncode == 0 and "usage" in r.stdout, r


def test_a_wrong_termd_option_is_one_line_naming_it():
    for args, names in ((["--port", "5"], "--port"), (["--listen"], "--listen"), (["-x"], "-x")):
        r = prog("termd", *args)
        assert r.returncode == 2, r
        lines = r.stderr.strip().split("\n")
        assert len(lines) == 1 and names in lines[0] and "--help" in lines[0], r.stderr


def test_a_port_in_use_is_an_error_naming_listen(tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    try:
        port = s.getsockname()[1]
        env = conftest.base_env(tmp_path)
        r = subprocess.run([conftest.TERMD_BIN, "--listen", "127.0.0.1:%d" % port], env=env,
                           capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    finally:
        s.close()
    assert r.returncode != 0, r
    assert "error:" in r.stderr and "--listen 127.0.0.1:%d" % port in r.stderr, r.stderr
    assert "warning" not in r.stderr, r.stderr


def test_a_wrong_token_names_the_options(termd_factory):
    t = termd_factory(token="right-token")
    for env in ({"TERMD_TOKEN": "wrong"}, {}):
        r = t.termctl("ping", env=env)
        assert r.returncode == 2, r
        assert "wrong or missing token (--token-file / TERMD_TOKEN)" in r.stderr, r.stderr


def test_busy_says_how_to_go_on(termd):
    ev = termd.events()
    obs = tdtest.run_obs(ev, "sleep 30", timeout=0.5)
    assert obs["extras"]["running"] is True
    obs = tdtest.run(ev, "echo other")
    tdtest.assert_error(obs, "busy")
    msg = obs["content"]
    assert "empty run" in msg and "is_input" in msg and "C-c" in msg, msg
    tdtest.run_obs(ev, "C-c", is_input=True)


def test_a_top_level_argument_names_args(termd):
    r = termd.termctl("raw", '{"action":"run","command":"echo hi","id":"x"}')
    assert "args.command" in r.stdout + r.stderr, r


def test_a_misspelt_plugin_lists_the_plugins(tmp_path):
    env = conftest.base_env(tmp_path)
    plugdir = tmp_path / "plugins"
    for name in ("alpha", "beta"):
        (plugdir / name).mkdir(parents=True)
        (plugdir / name / "plugin.json").write_text(
            '{"name": "%s", "command": ["true"], "actions": ["%s.x"]}' % (name, name))
    r = subprocess.run([conftest.TERMD_BIN, "--listen", "unix:%s/s.sock" % tmp_path, "--plugins", "alphaa",
                        "--plugin-dir", str(plugdir), "--state-dir", str(tmp_path / "st")], env=env,
                       capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert r.returncode != 0, r
    assert "'alphaa'" in r.stderr and "alpha, beta" in r.stderr, r.stderr


@pytest.mark.parametrize("opt", ["--speed", "--idle-limit"])
def test_od_attach_replay_options_without_replay(opt):
    r = prog("od-attach", opt, "2")
    assert r.returncode == 2 and opt + " goes with --replay" in r.stderr, r


def test_a_run_that_creates_its_session_says_so(termd):
    ev = termd.events()
    obs = tdtest.run_done(ev, "echo a", session="typo")
    assert obs["extras"].get("created") is True, tdtest.fmt(obs)
    obs = tdtest.run_done(ev, "echo b", session="typo")
    assert "created" not in obs["extras"], tdtest.fmt(obs)
    obs = tdtest.run_done(ev, "echo c")
    assert "created" not in obs["extras"], tdtest.fmt(obs)
    r = termd.termctl("run", "-s", "typo2", "echo x")
    assert r.returncode == 0 and "typo2" in r.stderr and "created" in r.stderr, r


def test_options_from_the_environment(tmp_path):
    """TERMD_<OPTION> sets any option (the command line wins); the sessions
    do not inherit them; a flag's bad value is refused."""
    import tempfile
    import time
    import wsclient
    sockdir = tempfile.mkdtemp(prefix="td-", dir="/tmp")
    sock = os.path.join(sockdir, "s.sock")
    rec = tmp_path / "rec"
    rec.mkdir(mode=0o700)
    home = tmp_path / "home"
    home.mkdir()
    env = conftest.base_env(home)
    env.update({"TERMD_LISTEN": "unix:" + sock, "TERMD_RECORD": str(rec), "TERMD_RECORD_INPUT": "yes",
                "TERMD_CWD": str(home), "TERMD_MAX_SESSIONS": "1"})
    log = open(tmp_path / "termd.log", "wb")
    p = subprocess.Popen([conftest.TERMD_BIN, "--max-sessions=2"], env=env, stdout=log,
                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        tdtest.wait_until(lambda: p.poll() is not None or os.path.exists(sock), what="the socket")
        assert p.poll() is None, (tmp_path / "termd.log").read_text()
        ev = wsclient.Events("unix:" + sock)
        obs = tdtest.run_done(ev, "echo ${TERMD_LISTEN-unset} ${TERMD_RECORD-unset}; pwd")
        assert tdtest.content(obs) == "unset unset\n%s" % home, tdtest.fmt(obs)
        # --max-sessions 2 on the command line beat TERMD_MAX_SESSIONS=1
        obs = tdtest.run_done(ev, "echo two", session="second")
        assert tdtest.content(obs) == "two", tdtest.fmt(obs)
        tdtest.wait_until(lambda: any(f.name.endswith(".cast") for f in rec.iterdir()), what="a recording")
        cast = "".join(f.read_text() for f in rec.iterdir() if f.name.startswith("main"))
        assert '"i"' in cast, cast[-500:]   # --record-input from TERMD_RECORD_INPUT=yes
        ev.ws.abort()
    finally:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)
        try:
            os.killpg(p.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
        log.close()
        import shutil
        shutil.rmtree(sockdir, ignore_errors=True)
    bad = dict(env, TERMD_RECORD_INPUT="maybe")
    r = subprocess.run([conftest.TERMD_BIN], env=bad, capture_output=True, text=True, timeout=30,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and "TERMD_RECORD_INPUT=maybe" in r.stderr, r


def test_the_command_line_replaces_an_options_environment_value(termd_factory):
    """--listen given: TERMD_LISTEN is not a second address (it would fail
    here), and the sessions do not see it."""
    t = termd_factory(env={"TERMD_LISTEN": "unix:/nonexistent/dir/x.sock"})
    ev = t.events()
    obs = tdtest.run_done(ev, "echo ${TERMD_LISTEN-unset}")
    assert tdtest.content(obs) == "unset", tdtest.fmt(obs)


# ---------------------------------------------------------------- TLS and links (item 7)

def _od_attach_on_a_pty(url, *args, env=None):
    """od-attach with a terminal (it needs one) that fails before drawing:
    (status, stderr)."""
    import pty
    master, slave = pty.openpty()
    e = dict(conftest.base_env(Path("/")), TERMD_URL=url, TERM="xterm-256color")
    e.pop("TERMD_TOKEN", None)
    e.update(env or {})
    try:
        r = subprocess.run([OD_ATTACH_BIN] + list(args), stdin=slave, stdout=slave,
                           stderr=subprocess.PIPE, text=True, env=e, timeout=30)
    finally:
        os.close(slave)
        os.close(master)
    return r.returncode, r.stderr


def _python_client_error(url, **kw):
    import termd as termd_client
    with pytest.raises(termd_client.TermdConnectionError) as ei:
        termd_client.Termd(url, retry_for=20, **kw)
    return str(ei.value)


def _tls_termd(termd_factory, tmp_path):
    from test_tls import make_cert
    cert, key = make_cert(tmp_path)
    port = tdtest.free_port()
    t = termd_factory(args=["--tls-cert", str(cert), "--tls-key", str(key)],
                      listen="127.0.0.1:%d" % port, scheme="wss")
    return t, "wss://127.0.0.1:%d" % port, cert


def test_wss_to_a_plain_listener_says_it_is_plain(termd_factory):
    import time
    port = tdtest.free_port()
    termd_factory(listen="127.0.0.1:%d" % port)
    wss, ws = "wss://127.0.0.1:%d" % port, "ws://127.0.0.1:%d" % port
    hint = "answered without TLS (a plain listener): use %s, or start termd with --tls-cert" % ws
    r = subprocess.run([conftest.TERMCTL_BIN, "--url", wss, "ping"], capture_output=True, text=True,
                       timeout=30, stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and hint in r.stderr, r
    assert "wrong version number" not in r.stderr, r.stderr
    rc, err = _od_attach_on_a_pty(wss)
    assert rc != 0 and hint in err, (rc, err)
    t0 = time.monotonic()
    msg = _python_client_error(wss)
    assert hint in msg and "WRONG_VERSION" not in msg, msg
    assert time.monotonic() - t0 < 10, "a plain listener is not a reason to retry for 20 s"


def test_a_self_signed_certificate_names_cacert(termd_factory, tmp_path):
    import shutil
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make a certificate")
    t, url, cert = _tls_termd(termd_factory, tmp_path)
    r = subprocess.run([conftest.TERMCTL_BIN, "--url", url, "ping"], capture_output=True, text=True,
                       timeout=30, stdin=subprocess.DEVNULL,
                       env={k: v for k, v in os.environ.items() if not k.startswith("TERMD_")})
    assert r.returncode == 2, r
    assert "self-signed certificate" in r.stderr and "--cacert FILE (env TERMD_CACERT)" in r.stderr, r.stderr
    rc, err = _od_attach_on_a_pty(url)
    assert rc != 0 and "--cacert FILE" in err, (rc, err)
    msg = _python_client_error(url)
    assert "self-signed certificate" in msg and "cacert=FILE" in msg, msg
    # with it, all three get in
    r = subprocess.run([conftest.TERMCTL_BIN, "--url", url, "--cacert", str(cert), "ping"],
                       capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r


def test_a_wrong_link_token_is_said_plainly(termd_factory, tmp_path):
    import time
    port = tdtest.free_port()
    good, bad = tmp_path / "good.token", tmp_path / "bad.token"
    good.write_text("the-link-token\n")
    bad.write_text("not-the-link-token\n")
    blog = open(tmp_path / "backend.log", "wb")
    be = subprocess.Popen(["/usr/bin/python3", str(REPO / "share/examples/link_backend.py"),
                           "--listen", "127.0.0.1:%d" % port, "--link-token-file", str(good)],
                          stdout=blog, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        t = termd_factory(args=["--connect", "ws://127.0.0.1:%d/termd" % port,
                                "--connect-token-file", str(bad), "--connect-backoff", "0.1:0.5"])
        want = "the backend refused this termd's credential with HTTP 401: check --connect-token-file"
        deadline = time.monotonic() + 30
        while want not in t.log.read_text(errors="replace"):
            assert time.monotonic() < deadline, t.log.read_text(errors="replace")
            time.sleep(0.05)
        assert "HS:" not in t.log.read_text(errors="replace")
    finally:
        be.terminate()
        be.wait(10)
        blog.close()


def test_a_shell_up_but_not_reading_is_not_called_starting(termd, tmp_path):
    """issue 51: after a fork bomb a run was labelled shell_starting for
    19.6 s while the shell was up: its prompt (PS1's $(...), retrying fork
    at the pids limit) kept its line editor from reading, and every queued
    run was called a shell still starting, for as long as since its spawn.
    Here a PROMPT_COMMAND after termd's mark holds the prompt the same
    way: the answer says the shell is up and not reading yet, since its
    prompt, and what it runs."""
    ev = termd.events()
    gate = tmp_path / "gate"
    o = tdtest.run_done(ev, "PROMPT_COMMAND+=('while [ ! -e %s ]; do sleep 0.1; done')" % gate)
    try:
        o = ev.call("run", {"command": "echo after-$((50+1))", "timeout": 1}, timeout=60)
        x = o["extras"]
        assert x["running"] is True and x["timed_out"] == "hard", o
        assert "shell_starting" not in x, o
        nr = x.get("shell_not_reading")
        assert nr and nr["queued"] is True and nr["running"].startswith("sleep"), o
        assert nr["for_ms"] < x["duration_ms"] + 5000, o     # since its prompt, not its spawn
    finally:
        gate.touch()
    o = ev.call("run", {"command": "", "timeout": 30}, timeout=60)
    assert "after-51" in o["content"], o
