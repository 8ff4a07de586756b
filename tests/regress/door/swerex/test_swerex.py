"""SWE-ReX's remote runtime API (termd started as swerex-remote; PROTOCOL.md
section 12): the real clients (swe-rex's RemoteRuntime and mini-swe-agent,
pinned in the venv `make deps-swerex` builds under build/) driven by
swerex_client.py, and the wire itself: X-API-Key, X-Request-ID replay,
the 511 exception shape, and a person watching a SWE-ReX session.

Environment: TERMD_SWEREX_VENV (default build/swerex-venv). Without the
venv (offline, or `make deps-swerex` not run) the client tests skip and say
why; the wire tests run anyway."""

import http.client
import json
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

import routes
import wsclient
from conftest import TERMD_BIN, Termd
from tdtest import (BIG, ended_command, exited_once, free_port, replay, streams, until_reaped,
                    upgrade, wait_until)

REPO = Path(__file__).resolve().parents[4]
VENV = Path(os.environ.get("TERMD_SWEREX_VENV") or REPO / "build" / "swerex-venv")
VPY = VENV / "bin" / "python"
CLIENT = Path(__file__).resolve().parents[2] / "swerex_client.py"
TOKEN = "swerex-test-token-0123456789"


class SwerexRemote(Termd):
    """termd started by the name swerex-remote, with SWE-ReX's options"""

    def __init__(self, tmp_path, token=TOKEN, extra=()):
        port = free_port()
        super().__init__(tmp_path, listen="127.0.0.1:%d" % port, name="swerex-remote")
        link = self.dir / "bin" / "swerex-remote"
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(TERMD_BIN)
        self.port = port
        self.token = token
        self.argv = [str(link)] + (["--auth-token", token] if token else []) + [
            "--host", "127.0.0.1", "--port", str(port), "--cwd", str(self.home)] + list(extra)
        self.env.pop("TERM", None)   # as in SWE-ReX's Docker image


@pytest.fixture
def swerex(tmp_path):
    started = []

    def start(**kw):
        t = SwerexRemote(tmp_path / ("s%d" % len(started)), **kw)
        started.append(t)
        return t.start()

    yield start
    problems = [p for p in (t.stop() for t in started) if p]
    if problems:
        pytest.fail("\n\n".join(problems), pytrace=False)


def request(td, method, path, body=None, key=TOKEN, headers=None, raw=None):
    c = http.client.HTTPConnection("127.0.0.1", td.port, timeout=60)
    h = {"Content-Type": "application/json"}
    if key is not None:
        h["X-API-Key"] = key
    h.update(headers or {})
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else b"")
    c.request(method, path, body=data, headers=h)
    r = c.getresponse()
    out = r.read()
    hdrs = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    return r.status, hdrs, json.loads(out) if out else None


def need_venv():
    if not VPY.exists():
        pytest.skip("the SWE-ReX clients are not installed (%s): `make deps-swerex` installs the "
                    "pinned swe-rex and mini-swe-agent from PyPI; offline it cannot" % VENV)


def client(td, scenario, arg="", timeout=300, env=None):
    need_venv()
    p = subprocess.run([str(VPY), str(CLIENT), scenario, str(td.port), td.token or "", arg],
                       capture_output=True, text=True, timeout=timeout, cwd=str(td.home),
                       env=env)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("SWEREX-JSON:")]
    assert lines and p.returncode == 0, "swerex_client %s failed\nstdout: %s\nstderr: %s" % (
        scenario, p.stdout[-3000:], p.stderr[-3000:])
    return json.loads(lines[-1][len("SWEREX-JSON:"):])


# ---------------------------------------------------------------- the wire

def test_api_key_missing_wrong_right(swerex):
    td = swerex()
    st, h, body = request(td, "GET", "/is_alive", key=None)
    assert (st, body) == (401, {"detail": "Not authenticated"})
    assert h.get("www-authenticate") == "APIKey"
    st, h, body = request(td, "POST", "/execute", {"command": "touch /tmp/never"}, key="")
    assert (st, body) == (401, {"detail": "Not authenticated"})
    st, h, body = request(td, "GET", "/", key="wrong-" + TOKEN)
    assert (st, body) == (401, {"detail": "Invalid API Key"})
    assert "www-authenticate" not in h
    marker = td.home / "ran"
    st, _, body = request(td, "POST", "/execute", {"command": "touch %s" % marker, "shell": True},
                          key=TOKEN[:-1])
    assert st == 401 and not marker.exists()
    st, _, body = request(td, "GET", "/")
    assert (st, body) == (200, {"message": "hello world"})
    st, _, body = request(td, "GET", "/is_alive")
    assert (st, body) == (200, {"is_alive": True, "message": ""})
    # every route of the door, each refused without and with a wrong key
    for method, path in ROUTES:
        for key, detail in ((None, "Not authenticated"), ("x" + TOKEN, "Invalid API Key")):
            st, _, body = request(td, method, path, {"command": "touch %s" % marker, "shell": True,
                                                     "path": str(marker), "content": "x"}, key=key)
            assert (st, body) == (401, {"detail": detail}), (method, path, key)
    assert not marker.exists()


ROUTES = routes.API_ONLY_ROUTES["swerex"]


def test_the_route_list_is_the_doors():
    import re
    src = (REPO / "termd" / "door" / "swerex" / "swerex.c").read_text()
    found = re.findall(r'\{"(GET|POST)", "(/[a-z_]*)", sw_admit', src)
    assert sorted(found) == sorted(ROUTES)


def test_no_token_on_all_interfaces_is_refused(tmp_path):
    t = SwerexRemote(tmp_path, token=None)
    t.argv = [a if a != "127.0.0.1" else "0.0.0.0" for a in t.argv]
    p = subprocess.run(t.argv, env=t.env, capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL, cwd=str(t.home))
    assert p.returncode == 2
    assert "refusing to listen on 0.0.0.0 without a token" in p.stderr


def test_request_id_replay_runs_once(swerex):
    td = swerex()
    counter = td.home / "count"
    cmd = {"command": "echo x >> %s; wc -l < %s" % (counter, counter), "shell": True}
    st, _, first = request(td, "POST", "/execute", cmd, headers={"X-Request-ID": "r-1"})
    assert st == 200 and first["stdout"].strip() == "1"
    # the same id: the stored answer, nothing run again
    st, _, again = request(td, "POST", "/execute", cmd, headers={"X-Request-ID": "r-1"})
    assert (st, again) == (200, first)
    assert counter.read_text() == "x\n"
    # ... but only once the key was checked: a wrong key gets no replay
    st, _, body = request(td, "POST", "/execute", cmd, key="nope", headers={"X-Request-ID": "r-1"})
    assert (st, body) == (401, {"detail": "Invalid API Key"})
    # a new id runs
    st, _, third = request(td, "POST", "/execute", cmd, headers={"X-Request-ID": "r-2"})
    assert third["stdout"].strip() == "2"
    # an exception is not stored: the same id runs again
    bad = {"command": "false", "shell": True, "check": True}
    assert request(td, "POST", "/execute", bad, headers={"X-Request-ID": "r-3"})[0] == 511
    st, _, body = request(td, "POST", "/execute", dict(cmd), headers={"X-Request-ID": "r-3"})
    assert st == 200 and body["stdout"].strip() == "3"


def test_exceptions_are_swerex_511(swerex):
    td = swerex()
    st, _, body = request(td, "POST", "/run_in_session", {"command": "true", "session": "nope"})
    assert st == 511
    e = body["swerexception"]
    assert set(e) == {"message", "class_path", "traceback", "extra_info"}
    assert e["class_path"] == "swerex.exceptions.SessionDoesNotExistError"
    assert e["message"] == "session 'nope' does not exist"
    assert request(td, "POST", "/create_session", {"session": "a"})[0] == 200
    st, _, body = request(td, "POST", "/create_session", {"session": "a"})
    assert (st, body["swerexception"]["class_path"]) == (511, "swerex.exceptions.SessionExistsError")
    st, _, body = request(td, "POST", "/run_in_session", {"command": "if then", "session": "a"})
    e = body["swerexception"]
    assert e["class_path"] == "swerex.exceptions.BashIncorrectSyntaxError"
    assert "syntax error" in e["extra_info"]["bash_stderr"] and e["extra_info"]["bash_stdout"] == ""
    st, _, body = request(td, "POST", "/read_file", {"path": str(td.home / "missing")})
    assert body["swerexception"]["class_path"] == "builtins.FileNotFoundError"
    st, _, body = request(td, "POST", "/execute", {})
    assert st == 422 and body["detail"][0]["loc"] == ["body", "command"]


def test_zip_upload_stays_beneath_target(swerex):
    import io
    import zipfile
    td = swerex()
    target = td.home / "up"

    def upload(entries):
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            for name, data in entries:
                z.writestr(name, data)
        boundary = "XyZ"
        parts = []
        for name, value, fn in (("file", buf.getvalue(), "z.zip"),
                                ("target_path", str(target).encode(), None), ("unzip", b"true", None)):
            disp = 'form-data; name="%s"' % name + ('; filename="%s"' % fn if fn else "")
            parts.append(b"--" + boundary.encode() + b"\r\nContent-Disposition: " + disp.encode() +
                         b"\r\n\r\n" + value + b"\r\n")
        raw = b"".join(parts) + b"--" + boundary.encode() + b"--\r\n"
        return request(td, "POST", "/upload", raw=raw,
                       headers={"Content-Type": "multipart/form-data; boundary=" + boundary})

    st, _, body = upload([("ok/inside.txt", "in"), ("../escaped.txt", "out")])
    # the entry with a .. part is not written outside (skipped, as
    # unpack_archive does; ZipFile.extractall would strip the ..)
    assert (st, body) == (200, {})
    assert (target / "ok" / "inside.txt").read_text() == "in"
    assert not (td.home / "escaped.txt").exists()
    # a symlink planted in the target is never gone through: the entry is
    # refused with the errno and its name, nothing written elsewhere
    outside = td.home / "outside"
    outside.mkdir()
    (target / "planted").symlink_to(outside)
    st, _, body = upload([("planted/x.txt", "no")])
    assert st == 511 and body["swerexception"]["class_path"] == "builtins.OSError", body
    assert body["swerexception"]["message"] == "[Errno 20] Not a directory: 'planted/x.txt'", body
    assert list(outside.iterdir()) == []


def test_watcher_sees_a_swerex_command_while_it_runs(swerex):
    """(c) a person on /tty/swerex-<name> sees the agent's command and its
    output while it runs (the command waits for the test: no sleep)"""
    watch = free_port()   # termd's own API on a listener of its own
    td = swerex(extra=("--listen", "127.0.0.1:%d" % watch))
    assert request(td, "POST", "/create_session", {"session": "agent"})[0] == 200
    # the swerex listener serves SWE-ReX's API alone
    with pytest.raises(wsclient.HandshakeError):
        wsclient.connect("ws://127.0.0.1:%d" % td.port, path="/tty/swerex-agent",
                         subprotocol=wsclient.TTY_SUBPROTOCOL, token=TOKEN)
    gate = td.home / "gate"
    ws = wsclient.connect("ws://127.0.0.1:%d" % watch, path="/tty/swerex-agent",
                          subprotocol=wsclient.TTY_SUBPROTOCOL, token=TOKEN)
    result = {}

    def run():
        result["r"] = request(td, "POST", "/run_in_session", {
            "command": "echo WATCH-$((6*7)); while [ ! -e %s ]; do sleep 0.05; done; echo done" % gate,
            "session": "agent", "timeout": None})

    th = threading.Thread(target=run)
    th.start()
    seen = b""
    deadline = time.monotonic() + 60
    while b"WATCH-42" not in seen and time.monotonic() < deadline:
        try:
            _, payload = ws.recv(timeout=5)
            seen += payload if isinstance(payload, bytes) else payload.encode()
        except TimeoutError:
            pass
    assert b"WATCH-42" in seen, seen[-2000:]
    assert "r" not in result   # still running while the watcher saw it
    gate.touch()
    th.join(60)
    st, _, body = result["r"]
    assert st == 200 and body["output"] == "WATCH-42\ndone\n" and body["exit_code"] == 0
    ws.abort()


def test_create_session_answers_the_first_prompt_as_swerex(swerex):
    """create_session's output is SWE-ReX's: what came before its first
    SHELLPS1PREFIX — what the rc files printed, the shell's first prompt
    (theirs), and what the startup files printed — as SWE-ReX's own
    LocalRuntime gives it with the same home"""
    td = swerex()
    (td.home / ".bashrc").write_text('echo rc-says-hi\nPS1="agent-box \\[\\e[1m\\]\\w\\$ "\n')
    src = td.home / "src.sh"
    src.write_text("echo from-src\n")
    st, _, body = request(td, "POST", "/create_session", {"session": "a"})
    assert (st, body) == (200, {"output": "rc-says-hi\nagent-box ~$ ", "session_type": "bash"})
    st, _, body = request(td, "POST", "/create_session", {"session": "b", "startup_source": [str(src)]})
    assert (st, body["output"]) == (200, "rc-says-hi\nagent-box ~$ from-src\n")
    # the prompt is not the commands' (theirs start after SHELLPS1PREFIX)
    st, _, body = request(td, "POST", "/run_in_session", {"command": "echo x", "session": "b"})
    assert body["output"] == "x\n"
    env = {k: v for k, v in td.env.items() if k != "TERM"}
    ref = client(td, "local_create", str(src), env=env)
    assert ref == {"create": "rc-says-hi\nagent-box ~$ ",
                   "create_sourced": "rc-says-hi\nagent-box ~$ from-src\n"}


def test_a_second_request_waits_its_turn(swerex):
    """SWE-ReX's server answers one request at a time (async routes that
    block in pexpect): a second run_in_session sent while one runs waits,
    then runs — no RuntimeError"""
    td = swerex()
    assert request(td, "POST", "/create_session", {})[0] == 200
    gate = td.home / "gate"
    got = {}

    def send(key, cmd):
        got[key] = request(td, "POST", "/run_in_session", {"command": cmd, "timeout": 120})

    first = threading.Thread(target=send, args=(
        "first", "touch %s; echo one; while [ ! -e %s ]; do sleep 0.05; done; echo one-ends"
        % (td.home / "started", gate)))
    first.start()
    started = td.home / "started"
    deadline = time.monotonic() + 60
    while not started.exists():   # the first runs
        assert time.monotonic() < deadline, "the first command never started"
        time.sleep(0.05)
    second = threading.Thread(target=send, args=("second", "echo two; cat %s" % gate))
    second.start()
    # the server read the second (an answer on a later connection comes
    # after it was read); the first is still waiting on its gate
    assert request(td, "GET", "/is_alive")[2] == {"is_alive": True, "message": ""}
    assert "first" not in got and "second" not in got
    gate.write_text("open\n")
    first.join(120)
    second.join(120)
    assert got["first"][0] == 200 and got["first"][2]["output"] == "one\none-ends\n"
    st, _, body = got["second"]
    assert (st, body["output"], body["exit_code"]) == (200, "two\nopen\n", 0)


class Agent:
    """swerex_client.py's `watched` scenario running: its SWEREX-STEP: lines
    read as they come"""

    def __init__(self, td, arg):
        need_venv()
        self.proc = subprocess.Popen([str(VPY), str(CLIENT), "watched", str(td.port), td.token, arg],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     cwd=str(td.home))
        self.steps, self.out = {}, []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.out.append(line)
            if line.startswith("SWEREX-STEP:"):
                name, value = json.loads(line[len("SWEREX-STEP:"):])
                self.steps[name] = value

    def step(self, name, timeout=120):
        deadline = time.monotonic() + timeout
        while name not in self.steps:
            if self.proc.poll() is not None and not self.reader.is_alive():
                break
            assert time.monotonic() < deadline, "no %s step: %s" % (name, "".join(self.out))
            time.sleep(0.05)
        assert name in self.steps, "the agent ended without %s: %s\n%s" % (
            name, "".join(self.out), self.proc.stderr.read())
        return self.steps[name]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)
        self.reader.join(30)


def test_a_person_watches_and_answers_with_od_attach(swerex, tmp_path):
    """A person attached with od-attach to a SWE-ReX session while the agent
    (the real RemoteRuntime) runs: the session is an ordinary termd
    session, swerex-<name>, listed by session.list on termd's own listener;
    od-attach shows the commands and their output while they run; read-only
    typing changes nothing; with the keyboard taken, the person answers the
    `read` the agent's command waits on, and run_in_session returns with it"""
    import test_od_attach as oda
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    watch = free_port()
    td = swerex(extra=("--listen", "127.0.0.1:%d" % watch))
    url = "ws://127.0.0.1:%d" % watch
    gates = tmp_path / "gates"
    gates.mkdir()
    agent = Agent(td, str(gates))
    viewers = []
    try:
        agent.step("created")
        # an ordinary termd session: session.list on termd's listener has it
        p = td.termctl("session", "list", env={"TERMD_URL": url, "TERMD_TOKEN": TOKEN})
        assert p.returncode == 0, p.stderr
        assert re.search(r"^\s*swerex-agent\b", p.stdout, re.M), p.stdout
        v = oda.Viewer(url, ["--url", url, "--token", TOKEN, "swerex-agent"], cols=210, rows=56)   # as README.md shows it
        viewers.append(v)
        oda.attached(v, "swerex-agent")
        (gates / "go").touch()
        # the commands and their output, as they run
        v.wait(lambda t: "echo hello-$((6*7))" in t and oda.output_line(t, "hello-42"),
               what="the first command and its output")
        assert agent.step("hello") == ["hello-42\n", 0]
        v.wait(lambda t: oda.output_line(t, "progress-1"), what="progress-1")
        for i in (1, 2):
            # the command is still running: the next line is not there yet
            assert "progress" not in agent.steps
            assert "progress-%d" % (i + 1) not in v.capture()
            assert "RUNNING" in v.status() or "running" in v.status(), v.status()
            (gates / ("G%d" % i)).touch()
            v.wait(lambda t: oda.output_line(t, "progress-%d" % (i + 1)), what="progress-%d" % (i + 1))
        assert "progress" not in agent.steps
        (gates / "G3").touch()
        v.wait(lambda t: oda.output_line(t, "finished"), what="finished")
        assert agent.step("progress") == ["progress-1\nprogress-2\nprogress-3\nfinished\n", 0]
        # the agent's command waits on a prompt; read-only, typing changes nothing
        v.wait(lambda t: "Name? " in t, what="the read prompt")
        v.type("mallory")
        v.keys("Enter")
        v.wait("read-only")
        assert "read" not in agent.steps
        # with the keyboard taken, the person answers it
        v.prefix("i")
        v.wait(" TYPING ")
        v.type("bob")
        v.keys("Enter")
        out, code = agent.step("read")
        assert code == 0 and out.endswith("hello bob\n") and "mallory" not in out, out
        v.wait(lambda t: oda.output_line(t, "hello bob"), what="hello bob")
        (gates / "end").touch()
        # the agent closed its session: the person's od-attach says so
        v.wait("session swerex-agent ended")
    finally:
        reports = [r for r in (x.kill() for x in viewers) if r]
        agent.stop()
    assert not reports, reports


def test_waiting_for_input_known_at_timeout(swerex):
    """termd does more: a command that waits for a password still times out
    as SWE-ReX's does, and extra_info says what it waits for"""
    td = swerex()
    assert request(td, "POST", "/create_session", {"session": "p"})[0] == 200
    st, _, body = request(td, "POST", "/run_in_session", {
        "command": "read -s -p 'Password: ' pw", "session": "p", "timeout": 5})
    e = body["swerexception"]
    assert e["class_path"] == "swerex.exceptions.CommandTimeoutError"
    assert e["message"] == "timeout after 5.0 seconds while running command \"read -s -p 'Password: ' pw\""
    assert e["extra_info"]["waiting_for_input"] is True
    assert e["extra_info"]["waiting"]["kind"] == "password"
    assert "Password:" in e["extra_info"]["waiting"]["prompt"]


def test_timed_out_command_runs_on_and_its_output_is_kept(swerex):
    """a command past its timeout keeps running (as in SWE-ReX); what it
    prints until it ends starts the next answer, and the next command runs
    once it ended (SWE-ReX types it into the running program)"""
    td = swerex()
    assert request(td, "POST", "/create_session", {})[0] == 200
    gate = td.home / "gate"
    st, _, body = request(td, "POST", "/run_in_session", {
        "command": "echo first; while [ ! -e %s ]; do sleep 0.05; done; echo later" % gate,
        "timeout": 0.5})
    assert body["swerexception"]["class_path"] == "swerex.exceptions.CommandTimeoutError"
    gate.touch()
    st, _, body = request(td, "POST", "/run_in_session", {"command": "echo next"})
    assert (st, body["output"], body["exit_code"]) == (200, "first\nlater\nnext\n", 0)
    st, _, body = request(td, "POST", "/run_in_session", {"command": "echo again"})
    assert body["output"] == "again\n"


def test_execute_timeout_kills_the_process_group(swerex):
    td = swerex()
    pidfile = td.home / "pids"
    st, _, body = request(td, "POST", "/execute", {
        "command": "sleep 300 & echo $! > %s; sleep 300" % pidfile, "shell": True, "timeout": 1})
    assert body["swerexception"]["message"] == "Timeout (1.0s) exceeded while running command"
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the timed-out command's background child %d outlived it" % pid)


# ------------------------------------------------------- the real clients

def test_swerex_execution_suite(swerex):
    """(a) SWE-ReX's own tests/test_execution.py through RemoteRuntime"""
    td = swerex()
    res = client(td, "execution")["results"]
    failed = {k: v for k, v in res.items() if v != "ok"}
    assert not failed, "\n\n".join("%s: %s" % kv for kv in failed.items())
    assert len(res) >= 39


def test_swerex_every_action(swerex):
    """(a) every action type through RemoteRuntime, answers exactly as
    SWE-ReX 1.4.0's own server gives them"""
    td = swerex()
    out = client(td, "actions")
    assert out["alive"] is True
    runs = out["runs"]
    assert runs["echo 'hello world'"] == ["hello world\n", 0, "SHELLPS1PREFIX"]
    assert runs["echo; echo -n x"][0] == "\nx"
    assert runs["x=42"][:2] == ["", 0]
    assert runs["echo $x"][0] == "42\n"
    assert runs["echo $unset_var"][0] == "\n"
    assert runs["A=(); false"][:2] == ["", 1]
    assert runs["echo $FROM_RC"][0] == "sourced\n"      # startup_source
    assert runs["echo $PS1"][0] == "SHELLPS1PREFIX\n"
    assert runs["printf 'a\\r\\nb\\rc'"][0] == "a\r\nb\rc"   # only \r\n becomes \n
    assert runs["cat <<EOF\nab\nEOF"][0] == "ab\n"
    assert runs["printf '\\033[31mred\\033[0m\\n'"][0] == "red\n"
    assert runs["cd /tmp && pwd"][0] == "/tmp\n"
    assert out["ignore"] == ["", None]
    assert out["raise"] == "boom: Command 'false' failed with exit code 1. Here is the output:\n''"
    assert out["expect"] == ["start\n", "Name\\? "]
    assert out["answered"] == "got bob"
    msg, extra = out["waiting"]
    assert msg.startswith("timeout after 3.0 seconds")
    assert out["interrupt"][1] == 0
    assert out["after_interrupt"] == "after\n"
    assert out["exec"] == ["o\n", "e\n", 3]
    assert out["exec_merged"] == ["o\ne\n", "", 0]
    assert [l for l in out["exec_env"] if not l.startswith(("PWD=", "SHLVL=", "_="))] == ["ONLY=this"]
    assert out["exec_cwd"].endswith("\n") and os.path.basename(out["exec_cwd"].strip()).startswith("swx-")
    assert out["exec_check"] == "Command 'false' failed with exit code 1. Stdout:\n''\nStderr:\n''"
    assert out["exec_missing"] == "[Errno 2] No such file or directory: 'nonexistprog-termd'"
    assert out["exec_timeout"] == "Timeout (0.5s) exceeded while running command"
    assert out["read"] == "héllo\n"
    assert out["read_replace"] == "a\ufffdb"
    # builtins.UnicodeDecodeError takes five arguments: RemoteRuntime
    # raises SwerexException instead (its own server's answer does the same)
    assert out["read_strict"] == "SwerexException"
    assert out["after_close_create"] == "SessionExistsError"
    assert out["after_close_run"] == ["RuntimeError", "shell not initialized"]


def test_mini_swe_agent_trajectory(swerex, tmp_path):
    """(b) mini-swe-agent's swerex environment (execute: shell, merged
    streams, cwd, timeout) runs a scripted trajectory on a git repository"""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(git + ["-C", str(repo), "add", "."], check=True)
    subprocess.run(git + ["-C", str(repo), "commit", "-qm", "init"], check=True)
    td = swerex()
    out = client(td, "agent", str(repo))
    obs = out["observations"]
    assert out["result"]["exit_status"] == "Submitted"
    assert "return a - b" in obs[0] and "<returncode>0</returncode>" in obs[0]
    assert "1 file changed" in obs[1]
    assert "<output>\n5\n</output>" in obs[2]
    # stderr merged into the output, in order
    assert "No such file or directory\nafter-error" in obs[3] and "<returncode>0</returncode>" in obs[3]
    assert "/tmp\n" in obs[4]
    assert str(repo) + "\n" in obs[5]          # each command starts in the env's cwd
    assert "<returncode>-1</returncode>" in obs[6] and "Timeout (5.0s) exceeded" in obs[6]
    assert "+    return a + b" in out["result"]["submission"]


def test_execute_after_an_upgrade_in_place(termd_factory, tmp_path):
    """The door's own ids start again after an upgrade in place while termd
    keeps its sessions and the old termd's answered ids: a detached
    session.open with a reused id was taken as a re-send (nothing opened,
    "termd could not start the process"), and an /execute named like a
    command still running from before the upgrade was answered with that
    command's output (found by the soak, issue 52)."""
    port = free_port()
    td = termd_factory(token=TOKEN, args=["--listen", "127.0.0.1:%d,api=swerex" % port])
    td.port = port

    def execute(cmd):
        return request(td, "POST", "/execute", {"command": cmd, "shell": True, "timeout": 60})

    for i in range(3):
        assert execute("echo before-%d" % i)[::2] == (200, {"stdout": "before-%d\n" % i, "stderr": "",
                                                             "exit_code": 0})
    gate = tmp_path / "gate"
    # a command still running across the upgrade (its request is cut by it)
    held = threading.Thread(target=lambda: _swallow(lambda: execute(
        "while [ ! -e %s ]; do sleep 0.05; done; echo held" % gate)), daemon=True)
    held.start()
    ev = td.events()
    deadline = time.monotonic() + 60
    while not [s for s in ev.call("session.list", {})["extras"]["sessions"]
               if s["name"].startswith("swerex-exec-") and s["alive"]]:
        assert time.monotonic() < deadline, "the held command never started"
        time.sleep(0.05)
    _, ev2, ans = upgrade(td, ev, cid="sw-up-1")
    assert ans["extras"].get("ok") is True, ans
    try:
        for i in range(6):
            assert execute("echo after-%d" % i)[::2] == (200, {"stdout": "after-%d\n" % i, "stderr": "",
                                                                "exit_code": 0})
    finally:
        gate.touch()
        held.join(60)


def test_sessions_are_kept_across_an_upgrade_in_place(termd_factory):
    """Issue 52: the door's sessions go across an upgrade in place with
    their termd sessions (two listeners, the second SWE-ReX's): a session
    made before it runs on in the same shell (its variable still set), is
    known to create_session and close_session; was: SessionDoesNotExistError,
    and create_session's 'a session named swerex-a exists'."""
    port = free_port()
    td = termd_factory(token=TOKEN, args=["--listen", "127.0.0.1:%d,api=swerex" % port])
    td.port = port

    def post(path, body):
        st, _, b = request(td, "POST", path, body)
        return st, b

    assert post("/create_session", {"session": "a"})[0] == 200
    st, b = post("/run_in_session", {"session": "a", "command": "export KEPT=before-up; cd /tmp",
                                     "timeout": 60})
    assert (st, b["exit_code"]) == (200, 0), b
    code, ev2, ans = upgrade(td, td.events(), cid="sw-up-sess")
    assert ans["extras"].get("ok") is True, ans
    st, b = post("/run_in_session", {"session": "a", "command": 'echo "$KEPT|$PWD"; false',
                                     "timeout": 60, "check": "silent"})
    assert (st, b["output"], b["exit_code"]) == (200, "before-up|/tmp\n", 1), b
    st, b = post("/create_session", {"session": "a"})
    assert (st, b["swerexception"]["class_path"]) == (
        511, "swerex.exceptions.SessionExistsError"), b
    assert post("/close_session", {"session": "a"}) == (200, {"session_type": "bash"})
    st, b = post("/run_in_session", {"session": "a", "command": "true", "timeout": 60})
    assert (st, b["swerexception"]["class_path"]) == (
        511, "swerex.exceptions.SessionDoesNotExistError"), b
    ev2.close()


def _swallow(fn):
    try:
        fn()
    except (OSError, http.client.HTTPException):
        pass


def test_an_execute_reaped_but_not_read_at_an_upgrade_comes_whole_once(termd_factory, tmp_path):
    """An /execute's program (swerex-exec-N) writes 600000 bytes and a line
    of stderr and exits 7; termd reaped it, had not read it all, and
    upgraded in place (the request is cut by it): on /events every byte
    comes once, in order, then one session.exit with 7, and the door closes
    the session once it ended (it is not left in session.list). Technique
    of test_upgrade_ended.py: termd is stopped while the program writes and
    exits, the upgrade asked for, then let go; an attempt whose upgrade
    missed the window is made again."""
    port = free_port()
    td = termd_factory(token=TOKEN, args=["--listen", "127.0.0.1:%d,api=swerex" % port])
    td.port = port
    release = tmp_path / "release"
    ev = td.events()
    seq0 = ev.ping()["seq"]
    threads = []

    def sessions(ev):
        return ev.call("session.list", {}, timeout=60)["extras"]["sessions"]

    def begin(ev, n, gate):
        script = tmp_path / ("prog-%d.sh" % n)
        script.write_text(ended_command(gate, release, n) + "\n")
        th = threading.Thread(target=lambda: _swallow(lambda: request(
            td, "POST", "/execute", {"command": "sh %s" % script, "shell": True})),
            daemon=True)   # (no timeout: no deadline goes across, on_started adopts it)
        th.start()
        threads.append(th)
        return wait_until(lambda: [x for x in sessions(ev) if x["name"].startswith("swerex-exec-")
                                   and x["alive"]], timeout=60, what="its session")[0]

    def check(ev, n, s):
        out = streams(exited_once(ev, seq0, s["name"], 7, timeout=60))
        assert out == {"stdout": "o" * BIG + "tail-%d\n" % n, "stderr": "err-%d\n" % n}, \
            (len(out["stdout"]), out["stdout"][-40:], out["stderr"])
        wait_until(lambda: s["name"] not in [x["name"] for x in sessions(ev)], timeout=60,
                   what="its session closed")
    try:
        ev = until_reaped(td, ev, tmp_path, begin, check, "sw-up-ended-%d")
        st, _, b = request(td, "POST", "/execute", {"command": "echo after", "shell": True})
        assert (st, b) == (200, {"stdout": "after\n", "stderr": "", "exit_code": 0}), b
    finally:
        release.touch()
        for th in threads:
            th.join(60)
    ev.close()


def test_an_execute_cut_by_an_upgrade_is_still_killed_at_its_timeout(termd_factory, tmp_path):
    """An /execute with a 4 s timeout whose request an upgrade in place cut:
    the new termd kills its tree at the deadline it had (was: it ran on for
    ever, the timeout lost with the request), then closes its session."""
    port = free_port()
    td = termd_factory(token=TOKEN, args=["--listen", "127.0.0.1:%d,api=swerex" % port])
    td.port = port
    gate = tmp_path / "gate"
    ev = td.events()
    seq0 = ev.ping()["seq"]
    th = threading.Thread(target=lambda: _swallow(lambda: request(
        td, "POST", "/execute", {"command": "while [ ! -e %s ]; do sleep 0.05; done" % gate,
                                 "shell": True, "timeout": 4})), daemon=True)
    th.start()
    try:
        name = wait_until(lambda: [x["name"] for x in ev.call("session.list", {})["extras"][
            "sessions"] if x["name"].startswith("swerex-exec-") and x["alive"]], timeout=60,
            what="its session")[0]
        _, ev2, ans = upgrade(td, ev, cid="sw-up-timeout")
        assert ans["extras"].get("ok") is True, ans
        exits = lambda: [e for e in replay(ev2, seq0) if e.get("observation") ==
                         "session.exit" and e["extras"].get("name") == name]
        wait_until(exits, timeout=60, what="its end by the timeout")
        ends = exits()   # (a replay after the one that saw it: no event pushed twice)
        assert len(ends) == 1 and ends[0]["extras"].get("signal") in (9, "KILL", "SIGKILL"), ends
        wait_until(lambda: name not in [x["name"] for x in ev2.call(
            "session.list", {})["extras"]["sessions"]], timeout=60, what="its session closed")
        ev2.close()
    finally:
        gate.touch()
        th.join(60)
