"""OpenHands' action execution server API on termd's listener (PROTOCOL.md §8,
reference/openhands-action-server.md): the request bodies OpenHands' client
sends (with their large tool_call_metadata and llm_metrics), every answer
checked key by key against the observation classes, ported from OpenHands'
own runtime tests (tests/runtime/test_bash.py, test_aci_edit.py,
test_ipython.py): state across commands, prompts with is_input, timeouts
and polling with '', C-c, a second command while one runs, truncation,
static runs, files, edits, unknown actions and args, auth, list, upload,
download, one action at a time, the event stream."""

import difflib
import http.client
import io
import json
import os
import socket
import threading
import time
import zipfile
from pathlib import Path

import pytest

import routes
from test_plugins import BUILT_PLUGINS, PY

T = 60
TEMPLATE = ("You may wait longer to see additional output by sending empty command '', "
            "send other commands to interact with the current process, "
            'send keys ("C-c", "C-z", "C-d") to interrupt/kill the previous command before '
            "sending your new command, or use the timeout parameter in execute_bash for future "
            "commands.")
CONTINUE = "[Below is the output of the previous command.]\n"
RUN_KEYS = {"message", "observation", "content", "extras", "success"}
RUN_EXTRAS = {"command", "metadata", "hidden"}
META_KEYS = {"exit_code", "pid", "username", "hostname", "working_dir", "py_interpreter_path",
             "prefix", "suffix"}
ERROR_KEYS = {"message", "observation", "content", "extras"}

FIXTURES = Path(__file__).resolve().parents[2] / "openhands"


# ---------------------------------------------------------------- client

def oh_body(action, args, timeout=120.0, n=[0]):
    """{"action": event_to_dict(action)} as OpenHands' client builds it: id,
    timestamp, source, message, tool_call_metadata with a whole model
    response, llm_metrics, args, timeout (fixtures/openhands/envelope.json)."""
    n[0] += 1
    env = json.loads((FIXTURES / "envelope.json").read_text())
    env["id"] = n[0]
    env["action"] = action
    env["message"] = "Running %s" % action
    env["args"] = args
    if timeout is not None:
        env["timeout"] = timeout
    return {"action": env}


def run_args(command, **kw):
    a = {"command": command, "is_input": False, "thought": "", "blocking": False,
         "is_static": False, "cwd": None, "hidden": False, "confirmation_state": "confirmed",
         "security_risk": -1}
    a.update(kw)
    return a


class OH:
    """The calls OpenHands' ActionExecutionClient makes, over one kept-alive
    connection like its httpx.Client."""

    def __init__(self, port, key=None):
        self.port = port
        self.key = key
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=T + 30)

    def request(self, method, path, body=None, headers=None, key="default"):
        self.retried = False
        h = dict(headers or {})
        k = self.key if key == "default" else key
        if k is not None:
            h["X-Session-API-Key"] = k
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        try:
            self.conn.request(method, path, body=body, headers=h)
            r = self.conn.getresponse()
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
            # termd closed the kept-alive connection after an earlier answer
            # (a refusal): a fresh one, as httpx would open
            self.retried = True
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=T + 30)
            self.conn.request(method, path, body=body, headers=h)
            r = self.conn.getresponse()
        data = r.read()
        return r.status, dict((k.lower(), v) for k, v in r.getheaders()), data

    def act(self, action, args, timeout=120.0):
        status, _, data = self.request("POST", "/execute_action", oh_body(action, args, timeout))
        assert status == 200, (status, data)
        return json.loads(data)

    def run(self, command, timeout=120.0, **kw):
        return self.act("run", run_args(command, **kw), timeout)


def oh_termd(termd_factory, token=None, args=(), env=None):
    e = {"NO_CHANGE_TIMEOUT_SECONDS": "2"}
    e.update(env or {})
    t = termd_factory(tcp=True, token=token, args=args, env=e)
    port = int(t.url.rsplit(":", 1)[1])
    return t, OH(port, key=token)


def check_run(obs, exit_code=None):
    assert set(obs) == RUN_KEYS, obs
    assert obs["observation"] == "run"
    assert set(obs["extras"]) == RUN_EXTRAS, obs
    m = obs["extras"]["metadata"]
    assert set(m) == META_KEYS, m
    if exit_code is not None:
        assert m["exit_code"] == exit_code, obs
    assert obs["message"] == "Command `%s` executed with exit code %d." % (
        obs["extras"]["command"], m["exit_code"])
    assert obs["success"] == (m["exit_code"] == 0)
    return m


def check_completed(obs, exit_code, home=None):
    m = check_run(obs, exit_code)
    assert m["suffix"] == "\n[The command completed with exit code %d.]" % exit_code, m
    assert m["prefix"] == ""
    assert m["pid"] == -1
    assert isinstance(m["username"], str) and m["username"]
    assert isinstance(m["hostname"], str) and "." not in m["hostname"]
    assert isinstance(m["py_interpreter_path"], str)
    if home is not None:
        assert m["working_dir"] == str(home)
    return m


def check_unfinished(obs, suffix, prefix=""):
    m = check_run(obs, -1)
    assert m == {"exit_code": -1, "pid": -1, "username": None, "hostname": None,
                 "working_dir": None, "py_interpreter_path": None, "prefix": prefix,
                 "suffix": suffix}, m


def no_change(n):
    return "\n[The command has no new output after %d seconds. %s]" % (n, TEMPLATE)


def timed_out(t):
    return "\n[The command timed out after %s seconds. %s]" % (t, TEMPLATE)


def check_error(obs, content=None):
    assert set(obs) == ERROR_KEYS, obs
    assert obs["observation"] == "error"
    assert obs["extras"] == {"error_id": ""}
    assert obs["message"] == obs["content"]
    if content is not None:
        assert obs["content"] == content, obs


# ------------------------------------------------------------------ bash

def test_run_exact_shape_state_and_exit_codes(termd_factory):
    t, oh = oh_termd(termd_factory)
    obs = oh.run("echo 'hello world'")
    check_completed(obs, 0, t.home)
    assert obs["content"] == "hello world"
    assert obs["extras"]["command"] == "echo 'hello world'"
    assert obs["extras"]["hidden"] is False
    # the command is stripped, as OpenHands does
    obs = oh.run("  cd /tmp && export OHV=42  \n")
    check_completed(obs, 0)
    assert obs["extras"]["command"] == "cd /tmp && export OHV=42"
    assert obs["extras"]["metadata"]["working_dir"] == "/tmp"
    obs = oh.run("echo $OHV; pwd")
    assert obs["content"] == "42\n/tmp"
    obs = oh.run("nonexistent_command")
    check_completed(obs, 127)
    assert "nonexistent_command: command not found" in obs["content"]
    assert obs["success"] is False
    obs = oh.run("echo 'hello   world    with\nspecial  chars'")
    assert "hello   world    with\nspecial  chars" in obs["content"]
    # several commands at once run as one unit (termd's reading: not refused)
    obs = oh.run('echo "first" && echo "second" && echo "third"')
    assert obs["content"] == "first\nsecond\nthird"
    obs = oh.run("for i in 1 2 3\ndo\n  echo line $i\ndone")
    check_completed(obs, 0)
    assert obs["content"] == "line 1\nline 2\nline 3"
    obs = oh.run("cat << EOF\nline 1\nline 2\nEOF")
    assert obs["content"] == "line 1\nline 2"
    obs = oh.run("false")
    check_completed(obs, 1)
    obs = oh.run("echo hidden", hidden=True)
    check_completed(obs, 0)
    assert obs["extras"]["hidden"] is True


def test_interactive_prompt_with_is_input(termd_factory):
    # long enough for python3 to start on a busy machine; a prompt is seen
    # sooner (termd notices the program reading the terminal)
    t, oh = oh_termd(termd_factory, env={"NO_CHANGE_TIMEOUT_SECONDS": "4"})
    obs = oh.run('read -p "Enter name: " name && echo "Hello $name"', timeout=None)
    assert "Enter name:" in obs["content"], obs
    check_unfinished(obs, no_change(4))
    obs = oh.run("John", is_input=True, timeout=None)
    check_completed(obs, 0)
    assert obs["content"].endswith("Hello John"), obs
    assert obs["extras"]["command"] == "John"
    # python reading input
    obs = oh.run("python3 -c \"x=input('Enter your name: '); print('Hello ' + x)\"", timeout=None)
    assert "Enter your name:" in obs["content"]
    check_unfinished(obs, no_change(4))
    obs = oh.run("Alice", is_input=True, timeout=None)
    check_completed(obs, 0)
    assert "Hello Alice" in obs["content"]


def test_empty_command_and_input_with_nothing_running(termd_factory):
    t, oh = oh_termd(termd_factory)
    for cmd, is_input, text in (
            ("", False, "ERROR: No previous running command to retrieve logs from."),
            ("hello", True, "ERROR: No previous running command to interact with.")):
        obs = oh.run(cmd, is_input=is_input)
        check_run(obs, -1)
        assert obs["content"] == text
        assert obs["extras"]["command"] == ""
        assert obs["extras"]["metadata"]["suffix"] == ""
        assert obs["extras"]["metadata"]["username"] is None


def test_timeout_poll_not_executed_and_ctrl_c(termd_factory):
    t, oh = oh_termd(termd_factory)
    loop = ("python3 -u -c \"import time,signal,sys\n"
            "signal.signal(signal.SIGINT, lambda *a: (print('interrupted'), sys.exit(0)))\n"
            "i=0\nwhile True:\n    print('tick', i); i+=1; time.sleep(0.3)\"")
    obs = oh.run(loop, timeout=4.0, blocking=True)
    check_unfinished(obs, timed_out("4.0"))
    assert "tick 0" in obs["content"], obs
    first = obs["content"]
    # polling with '' returns what is new, with OpenHands' continuation prefix
    obs = oh.run("", timeout=1.5, blocking=True)
    check_unfinished(obs, timed_out("1.5"), prefix=CONTINUE)
    assert obs["extras"]["command"] == ""
    assert "tick" in obs["content"] and obs["content"] not in first
    # a second command while one runs is NOT executed
    obs = oh.run("ls /", timeout=5.0)
    m = check_run(obs, -1)
    assert m["suffix"] == (
        '\n[Your command "ls /" is NOT executed. The previous command is still running - You '
        "CANNOT send new commands until the previous command is completed. By setting "
        "`is_input` to `true`, you can interact with the current process: %s]" % TEMPLATE)
    assert m["prefix"] == CONTINUE
    assert "bin" not in obs["content"].split("\n")
    # C-c ends it: exit code from the program, CTRL+C in the suffix
    obs = oh.run("C-c", is_input=True, timeout=10.0)
    m = check_run(obs, 0)
    assert m["suffix"] == "\n[The command completed with exit code 0. CTRL+C was sent.]"
    assert "interrupted" in obs["content"]
    obs = oh.run("ls /", timeout=5.0)
    check_completed(obs, 0)
    assert "interrupted" not in obs["content"]
    # a soft timeout (no new output), non-blocking; a sleep interrupted by C-c is 130
    obs = oh.run("sleep 30")
    check_unfinished(obs, no_change(2))
    obs = oh.run("C-c", is_input=True)
    m = check_run(obs, 130)
    assert m["suffix"] == "\n[The command completed with exit code 130. CTRL+C was sent.]"


def test_truncation_at_30000_characters(termd_factory):
    t, oh = oh_termd(termd_factory)
    obs = oh.run("seq 1 20000", timeout=60.0)
    check_completed(obs, 0)
    full = "\n".join(str(i) for i in range(1, 20001))
    assert len(full) > 30000
    want = full[:15000] + "\n[... Observation truncated due to length ...]\n" + full[-15000:]
    assert obs["content"] == want
    # hidden commands are not truncated
    obs = oh.run("seq 1 20000", timeout=60.0, hidden=True)
    assert obs["content"] == full
    # just under the limit: whole
    obs = oh.run("python3 -c \"print('x'*29999)\"", timeout=60.0)
    assert obs["content"] == "x" * 29999


def test_static_run_in_its_own_shell(termd_factory, tmp_path):
    t, oh = oh_termd(termd_factory)
    d = tmp_path / "static dir"
    d.mkdir()
    oh.run("cd /tmp && export MAINVAR=1")
    obs = oh.run("pwd; echo [$MAINVAR]", is_static=True, cwd=str(d), hidden=True)
    check_completed(obs, 0)
    assert obs["content"] == "%s\n[]" % d
    assert obs["extras"]["hidden"] is True
    obs = oh.run("pwd; echo $MAINVAR")
    assert obs["content"] == "/tmp\n1"
    obs = oh.run("true", is_static=True, cwd=str(tmp_path / "missing"))
    check_error(obs)


# ----------------------------------------------------------------- files

def read_args(path, **kw):
    a = {"path": path, "start": 0, "end": -1, "thought": "", "security_risk": -1,
         "impl_source": "default", "view_range": None}
    a.update(kw)
    return a


def write_args(path, content, **kw):
    a = {"path": path, "content": content, "start": 0, "end": -1, "thought": "",
         "security_risk": -1}
    a.update(kw)
    return a


def edit_args(path, command, **kw):
    a = {"path": path, "command": command, "file_text": None, "old_str": None, "new_str": None,
         "insert_line": None, "content": "", "start": 1, "end": -1, "thought": "",
         "security_risk": -1, "impl_source": "oh_aci"}
    a.update(kw)
    return a


def py_read_lines(all_lines, start=0, end=-1):
    """OpenHands' read_lines, to compare with."""
    start = max(start, 0)
    start = min(start, len(all_lines))
    end = -1 if end == -1 else max(end, 0)
    end = min(end, len(all_lines))
    if end == -1:
        return all_lines if start == 0 else all_lines[start:]
    num_lines = len(all_lines)
    begin = max(0, min(start, num_lines - 2))
    end = -1 if end > num_lines else max(begin + 1, end)
    return all_lines[begin:end]


def py_insert_lines(to_insert, original, start=0, end=-1):
    new_lines = [""] if start == 0 else original[:start]
    new_lines += [i + "\n" for i in to_insert]
    new_lines += [""] if end == -1 else original[end:]
    return new_lines


def test_read_and_write_default(termd_factory):
    t, oh = oh_termd(termd_factory)
    home = t.home
    obs = oh.act("write", write_args("sub/new.txt", "hi\nthere"))
    path = "%s/sub/new.txt" % home
    assert obs == {"message": "I wrote to the file %s." % path, "observation": "write",
                   "content": "", "extras": {"path": path}}
    assert Path(path).read_text() == "hi\nthere\n"
    assert oct(os.stat(path).st_mode & 0o777) == "0o664"
    obs = oh.act("read", read_args("sub/new.txt"))
    assert obs == {"message": "I read the file %s." % path, "observation": "read",
                   "content": "hi\nthere\n",
                   "extras": {"path": path, "impl_source": "default"}}
    text = "".join("line %d\n" % i for i in range(10))
    Path(path).write_text(text)
    lines = text.splitlines(keepends=True)
    for s, e in ((0, -1), (2, 5), (3, -1), (0, 1), (8, 20), (9, 9), (-3, 4)):
        obs = oh.act("read", read_args(path, start=s, end=e))
        assert obs["content"] == "".join(py_read_lines(lines, s, e)), (s, e)
    for s, e in ((0, -1), (2, 5), (3, -1), (0, 1)):
        Path(path).write_text(text)
        oh.act("write", write_args(path, "new a\nnew b", start=s, end=e))
        want = "".join(py_insert_lines(["new a", "new b"], lines, s, e))
        assert Path(path).read_text() == want, (s, e)
    # errors, in OpenHands' words
    obs = oh.act("read", read_args("nope.txt"))
    check_error(obs, "File not found: %s/nope.txt. Your current working directory is %s."
                % (home, home))
    obs = oh.act("read", read_args(str(home)))
    check_error(obs, "Path is a directory: %s. You can only read files" % home)
    Path(home, "bin.dat").write_bytes(b"\x00\x01\x02binary")
    obs = oh.act("read", read_args("bin.dat"))
    check_error(obs, "ERROR_BINARY_FILE")
    obs = oh.act("write", write_args(str(home), "x"))
    check_error(obs, "Path is a directory: %s. You can only write to files" % home)
    # relative paths follow the shell's cwd
    oh.run("mkdir -p deeper && cd deeper")
    obs = oh.act("write", write_args("f.txt", "in deeper"))
    assert obs["extras"]["path"] == "%s/deeper/f.txt" % home


def test_read_oh_aci_view(termd_factory):
    t, oh = oh_termd(termd_factory)
    p = t.home / "v.py"
    p.write_text("a = 1\nb = 2\nc = 3\n")
    obs = oh.act("read", read_args(str(p), impl_source="oh_aci", view_range=[2, 3]))
    assert set(obs["extras"]) == {"path", "impl_source"}
    assert obs["extras"] == {"path": str(p), "impl_source": "oh_aci"}
    assert obs["content"].endswith("     2\tb = 2\n     3\tc = 3") or \
        obs["content"].endswith("     2\tb = 2\n     3\tc = 3\n"), obs
    obs = oh.act("read", read_args(str(t.home / "missing.py"), impl_source="oh_aci"))
    assert obs["observation"] == "read" and obs["content"].startswith("ERROR:\n"), obs
    obs = oh.act("read", read_args("v.py", impl_source="oh_aci"))
    assert obs["content"] == (
        "ERROR:\nInvalid `path` parameter: v.py. The path should be an absolute path, starting "
        "with `/`. Maybe you meant %s?" % p), obs


def get_diff(old, new, path):
    d = difflib.unified_diff(old.split("\n"), new.split("\n"), fromfile=path, tofile=path, n=0)
    return "\n".join(x.rstrip() for x in d)


def test_edit_commands_in_aci_format(termd_factory):
    t, oh = oh_termd(termd_factory)
    p = str(t.home / "e.txt")
    keys = {"path", "prev_exist", "old_content", "new_content", "impl_source", "diff",
            "_diff_cache"}
    obs = oh.act("edit", edit_args(p, "create", file_text="one\ntwo\nthree\n"))
    assert set(obs) == {"message", "observation", "content", "extras"}
    assert obs["observation"] == "edit" and obs["message"] == "I edited the file %s." % p
    assert set(obs["extras"]) == keys
    assert obs["content"] == "File created successfully at: %s" % p
    assert obs["extras"]["diff"] == get_diff("", "one\ntwo\nthree\n", p)
    obs = oh.act("edit", edit_args(p, "str_replace", old_str="two", new_str="TWO"))
    assert obs["content"].startswith("The file %s has been edited. Here's the result of running "
                                     "`cat -n` on a snippet of %s:\n" % (p, p)), obs
    assert obs["content"].endswith("Review the changes and make sure they are as expected. "
                                   "Edit the file again if necessary.")
    ex = obs["extras"]
    assert (ex["old_content"], ex["new_content"], ex["impl_source"], ex["prev_exist"],
            ex["_diff_cache"]) == ("two", "TWO", "oh_aci", False, None)
    assert ex["diff"] == get_diff("one\ntwo\nthree\n", "one\nTWO\nthree\n", p)
    obs = oh.act("edit", edit_args(p, "insert", insert_line="1", new_str="inserted"))
    assert Path(p).read_text() == "one\ninserted\nTWO\nthree\n"
    assert obs["extras"]["diff"] == get_diff("one\nTWO\nthree\n", "one\ninserted\nTWO\nthree\n", p)
    obs = oh.act("edit", edit_args(p, "undo_edit"))
    assert Path(p).read_text() == "one\nTWO\nthree\n"
    obs = oh.act("edit", edit_args(p, "str_replace", old_str="absent", new_str="x"))
    assert obs["content"].startswith("ERROR:\nNo replacement was performed"), obs
    assert obs["extras"]["diff"] == ""
    obs = oh.act("edit", edit_args(p, "view"))
    assert obs["content"].endswith("     1\tone\n     2\tTWO\n     3\tthree") or \
        "     2\tTWO" in obs["content"], obs
    obs = oh.act("edit", edit_args(p, "insert", insert_line="x", new_str="y"))
    assert obs["content"] == "ERROR:\nInvalid insert_line value: 'x'. Expected an integer."
    obs = oh.act("edit", edit_args("rel.txt", "create", file_text="x"))
    assert obs["content"] == ("ERROR:\nInvalid `path` parameter: rel.txt. The path should be an "
                              "absolute path, starting with `/`.")


# ------------------------------------------------------ plugins' actions

def test_ipython_and_browse_without_plugins(termd_factory):
    t, oh = oh_termd(termd_factory)
    obs = oh.act("run_ipython", {"code": "print(1+1)", "thought": "", "include_extra": True,
                                 "confirmation_state": "confirmed", "security_risk": -1,
                                 "kernel_init_code": ""})
    check_error(obs, "JupyterRequirement not found. Unable to run IPython action.")
    obs = oh.act("browse", {"url": "http://example.invalid", "thought": "", "security_risk": -1,
                            "return_axtree": False})
    check_error(obs, "Browser functionality is not supported or disabled.")
    obs = oh.act("browse_interactive", {"browser_actions": "noop()", "thought": "",
                                        "browsergym_send_msg_to_user": "", "security_risk": -1,
                                        "return_axtree": False})
    check_error(obs, "Browser functionality is not supported or disabled.")


def test_ipython_through_the_jupyter_plugin(termd_factory, tmp_path):
    if not (BUILT_PLUGINS / "jupyter" / "termd-jupyter").exists():
        pytest.fail("built plugins not found in %s (make all)" % BUILT_PLUGINS)
    t, oh = oh_termd(termd_factory, args=["--plugins", "jupyter", "--plugin-dir",
                                          str(BUILT_PLUGINS), "--state-dir",
                                          str(tmp_path / "state")],
                     env={"TERMD_JUPYTER_PYTHON": PY})
    args = {"code": "print('Hello, `World`!\\n')", "thought": "", "include_extra": True,
            "confirmation_state": "confirmed", "security_risk": -1, "kernel_init_code": ""}
    obs = oh.act("run_ipython", args, timeout=180.0)
    assert set(obs) == {"message", "observation", "content", "extras", "success"}, obs
    assert obs["observation"] == "run_ipython" and obs["success"] is True
    assert obs["message"] == "Code executed in IPython cell."
    assert obs["extras"] == {"code": args["code"], "image_urls": None}
    lines = obs["content"].split("\n")
    assert lines[0] == "Hello, `World`!"
    assert lines[1] == "[Jupyter current working directory: %s]" % t.home, obs
    assert lines[2].startswith("[Jupyter Python interpreter: /") and len(lines) == 3
    obs = oh.act("run_ipython", dict(args, code="x = 1", include_extra=False))
    assert obs["content"] == "[Code executed successfully with no output]"
    # the kernel follows the shell's cwd
    oh.run("cd /tmp")
    obs = oh.act("run_ipython", dict(args, code="import os; print(os.getcwd())",
                                     include_extra=False))
    assert obs["content"] == "/tmp"


# ------------------------------------------------- protocol and transport

def test_bad_bodies_unknown_actions_and_args(termd_factory):
    t, oh = oh_termd(termd_factory)
    for body, err in ((b"not json", "json_invalid"), (b'{"nope": 1}', "missing"),
                      (b'{"action": "run"}', "dict_type")):
        status, headers, data = oh.request("POST", "/execute_action", body,
                                           {"Content-Type": "application/json"})
        assert status == 422, (status, data)
        j = json.loads(data)
        assert j["detail"] == "Invalid request parameters" and err in j["errors"]
    obs = oh.act("frobnicate", {"x": 1})
    check_error(obs)
    assert "frobnicate" in obs["content"]
    obs = oh.act("message", {"content": "hi"})
    check_error(obs)
    # unknown keys in args are ignored
    obs = oh.run("echo ok", some_future_arg={"a": 1})
    check_completed(obs, 0)
    status, _, data = oh.request("GET", "/execute_action")
    assert status == 405
    status, _, data = oh.request("GET", "/no/such/route")
    assert status == 404


def test_auth_by_session_api_key(termd_factory, tmp_path):
    t, oh = oh_termd(termd_factory, token="sekrit-key")
    for path in ("/alive", "/server_info"):
        status, _, data = oh.request("GET", path, key=None)
        assert status == 200, path
    status, _, data = oh.request("GET", "/alive", key=None)
    assert json.loads(data) == {"status": "ok"}
    status, _, data = oh.request("GET", "/server_info", key=None)
    info = json.loads(data)
    # (V1 adds its fields to the same route: ohv1/v1.c)
    assert {"uptime", "idle_time", "resources"} <= set(info)
    assert set(info["resources"]) == {"cpu_percent", "memory", "disk", "io"}
    assert set(info["resources"]["memory"]) == {"rss", "vms", "percent"}
    assert set(info["resources"]["disk"]) == {"total", "used", "free", "percent"}
    assert set(info["resources"]["io"]) == {"read_bytes", "write_bytes"}
    # every OpenHands route that acts (routes.py's table)
    calls = [routes.fill(r, home=str(tmp_path), cast="x.cast") for r in routes.ROUTES
             if r["door"] == "openhands" and r["access"] == "full"]
    assert len(calls) == 5, calls
    for key in (None, "wrong", "sekrit-ke"):
        for r in calls:
            body = oh_body("run", run_args("echo x")) if r["path"] == "/execute_action" else \
                r["body"] or None
            status, _, data = oh.request(r["method"], r["path"], body, key=key)
            assert status == 403, (key, r["path"])
            assert json.loads(data) == {"detail": "Invalid API Key"}
    assert not (tmp_path / "up").exists()   # the refused upload wrote nothing
    status, _, data = oh.request("GET", "/vscode/connection_token")
    assert (status, json.loads(data)) == (200, {"token": None})
    obs = oh.run("echo authorized")
    assert obs["content"] == "authorized"


def test_list_upload_download(termd_factory, tmp_path):
    t, oh = oh_termd(termd_factory)
    home = t.home
    for d in ("Zeta", "alpha", ".hidden"):
        (home / d).mkdir()
    for f in ("b.txt", "A.txt", ".dot"):
        (home / f).write_text(f)
    os.symlink("/nonexistent", str(home / "dangling"))
    status, _, data = oh.request("POST", "/list_files", {})
    entries = json.loads(data)
    assert [e for e in entries if e not in ("termd.log",)] == \
        [".hidden/", "alpha/", "Zeta/", ".dot", "A.txt", "b.txt"] or \
        entries[:3] == [".hidden/", "alpha/", "Zeta/"], entries
    assert "dangling" not in entries
    status, _, data = oh.request("POST", "/list_files", {"path": "alpha"})
    assert json.loads(data) == []
    for body in ({"path": "/no/such"}, {"path": str(home / "b.txt")}):
        status, _, data = oh.request("POST", "/list_files", body)
        assert (status, json.loads(data)) == (200, [])

    def upload(dest, name, content, recursive=False):
        boundary = "----ohtest%d" % time.monotonic_ns()
        body = ("--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s\"\r\n"
                "Content-Type: application/octet-stream\r\n\r\n" % (boundary, name)).encode() + \
            content + ("\r\n--%s--\r\n" % boundary).encode()
        q = "/upload_file?destination=%s&recursive=%s" % (dest, "true" if recursive else "false")
        return oh.request("POST", q, body,
                          {"Content-Type": "multipart/form-data; boundary=%s" % boundary})

    dest = tmp_path / "up" / "dest"
    status, _, data = upload(str(dest), "one.bin", b"\x00\x01bytes\r\n--not-a-boundary")
    assert status == 200, data
    assert json.loads(data) == {"filename": "one.bin", "destination": str(dest),
                                "recursive": False}
    assert (dest / "one.bin").read_bytes() == b"\x00\x01bytes\r\n--not-a-boundary"
    # a zip (as copy_to makes it: deflated, folders relative) is unpacked, even not recursive
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("proj/src/main.py", "print('hi')\n" * 100)
        z.writestr("proj/README", "readme")
        z.writestr("proj/empty/", "")
        z.writestr("../escape.txt", "no")
    status, _, data = upload(str(dest), "proj.zip", buf.getvalue(), recursive=True)
    assert status == 200, data
    assert (dest / "proj/src/main.py").read_text() == "print('hi')\n" * 100
    assert (dest / "proj/README").read_text() == "readme"
    assert (dest / "proj/empty").is_dir()
    assert not (dest / "proj.zip").exists()
    assert not (dest.parent / "escape.txt").exists()
    # a symlink planted in the destination is never gone through: the entry
    # is refused, named with what is in the way, nothing written elsewhere
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(str(outside), str(dest / "planted"))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("planted/x.txt", "no")
    status, _, data = upload(str(dest), "link.zip", buf.getvalue(), recursive=True)
    assert (status, json.loads(data)) == (500, {"detail": (
        "[Errno 20] Not a directory: cannot make the folder of "
        "'planted/x.txt' (a symlink or a file is in the way)")})
    assert list(outside.iterdir()) == []
    status, _, data = upload(str(dest), "plain.txt", b"x", recursive=True)
    assert (status, json.loads(data)) == (500, {"detail": "400: Recursive uploads must be zip files"})
    status, _, data = upload("relative/dir", "plain.txt", b"x")
    assert (status, json.loads(data)) == (500, {"detail": "400: Destination must be an absolute path"})
    status, _, data = upload(str(dest), "bad.zip", b"PK not really a zip")
    assert status == 500
    # download: a zip of the folder, names relative to it
    status, headers, data = oh.request("GET", "/download_files?path=%s" % (dest / "proj"))
    assert status == 200
    assert headers["content-type"] == "application/zip"
    assert headers["content-disposition"] == 'attachment; filename="proj.zip"'
    z = zipfile.ZipFile(io.BytesIO(data))
    assert z.testzip() is None
    assert sorted(z.namelist()) == ["README", "src/main.py"]
    assert z.read("src/main.py") == b"print('hi')\n" * 100
    # a file path gives an empty zip; errors as OpenHands reports them
    status, _, data = oh.request("GET", "/download_files?path=%s" % (dest / "one.bin"))
    assert status == 200 and zipfile.ZipFile(io.BytesIO(data)).namelist() == []
    status, _, data = oh.request("GET", "/download_files?path=%s" % (dest / "missing"))
    assert (status, json.loads(data)) == (500, {"detail": "404: File not found"})
    status, _, data = oh.request("GET", "/download_files?path=relative")
    assert (status, json.loads(data)) == (500, {"detail": "400: Path must be an absolute path"})


def test_body_over_max_frame_is_413(termd_factory):
    t, oh = oh_termd(termd_factory, args=["--max-frame", "100000"])
    status, _, data = oh.request("POST", "/execute_action",
                                 oh_body("run", run_args("echo " + "x" * 200000)))
    assert status == 413
    oh = OH(oh.port)
    assert oh.run("echo still")["content"] == "still"


def test_one_at_a_time_and_on_the_event_stream(termd_factory):
    t, oh = oh_termd(termd_factory)
    ev = t.events()
    ev.call("subscribe", {})
    port = oh.port
    done = []

    def post(cmd):
        c = OH(port)
        obs = c.run(cmd, timeout=30.0)
        done.append((obs["content"], c.retried, obs["extras"]["metadata"]["suffix"][:40]))

    a = threading.Thread(target=post, args=("sleep 1.5; echo first",))
    a.start()
    # A's own start (not some earlier command's): B is sent while A runs
    ev.wait_for(lambda o: o.get("observation") == "command.start" and
                "echo first" in str((o.get("extras") or {}).get("command")), timeout=T)
    b = threading.Thread(target=post, args=("echo second",))
    b.start()
    a.join(T)
    b.join(T)
    # each got its own output (the order the two client threads saw their
    # answers in is the threads' scheduling, not termd's)
    assert sorted(d[0] for d in done) == ["first", "second"], done
    # termd ran them one at a time: B's command started after A's ended,
    # and the answers went out in that order, caused by termd's own ids
    order, seen = [], []

    def note(o):
        kind, x = o.get("observation"), o.get("extras") or {}
        if kind == "command.start":
            order.append((kind, x.get("command")))
        if kind == "command.end":   # A's is the one that slept 1.5 s
            order.append((kind, (x.get("duration_ms") or 0) >= 1400))
        if kind == "run" and str(o.get("cause", "")).startswith("openhands-"):
            seen.append(o["content"].strip())
        return len(seen) == 2

    ev.wait_for(note, timeout=T)
    assert seen == ["first", "second"], seen
    starts = [i for i, (k, c) in enumerate(order) if k == "command.start" and "echo second" in str(c)]
    a_end = [i for i, (k, slept) in enumerate(order) if k == "command.end" and slept]
    assert starts and a_end and a_end[0] < starts[0], order


def test_client_leaving_mid_action_does_not_stall(termd_factory):
    t, oh = oh_termd(termd_factory)
    s = socket.create_connection(("127.0.0.1", oh.port))
    body = json.dumps(oh_body("run", run_args("sleep 1; echo gone"), 10.0)).encode()
    s.sendall(b"POST /execute_action HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    time.sleep(0.2)
    s.close()
    obs = oh.run("echo next", timeout=30.0)
    assert obs["content"] == "next"


def test_insecure_no_token_serves_and_says_so(termd_factory, tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    t = termd_factory(listen="0.0.0.0:%d" % port, args=["--insecure-no-token"])
    status, _, body = t.healthz()
    assert status == 200 and json.loads(body)["insecure_no_token"] is True
    assert "WITHOUT A TOKEN" in t.log.read_text()
    obs = OH(port).run("echo open")
    assert obs["content"] == "open"
