"""PROTOCOL.md section 4 `run` item 6, `keys` and `screen`: full-screen
programs and the rendered screen."""

import shutil
import time

import pytest

from tdtest import content, find_vim, fmt, lines, run, run_done, run_obs, wait_until


def run_when_idle(ev, command, timeout=15.0):
    """`run` that retries while the session is still busy finishing a
    program driven with keys (its end may arrive just after the keys
    observation). Returns the run observation."""
    deadline = time.monotonic() + timeout
    while True:
        obs = run(ev, command)
        busy = obs.get("observation") == "error" and (obs.get("extras") or {}).get("code") == "busy"
        if not busy:
            return obs
        assert time.monotonic() < deadline, "session still busy after %.0f s: %s" % (timeout, fmt(obs))
        time.sleep(0.2)


def screen(ev):
    obs = ev.call("screen", {})
    assert obs.get("observation") == "screen", fmt(obs)
    return obs


def keys(ev, *k, **args):
    a = {"keys": list(k)}
    a.update(args)
    obs = ev.call("keys", a)
    assert obs.get("observation") == "screen", fmt(obs)
    return obs


def test_screen_at_prompt(ev):
    run_done(ev, "echo screen-marker")
    obs = screen(ev)
    x = obs["extras"]
    assert x.get("cols") == 160 and x.get("rows") == 48, fmt(obs)
    assert len(content(obs).split("\n")) == x["rows"], "want one line per row: %s" % fmt(obs)
    assert "screen-marker" in lines(obs), fmt(obs)
    cur = x.get("cursor")
    assert isinstance(cur, dict) and type(cur.get("row")) is int and type(cur.get("col")) is int, fmt(obs)
    assert 0 <= cur["row"] < x["rows"] and 0 <= cur["col"] <= x["cols"], fmt(obs)
    assert x.get("alt_screen") is False, fmt(obs)
    assert "title" in x and (x["title"] is None or isinstance(x["title"], str)), fmt(obs)
    for ln in lines(obs):
        assert ln == ln.rstrip(" "), "trailing spaces not trimmed: %r" % ln


def test_screen_title(ev):
    run_done(ev, "printf '\\033]2;my-title\\007'")
    obs = screen(ev)
    assert obs["extras"]["title"] == "my-title", fmt(obs)


def test_screen_title_from_osc_0(ev):
    # OSC 0 sets the icon name and the title at once: most prompts use it
    run_done(ev, "printf '\\033]0;zero-title\\007'")
    obs = screen(ev)
    assert obs["extras"]["title"] == "zero-title", fmt(obs)


def test_keys_at_prompt(ev):
    obs = keys(ev, "echo typed", "Enter")

    def shows_typed():
        o = screen(ev)
        return "typed" in lines(o)

    if "typed" not in lines(obs):
        wait_until(shows_typed, 15, 0.2, "'typed' on the screen")
    # the shell is fine afterwards
    obs = run_when_idle(ev, "echo after-keys")
    assert obs.get("observation") == "run" and content(obs) == "after-keys", fmt(obs)


def test_keys_named_keys_edit_the_line(ev):
    run_done(ev, "true")  # at the prompt
    # type "echo abd", Left (before d), BSpace (drops b), Right, C-a, End,
    # Enter: runs "echo ad"
    keys(ev, "echo abd", "Left", "BSpace", "Right", "C-a", "End", "Enter")

    def shows():
        return "ad" in lines(screen(ev))

    wait_until(shows, 15, 0.2, "'ad' on the screen")


def test_keys_function_and_alt_keys_send_their_sequences(ev):
    # cat -v shows what each key sent: F12 is ESC [ 2 4 ~ (F1..F12 are key
    # names, not text), M-x is ESC x (Alt prefixes an ESC), F1 ESC O P
    obs = run_obs(ev, "cat -v", timeout=1)
    assert obs["extras"]["running"] is True, fmt(obs)
    keys(ev, "F12", "M-x", "F1", "Enter")
    want = "^[[24~^[x^[OP"
    wait_until(lambda: want in lines(screen(ev)), 15, 0.1, "%r on the screen" % want)
    keys(ev, "C-d")
    obs = run_when_idle(ev, "echo after-cat")
    assert obs.get("observation") == "run" and content(obs) == "after-cat", fmt(obs)


def test_keys_right_after_run_reach_the_line_editor(ev):
    # Once a run observation says the command is over, the shell is back at
    # its prompt: keys sent right then are edited by the shell's line
    # editor, not by the tty's cooked mode (where Left arrives as "^[[D"
    # and BSpace erases a byte of it). Repeated because it is a race.
    for n in range(12):
        run_done(ev, "true")
        keys(ev, "echo k%dZd" % n, "Left", "BSpace", "Enter")
        want = "k%dd" % n

        def shows():
            return want in lines(screen(ev))

        try:
            wait_until(shows, 10, 0.1, "%r on the screen" % want)
        except AssertionError:
            tail = [ln for ln in lines(screen(ev)) if ln][-6:]
            raise AssertionError("round %d: keys were not handled by the line editor; screen ends:\n%s"
                                 % (n, "\n".join(tail)))
        # let the keys-typed command finish before the next run
        obs = run_when_idle(ev, "true")
        assert obs.get("observation") == "run", fmt(obs)


def test_vim_edit_and_quit(ev, tmp_path):
    vim = find_vim()
    if not vim:
        pytest.skip("no vim or vim.tiny")
    f = tmp_path / "vimfile.txt"
    obs = run_obs(ev, "%s -u NONE -i NONE -N %s" % (vim, f))
    x = obs["extras"]
    assert x["alt_screen"] is True, fmt(obs)
    assert x["running"] is True and x["exit_code"] == -1, fmt(obs)
    assert "~" in lines(obs), "content is not vim's screen: %s" % fmt(obs)
    s = screen(ev)
    assert s["extras"]["alt_screen"] is True, fmt(s)
    assert len(content(s).split("\n")) == s["extras"]["rows"], fmt(s)
    obs = keys(ev, "i", "hello", "Escape", ":wq", "Enter")
    wait_until(lambda: f.exists() and "hello" in f.read_text(), 15, 0.1, "vim to write the file")
    assert f.read_text() == "hello\n"
    obs = run_when_idle(ev, "echo back")
    assert obs.get("observation") == "run" and content(obs) == "back", fmt(obs)
    assert obs["extras"]["alt_screen"] is False and obs["extras"]["exit_code"] == 0, fmt(obs)
    assert screen(ev)["extras"]["alt_screen"] is False


def test_vim_is_input_and_content(ev, tmp_path):
    vim = find_vim()
    if not vim:
        pytest.skip("no vim or vim.tiny")
    f = tmp_path / "shown.txt"
    f.write_text("first line of the file\nsecond line\n")
    obs = run_obs(ev, "%s -u NONE -i NONE -N %s" % (vim, f))
    assert obs["extras"]["alt_screen"] is True, fmt(obs)
    ls = lines(obs)
    assert ls[:2] == ["first line of the file", "second line"], fmt(obs)
    # quit through `run` with is_input (typed + Enter)
    obs = run_obs(ev, ":q!", is_input=True)
    assert obs["extras"]["running"] is False and obs["extras"]["exit_code"] == 0, fmt(obs)
    assert obs["extras"]["alt_screen"] is False, fmt(obs)
    assert content(run_done(ev, "echo vim-gone")) == "vim-gone"


def test_less(ev):
    if not shutil.which("less"):
        pytest.skip("no less")
    obs = run_obs(ev, "seq 1 200 | less")
    assert obs["extras"]["alt_screen"] is True, fmt(obs)
    assert obs["extras"]["running"] is True, fmt(obs)
    assert lines(obs)[:3] == ["1", "2", "3"], fmt(obs)
    keys(ev, "q")
    obs = run_when_idle(ev, "echo after-less")
    assert obs.get("observation") == "run" and content(obs) == "after-less", fmt(obs)
