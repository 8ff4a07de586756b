"""Faults termd has to live through (issue: faults): a session's shell
killed with SIGKILL, a hundred processes ending at once, clients vanishing
in the middle of a frame or of a large answer, SIGPIPE, and a full disk (or
a file size limit) under --event-log and under a command's output file.
After each, termd is still up and its other clients lose nothing."""

import json
import os
import resource
import signal
import socket
import struct
import subprocess
import tempfile
from pathlib import Path

import pytest

import wsclient
from tdtest import cmdline, content, fmt, lines, pids_running, run_done, socket_fds, wait_until
from test_sessions import children_of, open_session, proc_stat, sessions

T = 90.0


# ---------------------------------------------------------------- helpers

def subscriber(td):
    sub = td.events()
    obs = sub.call("subscribe", timeout=T)
    assert obs.get("observation") == "subscribe", fmt(obs)
    return sub


def io_errors(obs_list):
    return [o for o in obs_list if o.get("observation") == "error"
            and (o.get("extras") or {}).get("code") == "io_error"]


def received(sub):
    """Every observation sub has received so far and not consumed: a ping
    on it is answered after every event termd emitted before it."""
    assert sub.ping().get("observation") == "pong"
    got = list(sub.others)
    sub.others.clear()
    return got


def zombies_of(pid):
    return [c for c in children_of(pid) if c[1] == "Z"]


def assert_serving(td, ev=None):
    """termd is alive, answers /healthz, a ping and a run."""
    assert td.alive(), "termd is gone"
    status, _, _ = td.healthz()
    assert status == 200
    ev = ev or td.events()
    assert ev.ping().get("observation") == "pong"
    assert content(run_done(ev, "echo serving")) == "serving"


@pytest.fixture
def small_tmpfs():
    """mount(size) -> a fresh directory on a tmpfs of that size (skips the
    test when mounting is not permitted); unmounted at the end, after the
    termd of termd_factory has stopped (it is requested after this)."""
    mounts = []

    def mount(size):
        d = tempfile.mkdtemp(prefix="td-full-", dir="/tmp")
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s,mode=0755" % size, "tmpfs", d],
                           capture_output=True, text=True)
        if r.returncode != 0:
            os.rmdir(d)
            pytest.skip("cannot mount a tmpfs here: %s" % (r.stderr.strip() or r.returncode))
        mounts.append(d)
        return Path(d)

    yield mount
    for d in mounts:
        if subprocess.run(["umount", d], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", d], capture_output=True)
        os.rmdir(d)


def fill(path):
    """Fill the file system holding `path` (a file to create) to the last
    byte. Returns the filler's path."""
    with open(path, "wb", buffering=0) as f:
        chunk = b"\0" * 65536
        while True:
            try:
                if f.write(chunk) < len(chunk):
                    break
            except OSError:
                break
        while True:   # the last partial page, byte by byte
            try:
                if not f.write(b"\0"):
                    break
            except OSError:
                break
    return path


def top_up_log(log):
    """Fill the page slack after the event log's last line with empty lines
    (tmpfs allocates whole pages): the next event line cannot fit."""
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    try:
        while True:
            try:
                if os.write(fd, b"\n") != 1:
                    break
            except OSError:
                break
    finally:
        os.close(fd)


def log_events(log):
    """The event log as parsed JSON objects; every non-empty line must be
    one whole JSON object (no half-written line is left behind)."""
    out = []
    for i, ln in enumerate(Path(log).read_bytes().split(b"\n")):
        if not ln:
            continue
        try:
            o = json.loads(ln)
        except ValueError:
            raise AssertionError("event log line %d is not JSON: %r" % (i + 1, ln[:200]))
        assert isinstance(o, dict) and "seq" in o, ln[:200]
        out.append(o)
    return out


def set_fsize_limit(pid, limit):
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (limit, limit))


# ---------------------------------------------------------------- 1. SIGKILL of a shell

def test_main_shell_killed_with_sigkill(termd):
    sub = subscriber(termd)
    ev = termd.events()
    run_done(ev, "export MARK=1")
    open_session(ev, "other")
    assert content(run_done(ev, "echo other-up", session="other")) == "other-up"
    pid = sessions(ev)["main"]["pid"]
    assert proc_stat(pid) is not None
    os.kill(pid, signal.SIGKILL)
    e = sub.wait_for(lambda o: o.get("observation") == "session.exit"
                     and (o.get("extras") or {}).get("name") == "main", T)
    assert e.get("cause") is None, fmt(e)
    assert e["extras"].get("signal") == "KILL", fmt(e)
    assert e["extras"].get("exit_code") == 137, fmt(e)
    assert termd.alive()
    # the other session and the channel answer
    assert content(run_done(ev, "echo still-here", session="other")) == "still-here"
    assert ev.ping().get("observation") == "pong"
    # the next action on main starts a new shell and says so
    obs = run_done(ev, "echo ${MARK:-unset}")
    assert content(obs) == "unset", fmt(obs)
    assert obs["extras"].get("restarted") is True, fmt(obs)
    assert sessions(ev)["main"]["pid"] != pid
    wait_until(lambda: not zombies_of(termd.proc.pid), timeout=20, what="no zombie children")


def test_shell_killed_with_sigkill_during_a_run(termd):
    """A run in flight on a shell that is SIGKILLed gets its final answer."""
    sub = subscriber(termd)
    a = termd.events()
    b = termd.events()
    open_session(a, "victim")
    run_done(a, "true", session="victim")
    pid = sessions(a)["victim"]["pid"]
    rid = a.send_action("run", {"session": "victim", "command": "sleep 300; echo never",
                                "timeout": 300})
    wait_until(lambda: (sessions(b).get("victim") or {}).get("command"), timeout=30,
               what="the sleep to run")
    # meanwhile b has a run going in main; it must not notice anything
    bid = b.send_action("run", {"command": "sleep 1; echo main-done"})
    os.kill(pid, signal.SIGKILL)
    r = a.wait_for(lambda o: o.get("cause") == rid, T)
    assert r.get("observation") == "run", fmt(r)
    assert r["extras"]["running"] is False, fmt(r)
    assert r["extras"]["exit_code"] == 137, fmt(r)
    assert "never" not in content(r), fmt(r)
    e = sub.wait_for(lambda o: o.get("observation") == "session.exit"
                     and (o.get("extras") or {}).get("name") == "victim", T)
    assert e["extras"].get("signal") == "KILL", fmt(e)
    ob = b.wait_for(lambda o: o.get("cause") == bid, T)
    assert ob.get("observation") == "run" and content(ob) == "main-done", fmt(ob)
    # the session's shell starts again on the next run
    obs = run_done(a, "echo back", session="victim")
    assert content(obs) == "back" and obs["extras"].get("restarted") is True, fmt(obs)
    # the orphaned sleep (hung up with its terminal) is reaped by termd
    tpid = termd.proc.pid
    wait_until(lambda: not zombies_of(tpid) and not [
        c for c in children_of(tpid) if cmdline(c[0]) == "sleep 300"],
        timeout=120, what="the old sleep gone and no zombies")


def test_job_not_yet_in_the_foreground_is_hung_up_with_the_shell(termd):
    """The ordering behind a loaded machine's leftover sleep: the shell is
    SIGKILLed after forking a job but before giving it the terminal, so the
    kernel's hangup (foreground group only) misses it. termd hangs up what
    is left in the dead shell's session; what left the session is spared."""
    a = termd.events()
    open_session(a, "victim2")
    run_done(a, "true", session="victim2")
    pid = sessions(a)["victim2"]["pid"]
    # a job in a process group of its own, not the terminal's foreground one
    run_done(a, "sleep 301 & setsid sleep 302 & true", session="victim2")
    tpid = termd.proc.pid

    procs = pids_running
    wait_until(lambda: procs("sleep 301") and procs("sleep 302"), timeout=60,
               what="both sleeps to run")
    spared = procs("sleep 302")
    try:
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not procs("sleep 301") and not zombies_of(tpid), timeout=120,
                   what="the background sleep hung up and reaped")
        assert procs("sleep 302") == spared, "a process out of the session was signalled"
    finally:
        for p in procs("sleep 301") + procs("sleep 302"):
            os.kill(p, signal.SIGKILL)
        wait_until(lambda: not procs("sleep 301") and not procs("sleep 302"), timeout=60,
                   what="the sleeps gone")


# ---------------------------------------------------------------- 2. reaping

def test_reaping_100_processes_that_end_at_once(termd, tmp_path):
    """50 orphans (double-forked, so reparented to termd, the subreaper) and
    50 children of the shell, all blocked on one FIFO, end together while a
    run waits for them: no zombie is left and termd answers."""
    tpid = termd.proc.pid
    ev = termd.events()
    other = termd.events()
    run_done(ev, "true")
    open_session(other, "side")
    run_done(other, "true", session="side")
    base = len(children_of(tpid))
    fifo = tmp_path / "go"
    os.mkfifo(fifo)
    cat = "cat %s" % fifo
    rid = ev.send_action("run", {"command": (
        "for i in $(seq 50); do (cat %s >/dev/null &); done; "
        "for i in $(seq 50); do cat %s >/dev/null & done; wait; echo all-done") % (fifo, fifo),
        "timeout": 120})

    cats = lambda: pids_running(cat)

    wait_until(lambda: len(cats()) == 100, timeout=60, what="100 cats to start")
    wait_until(lambda: len([c for c in children_of(tpid) if cmdline(c[0]) == cat]) == 50,
               timeout=30, what="50 orphans reparented to termd")
    # hold the FIFO open for writing until every cat has it open, then let
    # go: they all read EOF and exit at the same moment
    w = os.open(fifo, os.O_WRONLY)
    try:
        def all_open():
            n = 0
            for p in cats():
                try:
                    fds = os.listdir("/proc/%d/fd" % p)
                    n += any(os.readlink("/proc/%d/fd/%s" % (p, fd)) == str(fifo) for fd in fds)
                except OSError:
                    pass
            return n == 100
        wait_until(all_open, timeout=30, what="every cat to open the FIFO")
    finally:
        os.close(w)
    r = ev.wait_for(lambda o: o.get("cause") == rid, T)
    assert r.get("observation") == "run" and r["extras"]["running"] is False, fmt(r)
    assert lines(r)[-1:] == ["all-done"], fmt(r)
    wait_until(lambda: not cats(), timeout=30, what="every cat gone")

    def settled():
        return not zombies_of(tpid) and len(children_of(tpid)) == base
    try:
        wait_until(settled, timeout=20, interval=0.2, what="children back to the shells only")
    except AssertionError:
        raise AssertionError("termd's children after the mass exit: %r (zombies %r, %d before)" % (
            [(c, cmdline(c[0])) for c in children_of(tpid)][:20], zombies_of(tpid), base))
    assert content(run_done(other, "echo side-ok", session="side")) == "side-ok"
    assert_serving(termd, ev)


# ---------------------------------------------------------------- 3. vanishing mid-frame

def _vandal(url, payload, rst):
    """Connect, upgrade, send `payload` (part of a frame), then close (or
    reset) the connection."""
    ws = wsclient.connect(url)
    ws.sock.sendall(payload)
    if rst:
        ws.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    ws.sock.close()


def _big_frame_start(n_payload):
    key = os.urandom(4)
    return (wsclient.frame_header(wsclient.OP_TEXT, 1 << 20) + key
            + wsclient.mask_bytes(b'{"id":"x","action":"ping","pad":"' + b"p" * n_payload, key))


@pytest.mark.parametrize("transport", ["unix", "tcp-rst"])
def test_clients_vanishing_mid_frame(termd_factory, transport):
    td = termd_factory(tcp=transport != "unix")
    tpid = td.proc.pid
    a = td.events()
    run_done(a, "true")

    def sockets():   # without the one termd holds for each spare stub (issue 50)
        return socket_fds(tpid)

    base = sockets()
    rid = a.send_action("run", {"command": "for i in $(seq 1 8); do echo line-$i; sleep 0.2; done"})
    rst = transport == "tcp-rst"
    pieces = [
        b"\x81",                        # half a frame header
        b"\x81\xff\x00\x00\x00",        # a 64-bit length cut short
        b"\x81\xfe\x10",                # a 16-bit length cut short
        _big_frame_start(1000),         # header promising 1 MiB, some of it
        _big_frame_start(200000),       # ... more of it
    ]
    for _ in range(2):
        for p in pieces:
            _vandal(td.url, p, rst)
    r = a.wait_for(lambda o: o.get("cause") == rid, T)
    assert r.get("observation") == "run", fmt(r)
    assert lines(r) == ["line-%d" % i for i in range(1, 9)], fmt(r)
    assert r["extras"]["exit_code"] == 0, fmt(r)
    assert_serving(td, a)
    # termd let go of every vanished connection
    wait_until(lambda: sockets() <= base + 1, timeout=30,
               what="the vandals' sockets closed (%d before)" % base)


# ---------------------------------------------------------------- 4. SIGPIPE

@pytest.mark.parametrize("transport", ["unix", "tcp-rst"])
def test_client_gone_while_termd_writes_a_large_answer(termd_factory, transport):
    td = termd_factory(tcp=transport != "unix")
    tpid = td.proc.pid
    sub = subscriber(td)
    other = td.events()
    run_done(other, "true")
    for i in range(3):
        name = "big%d" % i
        v = td.events()
        rid = v.send_action("run", {"session": name, "command": "seq 1 300000",
                                    "max_output": 3000000})
        e = sub.wait_for(lambda o: o.get("observation") == "command.end"
                         and (o.get("extras") or {}).get("session") == name, T)
        assert e["extras"]["exit_code"] == 0, fmt(e)
        # the ~2 MB answer is being written; take a little of it, then go
        oid = other.send_action("run", {"command": "echo other-%d" % i})
        v.ws.sock.settimeout(T)
        got = v.ws.sock.recv(65536)
        assert got, "no part of the large answer arrived"
        if transport == "tcp-rst":
            v.ws.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        v.ws.abort()
        td.clients.remove(v)
        ob = other.wait_for(lambda o: o.get("cause") == oid, T)
        assert ob.get("observation") == "run" and content(ob) == "other-%d" % i, fmt(ob)
        assert td.alive(), "termd died writing to a client that left (rid %s)" % rid
    # a SIGPIPE sent straight at termd changes nothing either
    for _ in range(3):
        os.kill(tpid, signal.SIGPIPE)
    assert_serving(td, other)
    # the subscriber saw the three commands end and is still fed
    assert sub.ping().get("observation") == "pong"


@pytest.mark.parametrize("transport", ["unix", "tcp"])
def test_a_large_answer_goes_in_pieces_the_socket_takes_whole(termd_factory, transport):
    """Found by CI (test_client_gone_while_termd_writes_a_large_answer
    [tcp-rst] hung one run in ~400): when lws (Debian 12's 4.1.6) kept part
    of a write the socket had not taken and the client went, its
    forced-service loop serviced the same closed socket for good (fixed
    upstream in 4.2): termd's loop spun, answered nobody, ignored SIGTERM.
    termd now never hands lws more than the socket takes whole (64 KiB at
    most, while it has room): a 2 MB answer comes in fragments of at most
    64 KiB, and reassembles to the whole answer, while another client is
    answered in between."""
    td = termd_factory(tcp=transport == "tcp")
    v = td.events()
    other = td.events()
    rid = v.send_action("run", {"session": "big", "command": "seq 1 300000",
                                "max_output": 3000000})
    ans = v.wait_for(lambda o: o.get("cause") == rid and o.get("observation") == "run", T)
    got = lines(ans)
    assert len(got) == 300000 and got[0] == "1" and got[-1] == "300000", (len(got), got[:3], got[-3:])
    assert v.ws.max_data_frame <= 65536, v.ws.max_data_frame
    assert v.ws.data_frames >= 2000000 // 65536, v.ws.data_frames
    assert content(run_done(other, "echo other")) == "other"


def test_a_large_tty_output_goes_in_pieces_the_socket_takes_whole(termd):
    """The same for /tty: output frames carry at most 64 KiB."""
    ev = termd.events()
    ws = wsclient.connect(termd.url, "/tty/main", "termd.tty.v1")
    run_done(ev, "true")
    # 1 MB written while the viewer reads nothing: its feed holds whole
    # 64 KiB chunks to send (under the 2 MiB that would drop it to a snapshot)
    rid = ev.send_action("run", {"command": "seq 1 150000; echo tty-$((6*7))-done",
                                 "max_output": 100})
    ev.wait_for(lambda o: o.get("cause") == rid, T)
    seen, kinds = bytearray(), set()
    while b"tty-42-done" not in seen:   # (the typed command's echo says tty-$((6*7))-done)
        op, payload = ws.recv(T)
        assert op == 2
        kinds.add(payload[:1])
        seen += payload[1:]   # output, or a snapshot if it fell behind
        del seen[:-4096]
    assert ws.max_data_frame <= 65536, ws.max_data_frame
    ws.close()


# ---------------------------------------------------------------- 5. --event-log on a full disk

def test_event_log_on_dev_full(termd_factory):
    """Every write fails (ENOSPC): one io_error event, not one per event."""
    td = termd_factory(args=["--event-log", "/dev/full"])
    sub = subscriber(td)
    ev = td.events()
    for _ in range(30):
        assert ev.ping().get("observation") == "pong"
    got = received(sub)
    errs = io_errors(got)
    assert len(errs) == 1, "wanted one io_error event for the event log, got %d: %r" % (
        len(errs), [fmt(e) for e in errs][:3])
    e = errs[0]
    assert e.get("cause") is None, fmt(e)
    assert "event log" in e["content"] and "/dev/full" in e["content"], fmt(e)
    assert_serving(td, ev)
    assert not io_errors(received(sub)), "the failing event log was reported again"


def test_event_log_on_a_full_tmpfs(small_tmpfs, termd_factory):
    d = small_tmpfs("256k")
    log = d / "events.log"
    td = termd_factory(args=["--event-log", str(log)])
    sub = subscriber(td)
    ev = td.events()
    assert ev.ping().get("observation") == "pong"
    assert log_events(log), "nothing logged before the disk filled"

    def fill_up():
        fill(d / "filler")
        top_up_log(log)

    fill_up()
    pongs = [ev.ping() for _ in range(20)]
    assert all(p.get("observation") == "pong" for p in pongs)
    errs = io_errors(received(sub))
    assert len(errs) == 1, "wanted one io_error event, got %r" % [fmt(e) for e in errs]
    assert errs[0].get("cause") is None and "event log" in errs[0]["content"], fmt(errs[0])
    assert "No space left" in errs[0]["content"], fmt(errs[0])
    logged = {o["seq"] for o in log_events(log)}
    assert not logged & {p["seq"] for p in pongs}, "events logged on a full disk?"
    assert_serving(td, ev)

    # room again: events are logged again, and the log is whole JSON lines
    os.unlink(d / "filler")
    p = ev.ping()
    wait_until(lambda: p["seq"] in {o["seq"] for o in log_events(log)}, timeout=10,
               what="the pong logged once there is room")
    assert not io_errors(received(sub))
    # full again: said again, once
    fill_up()
    for _ in range(10):
        assert ev.ping().get("observation") == "pong"
    errs = io_errors(received(sub))
    assert len(errs) == 1, "a second failure should be reported once: %r" % [fmt(e) for e in errs]
    log_events(log)
    assert_serving(td, ev)


def test_event_log_past_the_file_size_limit(termd_factory, tmp_path):
    """A write past RLIMIT_FSIZE is an error for termd to report (EFBIG),
    not SIGXFSZ killing it."""
    log = tmp_path / "events.log"
    td = termd_factory(args=["--event-log", str(log)])
    sub = subscriber(td)
    ev = td.events()
    assert ev.ping().get("observation") == "pong"
    limit = log.stat().st_size + 3000
    set_fsize_limit(td.proc.pid, limit)
    for _ in range(60):
        assert ev.ping().get("observation") == "pong"
        assert td.alive(), "termd died writing past its file size limit (SIGXFSZ?)"
    errs = io_errors(received(sub))
    assert errs, "no io_error event for the event log"
    assert "File too large" in errs[0]["content"], fmt(errs[0])
    assert log.stat().st_size <= limit
    log_events(log)   # a line that did not fit was cut off again
    assert_serving(td, ev)


# ---------------------------------------------------------------- 6. a command's output file

SEQ_N = 800000   # `seq 1 800000` prints 5.4 MB: spilled to a file past 1 MiB


def _check_big_run_on_failing_store(td, sub, ev):
    r = ev.call("run", {"command": "seq 1 %d; echo end-$?" % SEQ_N, "timeout": 120}, timeout=T)
    assert r.get("observation") == "run", fmt(r)
    x = r["extras"]
    assert x["running"] is False and x["exit_code"] == 0, fmt(r)
    assert x["truncated"] is True, fmt(r)
    c = lines(r)
    assert c[:3] == ["1", "2", "3"], fmt(r)
    assert c[-2:] == [str(SEQ_N), "end-0"], fmt(r)
    assert any("lines truncated" in ln for ln in c), fmt(r)
    err = x.get("output_error")
    assert isinstance(err, str) and "output file" in err, \
        "the answer does not say the output file failed: %s" % fmt(r)
    errs = io_errors(received(sub))
    assert len(errs) == 1, "wanted one io_error event, got %r" % [fmt(e) for e in errs]
    assert errs[0].get("cause") is None and "output file" in errs[0]["content"], fmt(errs[0])
    assert errs[0]["extras"].get("session") == "main", fmt(errs[0])
    # the head of what the file holds is right (it is a prefix of the output)
    if x.get("output_file"):
        with open(x["output_file"], "rb") as f:
            head = f.read(1 << 16)
        assert head.startswith(b"1\n2\n3\n"), head[:50]
    assert_serving(td, ev)
    # a small command afterwards is fine and says nothing about files
    obs = run_done(ev, "echo small")
    assert content(obs) == "small" and "output_error" not in obs["extras"], fmt(obs)
    return r


def test_output_file_on_a_full_tmpfs(small_tmpfs, termd_factory):
    d = small_tmpfs("1m")
    td = termd_factory(env={"TMPDIR": str(d)})
    sub = subscriber(td)
    ev = td.events()
    run_done(ev, "true")
    r = _check_big_run_on_failing_store(td, sub, ev)
    assert "No space left" in r["extras"]["output_error"], fmt(r)


def test_output_file_past_the_file_size_limit(termd_factory):
    td = termd_factory()
    sub = subscriber(td)
    ev = td.events()
    run_done(ev, "true")
    set_fsize_limit(td.proc.pid, 256 * 1024)
    r = _check_big_run_on_failing_store(td, sub, ev)
    assert "File too large" in r["extras"]["output_error"], fmt(r)
    assert td.alive()
