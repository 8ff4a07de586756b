"""PROTOCOL.md §11 Ports (contract 1.3): termd notices the TCP sockets its
sessions' programs listen on (IPv4 and IPv6, any address) and says so on
the stream (`port.open`/`port.close`, naming the session and the pid),
`ports.list` lists them, `port.wait` answers once a port accepts
connections or at its timeout (saying what listens instead). A socket of a
process that is not termd's is never listed. A view token may list (it sees
the events anyway) but not probe with port.wait."""

import os
import signal
import socket
import time

import tdtest
from tdtest import assert_error, fmt

T = 60.0


def subscribed(termd):
    sub = termd.events()
    assert sub.call("subscribe", {}, timeout=T).get("observation") == "subscribe"
    return sub


def wait_event(sub, pred, timeout, what):
    deadline = time.monotonic() + timeout
    seen = []
    while True:
        left = deadline - time.monotonic()
        assert left > 0, "no %s within %.1f s; saw %r" % (what, timeout, seen)
        try:
            o = sub.recv_obs(left)
        except TimeoutError:
            raise AssertionError("no %s within %.1f s; saw %r" % (what, timeout, seen))
        if o.get("observation") in ("port.open", "port.close"):
            seen.append((o["observation"], o.get("extras")))
            assert o.get("cause") is None, fmt(o)
            if pred(o):
                return o


def serve(ev, port, bind):
    """python3 -m http.server in main's background; its pid."""
    o = tdtest.run_done(ev, "python3 -m http.server %d --bind %s >/dev/null 2>&1 & echo PID=$!"
                        % (port, bind))
    for line in tdtest.content(o).splitlines():
        if line.startswith("PID="):
            return int(line[4:])
    raise AssertionError("no pid: %s" % fmt(o))


def kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def is_open(port, pid=None):
    def pred(o):
        x = o["extras"]
        return o["observation"] == "port.open" and x["port"] == port and (
            pid is None or x["pid"] == pid)
    return pred


def test_open_list_wait_close(termd, ev):
    sub = subscribed(termd)
    port = tdtest.free_port()
    # a wait for a port nobody listens on yet: answered when the server is up
    wid = ev.send_action("port.wait", {"port": port, "timeout": 30})
    pid = serve(ev, port, "127.0.0.1")
    try:
        t0 = time.monotonic()
        o = wait_event(sub, is_open(port), 2.0, "port.open for %d" % port)
        x = o["extras"]
        assert x["session"] == "main" and x["pid"] == pid, fmt(o)
        assert x["address"] == "127.0.0.1", fmt(o)
        assert "http.server" in x["command"], fmt(o)
        assert time.monotonic() - t0 < 2.0
        w = ev.wait_for(lambda o: o.get("cause") == wid, T)
        assert w["observation"] == "port.wait" and w["extras"]["ready"] is True, fmt(w)
        lst = ev.call("ports.list", {}, timeout=T)
        assert lst["observation"] == "ports.list", fmt(lst)
        ports = [(p["port"], p["session"], p["pid"]) for p in lst["extras"]["ports"]]
        assert (port, "main", pid) in ports, fmt(lst)
        # ready at once now
        w = ev.call("port.wait", {"port": port, "timeout": 5}, timeout=T)
        assert w["extras"]["ready"] is True, fmt(w)
    finally:
        kill(pid)
    o = wait_event(sub, lambda o: o["observation"] == "port.close" and o["extras"]["port"] == port,
                   5.0, "port.close for %d" % port)
    assert o["extras"]["session"] == "main" and o["extras"]["address"] == "127.0.0.1", fmt(o)
    lst = ev.call("ports.list", {}, timeout=T)
    assert port not in [p["port"] for p in lst["extras"]["ports"]], fmt(lst)


def test_ipv6_and_any_address_and_other_session(termd, ev):
    sub = subscribed(termd)
    p6, p4 = tdtest.free_port(), tdtest.free_port()
    pid6 = serve(ev, p6, "::1")
    other = None
    try:
        o = wait_event(sub, is_open(p6, pid6), 5.0, "port.open on ::1")
        assert o["extras"]["address"] == "::1", fmt(o)
        # a server in another session, on every address
        r = ev.call("session.open", {"name": "web"}, timeout=T)
        assert r["observation"] == "session.open", fmt(r)
        o = tdtest.run_done(ev, "python3 -m http.server %d --bind 0.0.0.0 >/dev/null 2>&1 & "
                            "echo PID=$!" % p4, session="web")
        other = int([ln for ln in tdtest.content(o).splitlines() if ln.startswith("PID=")][0][4:])
        o = wait_event(sub, is_open(p4, other), 5.0, "port.open on 0.0.0.0")
        assert o["extras"]["address"] == "0.0.0.0" and o["extras"]["session"] == "web", fmt(o)
        w = ev.call("port.wait", {"port": p6, "timeout": 5}, timeout=T)
        assert w["extras"]["ready"] is True, fmt(w)   # through ::1
    finally:
        kill(pid6)
        if other:
            kill(other)
    wait_event(sub, lambda o: o["observation"] == "port.close" and o["extras"]["port"] == p6,
               5.0, "port.close on ::1")


def test_foreign_listener_not_listed_and_timeout_says_what_listens(termd, ev):
    sub = subscribed(termd)
    # the test's own listening socket: not a process of termd's
    mine = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    mine.bind(("127.0.0.1", 0))
    mine.listen(4)
    foreign = mine.getsockname()[1]
    port = tdtest.free_port()
    pid = serve(ev, port, "127.0.0.1")
    try:
        wait_event(sub, is_open(port, pid), 5.0, "port.open")
        lst = ev.call("ports.list", {}, timeout=T)
        listed = [p["port"] for p in lst["extras"]["ports"]]
        assert port in listed and foreign not in listed, fmt(lst)
        # anyone's listener answers a wait
        w = ev.call("port.wait", {"port": foreign, "timeout": 5}, timeout=T)
        assert w["extras"]["ready"] is True, fmt(w)
        mine.close()
        t0 = time.monotonic()
        w = ev.call("port.wait", {"port": foreign, "timeout": 0.5}, timeout=T)
        assert w["observation"] == "port.wait" and w["extras"]["ready"] is False, fmt(w)
        assert 0.4 < time.monotonic() - t0 < 5
        assert "%d (main, pid %d" % (port, pid) in w["content"], fmt(w)
        assert port in [p["port"] for p in w["extras"]["listening"]], fmt(w)
        assert_error(ev.call("port.wait", {"port": 70000}, timeout=T), "bad_request")
        assert_error(ev.call("port.wait", {}, timeout=T), "bad_request")
    finally:
        mine.close()
        kill(pid)
    # nothing from the foreign socket ever reached the stream
    for o in tdtest.drain(sub, 0.6):
        if o.get("observation") in ("port.open", "port.close"):
            assert o["extras"]["port"] != foreign, fmt(o)


def test_view_token_lists_but_cannot_wait(termd_factory, tmp_path):
    vt = tmp_path / "view"
    vt.write_text("viewsecret\n")
    t = termd_factory(args=("--view-token-file", str(vt)), token="fullsecret")
    ro = t.events(token="viewsecret")
    assert ro.call("ports.list", {}, timeout=T)["observation"] == "ports.list"
    assert_error(ro.call("port.wait", {"port": 1, "timeout": 0}, timeout=T), "forbidden")
