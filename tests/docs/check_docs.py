#!/usr/bin/env python3
# tests/docs/check_docs.py — runs the shell blocks of README.md and
# proto/python/README.md as written, against a termd it starts, so that the
# documentation cannot drift from the programs (issue 34).
#
#   tests/docs/check_docs.py [--build DIR] [FILE.md...]   (default: both READMEs)
#
# What a README says, the check reads:
#  - A ```sh block whose lines start with "$ " is a session: each "$ " line is
#    run (bash -c, from the repository's top, in the order written); the lines
#    after it, up to the next "$ ", are output it must print (each in turn,
#    among its stdout and stderr lines; "…" stands for any text; a trailing
#    "  # comment" is not part of it, and a line that is only a comment is no
#    output). It must exit 0, or N when its line or
#    its output says "exit N" / "exit status N". A line ending in "&" is
#    started in the background (ended when the block is done), and when it
#    names --listen HOST:PORT the next line waits until the port answers.
#    A line ending in "\\" goes on on the next, as in the shell.
#  - A ```sh block without "$ " lines runs each line as a command the same way.
#  - "$ make run &" (the README's quickstart) is the termd this check starts:
#    build/termd --listen 127.0.0.1:8421, its sessions with a private /tmp
#    (a mount namespace, when the kernel allows one; a checkout under /tmp is
#    bound back into it) and a scratch HOME.
#  - <!-- docs-check: ports 8421 8422 8000 --> anywhere in a file: those port
#    numbers are placeholders; the check picks a free port for each and writes
#    it wherever the number stands alone.
#  - <!-- docs-check: skip REASON --> on the line before a block: the block is
#    not run (it needs what a test run cannot have); the check counts and
#    prints the blocks skipped, and the blocks in other languages.
# TERMD_URL is set to the termd it started (as `make run`'s default would be),
# HOME to a scratch folder, and Debian's /usr/bin comes first in PATH.
# Exit status 0 when every block ran as written, 1 otherwise.

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "regress"))
from tdtest import free_port  # noqa: E402  (the shared test helpers)
CMD_TIMEOUT = 60
FENCE = re.compile(r"^```(\w*)\s*$")
SKIP = re.compile(r"<!--\s*docs-check:\s*skip\b\s*(.*?)\s*-->")
PORTS = re.compile(r"<!--\s*docs-check:\s*ports\s+([\d\s]+?)\s*-->")
STATUS = re.compile(r"\bexit(?: status)? (\d+)\b")
COMMENT = re.compile(r"\s{2,}#.*$")
LISTEN = re.compile(r"--listen\s+(\S+):(\d+)")


def wait_port(port, proc, deadline):
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return "it exited with status %d" % proc.returncode
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return None
        except OSError:
            time.sleep(0.05)
    return "nothing answered on port %d" % port


def blocks(path, ports):
    """[(line number, language, lines, skip reason or None)]; the file's
    placeholder ports added to ports ({placeholder: free port}, one for all files)"""
    text = path.read_text()
    for m in PORTS.finditer(text):
        for p in m.group(1).split():
            ports.setdefault(p, str(free_port()))
    out, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m or not m.group(1):
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        skip = SKIP.search(lines[k]) if k >= 0 else None
        out.append((i + 1, m.group(1), lines[i + 1:j], skip.group(1) if skip else None))
        i = j + 1
    return out


def placeholders(s, ports):
    for p, real in ports.items():
        s = re.sub(r"(?<!\d)%s(?!\d)" % p, real, s)
    return s


def steps(lines):
    """[(command, [expected output lines])]; a line ending in "\\" goes on
    on the next one, as in the shell"""
    joined = []
    for l in lines:
        if joined and joined[-1].endswith("\\"):
            joined[-1] = joined[-1][:-1] + " " + l.strip()
        else:
            joined.append(l)
    lines = joined
    if not any(l.startswith("$ ") for l in lines):
        return [(l, []) for l in lines if l.strip() and not l.lstrip().startswith("#")]
    out = []
    for l in lines:
        if l.startswith("$ "):
            out.append((l[2:], []))
        elif out and l.strip():
            out[-1][1].append(l)
    return out


def expected_status(cmd, expect):
    for s in [cmd] + expect:
        if "#" in s:
            m = STATUS.search(s[s.index("#"):])
            if m:
                return int(m.group(1))
    return 0


def line_matches(want, got):
    want = COMMENT.sub("", want).rstrip()
    rx = ".*".join(re.escape(part) for part in want.split("…"))
    return re.fullmatch(rx, got.rstrip()) is not None


class Termd:
    """The README's `make run`: termd on the placeholder of 8421."""

    def __init__(self, build, port, home):
        self.log = open(home / "termd.log", "wb")
        argv = [str(build / "termd"), "--listen", "127.0.0.1:%d" % port]
        # a fresh /tmp; a checkout under /tmp (a clone at /tmp/x) is bound
        # back into it, through a descriptor opened before the tmpfs hid it
        private = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                   'exec 3<"$TD_TOP" && mount -t tmpfs -o mode=1777 tmpfs /tmp && '
                   'case "$TD_TOP" in /tmp/*) mkdir -p "$TD_TOP" && '
                   'mount --no-canonicalize --bind /proc/self/fd/3 "$TD_TOP" ;; esac && '
                   'exec 3<&- && exec "$@"', "sh"]
        env = dict(os.environ, HOME=str(home), TD_TOP=os.path.realpath(str(REPO)))
        env.pop("TERMD_TOKEN", None)
        self.private = shutil.which("unshare") is not None and subprocess.run(
            private + ["true"], capture_output=True, env=env).returncode == 0
        self.proc = subprocess.Popen((private if self.private else []) + argv, stdout=self.log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=env, cwd=str(home), start_new_session=True)
        why = wait_port(port, self.proc, time.monotonic() + 30)
        if why:
            self.stop()
            sys.exit("check_docs: termd did not start (%s); its log:\n%s"
                     % (why, (home / "termd.log").read_text()))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        self.proc.wait()
        self.log.close()


def run_block(where, lines, ports, env, build):
    """None when the block ran as written, else what went wrong."""
    background = []
    wait_for = None
    try:
        for cmd, expect in steps(lines):
            shown = cmd
            if COMMENT.sub("", cmd).strip() in ("make run &", "make run"):
                continue   # the termd this check started
            cmd = placeholders(cmd, ports)
            if build != "build":
                cmd = re.sub(r"(?<![\w/])build/", build + "/", cmd)
            if wait_for:
                why = wait_port(wait_for[0], wait_for[1], time.monotonic() + 30)
                if why:
                    return "%s: %s" % (wait_for[2], why)
                wait_for = None
            bare = COMMENT.sub("", cmd).rstrip()
            if bare.endswith("&"):
                p = subprocess.Popen(["bash", "-c", bare[:-1]], cwd=str(REPO), env=env,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
                background.append(p)
                m = LISTEN.search(bare)
                if m:
                    wait_for = (int(m.group(2)), p, shown)
                continue
            # its own process group: whatever it leaves is ended with it
            p = subprocess.Popen(["bash", "-c", cmd], cwd=str(REPO), env=env, text=True,
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, start_new_session=True)
            timed_out = False
            try:
                out, err = p.communicate(timeout=CMD_TIMEOUT)
            except subprocess.TimeoutExpired:
                timed_out = True
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            if timed_out:
                p.communicate()
                return "$ %s\n  did not end within %d s" % (shown, CMD_TIMEOUT)
            r = subprocess.CompletedProcess(p.args, p.returncode, out, err)
            got = (r.stdout + r.stderr).split("\n")
            want = expected_status(cmd, expect)
            if r.returncode != want:
                return ("$ %s\n  exit status %d, the README says %d; it printed:\n%s"
                        % (shown, r.returncode, want, indent(got)))
            at = 0
            for e in expect:
                if e.lstrip().startswith("#"):
                    continue   # a comment going on under its command
                e2 = placeholders(e, ports)
                while at < len(got) and not line_matches(e2, got[at]):
                    at += 1
                if at == len(got):
                    return ("$ %s\n  never printed %r (in that order); it printed:\n%s"
                            % (shown, COMMENT.sub("", e), indent(got)))
                at += 1
        return None
    finally:
        for p in background:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except OSError:
                pass
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def indent(lines):
    shown = [l for l in lines if l.strip()][-15:]
    return "\n".join("    | " + l for l in shown)


def main(argv):
    build = "build"
    if argv[:1] == ["--build"]:
        build, argv = argv[1], argv[2:]
    files = [Path(a) for a in argv] or [REPO / "README.md", REPO / "proto/python/README.md"]
    # not under /tmp: the sessions see a private one
    home = Path(tempfile.mkdtemp(prefix="docs-check-", dir=str(REPO / build)))
    failures, ran, skipped, other = [], 0, [], 0
    termd = None
    t0 = time.monotonic()
    ports = {}
    found_in = [(f, blocks(f, ports)) for f in files]
    ports.setdefault("8421", str(free_port()))
    url = "ws://127.0.0.1:%s" % ports["8421"]
    try:
        for f, found in found_in:
            rel = os.path.relpath(f, REPO)
            for line, lang, lines, skip in found:
                where = "%s:%d" % (rel, line)
                if lang not in ("sh", "bash", "console"):
                    other += 1
                    continue
                if skip is not None:
                    skipped.append("%s (%s)" % (where, skip))
                    continue
                if termd is None:
                    termd = Termd(REPO / build, int(ports["8421"]), home)
                # Debian's programs first (python3 is /usr/bin/python3, as for the Makefile)
                env = dict(os.environ, TERMD_URL=url, HOME=str(home),
                           PATH="/usr/bin:/bin:/usr/sbin:/sbin:" + os.environ.get("PATH", ""))
                for var in ("TERMD_TOKEN", "TERMD_TOKEN_FILE", "TERMD_CACERT"):
                    env.pop(var, None)
                why = run_block(where, lines, ports, env, build)
                ran += 1
                print("docs: %s %s" % (where, "ok" if why is None else "FAILED"))
                if why:
                    failures.append("%s:\n%s" % (where, why))
    finally:
        if termd:
            termd.stop()
            if not termd.private:
                print("docs: (no mount namespace here: the sessions used the real /tmp)")
        shutil.rmtree(home, ignore_errors=True)
    print("docs: %d shell blocks run, %d skipped as marked, %d in other languages not run "
          "(%.1f s)" % (ran, len(skipped), other, time.monotonic() - t0))
    for s in skipped:
        print("docs:   skipped %s" % s)
    for f in failures:
        print("docs: FAILED %s" % f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
