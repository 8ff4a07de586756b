"""PROTOCOL.md §4 run item 10: the shell reading the rest of a command (a
heredoc body, an open quote, a trailing backslash or pipe: its PS2) is a
running program waiting for input; is_input lines are typed into it, and
the answer to the line that completes the command has its output and exit
code. Driven through the termd Python package (proto/python)."""

import pytest

import termd

CASES = [
    ("heredoc", "cat << EOF", ["line 1", "line 2"], "EOF", "line 1\nline 2"),
    ("quote", 'echo "abc', [], 'def"', "abc\ndef"),
    ("backslash", "echo one \\", [], "two", "one two"),
    ("pipe", "printf 'a\\nb\\nc\\n' |", [], "wc -l", "3"),
]


def waiting(r):
    assert isinstance(r, termd.RunResult) and r.observation == "run", r
    assert r.extras["running"] is True and r.extras["waiting_for_input"] is True, r
    assert r.exit_code == -1 and r.extras["timed_out"] is None, r


def done(client, command):
    r = client.run(command)
    assert r.extras["running"] is False and r.exit_code == 0, r
    return r


@pytest.mark.parametrize("first,middle,last,want", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_continuation_lines_by_is_input(client, first, middle, last, want):
    waiting(client.run(first))
    for line in middle:
        waiting(client.run(line, is_input=True))
    r = client.run(last, is_input=True)
    assert r.extras["running"] is False and r.extras["exit_code"] == 0, r
    assert r.output == want, r
    assert done(client, "echo after").output == "after"


def test_continuation_exit_code_of_completed_command(client):
    waiting(client.run("(exit 7) && echo no ||"))
    r = client.run("false", is_input=True)
    assert r.extras["running"] is False and r.extras["exit_code"] == 1, r


def test_continuation_is_running_for_poll_and_busy(client):
    waiting(client.run("cat << END"))
    # a poll waits again and still sees a program waiting for input
    waiting(client.run(""))
    # a second command is refused, nothing is typed into the heredoc
    with pytest.raises(termd.BusyError) as ei:
        client.run("echo intruder")
    assert ei.value.code == "busy" and isinstance(ei.value.message, str) and ei.value.message
    obs = client.call("run", command="END", is_input=True, raw=True)
    assert obs["extras"]["running"] is False and obs["content"] == "", obs


def test_continuation_ctrl_c(client):
    waiting(client.run('echo "unclosed'))
    r = client.run("C-c", is_input=True)
    assert r.extras["running"] is False and r.extras["exit_code"] == 130, r
    assert done(client, "echo fresh").output == "fresh"
