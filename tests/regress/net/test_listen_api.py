"""Issue 47 / PROTOCOL.md §12: `--listen ADDR,api=NAME`. Such a listener
serves only API NAME at its root paths (plus GET /healthz), with the front
(the front tells lws which TCP listener a request came on; a client cannot
say it) and without it (a vhost per listener), also after unix:PATH; an
unknown NAME is a startup error; the tags survive an upgrade in place."""

import subprocess

import pytest

import wsclient
from conftest import TERMD_BIN, Termd, base_env
from tdtest import free_port

T = 30.0

# a path of each API that answers 200 without a token on a listener serving it
PROBES = {
    "termd": ("/metrics",),
    "openhands": ("/alive", "/server_info", "/ready"),
    "e2b": ("/envs",),
}


def get(url, path, headers=None):
    status, _, body = wsclient.http_request(url, path, headers=headers, timeout=T)
    return status, body


def events_upgrade(url):
    """The /events channel's handshake status (101 when it opened)."""
    try:
        ws = wsclient.connect(url, "/events", timeout=T)
    except wsclient.HandshakeError as e:
        return e.status
    ws.abort()
    return 101


def check_serves(url, api):
    """url's listener serves API api alone (None: the default three)."""
    assert get(url, "/healthz")[0] == 200
    for name, paths in PROBES.items():
        for p in paths:
            st, body = get(url, p)
            if api == "swerex" and p == "/":   # SWE-ReX's own root (issue 48), not the web page
                assert (st, body) == (200, b'{"message":"hello world"}')
                continue
            want = 200 if api is None or api == name else 404
            if api == "agent-sandbox" and p == "/":
                want = 200   # its own GET / (the runtime's probe, test_agent_sandbox.py)
            assert st == want, "%s %s on api=%s: %s %r" % (name, p, api, st, body[:200])
    want = 101 if api in (None, "termd") else 404
    assert events_upgrade(url) == want


def start_with(termd_factory, apis, front=True):
    """A termd on its unix socket (no suffix) and one loopback listener per
    API in apis; returns (termd, {api: url})."""
    args, urls = [], {}
    for a in apis:
        port = free_port()
        args += ["--listen", "127.0.0.1:%d,api=%s" % (port, a)]
        urls[a] = "ws://127.0.0.1:%d" % port
    if not front:
        args += ["--front", "off"]
    return termd_factory(args=args), urls


@pytest.mark.parametrize("front", [True, False], ids=["front", "no-front"])
def test_each_listener_serves_its_api_alone(termd_factory, front):
    td, urls = start_with(termd_factory, ["termd", "openhands", "e2b", "swerex", "agent-sandbox"],
                          front)
    check_serves(td.url, None)
    for api in ("termd", "openhands", "e2b"):
        check_serves(urls[api], api)
    # swerex: SWE-ReX's routes (test_swerex.py); agent-sandbox: its own
    # (test_agent_sandbox.py)
    for api in ("swerex", "agent-sandbox"):
        check_serves(urls[api], api)


def test_client_cannot_claim_another_api(termd_factory):
    """X-Termd-Api is the front's: a client's own is dropped."""
    td, urls = start_with(termd_factory, ["openhands"])
    st, _ = get(urls["openhands"], "/metrics", headers={"X-Termd-Api": "1"})
    assert st == 404
    st, _ = get(urls["openhands"], "/alive", headers={"X-Termd-Api": "1"})
    assert st == 200


def test_unix_listener_with_api(tmp_path):
    td = Termd(tmp_path / "u")
    td.argv[td.argv.index("--listen") + 1] = td.url + ",api=openhands"
    try:
        td.start()
        check_serves(td.url, "openhands")
    finally:
        problem = td.stop()
    assert problem is None, problem


@pytest.mark.parametrize("arg", ["127.0.0.1:%d,api=jupyter", "127.0.0.1:%d,api=",
                                 "unix:/tmp/x.sock,api=OpenHands"])
def test_unknown_api_is_a_startup_error(tmp_path, arg):
    if "%d" in arg:
        arg = arg % free_port()
    env = base_env(tmp_path)
    r = subprocess.run([TERMD_BIN, "--listen", arg], capture_output=True, text=True, timeout=T,
                       env=env, stdin=subprocess.DEVNULL)
    assert r.returncode != 0
    assert "unknown API" in r.stderr and "openhands" in r.stderr, r.stderr


def test_none_takes_no_api(tmp_path):
    r = subprocess.run([TERMD_BIN, "--listen", "none,api=termd"], capture_output=True, text=True,
                       timeout=T, env=base_env(tmp_path), stdin=subprocess.DEVNULL)
    assert r.returncode != 0 and "--listen" in r.stderr, r.stderr


@pytest.mark.parametrize("front", [True, False], ids=["front", "no-front"])
def test_api_tags_survive_an_upgrade_in_place(termd_factory, front):
    from test_upgrade import upgrade
    td, urls = start_with(termd_factory, ["openhands", "e2b"], front)
    ev = td.events()
    code, ev2, ans = upgrade(td, ev, cid="up-api")
    assert ans["extras"]["ok"] is True, ans
    check_serves(urls["openhands"], "openhands")
    check_serves(urls["e2b"], "e2b")
    check_serves(td.url, None)
    ev2.close()

