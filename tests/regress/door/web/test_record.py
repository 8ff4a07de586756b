"""Recordings (PROTOCOL.md section 9): --record DIR writes each session as an
asciicast v2 file (header, growing times, "o" output equal to what the pty
sent minus termd's marks, "m" markers at command start and end, "r" on
resize, "i" only with --record-input), Debian's asciinema reads it, it
survives termd being SIGKILLed, the /record routes (a session's recording,
?follow=1 streaming until the session ends, a file by name, the list, the
token rules, 404s, a follower that does not read is ended), start-up
refusals, and od-attach --replay (--dump, bad files, keys in a pty)."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

import conftest
import tdtest
import wsclient

REPO = Path(__file__).resolve().parents[4]
OD_ATTACH_BIN = os.environ.get("OD_ATTACH_BIN") or str(REPO / "build" / "od-attach")
TTY = "termd.tty.v1"
MARK = re.compile(rb"\x1b\]6973;[0-9a-f]+;[^\x07]*\x07")


def recdir(tmp_path, name="rec"):
    d = tmp_path / name
    d.mkdir(mode=0o700)
    return d


def start(termd_factory, tmp_path, *extra, **kw):
    d = recdir(tmp_path)
    t = termd_factory(args=("--record", str(d)) + extra, **kw)
    return t, d


def cast_files(d, session=None):
    fs = sorted(p for p in d.iterdir() if p.name.endswith(".cast"))
    if session:
        fs = [p for p in fs if p.name.startswith(session + "-")]
    return fs


def parse_cast(path, allow_partial_last=False):
    """(header, [events]) with every line checked: header an object with the
    v2 fields, each event [float, str, str]."""
    raw = Path(path).read_bytes()
    lines = raw.split(b"\n")
    last = lines.pop()
    if last:
        assert allow_partial_last, "the file does not end with a newline: %r" % last[-200:]
    header = json.loads(lines[0])
    events = []
    for i, l in enumerate(lines[1:], 2):
        e = json.loads(l)
        assert isinstance(e, list) and len(e) == 3, "line %d: %r" % (i, l[:200])
        assert isinstance(e[0], float) or isinstance(e[0], int), "line %d: %r" % (i, l[:200])
        assert isinstance(e[1], str) and isinstance(e[2], str), "line %d: %r" % (i, l[:200])
        events.append(e)
    return header, events


def output(events):
    return "".join(e[2] for e in events if e[1] == "o")


def markers(events):
    return [e[2] for e in events if e[1] == "m"]


def wait_file(d, session, pred, timeout=20.0):
    """Poll the recording until pred(events) holds; returns (header, events)."""
    deadline = time.monotonic() + timeout
    h, evs = None, []
    while time.monotonic() < deadline:
        fs = cast_files(d, session)
        if fs:
            h, evs = parse_cast(fs[-1])
            if pred(evs):
                return h, evs
        time.sleep(0.05)
    raise AssertionError("recording of %s never matched; last events: %r" % (session, evs[-10:]))


# ---------------------------------------------------------------- the file

def test_header_times_markers(termd_factory, tmp_path):
    t, d = start(termd_factory, tmp_path)
    ev = t.events()
    before = time.time()
    tdtest.run_done(ev, "echo one-$((40+2))")
    tdtest.run_done(ev, "(exit 3)", exit_code=3)
    h, evs = wait_file(d, "main", lambda e: "exit 3, " in " ".join(markers(e)))
    (f,) = cast_files(d)
    assert re.fullmatch(r"main-\d{8}T\d{6}Z\.cast", f.name), f.name
    assert f.stat().st_mode & 0o777 == 0o600
    assert h["version"] == 2
    assert (h["width"], h["height"]) == (160, 48)
    assert isinstance(h["timestamp"], int) and abs(h["timestamp"] - before) < 120
    assert "main" in h["title"]
    assert h["env"]["TERM"] == "xterm-256color" and h["env"]["SHELL"]
    times = [e[0] for e in evs]
    assert times == sorted(times) and times[0] >= 0
    assert {e[1] for e in evs} <= {"o", "m"}
    m = markers(evs)
    i = m.index("echo one-$((40+2))")
    assert re.fullmatch(r"exit 0, [0-9.]+ s", m[i + 1]), m
    j = m.index("(exit 3)")
    assert re.fullmatch(r"exit 3, [0-9.]+ s", m[j + 1]), m
    # the output sits between its command's markers
    idx = [k for k, e in enumerate(evs) if e[1] == "m"]
    between = output(evs[idx[i]:idx[i + 1]])
    assert "one-42\r\n" in between
    assert "6973" not in output(evs)   # termd's marks are not in it


def test_output_equals_pty_bytes(termd_factory, tmp_path):
    """What a /tty viewer got (the pty's bytes) minus termd's marks, decoded
    with U+FFFD for invalid bytes, is in the recording's "o" data exactly:
    200 KB of multibyte text (characters split across reads) and invalid
    bytes."""
    t, d = start(termd_factory, tmp_path)
    ev = t.events()
    tdtest.run_done(ev, "true")
    ws = wsclient.connect(t.url, "/tty/main", TTY)
    cmd = ("%s -c \"import sys; w=sys.stdout.buffer.write; w(('a\\u00e9\\u20ac\\U0001F600' * 40000)"
           ".encode()); w(b'|\\xff\\xfeA\\xc3|\\xe2\\x82|'); w(b'END-'); w(b'OF-IT')\"" % tdtest.PY)
    ev.send_action("run", {"command": cmd})
    got = b""
    deadline = time.monotonic() + 30
    while b"END-OF-IT" not in got and time.monotonic() < deadline:
        op, p = ws.recv(max(0.1, deadline - time.monotonic()))
        if p[:1] == b"O":
            got += p[1:]
    assert b"END-OF-IT" in got
    ev.wait_for(lambda o: o.get("observation") == "run", timeout=60)
    start_at = got.index(b"\xf0\x9f\x98\x80") - 6   # from the first whole "aé€😀"
    seen = MARK.sub(b"", got[start_at:got.index(b"END-OF-IT") + 9]).decode("utf-8", "replace")
    assert seen.count("\U0001F600") == 40000
    _, evs = wait_file(d, "main", lambda e: "END-OF-IT" in output(e))
    rec = output(evs)
    assert seen in rec
    assert "|\ufffd\ufffdA\ufffd|\ufffd|END-OF-IT" in rec
    # the whole payload, byte-exact in its text form
    assert ("a\u00e9\u20ac\U0001F600" * 40000) in rec


def test_resize_and_no_input_without_the_option(termd_factory, tmp_path):
    t, d = start(termd_factory, tmp_path)
    ev = t.events()
    ws = wsclient.connect(t.url, "/tty/main?mode=rw", TTY)
    ws.send_binary(b'R{"cols":100,"rows":30}')
    tdtest.run_done(ev, "echo typed-$((1+1))")
    _, evs = wait_file(d, "main", lambda e: any(x[1] == "r" for x in e) and "typed-2" in output(e))
    assert [e[2] for e in evs if e[1] == "r"] == ["100x30"]
    assert not [e for e in evs if e[1] == "i"]


def test_input_with_record_input(termd_factory, tmp_path):
    t, d = start(termd_factory, tmp_path, "--record-input")
    ev = t.events()
    ws = wsclient.connect(t.url, "/tty/main?mode=rw", TTY)
    tdtest.run_done(ev, "true")
    ws.send_binary(b"Iecho from-viewer-\xc3\xa9\r")
    _, evs = wait_file(d, "main", lambda e: "echo from-viewer-\u00e9" in markers(e) and
                       markers(e)[-1].startswith("exit"))
    typed = "".join(e[2] for e in evs if e[1] == "i")
    assert "echo from-viewer-\u00e9\r" in typed
    assert "true" in typed   # run's text is input too
    # a command typed at a viewer gets its markers like a run's
    m = markers(evs)
    assert "echo from-viewer-\u00e9" in m and m[m.index("echo from-viewer-\u00e9") + 1].startswith("exit 0")


def test_sessions_opened_later_and_program_markers(termd_factory, tmp_path):
    t, d = start(termd_factory, tmp_path)
    ev = t.events()
    o = ev.call("session.open", {"name": "job.x-1", "command": "echo prog-out; exit 5"})
    assert o["observation"] == "session.open", o
    h, evs = wait_file(d, "job.x-1", lambda e: len(markers(e)) >= 2)
    assert h.get("command") == "echo prog-out; exit 5"
    assert markers(evs)[0] == "echo prog-out; exit 5"
    assert markers(evs)[1].startswith("exit 5, ")
    assert "prog-out\r\n" in output(evs)
    o = ev.call("session.open", {"name": "second"})
    assert o["observation"] == "session.open", o
    tdtest.run_done(ev, "echo in-second", session="second")
    wait_file(d, "second", lambda e: "in-second\r\n" in output(e))
    assert len(cast_files(d)) == 3


def test_asciinema_cat_reads_it(termd_factory, tmp_path):
    if not shutil.which("asciinema"):
        pytest.skip("asciinema is not installed (make deps)")
    t, d = start(termd_factory, tmp_path)
    ev = t.events()
    tdtest.run_done(ev, "printf 'cat-me \\342\\202\\254\\n'")
    (f,) = cast_files(d)
    # it opens /dev/tty: run it in a terminal (script(1) gives it one)
    r = subprocess.run(["script", "-qec", "asciinema cat %s" % f, "/dev/null"],
                       capture_output=True, timeout=60, stdin=subprocess.DEVNULL,
                       env=dict(os.environ, LANG="C.UTF-8"))
    assert r.returncode == 0, r.stderr
    assert "cat-me \u20ac\r\n".encode() in r.stdout


def test_survives_sigkill(tmp_path):
    d = recdir(tmp_path)
    t = conftest.Termd(tmp_path / "k", ("--record", str(d)))
    t.start()
    try:
        ev = wsclient.Events(t.url)
        tdtest.run_done(ev, "seq 1 3000 | tail -n 2")
        ev.send_action("run", {"command": "echo last-before-kill; sleep 30"})
        wait_file(d, "main", lambda e: "last-before-kill\r\n" in output(e))
        os.killpg(t.proc.pid, signal.SIGKILL)
        t.proc.wait(10)
    finally:
        if t.alive():
            os.killpg(t.proc.pid, signal.SIGKILL)
            t.proc.wait(10)
        t._logf.close()
        shutil.rmtree(t.sockdir, ignore_errors=True)
    (f,) = cast_files(d)
    _, evs = parse_cast(f)   # every line complete and valid
    out = output(evs)
    assert "2999\r\n3000\r\n" in out and "last-before-kill\r\n" in out
    assert "echo last-before-kill; sleep 30" in markers(evs)


def test_refused_at_start(tmp_path):
    def refused(*args):
        r = subprocess.run([conftest.TERMD_BIN, "--listen", "unix:%s/x.sock" % tmp_path] + list(args),
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        return r.stderr
    assert "--record %s/missing" % tmp_path in refused("--record", str(tmp_path / "missing"))
    f = tmp_path / "file"
    f.write_text("x")
    assert "not a directory" in refused("--record", str(f))
    assert "--record-input needs --record" in refused("--record-input")
    if os.geteuid() != 0:
        ro = recdir(tmp_path, "ro")
        ro.chmod(0o500)
        assert "cannot create files" in refused("--record", str(ro))


def test_write_error_stops_that_recording(termd_factory, tmp_path):
    """A full disk: the recording stops (logged once), termd goes on."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("needs root for a small tmpfs")
    d = recdir(tmp_path)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", str(d)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("cannot mount a tmpfs: %s" % r.stderr)
    try:
        t = termd_factory(args=("--record", str(d)))
        ev = t.events()
        tdtest.run_done(ev, "head -c 600000 /dev/zero | tr '\\0' x; echo")
        tdtest.run_done(ev, "echo still-running")
        log = Path(t.log).read_text()
        assert log.count("recording") >= 1 and "stopped" in log, log
        (f,) = cast_files(d)
        _, evs = parse_cast(f)   # no half line left behind
        assert "still-running" not in output(evs)
        assert t.healthz()[0] == 200
    finally:
        subprocess.run(["umount", "-l", str(d)], capture_output=True)


# -------------------------------------------------------------- the routes

def get(t, path, token=None):
    h = {"Authorization": "Bearer " + token} if token else None
    return wsclient.http_request(t.url, path, headers=h, timeout=30)


class Stream:
    """A GET whose body is read as it comes (follow=1)."""

    def __init__(self, t, path, rcvbuf=None):
        self.sock = wsclient.open_socket(t.url, 10)
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.sendall(("GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path).encode())
        self.status, self.headers, self.body = wsclient._read_http_head(
            self.sock, time.monotonic() + 10)
        self.eof = False

    def read_until(self, pred, timeout=20.0):
        deadline = time.monotonic() + timeout
        while not pred(self.body) and not self.eof and time.monotonic() < deadline:
            self.sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                c = self.sock.recv(65536)
            except socket.timeout:
                break
            if not c:
                self.eof = True
            self.body += c
        return self.body

    def close(self):
        self.sock.close()


def test_record_routes(termd_factory, tmp_path):
    t, d = start(termd_factory, tmp_path)
    ev = t.events()
    tdtest.run_done(ev, "echo via-http")
    s, h, b = get(t, "/record/main")
    assert s == 200 and h["content-type"] == "application/x-asciicast"
    (f,) = cast_files(d)
    assert f.read_bytes().startswith(b)   # what was written when it asked
    assert b"via-http" in b
    hdr = json.loads(b.split(b"\n")[0])
    assert hdr["version"] == 2
    s, _, b2 = get(t, "/record/" + f.name)
    assert s == 200 and b2.startswith(b)
    s, h, lb = get(t, "/record/")
    assert s == 200 and h["content-type"] == "application/json"
    (item,) = json.loads(lb)
    assert item["file"] == f.name and item["session"] == "main"
    assert item["bytes"] >= len(b) and item["start"] == hdr["timestamp"] and item["live"] is True
    for path, status in (("/record/nope", 404), ("/record/nope-20260101T000000Z.cast", 404),
                         ("/record/.hidden.cast", 400), ("/record/bad%20name", 404)):
        assert get(t, path)[0] == status, path
    # out of DIR: refused one way or another, never served
    (tmp_path / "secret.cast").write_text("secret")
    os.symlink(tmp_path / "secret.cast", d / "link.cast")
    for path in ("/record/..%2Fsecret.cast", "/record/../secret.cast", "/record/link.cast",
                 "/record/%2e%2e%2fsecret.cast"):
        s, _, body = get(t, path)
        assert s in (400, 404) and b"secret" not in body, (path, s, body)
    assert [x["file"] for x in json.loads(get(t, "/record/")[2])] == [f.name]


def test_record_404_without_record(termd):
    assert get(termd, "/record/main")[0] == 404
    assert get(termd, "/record/")[0] == 404


def test_record_tokens(termd_factory, tmp_path):
    vt = tmp_path / "view"
    vt.write_text("viewsecret\n")
    t, d = start(termd_factory, tmp_path, "--view-token-file", str(vt), token="fullsecret")
    ev = t.events()
    tdtest.run_done(ev, "true")
    assert get(t, "/record/main")[0] == 401
    assert get(t, "/record/")[0] == 401
    assert get(t, "/record/main", token="wrong")[0] == 401
    assert get(t, "/record/main", token="fullsecret")[0] == 200
    assert get(t, "/record/main", token="viewsecret")[0] == 200
    assert get(t, "/record/main?token=viewsecret")[0] == 200
    assert get(t, "/record/", token="viewsecret")[0] == 200


def test_follow_streams_until_the_session_ends(termd_factory, tmp_path):
    t, d = start(termd_factory, tmp_path)
    ev = t.events()
    o = ev.call("session.open", {"name": "fol"})
    assert o["observation"] == "session.open", o
    tdtest.run_done(ev, "true", session="fol")
    st = Stream(t, "/record/fol?follow=1")
    assert st.status == 200 and st.headers["content-type"] == "application/x-asciicast"
    st.read_until(lambda b: b.endswith(b"\n") and b"\n[" in b)
    tdtest.run_done(ev, "echo streamed-$((6*7))", session="fol")
    st.read_until(lambda b: b"streamed-42" in b)
    assert b"streamed-42" in st.body and not st.eof
    ev.send_action("run", {"command": "exit 4", "session": "fol"})
    st.read_until(lambda b: False, timeout=20)
    assert st.eof, "the answer did not end with the session"
    (f,) = cast_files(d, "fol")
    assert st.body == f.read_bytes()
    st.close()
    # a follower that leaves early costs nothing; termd goes on
    st2 = Stream(t, "/record/main?follow=1")
    st2.read_until(lambda b: b"\n" in b)
    st2.close()
    tdtest.run_done(ev, "echo after-leaving")
    assert t.healthz()[0] == 200


def test_follow_by_file_name_and_ended_sessions(termd_factory, tmp_path):
    t, d = start(termd_factory, tmp_path)
    ev = t.events()
    ev.call("session.open", {"name": "brief", "command": "echo brief-out"})
    _, evs = wait_file(d, "brief", lambda e: len(markers(e)) >= 2)
    (f,) = cast_files(d, "brief")
    # the session's program ended: the answer ends at once, follow or not
    st = Stream(t, "/record/%s?follow=1" % f.name)
    st.read_until(lambda b: False, timeout=10)
    assert st.eof and st.body == f.read_bytes()
    st.close()
    s, _, b = get(t, "/record/brief")
    assert s == 200 and b == f.read_bytes()


def test_slow_follower_is_ended(termd_factory, tmp_path):
    """A follower that reads nothing while the session floods: termd keeps
    no copy for it (it reads from the file) and ends its answer once it is
    too far behind; the recording and termd go on."""
    t, d = start(termd_factory, tmp_path)
    ev = t.events()
    tdtest.run_done(ev, "true")
    st = Stream(t, "/record/main?follow=1", rcvbuf=4096)
    rss0 = tdtest.rss_mb(t.proc.pid)
    tdtest.run_done(ev, "seq 1 1500000", timeout=300, max_output=1000)
    rss1 = tdtest.rss_mb(t.proc.pid)
    st.read_until(lambda b: False, timeout=60)
    assert st.eof, "the slow follower's answer was not ended"
    (f,) = cast_files(d)
    data = f.read_bytes()
    assert len(st.body) < len(data) and data.startswith(st.body)
    assert "follower" in Path(t.log).read_text()
    assert rss1 - rss0 < 64, (rss0, rss1)
    st.close()
    tdtest.run_done(ev, "echo alive")


# ------------------------------------------------------- od-attach --replay

def write_cast(path, events, header=None):
    h = header or {"version": 2, "width": 80, "height": 24}
    with open(path, "w") as f:
        f.write(json.dumps(h) + "\n")
        for e in events:
            f.write(json.dumps(e) + "\n")


def replay(*args, timeout=30):
    return subprocess.run([OD_ATTACH_BIN, "--replay"] + [str(a) for a in args],
                          capture_output=True, timeout=timeout)


def test_replay_dump_of_a_recording(termd_factory, tmp_path):
    t, d = start(termd_factory, tmp_path)
    ev = t.events()
    tdtest.run_done(ev, "printf 'dump-me \\342\\202\\254\\n'")
    (live,) = cast_files(d)
    f = tmp_path / "copy.cast"   # the live file may still grow (the prompt)
    f.write_bytes(live.read_bytes())
    _, evs = parse_cast(f)
    r = replay(f, "--dump")
    assert r.returncode == 0, r.stderr
    assert r.stdout == output(evs).encode()
    lines = r.stderr.decode().splitlines()
    assert any(re.fullmatch(r"m [0-9.]+ printf 'dump-me \\342\\202\\254\\n'", l) for l in lines), lines
    assert any(re.fullmatch(r"m [0-9.]+ exit 0, [0-9.]+ s", l) for l in lines), lines


def test_replay_bad_files(tmp_path):
    cases = {
        "empty": "",
        "not json": "hello\n",
        "v1": '{"version": 1, "width": 80, "height": 24}\n',
        "huge width": '{"version": 2, "width": 1e12, "height": 24}\n',
        "bad event": '{"version": 2, "width": 80, "height": 24}\n[0.1, "o", 5]\n',
        "huge time": '{"version": 2, "width": 80, "height": 24}\n[1e300, "o", "x"]\n',
        "object event": '{"version": 2, "width": 80, "height": 24}\n{"t": 1}\n[0.2, "o", "x"]\n',
        "binary": '{"version": 2, "width": 80, "height": 24}\n\x00\x01\x02\n',
    }
    for name, text in cases.items():
        p = tmp_path / ("c%d.cast" % len(name))
        p.write_bytes(text.encode("latin-1"))
        r = replay(p, "--dump")
        assert r.returncode == 2, (name, r)
        assert r.stderr.startswith(b"od-attach: ") and str(p).encode() in r.stderr, (name, r.stderr)
    r = replay(tmp_path / "missing.cast", "--dump")
    assert r.returncode == 2 and b"cannot open" in r.stderr
    # a last line cut off (a recorder killed mid-write) is left out, with a note
    p = tmp_path / "cut.cast"
    p.write_text('{"version": 2, "width": 80, "height": 24}\n[0.1, "o", "whole"]\n[0.2, "o", "cu')
    r = replay(p, "--dump")
    assert r.returncode == 0 and r.stdout == b"whole" and b"incomplete" in r.stderr
    # times that go back, unknown codes, input events: played, ignored
    p = tmp_path / "odd.cast"
    write_cast(p, [[0.5, "o", "a"], [0.1, "o", "b"], [0.6, "x", "?"], [0.7, "i", "typed"],
                   [0.8, "r", "100x30"], [0.9, "m", "lab\nel"]])
    r = replay(p, "--dump")
    assert r.returncode == 0 and r.stdout == b"ab"
    assert r.stderr.decode().splitlines() == ["r 0.800000 100x30", "m 0.900000 lab el"]


def test_replay_idle_limit_in_dump(tmp_path):
    p = tmp_path / "gaps.cast"
    write_cast(p, [[1.0, "m", "a"], [101.0, "m", "b"], [101.5, "m", "c"]])
    r = replay(p, "--dump", "--idle-limit", "2")
    assert r.stderr.decode().splitlines() == ["m 1.000000 a", "m 3.000000 b", "m 3.500000 c"]
    r = replay(p, "--dump", "--idle-limit", "0")
    assert r.stderr.decode().splitlines()[1] == "m 101.000000 b"
    assert replay(p, "--dump", "--speed", "0").returncode == 2


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_replay_keys_in_a_terminal(tmp_path):
    """In a real terminal (tmux): the output appears with its timing, space
    pauses (the status line says so), + doubles the speed, n jumps to the
    next marker and shows its label, q quits with status 0."""
    from test_od_attach import Viewer
    p = tmp_path / "play.cast"
    write_cast(p, [[0.1, "o", "first-line\r\n"], [0.2, "m", "chapter one"],
                   [30.0, "o", "\u001b[1mafter-the-marker\u001b[0m\r\n"], [30.1, "m", "chapter two"],
                   [60.0, "o", "never-reached\r\n"]])
    v = Viewer("unix:/nonexistent", args=["--replay", str(p), "--idle-limit", "0"], cols=100, rows=30)
    try:
        v.wait("first-line")
        assert "PLAY 1x" in v.wait("marker: chapter one")   # played at 0.2 s
        v.keys("Space")
        v.wait("PAUSED")
        v.type("+")
        v.wait("PAUSED 2x")
        v.type("n")   # the next marker, 30 s away: what comes before it is shown at once
        text = v.wait("marker: chapter two")
        assert "after-the-marker" in text
        assert "never-reached" not in text
        v.type("q")
        code, text = v.exit_status()
        assert code == 0, text
    finally:
        v.tmux("kill-server", check=False)
        shutil.rmtree(v.tmpdir, ignore_errors=True)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_replay_notes_a_resize_larger_than_the_terminal(tmp_path):
    from test_od_attach import Viewer
    p = tmp_path / "grow.cast"
    write_cast(p, [[0.1, "o", "small\r\n"], [0.2, "r", "200x60"], [0.3, "o", "after-resize\r\n"],
                   [60.0, "o", "never-reached\r\n"]])
    v = Viewer("unix:/nonexistent", args=["--replay", str(p)], cols=100, rows=30)
    try:
        text = v.wait("recording is 200x60, terminal 100x30")
        assert "after-resize" in v.wait("after-resize")
        v.type("q")
        code, text = v.exit_status()
        assert code == 0, text
    finally:
        v.tmux("kill-server", check=False)
        shutil.rmtree(v.tmpdir, ignore_errors=True)


def test_long_command_marker_is_cut(termd_factory, tmp_path):
    t, d = start(termd_factory, tmp_path)
    ev = t.events()
    cmd = "echo long-one # " + "\u00e9" * 3000
    tdtest.run_done(ev, cmd)
    _, evs = wait_file(d, "main", lambda e: any(m.startswith("exit") for m in markers(e)))
    m = [x for x in markers(evs) if x.startswith("echo long-one")]
    assert len(m) == 1 and m[0].endswith("\u2026") and cmd.startswith(m[0][:-1])
    assert len(m[0][:-1].encode()) <= 1024


def test_many_sessions_each_recorded_and_listed(termd_factory, tmp_path):
    t, d = start(termd_factory, tmp_path)
    ev = t.events()
    names = ["s%02d" % i for i in range(20)] + ["a.b-c_d", "x-20260101T000000Z"]
    for n in names:
        o = ev.call("session.open", {"name": n, "command": "echo out-of-%s" % n})
        assert o["observation"] == "session.open", o
    for n in names:
        wait_file(d, n, lambda e, n=n: "out-of-%s\r\n" % n in output(e) and len(markers(e)) >= 2)
    s, _, body = get(t, "/record/")
    assert s == 200
    listed = json.loads(body)
    got = sorted(x["session"] for x in listed)
    assert got == sorted(names + ["main"])
    for x in listed:
        assert (d / x["file"]).stat().st_size == x["bytes"] or x["session"] == "main"
        assert x["live"] is (x["session"] == "main")
