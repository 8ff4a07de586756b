"""PROTOCOL.md §2 (the contract's §11): an argument no part of an action
read is not an error, but the answer names it in `extras.ignored_args`
(absent when there is none) — answers given at once, errors of an action
that ran, answers a pending action (run, keys, expect) gives later and a
replayed one; a plugin's action names none itself (its plugin may);
termctl warns on stderr; the front doors (envd, OpenHands) send termd no
name it does not read."""

import json
import time

from tdtest import PY, assert_error, fmt

T = 60.0


def call(ev, action, args=None, **kw):
    return ev.call(action, args, timeout=T, **kw)


def ignored(obs):
    return (obs.get("extras") or {}).get("ignored_args")


def test_names_what_was_not_read_and_only_that(termd, ev):
    o = call(ev, "run", {"command": "echo hi", "tmeout": 5, "timeout": 20, "x-extra": [1]})
    assert o["observation"] == "run" and o["content"] == "hi", fmt(o)
    assert ignored(o) == ["tmeout", "x-extra"], fmt(o)       # in the order they came
    o = call(ev, "run", {"command": "echo fine", "timeout": 20, "session": "main"})
    assert "ignored_args" not in o["extras"], fmt(o)         # absent when there is none
    o = call(ev, "ping", {"anything": True})
    assert o["observation"] == "pong" and ignored(o) == ["anything"], fmt(o)
    assert "ignored_args" not in call(ev, "ping")["extras"]
    # a name read only for some values of another is named when not read
    f = termd.home / "e.txt"
    o = call(ev, "edit", {"command": "create", "path": str(f), "file_text": "a\n", "old_str": "a"})
    assert o["observation"] == "edit" and ignored(o) == ["old_str"], fmt(o)
    o = call(ev, "edit", {"command": "view", "path": str(f), "view_range": [1, 1]})
    assert "ignored_args" not in o["extras"], fmt(o)
    # arguments of shapes the helpers do not take count as read too
    o = call(ev, "session.open", {"name": "s2", "env": {"A": "1"}, "cols": 90, "bogus": 1})
    assert o["observation"] == "session.open" and ignored(o) == ["bogus"], fmt(o)
    o = call(ev, "screen", {"session": "s2", "scrollback": True})
    assert "ignored_args" not in o["extras"], fmt(o)
    o = call(ev, "file.mkdir", {"path": str(termd.home / "d"), "existok": True})
    assert o["observation"] == "file.mkdir" and ignored(o) == ["existok"], fmt(o)


def test_errors_of_an_action_that_ran_name_them_too(termd, ev):
    o = call(ev, "file.stat", {"pth": "/"})
    assert_error(o, "bad_request")
    assert ignored(o) == ["pth"], fmt(o)
    o = call(ev, "file.stat", {"path": str(termd.home / "missing"), "follow": True})
    assert_error(o, "not_found")
    assert ignored(o) == ["follow"], fmt(o)
    # an action that did not run reads nothing and names nothing
    o = call(ev, "no.such.action", {"a": 1})
    assert_error(o, "unknown_action")
    assert ignored(o) is None, fmt(o)


def test_view_token_refusal_names_nothing(termd_factory, tmp_path):
    vt = tmp_path / "view"
    vt.write_text("viewsecret\n")
    t = termd_factory(args=("--view-token-file", str(vt)), token="fullsecret")
    ro = t.events(token="viewsecret")
    o = call(ro, "run", {"command": "true", "bogus": 1})
    assert_error(o, "forbidden")
    assert ignored(o) is None, fmt(o)
    o = call(ro, "screen", {"bogus": 1})
    assert o["observation"] == "screen" and ignored(o) == ["bogus"], fmt(o)


def test_answers_given_later_carry_them(termd, ev):
    """run, keys and expect answer after their handler returned: the names
    are kept for that answer (and for its replay)."""
    o = call(ev, "run", {"command": "sleep 0.5; echo late", "idle_timout": 9, "id_hint": "x"},
             id="later-1")
    assert o["observation"] == "run" and o["content"] == "late", fmt(o)
    assert ignored(o) == ["idle_timout", "id_hint"], fmt(o)
    again = call(ev, "run", {"command": "whatever"}, id="later-1")
    assert again["extras"].get("replayed") is True and ignored(again) == ["idle_timout", "id_hint"]
    # a run answered while still running, then the poll that finishes it
    o = call(ev, "run", {"command": "sleep 1; echo done", "timeout": 0.2, "bogus": 1})
    assert o["extras"]["running"] is True and ignored(o) == ["bogus"], fmt(o)
    o = call(ev, "run", {"command": "", "timeout": 20})
    assert o["content"].endswith("done") and "ignored_args" not in o["extras"], fmt(o)
    o = call(ev, "keys", {"keys": ["echo k1", "Enter"], "settle": 50})
    assert o["observation"] == "screen" and ignored(o) == ["settle"], fmt(o)
    ev.send_action("expect", {"pattern": "zz-[0-9]+", "timeout": 20, "regex": True}, id="exp-1")
    time.sleep(0.3)
    call(ev, "run", {"command": "echo zz-$((40+2))", "timeout": 20})
    o = ev.wait_for(lambda o: o.get("cause") == "exp-1", T)
    assert o["observation"] == "expect" and o["extras"]["matched"] is True, fmt(o)
    assert ignored(o) == ["regex"], fmt(o)


# A plugin that answers "ign": it names the arguments it did not read itself.
PLUGIN = r'''#!%s
import json, sys
for line in sys.stdin:
    req = json.loads(line)
    args = req.get("args") or {}
    ex = {"got": sorted(args)}
    unread = sorted(k for k in args if k not in ("text", "timeout"))
    if unread:
        ex["ignored_args"] = unread
    sys.stdout.write(json.dumps({"id": req["id"], "observation": "ign",
                                 "content": args.get("text", ""), "extras": ex}) + "\n")
    sys.stdout.flush()
''' % PY


def test_plugin_actions_name_only_what_their_plugin_says(termd_factory, tmp_path):
    d = tmp_path / "plugins" / "ign"
    d.mkdir(parents=True)
    (d / "prog.py").write_text(PLUGIN)
    (d / "prog.py").chmod(0o755)
    (d / "plugin.json").write_text(json.dumps({"name": "ign", "version": "1.0", "actions": ["ign"],
                                               "run": "prog.py"}))
    t = termd_factory(args=["--plugins", "ign", "--plugin-dir", str(tmp_path / "plugins"),
                            "--state-dir", str(tmp_path / "state")])
    ev = t.events()
    o = call(ev, "ign", {"text": "hi", "timeout": 20})
    assert o["observation"] == "ign" and o["content"] == "hi", fmt(o)
    assert o["extras"]["got"] == ["text", "timeout"] and "ignored_args" not in o["extras"], fmt(o)
    # termd reads none of them but "timeout": it names none; the plugin does
    o = call(ev, "ign", {"text": "hi", "shape": "round"})
    assert o["extras"]["got"] == ["shape", "text"], fmt(o)
    assert ignored(o) == ["shape"], fmt(o)


def test_termctl_warns_on_stderr(termd):
    p = termd.termctl("raw", json.dumps({"action": "ping", "args": {"pnig": 1, "x": 2}}))
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["extras"]["ignored_args"] == ["pnig", "x"]
    assert "warning" in p.stderr and "'pnig', 'x'" in p.stderr and "'ping'" in p.stderr, p.stderr
    # its own commands send only names termd reads: no warning
    for args in (("run", "echo quiet"), ("run", "--timeout", "20", "--session", "main", "echo q"),
                 ("keys", "echo", "Enter"), ("screen",), ("ping",), ("session", "list")):
        p = termd.termctl(*args)
        assert p.returncode == 0 and p.stderr == "", (args, p.returncode, p.stderr)


def test_front_doors_send_only_names_termd_reads(termd_factory, tmp_path):
    """envd's and OpenHands' calls are actions on the stream: none of their
    answers names an argument termd did not read."""
    import test_envd as envd
    import test_openhands as oh
    t = termd_factory(token=envd.TOKEN, tcp=True)
    sub = t.events(token=envd.TOKEN)
    assert call(sub, "subscribe")["observation"] == "subscribe"
    h = t.home
    (h / "f.txt").write_text("one\n")
    d = str(h / "ed")
    for method, msg in (("filesystem.Filesystem/MakeDir", {"path": d}),
                        ("filesystem.Filesystem/Stat", {"path": d}),
                        ("filesystem.Filesystem/ListDir", {"path": str(h), "depth": 2}),
                        ("filesystem.Filesystem/Move", {"source": d, "destination": d + "2"}),
                        ("filesystem.Filesystem/Remove", {"path": d + "2"}),
                        ("filesystem.Filesystem/CreateWatcher", {"path": str(h), "recursive": True}),
                        ("process.Process/List", {})):
        status, _, m = envd.unary(t, method, msg)
        assert status == 200, (method, status, m)
        if method.endswith("CreateWatcher"):
            status, _, m = envd.unary(t, "filesystem.Filesystem/RemoveWatcher",
                                      {"watcherId": m["watcherId"]})
            assert status == 200, m
    status, _, envs = envd.stream(t, "process.Process/Start", envd.start_cmd("echo envd-ran"))
    assert status == 200, envs
    assert b"envd-ran" in envd.stdout_of(envd.events_of(envs)), envs
    status, _, body = envd.request(t, "GET", "/files?path=%s" % (h / "f.txt"))
    assert status == 200 and body == b"one\n", (status, body)
    o = oh.OH(int(t.url.rsplit(":", 1)[1]), key=envd.TOKEN)
    assert o.run("echo oh-ran")["content"] == "oh-ran"
    assert o.act("read", oh.read_args(str(h / "f.txt")))["content"].endswith("one\n")
    o.act("write", oh.write_args(str(h / "w.txt"), "w\n"))
    o.act("edit", oh.edit_args(str(h / "w.txt"), "str_replace", old_str="w", new_str="v"))
    o.act("edit", oh.edit_args(str(h / "w.txt"), "view"))
    o.act("edit", oh.edit_args(str(h / "w.txt"), "undo_edit"))
    seen = []
    end = time.monotonic() + 3
    while time.monotonic() < end:
        try:
            ob = sub.recv_obs(max(0.1, end - time.monotonic()))
        except TimeoutError:
            break
        if ob is None:
            break
        seen.append(ob)
    named = [fmt(x) for x in seen if ignored(x)]
    assert not named, named
    actions = {x["observation"] for x in seen}
    assert {"file.mkdir", "file.list", "watch", "session.open", "run", "read", "write",
            "edit"} <= actions, sorted(actions)


def test_an_action_that_failed_early_names_only_unknown_names(termd, ev):
    """issue 51: a session.open that failed (the name taken) had not come to
    read `limits`: that is not a misspelling. A name it does not know still
    is named."""
    assert call(ev, "session.open", {"name": "taken"})["observation"] == "session.open"
    o = call(ev, "session.open", {"name": "taken", "limits": {"memory": "64M"},
                                  "env": {"A": "1"}, "cols": 80})
    assert_error(o, "session_exists")
    assert ignored(o) is None, fmt(o)
    o = call(ev, "session.open", {"name": "taken", "limts": {"pids": 5}})
    assert_error(o, "session_exists")
    assert ignored(o) == ["limts"], fmt(o)
    for action, args in (("session.signal", {"session": "nope", "signal": "INT", "tree": True}),
                         ("session.stdin", {"session": "nope", "content": "x", "eof": True,
                                            "encoding": "utf-8"}),
                         ("keys", {"session": "nope", "keys": ["a"], "settle_ms": 5,
                                   "timeout": 1}),
                         ("expect", {"session": "nope", "pattern": "x", "timeout": 1}),
                         ("run", {"command": "true", "timeout": -1, "idle_timeout": 1,
                                  "max_output": 10, "is_input": False, "session": "main"})):
        o = call(ev, action, args)
        assert o["observation"] == "error", (action, fmt(o))
        assert ignored(o) is None, (action, fmt(o))
