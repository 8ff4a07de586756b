"""Issue 49: agent-sandbox's own Python SDK (k8s-agent-sandbox 0.5.6, pinned
in tests/agent-sandbox/requirements.txt, installed by make
deps-agent-sandbox into the build folder's agent-sandbox-venv) in its
direct mode (api_url) against termd's agent-sandbox listener:
commands.run, files.write/read/list/exists as an SDK user writes them
(tests/agent-sandbox/drive.py). Skipped, with the reason, when the venv
could not be installed (offline)."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import TERMD_BIN
from tdtest import free_port

ROOT = Path(__file__).resolve().parents[4]
# beside the termd under test; TERMD_AGENT_SANDBOX_VENV names another (a
# sanitizer build's termd with the main build's venv)
VENV = Path(os.environ.get("TERMD_AGENT_SANDBOX_VENV")
            or Path(TERMD_BIN).resolve().parent / "agent-sandbox-venv")


def venv_python():
    if not (VENV / ".ok").exists():
        why = "make deps-agent-sandbox has not installed %s" % VENV
        try:
            why += ": " + (VENV / "offline").read_text().strip()[-300:]
        except OSError:
            pass
        pytest.skip(why)
    return str(VENV / "bin" / "python")


def test_sdk_direct_mode(termd_factory, tmp_path):
    py = venv_python()
    base = tmp_path / "app"
    base.mkdir()
    port = free_port()
    termd_factory(args=["--listen", "127.0.0.1:%d,api=agent-sandbox" % port,
                        "--sandbox-base", str(base)])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "PYTHON"))}
    env["HOME"] = str(tmp_path)   # no ~/.kube/config of anyone's
    r = subprocess.run([py, str(ROOT / "tests/agent-sandbox/drive.py"),
                        "http://127.0.0.1:%d" % port], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["run"] == ["hello from termd\n", "", 0]
    assert out["run_fail"] == ["", "to-stderr\n", 7]
    assert out["no_shell"] == "$HOME | cat\n"
    assert out["mkdir"] == 0
    assert out["read"] == "hi there\n"
    assert out["read_bin"] == list(range(256))
    assert (base / "data" / "blob.bin").read_bytes() == bytes(range(256))
    assert out["list"] == [["data", "directory", os.stat(base / "data").st_size],
                           ["hello.txt", "file", 9]]
    assert out["list_data"] == [["blob.bin", "file", 256]]
    assert out["exists"] == [True, True, False]
    assert out["cat"] == "hi there\n"
    assert out["cat_bin"] == ["", "Failed to execute command: 'utf-8' codec can't decode byte "
                                  "0x80 in position 128: invalid start byte", 1]
    assert out["escape_sdk"] == "refused"
    assert out["escape"] == ["SandboxRequestError", 403]
    assert not (tmp_path / "escape.txt").exists()
    # lws folds the ../ away before termd sees it: no route, 404 (upstream: 403)
    assert out["read_escape"] == ["SandboxRequestError", 404]
