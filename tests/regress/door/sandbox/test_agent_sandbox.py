"""Issue 49 / PROTOCOL.md §12: an `api=agent-sandbox` listener serves the
in-pod runtime API of kubernetes-sigs/agent-sandbox's python runtime
(examples/python-runtime-sandbox/main.py, v0.5.6) with its answers: GET /,
POST /execute (shlex.split, no shell, cwd the base, the exec timeout killing
the process group, commands side by side, each a watchable pipe session),
POST /upload, GET /download/…, /list/…, /exists/…, confined to
--sandbox-base (`..` and links out refused with 403). A non-loopback
listener of that API needs --insecure-no-token."""

import json
import os
import shlex
import subprocess
import threading
import urllib.parse
from pathlib import Path

import pytest

import wsclient
from conftest import TERMD_BIN, base_env
from tdtest import (BIG, ended_command, exited_once, free_port, streams, until_reaped, upgrade,
                    wait_until, with_few_fds)

T = 60.0


class Api:
    def __init__(self, url):
        self.url = url

    def req(self, method, path, body=b"", headers=None):
        st, hdrs, data = wsclient.http_request(self.url, path, method=method, body=body,
                                               headers=headers, timeout=T)
        return st, hdrs, data

    def get(self, path):
        st, _, data = self.req("GET", path)
        return st, data

    def json(self, method, path, obj=None):
        body = json.dumps(obj).encode() if obj is not None else b""
        st, _, data = self.req(method, path, body,
                               {"Content-Type": "application/json"} if body else None)
        return st, json.loads(data)

    def execute(self, command):
        st, ans = self.json("POST", "/execute", {"command": command})
        assert st == 200, ans
        return ans

    def upload(self, filename, content):
        b = "sbtestboundary"
        body = ("--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s\"\r\n"
                "Content-Type: application/octet-stream\r\n\r\n" % (b, filename)).encode()
        body += content + ("\r\n--%s--\r\n" % b).encode()
        st, _, data = self.req("POST", "/upload", body,
                               {"Content-Type": "multipart/form-data; boundary=" + b})
        return st, json.loads(data)


@pytest.fixture
def sandbox(termd_factory, tmp_path):
    """a termd with an agent-sandbox listener on loopback; its base folder"""
    base = tmp_path / "app"
    base.mkdir()
    port = free_port()
    td = termd_factory(args=["--listen", "127.0.0.1:%d,api=agent-sandbox" % port,
                             "--sandbox-base", str(base)])
    return td, Api("http://127.0.0.1:%d" % port), base


def test_root_and_unknown_routes(sandbox):
    _, api, _ = sandbox
    assert api.json("GET", "/") == (200, {"status": "ok", "message": "Sandbox Runtime is active."})
    assert api.json("POST", "/") == (405, {"detail": "Method Not Allowed"})
    assert api.json("GET", "/execute") == (405, {"detail": "Method Not Allowed"})
    assert api.json("GET", "/nothing/here") == (404, {"detail": "Not Found"})
    # the termd API is not on this listener
    assert api.get("/metrics")[0] == 404


SHLEX_CASES = [
    "a b  c",
    "'single quoted' \"double quoted\"",
    "mixed'quo'\"tes\"here",
    "''",
    "a '' b \"\"",
    "back\\ slash\\ space",
    "\"in \\\"dq\\\" \\\\ and \\$x \\n\"",
    "'no \\ escapes in single'",
    "tab\there\nnewline",
    "#not a comment",
    "$HOME `x` $(y) ; | && > <",
    "ünïcödé 'ü x'",
]


@pytest.mark.parametrize("case", SHLEX_CASES)
def test_execute_splits_as_shlex_and_uses_no_shell(sandbox, case):
    _, api, _ = sandbox
    ans = api.execute("/usr/bin/python3 -c 'import sys,json;print(json.dumps(sys.argv[1:]))' "
                      + case)
    assert ans["stderr"] == "" and ans["exit_code"] == 0, ans
    assert json.loads(ans["stdout"]) == shlex.split(case)


@pytest.mark.parametrize("case", ["echo 'open", "echo \"open", "echo end\\", "echo \"x\\"])
def test_execute_shlex_errors(sandbox, case):
    _, api, _ = sandbox
    try:
        shlex.split(case)
        why = None
    except ValueError as e:
        why = str(e)
    assert why
    assert api.execute(case) == {"stdout": "", "stderr": "Failed to execute command: " + why,
                                 "exit_code": 1}


def test_execute_answers(sandbox):
    _, api, base = sandbox
    # no shell: a pipe is an argument
    assert api.execute("echo a | wc -l") == {"stdout": "a | wc -l\n", "stderr": "",
                                            "exit_code": 0}
    assert api.execute("sh -c 'echo out; echo err >&2; exit 3'") == {
        "stdout": "out\n", "stderr": "err\n", "exit_code": 3}
    # cwd is the base
    assert api.execute("pwd")["stdout"] == str(base) + "\n"
    # text mode: universal newlines
    assert api.execute("printf 'a\\r\\nb\\rc'")["stdout"] == "a\nb\nc"
    # killed by a signal: Python's negative returncode
    assert api.execute("sh -c 'kill -TERM $$'")["exit_code"] == -15
    assert api.execute("no-such-program-here") == {
        "stdout": "", "exit_code": 1,
        "stderr": "Failed to execute command: [Errno 2] No such file or directory: "
                  "'no-such-program-here'"}
    (base / "notexec").write_text("x")
    assert api.execute("./notexec")["stderr"] == (
        "Failed to execute command: [Errno 13] Permission denied: './notexec'")
    assert api.execute("   ") == {"stdout": "", "exit_code": 1,
                                  "stderr": "Failed to execute command: list index out of range"}
    # FastAPI's validation
    st, ans = api.json("POST", "/execute", {"cmd": "x"})
    assert st == 422 and ans["detail"][0]["loc"] == ["body", "command"]
    assert ans["detail"][0]["type"] == "missing"


def test_commands_run_side_by_side_as_watchable_sessions(sandbox):
    td, api, base = sandbox
    n = 4
    answers = [None] * n

    def one(i):
        answers[i] = api.execute(
            "sh -c 'touch started.%d; while [ ! -e go ]; do sleep 0.05; done; echo done %d'"
            % (i, i))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    # every command is running at once (none waits for another) ...
    wait_until(lambda: all((base / ("started.%d" % i)).exists() for i in range(n)),
               timeout=T, what="all commands started")
    # ... each in a pipe session of its own, in session.list
    ev = td.events()
    sessions = ev.call("session.list")["extras"]["sessions"]
    ours = [s for s in sessions if s["name"].startswith("sandbox-")]
    assert len(ours) == n, sessions
    assert all("while [ ! -e go ]" in s.get("command", "") for s in ours), ours
    (base / "go").touch()
    for t in threads:
        t.join(T)
    assert sorted(a["stdout"] for a in answers) == ["done %d\n" % i for i in range(n)]
    # closed once answered
    wait_until(lambda: not [s for s in ev.call("session.list")["extras"]["sessions"]
                            if s["name"].startswith("sandbox-")], timeout=T,
               what="sessions closed")


def test_timeout_kills_the_process_group(termd_factory, tmp_path):
    """SANDBOX_EXEC_TIMEOUT_SECONDS as upstream (here 2): the whole process
    group is killed (a child the command left in the background too) and
    the answer is subprocess.TimeoutExpired's words."""
    base = tmp_path / "app"
    base.mkdir()
    port = free_port()
    env = base_env(tmp_path)
    env["SANDBOX_EXEC_TIMEOUT_SECONDS"] = "2"
    termd_factory(args=["--listen", "127.0.0.1:%d,api=agent-sandbox" % port,
                        "--sandbox-base", str(base)], env=env)
    api = Api("http://127.0.0.1:%d" % port)
    ans = api.execute("sh -c 'sleep 300 & echo $! > bg.pid; wait'")
    assert ans == {"stdout": "", "exit_code": 1,
                   "stderr": "Failed to execute command: Command '['sh', '-c', 'sleep 300 & "
                             "echo $! > bg.pid; wait']' timed out after 2.0 seconds"}
    pid = int((base / "bg.pid").read_text())

    def gone():
        try:
            with open("/proc/%d/stat" % pid) as f:
                return f.read().split(") ")[1][0] == "Z"
        except OSError:
            return True
    wait_until(gone, timeout=T, what="the background sleep killed with its group")


def test_files_roundtrip(sandbox):
    _, api, base = sandbox
    (base / "sub").mkdir()
    assert api.upload("sub/f.bin", b"\x00\x01bytes\xff") == (
        200, {"message": "File 'sub/f.bin' uploaded successfully."})
    assert (base / "sub" / "f.bin").read_bytes() == b"\x00\x01bytes\xff"
    st, hdrs, data = api.req("GET", "/download/" + urllib.parse.quote("sub/f.bin", safe=""))
    assert (st, data) == (200, b"\x00\x01bytes\xff")
    assert hdrs["content-type"] == "application/octet-stream"
    assert hdrs["content-disposition"] == 'attachment; filename="sub/f.bin"'
    assert api.json("GET", "/download/nothing") == (404, {"message": "File not found"})
    assert api.json("GET", "/download/sub") == (404, {"message": "File not found"})
    st, entries = api.json("GET", "/list/")
    assert st == 200 and [(e["name"], e["type"]) for e in entries] == [("sub", "directory")]
    st, entries = api.json("GET", "/list/sub")
    e = entries[0]
    assert (e["name"], e["size"], e["type"]) == ("f.bin", 8, "file")
    assert e["mod_time"] == pytest.approx(os.stat(base / "sub" / "f.bin").st_mtime)
    assert api.json("GET", "/list/sub%2Ff.bin") == (404, {"message": "Path is not a directory"})
    assert api.json("GET", "/exists/sub%2Ff.bin") == (200, {"path": "sub/f.bin", "exists": True})
    assert api.json("GET", "/exists/nope") == (200, {"path": "nope", "exists": False})
    # a long path is the whole path
    deep = "/".join(["d%02d-%s" % (i, "x" * 40) for i in range(8)])
    assert api.execute("mkdir -p " + deep)["exit_code"] == 0
    assert api.upload(deep + "/f", b"deep")[0] == 200
    assert api.get("/download/" + urllib.parse.quote(deep + "/f", safe="")) == (200, b"deep")
    # a missing folder is the open's error, as upstream
    assert api.upload("nodir/x", b"x") == (500, {
        "message": "File upload failed: [Errno 2] No such file or directory: '%s'"
                   % (base / "nodir" / "x")})
    # a leading slash is relative to the base
    assert api.upload("/top.txt", b"t")[0] == 200 and (base / "top.txt").read_bytes() == b"t"
    # no file field: FastAPI's 422
    st, _, data = api.req("POST", "/upload", b"x", {"Content-Type": "text/plain"})
    assert st == 422 and json.loads(data)["detail"][0]["loc"] == ["body", "file"]


def test_confinement_refuses_dotdot_and_links_out(sandbox, tmp_path):
    _, api, base = sandbox
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("secret")
    (base / "out").symlink_to(outside)
    (base / "in").symlink_to(base / "sub")
    (base / "sub").mkdir()
    denied = (403, {"message": "Access denied"})
    # .. in an upload's file name (the runtime's realpath check)
    assert api.upload("../escaped", b"x") == denied
    assert api.upload("sub/../../escaped", b"x") == denied
    assert not (tmp_path / "escaped").exists()
    # .. in a path (encoded twice: upstream unquotes the decoded path again)
    for route in ("download", "list", "exists"):
        assert api.json("GET", "/%s/%%252e%%252e%%252foutside%%252fsecret" % route) == denied
    # through a link leading out
    assert api.upload("out/planted", b"x") == denied
    assert not (outside / "planted").exists()
    assert api.json("GET", "/download/out%2Fsecret") == denied
    assert api.json("GET", "/list/out") == denied
    assert api.json("GET", "/exists/out%2Fsecret") == denied
    # a sibling whose name starts with the base's is outside too (commonpath, not a
    # string prefix)
    sibling = tmp_path / (base.name + "2")
    sibling.mkdir()
    (base / "sib").symlink_to(sibling)
    assert api.upload("sib/planted", b"x") == denied
    assert api.json("GET", "/list/sib") == denied
    assert not (sibling / "planted").exists()
    # a link that stays inside is followed
    assert api.upload("in/ok", b"ok")[0] == 200
    assert (base / "sub" / "ok").read_bytes() == b"ok"
    # a link loop is no way out either (Python's non-strict realpath)
    (base / "loop").symlink_to("loop")
    assert api.json("GET", "/exists/loop")[0] == 200
    # whatever lws makes of a raw ../, nothing outside is served
    st, _, data = api.req("GET", "/download/..%2Foutside%2Fsecret")
    assert st in (403, 404) and b"secret" not in data


def test_non_loopback_listener_needs_insecure_no_token(tmp_path):
    """refused before anything is bound, even with a token (the API has no
    credential to check)"""
    tok = tmp_path / "tok"
    tok.write_text("a-token-of-enough-length-0123456789")
    for extra in ([], ["--token-file", str(tok)]):
        r = subprocess.run([TERMD_BIN, "--listen", "0.0.0.0:%d,api=agent-sandbox" % free_port()]
                           + extra, env=base_env(tmp_path), capture_output=True, text=True,
                           timeout=T)
        assert r.returncode == 2, r
        assert "--insecure-no-token" in r.stderr and "agent-sandbox" in r.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user needs termd as root")
def test_commands_and_files_act_as_the_user(termd_factory, tmp_path):
    """--user: commands exec'd with the user's ids, file work in the
    workers with them (the kernel's refusals are the answers)"""
    import pwd
    import shutil
    import tempfile
    nobody = pwd.getpwnam("nobody")
    # a folder the user can reach (pytest's own are root's alone)
    top = Path(tempfile.mkdtemp(prefix="td-sb-", dir="/tmp"))
    try:
        os.chmod(top, 0o755)
        base = top / "app"
        base.mkdir()
        os.chown(base, nobody.pw_uid, nobody.pw_gid)
        as_user(termd_factory, base, nobody)
    finally:
        shutil.rmtree(top, ignore_errors=True)


def as_user(termd_factory, base, nobody):
    (base / "rootonly").mkdir(mode=0o700)
    port = free_port()
    termd_factory(args=["--listen", "127.0.0.1:%d,api=agent-sandbox" % port,
                        "--sandbox-base", str(base), "--user", "nobody"])
    api = Api("http://127.0.0.1:%d" % port)
    assert api.execute("id -u")["stdout"] == "%d\n" % nobody.pw_uid
    assert api.upload("mine.txt", b"x")[0] == 200
    assert os.stat(base / "mine.txt").st_uid == nobody.pw_uid
    assert api.upload("rootonly/no.txt", b"x") == (500, {
        "message": "File upload failed: [Errno 13] Permission denied: '%s'"
                   % (base / "rootonly" / "no.txt")})
    st, _ = api.json("GET", "/list/rootonly")
    assert st == 500


def test_user_lookup_without_fds_is_not_an_unknown_user(sandbox):
    """Issue 52's soak: with termd's descriptors exhausted for a moment,
    getpwuid (reading /etc/passwd) fails with EMFILE, and /upload was
    answered "user '?' (--user) is unknown". A lookup that could not be
    made says why (503); the next one, with fds back, works."""
    td, api, base = sandbox
    answers, got = with_few_fds(td.proc.pid, lambda extra: api.upload("fd-%d.txt" % extra, b"x"),
                                lambda a: isinstance(a, tuple) and "user" in json.dumps(a[1]))
    assert got, "no answer came from the user lookup with fds exhausted: %r" % answers
    for st, body in got:
        assert (st, body) == (503, {"message": "cannot look up the user: Too many open files"}), got
    st, body = api.upload("after.txt", b"back")
    assert st == 200, body
    assert (base / "after.txt").read_bytes() == b"back"


def test_a_command_cut_by_an_upgrade_is_closed_once_it_ends(sandbox, tmp_path):
    """Issue 52: an /execute whose request an upgrade in place cut runs on
    in its session (sandbox-N), taken over; the door follows it again: it
    is closed once it ended (was: left in session.list for ever, and never
    killed at the timeout)."""
    td, api, base = sandbox
    gate = tmp_path / "gate-sb"
    done = []

    def run():
        try:
            done.append(api.execute("sh -c 'while [ ! -e %s ]; do sleep 0.05; done'" % gate))
        except Exception as e:   # (wsclient.ConnectionClosed: cut by the upgrade)
            done.append(e)
    th = threading.Thread(target=run, daemon=True)
    th.start()
    ev = td.events()

    def running():
        return [s["name"] for s in ev.call("session.list", {})["extras"]["sessions"]
                if s["name"].startswith("sandbox-") and s["alive"]]
    name = wait_until(running, timeout=T)[0]
    code, ev2, ans = upgrade(td, ev, cid="sb-up-1")
    assert ans["extras"].get("ok") is True, ans
    th.join(T)   # its request was cut by the upgrade
    assert name in [s["name"] for s in ev2.call("session.list", {})["extras"]["sessions"]]
    gate.touch()
    wait_until(lambda: name not in [s["name"] for s in
                                    ev2.call("session.list", {})["extras"]["sessions"]],
               timeout=T)
    assert api.execute("echo after")["stdout"] == "after\n"
    ev2.close()


def test_a_command_reaped_but_not_read_at_an_upgrade_comes_whole_once(sandbox, tmp_path):
    """An /execute's program (sandbox-N) writes 600000 bytes and a line of
    stderr and exits 7; termd reaped it, had not read it all, and upgraded
    in place (the request is cut by it): on /events every byte comes once,
    in order, then one session.exit with 7; the door closes the session
    once it ended. Technique of test_upgrade_ended.py: termd is stopped
    while the program writes and exits, the upgrade asked for, then let go;
    an attempt whose upgrade missed the window is made again."""
    td, api, base = sandbox
    release = tmp_path / "release"
    ev = td.events()
    seq0 = ev.ping()["seq"]
    threads = []

    def begin(ev, n, gate):
        script = tmp_path / ("prog-%d.sh" % n)
        script.write_text(ended_command(gate, release, n) + "\n")
        th = threading.Thread(target=lambda: _cut(api, "sh %s" % script), daemon=True)
        th.start()
        threads.append(th)
        live = lambda: [s for s in ev.call("session.list", {})["extras"]["sessions"]
                        if s["name"].startswith("sandbox-") and s["alive"]]
        return wait_until(live, timeout=T, what="its session")[0]

    def check(ev, n, s):
        out = streams(exited_once(ev, seq0, s["name"], 7, timeout=T))
        assert out == {"stdout": "o" * BIG + "tail-%d\n" % n, "stderr": "err-%d\n" % n}, \
            (len(out["stdout"]), out["stdout"][-40:], out["stderr"])
        wait_until(lambda: s["name"] not in [x["name"] for x in ev.call(
            "session.list", {})["extras"]["sessions"]], timeout=T, what="its session closed")
    try:
        ev = until_reaped(td, ev, tmp_path, begin, check, "sb-up-ended-%d")
        assert api.execute("echo after")["stdout"] == "after\n"
    finally:
        release.touch()
        for th in threads:
            th.join(T)
    ev.close()


def _cut(api, command):
    """an /execute whose request the upgrade cuts (or that ends first)"""
    try:
        api.execute(command)
    except Exception:   # noqa: BLE001 — wsclient.ConnectionClosed, OSError: cut by the upgrade
        pass
