"""The live terminal channel /tty/<session> (PROTOCOL.md section 6): size and
snapshot on attach, output after it, read-only vs read-write, input and
resize from a writer, the events they cause, and refusals before upgrade."""
import json
import time

import pytest

import tdtest
from tdtest import subscribed
import wsclient

TTY = "termd.tty.v1"


def attach(termd, session="main", mode=None, token=None):
    path = "/tty/" + session + ("?mode=" + mode if mode else "")
    return wsclient.connect(termd.url, path, TTY, token=token)


def frame(ws, timeout=10.0):
    op, payload = ws.recv(timeout)
    assert op == 2, "tty frames are binary"
    return chr(payload[0]), payload[1:]


def frames_until(ws, pred, timeout=15.0):
    """Collect frames until pred(list) is true."""
    got = []
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            got.append(frame(ws, max(0.1, deadline - time.time())))
        except wsclient.WSError:
            break
        except TimeoutError:
            break
        if pred(got):
            return got
    raise AssertionError("condition not met; frames: %r" % [(t, p[:80]) for t, p in got])


def events_until(ev, pred, timeout=15.0):
    got = []
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            o = ev.recv_obs(max(0.1, deadline - time.time()))
        except Exception:
            break
        got.append(o)
        if pred(o):
            return got
    raise AssertionError("event not seen; got %r" % [(o["observation"], o["extras"]) for o in got])


def test_size_then_snapshot_with_colours(termd, ev):
    tdtest.run_done(ev, "printf '\\033[31mred\\033[0m plain\\n'")
    ws = attach(termd)
    t, p = frame(ws)
    assert t == "Z"
    assert json.loads(p) == {"cols": 160, "rows": 48}
    t, p = frame(ws)
    assert t == "S"
    snap = p.decode()
    assert "\x1b[0;31;49mred" in snap, snap        # red kept as a colour
    assert "plain" in snap
    assert snap.startswith("\x1b[?1049l")           # primary screen
    assert "\x1b[?25h" in snap                     # cursor visible


def test_snapshot_keeps_bright_colours_foreground_and_background(termd, ev):
    # SGR 90-97 / 100-107 (the bright eight) come back as themselves: a
    # bright foreground is not painted as a bright background, nor the reverse
    tdtest.run_done(ev, "printf '\\033[91mBRFG\\033[0m \\033[102mBRBG\\033[0m\\n'")
    ws = attach(termd)
    assert frame(ws)[0] == "Z"
    t, p = frame(ws)
    assert t == "S"
    snap = p.decode()
    assert "\x1b[0;91;49mBRFG" in snap, snap
    assert "\x1b[0;39;102mBRBG" in snap, snap


def test_output_follows_snapshot_in_order(termd, ev):
    ws = attach(termd)
    frame(ws), frame(ws)
    tdtest.run_done(ev, "for i in 1 2 3; do echo line$i; done")
    got = frames_until(ws, lambda fs: b"line3" in b"".join(p for t, p in fs if t == "O"))
    out = b"".join(p for t, p in got if t == "O")
    assert out.index(b"line1") < out.index(b"line2") < out.index(b"line3")


def test_snapshot_shows_full_screen_program(termd, ev):
    vim = tdtest.find_vim()
    if not vim:
        pytest.skip("no vim")
    obs = tdtest.run(ev, "%s -u NONE" % vim, timeout=3)
    assert obs["extras"]["alt_screen"] is True
    ws = attach(termd)
    frame(ws)
    t, p = frame(ws)
    assert t == "S"
    assert p.startswith(b"\x1b[?1049h")             # the alternate screen is on
    assert b"~" in p
    ev.call("keys", {"keys": ["Escape", ":q!", "Enter"]})


def test_title_frames(termd, ev):
    ws = attach(termd)
    frame(ws), frame(ws)
    tdtest.run_done(ev, "printf '\\033]2;my-title\\007'")
    got = frames_until(ws, lambda fs: any(t == "T" for t, _ in fs))
    assert [p for t, p in got if t == "T"][-1] == b"my-title"
    assert ev.call("screen", {})["extras"]["title"] == "my-title"
    # a viewer attaching later gets the title after its snapshot
    late = attach(termd)
    kinds = [frame(late)[0] for _ in range(3)]
    assert kinds == ["Z", "S", "T"]


def test_read_only_cannot_type_or_resize(termd, ev):
    ws = attach(termd, mode="ro")
    frame(ws), frame(ws)
    # (the shell's output may come between: only 'O' frames)
    ws.send_binary(b"Itouch /tmp/termd-ro-should-not-exist\r")
    got = frames_until(ws, lambda fs: any(t == "E" for t, _ in fs))
    assert [p for t, p in got if t == "E"] and b"read-only" in [p for t, p in got if t == "E"][0], got
    assert all(t in ("O", "E") for t, _ in got), got
    ws.send_binary(b'R{"cols":80,"rows":20}')
    got = frames_until(ws, lambda fs: any(t == "E" for t, _ in fs))
    assert any(t == "E" for t, _ in got) and all(t in ("O", "E") for t, _ in got), got
    obs = ev.call("screen", {})
    assert obs["extras"]["cols"] == 160
    assert "termd-ro-should-not-exist" not in obs["content"]


def test_writer_input_runs_and_is_reported(termd, ev):
    tdtest.run_done(ev, "true")
    sub = subscribed(termd)
    ws = attach(termd, mode="rw")
    frame(ws), frame(ws)
    ws.send_binary(b"Iecho from-viewer\r")
    got = events_until(sub, lambda o: o["observation"] == "command.end")
    kinds = [o["observation"] for o in got]
    assert "viewer.attach" in kinds
    ui = [o for o in got if o["observation"] == "user.input"]
    assert ui and ui[0]["extras"]["text"] == "echo from-viewer\r"
    start = [o for o in got if o["observation"] == "command.start"]
    assert start and start[0]["extras"]["by"] == "viewer"
    end = [o for o in got if o["observation"] == "command.end"][0]
    assert end["extras"]["exit_code"] == 0
    out = frames_until(ws, lambda fs: b"from-viewer\r\n" in b"".join(p for t, p in fs if t == "O"))
    assert out


def test_writer_resize(termd, ev):
    tdtest.run_done(ev, "true")   # the shell ready: its start prints nothing more
    sub = subscribed(termd)
    ws = attach(termd, mode="rw")
    frame(ws), frame(ws)
    ws.send_binary(b'R{"cols":100,"rows":30}')
    # the size comes back as the next 'Z' (output may come before it:
    # under ASan the prompt was once still on its way)
    got = frames_until(ws, lambda fs: any(t == "Z" for t, _ in fs))
    z = [p for t, p in got if t == "Z"]
    assert z and json.loads(z[0]) == {"cols": 100, "rows": 30}, got
    assert all(t in ("O", "Z") for t, _ in got), got
    got = events_until(sub, lambda o: o["observation"] == "session.resize")
    assert got[-1]["extras"] == {"session": "main", "cols": 100, "rows": 30}
    assert tdtest.content(tdtest.run_done(ev, "stty size")) == "30 100"
    ws.send_binary(b'R{"cols":"x"}')
    frames_until(ws, lambda fs: any(t == "E" for t, _ in fs))


def test_writer_resize_of_one_dimension(termd, ev):
    # a resize that keeps the width (or the height) still reaches the
    # program: only the rows change here
    tdtest.run_done(ev, "true")
    ws = attach(termd, mode="rw")
    frame(ws), frame(ws)
    ws.send_binary(b'R{"cols":160,"rows":30}')
    got = frames_until(ws, lambda fs: any(t == "Z" for t, _ in fs))
    assert json.loads([p for t, p in got if t == "Z"][0]) == {"cols": 160, "rows": 30}, got
    assert tdtest.content(tdtest.run_done(ev, "stty size")) == "30 160"
    ws.send_binary(b'R{"cols":100,"rows":30}')
    got = frames_until(ws, lambda fs: any(t == "Z" for t, _ in fs))
    assert json.loads([p for t, p in got if t == "Z"][0]) == {"cols": 100, "rows": 30}, got
    assert tdtest.content(tdtest.run_done(ev, "stty size")) == "30 100"


def test_exit_frame_when_session_ends(termd, ev):
    ev.call("session.open", {"name": "short", "command": "sleep 1; exit 7"})
    ws = attach(termd, "short")
    got = frames_until(ws, lambda fs: any(t == "X" for t, _ in fs))
    x = [p for t, p in got if t == "X"][0]
    assert json.loads(x) == {"exit_code": 7}


def test_detach_event(termd, ev):
    sub = subscribed(termd)
    ws = attach(termd)
    frame(ws), frame(ws)
    ws.close()
    got = events_until(sub, lambda o: o["observation"] == "viewer.detach")
    assert got[-1]["extras"] == {"session": "main", "mode": "ro"}


def test_unknown_session_and_path_refused(termd):
    with pytest.raises(wsclient.HandshakeError) as e:
        attach(termd, "nosuch")
    assert e.value.status == 404
    with pytest.raises(wsclient.HandshakeError) as e:
        wsclient.connect(termd.url, "/elsewhere", TTY)
    assert e.value.status == 404


def test_unknown_mode_refused_before_upgrade(termd):
    # mode is ro or rw; anything else is a 400 with a reason, not an upgrade
    with pytest.raises(wsclient.HandshakeError) as e:
        attach(termd, mode="write")
    assert e.value.status == 400
    assert frame(attach(termd, mode="ro"))[0] == "Z"


def test_view_token_is_read_only(termd_factory, tmp_path):
    vt = tmp_path / "view"
    vt.write_text("viewsecret\n")
    t = termd_factory(args=("--view-token-file", str(vt)), token="fullsecret")
    with pytest.raises(wsclient.HandshakeError) as e:
        attach(t, mode="ro")
    assert e.value.status == 401
    with pytest.raises(wsclient.HandshakeError) as e:
        attach(t, mode="rw", token="viewsecret")
    assert e.value.status == 403
    ws = attach(t, mode="ro", token="viewsecret")
    assert frame(ws)[0] == "Z"
    ws = attach(t, mode="rw", token="fullsecret")
    assert frame(ws)[0] == "Z"


def test_output_stream_byte_exact_around_a_title(termd, ev):
    # ~1 MB of output while the viewer does not read (run_done blocks):
    # its 'O' frames (pieces of the pty's reads, coalesced while queued)
    # must still add up to the pty's bytes exactly, with a title change in
    # the middle reported by one 'T' frame. The
    # whole output is under the viewer's queue cap: nothing may be dropped.
    ws = attach(termd)
    frame(ws), frame(ws)
    tdtest.run_done(ev, "seq 1 60000; printf '\\033]2;mid-title\\007'; seq 60001 120000; "
                        "echo stream-\"end\"", timeout=120)
    got = frames_until(ws, lambda fs: b"stream-end\r\n" in b"".join(p for t, p in fs if t == "O"),
                       timeout=60)
    assert "S" not in [t for t, _ in got], "a viewer under the cap was resnapshotted"
    assert [p for t, p in got if t == "T"] == [b"mid-title"]
    out = b"".join(p for t, p in got if t == "O")
    want = (b"".join(b"%d\r\n" % i for i in range(1, 60001)) + b"\x1b]2;mid-title\x07" +
            b"".join(b"%d\r\n" % i for i in range(60001, 120001)) + b"stream-end\r\n")
    assert want in out


def test_many_viewers_and_a_stalled_one(termd, ev):
    viewers = [attach(termd) for _ in range(5)]
    for v in viewers:
        frame(v), frame(v)
    stalled = attach(termd)          # never read
    tdtest.run_done(ev, "seq 1 300000 > /dev/null; seq 1 200000", timeout=120)
    obs = tdtest.run_done(ev, "echo after-flood")
    assert tdtest.content(obs) == "after-flood"
    for v in viewers:
        frames_until(v, lambda fs: b"after-flood" in b"".join(p for t, p in fs if t in "OS"),
                     timeout=60)
    stalled.abort()


def _peak_mb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    raise AssertionError("no VmHWM for pid %d" % pid)


def _sanitized(pid):
    """termd under valgrind or built with ASan: its memory is not termd's own."""
    with open("/proc/%d/maps" % pid) as f:
        maps = f.read()
    return "libasan" in maps or "valgrind" in maps or "vgpreload" in maps


def test_stalled_viewers_share_one_bounded_backlog(termd, ev):
    # 20 viewers that never read while ~12 MB go through the pty: each falls
    # more than the bound (2 MiB) behind and is dropped. termd keeps the
    # session's output once for all of them, so its peak memory grows about
    # as much as with no viewer at all, not by 20 backlogs (40 MiB).
    flood = "yes 0123456789012345678901234567890123456789012345678901234567890123456789 | head -n 170000"
    pid = termd.proc.pid
    if _sanitized(pid):
        pytest.skip("memory figures of a sanitized termd")
    tdtest.run_done(ev, flood, timeout=120)
    p0 = _peak_mb(pid)
    tdtest.run_done(ev, flood, timeout=120)
    alone = _peak_mb(pid) - p0
    viewers = [attach(termd) for _ in range(20)]
    for v in viewers:
        frame(v), frame(v)
    tdtest.run_done(ev, flood, timeout=120)
    viewed = _peak_mb(pid) - p0
    assert viewed - alone < 16, "peak grew %.1f MiB with 20 stalled viewers, %.1f without" % (
        viewed, alone)
    # each still works: it reads the rest, a fresh snapshot, and what follows
    obs = tdtest.run_done(ev, "echo after-\"stall\"")
    assert tdtest.content(obs) == "after-stall"
    for v in viewers[:3]:
        got = frames_until(v, lambda fs: b"after-stall" in b"".join(p for t, p in fs if t in "OS"),
                           timeout=60)
        assert "S" in [t for t, _ in got], "a viewer 12 MB behind was not resnapshotted"
    for v in viewers:
        v.abort()


def test_viewer_dropped_across_a_resize_learns_the_new_size(termd, ev):
    # A viewer that does not read falls more than 2 MiB behind and is
    # dropped; the session is resized meanwhile. When it reads again, the
    # fresh snapshot is preceded by a 'Z' with the new size, not left at
    # the old one (a dropped viewer's 'Z' used to be skipped or thrown away).
    stalled = attach(termd)
    t, p = frame(stalled)
    assert t == "Z" and json.loads(p) == {"cols": 160, "rows": 48}
    frame(stalled)
    tdtest.run_done(ev, "yes 0123456789012345678901234567890123456789 | head -n 100000",
                    timeout=120)
    writer = attach(termd, mode="rw")
    frame(writer), frame(writer)
    writer.send_binary(b'R{"cols":100,"rows":30}')
    frames_until(writer, lambda fs: ("Z", b'{"cols":100,"rows":30}') in fs)
    tdtest.run_done(ev, "echo after-\"resize\"")
    got = frames_until(stalled, lambda fs: b"after-resize" in b"".join(p for t, p in fs if t in "OS"),
                       timeout=60)
    types = [t for t, _ in got]
    assert "S" in types, "a viewer 4 MB behind was not resnapshotted"
    last_s = len(types) - 1 - types[::-1].index("S")
    sizes = [json.loads(p) for t, p in got[:last_s] if t == "Z"]
    assert sizes and sizes[-1] == {"cols": 100, "rows": 30}, sizes


def test_text_typed_before_first_prompt_names_the_command(termd_factory, tmp_path):
    """A viewer types before the shell's first prompt (its rc file is still
    running): the shell runs the line once its prompt is up, and
    command.start names it from the typed bytes."""
    home = tmp_path / "t0" / "home"
    home.mkdir(parents=True)
    # the rc file runs until the test has typed (a "sleep 2" could be over
    # before a loaded termd had started and attached the viewer: the line
    # would then be typed at the prompt, not before it)
    gate = tmp_path / "rc-gate"
    (home / ".bashrc").write_text("while [ ! -e %s ]; do sleep 0.1; done\n" % gate)
    termd = termd_factory()
    sub = subscribed(termd)
    ws = attach(termd, mode="rw")
    frame(ws), frame(ws)
    ws.send_binary(b"Iecho early-bird\r")
    # in the pty before the prompt: the tty (cooked while the rc file runs)
    # echoed it
    other = termd.events()
    tdtest.wait_until(lambda: "echo early-bird" in tdtest.content(other.call("screen", {})),
                      30, what="the typed line echoed before the prompt")
    gate.touch()
    got = events_until(sub, lambda o: o["observation"] == "command.start", timeout=30)
    start = got[-1]["extras"]
    assert start["command"] == "echo early-bird", got[-1]
    assert start["by"] == "viewer"
    end = events_until(sub, lambda o: o["observation"] == "command.end", timeout=30)[-1]
    assert end["extras"]["exit_code"] == 0


def test_oversized_frame_answered_and_connection_usable(termd, ev):
    # a client frame over termd's /tty limit (1 MiB) is answered with one 'E'
    # and dropped whole, as one frame or as fragments; the viewer goes on
    limit = 1024 * 1024
    ws = attach(termd, mode="rw")
    frame(ws), frame(ws)

    def chunks(total, first=b"I"):
        yield first
        left = total - len(first)
        while left:
            n = min(left, 64 * 1024)
            yield b"x" * n
            left -= n

    ws.send_large(wsclient.OP_BINARY, limit + 1, chunks(limit + 1), send_timeout=120)
    t, p = frames_until(ws, lambda fs: fs[-1][0] == "E")[-1]
    assert b"over the limit" in p and str(limit + 1).encode() in p, p

    # three fragments of one message, together over the limit
    part = 400 * 1024
    ws.send_frame(wsclient.OP_BINARY, b"I" + b"y" * (part - 1), fin=False)
    ws.send_frame(wsclient.OP_CONT, b"y" * part, fin=False)
    ws.send_frame(wsclient.OP_CONT, b"y" * part, fin=True)
    t, p = frames_until(ws, lambda fs: fs[-1][0] == "E")[-1]
    assert b"over the limit" in p and str(3 * part).encode() in p, p

    # still attached and typing: the next input runs, nothing of the
    # dropped frames reached the shell
    ws.send_binary(b"Iecho tty-after-$((6*7))\r")
    frames_until(ws, lambda fs: b"tty-after-42" in b"".join(p for t, p in fs if t == "O"))
    obs = ev.call("screen", {})
    assert "tty-after-42" in obs["content"]
    assert "xxxx" not in obs["content"] and "yyyy" not in obs["content"]
    ws.close()


def test_alternate_screen_first_used_after_resizes(termd, ev):
    # termd makes the alternate screen's rows when a program enters it and
    # drops them when it leaves: entered for the first time after a resize,
    # it has the new size (its last row and column usable); left, resized
    # again and entered again, it is blank and of the newer size; the
    # primary screen is back after each
    tdtest.run_done(ev, "true")   # the shell ready
    ws = attach(termd, mode="rw")
    frame(ws), frame(ws)

    def resize(cols, rows):
        ws.send_binary(b"R" + json.dumps({"cols": cols, "rows": rows}).encode())
        frames_until(ws, lambda fs: any(t == "Z" for t, _ in fs))
        assert tdtest.content(tdtest.run_done(ev, "stty size")) == "%d %d" % (rows, cols)

    def full_screen(rows, row, text, last):
        # a program on the alternate screen: `text` on `row`, `last` on the
        # last row (to its last column); it waits for Enter
        cmd = ("printf '\\033[?1049h\\033[%d;1H%s\\033[%d;1H%s'; read x; printf '\\033[?1049l'"
               % (row, text, rows, last))
        obs = tdtest.run_obs(ev, cmd, timeout=3)
        assert obs["extras"]["alt_screen"] is True, tdtest.fmt(obs)
        s = tdtest.wait_until(lambda: (lambda o: o if last in tdtest.content(o) else None)(
            ev.call("screen", {})), 20, 0.1, "the program's last row")
        want = [""] * rows
        want[row - 1], want[rows - 1] = text, last
        assert s["extras"]["alt_screen"] is True and s["extras"]["rows"] == rows, tdtest.fmt(s)
        assert tdtest.content(s).split("\n") == want, tdtest.fmt(s)
        ev.call("keys", {"keys": ["Enter"]})
        deadline = time.monotonic() + 30
        while True:   # the program's end may come just after the keys' answer
            obs = tdtest.run(ev, "echo back-$((6*7))")
            if (obs.get("extras") or {}).get("code") != "busy":
                break
            assert time.monotonic() < deadline, tdtest.fmt(obs)
            time.sleep(0.2)
        assert tdtest.content(obs) == "back-42" and obs["extras"]["alt_screen"] is False, tdtest.fmt(obs)
        s = ev.call("screen", {})
        ls = tdtest.lines(s)
        assert s["extras"]["alt_screen"] is False and "back-42" in ls, tdtest.fmt(s)
        assert text not in ls and last not in ls, tdtest.fmt(s)

    resize(100, 30)
    full_screen(30, 1, "first", "L" * 100)
    resize(60, 12)
    full_screen(12, 2, "second", "M" * 60)
