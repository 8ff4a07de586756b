"""A cgroup per session (issue 35, PROTOCOL.md section 11 "Limits and whole
trees", "Metrics"): a memory hog killed for its session's limit answers
killed "oom" while termd and the other sessions go on; a fork bomb held at
the pids limit, termd still opening sessions, `session.signal tree` ending
every bomb process; a double-forked daemon found and killed by `tree` (with
cgroups and, from /proc, without); limits per session over the defaults;
/metrics parsed and moving; cgroup v2 code on the unified tree where one is
writable; termd's own cgroup and its folders gone at exit; across upgrades
in place a session's limits kept and new folders numbered past every
earlier one.

Needs root and writable cgroups for most tests (skipped with the reason
termd gives otherwise). Every test removes what it made, failing or not:
the fixture stops termd, then kills whatever is left in the cgroups termd
made (thawed first) and removes them, and kills the pids a test noted; a
folder termd itself left behind fails the test."""

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

import wsclient
from conftest import Termd, log_tail
from tdtest import (PY, assert_error, fmt, pids_running, run, run_done, run_obs, content,
                    stub_children, subscribed, wait_until)

try:   # Debian's python3-prometheus-client (make deps)
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:   # the strict line check below still runs
    text_string_to_metric_families = None

V1_CONTROLLERS = ("memory", "pids", "cpu", "cpuacct", "freezer")


# ------------------------------------------------------------ cgroup helpers

def _mounts():
    """(fstype, mount root, mount point, super options) of cgroup mounts."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            pre, _, post = line.partition(" - ")
            a, b = pre.split(), post.split()
            if b and b[0] in ("cgroup", "cgroup2"):
                out.append((b[0], a[3], a[4], b[2] if len(b) > 2 else ""))
    return out


def my_cgroup_dirs():
    """This process's cgroup folder in each hierarchy termd may use (termd,
    started from here, makes termd-<pid> in each)."""
    paths = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            hid, ctrls, path = line.rstrip("\n").split(":", 2)
            paths[ctrls] = path
    dirs = []
    for fstype, root, point, opts in _mounts():
        if fstype == "cgroup2":
            path = paths.get("")
        else:
            names = set(opts.split(","))
            if not names & set(V1_CONTROLLERS):
                continue
            path = next((p for c, p in paths.items() if set(c.split(",")) & names), None)
        if path is None:
            continue
        if root != "/" and path.startswith(root):
            path = path[len(root):]
        d = point + (path if path != "/" else "")
        if d not in dirs:
            dirs.append(d)
    return dirs


def termd_dirs(pid):
    return [d for d in (os.path.join(r, "termd-%d" % pid) for r in my_cgroup_dirs())
            if os.path.isdir(d)]


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _empty_cgroup(d):
    """Thaw, kill everything in d, until it is empty (5 s at most)."""
    for f, v in (("freezer.state", "THAWED"), ("cgroup.freeze", "0")):
        if os.path.exists(os.path.join(d, f)):
            try:
                Path(d, f).write_text(v)
            except OSError:
                pass
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        pids = [int(p) for p in _read(os.path.join(d, "cgroup.procs")).split()]
        if not pids:
            return
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.02)


def sweep(pid):
    """Remove what termd `pid` made (its processes killed first); the
    folders that were still there."""
    left = []
    for base in termd_dirs(pid):
        for dirpath, dirnames, _ in sorted(os.walk(base), key=lambda w: -w[0].count("/")):
            left.append(dirpath)
            _empty_cgroup(dirpath)
            for _ in range(100):
                try:
                    os.rmdir(dirpath)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)
    return left


def termd_moves_in(t, ctrl):
    """termd goes into <its cgroup>/termd-<pid>/termd (on v1 a thread moves
    it once the main shell is started: waited for)"""
    want = "/termd-%d/termd" % t.proc.pid
    wait_until(lambda: cgroup_of(t.proc.pid, ctrl).endswith(want), 30,
               what="termd in %s (%s)" % (want, ctrl or "v2"))


def cgroup_of(pid, ctrl):
    """The folder of pid's cgroup in ctrl's v1 hierarchy (ctrl "" : v2)."""
    for line in _read("/proc/%d/cgroup" % pid).splitlines():
        hid, ctrls, path = line.split(":", 2)
        if (ctrl and ctrl in ctrls.split(",")) or (not ctrl and hid == "0"):
            for fstype, root, point, opts in _mounts():
                if (fstype == "cgroup2") == (not ctrl) and (not ctrl or ctrl in opts.split(",")):
                    if root != "/" and path.startswith(root):
                        path = path[len(root):]
                    return point + (path if path != "/" else "")
    return None


def alive(pid):
    st = _read("/proc/%d/stat" % pid)
    return bool(st) and st[st.rindex(")") + 2] != "Z"


# ------------------------------------------------------------------ fixture

@pytest.fixture
def td(request, tmp_path):
    """start(args, token=None) -> a started Termd; td.kill_later(pid). At the
    end: termd stopped (and checked), the pids noted killed, every cgroup
    termd made emptied and removed (one termd left fails the test)."""
    started, pids = [], []

    def start(args=(), token=None, tcp=False, env=None):
        t = Termd(tmp_path / ("t%d" % len(started)), list(args), env, token, tcp=tcp)
        started.append(t)
        return t.start()

    start.kill_later = pids.append
    yield start
    problems = []
    for t in started:
        p = t.stop()
        if p:
            problems.append(p)
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    for t in started:
        if t.proc is not None:
            left = sweep(t.proc.pid)
            if left:
                problems.append("termd %d left its cgroups behind: %s" % (t.proc.pid, left))
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed and not problems:
        for t in started:
            print("\n--- termd log tail (%s) ---\n%s" % (t.log, log_tail(t.log)))
    if problems:
        pytest.fail("\n\n".join(problems), pytrace=False)


def health(t):
    status, _, body = t.healthz()
    assert status == 200
    return json.loads(body)


def need_cgroups(t, version=None):
    """Skip unless termd uses cgroups (version, if given)."""
    if os.geteuid() != 0:
        pytest.skip("cgroups need root here (tests run as uid %d)" % os.geteuid())
    got = health(t).get("cgroups")
    if got is None or (version and got != version):
        why = [l for l in Path(t.log).read_text(errors="replace").splitlines() if "cgroups" in l]
        pytest.skip("termd uses no cgroups%s here: %s" % (" " + version if version else "",
                                                          why[0] if why else "?"))
    return got


def sessions(ev):
    o = ev.call("session.list")
    assert o["observation"] == "session.list", fmt(o)
    return {s["name"]: s for s in o["extras"]["sessions"]}


def limit_event(ev, what, timeout=20):
    return ev.wait_for(lambda o: o.get("observation") == "session.limit"
                       and o["extras"].get("what") == what, timeout)


# -------------------------------------------------------------------- tests

def test_memory_hog_killed_for_its_limit(td):
    """A hog in main past --session-memory-max: the kernel kills it in
    main's cgroup, run says killed "oom" and the limit, session.limit comes
    first; main and a second session go on and /healthz answers."""
    t = td(["--session-memory-max", "64M"])
    need_cgroups(t)
    ev = subscribed(t)
    hog = "%s -c \"a = b'x' * (768 << 20); print(len(a))\"" % PY
    o = run_obs(ev, hog, timeout=120)
    x = o["extras"]
    assert x["running"] is False and x["exit_code"] == 137, fmt(o)
    assert x["killed"] == "oom" and x["limit"] == 64 << 20, fmt(o)
    ev_lim = limit_event(ev, "memory", 0.1)   # sent before the answer
    assert ev_lim["extras"] == {"session": "main", "what": "memory", "limit": 64 << 20,
                                "oom_kills": 1}, fmt(ev_lim)
    assert ev_lim["cause"] is None
    assert health(t)["ok"] is True
    o = run_done(ev, "echo still here")
    assert "still here" in o["content"] and "killed" not in o["extras"], fmt(o)
    assert ev.call("session.open", {"name": "two"})["observation"] == "session.open"
    assert "two here" in run_done(ev, "echo two here", session="two")["content"]
    ss = sessions(ev)
    assert ss["main"]["limits"] == {"memory": 64 << 20, "pids": None, "cpu": None}
    assert ss["two"]["limits"]["memory"] == 64 << 20   # the default, for every session
    u = ss["main"]["usage"]
    assert u["oom_kills"] == 1 and 0 < u["memory"] <= 64 << 20, u
    assert (48 << 20) < u["memory_peak"] <= 64 << 20, u
    assert ss["two"]["usage"]["oom_kills"] == 0
    # a hog within the limit is not killed
    o = run_done(ev, "%s -c \"a = b'x' * (16 << 20); print(len(a))\"" % PY)
    assert "16777216" in o["content"] and "killed" not in o["extras"], fmt(o)


def test_fork_bomb_held_at_pids_limit_and_ended_by_tree(td, tmp_path):
    """A fork bomb in main (it backgrounds itself, so run answers at once)
    under --session-pids-max 50: forks are refused at the limit (counted,
    session.limit), termd still opens a new session that works, C-c says
    what runs behind main's prompt, session.signal tree ends every bomb
    process, main's pids are back to its shell, and main runs again."""
    t = td(["--session-pids-max", "50"])
    need_cgroups(t)
    ev = subscribed(t)
    stop = tmp_path / "stop"
    # self-limiting: each bomb process stops at the stop file or after 120 s
    bomb = ("b() { [ -e %s ] && return; [ $EPOCHSECONDS -gt %d ] && return; b | b & }; b"
            % (stop, int(time.time()) + 120))
    try:
        o = run_done(ev, bomb)
        ev_lim = limit_event(ev, "pids", 30)
        assert ev_lim["extras"]["session"] == "main" and ev_lim["extras"]["limit"] == 50
        assert ev_lim["extras"]["forks_refused"] >= 1
        main = sessions(ev)["main"]
        u = main["usage"]
        assert u["forks_refused"] >= 1 and 1 <= u["pids"] <= 50, u
        peak = _read(os.path.join(cgroup_of(main["pid"], "pids") or "", "pids.peak")).strip()
        assert peak in ("", "50"), peak   # (pids.peak: kernel 6.6 and later)
        # termd itself is outside the bomb's limit: a new session starts and works
        o = ev.call("session.open", {"name": "rescue"})
        assert o["observation"] == "session.open", fmt(o)
        assert "rescued" in run_done(ev, "echo rescued", session="rescue")["content"]
        # C-c: nothing in main's foreground, but the bomb behind it
        o = run(ev, "C-c", is_input=True)
        assert_error(o, "no_command")
        assert o["extras"]["left_running"] > 10, fmt(o)
        assert '"tree": true' in o["content"], fmt(o)
        o = ev.call("session.signal", {"session": "main", "signal": "KILL", "tree": True})
        assert o["observation"] == "session.signal", fmt(o)
        assert o["extras"]["tree"] is True and o["extras"]["processes"] > 10, fmt(o)
        wait_until(lambda: sessions(ev)["main"]["usage"]["pids"] == 1, 20,
                   what="main's pids back to its shell")
        main = sessions(ev)["main"]
        assert main["alive"] is True
        shell_cg = cgroup_of(main["pid"], "pids")
        assert _read(os.path.join(shell_cg, "cgroup.procs")).split() == [str(main["pid"])]
        o = run_done(ev, "echo main again")
        assert "main again" in o["content"] and not o["extras"].get("restarted"), fmt(o)
        assert "left_running" not in o["extras"], fmt(o)
    finally:
        stop.touch()


@pytest.mark.parametrize("cgroups", ["auto", "off"])
def test_double_forked_daemon_killed_by_tree(td, tmp_path, cgroups):
    """setsid + fork: the daemon leaves the shell's session and process
    group and is re-parented to termd; run says left_running 1, and
    session.signal tree finds and kills it (its cgroup; without cgroups the
    /proc tree and its TERMD_SESSION), sparing the shell."""
    t = td(["--cgroups", cgroups])
    if cgroups == "auto":
        need_cgroups(t)
    else:
        assert health(t)["cgroups"] is None
    ev = t.events()
    assert ev.call("session.open", {"name": "d"})["observation"] == "session.open"
    pidfile = tmp_path / "daemon.pid"
    o = run_done(ev, "setsid -w sh -c 'sleep 1000 & echo $! > %s'" % pidfile,
                 session="d")
    pid = int(pidfile.read_text())
    td.kill_later(pid)
    if cgroups == "auto":
        assert o["extras"]["left_running"] == 1, fmt(o)
    o = run(ev, "C-c", is_input=True, session="d")
    assert_error(o, "no_command")
    assert o["extras"]["left_running"] == 1, fmt(o)
    st = _read("/proc/%d/stat" % pid)
    fields = st[st.rindex(")") + 2:].split()
    shell = sessions(ev)["d"]["pid"]
    assert int(fields[1]) == t.proc.pid, "re-parented to termd: %s" % st   # the subreaper
    assert int(fields[3]) != shell, "its own session: %s" % st
    # foreground-only signals miss it
    ev.call("session.signal", {"session": "d", "signal": "TERM"})
    time.sleep(0.2)
    assert alive(pid)
    o = ev.call("session.signal", {"session": "d", "signal": "KILL", "tree": True})
    assert o["observation"] == "session.signal" and o["extras"]["processes"] >= 1, fmt(o)
    wait_until(lambda: not alive(pid), 10, what="the daemon killed")
    o = run_done(ev, "echo shell kept", session="d")
    assert "shell kept" in o["content"] and "left_running" not in o["extras"], fmt(o)
    assert not o["extras"].get("restarted")


def test_close_kills_leftovers_and_removes_the_cgroup(td, tmp_path):
    """session.close ends everything the session started, double-forked
    too, and its cgroup folders go; at exit termd's own go (the fixture
    fails the test otherwise) and termd was in a cgroup of its own."""
    t = td()
    version = need_cgroups(t)
    ev = t.events()
    for c in ("pids", "memory") if version == "v1" else ("",):
        termd_moves_in(t, c)
    assert ev.call("session.open", {"name": "c"})["observation"] == "session.open"
    pidfile = tmp_path / "daemon.pid"
    run_done(ev, "setsid -w sh -c 'sleep 1000 & echo $! > %s'" % pidfile, session="c")
    pid = int(pidfile.read_text())
    td.kill_later(pid)
    shell = sessions(ev)["c"]["pid"]
    dirs = [cgroup_of(shell, c) for c in (("pids", "memory") if version == "v1" else ("",))]
    assert all(re.search(r"/termd-%d/s-c-\d+$" % t.proc.pid, d) for d in dirs), dirs
    assert all(cgroup_of(pid, c) == cgroup_of(shell, c) for c in ("pids", "memory", "cpu", ""))
    assert ev.call("session.close", {"name": "c"})["observation"] == "session.close"
    wait_until(lambda: not alive(pid), 10, what="the daemon ended with its session")
    wait_until(lambda: not any(os.path.isdir(d) for d in dirs), 10, what="its cgroup removed")


def test_tree_signal_at_once_after_open(td):
    """A session's process joins its cgroup itself, before it execs, and
    session.open may be answered first: a tree signal sent at once (e2b's
    kill right after Start) still reaches it."""
    t = td()
    need_cgroups(t)
    ev = subscribed(t)
    for i in range(5):
        name = "quick%d" % i
        ev.send_action("session.open", {"name": name, "command": "exec sleep 60"})
        ev.send_action("session.signal", {"session": name, "signal": "KILL", "tree": True})
        o = ev.wait_for(lambda x: x.get("observation") == "session.exit"
                        and x["extras"]["name"] == name, 10)
        assert o["extras"]["signal"] == "KILL", fmt(o)
        ev.call("session.close", {"name": name})


def test_limits_per_session_override_defaults(td):
    """--session-*-max are every session's limits (main's too); session.open's
    limits override them, null for none; written where the kernel reads
    them; wrong ones are bad_request."""
    t = td(["--session-memory-max", "256M", "--session-pids-max", "300",
            "--session-cpu-max", "0.5"])
    version = need_cgroups(t)
    ev = t.events()
    o = ev.call("session.open", {"name": "lim", "limits": {"memory": "96M", "pids": None,
                                                            "cpu": 0.25}})
    assert o["observation"] == "session.open", fmt(o)
    assert o["extras"]["limits"] == {"memory": 96 << 20, "pids": None, "cpu": 0.25}, fmt(o)
    o = ev.call("session.open", {"name": "lim2", "limits": {"memory": 100 << 20}})
    assert o["extras"]["limits"] == {"memory": 100 << 20, "pids": 300, "cpu": 0.5}, fmt(o)
    for name in ("lim", "lim2"):   # (a process joins its cgroup itself, before it execs)
        run_done(ev, "true", session=name)
    ss = sessions(ev)
    assert ss["main"]["limits"] == {"memory": 256 << 20, "pids": 300, "cpu": 0.5}
    for name in ("main", "lim", "lim2"):
        u = ss[name]["usage"]
        assert set(u) >= {"memory", "memory_peak", "pids", "cpu_s"}, u
        assert u["memory"] > 0 and u["pids"] >= 1, u
        assert u["cpu_s"] >= 0 and u["memory_peak"] >= u["memory"], u
    if version == "v1":
        files = {"main": (ss["main"]["pid"], "256M", "300", "50000"),
                 "lim": (ss["lim"]["pid"], "96M", "max", "25000")}
        for name, (pid, mem, pids, quota) in files.items():
            assert _read(cgroup_of(pid, "memory") + "/memory.limit_in_bytes").strip() == \
                str(int(mem[:-1]) << 20), name
            assert _read(cgroup_of(pid, "pids") + "/pids.max").strip() == pids, name
            assert _read(cgroup_of(pid, "cpu") + "/cpu.cfs_quota_us").strip() == quota, name
    else:
        d = cgroup_of(ss["lim"]["pid"], "")
        assert _read(d + "/memory.max").strip() == str(96 << 20)
        assert _read(d + "/pids.max").strip() == "max"
        assert _read(d + "/cpu.max").split() == ["25000", "100000"]
    for bad in ({"disk": 1}, {"memory": "12Q"}, {"memory": 1000}, {"memory": -5},
                {"pids": 0}, {"pids": 2.5}, {"cpu": 0}, {"cpu": "half"}, 5, "64M"):
        o = ev.call("session.open", {"name": "bad", "limits": bad})
        assert_error(o, "bad_request")
    assert "bad" not in sessions(ev)


def test_limit_sizes_are_binary_with_any_suffix(td):
    """K, M, G, T are powers of 1024, with or without B / iB, in any case,
    and a fraction is allowed: "1G" is 2^30 like "1M" is 2^20."""
    t = td([])
    need_cgroups(t)
    ev = t.events()
    for i, (given, want) in enumerate([("1G", 1 << 30), ("2GiB", 2 << 30), ("1.5g", 3 << 29),
                                       ("64MB", 64 << 20), ("65536k", 64 << 20)]):
        o = ev.call("session.open", {"name": "size%d" % i, "limits": {"memory": given}})
        assert o["observation"] == "session.open", fmt(o)
        assert o["extras"]["limits"]["memory"] == want, (given, fmt(o))
        ev.call("session.close", {"name": "size%d" % i})


def test_first_instruction_runs_in_the_sessions_cgroup(td, tmp_path):
    """Issue 50: a session's program is in its session's cgroup, limits
    written, from its first instruction: `cat /proc/self/cgroup` first in
    the session's command reads the session's folder (a process made
    ahead of need in a spare cgroup on v1 is renamed into it before the
    program runs), its limit on it, for a pty and a pipe session, opened back
    to back and after a quiet spell (a cgroup v1 move then waits out an
    RCU grace period: whatever takes that off the critical path must not
    let the program start outside)."""
    t = td(["--session-pids-max", "300"])
    version = need_cgroups(t)
    ev = t.events()
    for i, (kind, pause) in enumerate((("pty", 0), ("pipe", 0), ("pty", 0.3), ("pipe", 0.3),
                                       ("pty", 0))):
        time.sleep(pause)   # (not a wait for anything: the quiet spell is the case)
        out = tmp_path / ("cg%d" % i)
        name = "first%d" % i
        o = ev.call("session.open", {"name": name, "kind": kind,
                                     "command": "cat /proc/self/cgroup > %s.tmp; mv %s.tmp %s; "
                                                "exec sleep 60" % (out, out, out)})
        assert o["observation"] == "session.open", fmt(o)
        pid = o["extras"]["pid"]
        wait_until(out.exists, 30, what=name + "'s cgroup read")
        lines = out.read_text().splitlines()
        # its limit is on its folder (written before it ran)
        d = cgroup_of(pid, "" if version == "v2" else "pids")
        assert _read(d + "/pids.max").strip() == "300", (kind, pause, d)
        ev.call("session.close", {"name": name})
        # a shell session (on v1 the one made ahead of need, renamed): the
        # shell itself is in the session's folder, with its limit
        shell = "sh%d" % i
        o = ev.call("session.open", {"name": shell})
        assert o["observation"] == "session.open", fmt(o)
        got = run_done(ev, "cat /proc/$$/cgroup", session=shell)["content"]
        assert "/termd-%d/s-%s-" % (t.proc.pid, shell) in got, (pause, got)
        d = cgroup_of(o["extras"]["pid"], "" if version == "v2" else "pids")
        assert "/s-%s-" % shell in d and _read(d + "/pids.max").strip() == "300", (pause, d)
        ev.call("session.close", {"name": shell})
        want = "/termd-%d/s-%s-" % (t.proc.pid, name)
        ctrls = ("",) if version == "v2" else ("memory", "pids")
        for ctrl in ctrls:
            got = [l.split(":", 2)[2] for l in lines
                   if (ctrl and ctrl in l.split(":", 2)[1].split(",")) or
                   (not ctrl and l.startswith("0::"))]
            assert got and want in got[0], (kind, pause, ctrl, pid, lines)


@pytest.mark.parametrize("spawn", ["clone3", "fork"])
def test_v2_first_instruction_runs_in_the_sessions_cgroup(td, tmp_path, spawn):
    """Issue 50 on cgroup v2 (forced, on this machine's unified tree): a
    session's process is born in its cgroup (clone3 CLONE_INTO_CGROUP), so
    `cat /proc/self/cgroup` first in its command reads the session's
    folder, for a pty and a pipe session, back to back and after a quiet
    spell; a shell session's shell is there; a close kills a child that
    ignores HUP (it is in the cgroup too). With clone3 the process is in
    its folder before session.open is answered (no join after the fork).
    spawn "fork": clone3 taken as refused (TERMD_TEST_NO_CLONE3), said once
    in the log: the child forks and joins its cgroup itself, the same holds."""
    if not any(m[0] == "cgroup2" for m in _mounts()):
        pytest.skip("no cgroup2 mount")
    t = td(["--cgroups", "v2"], env={"TERMD_TEST_NO_CLONE3": "1"} if spawn == "fork" else None)
    need_cgroups(t, "v2")
    ev = t.events()
    run_done(ev, "true")   # main's shell is up (its spawn tried clone3)
    log = Path(t.log).read_text(errors="replace")
    if spawn == "clone3" and "clone3(CLONE_INTO_CGROUP) refused" in log:
        pytest.skip("this kernel refuses clone3 into a cgroup: %s" %
                    [l for l in log.splitlines() if "clone3" in l])
    for i, (kind, pause) in enumerate((("pty", 0), ("pipe", 0), ("pty", 0.3), ("pipe", 0.3))):
        time.sleep(pause)   # (not a wait for anything: the quiet spell is the case)
        out = tmp_path / ("cg%d" % i)
        name = "first%d" % i
        o = ev.call("session.open", {"name": name, "kind": kind,
                                     "command": "cat /proc/self/cgroup > %s.tmp; mv %s.tmp %s; "
                                                "exec sleep 60" % (out, out, out)})
        assert o["observation"] == "session.open", fmt(o)
        pid = o["extras"]["pid"]
        want = "/termd-%d/s-%s-" % (t.proc.pid, name)
        if spawn == "clone3":   # born there: in it before the answer
            assert want in (cgroup_of(pid, "") or ""), (pid, cgroup_of(pid, ""))
        wait_until(out.exists, 30, what=name + "'s cgroup read")
        lines = out.read_text().splitlines()
        got = [l[3:] for l in lines if l.startswith("0::")]
        assert got and want in got[0], (kind, pause, pid, lines)
        ev.call("session.close", {"name": name})
    o = ev.call("session.open", {"name": "sh"})
    assert o["observation"] == "session.open", fmt(o)
    got = run_done(ev, "cat /proc/$$/cgroup", session="sh")["content"]
    assert "0::/" in got and "/termd-%d/s-sh-" % t.proc.pid in got, got
    tag = 310000 + os.getpid() % 10000
    run_done(ev, "(trap '' HUP; exec sleep %d) &" % tag, session="sh")
    sleepers = lambda: pids_running("sleep %d" % tag)
    kids = wait_until(sleepers, 10, what="the sleep that ignores HUP")
    for k in kids:
        td.kill_later(k)
        assert "/s-sh-" in (cgroup_of(k, "") or ""), (k, cgroup_of(k, ""))
    ev.call("session.close", {"name": "sh"})
    wait_until(lambda: not sleepers(), 15, what="the sleep ignoring HUP killed by the close")
    log = Path(t.log).read_text(errors="replace")
    if spawn == "fork":
        assert log.count("clone3 not used (TERMD_TEST_NO_CLONE3)") == 1, log
    else:
        assert "clone3" not in log, log


def test_a_spare_not_yet_in_its_cgroup_is_not_taken(td, tmp_path):
    """Found by CI: a spare stub (cgroup v1) taken while it was still on
    its way into its spare cgroup had the folder renamed under it, failed
    to join ("cannot join the session's cgroup") and the session ran
    outside any cgroup: a close found nothing there to kill, and children
    that ignore HUP lived on. The stubs here wait 1.5 s before joining
    (TERMD_TEST_SPARE_DELAY_MS); sessions opened meanwhile (a shell, a
    pty and a pipe command) are in their own folders, and a close kills
    what ignores HUP. Once the stubs said they joined, a session takes one."""
    t = td(["--session-pids-max", "300"], env={"TERMD_TEST_SPARE_DELAY_MS": "1500"})
    need_cgroups(t, "v1")
    ev = t.events()
    run_done(ev, "true")   # main is up: the spares are forked 50 ms later
    stubs = wait_until(lambda: (lambda k: k if len(k) == 3 else None)(stub_children(t.proc.pid)),
                       10, what="termd's three spare stubs")
    for i, kind in enumerate(("pty", "pipe")):
        out = tmp_path / ("early%d" % i)
        o = ev.call("session.open", {"name": "early%d" % i, "kind": kind,
                                     "command": "cat /proc/self/cgroup > %s.tmp; mv %s.tmp %s; "
                                                "exec sleep 60" % (out, out, out)})
        assert o["observation"] == "session.open", fmt(o)
        wait_until(out.exists, 30, what="early%d's cgroup read" % i)
        assert "/termd-%d/s-early%d-" % (t.proc.pid, i) in out.read_text(), (kind, out.read_text())
        ev.call("session.close", {"name": "early%d" % i})
    o = ev.call("session.open", {"name": "early"})
    assert o["observation"] == "session.open", fmt(o)
    got = run_done(ev, "cat /proc/$$/cgroup", session="early")["content"]
    assert "/termd-%d/s-early-" % t.proc.pid in got, got
    tag = 300000 + os.getpid() % 10000
    run_done(ev, "(trap '' HUP; exec sleep %d) &" % tag, session="early")
    sleepers = lambda: pids_running("sleep %d" % tag)
    wait_until(sleepers, 10, what="the sleep that ignores HUP")
    ev.call("session.close", {"name": "early"})
    wait_until(lambda: not sleepers(), 15, what="the sleep ignoring HUP killed by the close")
    # the stubs joined by now (1.5 s): one is taken, its pid the session's
    wait_until(lambda: all("/s-spare-" in _read("/proc/%d/cgroup" % p) for p in stubs), 15,
               what="the stubs in their spare cgroups")
    o = ev.call("session.open", {"name": "late"})
    assert o["observation"] == "session.open", fmt(o)
    assert o["extras"]["pid"] in stubs, (o["extras"]["pid"], stubs)
    got = run_done(ev, "cat /proc/$$/cgroup", session="late")["content"]
    assert "/termd-%d/s-late-" % t.proc.pid in got, got


def test_a_stub_that_never_became_termd_is_never_taken(td, tmp_path):
    """Found by CI (valgrind suite): a stub said it was ready before it
    exec'd `termd --stub`; under valgrind /proc/self/exe is valgrind's own
    tool, which refuses to run and exits, and a session that took such a
    stub in that moment ran nothing (`run` gave exit -1 at once). Now the
    exec'd image says it, so a stub whose exec ran something else is never
    taken. TERMD_TEST_STUB_EXE makes the stubs exec a script that waits a
    while and ends without a word: sessions opened meanwhile (a shell, a pty
    and a pipe command) all work, none on a stub's pid; after three such
    stubs termd makes no more and says so once."""
    tag = "30.%04d" % (os.getpid() % 10000)
    fake = tmp_path / "not-termd"
    fake.write_text("#!/bin/sh\nexec sleep %s\n" % tag)
    fake.chmod(0o755)
    t = td(["--session-pids-max", "300"], env={"TERMD_TEST_STUB_EXE": str(fake)})
    need_cgroups(t, "v1")
    ev = t.events()
    run_done(ev, "true")   # main is up: the spares are forked 50 ms later

    fakes = lambda: pids_running(lambda c: c.split(" ")[:2] == ["sleep", tag])
    stubs = wait_until(lambda: (lambda k: k if len(k) == 3 else None)(fakes()), 20,
                       what="three stubs that exec'd the script")
    o = ev.call("session.open", {"name": "sh"})
    assert o["observation"] == "session.open", fmt(o)
    assert o["extras"]["pid"] not in stubs, (o["extras"]["pid"], stubs)
    assert content(run_done(ev, "echo in-sh", session="sh")) == "in-sh"
    for kind in ("pty", "pipe"):
        out = tmp_path / kind
        o = ev.call("session.open", {"name": kind, "kind": kind,
                                     "command": "echo ran > %s.tmp; mv %s.tmp %s; exec sleep 60"
                                                % (out, out, out)})
        assert o["observation"] == "session.open", fmt(o)
        assert o["extras"]["pid"] not in stubs, (kind, o["extras"]["pid"], stubs)
        wait_until(out.exists, 30, what="the %s session's command" % kind)
        ev.call("session.close", {"name": kind})
    for p in stubs:
        os.kill(p, signal.SIGKILL)   # ended, never having said a word
    wait_until(lambda: "spare session processes do not start" in Path(t.log).read_text(), 30,
               what="termd giving up on spares")
    o = ev.call("session.open", {"name": "after"})
    assert o["observation"] == "session.open", fmt(o)
    assert content(run_done(ev, "echo after", session="after")) == "after"
    assert Path(t.log).read_text().count("spare session processes do not start") == 1


def test_without_cgroups(td, tmp_path):
    """--cgroups off: said once at start and in /healthz; sessions have no
    limits (null) nor usage, a limit asked for is bad_request; whole-tree
    signals and left_running still work, from /proc."""
    t = td(["--cgroups", "off", "--session-memory-max", "64M"])
    assert health(t)["cgroups"] is None
    log = Path(t.log).read_text()
    assert log.count("cgroups: not used (--cgroups off)") == 1, log
    assert "not enforced" in log
    ev = t.events()
    main = sessions(ev)["main"]
    assert main["limits"] is None and "usage" not in main, main
    o = ev.call("session.open", {"name": "x", "limits": {"memory": "64M"}})
    assert_error(o, "bad_request")
    assert "cgroups" in o["content"]
    o = ev.call("session.open", {"name": "x", "limits": {"memory": None}})
    assert o["observation"] == "session.open" and o["extras"]["limits"] is None, fmt(o)
    o = run_done(ev, "sleep 1000 &")
    assert "left_running" not in o["extras"], fmt(o)   # a /proc walk only when asked
    o = run(ev, "C-c", is_input=True)
    assert_error(o, "no_command")
    assert o["extras"]["left_running"] == 1
    o = ev.call("session.signal", {"session": "main", "signal": "TERM", "tree": True})
    assert o["extras"]["processes"] == 1, fmt(o)
    wait_until(lambda: run(ev, "C-c", is_input=True)["content"] == "nothing is running in 'main'",
               10, what="the sleep gone")


def test_cgroup_v2_tree(td, tmp_path):
    """--cgroups v2 on this machine's unified tree (its controllers are
    v1's, so no limits there): the v2 code's own part, cgroup.procs,
    cgroup.freeze while a shell's tree is signalled and cgroup.kill for a
    program session's, and its folders removed."""
    if not any(m[0] == "cgroup2" for m in _mounts()):
        pytest.skip("no cgroup2 mount")
    t = td(["--cgroups", "v2"])
    need_cgroups(t, "v2")
    ev = subscribed(t)
    # (on v2 termd is there before it listens: its controllers need it)
    assert cgroup_of(t.proc.pid, "").endswith("/termd-%d/termd" % t.proc.pid)
    pidfile = tmp_path / "daemon.pid"
    o = run_done(ev, "setsid -w sh -c 'sleep 1000 & echo $! > %s'" % pidfile)
    pid = int(pidfile.read_text())
    td.kill_later(pid)
    assert o["extras"]["left_running"] == 1, fmt(o)
    o = ev.call("session.signal", {"session": "main", "signal": "KILL", "tree": True})
    assert o["extras"]["processes"] == 1, fmt(o)
    wait_until(lambda: not alive(pid), 10, what="the daemon killed")
    assert "ok" in run_done(ev, "echo ok")["content"]
    o = ev.call("session.open", {"name": "prog", "command": "sleep 1000 & sleep 1000; echo"})
    assert o["observation"] == "session.open", fmt(o)
    pid = o["extras"]["pid"]   # (it joins its cgroup itself, before it execs)
    wait_until(lambda: "/s-prog-" in (cgroup_of(pid, "") or ""), 10, what="prog in its cgroup")
    d = cgroup_of(pid, "")
    wait_until(lambda: len(_read(d + "/cgroup.procs").split()) == 3, 10, what="3 processes")
    o = ev.call("session.signal", {"session": "prog", "signal": "KILL", "tree": True})
    assert o["extras"]["processes"] == 3, fmt(o)
    ev.wait_for(lambda x: x.get("observation") == "session.exit" and x["extras"]["name"] == "prog")
    assert _read(d + "/cgroup.procs").split() == []
    ev.call("session.close", {"name": "prog"})
    wait_until(lambda: not os.path.isdir(d), 10, what="its cgroup removed")


@pytest.mark.parametrize("cgroups", ["auto", "off"])
def test_openhands_ctrl_c_kills_what_runs_behind_the_prompt(td, tmp_path, cgroups):
    """OpenHands' C-c with nothing in the foreground but a daemon behind the
    prompt (OpenHands has no other way to stop it): termd kills the
    session's tree, the shell spared, and says so."""
    from test_openhands import OH, check_run
    t = td(["--cgroups", cgroups], tcp=True, env={"NO_CHANGE_TIMEOUT_SECONDS": "2"})
    if cgroups == "auto":
        need_cgroups(t)
    oh = OH(int(t.url.rsplit(":", 1)[1]))
    pidfile = tmp_path / "daemon.pid"
    check_run(oh.run("setsid -w sh -c 'sleep 1000 & echo $! > %s'" % pidfile), 0)
    pid = int(pidfile.read_text())
    td.kill_later(pid)
    obs = oh.run("C-c")
    check_run(obs, -1)
    assert obs["content"] == ("[Nothing was running in the foreground. 1 background process "
                              "that earlier commands started was killed. CTRL+C was sent.]"), obs
    wait_until(lambda: not alive(pid), 10, what="the daemon killed")
    obs = oh.run("C-c")
    assert obs["content"] == "ERROR: No previous running command to interact with.", obs
    check_run(oh.run("echo shell kept"), 0)


# ------------------------------------------------------------------ metrics

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABELS = r'\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*",?)*\}'
_SAMPLE = re.compile(r"^(%s)(%s)? (-?[0-9.e+-]+|\+Inf|-Inf|NaN)$" % (_NAME, _LABELS))


def parse_metrics(text):
    """{(name, ((label, value), ...)): value}: every line checked against the
    0.0.4 text format; with prometheus_client, its parser must agree."""
    assert text.endswith("\n")
    samples, types = {}, {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            assert re.match(r"^# HELP %s .+$" % _NAME, line), line
            continue
        if line.startswith("# TYPE "):
            m = re.match(r"^# TYPE (%s) (counter|gauge|histogram|summary|untyped)$" % _NAME, line)
            assert m, line
            assert m.group(1) not in types, "TYPE twice: %s" % line
            types[m.group(1)] = m.group(2)
            continue
        m = _SAMPLE.match(line)
        assert m, "not a sample line: %r" % line
        name, labels = m.group(1), m.group(2) or "{}"
        assert name.startswith("termd_"), line
        lab = tuple(sorted(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', labels)))
        assert (name, lab) not in samples, "sample twice: %s" % line
        samples[(name, lab)] = float(m.group(3))
    if text_string_to_metric_families:
        got = {}
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                got[(s.name, tuple(sorted(s.labels.items())))] = s.value
        assert got == samples
    return samples, types


def metric(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))))


def test_metrics(td, tmp_path):
    """GET /metrics: the full or the view token (else 401), Prometheus' text
    format 0.0.4, termd_ names; sessions, actions by outcome and their
    histogram, per-session memory, connections, the event ring and bytes
    move as termd works."""
    view = tmp_path / "view"
    view.write_text("viewsecret\n")
    t = td(["--view-token-file", str(view), "--session-pids-max", "100"], token="fullsecret")
    cg = health(t)["cgroups"]

    def scrape(token):
        hdrs = {"Authorization": "Bearer " + token} if token else {}
        return wsclient.http_request(t.url, "/metrics", headers=hdrs)

    status, _, _ = scrape(None)
    assert status == 401
    status, _, _ = scrape("wrong")
    assert status == 401
    status, h, body = scrape("viewsecret")
    assert status == 200 and h["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    s0, types = parse_metrics(body.decode())
    assert types["termd_actions_total"] == "counter"
    assert types["termd_action_duration_seconds"] == "histogram"
    for g in ("termd_sessions", "termd_connections", "termd_events_retained"):
        assert types[g] == "gauge"
    assert metric(s0, "termd_sessions") == 1
    (info,) = [dict(l) for (n, l) in s0 if n == "termd_info"]
    assert info["cgroups"] == (cg or "none") and info["version"], info
    ev = t.events(token="fullsecret")
    for i in range(3):
        run_done(ev, "echo %d" % i)
    ev.call("session.open", {"name": "second"})
    run_done(ev, "true", session="second")
    assert_error(ev.call("session.signal", {"session": "nope", "signal": "INT"}), "no_such_session")
    status, _, body = scrape("fullsecret")
    assert status == 200
    s1, _ = parse_metrics(body.decode())
    runs = metric(s1, "termd_actions_total", action="run", outcome="ok")
    assert runs == (metric(s0, "termd_actions_total", action="run", outcome="ok") or 0) + 4
    assert metric(s1, "termd_actions_total", action="session.signal",
                  outcome="no_such_session") == 1
    assert metric(s1, "termd_action_duration_seconds_count", action="run") == runs
    assert metric(s1, "termd_action_duration_seconds_bucket", action="run", le="+Inf") == runs
    assert metric(s1, "termd_action_duration_seconds_sum", action="run") > 0
    assert metric(s1, "termd_sessions") == 2
    assert metric(s1, "termd_session_alive", session="second") == 1
    assert metric(s1, "termd_connections") >= 1
    assert metric(s1, "termd_events_retained") > metric(s0, "termd_events_retained")
    assert metric(s1, "termd_events_total") > metric(s0, "termd_events_total")
    assert metric(s1, "termd_received_bytes_total") > metric(s0, "termd_received_bytes_total")
    assert metric(s1, "termd_sent_bytes_total") > metric(s0, "termd_sent_bytes_total")
    if cg:
        assert metric(s1, "termd_session_memory_bytes", session="main") > 0
        assert metric(s1, "termd_session_pids", session="second") >= 1
        cpu0 = metric(s1, "termd_session_cpu_seconds_total", session="main")
        run_done(ev, "%s -c 'sum(range(3000000))'" % PY)
        s2, _ = parse_metrics(scrape("viewsecret")[2].decode())
        assert metric(s2, "termd_session_cpu_seconds_total", session="main") > cpu0
        assert metric(s2, "termd_session_memory_peak_bytes", session="main") > \
            metric(s1, "termd_session_memory_bytes", session="main")


def test_upgrade_in_place_keeps_termd_in_its_cgroup(td):
    """An upgrade in place (same pid) finds termd already in
    termd-<pid>/termd: it stays there, not nested one level deeper per
    upgrade; a session opened after two upgrades is a sibling of termd's
    cgroup, and everything is removed at the end (the fixture checks)."""
    from test_upgrade import upgrade
    t = td(["--session-pids-max", "77"])
    need_cgroups(t)
    pid = t.proc.pid
    mine = "/termd-%d/termd" % pid

    def where():
        with open("/proc/%d/cgroup" % pid) as f:
            return [l.strip().split(":", 2)[2] for l in f if "termd-%d" % pid in l]

    # every hierarchy's (v1: the mover thread goes one at a time, a part
    # of them moved is not the end)
    n = len(termd_dirs(pid))
    wait_until(lambda: len(where()) == n and all(p.endswith(mine) for p in where()), 30,
               what="termd in its own cgroup in all %d hierarchies" % n)
    before = where()
    ev = t.events()
    for n in (1, 2):
        code, ev, ans = upgrade(t, ev, cid="up-cg-%d" % n)
        assert ans["extras"].get("ok") is True, fmt(ans)
        assert where() == before, (n, before, where())
    assert ev.call("session.open", {"name": "after"})["observation"] == "session.open"
    for name in ("main", "after"):
        run_done(ev, "true", session=name)   # (a process joins its cgroup itself, before it execs)
        s = sessions(ev)[name]
        with open("/proc/%d/cgroup" % s["pid"]) as f:
            paths = [l.strip().split(":", 2)[2] for l in f]
        assert not [p for p in paths if "/termd-%d/termd/" % pid in p], paths   # never nested
        assert [p for p in paths if re.search(r"/termd-%d/s-%s-\d+$" % (pid, name), p)], paths
        # the session's cgroup is still termd's: its limit and usage are told
        assert s.get("limits", {}).get("pids") == 77, fmt(s)
        assert (s.get("usage") or {}).get("pids", 0) >= 1, fmt(s)


def test_memory_and_cpu_limits_kept_across_two_upgrades(td):
    """A session opened with memory, pids and cpu limits: after two upgrades
    in place session.list still tells them and its usage, they are still
    in its cgroup's files, and they still hold: a hog past the memory limit
    is killed for it (killed "oom" and the limit) and a busy loop throttled
    at the cpu limit is told (session.limit "cpu")."""
    from test_upgrade import upgrade
    t = td(["--session-pids-max", "77"])
    version = need_cgroups(t)
    ev = t.events()
    lim = {"memory": 96 << 20, "pids": 40, "cpu": 0.25}
    o = ev.call("session.open", {"name": "lim", "limits": {"memory": "96M", "pids": 40,
                                                            "cpu": 0.25}})
    assert o["observation"] == "session.open" and o["extras"]["limits"] == lim, fmt(o)
    run_done(ev, "true", session="lim")   # (a process joins its cgroup itself, before it execs)
    pid = sessions(ev)["lim"]["pid"]

    def files():
        if version == "v1":
            return (_read(cgroup_of(pid, "memory") + "/memory.limit_in_bytes").strip(),
                    _read(cgroup_of(pid, "pids") + "/pids.max").strip(),
                    _read(cgroup_of(pid, "cpu") + "/cpu.cfs_quota_us").strip())
        d = cgroup_of(pid, "")
        return (_read(d + "/memory.max").strip(), _read(d + "/pids.max").strip(),
                _read(d + "/cpu.max").split()[0])

    assert files() == (str(96 << 20), "40", "25000")
    for n in (1, 2):
        code, ev, ans = upgrade(t, ev, cid="up-lim-%d" % n)
        assert ans["extras"].get("ok") is True, fmt(ans)
    assert ev.call("subscribe")["observation"] == "subscribe"
    s = sessions(ev)["lim"]
    assert s["pid"] == pid and s["limits"] == lim, fmt(s)
    u = s.get("usage") or {}
    assert u.get("memory", 0) > 0 and u.get("pids", 0) >= 1, u
    assert u.get("cpu_s", -1) >= 0 and u.get("memory_peak", 0) >= u["memory"], u
    assert files() == (str(96 << 20), "40", "25000")
    # the memory limit holds, and the answer tells it
    hog = "%s -c \"a = b'x' * (768 << 20); print(len(a))\"" % PY
    o = run_obs(ev, hog, session="lim", timeout=120)
    x = o["extras"]
    assert x["running"] is False and x["exit_code"] == 137, fmt(o)
    assert x.get("killed") == "oom" and x.get("limit") == 96 << 20, fmt(o)
    ev_lim = limit_event(ev, "memory", 20)
    assert ev_lim["extras"]["session"] == "lim" and ev_lim["extras"]["limit"] == 96 << 20, \
        fmt(ev_lim)
    # the cpu limit: a second of work at a quarter of a core is throttled
    run_done(ev, "%s -c 'sum(range(20000000))'" % PY, session="lim", timeout=120)
    ev_cpu = limit_event(ev, "cpu", 20)
    assert ev_cpu["extras"]["session"] == "lim" and ev_cpu["extras"]["limit"] == 0.25, fmt(ev_cpu)
    assert ev_cpu["extras"]["throttled"] > 0, fmt(ev_cpu)


def test_cgroup_numbers_go_on_after_an_upgrade(td):
    """A session's cgroup folder is s-<name>-<n>, n counted by termd. An
    upgrade in place goes on counting where the termd before stopped: a
    session opened after it gets a number above every earlier one, a
    closed session's too (a folder of the same name, the kernel still
    holding it, would make the session's open fail)."""
    from test_upgrade import upgrade
    t = td(["--session-pids-max", "77"])
    need_cgroups(t)
    ev = t.events()

    def number(name):
        run_done(ev, "true", session=name)   # (a process joins its cgroup itself, before it execs)
        pid = sessions(ev)[name]["pid"]
        with open("/proc/%d/cgroup" % pid) as f:
            found = {int(m.group(1)) for m in (
                re.search(r"/termd-%d/s-%s-(\d+)$" % (t.proc.pid, name), l.strip()) for l in f) if m}
        assert len(found) == 1, (name, found)
        return found.pop()

    earlier = [number("main")]
    for name in ("a", "b"):
        assert ev.call("session.open", {"name": name})["observation"] == "session.open"
        earlier.append(number(name))
    assert earlier == sorted(set(earlier)), earlier
    o = ev.call("session.close", {"name": "b"})   # the last number, now nobody's
    assert o["observation"] == "session.close", fmt(o)
    for n, name in ((1, "c"), (2, "d")):
        code, ev, ans = upgrade(t, ev, cid="up-num-%d" % n)
        assert ans["extras"].get("ok") is True, fmt(ans)
        assert ev.call("session.open", {"name": name})["observation"] == "session.open"
        got = number(name)
        assert got > max(earlier), (name, got, earlier)
        earlier.append(got)


def test_termctl_run_says_killed_for_the_memory_limit(td):
    """issue 51: termctl run on a command killed "oom" says so on stderr,
    with the session's limit, and exits with the shell's status."""
    t = td(["--session-memory-max", "64M"])
    need_cgroups(t)
    hog = "%s -c \"a = b'x' * (768 << 20); print(len(a))\"" % PY
    p = t.termctl("run", "--timeout", "120", hog)
    assert p.returncode == 137, (p.returncode, p.stdout, p.stderr)
    assert "termd: killed: out of memory (session limit 64M)\n" in p.stderr, p.stderr
    p = t.termctl("run", "echo fine")
    assert p.returncode == 0 and "killed" not in p.stderr, (p.returncode, p.stderr)
