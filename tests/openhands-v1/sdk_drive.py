"""sdk_drive.py — the published OpenHands Python SDK (openhands-sdk, pinned
by `make deps-openhands-sdk` in build/openhands-sdk-venv) against a termd's
api=openhands listener: its RemoteWorkspace, unmodified. One scenario per
run (`python sdk_drive.py <scenario>`, with the venv's Python), its
observations as one JSON line on stdout; tests/regress/
test_openhands_v1_clients.py asserts on them. Env: OH_URL, OH_KEY (the
full token), OH_HOME (a folder the scenario may write in)."""

import json
import os
import subprocess
import sys
import traceback

from openhands.sdk.workspace import RemoteWorkspace

URL, KEY, HOME = os.environ["OH_URL"], os.environ["OH_KEY"], os.environ["OH_HOME"]


def ws():
    return RemoteWorkspace(host=URL, api_key=KEY, working_dir=HOME)


def result(r):
    return {k: getattr(r, k, None) for k in ("exit_code", "stdout", "stderr", "timeout_occurred")}


def execute():
    w = ws()
    a = w.execute_command("echo hi; echo err >&2; exit 4")
    b = w.execute_command("pwd", cwd="/tmp")
    c = w.execute_command("seq 1 30000; echo done >&2")
    d = w.execute_command("for i in 1 2 3; do echo $i; sleep 0.2; done")
    return {"a": result(a), "b": result(b), "c_len": len(c.stdout), "c_last": c.stdout[-6:],
            "c_err": c.stderr, "d": result(d), "alive": w.alive,
            "info_version": w.get_server_info().get("version")}


def timeout():
    w = ws()
    r = w.execute_command("echo begun; sleep 30", timeout=1)
    return {"r": result(r)}


def files():
    w = ws()
    src = os.path.join(HOME, "sdk-src.bin")
    data = bytes(range(256)) * 300
    with open(src, "wb") as f:
        f.write(data)
    up = w.file_upload(src, os.path.join(HOME, "sdk", "deep", "up.bin"))
    dst = os.path.join(HOME, "sdk-back.bin")
    down = w.file_download(os.path.join(HOME, "sdk", "deep", "up.bin"), dst)
    with open(dst, "rb") as f:
        back = f.read()
    missing = w.file_download(os.path.join(HOME, "nope"), os.path.join(HOME, "nope-back"))
    return {"up": up.success, "down": down.success, "same": back == data,
            "missing": missing.success, "missing_error": missing.error}


def git():
    repo = os.path.join(HOME, "sdkrepo")
    os.makedirs(repo)
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")
    for cmd in (["init", "-q"], ["add", "."], ["commit", "-qm", "c1"]):
        if cmd[0] == "add":
            for name, text in (("a.txt", "one\n"), ("gone.txt", "x\n")):
                with open(os.path.join(repo, name), "w") as f:
                    f.write(text)
        subprocess.run(["git", "-C", repo] + cmd, check=True, env=env, capture_output=True)
    with open(os.path.join(repo, "a.txt"), "w") as f:
        f.write("two\n")
    os.unlink(os.path.join(repo, "gone.txt"))
    with open(os.path.join(repo, "b.txt"), "w") as f:
        f.write("new\n")
    w = ws()
    changes = sorted((c.status.value if hasattr(c.status, "value") else str(c.status), str(c.path))
                     for c in w.git_changes(repo))
    diff = w.git_diff(os.path.join(repo, "a.txt"))
    new = w.git_diff(os.path.join(repo, "b.txt"))
    rel = w.git_changes("sdkrepo")   # joined onto working_dir by the client
    return {"changes": changes, "diff": [diff.original, diff.modified],
            "new": [new.original, new.modified], "rel": len(rel)}


def all_():
    """every scenario in one run (the SDK takes seconds to import)"""
    return {name: globals()[name]() for name in ("execute", "timeout", "files", "git")}


if __name__ == "__main__":
    try:
        out = globals()[sys.argv[1] + ("_" if sys.argv[1] == "all" else "")]()
        print(json.dumps({"ok": True, "out": out}, default=str))
    except Exception:
        print(json.dumps({"ok": False, "error": traceback.format_exc()}))
        sys.exit(1)
