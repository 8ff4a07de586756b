"""Issue 46 (hardening, round five): hostile tests of the file-work pool's
per-job ids, extras.waiting's prompt, a program flapping ports, and a
root-capable user's Move/Remove/ListDir/Stat.

- 1: many file jobs at once as different users (root, nobody, a test user)
  through envd's /files and the WebSocket write/read actions: each file is
  its own user's; a refused user's job never succeeds because of a
  neighbour's ids.
- 2: extras.waiting's prompt and command are bounded, valid UTF-8 with no
  control characters, whatever the program prints or is named; termctl's
  "waiting for" line carries no escape sequence.
- 3: a program opening and closing thousands of listening sockets: termd
  stays responsive and bounded, and lists no port once it has ended.
"""

import base64
import json
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

import tdtest
from tdtest import fmt, wait_until

T = 60.0

from test_own_ports_stream_hold_root_capable import base, sudo_all_user  # noqa: E402,F401  (fixtures)


def basic(user):
    return {"Authorization": "Basic " + base64.b64encode((user + ":").encode()).decode()}


@pytest.fixture
def plain_user():
    """A throwaway user with no sudo, removed afterwards."""
    if os.geteuid() != 0 or not shutil.which("useradd"):
        pytest.skip("needs root and useradd")
    name = "tdpl%s" % secrets.token_hex(3)
    subprocess.run(["useradd", "-M", "-s", "/bin/sh", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["userdel", "-f", name], check=False)


@pytest.fixture
def tree():
    d = Path(tempfile.mkdtemp(prefix="td-h5-", dir="/tmp"))
    try:
        d.chmod(0o755)
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


# ------------------------------------------------------------ item 1

def test_concurrent_file_jobs_each_run_as_their_own_user(termd_factory, plain_user, tree,
                                                          sudo_all_user):
    """Seven clients at once, 40 rounds each: root, nobody and a test user
    writing into their own folders (each file must be its writer's), and
    nobody and the test user trying root's folder and root's secret (each
    refused: nothing made, nothing read), while WebSocket write/read
    actions (termd's own user, root) run alongside and a root-capable user
    writes in root's folder (done as root, the file its own), in its own
    (as itself) and stats root's secret (as root)."""
    from test_watch_stdin_stream_bounds import start, request, unary
    td = start(termd_factory)
    users = {"root": 0, "nobody": pwd.getpwnam("nobody").pw_uid,
             plain_user: pwd.getpwnam(plain_user).pw_uid}
    for u, uid in users.items():
        (tree / u).mkdir()
        os.chown(tree / u, uid, -1)
    rootdir = tree / "rootonly"
    rootdir.mkdir(mode=0o755)
    secret = tree / "secret"
    secret.write_text("root's only\n")
    secret.chmod(0o600)
    closed = tree / "closed"
    closed.mkdir(mode=0o700)
    (closed / "in").write_text("in\n")
    N = 40
    errors = []

    def own(u):
        try:
            for i in range(N):
                p = tree / u / ("f%d" % i)
                st, body = request(td, "POST", "/files?path=%s&username=%s" % (p, u),
                                   b"%s %d\n" % (u.encode(), i),
                                   {"Content-Type": "application/octet-stream"})
                if st != 200:
                    errors.append((u, "own", i, st, body))
                st, m = unary(td, "filesystem.Filesystem/MakeDir",
                              {"path": str(tree / u / ("d%d" % i))}, basic(u))
                if st != 200:
                    errors.append((u, "own dir", i, st, m))
        except Exception as e:   # noqa: BLE001
            errors.append((u, "own", repr(e)))

    def refused(u):
        try:
            for i in range(N):
                p = rootdir / ("%s%d" % (u, i))
                st, body = request(td, "POST", "/files?path=%s&username=%s" % (p, u), b"evil\n",
                                   {"Content-Type": "application/octet-stream"})
                if st == 200:
                    errors.append((u, "wrote root's folder", i))
                st, m = unary(td, "filesystem.Filesystem/MakeDir",
                              {"path": str(rootdir / ("d%s%d" % (u, i)))}, basic(u))
                if st == 200:
                    errors.append((u, "made a folder in root's", i))
                st, m = unary(td, "filesystem.Filesystem/Stat", {"path": str(closed / "in")},
                              basic(u))
                if st == 200:
                    errors.append((u, "stat in root's closed folder", i))
                st, body = request(td, "GET", "/files?path=%s&username=%s" % (secret, u))
                if st == 200 or b"root's only" in body:
                    errors.append((u, "read root's secret", i))
        except Exception as e:   # noqa: BLE001
            errors.append((u, "refused", repr(e)))

    def ws():
        try:
            ev = td.events()
            for i in range(N):
                p = tree / "root" / ("ws%d" % i)
                o = ev.call("write", {"path": str(p), "content": "ws %d\n" % i}, timeout=T)
                if o.get("observation") == "error":
                    errors.append(("ws", "write", i, fmt(o)))
                o = ev.call("read", {"path": str(secret)}, timeout=T)
                if "root's only" not in json.dumps(o):
                    errors.append(("ws", "read", i, fmt(o)))
        except Exception as e:   # noqa: BLE001
            errors.append(("ws", repr(e)))

    cap = sudo_all_user
    cuid = pwd.getpwnam(cap).pw_uid
    (tree / cap).mkdir()
    os.chown(tree / cap, cuid, -1)

    def capable():
        """A root-capable user's jobs go root mid-job (a retry where the
        kernel refuses it) beside the others; its next job is its own."""
        try:
            for i in range(N):
                p = rootdir / ("cap%d" % i)
                st, body = request(td, "POST", "/files?path=%s&username=%s" % (p, cap), b"c\n",
                                   {"Content-Type": "application/octet-stream"})
                if st != 200:
                    errors.append((cap, "as root", i, st, body))
                p = tree / cap / ("f%d" % i)
                st, body = request(td, "POST", "/files?path=%s&username=%s" % (p, cap), b"c\n",
                                   {"Content-Type": "application/octet-stream"})
                if st != 200:
                    errors.append((cap, "own", i, st, body))
                st, m = unary(td, "filesystem.Filesystem/Stat", {"path": str(closed / "in")}, basic(cap))
                if st != 200:
                    errors.append((cap, "stat as root", i, st, m))
        except Exception as e:   # noqa: BLE001
            errors.append((cap, repr(e)))

    ths = [threading.Thread(target=own, args=(u,)) for u in users]
    ths += [threading.Thread(target=capable)]
    ths += [threading.Thread(target=refused, args=(u,)) for u in ("nobody", plain_user)]
    ths += [threading.Thread(target=ws)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    assert errors == [], errors[:10]
    assert sorted(os.listdir(rootdir)) == sorted("cap%d" % i for i in range(N))
    for i in range(N):
        for p in (rootdir / ("cap%d" % i), tree / cap / ("f%d" % i)):
            assert p.stat().st_uid == cuid, (p, p.stat().st_uid)
    for u, uid in users.items():
        for i in range(N):
            for f in ("f%d" % i, "d%d" % i):
                st = (tree / u / f).stat()
                assert st.st_uid == uid, (u, f, st.st_uid)
    for i in range(N):
        assert (tree / "root" / ("ws%d" % i)).stat().st_uid == 0


# ------------------------------------------------------------ item 2

HOSTILE = r'''
import os, sys
fd = os.open("/dev/tty", os.O_RDWR)
bad = b"\x1b]0;owned\x07\x1b[31mred\x1b[0m \x9b2J \xff\xfe\xc3( \x00\x01\x08\x7f" + b"A" * (1 << 20) + b" Name? "
os.write(fd, bad)
os.read(fd, 100)
'''


def clean(s):
    return not any(ord(c) < 0x20 or 0x7f <= ord(c) < 0xa0 for c in s)


def test_hostile_prompt_and_command_are_bounded_and_clean(client, tmp_path):
    prog = tmp_path / "h.py"
    prog.write_text(HOSTILE)
    # the program's name and arguments hostile too
    sh = tmp_path / "h.sh"
    sh.write_text("exec -a \"$(printf 'p\\033[2Jx\\007')\" %s %s \"$(printf 'a\\033]0;t\\007\\001\\377')\"\n"
                  % (sys.executable, prog))
    r = client.run("bash %s" % sh, timeout=60)
    assert r.running is True and r.waiting_for_input is True, r
    w = r.extras["waiting"]
    for k in ("prompt", "command"):
        v = w[k]
        assert isinstance(v, str) and len(v.encode()) <= 4096, (k, len(v))
        assert clean(v), (k, v[:200])
    assert w["prompt"].endswith("Name?"), w["prompt"][-100:]


def test_termctl_waiting_line_carries_no_escape(termd, tmp_path):
    """termctl's "termd: waiting for ... (pid N: command)" line: the
    program's hostile name reaches the terminal with no control
    character (before: ESC [2J and BEL went out as they were)."""
    prog = tmp_path / "h.py"
    prog.write_text(HOSTILE)
    sh = tmp_path / "h.sh"
    sh.write_text("exec -a \"$(printf 'p\\033[2Jx\\007')\" %s %s\n" % (sys.executable, prog))
    r = termd.termctl("run", "--timeout", "60", "bash %s" % sh)
    err = r.stderr if isinstance(r.stderr, str) else r.stderr.decode(errors="replace")
    assert "waiting for" in err, err[-500:]
    line = [x for x in err.splitlines() if "waiting for" in x][0]
    assert clean(line), repr(line)


# ------------------------------------------------------------ item 3

FLAP = r'''
import resource, socket, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
# 5000 quick cycles over 500 ports, then 15 rounds of 1000 held briefly
base = int(sys.argv[1])
for i in range(5000):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", base + i % 500))
        s.listen(1)
    except OSError:
        pass
    s.close()
for r in range(15):
    socks = []
    for i in range(1000):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        socks.append(s)
    time.sleep(0.3)
    for s in socks:
        s.close()
print("FLAPPED")
'''


def test_a_program_flapping_ports_leaves_termd_responsive_and_nothing_listed(termd, tmp_path):
    sub = tdtest.subscribed(termd)
    ev = termd.events()
    prog = tmp_path / "flap.py"
    prog.write_text(FLAP)
    rss0 = tdtest.rss_mb(termd.proc.pid)
    events = {"port.open": 0, "port.close": 0}
    live = {}
    stop = threading.Event()
    errs = []

    def reader():
        while not stop.is_set():
            try:
                o = sub.recv_obs(0.5)
            except TimeoutError:
                continue
            except Exception as e:   # noqa: BLE001
                errs.append(repr(e))
                return
            k = o.get("observation")
            if k in events:
                events[k] += 1
                x = o["extras"]
                key = (x["port"], x.get("address"))
                live[key] = live.get(key, 0) + (1 if k == "port.open" else -1)

    health = []

    def healthz():
        while not stop.is_set():
            try:
                health.append(termd.healthz()[0])
            except Exception as e:   # noqa: BLE001
                health.append(repr(e))
            time.sleep(0.05)

    ths = [threading.Thread(target=reader), threading.Thread(target=healthz)]
    for t in ths:
        t.start()
    try:
        base = tdtest.free_port()
        base = 20000 + base % 30000
        o = tdtest.run_done(ev, "%s %s %d" % (sys.executable, prog, base), timeout=300)
        assert "FLAPPED" in tdtest.content(o), fmt(o)
        wait_until(lambda: not ev.call("ports.list", {}, timeout=T)["extras"]["ports"],
                   timeout=30, what="ports.list empty")
        wait_until(lambda: all(v == 0 for v in live.values()), timeout=30,
                   what="a port.close for every port.open")
    finally:
        stop.set()
        for t in ths:
            t.join()
    rss1 = tdtest.rss_mb(termd.proc.pid)
    print("events", events, "rss", rss0, rss1, "health", len(health))
    assert errs == [], errs
    assert all(h == 200 for h in health), [h for h in health if h != 200][:5]
    from test_watch_stdin_stream_bounds import sanitized
    # (a sanitizer's quarantine holds what termd freed: its growth is not termd's)
    assert sanitized(termd.proc.pid) or rss1 - rss0 < 64, (rss0, rss1)
    # sampled (a listing every 250 ms): never more events than sockets
    assert events["port.open"] == events["port.close"] <= 15000 + 500, events


# ------------------------------------------------------------ item 4



def rpc(td, method, msg):
    from test_watch_stdin_stream_bounds import unary
    return unary(td, "filesystem.Filesystem/" + method, msg)


@pytest.fixture
def closed(base):
    """base/closed: root's, 0700, with a file and a folder in it;
    base/rootdir/a: a root file in a folder only root may write in."""
    c = base / "closed"
    c.mkdir(mode=0o700)
    (c / "inside").write_text("in\n")
    (c / "sub").mkdir()
    (c / "sub" / "deep").write_text("deep\n")
    (base / "rootdir" / "a").write_text("a\n")
    return c


def test_root_capable_user_moves_removes_lists_stats_where_only_root_may(
        termd_factory, sudo_all_user, closed, base):
    """A user with NOPASSWD sudo (e2b's `user`): Stat and ListDir in a
    folder only root may read, Move and Remove in one only root may write:
    done as root, as envd does (before: permission_denied)."""
    from test_watch_stdin_stream_bounds import start
    td = start(termd_factory, "--user", sudo_all_user)
    st, m = rpc(td, "Stat", {"path": str(closed / "inside")})
    assert st == 200 and m["entry"]["name"] == "inside", (st, m)
    assert m["entry"]["path"] == str(closed / "inside"), m
    st, m = rpc(td, "ListDir", {"path": str(closed)})
    assert st == 200, (st, m)
    assert sorted(e["name"] for e in m["entries"]) == ["inside", "sub"], m
    assert {e["path"] for e in m["entries"]} == {str(closed / "inside"), str(closed / "sub")}, m
    st, m = rpc(td, "ListDir", {"path": str(closed), "depth": 2})
    assert st == 200 and str(closed / "sub" / "deep") in {e["path"] for e in m["entries"]}, m
    rootdir = base / "rootdir"
    st, m = rpc(td, "Move", {"source": str(rootdir / "a"), "destination": str(rootdir / "b")})
    assert st == 200 and m["entry"]["path"] == str(rootdir / "b"), (st, m)
    assert (rootdir / "b").read_text() == "a\n" and not (rootdir / "a").exists()
    st, m = rpc(td, "Remove", {"path": str(rootdir / "b")})
    assert st == 200 and not (rootdir / "b").exists(), (st, m)
    st, m = rpc(td, "Remove", {"path": str(closed / "sub")})
    assert st == 200 and not (closed / "sub").exists(), (st, m)
    # the file actions too (termd's own protocol, as the same user)
    st, m = rpc(td, "Stat", {"path": str(closed / "inside")})
    assert st == 200


def test_root_capable_move_remove_list_stat_never_follow_the_users_links(
        termd_factory, sudo_all_user, closed, base):
    """The user's own folder holds links to root's folders: Stat, ListDir,
    Move and Remove through them are refused, root capable or not, and
    root's files are where they were."""
    from test_watch_stdin_stream_bounds import start
    pw = pwd.getpwnam(sudo_all_user)
    udir = base / "udir"
    udir.mkdir()
    os.chown(udir, pw.pw_uid, pw.pw_gid)
    rootdir = base / "rootdir"
    for name, target in (("dl", rootdir), ("cl", closed), ("fl", closed / "inside")):
        os.symlink(target, udir / name)
        os.lchown(udir / name, pw.pw_uid, pw.pw_gid)
    td = start(termd_factory, "--user", sudo_all_user)
    st, m = rpc(td, "Stat", {"path": str(udir / "cl" / "inside")})
    assert st != 200, (st, m)
    for p in (udir / "cl", udir / "dl"):
        st, m = rpc(td, "ListDir", {"path": str(p)})
        assert st != 200 or all("inside" != e["name"] for e in m["entries"]), (p, st, m)
    st, m = rpc(td, "ListDir", {"path": str(udir / "cl")})
    assert st != 200, (st, m)
    st, m = rpc(td, "Move", {"source": str(udir / "dl" / "a"), "destination": str(udir / "dl" / "b")})
    assert st != 200, (st, m)
    st, m = rpc(td, "Move", {"source": str(rootdir / "a"), "destination": str(udir / "cl" / "a")})
    assert st != 200, (st, m)
    st, m = rpc(td, "Move", {"source": str(udir / "cl" / "inside"), "destination": str(udir / "x")})
    assert st != 200, (st, m)
    st, m = rpc(td, "Remove", {"path": str(udir / "dl" / "a")})
    st2, m2 = rpc(td, "Remove", {"path": str(udir / "cl" / "sub")})
    assert (rootdir / "a").read_text() == "a\n"
    assert (closed / "inside").read_text() == "in\n"
    assert (closed / "sub" / "deep").read_text() == "deep\n"
    assert not (closed / "a").exists() and not (udir / "x").exists()
    # the user's own link is the user's to remove (as the user)
    st, m = rpc(td, "Remove", {"path": str(udir / "fl")})
    assert st == 200 and not os.path.lexists(udir / "fl") and (closed / "inside").exists()


def test_user_without_sudo_is_refused_move_remove_list_stat(termd_factory, closed, base):
    from test_watch_stdin_stream_bounds import start
    td = start(termd_factory, "--user", "nobody")
    rootdir = base / "rootdir"
    for method, msg in (("Stat", {"path": str(closed / "inside")}),
                        ("ListDir", {"path": str(closed)}),
                        ("Move", {"source": str(rootdir / "a"), "destination": str(rootdir / "b")}),
                        ("Remove", {"path": str(rootdir / "a")}),
                        ("Remove", {"path": str(closed / "sub")})):
        st, m = rpc(td, method, msg)
        assert st != 200 and m["code"] == "permission_denied", (method, st, m)
    assert (rootdir / "a").exists() and (closed / "sub" / "deep").exists()


HOG = r'''
import resource, socket, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
socks = []
for i in range(6000):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    socks.append(s)
print("HELD", flush=True)
sys.stdin.readline()
'''


def test_a_program_holding_more_ports_than_termd_follows(termd, tmp_path):
    """6000 listening sockets at once (termd follows 4096): termd answers,
    lists at most 4096, and once the program ends lists none and a new
    server's port is listed again."""
    sub = tdtest.subscribed(termd)
    ev = termd.events()
    prog = tmp_path / "hog.py"
    prog.write_text(HOG)
    o = tdtest.run_obs(ev, "%s %s" % (sys.executable, prog), timeout=5)
    wait_until(lambda: "HELD" in json.dumps(ev.call("run", {"command": "", "timeout": 1},
                                                    timeout=T)), timeout=120, what="the hog")
    n = wait_until(lambda: len(ev.call("ports.list", {}, timeout=T)["extras"]["ports"]) or None,
                   timeout=30, what="ports listed")
    assert n <= 4096, n
    assert termd.healthz()[0] == 200
    o = ev.call("run", {"command": "done", "is_input": True, "timeout": 30}, timeout=T)
    assert o["extras"].get("running") is False, fmt(o)
    wait_until(lambda: not ev.call("ports.list", {}, timeout=T)["extras"]["ports"],
               timeout=30, what="ports.list empty")
    from test_ports import serve, kill
    port = tdtest.free_port()
    pid = serve(ev, port, "127.0.0.1")
    try:
        w = ev.call("port.wait", {"port": port, "timeout": 30}, timeout=T)
        assert w["extras"]["ready"] is True, fmt(w)
    finally:
        kill(pid)
    tdtest.drain(sub, 0.1)


LISTEN = r'''
import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(1)
print("LISTENING", flush=True)
sys.stdin.readline()
'''


def test_a_listeners_hostile_name_is_clean_in_port_events_and_termctl(termd, tmp_path):
    """A program named with an escape sequence, a bell and invalid UTF-8
    (and a name cut at 255 bytes inside a UTF-8 character) listens: its
    port.open, ports.list and termctl ports carry valid UTF-8 with no
    control character, and the /events stream stays readable."""
    sub = tdtest.subscribed(termd)
    ev = termd.events()
    prog = tmp_path / "l.py"
    prog.write_text(LISTEN)
    port = tdtest.free_port()
    sh = tmp_path / "l.sh"
    # argv[0] hostile; a long argument whose 255th byte is inside "é"
    pad = "x" * (255 - 60)
    sh.write_text("exec -a \"$(printf 'p\\033[2Jx\\007\\377')\" %s %s %d %s%s\n"
                  % (sys.executable, prog, port, pad, "é" * 40))
    o = tdtest.run_obs(ev, "bash %s" % sh, timeout=5)
    wait_until(lambda: "LISTENING" in json.dumps(ev.call("run", {"command": "", "timeout": 1},
                                                         timeout=T)), timeout=60, what="listen")
    from test_ports import wait_event, is_open
    o = wait_event(sub, is_open(port), 30, "port.open")
    for cmd in (o["extras"]["command"],
                [p for p in ev.call("ports.list", {}, timeout=T)["extras"]["ports"]
                 if p["port"] == port][0]["command"]):
        assert clean(cmd) and "\ufffd" in cmd and cmd.startswith("p?[2Jx?"), repr(cmd)
    r = termd.termctl("ports")
    assert r.returncode == 0 and str(port) in r.stdout, r
    assert clean(r.stdout.replace("\n", "")), repr(r.stdout)
    ev.call("run", {"command": "", "is_input": True, "timeout": 10}, timeout=T)


def test_a_file_named_with_bytes_that_are_not_utf8_never_breaks_the_stream(termd, ev):
    """A program makes a file named b"bad\\xff" in a watched folder: the
    watch.event every subscriber gets, and file.list's answer, are UTF-8
    (U+FFFD for the byte) and the /events stream stays readable (before:
    a text frame that is not UTF-8: every subscribed client failed)."""
    sub = tdtest.subscribed(termd)
    d = termd.home / "w"
    d.mkdir()
    o = ev.call("watch", {"path": str(d)}, timeout=T)
    assert o.get("observation") == "watch", fmt(o)
    open(os.path.join(os.fsencode(d), b"bad\xff\x1b[2J"), "w").close()
    (d / "end").write_text("")
    names = []
    while "end" not in names:
        o = sub.recv_obs(T)
        if o.get("observation") == "watch.event":
            names.append(o["extras"]["name"])
    assert "bad\ufffd\x1b[2J" in names, names
    ls = ev.call("file.list", {"path": str(d)}, timeout=T)
    assert sorted(e["name"] for e in ls["extras"]["entries"]) == ["bad\ufffd\x1b[2J", "end"], fmt(ls)
    assert ev.call("ping", {}, timeout=T).get("observation") != "error"
