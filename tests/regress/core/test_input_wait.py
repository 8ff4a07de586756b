"""Issue 33, the contract's §11 "What a waiting program waits for": every
reader of the session's terminal is seen waiting for input within about a
second, however it reached the terminal (stdin, /dev/tty, a dup, a child or
grandchild of the command), and the run answer's `extras.waiting` says what
it waits for: `kind` ("line", "password", "key", "pager", "editor"),
`prompt` (the last non-empty line of the screen), `pid` and `command` of
the reading process. Each prompt here is answered and its command ends;
busy programs (sleep, a loop, a pipe, a socket) are never waiting. Driven
through the termd Python package, which exposes `RunResult.waiting`; a
password typed with is_input stays out of recordings without
--record-input; termctl says what the program waits for."""

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import conftest
import termd
import termd as termd_mod
from tdtest import PY, wait_until

# The answer should come about a second after the program blocks (0.7 s of
# quiet, then two looks 30 ms apart); this bound only catches a miss (each
# run's own timeout would answer "hard" at 30 s) without being tight on a
# loaded machine or under a sanitizer.
DEADLINE = 6.0
TIMEOUT = 30


def ask(client, command, kind, **kw):
    """Run command; it must come back waiting for input of this kind."""
    kw.setdefault("timeout", TIMEOUT)
    t0 = time.monotonic()
    r = client.run(command, **kw)
    took = time.monotonic() - t0
    assert r.running is True and r.waiting_for_input is True, r
    assert r.timed_out is None and r.exit_code == -1, r
    assert isinstance(r.waiting, termd.Waiting), r
    assert r.waiting.kind == kind, "waiting for %r, wanted %r: %r" % (r.waiting.kind, kind, r)
    assert isinstance(r.waiting.pid, int) and r.waiting.pid > 0, r
    assert r.extras["waiting"]["prompt"] == r.waiting.prompt, r
    assert took < DEADLINE, "waiting for input reported after %.1f s: %r" % (took, r)
    return r


def answer(client, text):
    """Type text and Enter into the waiting program; return the answer."""
    return client.run(text, is_input=True, timeout=TIMEOUT)


def done(r, exit_code=0):
    assert r.running is False and r.exit_code == exit_code, r
    assert r.waiting_for_input is False and r.waiting is None, r
    return r


def finish(client, r):
    """run "" until the command has ended."""
    for _ in range(10):
        if not r.running:
            return r
        r = client.run("", timeout=TIMEOUT)
    raise AssertionError("still running: %r" % r)


def cmdline(pid):
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        return f.read().rstrip(b"\0").replace(b"\0", b" ").decode()


# ------------------------------------------------------------ lines

@pytest.mark.parametrize("command, reader", [
    # the session's shell itself reads /dev/tty (a builtin)
    ("read -p 'Name? ' x </dev/tty; echo got=$x", "bash"),
    # a program that opened /dev/tty
    ("sh -c 'printf \"Name? \"; read x </dev/tty; echo got=$x'", "sh -c"),
    # a dup of /dev/tty on another descriptor
    ("sh -c 'exec 3</dev/tty; printf \"Name? \"; read x <&3; echo got=$x'", "sh -c"),
    # stdin a file, the terminal reached through stderr's descriptor
    ("sh -c 'printf \"Name? \"; read x <&2; echo got=$x' </dev/null", "sh -c"),
], ids=["shell-builtin", "dev-tty", "dup-of-dev-tty", "stderr-fd"])
def test_line_read_from_the_terminal_however_opened(client, command, reader):
    r = ask(client, command, "line")
    assert r.waiting.prompt == "Name?", r
    assert reader in r.waiting.command, r
    assert r.waiting.command == cmdline(r.waiting.pid), r
    r = done(answer(client, "Ann"))
    assert r.output.splitlines()[-1] == "got=Ann", r


def test_a_reader_whose_name_holds_a_parenthesis_is_seen(client, tmp_path):
    # /proc/PID/stat gives the name in parentheses and the name may hold
    # anything, ") " too: the fields are read after the last ')'
    prog = tmp_path / "rd) S 1 x"
    shutil.copy("/bin/sh", prog)
    r = ask(client, "'%s' -c 'printf \"Name? \"; read x; echo got=$x'" % prog, "line", timeout=10)
    assert r.waiting.prompt == "Name?", r
    r = done(answer(client, "Bo"))
    assert r.output.splitlines()[-1] == "got=Bo", r


@pytest.mark.parametrize("call", ["select", "poll"])
def test_a_program_that_selects_or_polls_the_terminal_alone_is_waiting(client, call):
    # it waits in select() or poll() on the terminal only (the last and only
    # descriptor of the set, asked for input), then reads the line
    wait = ("select.select([sys.stdin], [], [])" if call == "select" else
            "p = select.poll(); p.register(sys.stdin, select.POLLIN); p.poll()")
    prog = ("import select, sys; print('Ready? ', end='', flush=True); %s; "
            "print('got', sys.stdin.readline().strip())" % wait)
    r = ask(client, '%s -c "%s"' % (PY, prog), "line", timeout=10)
    assert r.waiting.prompt == "Ready?", r
    r = done(answer(client, "yes"))
    assert r.output.splitlines()[-1] == "got yes", r


def test_patch_reversed_question(client, tmp_path):
    # issue 33's case: patch asks on /dev/tty (its stdin is the patch file)
    (tmp_path / "a.txt").write_text("alpha\nbeta\ngamma\n")
    (tmp_path / "fix.patch").write_text(
        "--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n alpha\n-beta\n+BETA\n gamma\n")
    r = ask(client, "cd %s && patch -p1 < fix.patch && patch -p1 < fix.patch; echo rc=$?" % tmp_path, "line")
    assert r.waiting.prompt.endswith("Assume -R? [n]"), r
    assert r.waiting.command.startswith("patch"), r
    r = done(answer(client, "y"))   # reverse it: back to the original
    assert r.output.splitlines()[-1] == "rc=0", r
    assert (tmp_path / "a.txt").read_text() == "alpha\nbeta\ngamma\n"


def test_shell_continuation_is_a_line(client):
    r = ask(client, "cat <<EOF", "line")
    assert r.waiting.prompt == ">", r
    r = answer(client, "inside")
    assert r.waiting_for_input and r.waiting.kind == "line", r
    r = done(answer(client, "EOF"))
    assert r.output == "inside", r


# ------------------------------------------------------------ passwords

def test_getpass_is_a_password(client):
    r = ask(client, "%s -c 'import getpass; s = getpass.getpass(); print(\"len\", len(s))'" % PY,
            "password")
    assert r.waiting.prompt == "Password:", r
    assert r.waiting.command.startswith(PY + " -c import getpass"), r
    r = done(answer(client, "hunter2"))
    assert r.output.splitlines()[-1] == "len 7", r
    assert "hunter2" not in r.output, r


def test_read_s_is_a_password(client):
    r = ask(client, "read -s -p 'Passphrase: ' p; echo; echo ${#p}", "password")
    assert r.waiting.prompt == "Passphrase:", r
    r = done(answer(client, "abc"))
    assert r.output.splitlines()[-1] == "3", r


@pytest.fixture
def sudo_user():
    """A throwaway user with a password who may run `sudo true`, removed
    afterwards (needs root, sudo, useradd)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create a throwaway user for sudo")
    for prog in ("sudo", "useradd", "userdel", "chpasswd", "setpriv"):
        if not shutil.which(prog):
            pytest.skip("%s is not installed (make deps installs sudo)" % prog)
    name = "tdiw%s" % secrets.token_hex(3)
    password = "pw-" + secrets.token_hex(6)
    sudoers = Path("/etc/sudoers.d") / name
    subprocess.run(["useradd", "-M", "-s", "/bin/sh", name], check=True)
    try:
        subprocess.run(["chpasswd"], input="%s:%s\n" % (name, password), text=True, check=True)
        sudoers.write_text("%s ALL=(root) /bin/true, /usr/bin/true\n" % name)
        sudoers.chmod(0o440)
        yield name, password
    finally:
        sudoers.unlink(missing_ok=True)
        subprocess.run(["userdel", "-f", name], check=False)


def test_sudo_password_as_an_unprivileged_user(client, sudo_user):
    name, password = sudo_user
    # setpriv keeps the controlling terminal (su -c would start a session without one)
    r = ask(client, "setpriv --reuid=%s --regid=%s --init-groups sh -c 'sudo -k; sudo true; echo rc=$?'"
            % (name, name), "password")
    assert r.waiting.prompt == "[sudo] password for %s:" % name, r
    assert r.waiting.command == "sudo true", r
    r = done(answer(client, password))
    assert r.output.splitlines()[-1] == "rc=0", r
    assert password not in r.output, r


@contextlib.contextmanager
def termd_as(name):
    """termd started as the user name (not root), its client; stopped, and
    its folder removed, afterwards. termd runs from a copy in that folder:
    the build's may sit where another user cannot reach (tests/mutants
    builds in a private folder)."""
    pw = pwd.getpwnam(name)
    d = Path(tempfile.mkdtemp(prefix="td-iw-", dir="/tmp"))
    proc, log, text = None, None, ""
    try:
        home = d / "home"
        home.mkdir()
        for p in (d, home):
            os.chown(p, pw.pw_uid, pw.pw_gid)
        binary = d / "termd"
        shutil.copy(conftest.TERMD_BIN, binary)
        binary.chmod(0o755)
        sock = d / "termd.sock"
        log = open(d / "termd.log", "wb")
        proc = subprocess.Popen(["setpriv", "--reuid=%s" % name, "--regid=%s" % name,
                                 "--init-groups", str(binary), "--listen", "unix:%s" % sock,
                                 "--cwd", str(home)],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env=conftest.base_env(home), cwd=str(home), start_new_session=True)
        wait_until(lambda: sock.exists() or proc.poll() is not None, what="termd's socket")
        assert proc.poll() is None, (d / "termd.log").read_text()
        with termd.Termd("unix:%s" % sock, wait=90) as c:
            assert c.run("id -un").output == name
            yield c
    finally:
        rc = 0
        if proc:
            proc.send_signal(signal.SIGTERM)
            try:
                rc = proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait(10)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if log:
            log.close()
            text = (d / "termd.log").read_text(errors="replace")
        shutil.rmtree(d, ignore_errors=True)
    assert rc == 0, "termd exited %s\n%s" % (rc, text)


def test_sudo_password_with_termd_not_root(sudo_user):
    """termd itself unprivileged: it may not look into the set-uid sudo's
    system call, yet sudo's question is seen (asleep, the terminal in
    password mode, the prompt on screen)."""
    name, password = sudo_user
    with termd_as(name) as c:
        r = ask(c, "sudo -k; sudo true; echo rc=$?", "password")
        assert r.waiting.prompt == "[sudo] password for %s:" % name, r
        assert r.waiting.command == "sudo true", r
        r = done(answer(c, password))
        assert r.output.splitlines()[-1] == "rc=0", r
        # busy programs of its own are still not waiting
        r = done(c.run("sleep 2; echo slept", timeout=TIMEOUT))
        assert r.output == "slept", r


def test_sudo_without_a_password_is_not_waiting_with_termd_not_root(sudo_user):
    """`sudo sleep` that asks no password (NOPASSWD), termd not root: the
    set-uid sudo sleeps where termd may not look, text sits before the
    cursor, but the terminal still echoes (canonical, echo on): that is no
    password prompt, and the run answers when the command ends, never
    waiting for input. (sudo without use_pty, as many systems have it,
    leaves the terminal as it is; with use_pty it makes it raw.)"""
    name, _ = sudo_user
    sudoers = Path("/etc/sudoers.d") / (name + "-sleep")
    try:
        sudoers.write_text("Defaults:%s !use_pty\n"
                           "%s ALL=(root) NOPASSWD: /bin/sleep, /usr/bin/sleep\n" % (name, name))
        sudoers.chmod(0o440)
        with termd_as(name) as c:
            r = done(c.run("printf 'syncing... '; sudo sleep 5; echo rc=$?", timeout=TIMEOUT))
            assert r.output == "syncing... rc=0", r
    finally:
        sudoers.unlink(missing_ok=True)


# ------------------------------------------------------------ keys

def test_read_one_key(client):
    r = ask(client, "read -n1 -p 'Continue? [y/N] ' k; echo; echo k=$k", "key")
    assert r.waiting.prompt.endswith("Continue? [y/N]"), r
    client.keys("y")
    r = done(finish(client, client.run("", timeout=TIMEOUT)))
    assert r.output.splitlines()[-1] == "k=y", r


def test_cbreak_key_reader(client):
    prog = ("import sys, termios, tty\n"
            "fd = sys.stdin.fileno(); old = termios.tcgetattr(fd); tty.setcbreak(fd)\n"
            "print('Press a key', flush=True); c = sys.stdin.read(1)\n"
            "termios.tcsetattr(fd, termios.TCSADRAIN, old); print('got', c)\n")
    r = ask(client, "%s -c %s" % (PY, "'" + prog.replace("'", "'\\''") + "'"), "key")
    assert r.waiting.prompt == "Press a key", r
    client.keys("z")
    r = done(finish(client, client.run("", timeout=TIMEOUT)))
    assert r.output.splitlines()[-1] == "got z", r


# ------------------------------------------------------------ pagers and editors

def _repo(client, tmp_path):
    repo = tmp_path / "repo"
    r = client.run("git init -q %s && cd %s && git config user.email t@example.com && "
                   "git config user.name t && echo x > f && git add f && echo ok" % (repo, repo))
    assert r.exit_code == 0 and r.output.endswith("ok"), r
    return repo


def test_less_is_a_pager(client, tmp_path):
    f = tmp_path / "long.txt"
    f.write_text("".join("line %d\n" % i for i in range(200)))
    r = ask(client, "less %s" % f, "pager")
    assert r.waiting.command == "less %s" % f, r
    assert r.alt_screen is True, r
    client.keys("q")
    done(finish(client, client.run("", timeout=TIMEOUT)))


def test_git_pager(client, tmp_path):
    if not shutil.which("git") or not shutil.which("less"):
        pytest.skip("git and less are needed (make deps installs them)")
    _repo(client, tmp_path)
    assert client.run("git commit -q -m one && echo ok").output == "ok"
    # termd's shell has GIT_PAGER=cat; a user who wants less gets less
    r = ask(client, "GIT_PAGER=less LESS= git log", "pager")
    assert "less" in r.waiting.command, r
    client.keys("q")
    done(finish(client, client.run("", timeout=TIMEOUT)))


def test_git_commit_opens_an_editor(client, tmp_path):
    if not shutil.which("git") or not shutil.which("vi"):
        pytest.skip("git and vi are needed (make deps installs them)")
    repo = _repo(client, tmp_path)
    r = ask(client, "GIT_EDITOR=vi git commit", "editor")
    assert os.path.basename(r.waiting.command.split()[0]) == "vi", r
    assert r.waiting.command.endswith("/.git/COMMIT_EDITMSG"), r
    client.keys("i", "from vi", "Escape", ":wq", "Enter")
    r = done(finish(client, client.run("", timeout=TIMEOUT)))
    log = subprocess.run(["git", "-C", str(repo), "log", "--format=%s"], capture_output=True, text=True)
    assert log.stdout.strip() == "from vi", (log, r)


def test_editor_script_git_opened(client, tmp_path):
    """An editor not known by name: a script git runs on the message file."""
    if not shutil.which("git"):
        pytest.skip("git is needed (make deps installs it)")
    repo = _repo(client, tmp_path)
    script = tmp_path / "ask-message"
    script.write_text('#!/bin/sh\nprintf "Message: " >/dev/tty\nread m </dev/tty\necho "$m" > "$1"\n')
    script.chmod(0o755)
    r = ask(client, "GIT_EDITOR=%s git commit" % script, "editor")
    assert r.waiting.prompt.endswith("Message:"), r   # after git's hint, on its line
    assert str(script) in r.waiting.command and "COMMIT_EDITMSG" in r.waiting.command, r
    done(answer(client, "from a script"))
    log = subprocess.run(["git", "-C", str(repo), "log", "--format=%s"], capture_output=True, text=True)
    assert log.stdout.strip() == "from a script", log


# ------------------------------------------------------------ children

@pytest.mark.parametrize("depth", [1, 2], ids=["child", "grandchild"])
def test_child_reads_the_terminal_while_its_parent_waits(client, tmp_path, depth):
    inner = 'printf "child? "; read x </dev/tty; echo child-got=$x'
    script = tmp_path / "parent.py"
    script.write_text("import subprocess\nsubprocess.run(['sh', '-c', %r])\nprint('parent-done')\n" % (
        inner if depth == 1 else "sh -c '%s'; :" % inner))
    r = ask(client, "%s %s" % (PY, script), "line")
    assert r.waiting.prompt == "child?", r
    # the reader is the child, not the command's process (extras.pid)
    assert r.waiting.pid != r.pid, r
    assert r.waiting.command.startswith("sh -c"), r
    r = done(answer(client, "yes"))
    assert r.output.splitlines()[-2:] == ["child-got=yes", "parent-done"], r


# ------------------------------------------------------------ busy

@pytest.mark.parametrize("command, output", [
    ("sleep 3; echo slept", "slept"),
    ("timeout 3 sh -c 'while :; do :; done'; echo rc=$?", "rc=124"),
    ("sleep 3 | cat; echo piped", "piped"),
    ("%s -c 'import select, socket; a, b = socket.socketpair(); select.select([a], [], [], 3); "
     "print(\"no data\")'" % PY, "no data"),
    ("%s -c 'import threading; threading.Event().wait(3); print(\"waited\")'" % PY, "waited"),
], ids=["sleep", "busy-loop", "pipe-reader", "socket-poll", "futex"])
def test_busy_programs_are_never_waiting(client, command, output):
    t0 = time.monotonic()
    r = client.run(command, timeout=TIMEOUT)
    assert time.monotonic() - t0 >= 2.5, r
    r = done(r)
    assert r.output == output, r


def test_busy_loop_past_a_timeout_is_not_waiting(client):
    r = client.run("while :; do :; done", timeout=2.5)
    assert r.running is True and r.timed_out == "hard", r
    assert r.waiting_for_input is False and r.waiting is None, r
    assert "waiting" not in r.extras, r
    r = client.run("C-c", is_input=True, timeout=TIMEOUT)
    assert r.running is False, r


# ------------------------------------------------------------ recordings and termctl

GETPASS = "%s -c 'import getpass; print(len(getpass.getpass()))'" % PY


@pytest.mark.parametrize("record_input", [False, True], ids=["record", "record-input"])
def test_password_kept_out_of_recordings(termd_factory, tmp_path, record_input):
    rec = tmp_path / "rec"
    rec.mkdir(mode=0o700)
    t = termd_factory(args=("--record", str(rec)) + (("--record-input",) if record_input else ()))
    secret = "pw-" + secrets.token_hex(8)
    with termd.Termd(t.url, wait=90) as c:
        ask(c, GETPASS, "password")
        r = done(answer(c, secret))
        assert r.output.splitlines()[-1] == str(len(secret)), r
        assert c.run("echo after").output == "after"
    casts = [p for p in rec.iterdir() if p.name.endswith(".cast")]
    assert casts, list(rec.iterdir())
    wait_until(lambda: "after" in "".join(p.read_text() for p in casts), what="the recording")
    text = "".join(p.read_text() for p in casts)
    assert (secret in text) is record_input, text[-2000:]


def test_termctl_says_what_it_waits_for(termd):
    r = termd.termctl("run", "--timeout", str(TIMEOUT), GETPASS)
    assert r.returncode == 124, r
    assert "termd: waiting for a password (pid " in r.stderr, r
    assert "Password:" in r.stdout, r
    r = termd.termctl("run", "--input", "abcd")
    assert r.returncode == 0 and r.stdout.strip().splitlines()[-1] == "4", r
    r = termd.termctl("run", "--timeout", str(TIMEOUT), "read -n1 -p 'Go? ' k")
    assert r.returncode == 124 and "termd: waiting for a key" in r.stderr, r
    r = termd.termctl("keys", "y")
    assert r.returncode == 0, r


def termd_client_waiting(w):
    return termd_mod.Waiting.from_dict(w)


def test_a_nested_shell_at_its_prompt_waits_for_a_command_line(termd):
    """issue 51: `su` (or `bash`) started in a session: its shell reads its
    prompt with readline, the terminal raw; that is not a key wait but a
    command line, and termctl says how to answer."""
    import shutil
    nested = "su" if os.geteuid() == 0 and shutil.which("su") else "bash --norc"
    r = termd.termctl("run", "--timeout", str(TIMEOUT), nested)
    assert r.returncode == 124, r
    assert "termd: waiting for a command line (pid " in r.stderr, r
    assert "a shell at its prompt" in r.stderr and "--input" in r.stderr, r
    o = termd.events().call("run", {"command": "", "timeout": 5})
    w = o["extras"].get("waiting") or {}
    assert w.get("kind") == "line" and w.get("shell") is True, o
    assert termd_client_waiting(w).shell is True
    r = termd.termctl("run", "--input", "echo nested-$((50+1))")
    assert "nested-51" in r.stdout, r
    r = termd.termctl("run", "--input", "exit")
    assert r.returncode == 0, r


def test_termctl_says_how_to_answer(termd):
    r = termd.termctl("run", "--timeout", str(TIMEOUT), "read -p 'Name: ' n")
    assert r.returncode == 124, r
    assert "termd: waiting for a line of input (pid " in r.stderr, r
    assert "termctl run --input TEXT" in r.stderr and "C-c" in r.stderr, r
    r = termd.termctl("run", "--input", "C-c")
    r = termd.termctl("run", "--timeout", str(TIMEOUT), "read -n1 -p 'Go? ' k")
    assert r.returncode == 124 and "termctl keys" in r.stderr, r
    termd.termctl("keys", "y")
