"""Fixtures for the regress suite: a fresh termd per test on a private unix
socket, its log, and a way to run termctl against it.

Environment: TERMD_BIN and TERMCTL_BIN (absolute paths; default build/ in
the repository), TERMD_TEST_VERBOSE=1 to start termd with -v,
TERMD_VALGRIND=1 to run termd under valgrind memcheck (`make valgrind`).

Teardown stops termd with SIGTERM and fails the test if termd did not exit
with status 0 (a crash, a sanitizer report, a hang past 5 s; under valgrind
also any memcheck error or definite leak, shown from valgrind's log), or if
it exited leaving its run folder (termd-XXXXXX, in a TMPDIR of its own)."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

# regroup.py (issue 45): the group folders on sys.path. The tests live in
# tests/regress/<group>/ (termd/'s layers and doors) and import the helpers
# here and each other by module name (their basenames are unique).
_REGRESS = Path(__file__).resolve().parent
for _d in sorted({p.parent for p in _REGRESS.rglob("test_*.py")}, reverse=True):
    if str(_d) not in sys.path:
        sys.path.insert(1, str(_d))
if str(_REGRESS) not in sys.path:
    sys.path.insert(0, str(_REGRESS))

import wsclient

# the project's Python client (proto/python), for tests that drive termd the
# way its users do; wsclient stays for malformed frames and raw bytes
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "proto" / "python"))
import termd as termd_client  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TERMD_BIN = os.environ.get("TERMD_BIN") or str(REPO / "build" / "termd")
TERMCTL_BIN = os.environ.get("TERMCTL_BIN") or str(REPO / "build" / "termctl")
# The startup wait is generous: under AddressSanitizer on a busy CI machine
# termd and the shell in `main` start several times slower.
STARTUP_TIMEOUT = float(os.environ.get("TERMD_TEST_STARTUP_TIMEOUT", "30"))
# Under valgrind termd runs many times slower: waits in this file (start,
# stop) are stretched by VALGRIND_FACTOR; the tests chosen for `make
# valgrind` have no tight timing of their own.
VALGRIND = os.environ.get("TERMD_VALGRIND") == "1"
VALGRIND_FACTOR = 6.0 if VALGRIND else 1.0
VALGRIND_ARGS = ["valgrind", "--tool=memcheck", "--error-exitcode=99", "--leak-check=full",
                 "--errors-for-leak-kinds=definite", "--show-leak-kinds=definite",
                 "--track-fds=no", "--child-silent-after-fork=yes", "--num-callers=30"]
STOP_TIMEOUT = 5.0 * VALGRIND_FACTOR
LOG_TAIL = 60

# Environment variables that must not leak from the developer's shell into
# termd or termctl under test.
_SCRUB = ("TERMD_TOKEN", "TERMD_URL", "TERMD_CACERT", "TERMD_TLS_INSECURE", "PROMPT_COMMAND",
          "PS1", "BASH_ENV", "ENV", "VIRTUAL_ENV", "TMUX", "HISTFILE")


def base_env(home):
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env["HOME"] = str(home)
    # pyenv shims need the real HOME; tests call /usr/bin/python3 explicitly.
    return env


def log_tail(path, n=LOG_TAIL):
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError as e:
        return "(no log: %s)" % e
    return "\n".join(lines[-n:])


def hang_report(pid):
    """Where a termd that would not stop is (for the failure's text): each
    thread's state, wchan, syscall and kernel stack from /proc, and, when
    gdb is installed, every thread's backtrace."""
    out = []
    try:
        tids = sorted(os.listdir("/proc/%d/task" % pid), key=int)
    except OSError:
        return "(its /proc is gone)"
    for tid in tids:
        t = "/proc/%d/task/%s/" % (pid, tid)
        parts = []
        for f in ("comm", "wchan", "syscall", "stack"):
            try:
                with open(t + f) as fh:
                    parts.append("%s: %s" % (f, fh.read().strip()))
            except OSError:
                pass
        try:
            with open(t + "stat") as fh:
                parts.append("state: " + fh.read().rsplit(")", 1)[1].split()[0])
        except (OSError, IndexError):
            pass
        out.append("thread %s: %s" % (tid, "; ".join(parts)))
    gdb = shutil.which("gdb")
    if gdb:
        try:
            r = subprocess.run([gdb, "-p", str(pid), "-batch", "-nx", "-ex", "thread apply all bt"],
                               capture_output=True, text=True, timeout=60)
            out.append(r.stdout[-12000:])
        except (subprocess.SubprocessError, OSError) as e:
            out.append("gdb: %s" % e)
    return "\n".join(out)


def describe_exit(rc):
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = "?"
        return "died of signal %d (%s)" % (-rc, name)
    return "exited with status %d" % rc


class Termd:
    """One running termd on a private unix socket."""

    def __init__(self, tmp_path, args=(), env=None, token=None, name="termd", listen=None,
                 scheme="ws", tcp=False):
        self.dir = Path(tmp_path)
        self.home = self.dir / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        # unix socket paths are limited to ~107 bytes; tmp_path can be long.
        self.sockdir = tempfile.mkdtemp(prefix="td-", dir="/tmp")
        self.sock = os.path.join(self.sockdir, "termd.sock")
        # termd's run folder (termd-XXXXXX, made under $TMPDIR) goes in a
        # TMPDIR of its own here, sticky and open to all as /tmp is (sessions
        # run as other users): removed with sockdir even when a test kills
        # termd; after a clean exit stop() checks termd removed it itself
        self.tmpdir = os.path.join(self.sockdir, "tmp")
        os.mkdir(self.tmpdir)
        os.chmod(self.tmpdir, 0o1777)
        os.chmod(self.sockdir, 0o711)
        if tcp and not listen:   # loopback TCP on a free port, for tests that need TCP (RST)
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            listen = "127.0.0.1:%d" % s.getsockname()[1]
            s.close()
        # listen: "HOST:PORT" for TCP (scheme "ws" or "wss"); default a unix socket
        self.url = "%s://%s" % (scheme, listen) if listen else "unix:" + self.sock
        self.tcp = bool(listen)
        self.token = token
        self.log = self.dir / ("%s.log" % name)
        self.env = base_env(self.home)
        self.env["TMPDIR"] = self.tmpdir
        if token is not None:
            self.env["TERMD_TOKEN"] = token
        if env:
            self.env.update(env)
        self.argv = [TERMD_BIN, "--listen", listen or self.url, "--cwd", str(self.home)]
        if os.environ.get("TERMD_TEST_VERBOSE"):
            self.argv.append("-v")
        self.argv += list(args)
        self.vglog = None
        if VALGRIND:
            self.vglog = self.dir / ("%s.valgrind.log" % name)
            self.argv = VALGRIND_ARGS + ["--log-file=%s" % self.vglog] + self.argv
        self.clients = []
        self.proc = None
        self.returncode = None

    def start(self):
        if not os.access(TERMD_BIN, os.X_OK):
            pytest.fail("termd binary not found at %s (set TERMD_BIN or run `make`)" % TERMD_BIN)
        self._logf = open(self.log, "wb")
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=self._logf,
                                     stderr=subprocess.STDOUT, env=self.env, cwd=str(self.home),
                                     start_new_session=True)
        deadline = time.monotonic() + STARTUP_TIMEOUT
        last = None
        while time.monotonic() < deadline:
            rc = self.proc.poll()
            if rc is not None:
                self.returncode = rc
                pytest.fail("termd %s during start-up\n%s\n--- log ---\n%s"
                            % (describe_exit(rc), " ".join(self.argv), log_tail(self.log)))
            if self.tcp or os.path.exists(self.sock):
                try:
                    status, _, body = wsclient.http_request(self.url, "/healthz", timeout=5)
                    if status == 200:
                        json.loads(body)
                        return self
                    last = "healthz status %s" % status
                except Exception as e:  # not ready yet
                    last = repr(e)
            time.sleep(0.05)
        pytest.fail("termd did not answer /healthz within %.0fs (last: %s)\n--- log ---\n%s"
                    % (STARTUP_TIMEOUT, last, log_tail(self.log)))

    # -- clients ----------------------------------------------------------

    def events(self, token="default", **kw):
        """A new /events connection (hello already read). token='default'
        uses the token termd was started with."""
        if token == "default":
            token = self.token
        ev = wsclient.Events(self.url, token=token, **kw)
        self.clients.append(ev)
        return ev

    def healthz(self):
        status, headers, body = wsclient.http_request(self.url, "/healthz")
        return status, headers, body

    def termctl(self, *args, env=None, timeout=90, url=True, input=None):
        """Run termctl with TERMD_URL pointing at this termd; returns the
        CompletedProcess (text mode)."""
        if not os.access(TERMCTL_BIN, os.X_OK):
            pytest.fail("termctl binary not found at %s (set TERMCTL_BIN)" % TERMCTL_BIN)
        e = base_env(self.home)
        if url:
            e["TERMD_URL"] = self.url
        if env:
            e.update(env)
        return subprocess.run([TERMCTL_BIN] + [str(a) for a in args], env=e, capture_output=True,
                              text=True, timeout=timeout, input=input,
                              stdin=None if input is not None else subprocess.DEVNULL)

    # -- shutdown ---------------------------------------------------------

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def run_folder_left(self):
        """After a clean exit: termd's run folder left behind, or None."""
        if self.env.get("TMPDIR") != self.tmpdir:
            return None   # the test chose the TMPDIR (and looks at it itself)
        try:
            left = [n for n in os.listdir(self.tmpdir) if n.startswith("termd-")]
        except OSError:
            return None
        if not left:
            return None
        what = []
        for n in left:
            inside = []
            for root, dirs, files in os.walk(os.path.join(self.tmpdir, n)):
                inside += [os.path.relpath(os.path.join(root, x), self.tmpdir) for x in dirs + files]
            what.append("%s (%s)" % (n, ", ".join(sorted(inside)[:10]) or "empty"))
        return "termd exited with status 0 but left its run folder: %s" % "; ".join(what)

    def stop(self):
        """SIGTERM, wait up to 5 s, then SIGKILL. Returns a problem
        description, or None when termd exited with status 0."""
        for c in self.clients:
            try:
                c.ws.abort()
            except Exception:
                pass
        self.clients = []
        if self.proc is None:
            return None
        problem = None
        rc = self.proc.poll()
        if rc is not None:
            problem = "termd had already %s before the test ended" % describe_exit(rc)
        else:
            try:
                self.proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                rc = self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                where = hang_report(self.proc.pid)
                self.proc.kill()
                rc = self.proc.wait(10)
                problem = "termd did not exit within %.0fs of SIGTERM (killed); where it was:\n%s" % (
                    STOP_TIMEOUT, where)
            else:
                if rc != 0:
                    problem = "termd %s after SIGTERM (it should exit with status 0)" % describe_exit(rc)
                else:
                    problem = self.run_folder_left()
        # Anything left in termd's process group (its shells) goes too.
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.returncode = rc
        self._logf.close()
        shutil.rmtree(self.sockdir, ignore_errors=True)
        if problem:
            problem += "\n%s\n--- log (%s) ---\n%s" % (" ".join(self.argv), self.log, log_tail(self.log))
            if self.vglog:
                problem += "\n--- valgrind (%s) ---\n%s" % (self.vglog, log_tail(self.vglog, 400))
        return problem


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


@pytest.fixture
def termd_factory(request, tmp_path):
    """start(args=(), env=None, token=None, listen=None, scheme="ws", tcp=False)
    -> a started Termd (listen "HOST:PORT" for TCP, tcp=True for a free
    loopback port, else a unix socket); every one is stopped (and checked)
    when the test ends."""
    started = []

    def start(args=(), env=None, token=None, listen=None, scheme="ws", tcp=False):
        t = Termd(tmp_path / ("t%d" % len(started)), args, env, token, name="termd",
                  listen=listen, scheme=scheme, tcp=tcp)
        started.append(t)
        return t.start()

    yield start

    problems = []
    for t in started:
        p = t.stop()
        if p:
            problems.append(p)
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed and not problems:
        for t in started:
            print("\n--- termd log tail (%s) ---\n%s" % (t.log, log_tail(t.log)))
    if problems:
        pytest.fail("\n\n".join(problems), pytrace=False)


@pytest.fixture
def termd(termd_factory):
    """A fresh termd with default options."""
    return termd_factory()


@pytest.fixture
def ev(termd):
    """An /events connection to the fresh termd."""
    return termd.events()


@pytest.fixture
def client(termd):
    """The termd package's synchronous client on the fresh termd (closed at
    the end); its caller's wait is 90 s per action, as tdtest's CALL_TIMEOUT."""
    c = termd_client.Termd(termd.url, token=termd.token, wait=90.0)
    yield c
    c.close()


def pytest_configure(config):
    # the termd package warns when termd names an argument it did not read:
    # in this suite that fails the test (a test or the package misspelled one)
    config.addinivalue_line("filterwarnings", "error::termd.errors.IgnoredArgsWarning")
