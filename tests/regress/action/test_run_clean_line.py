"""Issue 34, the first hour: a `run` starts from an empty line whatever was
typed before it, and nothing is typed before the shell's line editor reads
(no bracketed-paste markers echoed by a terminal still in cooked mode, on
the screen or in the recording)."""

import json
import time

import pytest

import tdtest


def screen_text(ev, session="main"):
    obs = ev.call("screen", {"session": session})
    assert obs.get("observation") == "screen", tdtest.fmt(obs)
    return obs["content"]


def cast_output(d):
    out = []
    for p in sorted(d.iterdir()):
        if p.name.endswith(".cast"):
            for line in p.read_text(errors="replace").splitlines()[1:]:
                e = json.loads(line)
                if e[1] == "o":
                    out.append(e[2])
    return "".join(out)


def plain_prompt(termd_factory, tmp_path, rc=""):
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("PS1='$ '\n" + rc)
    return termd_factory(env={"HOME": str(home)})


def test_run_after_keys_left_on_the_line_runs_only_the_command(termd_factory, tmp_path):
    ev = plain_prompt(termd_factory, tmp_path).events()
    tdtest.run_done(ev, "true")                      # the prompt is up
    obs = ev.call("keys", {"keys": ["h", "i"]})
    assert obs.get("observation") == "screen", tdtest.fmt(obs)
    tdtest.wait_until(lambda: "$ hi" in screen_text(ev), what="hi on the prompt line")
    obs = tdtest.run_done(ev, "echo ok")
    assert tdtest.content(obs) == "ok", tdtest.fmt(obs)
    assert (obs.get("extras") or {}).get("cleared") == "hi", tdtest.fmt(obs)
    # nothing was left: the next one has nothing to clear
    obs = tdtest.run_done(ev, "echo again")
    assert tdtest.content(obs) == "again"
    assert "cleared" not in (obs.get("extras") or {}), tdtest.fmt(obs)
    # the cursor moved into the middle of the text: the whole line goes
    ev.call("keys", {"keys": ["a", "b", "c", "Left", "Left"]})
    tdtest.wait_until(lambda: "$ abc" in screen_text(ev), what="abc on the prompt line")
    obs = tdtest.run_done(ev, "echo three")
    assert tdtest.content(obs) == "three", tdtest.fmt(obs)


def slow_prompt_home(tmp_path, secs):
    """A HOME whose .bashrc makes every prompt late: PS1's command
    substitution runs after PROMPT_COMMAND (termd's D mark) and before
    readline takes the terminal out of cooked mode."""
    home = tmp_path / "slowprompt"
    home.mkdir()
    (home / ".bashrc").write_text("sleep 0.5\nPS1='$(sleep %s)\\$ '\n" % secs)
    return home


def test_nothing_is_typed_before_a_late_prompt(termd_factory, tmp_path):
    home = slow_prompt_home(tmp_path, "0.8")
    rec = tmp_path / "rec"
    rec.mkdir(mode=0o700)
    t = termd_factory(args=("--record", str(rec)), env={"HOME": str(home)})
    ev = t.events()
    for word in ("first", "second", "third"):
        obs = tdtest.run_done(ev, "echo %s-$((1+1))" % word)
        assert tdtest.content(obs) == "%s-2" % word, tdtest.fmt(obs)
    scr = screen_text(ev)
    assert "200~" not in scr and "201~" not in scr, scr
    tdtest.wait_until(lambda: "third-2" in cast_output(rec), what="the recording")
    out = cast_output(rec)
    assert "200~" not in out and "201~" not in out, out
    # each command's echo shows once, after its prompt
    assert scr.count("echo first-$((1+1))") == 1, scr


@pytest.mark.parametrize("rc,keys", [
    ("set -o vi\n", ["h", "i"]),                 # vi insert mode
    ("set -o vi\n", ["h", "i", "Escape"]),       # vi command mode
])
def test_run_clears_the_line_in_vi_mode(termd_factory, tmp_path, rc, keys):
    ev = plain_prompt(termd_factory, tmp_path, rc).events()
    tdtest.run_done(ev, "true")
    ev.call("keys", {"keys": keys})
    tdtest.wait_until(lambda: "$ hi" in screen_text(ev), what="hi on the prompt line")
    obs = tdtest.run_done(ev, "echo ok")
    assert tdtest.content(obs) == "ok", tdtest.fmt(obs)
    assert tdtest.content(tdtest.run_done(ev, "echo two")) == "two"


def test_a_rejected_command_after_keys_says_only_its_own_error(termd_factory, tmp_path):
    ev = plain_prompt(termd_factory, tmp_path).events()
    tdtest.run_done(ev, "true")
    ev.call("keys", {"keys": ["x", "y"]})
    tdtest.wait_until(lambda: "$ xy" in screen_text(ev), what="xy on the prompt line")
    obs = tdtest.run_done(ev, "fi", exit_code=2)
    out = tdtest.content(obs)
    assert "syntax error" in out and "xy" not in out, tdtest.fmt(obs)
    assert (obs.get("extras") or {}).get("cleared") == "xy", tdtest.fmt(obs)


def test_sh_session_clears_the_line_too(termd_factory, tmp_path):
    t = termd_factory(args=("--shell", "/bin/sh"))
    ev = t.events()
    tdtest.run_done(ev, "true")
    ev.call("keys", {"keys": ["h", "i"]})
    tdtest.wait_until(lambda: "hi" in screen_text(ev).split("\n")[1], what="hi typed")
    obs = tdtest.run_done(ev, "echo ok")
    assert tdtest.content(obs) == "ok", tdtest.fmt(obs)
    assert (obs.get("extras") or {}).get("cleared") == "hi", tdtest.fmt(obs)


def test_a_shell_without_the_ready_signal_is_typed_to_once_it_reads(termd_factory, tmp_path):
    """Issue 50: a bash that never says it is ready (no line editor: no
    bracketed paste on) is looked at soon after each prompt's mark and
    again until it sleeps reading its terminal (its first command waited
    300 ms for the first look before); a prompt made late by PS1's command
    substitution is still waited for: each command in new sessions runs
    once, nothing echoed by a terminal the shell did not read yet."""
    home = slow_prompt_home(tmp_path, "0.8")
    wrap = tmp_path / "noedit"
    wrap.mkdir()
    (wrap / "bash").write_text("#!/bin/sh\nexec /bin/bash --noediting \"$@\"\n")
    (wrap / "bash").chmod(0o755)
    t = termd_factory(args=("--shell", str(wrap / "bash")), env={"HOME": str(home)})
    ev = t.events()
    for name in ("s1", "s2"):
        obs = ev.call("session.open", {"name": name})
        assert obs.get("observation") == "session.open", tdtest.fmt(obs)
        for word in ("first", "second"):
            obs = tdtest.run_done(ev, "echo %s-$((1+1))" % word, session=name)
            assert tdtest.content(obs) == "%s-2" % word, tdtest.fmt(obs)
        scr = screen_text(ev, name)
        assert "200~" not in scr and "201~" not in scr, scr
        assert scr.count("first-2") == 1 and scr.count("second-2") == 1, scr
        # a cooked terminal echoes what is typed at once: typed after the
        # prompt, each typed line shows on a prompt's line
        typed = [l for l in scr.splitlines() if "eval" in l]
        assert len(typed) == 2 and all(l[:2] in ("$ ", "# ") for l in typed), scr


def test_text_typed_ahead_or_a_terminal_answer_left_on_the_line_is_cleared(termd_factory, tmp_path):
    """Issue 50: after a run's command line nothing is left on the next
    line, and termd types no clearing key; anything written to the pty
    since (keys typed while a command ran and never read by it, the
    terminal's answer to a query a command made and did not read) is on
    the next line and is cleared before the next run."""
    ev = plain_prompt(termd_factory, tmp_path).events()
    tdtest.run_done(ev, "true")
    obs = tdtest.run_obs(ev, "sleep 2", timeout=0.2)
    assert (obs.get("extras") or {}).get("running") is True, tdtest.fmt(obs)
    ev.call("keys", {"keys": ["z", "q"]})
    obs = tdtest.run_done(ev, "")                    # the sleep ends
    tdtest.wait_until(lambda: "$ zq" in screen_text(ev), what="zq on the prompt line")
    obs = tdtest.run_done(ev, "echo ok")
    assert tdtest.content(obs) == "ok", tdtest.fmt(obs)
    # a cursor position query (DSR 6) the command does not read: the
    # answer is typed into the shell's line
    tdtest.run_done(ev, "printf '\\033[6n'")
    obs = tdtest.run_done(ev, "echo after-query")
    assert tdtest.content(obs) == "after-query", tdtest.fmt(obs)
    for i in range(3):
        assert tdtest.content(tdtest.run_done(ev, "echo n%d" % i)) == "n%d" % i
