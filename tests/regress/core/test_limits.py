"""termd's configurable limits (termd --help, "limits:"): sessions per
instance, viewers per session, pending bytes per /events connection,
scrollback lines, a command's in-memory output; bad limit values refused at
start-up. (--max-frame and --retain have their own tests in
test_health_events.py and test_events_stream.py.)"""
import os
import subprocess

import pytest

import tdtest
import wsclient
from conftest import TERMD_BIN, base_env
from tdtest import assert_error, content, fmt, run_done, socket_fds, wait_until

TTY = wsclient.TTY_SUBPROTOCOL


def session_names(ev):
    obs = ev.call("session.list", {})
    assert obs.get("observation") == "session.list", fmt(obs)
    return [s["name"] for s in obs["extras"]["sessions"]]


# ------------------------------------------------------------- sessions

def test_max_sessions(termd_factory):
    t = termd_factory(args=["--max-sessions", "3"])
    ev = t.events()
    for name in ("s1", "s2"):
        o = ev.call("session.open", {"name": name})
        assert o.get("observation") == "session.open", fmt(o)
    # the fourth (main + 2 + this one): refused, clearly, nothing started
    o = ev.call("session.open", {"name": "s3"})
    assert_error(o, "too_large")
    assert "--max-sessions" in o["content"], fmt(o)
    # a run naming a new session would open one: refused the same way
    o = ev.call("run", {"command": "echo hi", "session": "s4"}, timeout=30)
    assert_error(o, "too_large")
    assert session_names(ev) == ["main", "s1", "s2"]
    # existing sessions keep working
    assert content(run_done(ev, "echo still", session="s1")) == "still"
    # closing one makes room again
    o = ev.call("session.close", {"name": "s2"})
    assert o.get("observation") == "session.close", fmt(o)
    o = ev.call("session.open", {"name": "s3"})
    assert o.get("observation") == "session.open", fmt(o)
    assert content(run_done(ev, "echo in-s3", session="s3")) == "in-s3"


# -------------------------------------------------------------- viewers

def _tty_status(url, session, token=None):
    try:
        ws = wsclient.connect(url, "/tty/" + session, TTY, token=token)
    except wsclient.HandshakeError as e:
        return e.status, None
    return 101, ws


def test_max_viewers_per_session(termd_factory):
    t = termd_factory(args=["--max-viewers", "2"])
    ev = t.events()
    o = ev.call("session.open", {"name": "other"})
    assert o.get("observation") == "session.open", fmt(o)
    held = []
    for _ in range(2):
        st, ws = _tty_status(t.url, "main")
        assert st == 101
        held.append(ws)
    # a third on the same session: 503 before any upgrade
    st, ws = _tty_status(t.url, "main")
    assert st == 503, "third viewer got %s" % st
    # the limit is per session
    st, ws = _tty_status(t.url, "other")
    assert st == 101
    held.append(ws)

    def viewers(name):
        for s in ev.call("session.list", {})["extras"]["sessions"]:
            if s["name"] == name:
                return s["viewers"]
    assert viewers("main") == 2
    # one leaves: room for another
    held[0].close()
    wait_until(lambda: viewers("main") == 1, what="viewer count back to 1")
    st, ws = _tty_status(t.url, "main")
    assert st == 101
    held.append(ws)
    for w in held[1:]:
        w.abort()


# ------------------------------------------------------ pending bytes

def client_sockets(pid, ev):
    """termd's sockets less the one it holds for each spare stub (cgroup
    v1: forked 50 ms after a session opened, they come and go on their
    own): its children that lead no session"""
    leaders = {s["pid"] for s in ev.call("session.list", {})["extras"]["sessions"]}
    stubs = 0
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) not in leaders:
            try:
                with open("/proc/%s/stat" % d) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            stubs += ppid == pid
    return socket_fds(pid, spares=True) - stubs


def test_max_pending_drops_a_client_that_does_not_read(termd_factory, tmp_path):
    t = termd_factory(args=["--max-pending", "65536", "--retain", "50"])
    fast = t.events()
    run_done(fast, "true")
    seen = []   # (a stub being forked holds its socket a moment before it is a child)
    base = wait_until(lambda: (seen.append(client_sockets(t.proc.pid, fast)) or
                               seen[-2:] == seen[-1:] * 2) and seen[-1], timeout=20,
                      what="termd's sockets to settle")
    slow = t.events()
    assert slow.call("subscribe", {}).get("observation") == "subscribe"
    wait_until(lambda: client_sockets(t.proc.pid, fast) == base + 1, timeout=20,
               what="one socket more for the second client")
    # `slow` never reads from here on. Each answer below (about 200 kB) is
    # also sent to it as a subscriber: the kernel's socket buffers fill,
    # then termd's queue for it passes 64 KiB and it is dropped.
    big = tmp_path / "big.txt"
    big.write_text(("z" * 99 + "\n") * 2000)
    for i in range(200):
        r = fast.call("read", {"path": str(big)})
        assert r.get("observation") == "read", fmt(r)
        if client_sockets(t.proc.pid, fast) == base:
            break
    wait_until(lambda: client_sockets(t.proc.pid, fast) == base, timeout=20,
               what="the non-reading client to be dropped")
    said = [ln for ln in t.log.read_text(errors="replace").splitlines() if "not reading" in ln]
    assert said, "termd did not log why it dropped the client"
    # the reading client is unaffected
    assert content(run_done(fast, "echo ok")) == "ok"
    slow.ws.abort()


# ------------------------------------------------------------ scrollback

def test_scrollback_lines(termd_factory):
    t = termd_factory(args=["--scrollback", "50"])
    ev = t.events()
    run_done(ev, "clear")
    run_done(ev, "seq 1 300")
    # run answers at the shell's done mark; its prompt is drawn just after:
    # compare screens once it is there (the cursor after it)
    scr = wait_until(lambda: (lambda o: o if o["extras"]["cursor"]["col"] > 0 else None)(
        ev.call("screen", {})), what="the prompt after seq")
    assert scr["extras"]["scrollback_lines"] == 50, fmt(scr)
    visible = scr["content"].split("\n")
    assert len(visible) == scr["extras"]["rows"]

    full = ev.call("screen", {"scrollback": 1000})
    assert full.get("observation") == "screen", fmt(full)
    got = full["content"].split("\n")
    # 50 history lines, then the screen as before
    assert len(got) == 50 + len(visible), len(got)
    assert got[50:] == visible
    nums = [int(x) for x in got if x.isdigit()]
    # numbers are consecutive and end at 300; history reaches back exactly
    # 50 lines above the screen
    assert nums == list(range(nums[0], 301)), nums[:5]
    on_screen = [x for x in visible if x.isdigit()]
    assert nums[0] == int(on_screen[0]) - 50

    some = ev.call("screen", {"scrollback": 10})["content"].split("\n")
    assert some == got[40:]
    every = ev.call("screen", {"scrollback": True})["content"].split("\n")
    assert every == got
    assert ev.call("screen", {"scrollback": 0})["content"] == scr["content"]
    assert_error(ev.call("screen", {"scrollback": -1}), "bad_request")
    assert_error(ev.call("screen", {"scrollback": "x"}), "bad_request")


def test_scrollback_grows_to_its_limit_then_wraps(termd_factory):
    """The ring's slots are made as lines come (64, 128, then the limit):
    past 200 lines it holds the last 200 exactly, in order, and no more."""
    t = termd_factory(args=["--scrollback", "200"])
    ev = t.events()
    run_done(ev, "clear")
    for upto in (100, 700):   # part of the way (grown, not wrapped), then past it
        run_done(ev, "seq %d %d" % (upto - 99 if upto == 100 else 101, upto))
        scr = wait_until(lambda: (lambda o: o if o["extras"]["cursor"]["col"] > 0 else None)(
            ev.call("screen", {})), what="the prompt after seq")
        visible = scr["content"].split("\n")
        full = ev.call("screen", {"scrollback": True})["content"].split("\n")
        assert full[-len(visible):] == visible
        nums = [int(x) for x in full if x.isdigit()]
        assert nums == list(range(nums[0], upto + 1)), nums[:5]
        if upto == 700:
            assert scr["extras"]["scrollback_lines"] == 200, fmt(scr)
            on_screen = [x for x in visible if x.isdigit()]
            assert nums[0] == int(on_screen[0]) - 200
        else:
            assert nums[0] == 1, nums[:5]
            assert scr["extras"]["scrollback_lines"] < 200, fmt(scr)


def test_scrollback_zero_keeps_none(termd_factory):
    t = termd_factory(args=["--scrollback", "0"])
    ev = t.events()
    run_done(ev, "seq 1 200")
    scr = ev.call("screen", {"scrollback": 100})
    assert scr["extras"]["scrollback_lines"] == 0
    assert len(scr["content"].split("\n")) == scr["extras"]["rows"]


def test_scrollback_not_fed_by_the_alternate_screen(termd_factory):
    t = termd_factory(args=["--scrollback", "100"])
    ev = t.events()
    run_done(ev, "clear")
    before = ev.call("screen", {})["extras"]["scrollback_lines"]
    # 200 lines printed on the alternate screen scroll it, not history
    cmd = ("printf '\\033[?1049h'; for i in $(seq 1 200); do echo alt$i; done; "
           "printf '\\033[?1049l'")
    run_done(ev, cmd)
    scr = ev.call("screen", {"scrollback": 100})
    assert "alt" not in scr["content"].replace("alt$i", ""), fmt(scr)
    assert scr["extras"]["scrollback_lines"] == before


# ------------------------------------------------------ output in memory

def output_files(tmpdir):
    """termd's spilled output files under its runtime dir in tmpdir."""
    found = []
    for d in tmpdir.glob("termd-*"):
        found += [f for f in d.glob("output-*.txt")]
    return found


@pytest.mark.parametrize("limit,spilled", [("4096", True), (None, False)])
def test_output_mem_limit(termd_factory, tmp_path, limit, spilled):
    rt = tmp_path / "rt"
    rt.mkdir()
    args = ["--output-mem", limit] if limit else []
    t = termd_factory(args=args, env={"TMPDIR": str(rt)})
    ev = t.events()
    # about 14 kB of output, then the command keeps running
    obs = tdtest.run_obs(ev, "seq 1 3000; sleep 60", timeout=2, max_output=100000)
    assert obs["extras"]["running"] is True, fmt(obs)
    assert content(obs).split("\n") == [str(i) for i in range(1, 3001)]
    files = output_files(rt)
    if spilled:
        # past 4 kB the output lives in its file, not in termd's memory
        assert len(files) == 1, files
        assert files[0].stat().st_size >= 4096
        with open(files[0]) as f:
            assert f.read().startswith("1\n2\n3\n")
    else:
        # the default keeps 1 MiB in memory: no file yet
        assert files == [], files
    ev.call("session.signal", {"signal": "INT"})
    obs = tdtest.run_obs(ev, "", timeout=30)
    assert obs["extras"]["running"] is False, fmt(obs)


def test_output_mem_truncated_answer_names_the_whole_file(termd_factory):
    t = termd_factory(args=["--output-mem", "4096"])
    ev = t.events()
    obs = run_done(ev, "seq 1 3000", max_output=200)
    x = obs["extras"]
    assert x["truncated"] is True, fmt(obs)
    with open(x["output_file"]) as f:
        assert f.read().split() == [str(i) for i in range(1, 3001)]
    c = content(obs)
    assert c.startswith("1\n2\n") and c.endswith("2999\n3000"), fmt(obs)


# ------------------------------------------------------ bad limit values

@pytest.mark.parametrize("opt,val", [
    ("--max-sessions", "0"), ("--max-sessions", "x"), ("--max-viewers", "-1"),
    ("--max-pending", "10"), ("--scrollback", "1e3"), ("--output-mem", ""),
    ("--max-frame", "99999999999999999999999"), ("--retain", "0"),
])
def test_bad_limit_is_refused(tmp_path, opt, val):
    home = tmp_path / "home"
    home.mkdir()
    p = subprocess.run([TERMD_BIN, "--listen", "unix:%s/s" % tmp_path, "--cwd", str(home), opt, val],
                       env=base_env(home), capture_output=True, text=True, timeout=20,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert opt in p.stderr, p.stderr
