"""PROTOCOL.md §4 run item 10: the shell reading the rest of a command (a
heredoc body, an open quote, a trailing backslash or pipe: its PS2) is a
running program waiting for input; is_input lines are typed into it, and
the answer to the line that completes the command has its output and exit
code."""

import pytest

from tdtest import assert_error, content, fmt, run_done, run_obs

CASES = [
    ("heredoc", "cat << EOF", ["line 1", "line 2"], "EOF", "line 1\nline 2"),
    ("quote", 'echo "abc', [], 'def"', "abc\ndef"),
    ("backslash", "echo one \\", [], "two", "one two"),
    ("pipe", "printf 'a\\nb\\nc\\n' |", [], "wc -l", "3"),
]


def waiting(obs):
    x = obs["extras"]
    assert obs["observation"] == "run", fmt(obs)
    assert x["running"] is True and x["waiting_for_input"] is True, fmt(obs)
    assert x["exit_code"] == -1 and x["timed_out"] is None, fmt(obs)


@pytest.mark.parametrize("first,middle,last,want", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_continuation_lines_by_is_input(ev, first, middle, last, want):
    waiting(run_obs(ev, first))
    for line in middle:
        waiting(run_obs(ev, line, is_input=True))
    obs = run_obs(ev, last, is_input=True)
    x = obs["extras"]
    assert x["running"] is False and x["exit_code"] == 0, fmt(obs)
    assert content(obs) == want, fmt(obs)
    assert content(run_done(ev, "echo after")) == "after"


def test_continuation_exit_code_of_completed_command(ev):
    waiting(run_obs(ev, "(exit 7) && echo no ||"))
    obs = run_obs(ev, "false", is_input=True)
    assert obs["extras"]["running"] is False and obs["extras"]["exit_code"] == 1, fmt(obs)


def test_continuation_is_running_for_poll_and_busy(ev):
    waiting(run_obs(ev, "cat << END"))
    # a poll waits again and still sees a program waiting for input
    waiting(run_obs(ev, ""))
    # a second command is refused, nothing is typed into the heredoc
    assert_error(ev.call("run", {"command": "echo intruder"}), "busy")
    obs = run_obs(ev, "END", is_input=True)
    assert obs["extras"]["running"] is False and content(obs) == "", fmt(obs)


def test_continuation_ctrl_c(ev):
    waiting(run_obs(ev, 'echo "unclosed'))
    obs = run_obs(ev, "C-c", is_input=True)
    assert obs["extras"]["running"] is False and obs["extras"]["exit_code"] == 130, fmt(obs)
    assert content(run_done(ev, "echo fresh")) == "fresh"
