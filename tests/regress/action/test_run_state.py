"""PROTOCOL.md section 4 `run`, items 1-2: a stateful shell, exit codes,
the extras of a run observation, content without echo or prompt, and shell
integration that survives what users do to their shell."""

import os

from tdtest import PY, content, fmt, lines, run_done, run_obs


def real(p):
    return os.path.realpath(p)


def test_starts_in_cwd(termd, ev):
    obs = run_done(ev, "pwd")
    assert real(content(obs)) == real(termd.home), fmt(obs)
    assert real(obs["extras"]["cwd"]) == real(termd.home), fmt(obs)


def test_cd_persists_and_cwd_follows(ev):
    obs = run_done(ev, "cd /tmp")
    assert content(obs) == "", fmt(obs)
    assert obs["extras"]["cwd"] == "/tmp", fmt(obs)
    obs = run_done(ev, "pwd")
    assert content(obs) == "/tmp", fmt(obs)
    assert obs["extras"]["cwd"] == "/tmp", fmt(obs)
    obs = run_done(ev, "cd /usr/share && cd ..")
    assert obs["extras"]["cwd"] == "/usr", fmt(obs)


def test_cwd_with_spaces_and_unicode(ev, tmp_path):
    d = tmp_path / "dir with spaces é"
    d.mkdir()
    obs = run_done(ev, "cd '%s'" % d)
    assert real(obs["extras"]["cwd"]) == real(d), fmt(obs)
    assert real(content(run_done(ev, "pwd"))) == real(d)


def test_variables_functions_aliases_persist(ev):
    run_done(ev, "export X=1")
    assert content(run_done(ev, "echo $X")) == "1"
    run_done(ev, "Y=two")  # not exported, still shell state
    assert content(run_done(ev, 'echo "$Y"')) == "two"
    run_done(ev, "greet() { echo \"fn-$1\"; }")
    assert content(run_done(ev, "greet a")) == "fn-a"
    run_done(ev, "alias hi='echo aliased'")
    assert content(run_done(ev, "hi")) == "aliased"


def test_exit_codes(ev):
    assert run_done(ev, "true", 0)["extras"]["exit_code"] == 0
    assert run_done(ev, "false", 1)["extras"]["exit_code"] == 1
    run_done(ev, "(exit 42)", 42)
    obs = run_done(ev, "no_such_command_xyz_123", 127)
    assert "command not found" in content(obs), fmt(obs)
    # $? seen by the next command is the shell's own
    run_done(ev, "(exit 7)", 7)
    assert content(run_done(ev, "echo $?")) == "7"


def test_extras_fields_and_types(ev):
    obs = run_done(ev, "echo hello")
    x = obs["extras"]
    assert x.get("session") == "main", fmt(obs)
    assert type(x.get("exit_code")) is int, fmt(obs)
    assert x.get("running") is False, fmt(obs)
    assert isinstance(x.get("cwd"), str) and x["cwd"].startswith("/"), fmt(obs)
    assert type(x.get("pid")) is int and x["pid"] > 0, fmt(obs)
    assert isinstance(x.get("duration_ms"), (int, float)) and not isinstance(x["duration_ms"], bool), fmt(obs)
    assert x["duration_ms"] >= 0, fmt(obs)
    assert "timed_out" in x and x["timed_out"] is None, fmt(obs)
    assert x.get("waiting_for_input") is False, fmt(obs)
    assert x.get("alt_screen") is False, fmt(obs)
    assert x.get("truncated") is False, fmt(obs)
    assert x.get("output_file") is None, fmt(obs)
    assert obs.get("cause") and isinstance(obs.get("seq"), int)


def test_pid_is_the_shell_when_done(ev):
    obs = run_done(ev, "echo $$")
    assert content(obs) == str(obs["extras"]["pid"]), fmt(obs)


def test_duration_covers_the_command(ev):
    obs = run_done(ev, "sleep 1")
    assert obs["extras"]["duration_ms"] >= 900, fmt(obs)


def test_content_excludes_echo_and_prompt(ev):
    assert content(run_done(ev, "echo hello")) == "hello"
    assert content(run_done(ev, "true")) == ""
    assert lines(run_done(ev, "printf 'a\\nb\\n'")) == ["a", "b"]
    # output without a final newline
    assert content(run_done(ev, "printf 'no-newline'")) == "no-newline"
    # stderr is on the terminal too
    assert content(run_done(ev, "echo to-stderr >&2")) == "to-stderr"


def test_many_runs_in_a_row(ev):
    for i in range(30):
        assert content(run_done(ev, "echo n%d" % i)) == "n%d" % i


def test_custom_ps1(ev):
    run_done(ev, "PS1='custom> '")
    obs = run_done(ev, "echo hi")
    assert content(obs) == "hi", fmt(obs)
    run_done(ev, "false", 1)
    obs = run_done(ev, "cd /tmp")
    assert obs["extras"]["cwd"] == "/tmp"
    # an empty prompt and a multi-line prompt with escapes
    run_done(ev, "PS1=''")
    assert content(run_done(ev, "echo empty-ps1")) == "empty-ps1"
    run_done(ev, "PS1='\\[\\e[32m\\]\\u@\\h \\w\\[\\e[0m\\]\\n\\$ '")
    assert content(run_done(ev, "echo two-line-ps1")) == "two-line-ps1"
    run_done(ev, "false", 1)


def test_set_u(ev):
    run_done(ev, "set -u")
    assert content(run_done(ev, "echo ok")) == "ok"
    run_done(ev, "false", 1)
    obs = run_done(ev, "echo $UNDEFINED_VAR_XYZ", 1)
    assert "unbound variable" in content(obs), fmt(obs)
    assert content(run_done(ev, "echo still")) == "still"
    obs = run_done(ev, "cd /tmp")
    assert obs["extras"]["cwd"] == "/tmp"


def test_set_pipefail(ev):
    run_done(ev, "set -o pipefail")
    run_done(ev, "false | true", 1)
    run_done(ev, "true | true", 0)
    assert content(run_done(ev, "echo pf")) == "pf"


def test_set_u_and_pipefail_together(ev):
    run_done(ev, "set -euo pipefail 2>/dev/null; set +e")
    assert content(run_done(ev, "echo both")) == "both"
    run_done(ev, "false", 1)


def test_set_x_traces_the_command_not_the_hook(ev):
    """under set -x a command's output is its own trace and output: nothing
    of termd's prompt hook (PROMPT_COMMAND [0] and [99]) is traced"""
    run_done(ev, "set -x")
    obs = run_done(ev, "echo hi")
    assert lines(obs) == ["+ echo hi", "hi"], fmt(obs)
    obs = run_done(ev, "false", 1)
    assert lines(obs) == ["+ false"], fmt(obs)
    obs = run_done(ev, "cd /tmp")
    assert lines(obs) == ["+ cd /tmp"], fmt(obs)
    assert obs["extras"]["cwd"] == "/tmp", fmt(obs)
    obs = run_done(ev, "set +x")
    assert lines(obs) == ["+ set +x"], fmt(obs)
    assert content(run_done(ev, "echo plain")) == "plain"


def test_prompt_command_replaced_or_cut(ev):
    """a plain PROMPT_COMMAND=... replaces element [0], termd's hook: [99]
    puts it back; [99] unset: [0] puts it back. Exit codes and the cwd are
    right all along, and the user's own command runs at each prompt."""
    run_done(ev, "PROMPT_COMMAND='__pc_ran=$((${__pc_ran:-0}+1))'")
    run_done(ev, "false", 1)
    obs = run_done(ev, 'echo "[${PROMPT_COMMAND[0]}]"')
    assert "__termd_prompt 0" in content(obs), fmt(obs)
    assert "__pc_ran" in content(obs), fmt(obs)
    obs = run_done(ev, "cd /tmp")
    assert obs["extras"]["cwd"] == "/tmp", fmt(obs)
    n = int(content(run_done(ev, "echo $__pc_ran")))
    assert int(content(run_done(ev, "echo $__pc_ran"))) == n + 1
    run_done(ev, 'unset "PROMPT_COMMAND[99]"')
    run_done(ev, "(exit 3)", 3)
    obs = run_done(ev, 'echo "[${PROMPT_COMMAND[99]}]"')
    assert content(obs) not in ("", "[]"), fmt(obs)
    run_done(ev, "false", 1)
    assert content(run_done(ev, "echo still")) == "still"


def test_fake_venv_activation(ev, tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "activate").write_text(
        'deactivate () {\n'
        '    PATH="$_OLD_VIRTUAL_PATH"; export PATH; unset _OLD_VIRTUAL_PATH\n'
        '    PS1="$_OLD_VIRTUAL_PS1"; export PS1; unset _OLD_VIRTUAL_PS1\n'
        '    unset VIRTUAL_ENV; unset -f deactivate; hash -r 2>/dev/null\n'
        '}\n'
        'VIRTUAL_ENV="%s"\n'
        'export VIRTUAL_ENV\n'
        '_OLD_VIRTUAL_PATH="$PATH"\n'
        'PATH="$VIRTUAL_ENV/bin:$PATH"\n'
        'export PATH\n'
        '_OLD_VIRTUAL_PS1="${PS1:-}"\n'
        'PS1="(venv) ${PS1:-}"\n'
        'export PS1\n'
        'hash -r 2>/dev/null\n' % venv)
    tool = venv / "bin" / "venvtool"
    tool.write_text("#!/bin/sh\necho venv-tool-ran\n")
    tool.chmod(0o755)
    run_done(ev, "source '%s'" % (venv / "bin" / "activate"))
    obs = run_done(ev, "echo $VIRTUAL_ENV")
    assert content(obs) == str(venv), fmt(obs)
    assert content(run_done(ev, "venvtool")) == "venv-tool-ran"
    run_done(ev, "false", 1)
    obs = run_done(ev, "cd /tmp")
    assert obs["extras"]["cwd"] == "/tmp"
    run_done(ev, "deactivate")
    assert content(run_done(ev, "echo ${VIRTUAL_ENV:-none}")) == "none"
    run_done(ev, "venvtool", 127)


def test_output_that_looks_like_integration_marks(ev):
    # A fake "command finished" mark, then more output and a different exit
    # code: the command must not be considered over at the fake mark.
    obs = run_done(ev, "printf '\\033]133;D;0\\007'; sleep 1; echo after-mark; false", 1)
    assert content(obs) == "after-mark", fmt(obs)
    # Other shell-integration-looking marks (prompt start, command start, with
    # both terminators).
    obs = run_done(ev, "printf '\\033]133;A\\007\\033]133;B\\033\\\\\\033]133;C\\007'; echo marks; (exit 3)", 3)
    assert content(obs) == "marks", fmt(obs)
    # A fake cwd report does not change the cwd.
    before = run_done(ev, "pwd")
    obs = run_done(ev, "printf '\\033]7;file:///etc\\007'; echo osc7")
    assert content(obs) == "osc7", fmt(obs)
    assert obs["extras"]["cwd"] == before["extras"]["cwd"] != "/etc", fmt(obs)
    obs = run_done(ev, "pwd")
    assert content(obs) == before["extras"]["cwd"] or os.path.realpath(content(obs)) == os.path.realpath(
        before["extras"]["cwd"]), fmt(obs)
    assert obs["extras"]["cwd"] == before["extras"]["cwd"], fmt(obs)
    # and the shell still works normally afterwards
    assert content(run_done(ev, "echo normal")) == "normal"


def test_output_with_fake_marks_split_by_a_program(ev, tmp_path):
    # The same fake mark written in two pieces by a program.
    script = tmp_path / "split_mark.py"
    script.write_text("import sys, time\n"
                      "sys.stdout.write('\\x1b]13'); sys.stdout.flush(); time.sleep(0.3)\n"
                      "sys.stdout.write('3;D;0\\x07'); sys.stdout.flush(); time.sleep(0.5)\n"
                      "print('split-done'); sys.exit(4)\n")
    obs = run_done(ev, "%s %s" % (PY, script), 4)
    assert content(obs) == "split-done", fmt(obs)


def test_run_observation_kind_is_run(ev):
    obs = run_obs(ev, "echo k")
    assert obs["observation"] == "run" and obs["extras"]["session"] == "main"
