"""PROTOCOL.md §4 run item 11: input never waits behind an answer. is_input
and keys are carried out at once while another action (from this or another
connection) waits on the same session; the waiting action still gets its
own answer when its command ends; only a second non-input command is busy."""

from tdtest import assert_error, content, fmt, run_done, run_obs

T = 60


def test_ctrl_c_from_second_client_while_run_waits(termd):
    a, b = termd.events(), termd.events()
    b.call("subscribe", {}, timeout=T)
    a.send_action("run", {"session": "flood", "command": "yes"}, id="flood-run")
    # the flood is on: a's run is waiting (no timeout, output never idle)
    b.wait_for(lambda o: o.get("observation") == "command.start" and
               o["extras"].get("session") == "flood", timeout=T)
    flowing = b.call("expect", {"session": "flood", "pattern": "y\ny\ny", "timeout": 30}, timeout=T)
    assert flowing["extras"]["matched"] is True, fmt(flowing)
    obs = b.call("run", {"session": "flood", "command": "C-c", "is_input": True}, timeout=T)
    assert obs["observation"] == "run", fmt(obs)
    assert obs["extras"]["running"] is False and obs["extras"]["exit_code"] == 130, fmt(obs)
    first = a.recv_obs(timeout=T)
    assert first["cause"] == "flood-run" and first["observation"] == "run", fmt(first)
    assert first["extras"]["running"] is False and first["extras"]["exit_code"] == 130, fmt(first)
    assert "y" in content(first).split("\n"), "the run's answer lost yes's output: %s" % fmt(first)
    assert content(run_done(b, "echo works", session="flood")) == "works"


def test_input_on_same_connection_while_its_run_waits(termd, ev):
    """The run waits (sleep reads nothing); input typed meanwhile reaches the
    program once it reads; both actions are answered, the output not twice."""
    ev.send_action("run", {"command": "echo started; sleep 2; cat", "idle_timeout": 120},
                   id="long")
    # typed once the command runs (its own "started" is on the screen):
    # typed while bash still reads its line, the tty would not echo it (a
    # fixed 0.3 s was not always enough on a loaded machine)
    up = termd.events().call("expect", {"pattern": "^started$", "timeout": 30}, timeout=T)
    assert up["extras"]["matched"] is True, fmt(up)
    ev.send_action("run", {"command": "hello", "is_input": True, "idle_timeout": 120}, id="inp")
    got = {}
    while len(got) < 2:
        o = ev.recv_obs(timeout=T)
        assert o["observation"] == "run", fmt(o)
        got[o["cause"]] = o
    for o in got.values():
        assert o["extras"]["running"] is True and o["extras"]["waiting_for_input"] is True, fmt(o)
    # as on a terminal: the line typed ahead is echoed by the tty, then cat
    # prints it; the two answers share that output, neither repeats it
    both = content(got["long"]) + "\n" + content(got["inp"])
    assert both.split("\n").count("hello") == 2, "echo and cat's copy, once each: %r" % both
    obs = run_obs(ev, "C-d", is_input=True)
    assert obs["extras"]["running"] is False and obs["extras"]["exit_code"] == 0, fmt(obs)


def test_second_command_is_busy_input_is_not(termd):
    a, b = termd.events(), termd.events()
    b.call("subscribe", {}, timeout=T)
    # "started" is printed by the foreground job itself, so a C-c after it
    # reaches sleep (one typed while bash still sets the job up reaches bash)
    a.send_action("run", {"command": "sh -c 'echo started; exec sleep 3'; echo slept"},
                  id="sleeper")
    up = b.call("expect", {"pattern": "^started$", "timeout": 30}, timeout=T)
    assert up["extras"]["matched"] is True, fmt(up)
    assert_error(b.call("run", {"command": "echo x"}, timeout=T), "busy")
    assert_error(b.call("run", {"command": ""}, timeout=T), "busy")
    obs = b.call("keys", {"keys": ["C-c"]}, timeout=T)
    assert obs["observation"] == "screen", fmt(obs)
    got = a.recv_obs(timeout=T)
    assert got["cause"] == "sleeper" and got["extras"]["exit_code"] == 130, fmt(got)
    assert "slept" not in content(got).split("\n"), fmt(got)


def test_keys_while_keys_wait(ev, termd):
    b = termd.events()
    ev.send_action("keys", {"keys": ["echo one"], "settle_ms": 2000, "timeout": 10}, id="k1")
    # the second keys are typed after the first are on the screen (after a
    # fixed 0.2 s, a loaded termd could read both connections in one turn)
    up = b.call("expect", {"pattern": "echo one", "timeout": 30}, timeout=T)
    assert up["extras"]["matched"] is True, fmt(up)
    obs = b.call("keys", {"keys": [" two", "Enter"], "settle_ms": 300}, timeout=T)
    assert obs["observation"] == "screen", fmt(obs)
    first = ev.recv_obs(timeout=T)
    assert first["cause"] == "k1" and first["observation"] == "screen", fmt(first)
    assert "one two" in content(first), fmt(first)
