"""PROTOCOL.md section 4 `run` items 4, 7, 8: timeouts that do not kill,
collecting the rest with `run ""`, busy sessions, no_command. Driven through
the termd Python package (proto/python), as a backend would."""

import pytest

import termd

LOOP = "for i in 1 2 3 4 5; do echo $i; sleep 1; done"


def lines(r):
    return r.output.split("\n") if r.output else []


def run_done(client, command, exit_code=0):
    r = client.run(command)
    assert r.running is False and r.exit_code == exit_code, (command, r)
    return r


def _collect_rest(client, first, max_calls=30):
    """run "" until finished; returns (all lines in order, final result)."""
    got = [first]
    r = first
    while r.running:
        assert len(got) <= max_calls, "command still running after %d calls: %r" % (max_calls, r)
        r = client.run("")
        assert isinstance(r, termd.RunResult), r
        got.append(r)
    for o in got[1:-1]:
        assert o.running is True and o.exit_code == -1, o
    all_lines = []
    for o in got:
        all_lines += lines(o)
    return all_lines, got[-1]


def test_hard_timeout_then_rest(client):
    r = client.run(LOOP, timeout=2.5)
    assert r.running is True, r
    assert r.exit_code == -1, r
    assert r.timed_out == "hard", r
    ls = lines(r)
    assert ls[:2] == ["1", "2"], r
    assert "5" not in ls, r
    rest, last = _collect_rest(client, r)
    assert rest == ["1", "2", "3", "4", "5"], "output across calls: %r" % rest
    assert last.exit_code == 0 and last.running is False, last
    assert last.timed_out is None, last
    # the shell is back to normal
    assert run_done(client, "echo next").output == "next"


def test_idle_timeout_given_with_hard_timeout(client):
    # both given: the idle timeout still applies
    r = client.run("echo a; sleep 3; echo b", timeout=20, idle_timeout=1)
    assert r.running is True, r
    assert r.timed_out == "idle", r
    rest, last = _collect_rest(client, r)
    assert rest == ["a", "b"], rest


def test_idle_timeout_then_rest(client):
    r = client.run("echo early; sleep 3; echo late", idle_timeout=1.5)
    assert r.running is True and r.exit_code == -1, r
    assert r.timed_out == "idle", r
    assert r.waiting_for_input is False, r  # sleep is not reading the terminal
    assert lines(r) == ["early"], r
    rest, last = _collect_rest(client, r)
    assert rest == ["early", "late"], "output across calls: %r" % rest
    assert last.exit_code == 0 and last.running is False, last


def test_idle_timeout_on_the_loop(client):
    # output every second keeps an idle timeout of 2.5 s from firing...
    r = client.run(LOOP, idle_timeout=2.5)
    assert r.running is False, r
    assert lines(r) == ["1", "2", "3", "4", "5"], r
    # ...but not a quiet stretch in the middle of it
    r = client.run("echo 1; echo 2; sleep 3; echo 3", idle_timeout=1.5)
    assert r.timed_out == "idle" and lines(r) == ["1", "2"], r
    rest, last = _collect_rest(client, r)
    assert rest == ["1", "2", "3"], rest


def test_timeout_does_not_kill(client, tmp_path):
    done = tmp_path / "finished"
    r = client.run("sleep 2; touch %s; echo finished" % done, timeout=0.5)
    assert r.running is True, r
    rest, last = _collect_rest(client, r)
    assert done.exists(), "the command was killed by the timeout"
    assert rest == ["finished"] and last.exit_code == 0, (rest, last)


def assert_error(exc_info, cls, code):
    e = exc_info.value
    assert type(e) is cls and e.code == code, e
    assert isinstance(e.message, str) and e.message, "error without a message: %r" % e.observation
    assert e.observation["observation"] == "error", e.observation
    return e


def test_busy_nothing_typed(client, tmp_path):
    marker = tmp_path / "busy-marker"
    r = client.run("sleep 3", timeout=0.5)
    assert r.running is True, r
    with pytest.raises(termd.BusyError) as ei:
        client.run("touch %s" % marker)
    e = assert_error(ei, termd.BusyError, "busy")
    # the error names the action it refused
    assert e.observation.get("cause") is not None, e.observation
    with pytest.raises(termd.BusyError) as ei:
        client.run("echo typed-while-busy", timeout=1)
    assert_error(ei, termd.BusyError, "busy")
    rest, last = _collect_rest(client, r)
    assert last.exit_code == 0, last
    assert rest == [], "sleep printed nothing, got %r" % rest
    # nothing was typed into the shell: the next command runs alone
    assert run_done(client, "echo after").output == "after"
    assert not marker.exists(), "the busy command was typed and ran"
    # and nothing is queued behind it
    with pytest.raises(termd.NoCommandError) as ei:
        client.run("")
    assert_error(ei, termd.NoCommandError, "no_command")


def test_empty_command_with_nothing_running(client):
    with pytest.raises(termd.NoCommandError) as ei:
        client.run("")
    assert_error(ei, termd.NoCommandError, "no_command")
    run_done(client, "echo done")
    with pytest.raises(termd.NoCommandError) as ei:
        client.run("")
    assert_error(ei, termd.NoCommandError, "no_command")


def test_input_with_nothing_running(client):
    for text in ("hello", "C-c"):
        with pytest.raises(termd.NoCommandError) as ei:
            client.run(text, is_input=True)
        assert_error(ei, termd.NoCommandError, "no_command")
    # nothing was typed: the next command's output is its own
    assert run_done(client, "echo clean").output == "clean"
