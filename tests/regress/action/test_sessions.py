"""PROTOCOL.md sections 3 and 4 (session management, `expect`): several
sessions side by side, background jobs, session.open/list/signal/close and
what close leaves behind (processes, fds, zombies), program sessions that
exit, and `expect`."""

import os
import random
import re
import time

import pytest

import wsclient
from tdtest import (PY, assert_error, cmdline, content, drain, finish, fmt, free_port, lines, run,
                    run_done, run_obs, wait_until)

# Generous: the suite also runs under AddressSanitizer (~3x slower).
T = 90.0


# ---------------------------------------------------------------- helpers

def call(ev, action, args=None, **kw):
    return ev.call(action, args, timeout=kw.pop("timeout", T), **kw)


def open_session(ev, name, **args):
    """session.open that must succeed; returns the observation."""
    a = {"name": name}
    a.update(args)
    obs = call(ev, "session.open", a)
    assert obs.get("observation") == "session.open", "session.open %r: %s" % (a, fmt(obs))
    x = obs.get("extras") or {}
    assert x.get("name") == name, fmt(obs)
    assert isinstance(x.get("pid"), int) and x["pid"] > 0, fmt(obs)
    return obs


def close_session(ev, name):
    obs = call(ev, "session.close", {"name": name})
    assert obs.get("observation") == "session.close", "session.close %r: %s" % (name, fmt(obs))
    return obs


def sessions(ev):
    obs = call(ev, "session.list")
    assert obs.get("observation") == "session.list", fmt(obs)
    lst = (obs.get("extras") or {}).get("sessions")
    assert isinstance(lst, list), fmt(obs)
    return {s["name"]: s for s in lst}



def proc_stat(pid):
    """(state, ppid, pgrp, sid) of a process, or None when it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            data = f.read()
    except OSError:
        return None
    rest = data[data.rindex(")") + 2:].split()
    return rest[0], int(rest[1]), int(rest[2]), int(rest[3])


def proc_gone(pid, tpid):
    """The process has ended: it is gone, or a zombie that termd (tpid) is
    not the parent of (once reparented, reaping it is init's business)."""
    st = proc_stat(pid)
    return st is None or (st[0] in ("Z", "X") and st[1] != tpid)


def all_pids():
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def pids_in_session(sid, pattern=None):
    out = []
    for pid in all_pids():
        st = proc_stat(pid)
        if st and st[3] == sid and st[0] != "Z":
            if pattern is None or re.search(pattern, cmdline(pid)):
                out.append(pid)
    return out


def spare(pid):
    """A stub termd forks ahead of need in a spare cgroup (cgroup v1, issue
    50): termd's child, not a session's leftover (in its spare cgroup, or
    still termd's program: forked, not yet in its cgroup or exec'd)."""
    try:
        with open("/proc/%d/cgroup" % pid) as f:
            if "/s-spare-" in f.read():
                return True
        with open("/proc/%d/stat" % pid) as f:
            ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        return os.readlink("/proc/%d/exe" % pid) == os.readlink("/proc/%d/exe" % ppid)
    except (OSError, ValueError, IndexError):
        return False


def children_of(ppid, spares=False):
    """[(pid, state)] of the processes whose parent is ppid (termd's spare
    stubs only with spares)."""
    out = []
    for pid in all_pids():
        st = proc_stat(pid)
        if st and st[1] == ppid and (spares or not spare(pid)):
            out.append((pid, st[0]))
    return out


def fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def fd_list(pid):
    out = []
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            out.append("%s -> %s" % (fd, os.readlink("/proc/%d/fd/%s" % (pid, fd))))
        except OSError:
            pass
    return out


# ---------------------------------------------------------------- background jobs

def test_background_job_http_server(termd, ev):
    """The issue's pattern: a server left running in `srv`, used from main,
    stopped with session.signal INT; session.list before and after."""
    port = free_port()
    (termd.home / "marker-file-for-listing.txt").write_text("hello\n")
    server_cmd = "%s -m http.server %d --bind 127.0.0.1" % (PY, port)
    obs = run_obs(ev, server_cmd, session="srv", timeout=1)
    x = obs["extras"]
    assert x.get("session") == "srv", fmt(obs)
    assert x.get("running") is True and x.get("exit_code") == -1, \
        "the server should still be running after the 1 s timeout: %s" % fmt(obs)
    assert x.get("timed_out") == "hard", fmt(obs)

    # wait until it serves (its banner), then use it from main
    exp = call(ev, "expect", {"session": "srv", "pattern": "Serving HTTP on", "timeout": 60})
    assert exp.get("observation") == "expect" and exp["extras"].get("matched") is True, fmt(exp)
    obs = run_done(ev, "curl -s http://127.0.0.1:%d/" % port)
    assert "Directory listing" in content(obs), fmt(obs)
    assert "marker-file-for-listing.txt" in content(obs), fmt(obs)
    assert obs["extras"]["session"] == "main", fmt(obs)

    before = sessions(ev)
    assert "main" in before and "srv" in before, before
    srv = before["srv"]
    assert srv["alive"] is True and srv["exit_code"] is None, srv
    assert isinstance(srv.get("command"), str) and "http.server" in srv["command"], srv
    assert before["main"]["command"] is None, before["main"]
    for k in ("pid", "cwd", "cols", "rows", "viewers"):
        assert k in srv, "session.list entry without %r: %r" % (k, srv)

    sig = call(ev, "session.signal", {"session": "srv", "signal": "INT"})
    assert sig.get("observation") == "session.signal", fmt(sig)

    # the command finishes: run "" returns it finished
    got = finish(ev, run_obs(ev, "", session="srv", timeout=30), session="srv", timeout=30)
    last = got[-1]
    assert last["extras"]["running"] is False, fmt(last)
    assert last["extras"]["exit_code"] != -1, fmt(last)

    after = sessions(ev)
    assert after["srv"]["alive"] is True, "srv's shell should survive the INT: %r" % after["srv"]
    assert after["srv"]["command"] is None, "no command should be running in srv: %r" % after["srv"]
    obs = run_done(ev, "curl -s http://127.0.0.1:%d/" % port, exit_code=None)
    assert obs["extras"]["exit_code"] != 0, "the server still answers after INT: %s" % fmt(obs)
    # srv is an ordinary shell again
    assert content(run_done(ev, "echo again", session="srv")) == "again"


def test_sleep_in_one_session_does_not_delay_another(termd, tmp_path):
    a = termd.events()
    b = termd.events()
    open_session(a, "build")
    # build stays busy until the test opens its gate (after main's answer):
    # with "sleep 5" alone, a loaded machine could end build's command
    # before main's `true` had answered, and fail a termd that is right
    gate = tmp_path / "build-gate"
    rid = a.send_action("run", {"session": "build", "command": "sleep 5; while [ ! -e %s ]; "
                                "do sleep 0.05; done; echo built" % gate})
    t0 = time.monotonic()
    # build is really running the sleep
    wait_until(lambda: (sessions(b).get("build") or {}).get("command"), timeout=30,
               what="build to show its running command")
    assert "sleep 5" in sessions(b)["build"]["command"]
    t1 = time.monotonic()
    obs = run_done(b, "true")
    t2 = time.monotonic()
    assert obs["extras"]["session"] == "main", fmt(obs)
    # main answered while build was still busy
    lst = sessions(b)
    assert lst["build"]["command"] is not None, \
        "build finished before main answered (%.1fs): main was delayed" % (time.monotonic() - t0)
    try:
        early = a.ws.recv(0.01)
    except TimeoutError:
        early = None
    assert early is None, "build's run answered before main's `true`: %r" % (early,)
    assert t2 - t1 < 4.0, "run true in main took %.1fs while build slept" % (t2 - t1)
    gate.touch()
    obs = a.wait_for(lambda o: o.get("cause") == rid, T)
    assert obs.get("observation") == "run" and content(obs) == "built", fmt(obs)
    assert obs["extras"]["session"] == "build" and obs["extras"]["exit_code"] == 0, fmt(obs)
    assert obs["extras"]["duration_ms"] >= 4500, fmt(obs)


def test_run_in_unknown_session_opens_a_shell(termd, ev):
    obs = run_done(ev, "echo $TERMD_SESSION; pwd", session="fresh")
    assert content(obs).split("\n")[0] == "fresh", fmt(obs)
    assert os.path.realpath(content(obs).split("\n")[1]) == os.path.realpath(termd.home), fmt(obs)
    lst = sessions(ev)
    assert lst["fresh"]["alive"] is True and lst["fresh"].get("command") is None, lst
    # state is per session
    run_done(ev, "cd /tmp && X=in-fresh", session="fresh")
    assert content(run_done(ev, 'echo "${X-unset}"')) == "unset"
    assert content(run_done(ev, 'echo "$X $PWD"', session="fresh")) == "in-fresh /tmp"


# ---------------------------------------------------------------- session.open

def test_open_program_with_cwd_and_env(termd, ev, tmp_path):
    d = tmp_path / "workdir"
    d.mkdir()
    obs = open_session(ev, "job", command='printf "V=%s C=%s\\n" "$MY_TEST_VAR" "$PWD"; sleep 60',
                       cwd=str(d), env={"MY_TEST_VAR": "value-123"})
    x = obs["extras"]
    assert x.get("alive") is True, fmt(obs)
    assert "sleep 60" in (x.get("command") or ""), fmt(obs)
    assert os.path.realpath(x.get("cwd")) == os.path.realpath(d), fmt(obs)
    assert x.get("cols") == 160 and x.get("rows") == 48, "default size is 160x48: %s" % fmt(obs)
    assert proc_stat(x["pid"]) is not None, "pid %r does not exist" % x["pid"]
    exp = call(ev, "expect", {"session": "job", "pattern": "V=([^ ]*) C=([^ ]*)", "timeout": 30})
    assert exp["extras"].get("matched") is True, fmt(exp)
    v, c = exp["extras"]["groups"]
    assert v == "value-123", fmt(exp)
    assert os.path.realpath(c) == os.path.realpath(d), fmt(exp)
    lst = sessions(ev)
    job = lst["job"]
    assert job["alive"] is True and job["exit_code"] is None, job
    assert "sleep 60" in (job["command"] or ""), job
    assert os.path.realpath(job["cwd"]) == os.path.realpath(d), job
    # the variable went to the job only
    assert content(run_done(ev, 'echo "[${MY_TEST_VAR-}]"')) == "[]"


def test_open_shell_with_cwd_and_env(termd, ev, tmp_path):
    d = tmp_path / "dir with space"
    d.mkdir()
    obs = open_session(ev, "sh1", cwd=str(d), env={"FOO_T": "bar baz", "OTHER_T": "2"})
    assert obs["extras"].get("command") in (None, ""), fmt(obs)
    out = run_done(ev, 'echo "$FOO_T|$OTHER_T"; pwd', session="sh1")
    first, second = content(out).split("\n")
    assert first == "bar baz|2", fmt(out)
    assert os.path.realpath(second) == os.path.realpath(d), fmt(out)
    assert os.path.realpath(out["extras"]["cwd"]) == os.path.realpath(d), fmt(out)


def test_open_with_cols_rows(ev):
    obs = open_session(ev, "sized", cols=100, rows=30)
    assert obs["extras"].get("cols") == 100 and obs["extras"].get("rows") == 30, fmt(obs)
    out = run_done(ev, "stty size", session="sized")
    assert content(out) == "30 100", fmt(out)
    scr = call(ev, "screen", {"session": "sized"})
    assert scr["extras"]["cols"] == 100 and scr["extras"]["rows"] == 30, fmt(scr)
    s = sessions(ev)["sized"]
    assert s["cols"] == 100 and s["rows"] == 30, s
    # main keeps the default
    assert content(run_done(ev, "stty size")) == "48 160"


def test_session_exists(ev):
    open_session(ev, "dup")
    assert_error(call(ev, "session.open", {"name": "dup"}), "session_exists")
    assert_error(call(ev, "session.open", {"name": "dup", "command": "true"}), "session_exists")
    assert_error(call(ev, "session.open", {"name": "main"}), "session_exists")
    assert list(sessions(ev)).count("dup") == 1


@pytest.mark.parametrize("name", ["", "a b", "x" * 65, "bad/name", "caf\u00e9", "semi;colon", "a\nb"])
def test_open_invalid_name(ev, name):
    assert_error(call(ev, "session.open", {"name": name}), "bad_request")
    assert name not in sessions(ev)


def test_open_bad_args(ev):
    assert_error(call(ev, "session.open", {}), "bad_request")
    assert_error(call(ev, "session.open", {"name": 12}), "bad_request")
    assert_error(call(ev, "session.open", {"name": "e1", "env": "X=1"}), "bad_request")
    assert_error(call(ev, "session.open", {"name": "e2", "cols": "80"}), "bad_request")
    assert "e1" not in sessions(ev) and "e2" not in sessions(ev)
    # 64 characters is still a valid name
    name = "A-z_0.9" + "n" * 57
    assert len(name) == 64
    open_session(ev, name)
    assert name in sessions(ev)


def test_close_errors_and_reuse(ev):
    assert_error(call(ev, "session.close", {"name": "main"}), "bad_request")
    assert_error(call(ev, "session.close", {"name": "nope"}), "no_such_session")
    assert_error(call(ev, "session.close", {}), "bad_request")
    open_session(ev, "tmp1")
    close_session(ev, "tmp1")
    assert "tmp1" not in sessions(ev), "a closed session is still listed"
    assert_error(call(ev, "session.close", {"name": "tmp1"}), "no_such_session")
    # the name is free again, and the new session works
    open_session(ev, "tmp1")
    assert content(run_done(ev, "echo reborn", session="tmp1")) == "reborn"
    # main is untouched by all this
    assert content(run_done(ev, "echo still-main")) == "still-main"


def test_signal_errors(ev):
    assert_error(call(ev, "session.signal", {"session": "nope", "signal": "INT"}), "no_such_session")
    assert_error(call(ev, "session.signal", {"session": "main", "signal": "BOGUS"}), "bad_request")
    assert_error(call(ev, "session.signal", {"session": "main"}), "bad_request")


def test_signal_reaches_foreground_job(ev):
    open_session(ev, "sig")
    obs = run_obs(ev, "sleep 100", session="sig", timeout=1)
    assert obs["extras"]["running"] is True, fmt(obs)
    sig = call(ev, "session.signal", {"session": "sig", "signal": "TERM"})
    assert sig.get("observation") == "session.signal", fmt(sig)
    got = finish(ev, run_obs(ev, "", session="sig", timeout=30), session="sig", timeout=30)
    assert got[-1]["extras"]["exit_code"] == 128 + 15, fmt(got[-1])
    # the shell itself was not hit
    assert content(run_done(ev, "echo alive", session="sig")) == "alive"


def test_programs_start_with_default_signal_dispositions(ev):
    # termd ignores SIGPIPE for itself; a session's programs must not inherit
    # that: `yes` into a closed pipe dies of SIGPIPE (141), silently, instead
    # of getting EPIPE and writing "Broken pipe" errors
    obs = run_done(ev, 'yes | head -1; echo "status ${PIPESTATUS[*]}"')
    assert lines(obs) == ["y", "status 141 0"], fmt(obs)
    obs = run_done(ev, "grep -E '^Sig(Ign|Blk):' /proc/self/status")
    assert [ln.split() for ln in lines(obs)] == [["SigBlk:", "0" * 16], ["SigIgn:", "0" * 16]], fmt(obs)


def _start_tree(ev, name, tag):
    """Open a shell session and start a tree of processes in it: a
    background bash with two sleeping children, and a nested sh -> sleep.
    Returns (session pid, [pids of the sleeps and their parents])."""
    obs = open_session(ev, name)
    sid = obs["extras"]["pid"]
    run_done(ev, "bash -c 'sleep %d & sleep %d & wait' &" % (tag, tag + 1), session=name)
    run_done(ev, "sh -c 'sh -c \"sleep %d; true\"; true' &" % (tag + 2), session=name)
    pat = r"^(sleep %d|sleep %d|sleep %d|bash -c sleep|sh -c)" % (tag, tag + 1, tag + 2)
    # the three sleeps exec'd too: a child forked but not yet exec'd shows its
    # parent's command line (a loaded machine left two as 'sh -c' / 'bash -c')
    pids = wait_until(lambda: (lambda p: p if len(p) >= 6 and sum(
                          cmdline(x).startswith("sleep") for x in p) == 3 else None)(
                          pids_in_session(sid, pat)),
                      timeout=30, what="the process tree to start")
    return sid, pids


def test_close_ends_children_of_children(termd, ev):
    tag = random.randint(100000, 200000)
    sid, pids = _start_tree(ev, "tree", tag)
    sleeps = [p for p in pids if cmdline(p).startswith("sleep")]
    assert len(sleeps) == 3, [(p, cmdline(p)) for p in pids]
    t0 = time.monotonic()
    close_session(ev, "tree")
    assert "tree" not in sessions(ev), "the closed session is still listed"
    left = None
    while time.monotonic() - t0 < 4.5:
        left = [p for p in pids + [sid] if not proc_gone(p, termd.proc.pid)]
        if not left:
            break
        time.sleep(0.1)
    assert not left, "still alive %.1fs after session.close: %r" % (
        time.monotonic() - t0, [(p, cmdline(p), proc_stat(p)) for p in left])


def test_stop_hangs_up_each_session_then_kills_what_stays(termd_factory, tmp_path):
    """termd's stop (SIGTERM): every session's shell gets SIGHUP and a
    moment to end on it (its HUP trap runs), and a process of a session's
    group that ignores HUP is killed after it (without cgroups: nothing
    else kills it). The moment (50 ms at most) ends once every one has
    ended: slept out whole, it made each stop 50 ms longer."""
    td = termd_factory(args=["--cgroups", "off"])
    ev = td.events()
    said, up = tmp_path / "hup-said", tmp_path / "up"
    open_session(ev, "hupped", command="sh -c 'trap \"echo hup > %s; exit\" HUP; touch %s; "
                                        "while :; do sleep 0.01; done'" % (said, up))
    pidf = tmp_path / "ignorer"
    open_session(ev, "ignorer", command="sh -c 'trap \"\" HUP; echo $$ > %s; "
                                         "while :; do sleep 0.1; done'" % pidf)
    pid = wait_until(lambda: pidf.exists() and pidf.read_text().strip() and int(pidf.read_text()),
                     timeout=30, what="the HUP-ignoring shell started")
    wait_until(up.exists, timeout=30, what="the trapping shell started")
    tpid = td.proc.pid
    assert td.stop() is None
    td.proc = None   # stopped and checked: not again at teardown
    assert said.read_text() == "hup\n"
    try:
        wait_until(lambda: proc_gone(pid, tpid), timeout=10, what="the HUP-ignoring shell killed")
    finally:
        try:
            os.kill(pid, 9)
        except OSError:
            pass


def test_close_kills_processes_that_ignore_hup(termd, ev):
    """HUP first, KILL two seconds later (section 4): a process ignoring HUP
    must be gone within a few seconds too."""
    tag = random.randint(200001, 300000)
    obs = open_session(ev, "hupper")
    sid = obs["extras"]["pid"]
    run_done(ev, "nohup sleep %d >/dev/null 2>&1 &" % tag, session="hupper")
    run_done(ev, "(trap '' HUP; exec sleep %d) &" % (tag + 1), session="hupper")
    pat = r"^sleep (%d|%d)$" % (tag, tag + 1)
    pids = wait_until(lambda: (lambda p: p if len(p) == 2 else None)(pids_in_session(sid, pat)),
                      timeout=30, what="the HUP-ignoring sleeps to start")
    t0 = time.monotonic()
    close_session(ev, "hupper")
    left = None
    while time.monotonic() - t0 < 6.0:
        left = [p for p in pids if not proc_gone(p, termd.proc.pid)]
        if not left:
            break
        time.sleep(0.1)
    try:
        # Found as a daemon bug (fixed in 766d94b): the KILL two seconds
        # after the HUP was dropped when the shell itself died of the HUP
        # first (reaping it freed the session and cancelled the KILL timer),
        # so children that ignore HUP survived the close.
        assert not left, "processes ignoring HUP still alive %.1fs after session.close: %r" % (
            time.monotonic() - t0, [(p, cmdline(p), proc_stat(p)) for p in left])
    finally:
        for p in pids:
            try:
                os.kill(p, 9)
            except OSError:
                pass


def test_200_sessions_leave_no_fd_child_or_zombie(termd, ev):
    tpid = termd.proc.pid
    run_done(ev, "true")   # main fully up

    def children():
        return children_of(tpid)

    def spare_fds():   # termd holds 3 fds for each spare stub
        return 3 * sum(1 for c in children_of(tpid, spares=True) if spare(c[0]))

    base_fds = fd_count(tpid) - spare_fds()
    base_fd_list = fd_list(tpid)
    base_children = len(children())
    for batch in range(10):
        names = ["s%d" % (batch * 20 + i) for i in range(20)]
        for n in names:
            open_session(ev, n)
        # some of them fully up and having run a command, some closed while
        # their shell is still starting
        for n in names[::5]:
            assert content(run_done(ev, "echo in-$TERMD_SESSION", session=n)) == "in-" + n
        lst = sessions(ev)
        assert all(n in lst for n in names), sorted(lst)
        for n in names:
            close_session(ev, n)
    assert sorted(sessions(ev)) == ["main"], sorted(sessions(ev))

    def settled():
        kids = children()
        zombies = [k for k in kids if k[1] == "Z"]
        return (len(kids) == base_children and not zombies and
                fd_count(tpid) - spare_fds() <= base_fds + 2)

    try:
        wait_until(settled, timeout=20, interval=0.2, what="fds and children back to baseline")
    except AssertionError:
        kids = children()
        now = fd_list(tpid)
        extra = sorted(set(now) - set(base_fd_list))
        raise AssertionError(
            "after 200 sessions: fds %d (baseline %d), children %d (baseline %d), zombies %r\n"
            "new fds: %r\nchildren: %r" % (
                fd_count(tpid), base_fds, len(kids), base_children,
                [k for k in kids if k[1] == "Z"], extra[:20],
                [(k, cmdline(k[0])) for k in kids][:20]))
    # still healthy
    assert content(run_done(ev, "echo ok")) == "ok"
    open_session(ev, "s0")
    assert content(run_done(ev, "echo reopened", session="s0")) == "reopened"


def test_close_program_session_and_exited_one(termd, ev):
    tpid = termd.proc.pid
    run_done(ev, "true")   # main's shell started (else it may count or not)
    base = len(children_of(tpid))
    open_session(ev, "p1", command="sleep 100")
    open_session(ev, "p2", command="exit 3")
    wait_until(lambda: sessions(ev)["p2"]["alive"] is False, timeout=30, what="p2 to end")
    close_session(ev, "p1")
    close_session(ev, "p2")
    assert "p1" not in sessions(ev) and "p2" not in sessions(ev)
    wait_until(lambda: len(children_of(tpid)) == base, timeout=10, what="children reaped")


def test_close_answers_actions_waiting_on_the_session(termd):
    """Every action gets exactly one final observation: a run and an expect
    waiting on a session that another client closes are answered."""
    a = termd.events()
    b = termd.events()
    c = termd.events()
    open_session(a, "doomed")
    run_done(a, "true", session="doomed")
    rid = a.send_action("run", {"session": "doomed", "command": "sleep 300", "timeout": 300})
    eid = c.send_action("expect", {"session": "doomed", "pattern": "NEVER-HERE", "timeout": 300})
    wait_until(lambda: (sessions(b).get("doomed") or {}).get("command"), timeout=30,
               what="the sleep to run")
    t0 = time.monotonic()
    close_session(b, "doomed")
    r = a.wait_for(lambda o: o.get("cause") == rid, 30)
    e = c.wait_for(lambda o: o.get("cause") == eid, 30)
    assert time.monotonic() - t0 < 30
    assert r.get("observation") in ("run", "error"), fmt(r)
    if r.get("observation") == "run":
        assert r["extras"]["running"] is False, fmt(r)
    assert e.get("observation") in ("expect", "error"), fmt(e)
    if e.get("observation") == "expect":
        assert e["extras"]["matched"] is False, fmt(e)
    assert content(run_done(b, "echo main-ok")) == "main-ok"


# ---------------------------------------------------------------- programs that exit

def test_program_session_exit(termd, ev):
    sub = termd.events()
    s = call(sub, "subscribe")
    assert s.get("observation") == "subscribe", fmt(s)
    open_session(ev, "prog", command="sleep 0.5; echo bye; exit 7")
    e = sub.wait_for(lambda o: o.get("observation") == "session.exit", T)
    assert e.get("cause") is None, fmt(e)
    assert e["extras"].get("name") == "prog", fmt(e)
    assert e["extras"].get("exit_code") == 7, fmt(e)
    assert e["extras"].get("signal") is None, fmt(e)
    p = sessions(ev)["prog"]
    assert p["alive"] is False and p["exit_code"] == 7, p
    assert p["command"] is None, p
    assert_error(run(ev, "echo hi", session="prog"), "no_command")
    assert_error(run(ev, "", session="prog"), "no_command")
    # (screen on it is no_command too: termd's documented reading)
    # it stays dead: no restart
    assert sessions(ev)["prog"]["alive"] is False


def test_program_killed_by_signal(termd, ev):
    sub = termd.events()
    call(sub, "subscribe")
    open_session(ev, "victim", command="sleep 100")
    wait_until(lambda: pids_in_session(open_pid(ev, "victim"), r"^sleep 100$"), timeout=30,
               what="sleep to start")
    sig = call(ev, "session.signal", {"session": "victim", "signal": "KILL"})
    assert sig.get("observation") == "session.signal", fmt(sig)
    e = sub.wait_for(lambda o: o.get("observation") == "session.exit", T)
    x = e["extras"]
    assert x.get("name") == "victim", fmt(e)
    assert x.get("exit_code") == 137, fmt(e)
    # proto/PROTOCOL.md (termd's reading): signal is a name without SIG
    # (found as a daemon bug: it was the number 9; fixed in 766d94b)
    assert x.get("signal") == "KILL", "session.exit signal should be \"KILL\": %s" % fmt(e)
    v = sessions(ev)["victim"]
    assert v["alive"] is False and v["exit_code"] == 137, v
    assert_error(call(ev, "session.signal", {"session": "victim", "signal": "INT"}), "no_command")


def open_pid(ev, name):
    return sessions(ev)[name]["pid"]


# ---------------------------------------------------------------- expect

def test_expect_text_that_appears_later(ev):
    open_session(ev, "ex", command="sleep 1; echo READY 42; sleep 60")
    t0 = time.monotonic()
    obs = call(ev, "expect", {"session": "ex", "pattern": "READY ([0-9]+)", "timeout": 60})
    assert obs.get("observation") == "expect", fmt(obs)
    x = obs["extras"]
    assert x.get("matched") is True, fmt(obs)
    assert x.get("match") == "READY 42", fmt(obs)
    assert x.get("groups") == ["42"], fmt(obs)
    assert content(obs).endswith("READY 42"), fmt(obs)
    assert time.monotonic() - t0 < 50


def test_expect_content_up_to_match(ev):
    open_session(ev, "ex2", command="sleep 1; printf 'alpha\\nbeta MARK gamma\\n'; sleep 60")
    obs = call(ev, "expect", {"session": "ex2", "pattern": "M(AR)K", "timeout": 60})
    x = obs["extras"]
    assert x.get("matched") is True and x.get("match") == "MARK" and x.get("groups") == ["AR"], fmt(obs)
    c = content(obs)
    assert c.endswith("beta MARK"), fmt(obs)
    assert "alpha" in c and "gamma" not in c, fmt(obs)


def test_expect_text_already_on_screen(ev):
    run_done(ev, "echo ALREADY-THERE-$((3+4))")
    t0 = time.monotonic()
    obs = call(ev, "expect", {"pattern": "ALREADY-THERE-([0-9])", "timeout": 20})
    dt = time.monotonic() - t0
    x = obs["extras"]
    assert x.get("matched") is True and x.get("groups") == ["7"], fmt(obs)
    assert dt < 10, "a match on the current screen took %.1fs" % dt


def test_expect_optional_group_is_null(ev):
    run_done(ev, "echo OPT-$((1+1))")
    obs = call(ev, "expect", {"pattern": "OPT-(x)?([0-9])", "timeout": 20})
    assert obs["extras"].get("matched") is True, fmt(obs)
    assert obs["extras"].get("groups") == [None, "2"], fmt(obs)


def test_expect_timeout(ev):
    t0 = time.monotonic()
    obs = call(ev, "expect", {"pattern": "NEVER-(MATCHES)-xyz", "timeout": 1.5})
    dt = time.monotonic() - t0
    assert obs.get("observation") == "expect", fmt(obs)
    x = obs["extras"]
    assert x.get("matched") is False, fmt(obs)
    assert x.get("match") is None and x.get("groups") == [], fmt(obs)
    assert 1.2 <= dt < 15, "expect with timeout 1.5 answered after %.2fs" % dt
    # the session is fine afterwards
    assert content(run_done(ev, "echo fine")) == "fine"


def test_expect_errors(ev):
    assert_error(call(ev, "expect", {"pattern": "(unclosed", "timeout": 1}), "bad_request")
    assert_error(call(ev, "expect", {"pattern": "a[", "timeout": 1}), "bad_request")
    assert_error(call(ev, "expect", {"session": "nope", "pattern": "x", "timeout": 1}), "no_such_session")
    assert_error(call(ev, "expect", {"timeout": 1}), "bad_request")
    assert_error(call(ev, "expect", {"pattern": 5, "timeout": 1}), "bad_request")


def test_expect_while_a_run_is_in_flight(termd):
    """expect on a session whose command is driven by another client's run."""
    a = termd.events()
    b = termd.events()
    open_session(a, "w")
    rid = a.send_action("run", {"session": "w", "command": "sleep 1; echo STEP-$((10+1)); sleep 1; echo end"})
    obs = call(b, "expect", {"session": "w", "pattern": "STEP-([0-9]+)", "timeout": 60})
    assert obs["extras"].get("matched") is True and obs["extras"]["groups"] == ["11"], fmt(obs)
    r = a.wait_for(lambda o: o.get("cause") == rid, T)
    assert r.get("observation") == "run" and content(r) == "STEP-11\nend", fmt(r)


BAD_NAMES = ["", "a b", "x" * 65, "semi;colon", "ünï"]


@pytest.mark.parametrize("bad", BAD_NAMES)
def test_invalid_session_name_is_bad_request_for_every_action(ev, bad):
    """A name that cannot be a session's (PROTOCOL.md §3) is bad_request for
    every action that takes one, never no_such_session."""
    calls = [
        ("run", {"session": bad, "command": "true"}),
        ("keys", {"session": bad, "keys": ["x"]}),
        ("screen", {"session": bad}),
        ("expect", {"session": bad, "pattern": "x", "timeout": 1}),
        ("session.open", {"name": bad}),
        ("session.signal", {"session": bad, "signal": "INT"}),
        ("session.close", {"name": bad}),
    ]
    for action, args in calls:
        assert_error(call(ev, action, args), "bad_request")


def test_resent_expect_id_is_rebound(termd):
    """An expect whose id is sent again while it waits answers once, on the
    new connection (the same as run)."""
    a = termd.events()
    eid = wsclient.new_id("exp")
    a.send_action("expect", {"pattern": "rebound-[0-9]+", "timeout": 30}, id=eid)
    time.sleep(0.3)
    a.ws.abort()
    b = termd.events()
    b.send_action("expect", {"pattern": "rebound-[0-9]+", "timeout": 30}, id=eid)
    time.sleep(0.3)
    c = termd.events()
    run_done(c, "echo rebound-$((40+2))")
    obs = b.recv_obs(timeout=30)
    assert obs["cause"] == eid and obs["observation"] == "expect", fmt(obs)
    assert obs["extras"]["matched"] is True and obs["extras"]["match"] == "rebound-42", fmt(obs)
    more = drain(b, 0.5)
    assert not [o for o in more if o.get("cause") == eid], [fmt(o) for o in more]


def test_program_that_closes_its_output_early_is_not_hung_up(termd, ev):
    """A program with stdin elsewhere that closes stdout and stderr before
    it exits (coreutils do) leaves the pty's master at EIO while it still
    runs; termd keeps the master open until it is reaped, so the hangup
    never kills it first (before: SIGHUP in 37 runs of 40)."""
    sub = termd.events()
    assert call(sub, "subscribe").get("observation") == "subscribe"
    codes = []
    for i in range(20):
        name = "early%d" % i
        open_session(ev, name, command="exec id -u </dev/null")
        e = sub.wait_for(lambda o: o.get("observation") == "session.exit"
                         and o["extras"]["name"] == name, T)
        codes.append((e["extras"]["exit_code"], e["extras"]["signal"]))
        close_session(ev, name)
    assert codes == [(0, None)] * 20, codes


def test_input_bigger_than_the_pty_takes_arrives_whole(termd, ev):
    """2 MB of session.stdin to a program on a pty (raw mode) arrive whole:
    the pty takes a few KiB at a time, so termd writes the rest as it is
    read, over many turns. termd's wish to write again, made while writing
    (lws drops it after its WRITEABLE callback), was once lost: the input
    stopped after some 20 KiB until more was typed."""
    ready, out = termd.home / "raw.ready", termd.home / "raw.out"
    size = 2000000
    open_session(ev, "raw", command="stty raw -echo && touch %s && head -c %d > %s; sleep 600"
                 % (ready, size, out))
    wait_until(ready.exists, T, 0.05, what="the pty in raw mode")
    data = b"".join(b"%07d\n" % i for i in range(size // 8))
    assert len(data) == size
    import base64
    o = call(ev, "session.stdin", {"session": "raw", "encoding": "base64",
                                   "content": base64.b64encode(data).decode()})
    assert o.get("observation") == "session.stdin" and o["extras"]["bytes"] == size, fmt(o)

    def written():
        try:
            return out.stat().st_size
        except OSError:
            return 0

    try:
        wait_until(lambda: written() >= size, 60, 0.1, what="2 MB through the pty")
    except AssertionError:
        raise AssertionError("%d of %d bytes came through the pty" % (written(), size))
    assert out.read_bytes() == data
    call(ev, "session.close", {"session": "raw"})


IGNORE_GLIBC_SIGNALS = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
class KSA(ctypes.Structure):
    _fields_ = [("handler", ctypes.c_ulong), ("flags", ctypes.c_ulong),
                ("restorer", ctypes.c_ulong), ("mask", ctypes.c_ulong)]
for sig in (32, 33):   # glibc's own: signal() refuses them, the kernel does not
    ksa = KSA(1, 0, 0, 0)   # SIG_IGN
    if libc.syscall(13, sig, ctypes.byref(ksa), None, 8) != 0:   # rt_sigaction (x86-64)
        sys.exit("rt_sigaction(%d): errno %d" % (sig, ctypes.get_errno()))
os.execv(sys.argv[1], sys.argv[1:])
"""


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the rt_sigaction number is x86-64's")
def test_programs_start_with_default_signal_dispositions_whatever_termds_parent_ignored(tmp_path):
    """A parent that ignores signals 32 and 33 (glibc keeps them for itself,
    so signal() cannot set them back) still leaves a session's programs
    with every signal at its default: termd resets those two by the
    kernel's call (seen in a CI run: SigIgn 0000000080000000)."""
    import conftest
    t = conftest.Termd(tmp_path, (), None, None)
    t.argv = [PY, "-c", IGNORE_GLIBC_SIGNALS] + t.argv
    t.start()
    try:
        pid = t.proc.pid
        with open("/proc/%d/status" % pid) as f:
            ign = [ln.split()[1] for ln in f if ln.startswith("SigIgn:")][0]
        # termd itself got them ignored (32 at least: glibc gives 33 a handler
        # of its own once termd starts a thread, as its cgroup move on v1)
        assert int(ign, 16) & (1 << 31), ign
        ev = t.events()
        obs = run_done(ev, "grep -E '^SigIgn:' /proc/self/status")
        assert [ln.split() for ln in lines(obs)] == [["SigIgn:", "0" * 16]], fmt(obs)
        # with cgroups v1, later sessions start from spare stubs (`termd
        # --stub`, forked and exec'd ahead of need): an exec keeps what is
        # ignored, so the stub must have reset the two as well
        def stubs():
            kids = []
            for task in os.listdir("/proc/%d/task" % pid):
                with open("/proc/%d/task/%s/children" % (pid, task)) as f:
                    kids += f.read().split()
            out = []
            for k in kids:
                try:
                    with open("/proc/%s/cmdline" % k, "rb") as f:
                        if b"--stub" in f.read():
                            out.append(k)
                except OSError:
                    pass
            return out
        if not os.path.isdir("/sys/fs/cgroup/pids/termd-%d" % pid):
            return   # no cgroups v1 here: no spares to look at
        for kind in ("pty", "pipe"):
            wait_until(lambda: len(stubs()) >= 1, 30, what="a spare stub")
            out = tmp_path / ("sigign-" + kind)
            o = ev.call("session.open", {"name": "sp-" + kind, "kind": kind,
                                         "command": "grep -E '^SigIgn:' /proc/self/status > %s" % out})
            assert o["observation"] == "session.open", fmt(o)
            wait_until(lambda: out.exists() and out.read_text().endswith("\n"), 30,
                       what="the %s session's answer" % kind)
            assert out.read_text().split() == ["SigIgn:", "0" * 16], (kind, out.read_text())
    finally:
        t.stop()


def test_an_interrupt_while_the_shell_starts_keeps_its_integration(termd_factory, tmp_path):
    """issue 51 (first hour): `termctl session signal NAME INT` right after
    `session open`, while the rc files ran, aborted the rest of termd's rc
    file: the session never had a prompt mark, and every run on it was
    "shell_starting" for ever. Now the interrupt ends what the rc file runs
    (its sleep), and the shell still comes up with termd's integration."""
    import tdtest
    home = tmp_path / "home"
    home.mkdir()
    gate = tmp_path / "gate"
    (home / ".bashrc").write_text("while [ ! -e %s ]; do sleep 0.1; done\n" % gate)
    t = termd_factory(env={"HOME": str(home)})
    ev = t.events()
    assert ev.call("session.open", {"name": "slow"})["observation"] == "session.open"

    pid = [x for x in ev.call("session.list", {})["extras"]["sessions"]
           if x["name"] == "slow"][0]["pid"]

    def rc_running():   # the rc file's loop: a sleep child of the shell
        try:
            kids = open("/proc/%d/task/%d/children" % (pid, pid)).read().split()
            return any(open("/proc/%s/comm" % k).read().strip() == "sleep" for k in kids)
        except OSError:
            return False
    tdtest.wait_until(rc_running, what="the rc file running in slow")
    o = ev.call("session.signal", {"session": "slow", "signal": "INT"})
    assert o["observation"] == "session.signal", o
    gate.touch()
    o = ev.call("run", {"session": "slow", "command": "echo up-$((50+1))", "timeout": 30},
                timeout=60)
    assert o["extras"]["running"] is False and "up-51" in o["content"], o
