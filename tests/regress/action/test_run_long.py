"""PROTOCOL.md §4 run item 12: a command text of any length up to the frame
limit runs as one unit, byte-exact, and termd never reports
waiting_for_input while it is still typing it. (Long texts are sourced from
a file by bash; short ones are typed as a bracketed paste: both are checked.)"""

import hashlib

import pytest

from tdtest import content, fmt, run_done, run_obs


def heredoc(path, nbytes):
    """A heredoc command writing about nbytes of numbered lines to path;
    returns (command, the exact bytes the file must hold)."""
    n = max(1, nbytes // 48)
    body = "\n".join("%047d" % i for i in range(n)) + "\n"
    return "cat > %s <<'EOF'\n%sEOF\nwc -l < %s" % (path, body, path), body.encode()


@pytest.mark.parametrize("size", [2000, 8000, 30000, 100 * 1024, 1024 * 1024])
def test_heredoc_written_byte_exact(ev, tmp_path, size):
    path = tmp_path / ("big-%d.txt" % size)
    cmd, want = heredoc(path, size)
    obs = run_done(ev, cmd, timeout=120)
    assert obs["extras"]["waiting_for_input"] is False, fmt(obs)
    assert content(obs) == str(want.count(b"\n")), fmt(obs)
    got = path.read_bytes()
    assert hashlib.sha256(got).hexdigest() == hashlib.sha256(want).hexdigest(), \
        "file differs: %d bytes, wanted %d" % (len(got), len(want))
    # the shell is back at its prompt: the next run works
    assert content(run_done(ev, "echo next")) == "next"


def test_long_command_keeps_shell_state(ev, tmp_path):
    """A long text runs in the shell itself: cd, exports, functions and
    aliases it makes persist, and its exit code is its last command's."""
    d = tmp_path / "there"
    d.mkdir()
    filler = "".join(": filler line %d\n" % i for i in range(400))
    cmd = ("cd %s\nexport LONG_VAR=42\nlong_fn() { echo fn-$1; }\n%s"
           "declare -A assoc=([k]=v)\necho done\n(exit 3)" % (d, filler))
    obs = run_done(ev, cmd, exit_code=3)
    assert content(obs) == "done", fmt(obs)
    assert obs["extras"]["cwd"] == str(d), fmt(obs)
    out = content(run_done(ev, 'echo "$PWD $LONG_VAR ${assoc[k]}"; long_fn x'))
    assert out.split("\n") == ["%s 42 v" % d, "fn-x"]


def test_long_command_that_asks_is_waiting_only_once_typed(ev, tmp_path):
    """A long text whose last line asks a question: the answer comes when the
    question is on screen (everything before it ran), never while typing."""
    path = tmp_path / "before.txt"
    cmd, want = heredoc(path, 300 * 1024)
    cmd += '\nread -p "Proceed? " ans; echo "ans=$ans"'
    obs = run_obs(ev, cmd, timeout=120)
    x = obs["extras"]
    assert x["waiting_for_input"] is True and x["running"] is True, fmt(obs)
    assert "Proceed?" in content(obs), fmt(obs)
    assert path.read_bytes() == want
    obs = run_obs(ev, "yes", is_input=True)
    assert obs["extras"]["running"] is False and obs["extras"]["exit_code"] == 0, fmt(obs)
    assert "ans=yes" in content(obs), fmt(obs)


def test_long_command_interrupted(ev, tmp_path):
    """C-c ends a long sourced command as it ends a typed one: the rest of
    the text does not run."""
    marker = tmp_path / "not-reached"
    filler = "".join(": %d\n" % i for i in range(3000))
    cmd = "%ssleep 60\ntouch %s" % (filler, marker)
    obs = run_obs(ev, cmd, timeout=2)
    assert obs["extras"]["running"] is True and obs["extras"]["waiting_for_input"] is False, fmt(obs)
    obs = run_obs(ev, "C-c", is_input=True)
    assert obs["extras"]["running"] is False and obs["extras"]["exit_code"] == 130, fmt(obs)
    assert not marker.exists()
    assert content(run_done(ev, "echo alive")) == "alive"
