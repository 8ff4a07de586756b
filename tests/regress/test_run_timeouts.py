"""PROTOCOL.md section 4 `run` items 4, 7, 8: timeouts that do not kill,
collecting the rest with `run ""`, busy sessions, no_command."""

from tdtest import assert_error, content, finish, fmt, lines, run, run_done, run_obs

LOOP = "for i in 1 2 3 4 5; do echo $i; sleep 1; done"


def _collect_rest(ev, first):
    """run "" until finished; returns (all lines in order, final obs)."""
    got = finish(ev, first)
    for o in got[1:-1]:
        x = o["extras"]
        assert x["running"] is True and x["exit_code"] == -1, fmt(o)
    all_lines = []
    for o in got:
        all_lines += lines(o)
    return all_lines, got[-1]


def test_hard_timeout_then_rest(ev):
    obs = run_obs(ev, LOOP, timeout=2.5)
    x = obs["extras"]
    assert x["running"] is True, fmt(obs)
    assert x["exit_code"] == -1, fmt(obs)
    assert x["timed_out"] == "hard", fmt(obs)
    ls = lines(obs)
    assert ls[:2] == ["1", "2"], fmt(obs)
    assert "5" not in ls, fmt(obs)
    rest, last = _collect_rest(ev, obs)
    assert rest == ["1", "2", "3", "4", "5"], "output across calls: %r" % rest
    assert last["extras"]["exit_code"] == 0 and last["extras"]["running"] is False, fmt(last)
    assert last["extras"]["timed_out"] is None, fmt(last)
    # the shell is back to normal
    assert content(run_done(ev, "echo next")) == "next"


def test_idle_timeout_given_with_hard_timeout(ev):
    # both given: the idle timeout still applies
    obs = run_obs(ev, "echo a; sleep 3; echo b", timeout=20, idle_timeout=1)
    assert obs["extras"]["running"] is True, fmt(obs)
    assert obs["extras"]["timed_out"] == "idle", fmt(obs)
    rest, last = _collect_rest(ev, obs)
    assert rest == ["a", "b"], rest


def test_idle_timeout_then_rest(ev):
    obs = run_obs(ev, "echo early; sleep 3; echo late", idle_timeout=1.5)
    x = obs["extras"]
    assert x["running"] is True and x["exit_code"] == -1, fmt(obs)
    assert x["timed_out"] == "idle", fmt(obs)
    assert x["waiting_for_input"] is False, fmt(obs)  # sleep is not reading the terminal
    assert lines(obs) == ["early"], fmt(obs)
    rest, last = _collect_rest(ev, obs)
    assert rest == ["early", "late"], "output across calls: %r" % rest
    assert last["extras"]["exit_code"] == 0 and last["extras"]["running"] is False, fmt(last)


def test_idle_timeout_on_the_loop(ev):
    # output every second keeps an idle timeout of 2.5 s from firing...
    obs = run_obs(ev, LOOP, idle_timeout=2.5)
    assert obs["extras"]["running"] is False, fmt(obs)
    assert lines(obs) == ["1", "2", "3", "4", "5"], fmt(obs)
    # ...but not a quiet stretch in the middle of it
    obs = run_obs(ev, "echo 1; echo 2; sleep 3; echo 3", idle_timeout=1.5)
    assert obs["extras"]["timed_out"] == "idle" and lines(obs) == ["1", "2"], fmt(obs)
    rest, last = _collect_rest(ev, obs)
    assert rest == ["1", "2", "3"], rest


def test_timeout_does_not_kill(ev, tmp_path):
    done = tmp_path / "finished"
    obs = run_obs(ev, "sleep 2; touch %s; echo finished" % done, timeout=0.5)
    assert obs["extras"]["running"] is True, fmt(obs)
    rest, last = _collect_rest(ev, obs)
    assert done.exists(), "the command was killed by the timeout"
    assert rest == ["finished"] and last["extras"]["exit_code"] == 0, (rest, fmt(last))


def test_busy_nothing_typed(ev, tmp_path):
    marker = tmp_path / "busy-marker"
    obs = run_obs(ev, "sleep 3", timeout=0.5)
    assert obs["extras"]["running"] is True, fmt(obs)
    busy = run(ev, "touch %s" % marker)
    assert_error(busy, "busy", cause=busy["cause"])
    busy2 = run(ev, "echo typed-while-busy", timeout=1)
    assert_error(busy2, "busy")
    rest, last = _collect_rest(ev, obs)
    assert last["extras"]["exit_code"] == 0, fmt(last)
    assert rest == [], "sleep printed nothing, got %r" % rest
    # nothing was typed into the shell: the next command runs alone
    obs = run_done(ev, "echo after")
    assert content(obs) == "after", fmt(obs)
    assert not marker.exists(), "the busy command was typed and ran"
    # and nothing is queued behind it
    obs = run(ev, "")
    assert_error(obs, "no_command")


def test_empty_command_with_nothing_running(ev):
    assert_error(run(ev, ""), "no_command")
    run_done(ev, "echo done")
    assert_error(run(ev, ""), "no_command")


def test_input_with_nothing_running(ev):
    assert_error(run(ev, "hello", is_input=True), "no_command")
    assert_error(run(ev, "C-c", is_input=True), "no_command")
    # nothing was typed: the next command's output is its own
    assert content(run_done(ev, "echo clean")) == "clean"
