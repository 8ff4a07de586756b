"""tests/bundle/test_bundle.py — the static bundle: size, no dynamic loader, runs from any path; termd
from it inside a busybox-only root and Debian minbase roots (with bash, and without: dash) answering
run with state kept, exit codes, a prompt waiting for input, wide characters, files; CA certificates
and terminfo found in the image else in the bundle; od-attach drawing there."""
import json
import os
import pty
import re
import select
import shutil
import struct
import subprocess
import time

import pytest

from conftest import IN, Chroot, Termd, free_port, make_busybox_root, copy_bundle, need_root

MB = 1000 * 1000


def elf_segments(path):
    """Program header types of an ELF64 file (3 = PT_INTERP, 2 = PT_DYNAMIC)."""
    with open(path, "rb") as f:
        h = f.read(64)
        assert h[:4] == b"\x7fELF" and h[4] == 2, f"{path} is not an ELF64 file"
        phoff, = struct.unpack_from("<Q", h, 32)
        phentsize, phnum = struct.unpack_from("<HH", h, 54)
        types = []
        for i in range(phnum):
            f.seek(phoff + i * phentsize)
            types.append(struct.unpack("<I", f.read(4))[0])
        return types


def test_bundle_under_5mb_one_folder(bundle_tar, bundle):
    assert os.path.getsize(bundle_tar) < 5 * MB
    total = sum(os.lstat(os.path.join(d, f)).st_size for d, _, fs in os.walk(bundle) for f in fs)
    assert total < 5 * MB, f"unpacked {total} bytes"
    assert re.fullmatch(r"termd-\d+\.\d+\.\d+-linux-x86_64", bundle.name)
    assert bundle_tar.endswith(bundle.name + ".tar.xz")
    for tool in ("termctl", "od-attach", "termd-healthz", "swerex-remote"):
        assert os.readlink(bundle / "bin" / tool) == "termd"
    for p in ("plugins/browser/plugin.json", "plugins/browser/setup.sh", "plugins/browser/termd-browser",
              "plugins/jupyter/plugin.json", "plugins/agentskills/python/agentskills/__init__.py",
              "share/terminfo/x/xterm-256color", "share/ssl/ca-certificates.crt",
              "share/runtime/od-runtime-build", "BUNDLE-INFO"):
        assert (bundle / p).exists(), p


@pytest.mark.parametrize("prog", ["bin/termd", "plugins/browser/termd-browser"])
def test_static_no_loader(bundle, prog):
    types = elf_segments(bundle / prog)
    assert 3 not in types, f"{prog} asks for a dynamic loader (PT_INTERP)"
    assert 2 not in types, f"{prog} has a dynamic section"


def test_runs_from_any_path(bundle, tmp_path):
    # a copy elsewhere, called through a symlink in yet another folder
    other = tmp_path / "x y" / "termd"
    shutil.copytree(bundle, other, symlinks=True)
    links = tmp_path / "links"
    links.mkdir()
    os.symlink(other / "bin" / "termctl", links / "termctl")
    r = subprocess.run([str(other / "bin" / "termd"), "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and re.match(r"termd \d+\.\d+\.\d+ \(contract \d+\.\d+, protocol \d+\)", r.stdout), r
    r = subprocess.run([str(links / "termctl"), "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "usage: termctl" in r.stdout + r.stderr, r
    r = subprocess.run([str(other / "bin" / "od-attach"), "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "usage: od-attach" in r.stdout + r.stderr, r
    r = subprocess.run([str(other / "bin" / "termd-healthz"), "nonsense"], capture_output=True, text=True)
    assert r.returncode == 2 and "usage: termd-healthz" in r.stderr, r


# ---- inside the roots (busybox, minbase, minbase-nobash)

@pytest.fixture(scope="module")
def td(root):
    t = Termd(root)
    yield t
    root.stop_all()


def run(td, session, command, *opts, timeout=30):
    return td.ctl("run", "-s", session, "--timeout", str(timeout), *opts, command, timeout=timeout + 30)


def test_termd_has_no_libc_to_load(root):
    assert not os.path.exists(root.host("/lib/ld-musl-x86_64.so.1"))
    if root.name == "busybox":
        assert not os.path.exists(root.host("/lib"))


def test_shell_choice_and_state_kept(td, root):
    r = run(td, "state", "echo shell=$0")
    assert r.returncode == 0, r
    want = "/bin/bash" if root.name == "minbase" else "/bin/sh"
    assert r.stdout.strip() == f"shell={want}", r
    r = run(td, "state", "cd /tmp && export X=42 && f() { echo in-f $1; }")
    assert r.returncode == 0, r
    r = run(td, "state", "echo $X; pwd; f 7")
    assert r.returncode == 0, r
    assert r.stdout.split() == ["42", "/tmp", "in-f", "7"], r


def test_exit_codes(td):
    assert run(td, "codes", "true").returncode == 0
    assert run(td, "codes", "false").returncode == 1
    r = run(td, "codes", "(exit 7)")
    assert r.returncode == 7, r
    r = run(td, "codes", "echo before; sh -c 'exit 3'; echo after $?")
    assert r.returncode == 0 and r.stdout.split() == ["before", "after", "3"], r


# run item 13 for the sh fallback: each command through termd's run (in the
# root's shell: bash in minbase, dash in minbase-nobash, busybox ash) next to
# `sh -c` (bash -c where termd's shell is bash) in the same root, from the
# same folder; exit code and stdout equal (stderr sent to stdout by each
# command itself, as termd's answer has one stream)
POSIX_CORPUS = [
    'echo "a!b"', 'echo "two!!"', "echo 'single !quoted'", 'printf "%s|" a "b c"; echo',
    'x="a  b"; echo "$x" $x', "echo $((6 * 7)) $((7 % 3))", 'echo "${UNSET:-dflt}"',
    "false; echo $?", "(exit 3); echo $?", "true && echo and || echo or", "false || echo fallback",
    "for i in 1 2 3; do printf %s $i; done; echo", "i=0; while [ $i -lt 3 ]; do i=$((i+1)); done; echo $i",
    "case foo in f*) echo matched;; *) echo no;; esac", 'f() { echo "f:$1"; }; f one; f "two words"',
    "cat <<EOF\nplain $((1+1))\nEOF", "cat <<'EOF'\nraw $HOME\nEOF", "echo a | tr a b",
    "{ echo one; echo two; } | sort -r", 'echo "$(echo inner)"', "echo `echo back`",
    "set -- x y z; echo $# $2", "echo ok >/dev/null; echo $?", "cd /tmp && pwd", "nosuchcmd_posix 2>/dev/null; echo $?",
    "(cd / && pwd); pwd", "printf 'a\\nb\\n' | wc -l", "echo start; false; echo end", "exit_code() { return 4; }; exit_code; echo $?",
    "test -d /tmp && echo dir", "[ 1 -gt 2 ] || echo not", "echo é ✓", "seq 3 2>/dev/null || printf '1\\n2\\n3\\n'",
    "echo 'quoted;semi'; echo \"dq'sq\"", "unset v; echo \"[${v-unset}]\"",
    "echo (", "if then fi",
]


@pytest.mark.parametrize("command", POSIX_CORPUS)
def test_commands_like_sh_c(td, root, command):
    shell = "/bin/bash" if root.name == "minbase" else "/bin/sh"
    r = run(td, "posix", "cd /root && " + RESET_POSIX)
    assert r.returncode == 0, r
    r = run(td, "posix", command, timeout=20)
    want = root.run([shell, "-c", "cd /root\n" + command], timeout=60, input="")
    assert r.returncode != 124, ("termd still running", command, r)
    got_out = [ln.rstrip() for ln in r.stdout.replace("\r\n", "\n").split("\n")]
    want_out = [ln.rstrip() for ln in (want.stdout + want.stderr).split("\n")]
    while got_out and not got_out[-1]:
        got_out.pop()
    while want_out and not want_out[-1]:
        want_out.pop()
    if command in ("echo (", "if then fi"):
        # a rejected text: the shell's message and code, whatever the shell
        assert r.returncode == want.returncode and r.returncode != 0, (command, r, want)
        assert got_out and ("syntax error" in got_out[0] or "unexpected" in got_out[0]), (command, r)
        return
    assert r.returncode == want.returncode, (command, r, want)
    assert got_out == want_out, (command, r, want)


RESET_POSIX = "set +eu; unset x i v"


def test_prompt_waits_for_input(td):
    r = run(td, "ask", 'printf "Name: "; read n; echo "Hello $n"', timeout=20)
    assert r.returncode == 124, r
    assert "termd: waiting for a line of input" in r.stderr, r
    assert "Name:" in r.stdout, r
    r = td.ctl("run", "-s", "ask", "--input", "Ann", timeout=60)
    assert r.returncode == 0, r
    assert "Hello Ann" in r.stdout, r


def test_wide_characters_without_locale_files(td, root):
    # musl's wcwidth needs no locale files (glibc's C.UTF-8 is a file these roots lack)
    assert not os.path.exists(root.host("/usr/lib/locale/C.utf8")) or root.name != "busybox"
    r = run(td, "wide", r"printf 'ab\344\270\255\bX|\n'")
    assert r.returncode == 0, r
    assert r.stdout == "ab X|\n", repr(r.stdout)


def test_files(td, root):
    text = "h\u00e9llo\n\u4e2d\u6587 line 2\n"
    w = json.loads(td.ctl("raw", json.dumps({"action": "write", "args": {"path": "/root/f.txt", "content": text}}))
                   .stdout)
    assert w.get("kind") != "error", w
    with open(root.host("/root/f.txt"), encoding="utf-8") as f:
        assert f.read() == text
    r = run(td, "files", "cat /root/f.txt; wc -l < /root/f.txt")
    assert r.stdout.split("\n")[:3] == ["h\u00e9llo", "\u4e2d\u6587 line 2", "2"], r
    rd = json.loads(td.ctl("raw", json.dumps({"action": "read", "args": {"path": "/root/f.txt"}})).stdout)
    assert rd["content"] == text, rd


def test_session_list_and_healthz(root):
    port = free_port()
    t = Termd(root, tcp=f"127.0.0.1:{port}")
    r = root.run([f"{IN}/bin/termd-healthz", f"localhost:{port}"])
    assert r.returncode == 0 and r.stdout.strip() == "ok", r
    r = root.run([f"{IN}/bin/termctl", "--url", f"ws://localhost:{port}", "session", "list"])
    assert r.returncode == 0 and "main" in r.stdout, r
    t.proc.terminate()


# ---- od-attach inside the roots, in a pty

def attach(root, url, term):
    """od-attach in a pty inside the root: returns (rc, everything it drew)."""
    cmd, env = root.cmd([f"{IN}/bin/od-attach", "--url", url], env={"TERM": term})
    pid, fd = pty.fork()
    if pid == 0:
        os.execvpe(cmd[0], cmd, env)
    import fcntl
    import termios
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    out = b""
    deadline = time.monotonic() + 30
    sent = False
    rc = None
    while time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            out += chunk
        if not sent and b"mark42done" in out and b"WATCHING" in out:
            os.write(fd, b"\x1dd")          # C-] d: detach
            sent = True
        wpid, status = os.waitpid(pid, os.WNOHANG)
        if wpid:
            rc = os.waitstatus_to_exitcode(status)
            break
    if rc is None:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
        _, status = os.waitpid(pid, 0)
        rc = os.waitstatus_to_exitcode(status)
    os.close(fd)
    return rc, out


@pytest.mark.parametrize("term", ["xterm-256color", "rxvt-unicode-256color", "konsole-256color"])
def test_od_attach_draws(td, root, term):
    r = run(td, "main", "echo mark$((6*7))done")
    assert r.returncode == 0, r
    rc, out = attach(root, td.url, term)
    text = out.decode("utf-8", "replace")
    assert "Error opening terminal" not in text, text[-500:]
    assert "mark42done" in text and "WATCHING" in text, text[-2000:]
    assert rc == 0, (rc, text[-500:])


def test_od_attach_unknown_terminal_says_so(td, root):
    rc, out = attach(root, td.url, "no-such-terminal-xyz")
    assert rc != 0
    assert b"no-such-terminal-xyz" in out, out[-500:]


# ---- CA certificates: the image's first, else the bundle's own

@pytest.fixture(scope="module")
def tls_files(tmp_path_factory):
    if not shutil.which("openssl"):
        pytest.skip("openssl is not installed")
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem")],
                   check=True, capture_output=True)
    return d


@pytest.mark.parametrize("where", ["image", "bundle", "nowhere"])
def test_ca_certificates(bundle, tls_files, tmp_path, where):
    need_root()
    path = tmp_path / "root"
    path.mkdir()
    make_busybox_root(path)
    copy_bundle(bundle, path)
    c = Chroot(path, "busybox-tls")
    os.makedirs(c.host("/etc/td"))
    shutil.copy(tls_files / "cert.pem", c.host("/etc/td/cert.pem"))
    shutil.copy(tls_files / "key.pem", c.host("/etc/td/key.pem"))
    own = c.host(f"{IN}/share/ssl/ca-certificates.crt")
    if where == "image":
        # the Debian/Alpine place; the bundle's own list does not know this certificate
        os.makedirs(c.host("/etc/ssl/certs"))
        shutil.copy(tls_files / "cert.pem", c.host("/etc/ssl/certs/ca-certificates.crt"))
    elif where == "bundle":
        shutil.copy(tls_files / "cert.pem", own)
    try:
        port = free_port()
        Termd(c, ["--tls-cert", "/etc/td/cert.pem", "--tls-key", "/etc/td/key.pem"], tcp=f"127.0.0.1:{port}")
        r = c.run([f"{IN}/bin/termctl", "--url", f"wss://localhost:{port}", "--wait", "10", "ping"])
        if where == "nowhere":
            assert r.returncode == 2 and "pong" not in r.stdout, r
            assert "certificate" in r.stderr.lower() or "verify" in r.stderr.lower(), r
        else:
            assert r.returncode == 0 and r.stdout.strip() == "pong", r
    finally:
        c.stop_all()


# ---- plugins: termd from the bundle finds bin/../plugins by itself

ECHO_PLUGIN = r'''#!/bin/sh
while IFS= read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/.*"id": *\([0-9]*\).*/\1/p')
  printf '{"id":%s,"observation":"echo_test","content":"plugin-ok in %s","extras":{}}\n' "$id" "$(pwd)"
done
'''


def test_plugins_found_in_the_bundle(bundle, tmp_path):
    need_root()
    path = tmp_path / "root"
    path.mkdir()
    make_busybox_root(path)
    copy_bundle(bundle, path)
    c = Chroot(path, "busybox-plugins")
    # a plugin made here (a POSIX sh program), next to the bundle's own
    d = c.host(f"{IN}/plugins/echo")
    os.makedirs(d)
    with open(os.path.join(d, "plugin.json"), "w") as f:
        json.dump({"name": "echo", "version": "1.0.0", "actions": ["echo_test"], "run": "prog.sh"}, f)
    with open(os.path.join(d, "prog.sh"), "w") as f:
        f.write(ECHO_PLUGIN)
    os.chmod(os.path.join(d, "prog.sh"), 0o755)
    try:
        t = Termd(c, ["--plugins", "echo,browser", "--state-dir", "/root/state"])
        deadline = time.monotonic() + 60
        while True:
            r = t.ctl("raw", json.dumps({"action": "plugin.list"}))
            plugins = {p["name"]: p for p in json.loads(r.stdout)["extras"]["plugins"]}
            if all(p["state"] != "installing" for p in plugins.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert plugins["echo"]["state"] == "ready", plugins
        # the bundle's browser plugin: its setup finds no package manager in busybox, and says so
        assert plugins["browser"]["state"] == "failed", plugins
        assert plugins["browser"]["error"].startswith("Failed to install browser on unknown: "), plugins
        assert "package manager" in plugins["browser"]["error"], plugins
        r = t.ctl("raw", json.dumps({"action": "echo_test", "args": {}}))
        obs = json.loads(r.stdout)
        assert obs["content"] == "plugin-ok in /root", obs
    finally:
        c.stop_all()
