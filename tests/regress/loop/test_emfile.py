"""termd out of file descriptors for a while (issue 52's soak, fd_exhaust):
its listeners (lws's unix socket, the front's TCP one) rest while accept
fails with EMFILE instead of trying again at once (a busy loop that logged
millions of lines and took a core), a client queued meanwhile is served
once an fd is free, and a file action that fails for want of an fd names
EMFILE ("too many open files"), not EIO."""

import os
import re
import resource
import socket
import threading
import time

import pytest

import wsclient
from tdtest import fmt, stub_children, wait_until

T = 90.0
REST_LINE = b"cannot accept a connection"


def open_fds(pid):
    return {int(n) for n in os.listdir("/proc/%d/fd" % pid)}


def own_fds(pid):
    """pid's fds less the 3 it holds for each spare stub (made a while after
    start, on cgroup v1)"""
    return len(open_fds(pid)) - 3 * len(stub_children(pid))


def settled(pid):
    """once pid's fds (and spare stubs) stay the same for a second: a
    termd just started makes its spare stubs and moves into its cgroup,
    fds coming and going meanwhile"""
    seen = {"fds": None, "since": 0.0}

    def still():
        now = (open_fds(pid), tuple(stub_children(pid)))
        if now != seen["fds"]:
            seen["fds"], seen["since"] = now, time.monotonic()
        return time.monotonic() - seen["since"] >= 1.0
    wait_until(still, timeout=T, what="termd's fds to settle")


def exhaust(pid):
    """RLIMIT_NOFILE of pid lowered to its lowest free fd number: every new
    fd it asks for fails with EMFILE. The limits to put back."""
    soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    fds = open_fds(pid)
    low = 0
    while low in fds:
        low += 1
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (low, hard))
    return soft, hard


def cpu_s(pid):
    """user + system CPU time of pid (all its threads), in seconds"""
    with open("/proc/%d/stat" % pid) as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def log_lines(td):
    return td.log.read_bytes().splitlines()


def connect(td):
    if td.tcp:
        host, port = td.url.split("://", 1)[1].rsplit(":", 1)
        s = socket.create_connection((host, int(port)), timeout=T)
    else:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(T)
        s.connect(td.sock)
    return s


@pytest.mark.parametrize("tcp", [False, True], ids=["lws-unix", "front-tcp"])
def test_listener_rests_while_fds_are_out(termd_factory, tcp):
    """With no fd left, a queued connection makes the listener fail accept
    over and over: termd stays all but idle (its CPU time over 3 s of it is
    well under a second; a retry at once took a whole core), logs the
    episode in one line (not one per attempt), and serves the queued client
    once a connection of its is closed; the episode's end is logged once,
    with its count, after the limit is put back."""
    td = termd_factory(tcp=tcp)
    pid = td.proc.pid
    held = [td.events() for _ in range(2)]
    for e in held:
        assert e.ping().get("observation") == "pong"
    before = len(log_lines(td))
    limits = exhaust(pid)
    try:
        waiting = [connect(td) for _ in range(3)]   # queued: termd has no fd to take them with
        answer = {}

        def healthz():
            try:
                answer["st"] = wsclient.http_request(td.url, "/healthz", timeout=T)[0]
            except Exception as e:   # reported by the assert below
                answer["st"] = repr(e)
        th = threading.Thread(target=healthz)
        th.start()
        wait_until(lambda: any(REST_LINE in l for l in log_lines(td)[before:]), timeout=T,
                   what="termd to log that it cannot accept")
        c0 = cpu_s(pid)
        time.sleep(3)   # a span of exhaustion to measure CPU over (not a wait)
        spent = cpu_s(pid) - c0
        grown = log_lines(td)[before:]
        # resting, it is ~0.01 s; a busy loop took 0.8 s even with the
        # machine loaded 15 deep on 2 cores
        assert spent < 0.5, "termd spent %.2f s of CPU in 3 s without fds (a busy accept loop)" % spent
        assert len(grown) <= 6, "the log grew by %d lines:\n%s" % (
            len(grown), b"\n".join(grown[:10]).decode(errors="replace"))
        for s in waiting:
            s.close()
        held.pop().ws.abort()   # an fd comes free: the queued /healthz is served
        th.join(T)
        assert answer.get("st") == 200, answer
    finally:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, limits)
    wait_until(lambda: any(b"accepting again" in l for l in log_lines(td)[before:]), timeout=T,
               what="termd to log the episode's end")
    grown = log_lines(td)[before:]
    ends = [l for l in grown if b"accepting again" in l]
    assert len(ends) == 1 and b"Too many open files" in ends[0], ends
    # "accepting again: N accepts failed (...) over S s": some tries every
    # 100 ms rest (the listeners' queued clients, the reserve fd's turn;
    # one CI run counted 448 in 3.0 s, a run on a machine loaded ~10 deep
    # 2592 in 3.0 s, each with well under 0.5 s of CPU), where a busy loop
    # makes it tens of thousands a second (the CPU bound above is the
    # sharper test of a spin; this one says how it shows in the log)
    m = re.search(rb"accepting again: (\d+) accepts failed .* over ([0-9.]+) s", ends[0])
    assert m and int(m.group(1)) <= 4000 * (float(m.group(2)) + 1), ends[0]
    assert len([l for l in grown if REST_LINE in l]) == 1, grown[:10]
    ev = td.events()
    assert ev.ping().get("observation") == "pong"
    assert wsclient.http_request(td.url, "/healthz", timeout=T)[0] == 200


def test_file_list_without_fds_names_emfile(termd):
    """file.list when termd has no fd to open the folder with fails as
    what it is: errno EMFILE and "Too many open files" (it said EIO), and
    lists again once the limit is back."""
    d = termd.home / "listed"
    (d / "sub").mkdir(parents=True)
    (d / "a.txt").write_text("a")
    ev = termd.events()
    assert ev.call("file.list", {"path": str(d)}, timeout=T).get("observation") == "file.list"
    pid = termd.proc.pid
    limits = exhaust(pid)
    try:
        obs = ev.call("file.list", {"path": str(d), "depth": 2}, timeout=T)
    finally:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, limits)
    assert obs.get("observation") == "error", fmt(obs)
    ex = obs.get("extras") or {}
    assert ex.get("errno") == "EMFILE", fmt(obs)
    assert ex.get("code") == "io_error" and ex.get("path") == str(d), fmt(obs)
    assert "Too many open files" in obs.get("content", ""), fmt(obs)
    obs = ev.call("file.list", {"path": str(d), "depth": 2}, timeout=T)
    assert obs.get("observation") == "file.list", fmt(obs)
    assert sorted(e["name"] for e in obs["extras"]["entries"]) == ["a.txt", "sub"], fmt(obs)


def exhaust_but(pid, spare):
    """RLIMIT_NOFILE of pid lowered so that just `spare` fds are left (the
    lowest free fd numbers). The limits to put back."""
    soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    fds = open_fds(pid)
    low, free = 0, 0
    while True:
        if low not in fds:
            if free == spare:
                break
            free += 1
        low += 1
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (low, hard))
    return soft, hard


def test_front_request_served_with_two_fds_left(termd_factory):
    """With two fds left, a request through the front took both (the
    client's and the front's connection to lws) and lws had none to accept
    that connection with: the front held both, the request hung until the
    limit went up, and every later client queued behind it (the soak's
    fd_exhaust: 906 failed accepts over 38.7 s, clients timed out after
    30 s). lws's listener keeps one fd in reserve for this: the request
    is answered while the limit is still low, and termd's fds come back to
    what they were."""
    td = termd_factory(tcp=True)
    pid = td.proc.pid
    held = td.events()
    assert held.ping().get("observation") == "pong"
    wait_until(lambda: td.healthz()[0] == 200, timeout=T, what="/healthz")
    settled(pid)
    fds0 = own_fds(pid)
    limits = exhaust_but(pid, 2)
    answers = []
    try:
        for _ in range(3):
            # each with a timeout far beyond a served request's; the bug
            # hung the first one until the limit went up
            answers.append(wsclient.http_request(td.url, "/healthz", timeout=30)[0])
    except Exception as e:   # reported by the assert below
        answers.append(repr(e))
    finally:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, limits)
    # the first is served; the next ones are answered, 200, or 502 when
    # they come before lws has closed its end of the one before
    assert answers[0] == 200 and len(answers) == 3 and set(answers) <= {200, 502}, answers
    assert held.ping().get("observation") == "pong"
    assert wsclient.http_request(td.url, "/healthz", timeout=T)[0] == 200
    wait_until(lambda: own_fds(pid) <= fds0, timeout=T,
               what="termd's fds back to %d" % fds0)


def test_front_answers_a_client_queued_while_no_fd_is_left(termd_factory):
    """With no fd left at all, a client of the front waited, unanswered,
    for as long as the shortage lasted (the soak's fd_exhaust: its clients
    timed out after 30 s while termd's loop took every fd freed). The
    front keeps one fd in reserve for an accept: the client is taken at
    once and answered (502, lws cannot be reached) while the limit is
    still low; after, requests are served and termd's fds come back."""
    td = termd_factory(tcp=True)
    pid = td.proc.pid
    wait_until(lambda: td.healthz()[0] == 200, timeout=T, what="/healthz")
    settled(pid)
    fds0 = own_fds(pid)
    limits = exhaust(pid)
    try:
        try:
            # a timeout far beyond an answer's: the bug waited for the limit
            st, _, body = wsclient.http_request(td.url, "/healthz", timeout=30)
        except Exception as e:   # reported by the assert below
            st, body = repr(e), b""
    finally:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, limits)
    assert st == 502 and b"cannot be reached" in body, (st, body)
    assert wsclient.http_request(td.url, "/healthz", timeout=T)[0] == 200
    wait_until(lambda: own_fds(pid) <= fds0, timeout=T,
               what="termd's fds back to %d" % fds0)
