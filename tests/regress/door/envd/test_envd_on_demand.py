"""The work termd does for an envd process only when someone needs it
(issue 32 item 4), with every behaviour kept: a pipe session's screen is
fed when read (screen, a /tty viewer) from its kept output, and comes out
as if fed every byte — scrollback continuous across reads, a viewer
attaching late sees the same screen; envd's Start runs the program itself
as the request's user, the ids switched in the child (real, effective and
saved uid and gid, the user's supplementary groups, HOME), no setpriv."""

import json
import os
import secrets
import shutil
import subprocess
import time

import pytest

from tdtest import fmt
import wsclient
from test_envd import b64, events_of, start, stdout_of, stream, unb64  # noqa: F401

T = 60.0
TTY = "termd.tty.v1"


def call(ev, action, args=None):
    return ev.call(action, args, timeout=T)


def wait_exit(sub, name):
    o = sub.wait_for(lambda o: o.get("observation") == "session.exit"
                     and (o.get("extras") or {}).get("name") == name, T)
    assert o is not None, "no session.exit for %s" % name


def lines_of(content):
    return [ln.rstrip() for ln in content.split("\n") if ln.strip()]


def wait_screen(ev, name, last, timeout=T):
    """The screen once its last line is `last` (output comes as it comes)."""
    deadline = time.monotonic() + timeout
    while True:
        sc = call(ev, "screen", {"session": name})
        got = lines_of(sc.get("content", ""))
        if got and got[-1] == last:
            return sc
        assert time.monotonic() < deadline, "screen never ended with %r: %s" % (last, fmt(sc))
        time.sleep(0.05)


def test_pipe_screen_fed_when_read_keeps_screen_and_scrollback(termd_factory):
    """3000 numbered lines through a 20-row pipe session with 100 lines of
    scrollback, read once half-way: the screen and all 100 scrollback lines
    are the last ones in order, across the read (the kept output is cut
    many times before it is fed)."""
    td = termd_factory(args=("--scrollback", "100"))
    ev = td.events()
    sub = td.events()
    assert call(sub, "subscribe").get("observation") == "subscribe"
    o = call(ev, "session.open", {"name": "p", "kind": "pipe", "stdin": True, "rows": 20,
                                  "cols": 80, "command": "seq 1 1500; read x; seq 1501 3000"})
    assert o.get("observation") == "session.open", fmt(o)
    mid = wait_screen(ev, "p", "1500")
    assert lines_of(mid["content"]) == [str(i) for i in range(1482, 1501)], fmt(mid)
    o = call(ev, "session.stdin", {"session": "p", "content": "\n", "eof": True})
    assert o.get("observation") != "error", fmt(o)
    wait_exit(sub, "p")
    sc = call(ev, "screen", {"session": "p", "scrollback": 100})
    assert sc["extras"]["scrollback_lines"] == 100, fmt(sc)
    assert lines_of(sc["content"]) == [str(i) for i in range(2882, 3001)], fmt(sc)


def test_a_viewer_attaching_late_sees_the_same_screen(termd_factory):
    """A /tty viewer attaching after 3000 lines nobody looked at gets a
    snapshot of the lines a screen shows, the same the screen action says."""
    td = termd_factory()
    ev = td.events()
    sub = td.events()
    assert call(sub, "subscribe").get("observation") == "subscribe"
    o = call(ev, "session.open", {"name": "v", "kind": "pipe", "stdin": True, "rows": 10,
                                  "cols": 40, "command": "seq 1 3000; read x"})
    assert o.get("observation") == "session.open", fmt(o)
    # the output is all in (seen on the event stream: the screen untouched)
    sub.wait_for(lambda o: o.get("observation") == "session.output"
                 and (o.get("extras") or {}).get("session") == "v"
                 and o.get("content", "").endswith("3000\n"), T)
    ws = wsclient.connect(td.url, "/tty/v", TTY)
    op, p = ws.recv(T)
    assert chr(p[0]) == "Z" and json.loads(p[1:]) == {"cols": 40, "rows": 10}, p
    op, p = ws.recv(T)
    assert chr(p[0]) == "S", p[:80]
    snap = p[1:].decode()
    for i in range(2992, 3001):
        assert str(i) in snap, (i, snap)
    assert "2991" not in snap, snap
    ws.close()
    sc = call(ev, "screen", {"session": "v"})
    assert lines_of(sc["content"]) == [str(i) for i in range(2992, 3001)], fmt(sc)
    call(ev, "session.close", {"name": "v"})


@pytest.fixture
def grouped_user(tmp_path):
    """A throwaway user with its own home and one supplementary group,
    removed afterwards (needs root, useradd, groupadd)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create a throwaway user")
    for prog in ("useradd", "userdel", "groupadd", "groupdel"):
        if not shutil.which(prog):
            pytest.skip("%s is not installed" % prog)
    name = "tdef%s" % secrets.token_hex(3)
    extra = name + "x"
    home = tmp_path / ("home-" + name)
    subprocess.run(["groupadd", extra], check=True)
    try:
        subprocess.run(["useradd", "-M", "-d", str(home), "-s", "/bin/sh", "-G", extra, name],
                       check=True)
        home.mkdir()
        shutil.chown(home, name, name)
        yield name, extra, str(home)
    finally:
        subprocess.run(["userdel", "-f", name], check=False)
        subprocess.run(["groupdel", extra], check=False)


def test_start_runs_as_the_user_with_its_ids_groups_and_home(termd_factory, grouped_user):
    import grp
    import pwd
    name, extra, home = grouped_user
    pw = pwd.getpwnam(name)
    gx = grp.getgrnam(extra).gr_gid
    td = start(termd_factory, args=("--user", name))
    status, ctype, envs = stream(td, "process.Process/Start", {"process": {
        "cmd": "/bin/sh", "args": ["-c", "grep -E '^(Uid|Gid|Groups|CapEff):' /proc/self/status; "
                                   "echo \"HOME=$HOME USER=$USER\"; pwd"]}})
    assert status == 200, envs
    evs = events_of(envs)
    out = stdout_of(evs).decode()
    assert evs[-1]["end"]["exitCode"] in (0, None) and evs[-1]["end"]["status"] == "exit status 0", evs
    f = {ln.split(":", 1)[0]: ln.split(":", 1)[1].split() for ln in out.splitlines() if ":" in ln}
    assert f["Uid"] == [str(pw.pw_uid)] * 4, out
    assert f["Gid"] == [str(pw.pw_gid)] * 4, out
    assert sorted(int(g) for g in f["Groups"]) == sorted({pw.pw_gid, gx}), out
    assert f["CapEff"] == ["0000000000000000"], out
    assert "HOME=%s USER=%s" % (home, name) in out, out
    assert out.rstrip().splitlines()[-1] == home, out   # its home is the default cwd


def test_pipe_output_kept_for_the_screen_is_bounded(termd_factory):
    """40 MB on one line nobody looks at: what is kept for the screen stays
    within its 4 MiB (termd's peak RSS grows by less than the output), and
    the screen then shows the line's end."""
    from test_watch_stdin_stream_bounds import kib, sanitized
    td = termd_factory()
    pid = td.proc.pid
    ev = td.events()   # (no subscriber: its queue would hold the output events)
    base = kib(pid, "VmHWM")
    o = call(ev, "session.open", {"name": "flat", "kind": "pipe", "rows": 5, "cols": 40,
                                  "command": "head -c 40000000 /dev/zero | tr '\\0' x; echo; echo end"})
    assert o.get("observation") == "session.open", fmt(o)
    deadline = time.monotonic() + T
    while True:
        ls = call(ev, "session.list")
        me = [x for x in ls["extras"]["sessions"] if x["name"] == "flat"]
        if me and not me[0]["alive"]:
            break
        assert time.monotonic() < deadline, fmt(ls)
        time.sleep(0.05)
    grew = (kib(pid, "VmHWM") - base) / 1024
    print("40 MB on one line: termd's peak RSS +%.1f MiB" % grew)
    assert sanitized(pid) or grew < 24, grew
    sc = call(ev, "screen", {"session": "flat"})
    got = lines_of(sc["content"])
    assert len(got) >= 2 and got[-1] == "end" and got[-2] == "x" * 40, fmt(sc)


def test_output_past_the_kept_share_with_nobody_subscribed_leaves_the_same_notes(termd_factory):
    """Past a pipe session's kept 4 MiB with no subscriber, only the notes
    are built: a client subscribing later from before the flood replays
    the kept events whole and the same notes (bytes, kept: false, "")."""
    td = termd_factory()
    ev = td.events()
    first = call(ev, "ping")["seq"]
    total = 6 * 1024 * 1024
    o = call(ev, "session.open", {"name": "big", "kind": "pipe",
                                  "command": "head -c %d /dev/zero | tr '\\0' x" % total})
    assert o.get("observation") == "session.open", fmt(o)
    deadline = time.monotonic() + T
    while True:
        me = [x for x in call(ev, "session.list")["extras"]["sessions"] if x["name"] == "big"]
        if me and not me[0]["alive"]:
            break
        assert time.monotonic() < deadline
        time.sleep(0.05)
    late = td.events()
    late.send_action("subscribe", {"since": first})
    kept = noted = 0
    while True:
        o = late.recv_obs(T)
        assert o is not None
        if o.get("observation") == "subscribe":
            break
        x = o.get("extras") or {}
        if o.get("observation") == "session.output" and x.get("session") == "big":
            assert x["stream"] == "stdout", fmt(o)
            if x.get("kept") is False:
                assert o["content"] == "" and x["encoding"] == "utf-8", fmt(o)
                noted += x["bytes"]
            else:
                assert o["content"] == "x" * x["bytes"], fmt(o)
                kept += x["bytes"]
    assert kept + noted == total, (kept, noted)
    assert 0 < kept <= 4 * 1024 * 1024 and noted >= 2 * 1024 * 1024, (kept, noted)
