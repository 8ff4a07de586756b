"""Issue 37 / PROTOCOL.md §11: upgrade in place. termd.upgrade (and
SIGUSR2) hand the sessions, the listener and the event stream to a new
binary with the same pid: a shell's cwd and exports survive, a client
connecting meanwhile is never refused, `subscribe since` has no gap, a
binary that refuses the record (/bin/false) leaves the old termd serving,
a full-screen program's screen is the same cell for cell."""

import json
import os
import signal
import threading
import time

import pytest

import wsclient
from conftest import TERMD_BIN
from tdtest import run_done, content, fmt, upgrade_while_connecting, wait_until
from tdtest import UPGRADE_T as T, reconnect, upgrade, wait_closed  # noqa: F401 — other groups' tests import them from here too


def test_shell_state_survives_an_upgrade(termd):
    ev = termd.events()
    pid = termd.proc.pid
    sub = os.path.join(str(termd.home), "work dir")
    os.mkdir(sub)
    run_done(ev, "cd %r && export TD_UP=kept-1 && VIRTUAL_ENV=/opt/venv; PATH=/opt/venv/bin:$PATH"
             % sub)
    lists = ev.call("session.list", {}, timeout=T)
    shell_pid = [s for s in lists["extras"]["sessions"] if s["name"] == "main"][0].get("pid")
    before = json.loads(termd.healthz()[2])
    assert before.get("upgraded") == 0, before

    code, ev2, ans = upgrade(termd, ev)
    assert code == 1012, code
    assert ans.get("observation") == "termd.upgrade", fmt(ans)
    assert ans["extras"].get("ok") is True, fmt(ans)
    assert termd.proc.pid == pid and termd.alive()

    obs = run_done(ev2, 'echo "$PWD|$TD_UP|$VIRTUAL_ENV|${PATH%%:*}"')
    assert content(obs).strip() == "%s|kept-1|/opt/venv|/opt/venv/bin" % sub, fmt(obs)
    lists = ev2.call("session.list", {}, timeout=T)
    assert [s for s in lists["extras"]["sessions"] if s["name"] == "main"][0].get("pid") == shell_pid
    after = json.loads(termd.healthz()[2])
    assert after.get("upgraded") == 1, after
    assert isinstance(after.get("started"), str), after
    # and again, by SIGUSR2 this time
    os.kill(pid, signal.SIGUSR2)
    wait_closed(ev2)
    ev3 = reconnect(termd)
    obs = run_done(ev3, 'echo "$PWD|$TD_UP"')
    assert content(obs).strip() == "%s|kept-1" % sub, fmt(obs)
    assert json.loads(termd.healthz()[2]).get("upgraded") == 2


def test_failed_check_keeps_serving(termd):
    ev = termd.events()
    ev.call("subscribe", {}, timeout=T)
    run_done(ev, "export TD_UP=still")
    ans = ev.call("termd.upgrade", {"binary": "/bin/false"}, timeout=T)
    # the one answer a subscriber sees for it is the refusal
    told = [o for o in ev.others if o.get("observation") == "termd.upgrade"]
    assert not told, [fmt(o) for o in told]
    assert ans.get("observation") == "termd.upgrade", fmt(ans)
    assert ans["extras"].get("ok") is False, fmt(ans)
    assert "check-handover" in ans["extras"].get("message", ""), fmt(ans)
    # the same connection goes on
    obs = run_done(ev, 'echo "$TD_UP"')
    assert content(obs).strip() == "still", fmt(obs)
    assert json.loads(termd.healthz()[2]).get("upgraded") == 0
    ans = ev.call("termd.upgrade", {"binary": "/nonexistent/termd"}, timeout=T)
    assert ans["extras"].get("ok") is False, fmt(ans)
    assert ev.ping().get("observation") == "pong"


def test_view_token_cannot_upgrade(termd_factory, tmp_path):
    vt = tmp_path / "view"
    vt.write_text("view-secret\n")
    td = termd_factory(args=["--view-token-file", str(vt)], token="full-secret")
    ev = td.events(token="view-secret")
    ans = ev.call("termd.upgrade", {}, timeout=T)
    assert ans.get("observation") == "error", fmt(ans)
    assert json.loads(td.healthz()[2]).get("upgraded") == 0


def test_subscribe_since_has_no_gap(termd):
    ev = termd.events()
    ev.call("subscribe", {}, timeout=T)
    run_done(ev, "echo one")
    seq0 = ev.ping()["seq"]
    run_done(ev, "echo two")
    code, ev2, ans = upgrade(termd, ev)
    assert ans["extras"].get("ok") is True, fmt(ans)
    run_done(ev2, "echo three")
    cid = ev2.send_action("subscribe", {"since": seq0})
    got = []
    while True:
        o = ev2.recv_obs(T)
        if o.get("cause") == cid:
            break
        got.append(o)
    assert got, "nothing replayed"
    assert all(o.get("observation") != "gap" for o in got), [fmt(o)[:200] for o in got]
    seqs = [o["seq"] for o in got]
    assert seqs == list(range(seq0 + 1, seqs[-1] + 1)), seqs
    texts = [o.get("content", "") for o in got if o.get("observation") == "command.end"
             or o.get("observation") == "run"]
    assert any("two" in t for t in texts) and any("three" in t for t in texts), \
        [fmt(o)[:200] for o in got]


def test_connect_loop_sees_no_refusal(termd_factory):
    td = termd_factory(tcp=True)
    ev = td.events()
    host, port = td.url.split("//")[1].split(":")
    ev2, ans, connects, errors = upgrade_while_connecting(td, ev, [(host, int(port))])
    assert ans["extras"].get("ok") is True, fmt(ans)
    assert not errors, errors[:5]
    assert connects > 20
    assert ev2.ping().get("observation") == "pong"


def test_full_screen_program_same_cells(termd):
    if not any(os.access(os.path.join(d, "vim"), os.X_OK) for d in os.environ.get("PATH", "").split(":")):
        pytest.skip("vim not installed")
    ev = termd.events()
    f = os.path.join(str(termd.home), "notes.txt")
    with open(f, "w") as fh:
        fh.write("".join("line %d of the file\n" % i for i in range(60)))
    obs = ev.call("run", {"command": "vim -u NONE -N %s" % f, "timeout": 2}, timeout=T)

    def screen_if(ok):
        scr = ev.call("screen", {}, timeout=T)
        return scr if ok(scr) else None

    wait_until(lambda: screen_if(lambda scr: "line 0 of the file" in content(scr) and
                                 "notes.txt" in content(scr)), T, 0.05, what="vim's first screen")
    ev.call("keys", {"keys": ["j", "j", "j", "l", "l"]}, timeout=T)
    # the screen once vim has moved its cursor there (line 4, column 3):
    # the keys' answer comes after 100 ms of quiet, which a loaded vim can
    # let pass before it moves at all, and 'before' would miss the move
    def cursor(scr):
        cur = (scr.get("extras") or {}).get("cursor") or {}
        return cur.get("row"), cur.get("col")

    before = wait_until(lambda: screen_if(lambda scr: cursor(scr) == (3, 2)), T, 0.05,
                        what="vim's cursor at row 3, column 2")
    code, ev2, ans = upgrade(termd, ev)
    assert ans["extras"].get("ok") is True, fmt(ans)
    after = ev2.call("screen", {}, timeout=T)
    assert content(after) == content(before)
    for k in ("cursor", "cursor_visible", "alt_screen", "title", "scrollback_lines", "rows", "cols"):
        if k in (before.get("extras") or {}):
            assert after["extras"].get(k) == before["extras"][k], (k, fmt(before), fmt(after))
    # vim still reads its keys; once it is gone the shell runs commands
    ev2.call("keys", {"keys": [":", "q", "!", "Enter"]}, timeout=T)
    deadline = time.monotonic() + T
    while True:
        obs = ev2.call("run", {"command": "echo back"}, timeout=T)
        if obs.get("observation") == "run":
            break
        assert obs.get("extras", {}).get("code") == "busy", fmt(obs)
        assert time.monotonic() < deadline, fmt(obs)
        time.sleep(0.05)
    assert obs["extras"].get("exit_code") == 0, fmt(obs)
    assert content(obs).strip() == "back", fmt(obs)
    assert obs is not None


def test_termctl_upgrade(termd):
    r = termd.termctl("run", "export TD_UP=by-termctl")
    assert r.returncode == 0, r.stderr
    r = termd.termctl("upgrade", timeout=T)
    assert r.returncode == 0 and r.stdout.strip() == "upgraded", (r.returncode, r.stdout, r.stderr)
    assert json.loads(termd.healthz()[2]).get("upgraded") == 1
    r = termd.termctl("upgrade", "--binary", "/bin/false", timeout=T)
    assert r.returncode == 1 and "check-handover" in r.stderr, (r.returncode, r.stdout, r.stderr)
    r = termd.termctl("run", 'echo "$TD_UP"')
    assert r.returncode == 0 and r.stdout.strip() == "by-termctl", (r.stdout, r.stderr)


def test_pipe_session_and_second_shell_survive(termd):
    """A pipe session (stdin, stdout and stderr apart) and a second shell
    go across: the same pids, stdin still written, both streams still read,
    the exit code still told."""
    ev = termd.events()
    o = ev.call("session.open", {"name": "cat", "kind": "pipe", "stdin": True,
                                 "command": "cat; echo bye >&2; exit 7"}, timeout=T)
    assert o["observation"] == "session.open", fmt(o)
    o = ev.call("session.open", {"name": "second"}, timeout=T)
    assert o["observation"] == "session.open", fmt(o)
    run_done(ev, "cd / && export TWO=2", session="second")
    pids = {s["name"]: s.get("pid") for s in ev.call("session.list", {}, timeout=T)["extras"]["sessions"]}
    code, ev2, ans = upgrade(termd, ev)
    assert ans["extras"].get("ok") is True, fmt(ans)
    after = {s["name"]: s for s in ev2.call("session.list", {}, timeout=T)["extras"]["sessions"]}
    assert {n: s.get("pid") for n, s in after.items()} == pids, after
    assert after["cat"].get("kind") == "pipe" and after["cat"].get("stdin") is True, after["cat"]
    obs = run_done(ev2, 'echo "$PWD $TWO"', session="second")
    assert content(obs).strip() == "/ 2", fmt(obs)
    ev2.call("subscribe", {}, timeout=T)
    r = ev2.call("session.stdin", {"session": "cat", "content": "hello\n", "eof": True}, timeout=T)
    assert r.get("observation") == "session.stdin", fmt(r)
    out = {"stdout": "", "stderr": ""}
    while True:
        o = ev2.recv_obs(T)
        x = o.get("extras") or {}
        if o.get("observation") == "session.output" and x.get("session") == "cat":
            out[x["stream"]] += o["content"]
        if o.get("observation") == "session.exit" and x.get("name") == "cat":
            break
    assert out == {"stdout": "hello\n", "stderr": "bye\n"}, out
    assert x.get("exit_code") == 7, fmt(o)


def test_run_in_flight_answers_once(termd):
    """`run "sleep 3; echo done"` in flight across an upgrade: the client
    reconnects and re-sends the same action with the same id, and gets the
    answer (done, exit 0) exactly once; the command ran once."""
    ev = termd.events()
    mark = os.path.join(str(termd.home), "ran")
    cmd = "echo be''fore; sleep 3; echo x >> %s; echo done" % mark
    rid = "run-in-flight-1"
    ev.send_action("run", {"command": cmd}, id=rid)
    # wait until the shell runs it
    deadline = time.monotonic() + T
    other = termd.events()
    while True:
        scr = other.call("screen", {}, timeout=T)
        if "\nbefore" in content(scr):   # printed: the shell runs it
            break
        assert time.monotonic() < deadline
        time.sleep(0.05)
    other.call("subscribe", {}, timeout=T)
    other.send_action("termd.upgrade", {}, id="up-run")
    assert wait_closed(ev) == 1012
    ev2 = reconnect(termd)
    ans = ev2.call("run", {"command": cmd}, id=rid, timeout=T)
    assert ans.get("observation") == "run", fmt(ans)
    assert ans["extras"].get("running") is False and ans["extras"].get("exit_code") == 0, fmt(ans)
    # what it printed before the upgrade and after
    assert content(ans).split() == ["before", "done"], fmt(ans)
    with open(mark) as f:
        assert f.read() == "x\n"
    # a re-send after that is the same answer again, not a second run
    again = ev2.call("run", {"command": cmd}, id=rid, timeout=T)
    assert again["seq"] == ans["seq"] and again["extras"].get("replayed"), fmt(again)
    ev3 = termd.events()
    cid = ev3.send_action("subscribe", {"since": 0})
    answers = []
    while True:
        o = ev3.recv_obs(T)
        if o.get("cause") == cid:
            break
        if o.get("cause") == rid and o.get("observation") == "run":
            answers.append(o)
    assert len(answers) == 1, [fmt(o) for o in answers]
    with open(mark) as f:
        assert f.read() == "x\n"


def test_scrollback_survives(termd):
    ev = termd.events()
    run_done(ev, "seq 1 300")
    deadline = time.monotonic() + T
    while True:   # the prompt drawn after the answer
        before = ev.call("screen", {"scrollback": 1000}, timeout=T)
        if content(before).rstrip().endswith(("#", "$")):
            break
        assert time.monotonic() < deadline, fmt(before)
        time.sleep(0.02)
    assert before["extras"]["scrollback_lines"] > 200, fmt(before)
    code, ev2, ans = upgrade(termd, ev)
    assert ans["extras"].get("ok") is True, fmt(ans)
    after = ev2.call("screen", {"scrollback": 1000}, timeout=T)
    assert after["extras"]["scrollback_lines"] == before["extras"]["scrollback_lines"], fmt(after)
    assert content(after) == content(before)
    assert after["extras"]["cursor"] == before["extras"]["cursor"]


def test_tty_viewer_closed_1012_and_reattaches(termd):
    ev = termd.events()
    run_done(ev, "echo viewer-line")
    v = wsclient.connect(termd.url, "/tty/main", wsclient.TTY_SUBPROTOCOL, termd.token)
    v.recv(T)   # its first frame
    ev.send_action("termd.upgrade", {}, id="up-tty")
    deadline = time.monotonic() + T
    code = None
    while time.monotonic() < deadline:
        try:
            v.recv(deadline - time.monotonic())
        except wsclient.ConnectionClosed as e:
            code = e.code
            break
    assert code == 1012, code
    ev2 = reconnect(termd)
    v2 = wsclient.connect(termd.url, "/tty/main", wsclient.TTY_SUBPROTOCOL, termd.token)
    got = b""
    deadline = time.monotonic() + T
    while b"viewer-line" not in got and time.monotonic() < deadline:
        op, payload = v2.recv(deadline - time.monotonic())
        got += payload
    assert b"viewer-line" in got
    v2.abort()
    assert ev2.ping().get("observation") == "pong"


def test_python_client_resumes_its_run_by_itself(termd, client):
    """The termd package reconnects after 1012 and re-sends what was in
    flight with the same ids: its run of a command across the upgrade
    returns the whole answer, the command run once."""
    mark = os.path.join(str(termd.home), "ran-py")
    cmd = "echo be''fore; sleep 2; echo x >> %s; echo done" % mark
    result = {}

    def go():
        try:
            result["r"] = client.run(cmd)
        except Exception as e:  # noqa: BLE001 — reported below
            result["e"] = e

    th = threading.Thread(target=go)
    th.start()
    ev = termd.events()
    deadline = time.monotonic() + T
    while "\nbefore" not in content(ev.call("screen", {}, timeout=T)):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    ev.send_action("termd.upgrade", {}, id="up-py")
    assert wait_closed(ev) == 1012
    th.join(T)
    assert not th.is_alive()
    assert "e" not in result, result
    r = result["r"]
    assert r.output.split() == ["before", "done"] and r.exit_code == 0 and not r.running, r
    assert client.reconnects >= 1
    with open(mark) as f:
        assert f.read() == "x\n"
