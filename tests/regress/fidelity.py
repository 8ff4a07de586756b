"""The differential harness of PROTOCOL.md §4 run item 13: a command run by
termd's `run` in a shell session must answer what `bash -c` prints for it.

What is here: the corpus (commands of the kinds agents write), a seeded
grammar-based generator of random shell commands, how a command is run on
each side, and THE ONE PLACE that lists the differences a terminal makes by
design (`normalize`). Used by tests/regress/action/test_run_fidelity.py (the corpus and a
seeded slice of the generator in `make test`), by `make fuzz-fidelity` (the
generator, unbounded seeds) and by tests/bench/bench_fidelity.py.

How each side runs a command, so that only the terminal differs:
- termd: `run` in a shell session whose cwd is a fresh copy of the fixture
  folder; a command left waiting for input gets C-d (end of input), as
  `bash -c`'s stdin is /dev/null; after it the session's options and traps
  are put back (`set +euo pipefail`, `trap - ...`), because the corpus is
  run in one shell one command after another.
- `bash -c`: in an identical copy of the fixture, stdin /dev/null, stdout
  and stderr on a pty of the session's size (so `ls` writes columns and
  programs line-buffer as they do on termd's terminal), environment as
  termd's shell has it (HOME, LANG, TERM).
"""

import os
import pty
import random
import re
import select
import shutil
import signal
import struct
import subprocess
import termios
import fcntl
import time

BASH = shutil.which("bash") or "/bin/bash"
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3"

# ---------------------------------------------------------------- fixture

FIXTURE = {
    "a.txt": "alpha\nbeta\ngamma\n",
    "b.txt": "one two three\nfour five six\n",
    "data.csv": "name,qty,price\napple,3,1.50\npear,10,0.25\nfig,7,2.00\n",
    "notes.md": "# Title\n\nSome *text* with a TODO here.\nAnother TODO: fix it!\n",
    "src/main.py": "import sys\n\ndef main():\n    print('hello from main')\n    return 0\n\nif __name__ == '__main__':\n    sys.exit(main())\n",
    "src/util.py": "def add(a, b):\n    return a + b\n# TODO: more\n",
    "src/empty.txt": "",
    "unicode/héllo.txt": "naïve café — ünïcödé ✓\n",
    "space dir/file one.txt": "spaced\n",
}


def make_fixture(path):
    """Write the fixture tree under path (which must not exist)."""
    os.makedirs(path)
    for rel, text in FIXTURE.items():
        p = os.path.join(path, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w", encoding="utf-8") as f:
            f.write(text)
    # a fixed mtime, so that `ls -l`-like output does not depend on when
    for root, dirs, files in os.walk(path):
        for n in dirs + files:
            os.utime(os.path.join(root, n), (1700000000, 1700000000))
    os.utime(path, (1700000000, 1700000000))


# ----------------------------------------------------------------- corpus

def _q(s):
    return "'" + s.replace("'", "'\\''") + "'"


CORPUS = [
    # quotes and !
    'echo "a!b"', 'echo "hello world!"', "echo 'single !quoted'", 'echo "two!!"', 'echo "!$"',
    'echo "wow!" && echo "again!"', 'printf "%s!\\n" done', "echo !", 'echo "x ! y"',
    'echo "a\\"b"', "echo 'it'\\''s'", 'echo "$HOME" | wc -c', 'echo "tab\there"', "echo a\\ b",
    'echo "nested $(echo "inner $(echo deep)")"', "echo `echo backtick`", 'echo "${UNSET_VAR:-default}"',
    'x="spaces   inside"; echo "$x"; echo $x', "echo '$not_expanded'", 'echo "$((3 * 7))"',
    # $'...'
    "echo $'line1\\nline2'", "printf '%s\\n' $'tab\\there'", "echo $'quote\\'s'", "echo $'\\x41\\x42'",
    "echo $'\\u00e9t\\u00e9'",
    # heredocs
    "cat <<EOF\nplain $HOME-free text\nEOF", "cat <<'EOF'\nraw $HOME and `x` and \\n\nEOF",
    "X=42; cat <<EOF\nvalue=$X\nsum=$((X+1))\nEOF", "cat <<-EOF\n\tindented\n\tEOF",
    "cat > new.txt <<'EOF'\nfirst\nsecond!\nEOF\ncat new.txt; wc -l new.txt",
    "python3 - <<'EOF'\nprint('from heredoc', 6*7)\nEOF", "while read -r l; do echo \"[$l]\"; done <<EOF\na b\nc\nEOF",
    "cat <<EOF | tr a-z A-Z\nshout this\nEOF", "bash <<'EOF'\necho nested bash $((1+1))\nEOF",
    # python3 -c
    'python3 -c "print(\\"ok!\\")"', "python3 -c 'print(1+1)'", "python3 -c 'import sys; print(sys.argv[1:])' a 'b c'",
    "python3 -c 'import sys; sys.exit(3)'", "python3 -c 'raise SystemExit(\"boom\")'",
    "python3 -c 'import json; print(json.dumps({\"a\": [1, 2]}))'", "python3 -c 'print(\"é ✓\")'",
    "python3 -c 'for i in range(3): print(i)'", "python3 -c '1/0' 2>&1 | tail -1",
    "python3 -c 'import os; print(os.getcwd() == os.environ[\"PWD\"])'",
    # sed / awk / grep
    "sed -n '2p' a.txt", "sed -n '/beta/,$p' a.txt", 'sed "s/alpha/ALPHA!/" a.txt', "sed -i 's/beta/BETA/' a.txt && cat a.txt",
    "sed -i.bak -e '1d' b.txt && cat b.txt b.txt.bak", "sed -n '$=' data.csv", "awk -F, 'NR>1 {s+=$2*$3} END {printf \"%.2f\\n\", s}' data.csv",
    "awk '{print NF, $1}' b.txt", "awk 'BEGIN {for (i=0;i<3;i++) print \"i=\" i}'", "grep -n TODO notes.md", "grep -c TODO -r .",
    "grep -rl TODO . | sort", "grep -q nothing a.txt; echo $?", "grep -E '^(alpha|gamma)$' a.txt", "grep -v a a.txt; echo rc=$?",
    "grep nothere a.txt", "cut -d, -f1 data.csv | sort", "sort -t, -k2 -n data.csv", "head -n 2 data.csv; tail -n 1 data.csv",
    "tr ',' '\\t' < data.csv", "wc -l < a.txt", "uniq -c <(printf 'a\\na\\nb\\n')", "paste -d: a.txt a.txt",
    # find / xargs
    "find . -name '*.py' | sort", "find . -type f -name '*.txt' -exec wc -c {} + | sort", "find . -name '*.py' -exec grep -l TODO {} \\;",
    "find src -type f | xargs -n1 basename | sort", "printf 'a.txt\\nb.txt\\n' | xargs cat", "find . -empty | sort",
    "find . -maxdepth 1 -type d | sort", "ls", "ls -1 src", "ls -a src", "ls nothere", "ls -d */",
    "find . -type f -print0 | xargs -0 -n1 echo | sort | head -3",
    # pipes and subshells
    "echo a | tr a b | tr b c", "(cd src && pwd | sed 's|.*/||'); pwd | sed 's|.*/||'", "(exit 3); echo $?",
    "false | true; echo $?", "true | false; echo $?", "{ echo one; echo two; } | sort -r", "echo $(ls src | wc -l)",
    "seq 1 5 | paste -sd+ | bc", "seq 3 | while read n; do echo n=$n; done", "yes | head -3", "echo out; echo err >&2",
    "ls nothere 2>&1 | head -1", "echo x >/dev/null; echo $?", "cat a.txt | grep -c a", "diff a.txt b.txt; echo rc=$?",
    "diff <(echo x) <(echo x) && echo same", "echo hello > out.txt; cat out.txt", "echo 1 >> a.txt; tail -1 a.txt",
    "exec 3>fd3.txt; echo via3 >&3; exec 3>&-; cat fd3.txt",
    # set -e / -u / pipefail
    "set -o pipefail; false | true; echo $?", "set -u; echo ${UNSET_THING:-fine}", "set -e; true; echo reached",
    "set -euo pipefail; echo strict ok", "set -u; echo \"$UNDEFINED_X\"; echo after", "set -o pipefail; ls nothere | cat; echo rc=$?",
    # traps and functions
    "f() { echo \"f:$1\"; }; f one; f 'two words'", "f() { return 4; }; f; echo $?", "trap 'echo trapped' ERR; false; true",
    "g() { local v=inner; echo $v; }; v=outer; g; echo $v", "h() { echo \"$#:$*\"; }; h a b c", "fact() { if [ $1 -le 1 ]; then echo 1; else echo $(( $1 * $(fact $(( $1 - 1 ))) )); fi; }; fact 5",
    "type cd | head -1", "declare -A m=([k]=v [x]=y); echo ${m[k]} ${#m[@]}",
    "arr=(a 'b c' d); echo ${#arr[@]} ${arr[1]}; for x in \"${arr[@]}\"; do echo \"<$x>\"; done",
    # cd chains and state
    "cd src && ls | sort && cd ..", "cd src; cd ..; pwd | sed 's|.*/||'", "cd nowhere", "cd 'space dir' && cat 'file one.txt'",
    "cd unicode && cat héllo.txt", "pushd src >/dev/null; popd >/dev/null; echo back", "mkdir -p x/y/z && cd x/y/z && pwd | sed 's|.*/work/||'",
    # unicode and long lines
    "echo 'héllo wörld ✓ 漢字'", "printf '%s\\n' 'ünïcödé'", "echo 🎉", "python3 -c 'print(\"x\" * 300)'", "printf '%0200d\\n' 7",
    "seq 1 200 | tr '\\n' ' '; echo", "echo " + "word " * 60, "printf 'a%.0s' $(seq 1 100); echo",
    # syntax errors and rejected commands
    "echo (", "if then fi", "for x in; do", "echo ok; )", "fi", "done", "case x in", "echo $((1 +))", "echo ${x",
    "echo \"${x!y}\"", "foo() {", "while", "(", "{ echo a", "echo 'unterminated\" ok'", "[[ 1 -eq ]]", ";;",
    # failures
    "false", "(exit 42)", "nosuchcommand_xyz", "./nothere.sh", "cat nothere.txt", "ls -z 2>&1 | head -2", "python3 -c 'import nosuchmod'",
    "mkdir a.txt", "rm nothere", "cp", "grep", "exit 0 2>/dev/null | true", "test -f nothere", "[ 1 -gt 2 ]",
    "chmod 000 a.txt && cat a.txt >/dev/null 2>&1; echo $?; chmod 644 a.txt", "touch /proc/nope 2>&1 | sed 's/.*: //'",
    # reading stdin (termd: waiting for input, then end of input; bash -c: /dev/null)
    "read -r x; echo \"got:$x\"", "cat", "wc -l", "python3 -c 'import sys; print(len(sys.stdin.read()))'",
    "read -r -t 5 a; echo rc=$?", "head -1", "read x < a.txt; echo $x", "while read l; do echo \"<$l>\"; done < a.txt",
    # a program that asks on /dev/tty (stdin is the patch): bash -c has no
    # terminal, patch takes its defaults; termd's answers end of input
    "printf -- '--- a/a.txt\\n+++ b/a.txt\\n@@ -1,3 +1,3 @@\\n alpha\\n-beta\\n+BETA\\n gamma\\n' > fix.patch"
    " && patch -p1 < fix.patch && patch -p1 < fix.patch; echo rc=$?; cat a.txt",
    # arithmetic and tests
    "echo $((2**10)) $((7/2)) $((7%3)) $((-3))", "let x=5+5; echo $x", "[[ abc == a* ]] && echo glob", "[[ abc =~ ^a(b)c$ ]] && echo ${BASH_REMATCH[1]}",
    "test -d src && echo dir", "[ -n \"\" ] || echo empty", "x=5; (( x > 3 )) && echo big", "expr 3 + 4", "echo $((16#ff))",
    # loops and conditionals
    "for i in 1 2 3; do echo $i; done", "for ((i=0; i<3; i++)); do printf '%d,' $i; done; echo", "i=0; while [ $i -lt 3 ]; do i=$((i+1)); done; echo $i",
    "until true; do :; done; echo u", "case foo in f*) echo matched;; *) echo no;; esac", "if grep -q alpha a.txt; then echo yes; else echo no; fi",
    "for f in *.txt; do echo \"$f\"; done", "for f in src/*; do [ -f \"$f\" ] && echo ${f##*/}; done", "select x in a; do break; done </dev/null; echo sel",
    # globbing and expansion
    "echo *.txt", "echo src/*.py", "echo nomatch*", "shopt -s nullglob; echo nomatch*; shopt -u nullglob", "echo {a,b,c}", "echo {1..5}",
    "echo ~ | sed 's|.*/||'", "v=hello; echo ${v^^} ${v:1:3} ${#v} ${v/l/L}", "p=/a/b/c.txt; echo ${p##*/} ${p%.*}", "echo ${PWD##*/}",
    "IFS=,; set -- a,b,c; echo $2; unset IFS", "printf '%5s|%-5s|\\n' r l", "printf '%q\\n' 'a b'", "echo -e 'a\\tb'", "echo -n no-newline",
    # common tools
    "date -d @0 -u +%Y", "basename /x/y.txt .txt", "dirname /x/y/z", "env | grep -c '^HOME='", "printenv HOME >/dev/null && echo has-home",
    "true && echo and || echo or", "false || echo fallback", "sleep 0.1; echo slept", "command -v ls >/dev/null && echo found",
    "seq 5 | tac", "rev <<< abc", "sort -u <<< $'b\\na\\nb'", "jq . 2>/dev/null <<< '{}' || echo nojq", "tar cf - a.txt | tar tf -",
    "gzip -c a.txt | gunzip -c | head -1", "sha256sum a.txt | cut -c1-16", "stat -c %s a.txt", "du -b a.txt | cut -f1", "realpath src/.. | sed 's|.*/||'",
    "od -c <<< hi | head -1", "base64 <<< hello", "md5sum < a.txt | cut -c1-8", "nl a.txt", "fold -w 5 <<< abcdefghij", "column -t -s, data.csv",
    # git-like and multi-command agent steps
    "mkdir -p build && cd build && echo built > out && cat out && cd ..", "cp a.txt c.txt && mv c.txt d.txt && ls d.txt && rm d.txt",
    "touch t1 t2 && ls t* && rm t1 t2", "ln -s a.txt link && readlink link && cat link | head -1", "echo 'print(\"script\")' > s.py && python3 s.py",
    "printf '#!/bin/sh\\necho from script\\n' > s.sh && chmod +x s.sh && ./s.sh", "echo data > f && [ -s f ] && echo nonempty",
    "python3 -c 'import sys; print(\"err\", file=sys.stderr); print(\"out\")'",
    "echo a\necho b\necho c", "x=1\ny=2\necho $((x+y))", "cd src\nls | wc -l\ncd ..", "false\necho after-false", "echo first\nnosuch_cmd_2\necho third",
    "if true\nthen\n  echo multi-if\nfi", "for i in a b\ndo\n  echo $i\ndone", "f() {\n  echo in-f\n}\nf",
]


# ---------------------------------------------------------- the generator

_WORDS = ["alpha", "b c", "it's", "x!y", "two!!", "a\"b", "$HOME", "*", "~", "é", "-n", "", "tab\there", "semi;colon", "back\\slash"]
_FILES = ["a.txt", "b.txt", "data.csv", "nothere", "src/util.py", "'space dir/file one.txt'"]


def _word(rng):
    w = rng.choice(_WORDS)
    style = rng.randrange(4)
    if style == 0:
        return _q(w)
    if style == 1:
        return '"' + w.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$").replace("`", "\\`") + '"'
    if style == 2 and w and all(c.isalnum() for c in w):
        return w
    return "$'" + w.replace("\\", "\\\\").replace("'", "\\'").replace("\t", "\\t") + "'"


def _simple(rng, depth):
    k = rng.randrange(14)
    if k == 0:
        return "echo " + " ".join(_word(rng) for _ in range(rng.randrange(1, 4)))
    if k == 1:
        return "printf '%s|' " + " ".join(_word(rng) for _ in range(rng.randrange(1, 3))) + "; echo"
    if k == 2:
        return rng.choice(["true", "false", "(exit %d)" % rng.randrange(4), ":"])
    if k == 3:
        return "cat " + rng.choice(_FILES)
    if k == 4:
        return "grep %s %s" % (rng.choice(["-n a", "-c e", "-v o", "TODO", "-q alpha"]), rng.choice(_FILES))
    if k == 5:
        return "wc -l < " + rng.choice(_FILES[:3])
    if k == 6:
        return "x=%s; echo \"[$x]\"" % _word(rng)
    if k == 7:
        return "echo $((%d %s %d))" % (rng.randrange(100), rng.choice("+-*/%"), rng.randrange(1, 9))
    if k == 8:
        return "sed -n '%dp' %s" % (rng.randrange(1, 4), rng.choice(_FILES[:3]))
    if k == 9:
        return "ls %s" % rng.choice(["src", "nothere", "-1", "-d src", "unicode"])
    if k == 10:
        return "echo %s >&2" % _word(rng)
    if k == 11:
        return "python3 -c %s" % _q(rng.choice(["print(%d)" % rng.randrange(9), "import sys; sys.exit(%d)" % rng.randrange(3),
                                               "print('é!')", "print(input.__name__)"]))
    if k == 12 and depth < 2:
        return "for i in %s; do %s; done" % (" ".join(str(rng.randrange(9)) for _ in range(rng.randrange(1, 4))), _list(rng, depth + 1))
    if k == 13 and depth < 2:
        return "if %s; then %s; else %s; fi" % (_simple(rng, depth + 1), _simple(rng, depth + 1), _simple(rng, depth + 1))
    return "echo %d" % rng.randrange(1000)


def _pipeline(rng, depth):
    cmd = _simple(rng, depth)
    pipes = rng.choice([0, 0, 0, 1, 2])
    if pipes:
        # stderr goes down the pipe too: written beside it, its order against
        # the pipe's output is a race, with bash -c as with termd
        cmd = "{ " + cmd + "; } 2>&1"
    for _ in range(pipes):
        cmd += " | " + rng.choice(["cat", "sort", "tr a-z A-Z", "wc -c", "head -2", "rev", "sed 's/a/A/g'"])
    r = rng.randrange(10)
    if r == 0 and depth < 2:
        # "( (" as people write it: "((" would start an arithmetic command,
        # whose failed parse bash words differently with and without -c
        cmd = "( " + _list(rng, depth + 1) + " )"
    elif r == 1 and depth < 2:
        cmd = "{ " + _list(rng, depth + 1) + "; }"
    elif r == 2:
        cmd = "echo \"$( " + _simple(rng, depth + 1) + ")\""   # "$( (" is not "$(("
    elif r == 3:
        cmd += " 2>&1"
    return cmd


def _list(rng, depth=0):
    cmd = _pipeline(rng, depth)
    for _ in range(rng.choice([0, 1, 1, 2])):
        cmd += rng.choice([" && ", " || ", "; ", "\n"]) + _pipeline(rng, depth)
    return cmd


def generate(seed, n):
    """n random shell commands from the grammar above, reproducible by seed."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        c = _list(rng)
        if rng.randrange(8) == 0:
            c = rng.choice(["set -o pipefail; ", "set -u; ", "shopt -s nullglob; "]) + c
        out.append(c)
    return out


# ------------------------------------------------ what a terminal changes

_CSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-B]|\x1b[=>]")
_LINE_PREFIX = re.compile(r"^(bash|sh|/bin/bash|-bash): (?:-c: )?line \d+: ", re.M)
_SYNTAX_ECHO = re.compile(r"^(bash|sh|/bin/bash|-bash): (?:-c: )?(?:line \d+: )?`.*'$\n?", re.M)
_SHELL_NAME = re.compile(r"^(?:/bin/bash|-bash): ", re.M)
_TTY_QUESTION = re.compile(r"\? \[[yn]\]$")


def normalize(text, folder):
    """The one list of differences a terminal (and an interactive shell)
    makes by design; everything else must be equal:
    1. line ends: the tty writes CRLF; trailing spaces and trailing empty
       lines are not part of what a person sees (termd's renderer drops
       them); escape sequences (colours) are left out on both sides;
    2. the interactive shell names no line in its messages: `bash -c` says
       `bash: line 3: x: command not found` (or `bash: -c: line 3:` for a
       syntax error), the interactive shell `bash: x: command not found`;
    3. for a syntax error `bash -c` adds a line quoting the text
       (bash: -c: line 1: `echo ('): the interactive shell does not;
    4. the fixture folder's path differs (it is written <DIR>);
    5. a `^C`/`^D` echoed by the tty when end of input is typed;
    6. tabs: termd's renderer gives the screen's spaces (tab stops every 8
       columns), as a person sees them;
    7. end of input (C-d) typed at a continuation prompt: the interactive
       shell may show its continuation prompt (`>`) again before it gives
       up, and then ends (it prints `exit`; termd starts it again): those
       lines are left out;
    8. exit codes in KNOWN_EXIT (with the reason for each);
    9. a question asked on /dev/tty: `bash -c` has no terminal (the
       program takes its default without reading), termd's side answers it
       with end of input, which patch reports on a line `EOF` after the
       question: that line is left out."""
    t = text.replace("\r\n", "\n").replace("\r", "\n")
    t = _CSI.sub("", t)
    t = t.replace(folder, "<DIR>")
    t = _SYNTAX_ECHO.sub("", t)
    t = _LINE_PREFIX.sub("bash: ", t)
    t = _SHELL_NAME.sub("bash: ", t)
    lines = [ln.expandtabs(8).rstrip() for ln in t.split("\n")]
    lines = [ln for ln in lines if ln not in ("^D", "^C")]
    lines = [ln for i, ln in enumerate(lines) if not (ln == "EOF" and i and _TTY_QUESTION.search(lines[i - 1]))]
    if any("unexpected end of file" in ln or "unexpected EOF" in ln for ln in lines):
        lines = [ln for ln in lines if ln != ">"]
        if lines and lines[-1] == "exit":
            lines.pop()
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


# Exit codes that differ by design: command -> (termd's, bash -c's, why).
KNOWN_EXIT = {
    'set -u; echo "$UNDEFINED_X"; echo after':
        (1, 127, "an unbound variable under set -u makes a non-interactive shell exit (127); "
                 "the session's interactive shell abandons the line (1) and stays"),
}


def shell_env(home):
    """The environment both sides run with (termd's shell adds its own)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PROMPT_COMMAND", "PS1", "BASH_ENV", "ENV", "HISTFILE", "TMUX", "VIRTUAL_ENV")}
    env["HOME"] = str(home)
    env["TERM"] = "xterm-256color"
    env["LANG"] = env.get("LANG", "C.UTF-8")
    env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    return env


def bash_c(command, folder, env, cols=80, rows=24, timeout=20.0):
    """`bash -c command` in folder, stdin /dev/null, stdout and stderr on a
    pty of cols x rows. Returns (exit code, output)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    p = subprocess.Popen(["bash", "-c", command], executable=BASH, cwd=folder, env=env, stdin=subprocess.DEVNULL,
                         stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            os.killpg(p.pid, signal.SIGKILL)
            break
        r, _, _ = select.select([master], [], [], min(left, 0.5))
        if r:
            try:
                b = os.read(master, 65536)
            except OSError:   # EIO: every writer closed the pty
                break
            if not b:
                break
            chunks.append(b)
    os.close(master)
    rc = p.wait()
    if rc < 0:
        rc = 128 - rc
    return rc, b"".join(chunks).decode("utf-8", "replace")


# what one command may leave behind in the shell for the next one
RESET = ("set +euo pipefail; trap - ERR EXIT RETURN DEBUG; shopt -u nullglob; unset IFS "
         "x y v i n l p arr m X Y a; unset -f f g h fact foo")


def termd_run(client, command, folder, session="main", timeout=20.0):
    """The command through termd's run in session, in folder; a program
    left waiting for input gets end of input (C-d) like /dev/null. Returns
    (exit code, output, restarted)."""
    r = client.run("cd %s && %s" % (_q(folder), RESET), session=session)
    assert r.running is False and r.exit_code == 0, r
    r = client.run(command, session=session, timeout=timeout)
    out = r.output
    tries = 0
    while r.running and tries < 5:
        tries += 1
        if r.waiting_for_input:
            r = client.run("C-d", session=session, is_input=True, timeout=timeout)
        else:
            r = client.run("", session=session, timeout=timeout)
        out = (out + "\n" + r.output) if out and r.output else (out or r.output)
    assert not r.running, "still running after %d waits: %r" % (tries, r)
    return r.exit_code, out, r.restarted
