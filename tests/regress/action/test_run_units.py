"""PROTOCOL.md section 4 `run` item 1: a multi-line command text is one
unit — heredocs, loops, continuations, several commands — with all output,
the exit code of the last command and no continuation prompts. Driven
through the termd Python package (proto/python), as a backend would."""

import os

import termd


def run_done(client, command, exit_code=0):
    """Run a command that must finish with exit_code; its RunResult."""
    r = client.run(command)
    assert isinstance(r, termd.RunResult), r
    assert r.running is False, "command %r still running: %r" % (command, r)
    assert r.exit_code == exit_code, "command %r: exit_code %r, wanted %r: %r" % (
        command, r.exit_code, exit_code, r)
    return r


def lines(r):
    return r.output.split("\n") if r.output else []


def no_continuation_prompts(obs):
    for ln in lines(obs):
        assert not ln.startswith("> "), "continuation prompt in content: %r" % obs
        assert ln != ">", "continuation prompt in content: %r" % obs


def test_heredoc(client):
    obs = run_done(client, "cat <<EOF\nline1\nline2\nEOF")
    assert lines(obs) == ["line1", "line2"], obs
    no_continuation_prompts(obs)


def test_heredoc_quoted_with_expansion_and_followup(client):
    run_done(client, "V=expanded")
    obs = run_done(client, "cat <<'END'\nraw $V\nEND\ncat <<END\nnow $V\nEND\necho tail")
    assert lines(obs) == ["raw $V", "now expanded", "tail"], obs
    no_continuation_prompts(obs)


def test_for_loop_over_lines(client):
    obs = run_done(client, "for i in 1 2 3\ndo\n  echo item$i\ndone")
    assert lines(obs) == ["item1", "item2", "item3"], obs
    no_continuation_prompts(obs)


def test_if_and_function_over_lines(client):
    obs = run_done(client, "f() {\n  if [ \"$1\" = yes ]; then\n    echo said-yes\n  else\n    echo said-no\n  fi\n}\nf yes\nf no")
    assert lines(obs) == ["said-yes", "said-no"], obs
    no_continuation_prompts(obs)


def test_backslash_continuation(client):
    obs = run_done(client, "echo one \\\n  two \\\n  three")
    assert obs.output == "one two three", obs
    no_continuation_prompts(obs)


def test_quoted_newline(client):
    obs = run_done(client, "echo 'first\nsecond'")
    assert lines(obs) == ["first", "second"], obs
    no_continuation_prompts(obs)


SEVEN = ["echo c1", "echo c2 >&2", "printf 'c3\\n'", "X=5", "echo x$X", "pwd"]


def test_seven_commands_last_false(termd, client):
    obs = run_done(client, "\n".join(SEVEN + ["false"]), 1)
    ls = lines(obs)
    assert len(ls) == 5 and ls[:4] == ["c1", "c2", "c3", "x5"], obs
    assert os.path.realpath(ls[4]) == os.path.realpath(termd.home), obs
    no_continuation_prompts(obs)
    for cmd in SEVEN[:-1]:
        assert cmd not in obs.output, "echoed command %r in content: %s" % (cmd, obs)


def test_seven_commands_last_true(client):
    cmds = ["echo c1", "false", "echo c3", "(exit 9)", "echo c5", "cd /tmp", "true"]
    obs = run_done(client, "\n".join(cmds), 0)
    assert lines(obs) == ["c1", "c3", "c5"], obs
    assert obs.cwd == "/tmp", obs
    no_continuation_prompts(obs)


def test_trailing_newline_and_blank_lines(client):
    obs = run_done(client, "echo a\n\n\necho b\n")
    assert lines(obs) == ["a", "b"], obs
    no_continuation_prompts(obs)


def test_multiline_then_single_line(client):
    run_done(client, "for i in 1 2\ndo\n echo $i\ndone")
    assert run_done(client, "echo next").output == "next"


def test_find_exec_grep(client, tmp_path):
    d = tmp_path / "tree"
    (d / "sub" / "deeper").mkdir(parents=True)
    (d / "a.txt").write_text("has needle here\n")
    (d / "b.txt").write_text("nothing\n")
    (d / "sub" / "c.txt").write_text("another needle\n")
    (d / "sub" / "deeper" / "d.txt").write_text("no\n")
    obs = run_done(client, "find %s -type f -exec grep -l needle {} \\;" % d)
    assert sorted(lines(obs)) == sorted([str(d / "a.txt"), str(d / "sub" / "c.txt")]), obs
