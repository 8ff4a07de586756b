"""Issue 47: OpenHands V1's published clients, unmodified, against termd's
api=openhands listener: the TypeScript client (@openhands/typescript-client,
tests/openhands-v1/drive.mjs: RemoteWorkspace, BashClient, FileClient,
ServerClient, BashWebSocketClient) and the Python SDK (openhands-sdk,
tests/openhands-v1/sdk_drive.py: RemoteWorkspace's execute_command,
file_upload, file_download, git_changes, git_diff). `make deps` installs
both; a test skips only when that install could not run (its reason in a
.skip file), and fails when it was never tried.

Client bugs met (worked around in the drivers, not in termd):
- TS BashWebSocketClient loads `ws` with a bare require(), which an ES
  module on Node 20 does not have (and Node 20 has no global WebSocket):
  it never connects. drive.mjs puts createRequire's require on globalThis
  before importing the package.
- TS RemoteWorkspace.fileDownload parses the body as text (a binary file
  comes back mangled); FileClient.downloadFile (arrayBuffer) is right, and
  is what the binary test uses.
- TS RemoteWorkspace.executeCommand reports exit_code `?? 0` and
  timeout_occurred false always: a timed-out command shows exit_code -1
  with timeout_occurred false.
- openhands-sdk (every release, 1.0.0 to 1.58.2) requires Python >= 3.12:
  it does not install on Debian 12's Python 3.11; make deps-openhands-sdk
  takes a python3.12+ (PATH or pyenv) and pins 1.43.1.
- The SDK's execute_command gives up on its own clock at `timeout` and
  reports "Command timed out after N seconds" with the output it polled,
  whatever the server's last event says."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from tdtest import free_port

ROOT = Path(__file__).resolve().parents[4]
TS = ROOT / "tests" / "openhands-v1"
BUILD = Path(os.environ.get("TERMD_BIN") or ROOT / "build" / "termd").parent
VENV = Path(os.environ.get("TERMD_OH_SDK_VENV") or ROOT / "build" / "openhands-sdk-venv")
KEY = "clients-v1-key"
T = 180


@pytest.fixture
def oh(termd_factory, tmp_path):
    port = free_port()
    td = termd_factory(token=KEY, args=["--listen", "127.0.0.1:%d,api=openhands" % port])
    home = tmp_path / "work"
    home.mkdir()
    return dict(OH_URL="http://127.0.0.1:%d" % port, OH_KEY=KEY, OH_HOME=str(home))


def installed(ready, skip_file, what):
    if ready:
        return
    if skip_file.exists():
        pytest.skip("%s: %s" % (what, skip_file.read_text().strip()))
    pytest.fail("%s is not installed: run `make deps`" % what)


def run(argv, env, cwd):
    r = subprocess.run(argv, env=dict(os.environ, **env), cwd=str(cwd), capture_output=True,
                       text=True, timeout=T, stdin=subprocess.DEVNULL)
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    assert lines, "no result (rc %s)\nstdout: %s\nstderr: %s" % (r.returncode, r.stdout[-2000:],
                                                                 r.stderr[-4000:])
    res = json.loads(lines[-1])
    assert res["ok"], res.get("error")
    return res["out"]


def ts(oh, scenario):
    installed((TS / "node_modules" / "@openhands" / "typescript-client").is_dir(),
              TS / ".skip", "the OpenHands TypeScript client")
    return run(["node", "drive.mjs", scenario], oh, TS)


def sdk(oh, scenario):
    py = VENV / "bin" / "python"
    installed(py.exists(), Path(str(VENV) + ".skip"), "the OpenHands Python SDK")
    return run([str(py), str(TS / "sdk_drive.py"), scenario], oh, oh["OH_HOME"])


# ------------------------------------------------------------- TypeScript

def test_ts_server_client(oh):
    out = ts(oh, "server")
    assert out["alive"] == {"status": "ok"} and out["health"] == {"status": "ok"}
    assert out["ready"] == {"status": "ready"}
    assert out["info"]["version"] and out["info"]["docs"] == "/docs"
    assert out["root"]["version"] == out["info"]["version"]


def test_ts_remote_workspace_execute(oh):
    out = ts(oh, "workspace_exec")
    a = out["a"]
    assert (a["exit_code"], a["stdout"], a["stderr"]) == (4, "hi\n", "err\n")
    assert out["b"]["stdout"] == "/tmp\n"
    assert out["c_len"] == sum(len("%d\n" % i) for i in range(1, 30001))
    assert out["c_last"] == "30000\n"


def test_ts_remote_workspace_files(oh):
    out = ts(oh, "workspace_files")
    assert out["up"]["success"] is True
    assert out["down_content"] == out["text"] == "uploaded by the TS client\n"
    assert Path(oh["OH_HOME"], "ts/deep/up.txt").read_text() == "uploaded by the TS client\n"


def test_ts_remote_workspace_git(oh):
    out = ts(oh, "workspace_git")
    assert out["setup"] == 0
    assert sorted((c["status"], c["path"]) for c in out["changes"]) == [
        ("ADDED", "b.txt"), ("UPDATED", "a.txt")]
    assert out["diff"] == {"modified": "two", "original": "one"}
    assert out["plain"] == []


def test_ts_bash_client(oh):
    out = ts(oh, "bash_client")
    cmd = out["cmd"]
    assert cmd["kind"] == "BashCommand" and cmd["timeout"] == 30
    outs = out["outs"]
    assert "".join(o["stdout"] or "" for o in outs) == "started\n"
    assert "".join(o["stderr"] or "" for o in outs) == "e\n"
    assert outs[-1]["exit_code"] == 0
    assert out["one"] == cmd
    assert out["batch"] == [cmd, None]
    assert out["exec"]["exit_code"] == 2 and out["exec"]["stdout"] == "exec\n"
    assert out["err422"]["status"] == 422
    assert len(out["desc"]["items"]) == 2 and out["desc"]["next_page_id"]
    assert out["cleared"]["cleared_count"] >= 5 and out["after_items"] == 0


def test_ts_file_client_binary(oh):
    out = ts(oh, "file_client")
    assert out["up"] == {"success": True}
    assert out["same"] is True and out["len"] == 70000
    assert out["missing"] == {"status": 404}


def test_ts_bash_websocket_client(oh):
    out = ts(oh, "websocket")
    assert out["kinds"] == ["BashCommand", "BashOutput"] and out["errors"] == []


# ------------------------------------------------------------------ Python

def test_sdk_remote_workspace(oh):
    """execute_command, its timeout, file_upload/download, git_changes/diff:
    one run of the SDK (it takes seconds to import)"""
    allout = sdk(oh, "all")
    out = allout["execute"]
    assert out["a"] == {"exit_code": 4, "stdout": "hi\n", "stderr": "err\n",
                        "timeout_occurred": False}
    assert out["b"]["stdout"] == "/tmp\n"
    assert out["c_len"] == sum(len("%d\n" % i) for i in range(1, 30001))
    assert out["c_last"] == "30000\n" and out["c_err"] == "done\n"
    assert out["d"]["stdout"] == "1\n2\n3\n" and out["d"]["exit_code"] == 0
    assert out["alive"] is True and out["info_version"]
    out = allout["timeout"]
    assert out["r"]["exit_code"] == -1 and out["r"]["timeout_occurred"] is True
    assert out["r"]["stdout"].startswith("begun")
    out = allout["files"]
    assert out["up"] is True and out["down"] is True and out["same"] is True
    assert out["missing"] is False and "404" in out["missing_error"]
    out = allout["git"]
    assert out["changes"] == [["ADDED", "b.txt"], ["DELETED", "gone.txt"], ["UPDATED", "a.txt"]]
    assert out["diff"] == ["one", "two"] and out["new"] == ["", "new"]
    assert out["rel"] == 3
