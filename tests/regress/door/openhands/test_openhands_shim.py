"""share/runtime/openhands-shim: OpenHands' Docker runtime's exact command
line turned into termd's (plugins, port, working directory, token or
--insecure-no-token), and a real start against the built termd in a temp
dir (no user is created: OH_SHIM_NO_USER=1)."""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import TERMD_BIN, base_env
from tdtest import free_port
from test_openhands import OH
from test_plugins import BUILT_PLUGINS

REPO = Path(__file__).resolve().parents[4]
SHIM = REPO / "share" / "runtime" / "openhands-shim"
PREFIX = ["run", "-n", "openhands", "poetry", "run", "python", "-u", "-m",
          "openhands.runtime.action_execution_server"]


def shim(args, env=None, dry=True, **kw):
    e = base_env(Path("/tmp"))
    e.pop("SESSION_API_KEY", None)
    e.update({"TERMD_BIN": TERMD_BIN, "OH_SHIM_NO_USER": "1"})
    if dry:
        e["OH_SHIM_DRY_RUN"] = "1"
    e.update(env or {})
    return subprocess.run(["/bin/sh", str(SHIM)] + PREFIX + args, env=e, capture_output=True,
                          text=True, **kw)


def test_argument_list_becomes_termds(tmp_path):
    ws = str(tmp_path / "workspace")
    r = shim(["31234", "--working-dir", ws, "--plugins", "agent_skills", "jupyter", "vscode",
              "--username", "openhands", "--user-id", "1000"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:-1] == [TERMD_BIN, "--listen", "0.0.0.0:31234", "--cwd", ws,
                                         "--plugins", "agentskills,jupyter,browser",
                                         "--insecure-no-token"]
    r = shim(["31234", "--working-dir", ws, "--plugins", "jupyter", "--username", "root",
              "--user-id", "0", "--no-enable-browser"], env={"SESSION_API_KEY": "k"})
    assert r.stdout.split("\n")[:-1] == [TERMD_BIN, "--listen", "0.0.0.0:31234", "--cwd", ws,
                                         "--plugins", "jupyter"]
    for bad in (["notaport"], [], ["1", "--user-id", "x"]):
        r = shim(bad)
        assert r.returncode == 2 and "openhands-shim:" in r.stderr, (bad, r.stderr)


@pytest.mark.parametrize("key", [None, "shim-key"])
def test_shim_starts_termd_that_openhands_can_drive(tmp_path, key):
    port = free_port()
    ws = tmp_path / "workspace"
    env = {"TERMD_PLUGIN_DIR": str(BUILT_PLUGINS), "TERMD_STATE_DIR": str(tmp_path / "state")}
    if key:
        env["SESSION_API_KEY"] = key
    log = open(tmp_path / "shim.log", "wb")
    e = base_env(tmp_path)
    e.pop("SESSION_API_KEY", None)
    e.update({"TERMD_BIN": TERMD_BIN, "OH_SHIM_NO_USER": "1"}, **env)
    p = subprocess.Popen(["/bin/sh", str(SHIM)] + PREFIX +
                         [str(port), "--working-dir", str(ws), "--plugins", "agent_skills",
                          "jupyter", "--username", "openhands", "--user-id", "1000",
                          "--no-enable-browser"], env=e, stdout=log, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        oh = OH(port, key=key)
        deadline = time.monotonic() + 30
        while True:   # what DockerRuntime.wait_until_alive does
            try:
                status, _, data = oh.request("GET", "/alive", key=None)
                if status == 200:
                    break
            except OSError:
                pass
            assert p.poll() is None, (tmp_path / "shim.log").read_text()
            assert time.monotonic() < deadline, "no /alive"
            time.sleep(0.1)
            oh = OH(port, key=key)
        assert json.loads(data) == {"status": "ok"}
        assert ws.is_dir()
        obs = oh.run("pwd")
        assert obs["content"] == str(ws)
        assert obs["extras"]["metadata"]["working_dir"] == str(ws)
        status, _, body = oh.request("GET", "/healthz", key=None)
        assert json.loads(body).get("insecure_no_token", False) is (key is None)
        if key:
            status, _, _ = OH(port, key="wrong").request("POST", "/list_files", {})
            assert status == 403
        log_text = (tmp_path / "shim.log").read_text()
        assert ("WITHOUT A TOKEN" in log_text) is (key is None)
    finally:
        os.killpg(p.pid, 15)
        p.wait(10)
