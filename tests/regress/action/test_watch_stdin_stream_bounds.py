"""Issue 31 (hardening, round three), the bounds half: each finding's test,
failing on the build before it. Stalls are /healthz latency during the
attack next to an idle baseline in the same run (a ratio); memory is
termd's peak RSS growth (VmHWM), against the bound.

- 4: a watch inotify refuses (EMFILE; an unreadable folder as a user that
  is not root) is answered with its path, not with freed memory (ASan
  aborted: `make test-asan` runs this file too); also e2b's WatchDir.
- 5: input waiting for a session's stdin stops at --stdin-max, refused
  whole (session.stdin, envd SendInput), and 128 MiB drain without a move
  of the rest per write.
- 6, 7: an HTTP stream holds at most --stream-max (sent bytes not moved
  out yet counted), a client that does not read is cut, streams are
  counted per client and in all.
- 11: a polled watcher keeps --watcher-max bytes of events (the oldest
  dropped, and said so) and is removed after --watcher-expiry unpolled.
- 12: watches follow at most half the kernel's max_user_watches.
- 13: a tree moved into a recursive watch is told a slice at a time.
- 14: link.tty dials only its link's scheme, host and port.
- 16: an Authorization: Basic termd cannot read is refused, never the
  default user.
"""

import base64
import http.client
import json
import os
import re
import resource
import shutil
import socket
import ssl
import statistics
import struct
import subprocess
import tempfile
import threading
import time

import pytest

import conftest
from conftest import TERMD_BIN
from tdtest import assert_error, fmt, subscribed, wait_until

T = 60.0
TOKEN = "hardening3-token-0123456789"


# ------------------------------------------------------------ helpers

_HELP = None


def supports(option):
    """Does this termd know the option (a build from before the fix does
    not: its test then runs with the defaults, where the bug shows)?"""
    global _HELP
    if _HELP is None:
        p = subprocess.run([TERMD_BIN, "--help"], capture_output=True, text=True, timeout=30)
        _HELP = p.stdout + p.stderr
    return ("--" + option + " ") in _HELP


def opt(option, value):
    return ["--" + option, str(value)] if supports(option) else []


def start(termd_factory, *args, token=TOKEN):
    return termd_factory(token=token, tcp=True, args=list(args))


def port_of(td):
    return int(td.url.rsplit(":", 1)[1])


def kib(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError("no %s for %d" % (field, pid))


def sanitized(pid):
    """AddressSanitizer's quarantine (freed memory kept a while) makes RSS
    say nothing of what termd holds: the RSS bounds are for the plain build"""
    with open("/proc/%d/maps" % pid) as f:
        return "libasan" in f.read() or conftest.VALGRIND


def healthz_ms(port, timeout=T):
    t0 = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("GET", "/healthz")
    r = c.getresponse()
    r.read()
    c.close()
    assert r.status == 200
    return (time.monotonic() - t0) * 1000


class Probe:
    """/healthz over and over in a thread while something else happens."""

    def __init__(self, port):
        self.port = port
        self.lat = []
        self.stop_ev = threading.Event()
        self.th = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.stop_ev.is_set():
            self.lat.append(healthz_ms(self.port))
            time.sleep(0.005)

    def __enter__(self):
        self.th.start()
        return self

    def __exit__(self, *exc):
        self.stop_ev.set()
        self.th.join(T)


def idle_baseline(port, n=40):
    lat = []
    for _ in range(n):
        lat.append(healthz_ms(port))
        time.sleep(0.005)
    return statistics.median(lat)


def calm_max(port, secs=1.0):
    """The longest /healthz of a second of probes: what the scheduler alone
    does to one probe now, on this machine as loaded as it is."""
    with Probe(port) as calm:
        t0 = time.monotonic()
        while time.monotonic() - t0 < secs or len(calm.lat) < 5:
            time.sleep(0.05)
    return max(calm.lat)


def request(td, method, path, body=b"", headers=None, token=TOKEN, timeout=T):
    c = http.client.HTTPConnection("127.0.0.1", port_of(td), timeout=timeout)
    h = {"X-Access-Token": token} if token else {}
    h.update(headers or {})
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def unary(td, method, msg, headers=None, token=TOKEN):
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    status, data = request(td, "POST", "/" + method, json.dumps(msg).encode(), h, token)
    return status, (json.loads(data) if data else None)


def envelope(msg):
    data = json.dumps(msg).encode()
    return struct.pack(">BI", 0, len(data)) + data


def envelopes(data):
    out, off = [], 0
    while off + 5 <= len(data):
        flags, n = struct.unpack(">BI", data[off:off + 5])
        if off + 5 + n > len(data):
            break
        out.append((flags, json.loads(data[off + 5:off + 5 + n])))
        off += 5 + n
    return out


def stream(td, method, msg, headers=None, timeout=T):
    """A whole server stream: (status, [(flags, message)])."""
    h = {"Content-Type": "application/connect+json"}
    h.update(headers or {})
    status, data = request(td, "POST", "/" + method, envelope(msg), h, timeout=timeout)
    return status, (envelopes(data) if status == 200 else data)


def open_stream(td, method, msg, source="127.0.0.1", rcvbuf=None):
    """A stream's request sent on a raw socket (from source), not read."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port_of(td)))
    body = envelope(msg)
    s.sendall(("POST /%s HTTP/1.1\r\nHost: x\r\nX-Access-Token: %s\r\n"
               "Content-Type: application/connect+json\r\nContent-Length: %d\r\n\r\n"
               % (method, TOKEN, len(body))).encode() + body)
    return s


def read_until_closed(s, timeout=T):
    s.settimeout(timeout)
    data = b""
    while True:
        try:
            chunk = s.recv(1 << 16)
        except (ConnectionResetError, socket.timeout):
            break
        if not chunk:
            break
        data += chunk
    return data


def lowest_free_fd(pid):
    used = {int(x) for x in os.listdir("/proc/%d/fd" % pid)}
    n = 0
    while n in used:
        n += 1
    return n


def kernel_watches(pid):
    """inotify watches termd holds (the kernel's count: fdinfo lines)."""
    n = 0
    for fd in os.listdir("/proc/%d/fdinfo" % pid):
        try:
            with open("/proc/%d/fdinfo/%s" % (pid, fd)) as f:
                n += sum(1 for line in f if line.startswith("inotify wd:"))
        except OSError:
            pass
    return n


# ------------------------------------------------ 4: the freed path

def test_watch_refused_by_inotify_names_the_path_not_freed_memory(termd_factory):
    td = start(termd_factory)
    ev = td.events()
    d = td.home / ("a-folder-with-a-long-name-" + "x" * 60)
    d.mkdir()
    pid = td.proc.pid
    soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    # no descriptor left: inotify_init1 gets EMFILE
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (lowest_free_fd(pid), hard))
    try:
        e = ev.call("watch", {"path": str(d)}, timeout=T)
    finally:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
    assert_error(e, "too_large")
    assert e["content"] == "cannot watch %s: Too many open files" % d, fmt(e)
    assert e["extras"]["path"] == str(d) and e["extras"]["errno"] == "EMFILE", fmt(e)
    assert ev.call("watch.list", timeout=T)["extras"]["watches"] == []
    # (e2b's WatchDir is the same watch: test_watch_of_an_unreadable_folder_as_nobody)


def start_as(tmp_path, user, group, *args):
    """A termd run as user (root runs the test), its folders open to it."""
    base = tempfile.mkdtemp(prefix="h3-", dir="/tmp")
    os.chmod(base, 0o755)
    t = conftest.Termd(base, args, None, TOKEN, tcp=True)
    uid = int(subprocess.run(["id", "-u", user], capture_output=True, text=True).stdout)
    os.chown(t.home, uid, -1)
    t.argv = ["setpriv", "--reuid=" + user, "--regid=" + group, "--clear-groups", "--"] + t.argv
    try:
        return t.start(), base
    except BaseException:
        t.stop()
        shutil.rmtree(base, ignore_errors=True)
        raise


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run termd as nobody")
def test_watch_of_an_unreadable_folder_as_nobody(tmp_path):
    td, base = start_as(tmp_path, "nobody", "nogroup")
    try:
        ev = td.events()
        locked = os.path.join(base, "root-only-" + "y" * 60)
        os.mkdir(locked, 0o700)          # root's, unreadable by nobody
        e = ev.call("watch", {"path": locked}, timeout=T)
        assert_error(e, "io_error")
        assert e["content"] == "cannot watch %s: Permission denied" % locked, fmt(e)
        assert e["extras"]["errno"] == "EACCES", fmt(e)
        status, envs = stream(td, "filesystem.Filesystem/WatchDir", {"path": locked})
        flags, end = envs[-1]
        assert flags == 2 and end["error"]["message"] == \
            "cannot watch %s: Permission denied" % locked, envs
    finally:
        problem = td.stop()
        shutil.rmtree(base, ignore_errors=True)
    assert problem is None, problem


# -------------------------------------------------- 5: input waiting

def test_input_waiting_for_a_session_is_bounded_and_refused_whole(termd_factory):
    td = start(termd_factory)
    ev = td.events()
    o = ev.call("session.open", {"name": "deaf", "kind": "pipe", "command": "sleep 600",
                                 "stdin": True}, timeout=T)
    assert o.get("observation") == "session.open", fmt(o)
    chunk = base64.b64encode(b"z" * (1 << 20)).decode()
    sent, refusal = 0, None
    for _ in range(40):                 # 40 MiB: the old build took them all
        o = ev.call("session.stdin", {"session": "deaf", "content": chunk,
                                      "encoding": "base64"}, timeout=T)
        if o.get("observation") == "error":
            refusal = o
            break
        assert o["extras"]["bytes"] == 1 << 20, fmt(o)
        sent += 1 << 20
    assert refusal is not None, "40 MiB waited for a program that does not read"
    assert_error(refusal, "too_large")
    assert "--stdin-max" in refusal["content"] and "nothing was written" in refusal["content"]
    limit = refusal["extras"]["limit"]
    assert limit == 8 << 20, fmt(refusal)          # the default
    # what waits is at most the limit (the pipe itself took up to 64 KiB)
    assert refusal["extras"]["queued"] <= limit and sent <= limit + (1 << 16) + (1 << 20)
    # a small write that fits still goes in
    o = ev.call("session.stdin", {"session": "deaf", "content": "x"}, timeout=T)
    assert o.get("observation") == "session.stdin", fmt(o)
    # envd's SendInput says the same, as resource_exhausted
    s = open_stream(td, "process.Process/Start",
                    {"process": {"cmd": "/bin/sleep", "args": ["600"]}, "stdin": True})
    pid = None
    deadline = time.monotonic() + 20
    while pid is None and time.monotonic() < deadline:
        _, m = unary(td, "process.Process/List", {})
        pids = [p["pid"] for p in m["processes"]]
        pid = pids[0] if pids else None
        time.sleep(0.05)
    big = base64.b64encode(b"q" * (3 << 20)).decode()
    codes = []
    for _ in range(6):
        status, m = unary(td, "process.Process/SendInput",
                          {"process": {"pid": pid}, "input": {"stdin": big}})
        codes.append(status)
        if status != 200:
            break
    assert codes[-1] == 429 and m["code"] == "resource_exhausted", (codes, m)
    assert "--stdin-max" in m["message"], m
    s.close()


def test_stdin_max_takes_exactly_what_fits_and_not_a_byte_more(termd_factory):
    """With Q bytes waiting for a program that does not read, exactly
    limit - Q more are taken and limit - Q + 1 refused whole; full, one
    byte is refused."""
    limit = 1 << 20
    td = start(termd_factory, "--stdin-max", str(limit))
    ev = td.events()
    o = ev.call("session.open", {"name": "deaf", "kind": "pipe", "command": "sleep 600",
                                 "stdin": True}, timeout=T)
    assert o.get("observation") == "session.open", fmt(o)

    def send(n):
        return ev.call("session.stdin", {"session": "deaf", "encoding": "base64",
                                         "content": base64.b64encode(b"q" * n).decode()},
                       timeout=T)

    def refused(o):
        assert_error(o, "too_large")
        assert "--stdin-max" in o["content"] and "nothing was written" in o["content"], fmt(o)
        assert o["extras"]["limit"] == limit, fmt(o)
        return o["extras"]["queued"]

    o = send(300000)                    # more than the pipe takes: the rest waits
    assert o.get("observation") == "session.stdin" and o["extras"]["bytes"] == 300000, fmt(o)
    # what waits, as any write past the limit says it: asked until it says
    # the same twice (the pipe full, termd no longer writing to it)
    seen = []

    def settled():
        seen.append(refused(send(limit + 1)))
        return len(seen) > 1 and seen[-1] == seen[-2]
    wait_until(settled, what="the input waiting to settle")
    queued = seen[-1]
    assert 0 < queued < 300000, seen
    assert refused(send(limit - queued + 1)) == queued     # one byte too many: none taken
    o = send(limit - queued)                               # exactly what fits
    assert o.get("observation") == "session.stdin", fmt(o)
    assert o["extras"]["bytes"] == limit - queued, fmt(o)
    o = ev.call("session.stdin", {"session": "deaf", "content": "x"}, timeout=T)
    assert refused(o) == limit, fmt(o)                     # full: not one byte more


def test_128_mib_of_input_drains_without_stalling_the_loop(termd_factory):
    td = start(termd_factory, *opt("stdin-max", 256 << 20))
    port = port_of(td)
    ev = td.events()
    go = td.home / "go"
    # the program reads once told to: 128 MiB wait in termd until then
    o = ev.call("session.open", {"name": "slow", "kind": "pipe", "stdin": True,
                                 "command": "while [ ! -e %s ]; do sleep 0.05; done; "
                                            "cat > /dev/null; echo drained" % go},
                timeout=T)
    assert o.get("observation") == "session.open", fmt(o)
    chunk = base64.b64encode(b"d" * (4 << 20)).decode()
    for _ in range(32):
        o = ev.call("session.stdin", {"session": "slow", "content": chunk,
                                      "encoding": "base64"}, timeout=T)
        assert o.get("observation") == "session.stdin", fmt(o)
    o = ev.call("session.stdin", {"session": "slow", "eof": True}, timeout=T)
    assert o.get("observation") == "session.stdin", fmt(o)
    idle = idle_baseline(port)
    calm = calm_max(port)
    sub = subscribed(td)
    with Probe(port) as p:
        t0 = time.monotonic()
        go.write_text("")
        sub.wait_for(lambda o: o.get("observation") == "session.output" and
                     "drained" in o.get("content", ""), 120)
        took = time.monotonic() - t0
    lat = sorted(p.lat)
    print("128 MiB drained in %.2f s; /healthz idle %.2f ms (max %.2f), during: median %.2f "
          "max %.2f ms (%d probes)" % (took, idle, calm, statistics.median(lat), lat[-1],
                                      len(lat)))
    assert len(lat) >= 3
    # The drain must not hold the loop: the old one held one /healthz 8.9 s
    # (9.5 s in all). Any one probe may wait for the scheduler on a busy
    # machine (73 ms was seen with two CPU hogs beside a second make test),
    # so the longest probe is held to a second, or 4 times the longest the
    # scheduler alone gave just before, whichever is more.
    slow = 2.0 if sanitized(td.proc.pid) else 1.0
    bound = max(1000.0, 4 * calm) * slow
    assert lat[-1] < bound, (idle, calm, lat[-1], bound, lat[-10:])


# ------------------------------------------------- 6, 7: HTTP streams

def test_watchdir_client_that_does_not_read_is_cut(termd_factory):
    td = start(termd_factory)
    pid = td.proc.pid
    sub = subscribed(td)
    d = td.home / "flood"
    d.mkdir()
    names = [d / ("f%04d-" % i + "n" * 200) for i in range(400)]
    for n in names:
        n.write_text("")
    s = open_stream(td, "filesystem.Filesystem/WatchDir",
                    {"path": str(d), "includeEntry": True}, rcvbuf=4096)
    w = sub.wait_for(lambda o: o.get("observation") == "watch", T)
    wid = w["extras"]["watch"]
    base = kib(pid, "VmHWM")
    stopped = []

    def watch_stop():
        o = sub.wait_for(lambda o: o.get("observation") == "watch.stop" and
                         o["extras"]["watch"] == wid, 90)
        stopped.append(o)
    th = threading.Thread(target=watch_stop, daemon=True)
    th.start()
    # chmod events, each with its entry (~700 bytes): 60 MiB of them
    t0 = time.monotonic()
    rounds = 0
    while not stopped and time.monotonic() - t0 < 60 and rounds < 250:
        for n in names:
            os.utime(n)
        rounds += 1
        time.sleep(0.01)
    th.join(30)
    grew = (kib(pid, "VmHWM") - base) / 1024
    print("WatchDir flood: %d rounds of %d events, cut: %s, peak RSS +%.1f MiB"
          % (rounds, len(names), bool(stopped), grew))
    assert stopped, "a WatchDir client that reads nothing was never cut (+%.0f MiB)" % grew
    # --stream-max 8 MiB, the 10000 events retained, and some slack
    assert sanitized(pid) or grew < 8 * 2 + 24, grew
    s.close()


def test_streams_per_client_and_in_all_are_limited(termd_factory):
    td = start(termd_factory, *opt("max-streams", 40))
    d = td.home / "w"
    d.mkdir()
    held = []

    def watchdir(source):
        s = open_stream(td, "filesystem.Filesystem/WatchDir", {"path": str(d)}, source=source)
        held.append(s)
        s.settimeout(T)
        first = b""
        while b"\r\n\r\n" not in first or len(first.split(b"\r\n\r\n", 1)[1]) < 5:
            c = s.recv(4096)
            assert c, first
            first += c
        body = first.split(b"\r\n\r\n", 1)[1]
        n = struct.unpack(">I", body[1:5])[0]
        while len(body) < 5 + n:
            body += s.recv(4096)
        return body[0], json.loads(body[5:5 + n])

    for _ in range(32):
        flags, m = watchdir("127.0.0.1")
        assert flags == 0 and "start" in m, m
    flags, m = watchdir("127.0.0.1")             # the 33rd from one address
    assert flags == 2 and m["error"]["code"] == "resource_exhausted", m
    assert "--max-streams-per-client" in m["error"]["message"], m
    for _ in range(8):                            # another address: 40 in all
        flags, m = watchdir("127.0.0.2")
        assert flags == 0 and "start" in m, m
    flags, m = watchdir("127.0.0.3")
    assert flags == 2 and "--max-streams" in m["error"]["message"], m
    # one closed makes room again, once termd's loop has seen the close
    # (after a fixed 0.5 s before, which a loaded machine could outlast):
    # asked again until then, 20 s at most
    held.pop(0).close()
    deadline = time.monotonic() + 20
    while True:
        flags, m = watchdir("127.0.0.3")
        if flags == 0 or time.monotonic() > deadline:
            break
        assert flags == 2 and "--max-streams" in m["error"]["message"], m
        held.pop().close()                       # (the refused one)
        time.sleep(0.05)
    assert flags == 0 and "start" in m, m
    for s in held:
        s.close()


def test_stream_read_slower_than_written_holds_at_most_the_bound(termd_factory):
    """A client reading 90 % of what is written: the old buffer was reset
    only once drained whole, and only unsent bytes were counted. (Since
    contract 1.4 the process is held instead of the stream being cut: it
    ends when the program does, or is still going at 40 s; the bound on
    termd's memory is the same.)"""
    td = start(termd_factory)
    pid = td.proc.pid
    rate = 12 << 20                  # bytes/s the program prints
    prog = ("import sys,time\n"
            "b=b'x'*(%d//100)\nt=time.monotonic()\n"
            "for i in range(3000):\n"
            "  sys.stdout.buffer.write(b); sys.stdout.flush()\n"
            "  d=t+(i+1)/100-time.monotonic()\n"
            "  d>0 and time.sleep(d)\n" % rate)
    base = kib(pid, "VmHWM")
    s = open_stream(td, "process.Process/Start",
                    {"process": {"cmd": "/usr/bin/python3", "args": ["-c", prog]}},
                    rcvbuf=1 << 16)
    s.settimeout(5)
    # 40 s: the old bug's growth passes the RSS bound; under a sanitizer (no
    # RSS bound: its quarantine) 20 s still takes termd past --stream-max
    # (8 MiB behind at ~1.2 MB/s, plus the kernel's buffers) into the hold
    span = 20 if sanitized(pid) else 40
    got, t0, ended, peak = 0, time.monotonic(), False, 0
    while time.monotonic() - t0 < span:
        # 90 % of what the program printed so far, base64 in JSON (4/3)
        allowed = 0.9 * rate * 4 / 3 * (time.monotonic() - t0)
        if got < allowed:
            try:
                c = s.recv(min(1 << 16, int(allowed - got) + 1))
            except socket.timeout:
                c = b"?"
            if not c:
                ended = True
                break
            got += len(c)
        else:
            time.sleep(0.002)
        peak = max(peak, kib(pid, "VmHWM") - base)
    s.close()
    grew = peak / 1024
    print("slow reader: read %.1f MiB in %.1f s, ended by termd: %s, peak RSS +%.1f MiB"
          % (got / 1048576, time.monotonic() - t0, ended, grew))
    assert sanitized(pid) or grew < 8 * 2 + 24, grew


def kernel_send_buffer_max():
    with open("/proc/sys/net/ipv4/tcp_wmem") as f:
        return int(f.read().split()[2])


def test_stream_counts_what_went_out_but_is_still_held(termd_factory):
    """Bytes termd sent but has not moved out of a stream's buffer yet are
    held too. Since contract 1.4 a process's own stream holds the process
    at --stream-max instead of being cut, so the count decides when the
    program is held: counted short (only bytes not sent yet), termd writes
    past what the HTTP stream may hold, and the stream is cut with the
    output lost. In k's (what the kernel's buffers may take, termd's send
    buffer and the client's receive buffer: about 5 MiB), with --stream-max
    8k: the program prints 7k (as base64 on the stream) and waits until
    termd has read its pipe empty; the client reads 2k in small bursts and
    stops; 2.5k more are printed, past the bound: termd holds the program
    (its pipe fills) until the client reads on. Only then does the client
    read the rest: every byte arrives, the stream ends with the program
    (no error), and termd's memory stays near the bound."""
    rcvbuf = 1 << 18                                     # fixed: the kernel does not grow it
    k = kernel_send_buffer_max() + (1 << 20)
    limit = 8 * k
    td = start(termd_factory, "-v", "--stream-max", str(limit))   # -v: its holds are logged
    pid = td.proc.pid
    d = td.home / "steps"
    d.mkdir()
    first, then = 7 * k * 3 // 4, 5 * k // 2 * 3 // 4     # printed: base64 adds a third
    prog = ("import fcntl,os,struct,sys,termios,time\n"
            "d=sys.argv[1]\n"
            "def put(n, done):\n"
            "  b=b'x'*n\n"
            "  while b: b=b[os.write(1,b):]\n"
            "  while struct.unpack('i',fcntl.ioctl(1,termios.FIONREAD,b'1234'))[0]: time.sleep(0.01)\n"
            "  open(os.path.join(d,done),'w').close()\n"
            "def gate(name):\n"
            "  while not os.path.exists(os.path.join(d,name)): time.sleep(0.01)\n"
            "put(%d,'first'); gate('go'); put(%d,'then')\n" % (first, then))
    base = kib(pid, "VmHWM")
    s = open_stream(td, "process.Process/Start",
                    {"process": {"cmd": "/usr/bin/python3", "args": ["-c", prog, str(d)]}},
                    rcvbuf=rcvbuf)
    s.settimeout(T)
    got = bytearray()

    def log():
        try:
            return open(td.log, errors="replace").read()
        except OSError:
            return ""
    try:
        wait_until(lambda: (d / "first").exists(), timeout=T,
                   what="termd to read the program's output")
        while len(got) < 2 * k:
            c = s.recv(1 << 14)
            assert c, "the stream ended after %d bytes" % len(got)
            got += c
        (d / "go").write_text("")
        # the client reads nothing until termd has held the program (or,
        # counting short, wrote the rest into the stream or cut it)
        wait_until(lambda: (d / "then").exists() or "its process held" in log()
                   or "past --stream-max: cut" in log(), timeout=T,
                   what="termd to hold the program, or take all of its output")
    finally:
        (d / "go").write_text("")
    while True:                         # the rest, as fast as it comes
        try:
            c = s.recv(1 << 16)
        except ConnectionResetError:
            break
        if not c:
            break
        got += c
    s.close()
    got = bytes(got)
    grew = (kib(pid, "VmHWM") - base) / 1024
    envs = envelopes(got.split(b"\r\n\r\n", 1)[1])
    printed = sum(len(base64.b64decode(m["event"]["data"]["stdout"])) for f, m in envs
                  if f == 0 and "data" in m.get("event", {}))
    print("--stream-max %.1f MiB: read %.1f MiB of the stream, %.1f of %.1f MiB printed, "
          "peak RSS +%.1f MiB" % (limit / 1048576, len(got) / 1048576, printed / 1048576,
                                  (first + then) / 1048576, grew))
    flags, end = envs[-1]
    assert flags == 2 and "error" not in end, \
        "a stream holding 9.5k of --stream-max 8k (k = %d) did not end with its program: %s" % (
            k, end if flags == 2 else "mid-stream")
    assert printed == first + then, (printed, first + then)
    assert "its process held" in log(), "the program was never held"
    assert sanitized(pid) or grew < limit / 1048576 + 24, grew


# --------------------------------------------- 11: polled watchers

def test_polled_watcher_keeps_a_bounded_tail_and_expires(termd_factory):
    # the default --watcher-expiry (600 s): nothing here may expire however
    # slow the machine; expiry has its own test below
    td = start(termd_factory, *opt("watcher-max", 65536))
    ev = td.events()
    d = td.home / "polled"
    d.mkdir()
    status, m = unary(td, "filesystem.Filesystem/CreateWatcher", {"path": str(d)})
    assert status == 200, m
    wid = m["watcherId"]
    n = 3000
    for i in range(n):
        (d / ("e%05d-" % i + "p" * 60)).write_text("")
    status, m = unary(td, "filesystem.Filesystem/GetWatcherEvents", {"watcherId": wid})
    assert status == 200, m
    evs = m["events"]
    size = sum(len(json.dumps(e, separators=(",", ":"))) for e in evs)
    names = [e["name"] for e in evs]
    assert size <= 65536, (size, len(evs))
    assert m.get("dropped", 0) > 0 and "--watcher-max" in m.get("note", ""), \
        {k: v for k, v in m.items() if k != "events"}
    assert names[-1].startswith("e%05d-" % (n - 1)), names[-3:]   # the newest kept
    assert not any(x.startswith("e00000-") for x in names)          # the oldest dropped
    status, m = unary(td, "filesystem.Filesystem/GetWatcherEvents", {"watcherId": wid})
    assert status == 200 and m["events"] == [] and "dropped" not in m, m
    assert len(ev.call("watch.list", timeout=T)["extras"]["watches"]) == 1


def test_polled_watcher_expires_when_left_alone(termd_factory):
    """Left alone past --watcher-expiry, a watcher and its watch go, and not
    before: each poll starts the time again. Asserted from what the test
    can know whatever the load: the watch goes eventually, and never less
    than the expiry after the start of the last poll."""
    expiry = 2
    td = start(termd_factory, *opt("watcher-expiry", expiry))
    ev = td.events()
    d = td.home / "polled"
    d.mkdir()
    last = time.monotonic()                  # its time starts at the latest here
    status, m = unary(td, "filesystem.Filesystem/CreateWatcher", {"path": str(d)})
    assert status == 200, m
    wid = m["watcherId"]
    for _ in range(3):                       # polled: each poll starts its time again
        time.sleep(expiry / 2)
        t = time.monotonic()
        status, m = unary(td, "filesystem.Filesystem/GetWatcherEvents", {"watcherId": wid})
        if status != 200:
            break                            # this machine was slower than the expiry
        last = t
    deadline = time.monotonic() + 60
    while ev.call("watch.list", timeout=T)["extras"]["watches"]:
        assert time.monotonic() < deadline, "a watcher left alone never expired"
        time.sleep(0.1)
    gone = time.monotonic()
    assert gone - last >= expiry - 0.05, (gone - last, expiry)   # not before its time
    status, m = unary(td, "filesystem.Filesystem/GetWatcherEvents", {"watcherId": wid})
    assert status == 404 and "--watcher-expiry" in m["message"], m


# ---------------------------------------- 12: the kernel's watch budget

def kernel_max_watches():
    with open("/proc/sys/fs/inotify/max_user_watches") as f:
        return int(f.read())


def make_tree(root, n):
    """n folders below root (a few levels)"""
    root.mkdir()
    made = 0
    for a in range(0, n, 64):
        top = root / ("d%05d" % a)
        top.mkdir()
        made += 1
        for b in range(1, 64):
            if made >= n:
                break
            (top / ("s%02d" % b)).mkdir()
            made += 1
    return made


def test_watches_stay_within_half_the_kernels_budget(termd_factory, tmp_path):
    kmax = kernel_max_watches()
    need = kmax // 2 // 8192 + 2
    if need > 64:
        pytest.skip("the kernel allows %d watches: 64 watches of 8192 folders fit in half" % kmax)
    td = termd_factory()
    pid = td.proc.pid
    ev = td.events()
    tree = tmp_path / "tree"
    make_tree(tree, 8191)
    refused = None
    for i in range(need):
        o = ev.call("watch", {"path": str(tree), "recursive": True}, timeout=T)
        if o.get("observation") == "error":
            refused = o
            break
    held = kernel_watches(pid)
    print("kernel max_user_watches %d; termd holds %d after %d watches" % (kmax, held, i))
    assert held <= kmax // 2, (held, kmax)
    assert refused is not None, "%d recursive watches took %d of the kernel's %d" % (need, held, kmax)
    assert_error(refused, "too_large")
    assert "max_user_watches" in refused["content"] and "--max-watch-dirs" in refused["content"]
    lst = ev.call("watch.list", timeout=T)["extras"]
    assert lst["budget"] == kmax // 2 and lst["folders"] == held, lst
    # the others still work: another program of the user can watch too
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_CLOEXEC)
    assert fd >= 0
    try:
        assert libc.inotify_add_watch(fd, str(tmp_path).encode(), 0x100) >= 0, ctypes.get_errno()
    finally:
        os.close(fd)


def test_folders_past_the_budget_are_refused_with_an_event(termd_factory, tmp_path):
    td = termd_factory(args=opt("max-watch-dirs", 40))
    pid = td.proc.pid
    ev = td.events()
    sub = subscribed(td)
    tree = tmp_path / "t"
    make_tree(tree, 30)
    wid = ev.call("watch", {"path": str(tree), "recursive": True}, timeout=T)["extras"]["watch"]
    o = ev.call("watch", {"path": str(tree), "recursive": True}, timeout=T)
    assert_error(o, "too_large")                 # 31 more would pass 40
    assert o["extras"]["budget"] == 40, fmt(o)
    for i in range(20):                          # 20 new folders, room for 9
        (tree / ("new%02d" % i)).mkdir()
    lim = sub.wait_for(lambda o: o.get("observation") == "watch.limit", T)
    assert lim["extras"]["watch"] == wid and lim["extras"]["budget"] == 40, fmt(lim)
    assert lim["extras"]["path"].startswith(str(tree / "new")), fmt(lim)
    time.sleep(0.3)
    assert kernel_watches(pid) <= 40


# ---------------------------------------- 13: a tree moved in, sliced

def test_moved_in_tree_is_walked_a_slice_at_a_time(termd_factory, tmp_path):
    td = start(termd_factory)
    port = port_of(td)
    ev = td.events()
    dest = td.home / "dest"
    dest.mkdir()
    src = tmp_path / "big"
    src.mkdir()
    n = 0
    for a in range(44):
        sd = src / ("d%02d" % a)
        sd.mkdir()
        n += 1
        for b in range(999):
            fd = os.open(str(sd / ("f%03d" % b)), os.O_CREAT | os.O_WRONLY, 0o644)
            os.close(fd)
            n += 1
    wids = [ev.call("watch", {"path": str(dest), "recursive": True}, timeout=T)["extras"]["watch"]
            for _ in range(4)]
    sub = subscribed(td)
    told = {w: 0 for w in wids}
    done = threading.Event()

    def count():
        while not done.is_set():
            o = sub.recv_obs(T)
            if o is None:
                return
            if o.get("observation") == "watch.event":
                told[o["extras"]["watch"]] += 1
                if all(v >= n for v in told.values()):
                    done.set()
    th = threading.Thread(target=count, daemon=True)
    th.start()
    idle = idle_baseline(port)
    calm = calm_max(port)
    with Probe(port) as p:
        t0 = time.monotonic()
        os.rename(src, dest / "big")
        done.wait(120)
        took = time.monotonic() - t0
    lat = sorted(p.lat)
    print("%d entries told to 4 watches in %.2f s; /healthz idle %.2f ms (max %.2f), during: "
          "median %.2f max %.2f ms (%d probes)" % (n, took, idle, calm, statistics.median(lat),
                                                 lat[-1], len(lat)))
    assert done.is_set(), told              # every entry told to every watch
    # The walk in one go held the loop 1 s (issue 31, idle machine). One
    # probe may wait for the scheduler on a busy one (269 ms was seen with
    # two CPU hogs), so the longest is held to half a second, or 4 times
    # the longest the scheduler alone gave just before, whichever is more.
    slow = 3.0 if sanitized(td.proc.pid) else 1.0
    bound = max(500.0, 4 * calm) * slow
    assert lat[-1] < bound, (idle, calm, lat[-1], bound, lat[-10:])


# --------------------------------------------- 14: link.tty's origin

class Listener:
    """A TCP listener that records what arrives (a dial termd must not make)."""

    def __init__(self):
        self.s = socket.socket()
        self.s.bind(("127.0.0.1", 0))
        self.s.listen(8)
        self.port = self.s.getsockname()[1]
        self.got = []
        self.th = threading.Thread(target=self._run, daemon=True)
        self.th.start()

    def _run(self):
        self.s.settimeout(0.2)
        while self.s.fileno() >= 0:
            try:
                c, _ = self.s.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            c.settimeout(2)
            try:
                self.got.append(c.recv(65536))
            except OSError:
                self.got.append(b"")
            c.close()

    def close(self):
        self.s.close()


def test_link_tty_dials_only_the_links_own_origin(termd_factory, tmp_path):
    from test_link import Backend, link_args, make_cert
    crt, key = make_cert(tmp_path, "backend")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(crt), str(key))
    b = Backend(ssl_ctx=ctx, host="localhost")
    other = Listener()
    try:
        termd_factory(args=link_args(b.url(), tmp_path, ["--cacert", str(crt)]))
        link = b.accept()
        for i, url in enumerate(["ws://localhost:%d/view" % b.port,      # plain, same port
                                 "ws://127.0.0.1:%d/view" % other.port,   # another port
                                 "wss://127.0.0.1:%d/view" % b.port,      # another host
                                 "wss://localhost:%d/view" % other.port]):
            link.send({"id": "t%d" % i, "action": "link.tty",
                       "args": {"session": "main", "url": url}})
            a = link.answer("t%d" % i)
            assert a["observation"] == "error" and a["extras"]["code"] == "forbidden", a
            assert "own scheme, host and port" in a["content"], a
        time.sleep(1)
        assert other.got == [], other.got        # nothing dialed, no credential sent
        # its own origin (another path) still works, over TLS
        link.send({"id": "ok", "action": "link.tty",
                   "args": {"session": "main", "url": b.url("/view/main")}})
        view = b.accept_raw()
        assert view.path == "/view/main"
        assert view.headers.get("Authorization") == "Bearer link-secret-1"
        assert link.answer("ok")["observation"] == "link.tty"
    finally:
        other.close()
        b.stop()


def test_link_tty_over_a_plain_link_never_dials_elsewhere(termd_factory, tmp_path):
    from test_link import Backend, link_args
    b = Backend()
    other = Listener()
    try:
        termd_factory(args=link_args(b.url(), tmp_path))
        link = b.accept()
        link.send({"id": "x", "action": "link.tty",
                   "args": {"session": "main", "url": "ws://127.0.0.1:%d/steal" % other.port}})
        a = link.answer("x")
        assert a["observation"] == "error" and a["extras"]["code"] == "forbidden", a
        time.sleep(1)
        assert other.got == [], other.got
    finally:
        other.close()
        b.stop()


# ------------------------------------ 16: a user header termd cannot read

def test_unreadable_basic_user_is_refused_not_the_default_user(termd_factory):
    td = start(termd_factory)
    me = subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip()
    ok = "Basic " + base64.b64encode((me + ":").encode()).decode()
    status, m = unary(td, "filesystem.Filesystem/Stat", {"path": "/"}, {"Authorization": ok})
    assert status == 200, m
    for hdr in ["Basic " + base64.b64encode(("U:" + "p" * 600).encode()).decode(),   # > 511
                "Basic " + base64.b64encode(("u" * 300 + ":").encode()).decode(),
                "Basic !!not-base64!!",
                "Basic " + base64.b64encode(b"no-colon").decode(),
                "Basic " + base64.b64encode(b"ro\0ot:").decode()]:
        status, m = unary(td, "filesystem.Filesystem/Stat", {"path": "/"}, {"Authorization": hdr})
        assert status == 401 and m["code"] == "unauthenticated", (hdr[:40], status, m)
        status, envs = stream(td, "process.Process/Start",
                              {"process": {"cmd": "/usr/bin/id", "args": ["-un"]}},
                              {"Authorization": hdr})
        assert status == 200 and envs[-1][0] == 2 and \
            envs[-1][1]["error"]["code"] == "unauthenticated", (hdr[:40], envs)
    # REST: a username too long to read is refused too
    status, body = request(td, "GET", "/files?path=/etc/hostname&username=" + "u" * 300)
    assert status == 400 and b"username" in body, (status, body)


def test_a_watchdir_stream_left_unread_is_cut_at_stream_max(termd_factory, tmp_path):
    """A WatchDir stream's events cannot hold a program (nothing to hold),
    so a client that stops reading is cut once the stream holds
    --stream-max (64 KiB here): what it held can still be read, then the
    stream ends. 20,000 files made in the watched folder (several MB of
    events, more than the sockets' buffers take) reach the client only in
    part, and termd answers others all along."""
    td = start(termd_factory, "--stream-max", "65536")
    watched = tmp_path / "w"
    watched.mkdir()
    s = open_stream(td, "filesystem.Filesystem/WatchDir", {"path": str(watched)}, rcvbuf=4096)
    s.settimeout(T)
    head = b""
    while b"\r\n\r\n" not in head:   # the stream's headers: the watch is on
        c = s.recv(4096)
        assert c, head
        head += c
    assert b" 200 " in head.split(b"\r\n")[0], head[:200]
    n = 20000
    pad = "x" * 180
    for i in range(n):
        with open(watched / ("wd-%05d-%s" % (i, pad)), "w"):
            pass
    status, _ = unary(td, "filesystem.Filesystem/Stat", {"path": str(watched)})
    assert status == 200
    data = head + read_until_closed(s)
    s.close()
    got = len(set(re.findall(rb"wd-(\d{5})", data)))   # files whose events arrived
    assert 0 < got < n, ("the stream was not cut: %d of %d events arrived" % (got, n))
    status, _ = unary(td, "filesystem.Filesystem/Stat", {"path": str(watched)})
    assert status == 200
