"""Small helpers shared by the regress tests: running commands through the
events channel and checking observations, free ports, certificates. The
bench, docs and bundle scripts import it too (tests/regress on sys.path).
Also termd.upgrade in place from a test: upgrade, wait_closed, reconnect,
and an upgrade as a program ends (upgrade_as_it_ends, until_reaped)."""

import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import wsclient

# The python inside termd's shell: Debian's, not whatever `python3` is first
# on PATH (a pyenv shim would look for its config under the test's HOME).
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

# How long a test waits for any single observation. Commands in these tests
# finish in seconds; the default idle_timeout is 30 s, so 90 s only matters
# when termd is stuck.
CALL_TIMEOUT = 90.0


def fmt(obs):
    """An observation for an assertion message, content shortened."""
    o = dict(obs)
    c = o.get("content")
    if isinstance(c, str) and len(c) > 1500:
        o["content"] = c[:700] + " [...%d chars...] " % (len(c) - 1400) + c[-700:]
    return repr(o)


def run(ev, command, **args):
    """Send `run`, return its observation (whatever kind)."""
    a = {"command": command}
    a.update(args)
    return ev.call("run", a, timeout=CALL_TIMEOUT)


def run_obs(ev, command, **args):
    """Send `run`, assert the answer is a `run` observation, return it."""
    obs = run(ev, command, **args)
    assert obs.get("observation") == "run", "expected a run observation for %r, got %s" % (command, fmt(obs))
    return obs


def run_done(ev, command, exit_code=0, **args):
    """Run a command that must finish with exit_code; return the observation."""
    obs = run_obs(ev, command, **args)
    x = obs.get("extras") or {}
    assert x.get("running") is False, "command %r still running: %s" % (command, fmt(obs))
    if exit_code is not None:
        assert x.get("exit_code") == exit_code, "command %r: exit_code %r, wanted %r: %s" % (
            command, x.get("exit_code"), exit_code, fmt(obs))
    return obs


def content(obs):
    c = obs.get("content")
    assert isinstance(c, str), "content is not a string: %s" % fmt(obs)
    return c


def lines(obs):
    c = content(obs)
    return c.split("\n") if c else []


def assert_error(obs, *codes, cause="any"):
    assert obs.get("observation") == "error", "expected error %s, got %s" % ("/".join(codes), fmt(obs))
    code = (obs.get("extras") or {}).get("code")
    assert code in codes, "expected error code %s, got %r: %s" % ("/".join(codes), code, fmt(obs))
    assert isinstance(obs.get("content"), str) and obs["content"], "error without a message: %s" % fmt(obs)
    if cause != "any":
        assert "cause" in obs and obs["cause"] == cause, "error cause %r, wanted %r: %s" % (
            obs.get("cause"), cause, fmt(obs))
    return code


def finish(ev, obs, max_calls=30, **args):
    """Given a run observation of a still-running command, call `run ""`
    until it has finished. Returns the list of observations (first one
    included)."""
    got = [obs]
    while (obs.get("extras") or {}).get("running"):
        assert len(got) <= max_calls, "command still running after %d calls: %s" % (max_calls, fmt(obs))
        obs = run_obs(ev, "", **args)
        got.append(obs)
    return got


def wait_until(pred, timeout=20.0, interval=0.1, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.0fs waiting for %s" % (timeout, what))
        time.sleep(interval)


def find_vim():
    for name in ("vim", "vim.tiny", "vi"):
        p = shutil.which(name)
        if p:
            return p
    return None


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def make_cert(d, name=None):
    """A self-signed certificate for localhost and 127.0.0.1, made with the
    openssl command in directory d: (cert, key) paths, cert.pem and key.pem,
    or NAME.pem and NAME.key when name is given."""
    if name is None:
        cert, key = d / "cert.pem", d / "key.pem"
    else:
        cert, key = d / (name + ".pem"), d / (name + ".key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    return cert, key


def subscribed(termd, timeout=CALL_TIMEOUT):
    """An /events connection to termd (a conftest Termd) that has sent
    `subscribe` and had it answered."""
    ev = termd.events()
    obs = ev.call("subscribe", {}, timeout=timeout)
    assert obs.get("observation") == "subscribe", fmt(obs)
    return ev


def rss_mb(pid):
    """Resident memory of a process, in MiB."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def stub_children(pid):
    """termd's spare stubs (issue 50: forked ahead of need on cgroup v1, as
    `termd --stub`): pid's children still running pid's own program.
    termd holds one socket (and 3 fds in all) for each."""
    try:
        exe = os.readlink("/proc/%d/exe" % pid)
        kids = []
        for task in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, task)) as f:
                kids += [int(k) for k in f.read().split()]
    except OSError:
        return []
    out = []
    for k in kids:
        try:
            if os.readlink("/proc/%d/exe" % k) == exe:
                out.append(k)
        except OSError:
            pass
    return out


def dead_or_zombie(pid):
    """The process is gone or a zombie. One read of /proc/PID/stat: a check
    for the folder then an open raced with the reaping (CI once saw the
    folder there and the file gone)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(") ", 1)[1][0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def cmdline(pid):
    """pid's command line, its arguments joined by spaces ("" once it is
    gone, or for a zombie)"""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def pids_running(match):
    """pids of the processes whose command line (cmdline) is match (a str),
    matches all of it (a compiled regular expression) or passes it (a
    callable). A process may end between the listing of /proc and the read
    of its cmdline: it is left out."""
    if isinstance(match, str):
        ok = match.__eq__
    elif hasattr(match, "fullmatch"):
        ok = match.fullmatch
    else:
        ok = match
    return [pid for pid in (int(d) for d in os.listdir("/proc") if d.isdigit())
            if ok(cmdline(pid))]


def socket_fds(pid, spares=False):
    """How many sockets a process holds open (for termd, without the one it
    holds for each spare stub unless spares). Netlink sockets are not
    counted: the port scan opens one for a moment every 250 ms."""
    netlink = set()
    try:
        with open("/proc/%d/net/netlink" % pid) as f:
            for line in f.read().splitlines()[1:]:
                netlink.add(line.split()[-1])
    except OSError:
        pass
    n = 0
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if link.startswith("socket:") and link[len("socket:["):-1] not in netlink:
            n += 1
    return n if spares else n - len(stub_children(pid))


def with_few_fds(pid, ask, hit):
    """Issue 52's soak: ask(extra) (a request to termd, in a thread) while
    termd (pid) may open only `extra` descriptors more than it holds, 1 to
    8, six rounds, until hit(answer) says an answer came from the place
    under test (termd's other fd checks come first at times). Returns every
    answer (an OSError or ValueError ask raised is one) and the hits."""
    soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    answers = []
    try:
        for extra in [e for _ in range(6) for e in range(1, 9)]:
            if [a for a in answers if hit(a)]:
                break
            nfd = len(os.listdir("/proc/%d/fd" % pid))
            got = []

            def one():
                try:
                    got.append(ask(extra))
                except (OSError, ValueError) as e:
                    got.append(e)
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (nfd + extra, hard))
            th = threading.Thread(target=one)
            th.start()
            th.join(1.5)
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
            th.join(30)
            answers += got
    finally:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
    return answers, [a for a in answers if hit(a)]


def drain(ev, secs=0.5):
    """Every observation ev received (its `others` first) within secs."""
    got = list(ev.others)
    ev.others.clear()
    deadline = time.monotonic() + secs
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return got
        try:
            got.append(ev.recv_obs(left))
        except TimeoutError:
            return got


# ---- termd.upgrade in place (PROTOCOL.md §11)

UPGRADE_T = 60.0   # how long the old termd may take to close, the new one to answer


def reconnect(td, timeout=UPGRADE_T):
    """A new /events connection once the upgraded termd answers (the
    listener is kept: the connect itself waits, it is not refused)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            ev = td.events(timeout=10)
            return ev
        except Exception as e:   # noqa: BLE001 — the old one closing, the new one starting
            last = e
            time.sleep(0.02)
    raise AssertionError("no connection to the upgraded termd within %.0fs: %r" % (timeout, last))


def wait_closed(ev, timeout=UPGRADE_T):
    """Read until the connection closes; return the close code."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ev.recv_obs(deadline - time.monotonic())
        except wsclient.ConnectionClosed as e:
            return e.code
    raise AssertionError("connection not closed by the upgrade within %.0fs" % timeout)


def upgrade(td, ev, binary=None, cid="up-1"):
    """termd.upgrade on ev; returns (close code, new connection, the
    re-sent id's answer)."""
    args = {} if binary is None else {"binary": binary}
    ev.send_action("termd.upgrade", args, id=cid)
    code = wait_closed(ev)
    ev2 = reconnect(td)
    ans = ev2.call("termd.upgrade", args, id=cid, timeout=UPGRADE_T)
    return code, ev2, ans


# ---- an upgrade as a program ends (test_upgrade_ended.py's technique)
# termd is stopped (SIGSTOP) while the program writes and exits, the
# upgrade is asked for, then termd goes on: it reaps the zombie, then reads
# the request and upgrades, the output still in the pipes. Which came first
# is termd's to choose, so an attempt whose upgrade came before the reap (or
# after the end) is made again; the new termd's log says when a session
# came across reaped.

ATTEMPTS = 12
REAPED = "its process ended before the upgrade"
BIG = 600000
# BIG bytes into a stdout pipe made 1 MiB deep (F_SETPIPE_SZ): the program
# exits with all of them unread, and termd reads 16 KiB a loop turn of
# them, so its upgrade comes before their end more often
WRITE = ("/usr/bin/python3 -c 'import fcntl, sys; fcntl.fcntl(1, 1031, 1 << 20); "
         "sys.stdout.write(\"o\" * %d)'" % BIG)


def zombie(pid):
    """pid has exited and nobody has reaped it yet"""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


def log_count(td, what):
    with open(td.log, "rb") as f:
        return f.read().decode("utf-8", "replace").count(what)


def kept_open(mode, gate):
    """kept-open: a background job holds the outputs open (no end of file:
    the session ends 150 ms after the reap, its grace time, the window the
    upgrade comes in) until gate; hangup: none (the window is the turn
    termd reads the pipes' hangup in, found less often)"""
    return "(while [ ! -e %s ]; do sleep 0.05; done) & " % gate if mode == "kept-open" else ""


def ended_command(gate, release, n, code=7, mode="kept-open", tail=True):
    """A shell command that waits for gate, writes BIG bytes of stdout
    (then tail-N if tail), err-N on stderr, and exits code; its outputs
    kept open until release (kept_open)."""
    return "while [ ! -e %s ]; do sleep 0.01; done; %s%s; %secho err-%d >&2; exit %d" % (
        gate, kept_open(mode, release), WRITE, "echo tail-%d; " % n if tail else "", n, code)


def upgrade_as_it_ends(td, ev, gate, pid, cid):
    """Stop termd, let the program (waiting for gate) write and exit, ask
    for the upgrade, let termd go on; returns (the new connection, whether
    the session came across reaped)."""
    before = log_count(td, REAPED)
    ev.close()
    ev = td.events()   # the newest connection: termd reads it after its signals (more often)
    os.kill(td.proc.pid, signal.SIGSTOP)
    try:
        with open(gate, "w"):
            pass
        wait_until(lambda: zombie(pid), timeout=UPGRADE_T, interval=0.005,
                   what="the program's exit")
        ev.send_action("termd.upgrade", {}, id=cid)
    finally:
        os.kill(td.proc.pid, signal.SIGCONT)
    assert wait_closed(ev) == 1012
    ev2 = reconnect(td)
    ans = ev2.call("termd.upgrade", {}, id=cid, timeout=UPGRADE_T)
    assert ans["extras"].get("ok") is True, fmt(ans)
    return ev2, log_count(td, REAPED) > before


def until_reaped(td, ev, where, start, check, cid):
    """Up to ATTEMPTS attempts of: start(ev, n, gate) starts a program that
    waits for gate (where/gate-N) and returns a dict with its "pid";
    upgrade_as_it_ends; check(ev, n, started) asserts what came. Stops at
    the first attempt whose session came across reaped; returns the
    connection (the last upgrade's)."""
    for n in range(ATTEMPTS):
        gate = where / ("gate-%d" % n)
        started = start(ev, n, gate)
        ev, reaped = upgrade_as_it_ends(td, ev, gate, started["pid"], cid % n)
        check(ev, n, started)
        if reaped:
            return ev
    raise AssertionError("no attempt in %d had termd reap the program before it upgraded"
                         % ATTEMPTS)


def replay(ev, since, timeout=UPGRADE_T):
    """The events after seq since, as subscribe since gives them."""
    cid = ev.send_action("subscribe", {"since": since})
    got = []
    while True:
        o = ev.recv_obs(timeout)
        if o.get("cause") == cid:
            return got
        got.append(o)


def exited_once(ev, since, name, code, timeout=UPGRADE_T):
    """Wait for session name's session.exit (in the replay since seq since);
    assert it came once, last, with exit_code code; returns its
    session.output events and the exit, in order."""
    wait_until(lambda: [e for e in replay(ev, since) if e.get("observation") == "session.exit"
                        and e["extras"].get("name") == name], timeout=timeout,
               what="%s's end" % name)
    evs = [e for e in replay(ev, since) if e.get("observation") in ("session.output",
                                                                    "session.exit")
           and (e["extras"].get("session") or e["extras"].get("name")) == name]
    assert [e["observation"] for e in evs].count("session.exit") == 1, [fmt(e)[:200] for e in evs]
    assert evs[-1]["observation"] == "session.exit", [fmt(e)[:200] for e in evs]
    assert evs[-1]["extras"]["exit_code"] == code, fmt(evs[-1])
    return evs


def streams(evs):
    """The text of session.output events, by stream."""
    out = {"stdout": "", "stderr": ""}
    for e in evs:
        if e.get("observation") == "session.output":
            out[e["extras"]["stream"]] += e["content"]
    return out


def upgrade_while_connecting(td, ev, addrs, cid="up-1"):
    """termd.upgrade on ev while a thread connects to each of addrs ((host,
    port) pairs) over and over, until 20 more connects after the new
    termd's answer (UPGRADE_T at the most). Returns (the new connection,
    the re-sent id's answer, the connects made, the errors of the failed
    ones)."""
    errors, connects = [], [0]
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            for addr in addrs:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.settimeout(20)
                try:
                    s.connect(addr)
                    connects[0] += 1
                except OSError as e:
                    errors.append(repr(e))
                finally:
                    s.close()
    th = threading.Thread(target=loop)
    th.start()
    try:
        _, ev2, ans = upgrade(td, ev, cid=cid)
        n = connects[0]
        deadline = time.monotonic() + UPGRADE_T
        while connects[0] < n + 20 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop.set()
        th.join(30)
    return ev2, ans, connects[0], errors
