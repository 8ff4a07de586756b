"""PROTOCOL.md section 4 `run` item 1: a multi-line command text is one
unit — heredocs, loops, continuations, several commands — with all output,
the exit code of the last command and no continuation prompts."""

import os

from tdtest import content, fmt, lines, run_done


def no_continuation_prompts(obs):
    for ln in lines(obs):
        assert not ln.startswith("> "), "continuation prompt in content: %s" % fmt(obs)
        assert ln != ">", "continuation prompt in content: %s" % fmt(obs)


def test_heredoc(ev):
    obs = run_done(ev, "cat <<EOF\nline1\nline2\nEOF")
    assert lines(obs) == ["line1", "line2"], fmt(obs)
    no_continuation_prompts(obs)


def test_heredoc_quoted_with_expansion_and_followup(ev):
    run_done(ev, "V=expanded")
    obs = run_done(ev, "cat <<'END'\nraw $V\nEND\ncat <<END\nnow $V\nEND\necho tail")
    assert lines(obs) == ["raw $V", "now expanded", "tail"], fmt(obs)
    no_continuation_prompts(obs)


def test_for_loop_over_lines(ev):
    obs = run_done(ev, "for i in 1 2 3\ndo\n  echo item$i\ndone")
    assert lines(obs) == ["item1", "item2", "item3"], fmt(obs)
    no_continuation_prompts(obs)


def test_if_and_function_over_lines(ev):
    obs = run_done(ev, "f() {\n  if [ \"$1\" = yes ]; then\n    echo said-yes\n  else\n    echo said-no\n  fi\n}\nf yes\nf no")
    assert lines(obs) == ["said-yes", "said-no"], fmt(obs)
    no_continuation_prompts(obs)


def test_backslash_continuation(ev):
    obs = run_done(ev, "echo one \\\n  two \\\n  three")
    assert content(obs) == "one two three", fmt(obs)
    no_continuation_prompts(obs)


def test_quoted_newline(ev):
    obs = run_done(ev, "echo 'first\nsecond'")
    assert lines(obs) == ["first", "second"], fmt(obs)
    no_continuation_prompts(obs)


SEVEN = ["echo c1", "echo c2 >&2", "printf 'c3\\n'", "X=5", "echo x$X", "pwd"]


def test_seven_commands_last_false(termd, ev):
    obs = run_done(ev, "\n".join(SEVEN + ["false"]), 1)
    ls = lines(obs)
    assert len(ls) == 5 and ls[:4] == ["c1", "c2", "c3", "x5"], fmt(obs)
    assert os.path.realpath(ls[4]) == os.path.realpath(termd.home), fmt(obs)
    no_continuation_prompts(obs)
    for cmd in SEVEN[:-1]:
        assert cmd not in content(obs), "echoed command %r in content: %s" % (cmd, fmt(obs))


def test_seven_commands_last_true(ev):
    cmds = ["echo c1", "false", "echo c3", "(exit 9)", "echo c5", "cd /tmp", "true"]
    obs = run_done(ev, "\n".join(cmds), 0)
    assert lines(obs) == ["c1", "c3", "c5"], fmt(obs)
    assert obs["extras"]["cwd"] == "/tmp", fmt(obs)
    no_continuation_prompts(obs)


def test_trailing_newline_and_blank_lines(ev):
    obs = run_done(ev, "echo a\n\n\necho b\n")
    assert lines(obs) == ["a", "b"], fmt(obs)
    no_continuation_prompts(obs)


def test_multiline_then_single_line(ev):
    run_done(ev, "for i in 1 2\ndo\n echo $i\ndone")
    assert content(run_done(ev, "echo next")) == "next"


def test_find_exec_grep(ev, tmp_path):
    d = tmp_path / "tree"
    (d / "sub" / "deeper").mkdir(parents=True)
    (d / "a.txt").write_text("has needle here\n")
    (d / "b.txt").write_text("nothing\n")
    (d / "sub" / "c.txt").write_text("another needle\n")
    (d / "sub" / "deeper" / "d.txt").write_text("no\n")
    obs = run_done(ev, "find %s -type f -exec grep -l needle {} \\;" % d)
    assert sorted(lines(obs)) == sorted([str(d / "a.txt"), str(d / "sub" / "c.txt")]), fmt(obs)
