"""Issue 34 items 7, 8 and 10 (versions): every program says its version and
the contract's (-V, --version) and its usage (-h, --help); a wrong option is
one line naming it; messages say what to do (a port in use names --listen, a
wrong token names --token-file / TERMD_TOKEN, busy says how to go on, a
top-level argument names args.<name>, a misspelt plugin lists the plugins,
od-attach --speed without --replay is refused, a run creating a session says
so)."""

import os
import socket
import subprocess
from pathlib import Path

import pytest

import conftest
import tdtest

REPO = Path(__file__).resolve().parents[2]
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
    assert r.stdout.startswith(name + " ") and "contract 1.3" in r.stdout, r


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
