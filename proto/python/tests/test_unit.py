"""Unit tests of the termd package against a scripted fake server
(fakeserver.py): framing, typed results, error classes, re-sending in-flight
actions after a drop, giving up, the caller's wait, events() resuming and
gaps, /tty frame parsing."""

import asyncio
import json
import logging
import re
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import termd  # noqa: E402
from fakeserver import FakeServer  # noqa: E402

FAST = dict(retry_for=3.0, backoff=(0.01, 0.1))


async def answer_all(n, c):
    """hello, then answer every action with a canned observation."""
    await c.hello()
    while True:
        a = await c.recv()
        if a["action"] == "run":
            await c.answer(a, content="out", extras={"exit_code": 3, "running": False, "cwd": "/x",
                                                     "waiting_for_input": True, "timed_out": "idle",
                                                     "waiting": {"kind": "password", "prompt": "Password:",
                                                                 "pid": 42, "command": "sudo true"},
                                                     "future_field": 7})
        elif a["action"] == "screen":
            await c.answer(a, content="a\nb", extras={"cols": 80, "rows": 2, "cursor": {"row": 1, "col": 1},
                                                      "alt_screen": False, "title": "t"})
        else:
            await c.answer(a, content=json.dumps(a.get("args")))


def test_frame_shape_headers_and_typed_result():
    with FakeServer(answer_all) as srv:
        t = termd.Termd(srv.url, token="s3cret", **FAST)
        r = t.run("ls", timeout=5, session=None)
        s = t.screen("w")
        p = t.ping()
        t.close()
    run, screen, ping = srv.actions("run")[0], srv.actions("screen")[0], srv.actions("ping")[0]
    assert re.fullmatch(r"[0-9a-f]{32}", run["id"]) and run["id"] != ping["id"]
    assert run == {"id": run["id"], "action": "run", "args": {"command": "ls", "timeout": 5}}
    assert screen["args"] == {"session": "w"}
    assert "args" not in ping                      # empty args left out
    c = srv.conns[0]
    assert c.headers.get("authorization") == "Bearer s3cret"
    assert c.subprotocol == "termd.events.v1" and c.path == "/events"
    assert isinstance(r, termd.RunResult)
    assert (r.output, r.exit_code, r.cwd, r.waiting_for_input, r.timed_out, r.running) == \
        ("out", 3, "/x", True, "idle", False)
    assert r.extras["future_field"] == 7 and r.cause == run["id"]
    assert r.waiting == termd.Waiting("password", "Password:", 42, "sudo true")
    assert isinstance(s, termd.Screen) and s.cursor == termd.Cursor(1, 1) and s.lines == ["a", "b"]
    assert p.observation == "ping"


def test_screen_cursor_is_row_then_column():
    s = termd.Screen.from_dict({"observation": "screen", "content": "ab\ncd",
                                "extras": {"cols": 80, "rows": 2, "cursor": {"row": 1, "col": 2}}})
    assert s.cursor == termd.Cursor(1, 2) and (s.cursor.row, s.cursor.col) == (1, 2), s.cursor


def test_generic_call_and_every_arg_reachable():
    with FakeServer(answer_all) as srv:
        t = termd.Termd(srv.url, **FAST)
        t.call("whatever", {"a": 1}, b=[2])
        t.run("x", is_input=True, idle_timeout=2, max_output=10, brand_new=True)
        t.edit("insert", "/f", insert_line=0, new_str="n", view_range=(1, 2))
        t.sessions.open("s", "cmd", cwd="/", env={"A": "1"}, cols=10, rows=5)
        t.files.write("/b", b"\x00\xff", mode="0600", expected_sha256="ab")
        t.close()
    assert srv.actions("whatever")[0]["args"] == {"a": 1, "b": [2]}
    assert srv.actions("run")[0]["args"] == {"command": "x", "is_input": True, "idle_timeout": 2,
                                             "max_output": 10, "brand_new": True}
    assert srv.actions("edit")[0]["args"] == {"command": "insert", "path": "/f", "insert_line": 0,
                                              "new_str": "n", "view_range": [1, 2]}
    assert srv.actions("session.open")[0]["args"] == {"name": "s", "command": "cmd", "cwd": "/",
                                                      "env": {"A": "1"}, "cols": 10, "rows": 5}
    assert srv.actions("write")[0]["args"] == {"path": "/b", "content": "AP8=", "encoding": "base64",
                                               "mode": "0600", "expected_sha256": "ab"}


def test_every_error_code_has_its_class():
    async def script(n, c):
        await c.hello()
        while True:
            a = await c.recv()
            await c.answer(a, observation="error", content="msg " + a["args"]["code"],
                           extras={"code": a["args"]["code"]})
    codes = ["bad_json", "bad_request", "unknown_action", "no_such_session", "session_exists", "busy",
             "no_command", "too_large", "not_found", "is_directory", "binary_file", "io_error", "mismatch",
             "forbidden", "plugin_failed", "internal"]
    assert sorted(termd.ERRORS) == sorted(codes)
    with FakeServer(script) as srv:
        t = termd.Termd(srv.url, **FAST)
        for code in codes + ["brand_new_code"]:
            with pytest.raises(termd.TermdError) as ei:
                t.call("x", code=code)
            e = ei.value
            assert type(e) is termd.ERRORS.get(code, termd.TermdError), (code, type(e))
            assert e.code == code and e.message == "msg " + code
            assert e.observation["observation"] == "error"
        t.close()
    assert termd.BusyError.__name__ == "BusyError" and not issubclass(termd.IsDirectoryError, OSError)


def test_in_flight_action_resent_with_same_id_after_drop():
    async def script(n, c):
        await c.hello()
        a = await c.recv()
        if n == 0:
            c.abort()            # the connection dies with the action unanswered
            return
        await c.answer(a, extras={"exit_code": 0, "replayed": True})
        while True:
            await c.recv()
    with FakeServer(script) as srv:
        t = termd.Termd(srv.url, **FAST)
        r = t.run("make", wait=10)
        assert t.reconnects == 1
        t.close()
    runs = srv.actions("run")
    assert len(runs) == 2 and runs[0] == runs[1], runs      # same frame, same id
    assert r.exit_code == 0 and r.replayed


def test_connection_dropped_before_the_action_is_reopened():
    async def script(n, c):
        await c.hello()
        if n == 0:
            c.abort()
            return
        while True:
            a = await c.recv()
            await c.answer(a)
    with FakeServer(script) as srv:
        t = termd.Termd(srv.url, **FAST)
        time.sleep(0.2)
        assert t.ping().observation == "ping"
        t.close()


def test_gives_up_after_retry_for_with_a_clear_error():
    async def script(n, c):
        await c.hello()
        await c.recv()
        await asyncio.sleep(0.2)
        c.server.server.close()   # stop listening, then drop the connection
        c.abort()
    with FakeServer(script) as srv:
        t = termd.Termd(srv.url, retry_for=1.0, backoff=(0.01, 0.2))
        t0 = time.monotonic()
        with pytest.raises(termd.TermdConnectionError) as ei:
            t.run("sleep 100")
        took = time.monotonic() - t0
        assert 0.9 < took < 5, took
        assert srv.url in str(ei.value)
        assert isinstance(ei.value, ConnectionError) and ei.value.code is None
        t.close()


def test_unreachable_at_construction():
    with FakeServer(answer_all) as srv:
        url = srv.url
    t0 = time.monotonic()
    with pytest.raises(termd.TermdConnectionError):
        termd.Termd(url, retry_for=0.5, backoff=(0.01, 0.1))
    assert time.monotonic() - t0 < 4


def test_wait_is_the_callers_timeout_is_termds():
    async def script(n, c):
        await c.hello()
        while True:
            a = await c.recv()      # never answers
    with FakeServer(script) as srv:
        t = termd.Termd(srv.url, **FAST)
        t0 = time.monotonic()
        with pytest.raises(termd.WaitTimeoutError) as ei:
            t.run("sleep 100", timeout=50, wait=0.3)
        assert time.monotonic() - t0 < 2
        assert isinstance(ei.value, TimeoutError)   # `except TimeoutError` catches the caller's wait too
        assert srv.actions("run")[0]["args"] == {"command": "sleep 100", "timeout": 50}
        assert t._aio._spending == {} and t._aio._pending == {}
        t.close()


def test_cause_null_too_large_goes_to_the_largest_action():
    async def script(n, c):
        await c.hello()
        small = await c.recv()
        await c.recv()            # the big one: "over the limit"
        await c.send({"seq": 9, "cause": None, "observation": "error", "content": "frame too large",
                      "extras": {"code": "too_large"}})
        await c.answer(small, observation="pong")
        while True:
            await c.recv()

    async def main(url):
        async with termd.AsyncTermd(url, **FAST) as t:
            p = asyncio.ensure_future(t.ping())
            await asyncio.sleep(0.1)
            with pytest.raises(termd.TooLargeError):   # (wait: a miss fails, it does not hang)
                await t.write("/f", "x" * 100000, wait=30)
            assert (await asyncio.wait_for(p, 30)).observation == "pong"
    with FakeServer(script) as srv:
        asyncio.run(main(srv.url))


def test_unix_socket_url():
    with FakeServer(answer_all, unix=True) as srv:
        t = termd.Termd(srv.url, **FAST)
        assert t.run("x").exit_code == 3
        t.close()
        assert srv.conns[0].path == "/events"


def events_script(n, c):
    async def go():
        if n == 0:
            await c.hello(seq=5)
            sub = await c.recv()
            c.server.subs.append(sub["args"])
            for s in (6, 7):
                await c.send({"seq": s, "cause": None, "observation": "command.start", "extras": {}})
            await asyncio.sleep(0.1)
            c.abort()
        else:
            await c.hello(seq=20)
            sub = await c.recv()
            c.server.subs.append(sub["args"])
            await c.send({"cause": None, "observation": "gap", "extras": {"from": 8, "to": 9}})
            await c.send({"seq": 10, "cause": None, "observation": "command.end", "extras": {}})
            await c.send({"seq": 21, "cause": sub["id"], "observation": "subscribe", "extras": {"since": 7}})
            await c.send({"seq": 22, "cause": None, "observation": "session.open", "extras": {}})
            await asyncio.sleep(30)
    return go()


def test_events_resume_since_and_gap_item():
    with FakeServer(events_script) as srv:
        srv.subs = []
        t = termd.Termd(srv.url, connect=False, **FAST)
        got = []
        for ev in t.events(wait=5):
            got.append(ev)
            if len(got) == 5:
                break
        t.close()
    assert srv.subs == [{"since": 5}, {"since": 7}]     # resumed after the last seq seen
    assert [type(e).__name__ for e in got] == ["Event", "Event", "Gap", "Event", "Event"]
    assert [e.seq for e in got if not isinstance(e, termd.Gap)] == [6, 7, 10, 22]
    assert (got[2].from_seq, got[2].to_seq) == (8, 9)


def test_events_wait_ends_a_quiet_stream():
    async def script(n, c):
        await c.hello(seq=3)
        sub = await c.recv()
        await c.send({"seq": 4, "cause": sub["id"], "observation": "subscribe", "extras": {"since": 3}})
        await asyncio.sleep(30)   # then nothing
    with FakeServer(script) as srv:
        t = termd.Termd(srv.url, connect=False, **FAST)
        ended = []

        def consume():
            try:
                for _ in t.events(wait=0.3):
                    pass
            except BaseException as e:
                ended.append(e)
        th = threading.Thread(target=consume, daemon=True)
        th.start()
        th.join(30)   # (a bound on a failure: wait=0.3 ends it at once)
        try:
            assert ended and isinstance(ended[0], termd.WaitTimeoutError), ended
        finally:
            t.close()


def test_events_gap_raises_when_asked():
    with FakeServer(events_script) as srv:
        srv.subs = []
        t = termd.Termd(srv.url, connect=False, **FAST)
        seen = []
        with pytest.raises(termd.GapError) as ei:
            for ev in t.events(since=5, gaps="raise", wait=5):
                seen.append(ev.seq)
        assert seen == [6, 7] and (ei.value.from_seq, ei.value.to_seq) == (8, 9)
        t.close()


def test_tty_frames_parse():
    f = termd.parse_tty_frame
    assert f(b'Z{"cols":80,"rows":24}') == termd.Resize("Z", b'{"cols":80,"rows":24}', 80, 24)
    assert f(b"S\x1b[Hx").data == b"\x1b[Hx" and isinstance(f(b"S"), termd.Snapshot)
    assert isinstance(f(b"Oab"), termd.Output) and f(b"Oab").data == b"ab"
    assert f("Tt\u00e9".encode()).text == "t\u00e9"
    assert f(b'X{"exit_code":3}').exit_code == 3
    assert f(b"Eread-only").text == "read-only" and isinstance(f(b"E"), termd.ErrorFrame)
    assert type(f(b"Qx")) is termd.TtyFrame


def test_tty_send_and_resize_frames():
    async def script(n, c):
        await c.send(b'Z{"cols":80,"rows":24}')
        await c.send(b"Sscreen")
        got = [await c.ws.recv(), await c.ws.recv()]
        c.server.received.extend(got)
        await c.send(b'X{"exit_code":0}')
        await c.ws.close()
    with FakeServer(script) as srv:
        t = termd.Termd(srv.url, connect=False, **FAST)
        with t.tty("my sess", mode="rw") as tty:
            frames = [tty.recv(wait=5), tty.recv(wait=5)]
            tty.send("ls\n")
            tty.resize(100, 30)
            frames += list(tty)
        t.close()
        assert srv.conns[0].path == "/tty/my%20sess?mode=rw" and srv.conns[0].subprotocol == "termd.tty.v1"
    assert srv.received == [b"Ils\n", b'R{"cols": 100, "rows": 30}']
    assert [type(x).__name__ for x in frames] == ["Resize", "Snapshot", "Exit"]


def test_every_public_name_has_a_docstring():
    missing = []
    for name in termd.__all__:
        obj = getattr(termd, name)
        if callable(obj) and not (obj.__doc__ or "").strip():
            missing.append(name)
        if isinstance(obj, type):
            for k, v in vars(obj).items():
                if not k.startswith("_") and callable(v) and not (v.__doc__ or "").strip():
                    missing.append("%s.%s" % (name, k))
    for ns in (termd.sync._Sessions, termd.sync._Files, termd.aio._Sessions, termd.aio._Files):
        for k, v in vars(ns).items():
            if not k.startswith("_") and callable(v) and not (v.__doc__ or "").strip():
                missing.append("%s.%s" % (ns.__name__, k))
    assert not missing, missing


def test_retrying_a_connection_says_so_once_a_second(caplog, tmp_path):
    """Issue 34 item 11: no 30 s of silence; a WARNING line a second."""
    url = "unix:%s/nobody.sock" % tmp_path
    caplog.set_level(logging.WARNING, logger="termd")
    t0 = time.monotonic()
    with pytest.raises(termd.TermdConnectionError):
        termd.Termd(url, retry_for=2.6, backoff=(0.02, 0.1))
    took = time.monotonic() - t0
    lines = [r for r in caplog.records if r.name == "termd" and r.levelno == logging.WARNING]
    assert lines and "not reachable" in lines[0].getMessage() and url in lines[0].getMessage(), lines
    assert 2 <= len(lines) <= int(took) + 1, [r.getMessage() for r in lines]


# ---- the synchronous API's own connection (termd._wsync, sync._Actions):
# one thread reads for all, pings, fragments, big frames, a late answer,
# close from another thread, the caller's wait during a reconnection

def _bg(fn):
    """fn() in a thread: (thread, box), box["r"] or box["e"] once it ends."""
    box = {}

    def go():
        try:
            box["r"] = fn()
        except BaseException as e:
            box["e"] = e
    th = threading.Thread(target=go, daemon=True)
    th.start()
    return th, box


def _until(cond, what, limit=30):
    end = time.monotonic() + limit     # (a bound on a failure, not a timing)
    while not cond():
        assert time.monotonic() < end, what
        time.sleep(0.005)


def test_sync_calls_start_no_thread_and_connect_on_first_use():
    with FakeServer(answer_all) as srv:
        before = threading.active_count()
        t = termd.Termd(srv.url, connect=False, **FAST)
        assert srv.conns == [] and t.hello == {}
        assert t.run("x").exit_code == 3 and t.ping().observation == "ping"
        assert threading.active_count() == before      # no loop thread for actions
        assert t.hello["version"] == "fake" and t.reconnects == 0 and len(srv.conns) == 1
        t.close()
        with pytest.raises(termd.TermdConnectionError):
            t.ping()


def test_sync_answers_reach_the_thread_that_waits_for_them():
    """Thread A waits for a run (it reads the connection); B's ping is
    answered first, read by A, handed to B; then A's own answer."""
    async def script(n, c):
        await c.hello()
        slow = await c.recv()
        fast = await c.recv()
        await c.answer(fast, observation="pong")
        await c.answer(slow, extras={"exit_code": 0, "running": False})
        while True:
            await c.recv()
    with FakeServer(script) as srv:
        t = termd.Termd(srv.url, **FAST)
        ta, a = _bg(lambda: t.run("slow", wait=30))
        _until(lambda: srv.actions("run"), "the run never reached the server")
        tb, b = _bg(lambda: t.ping(wait=30))
        ta.join(30)
        tb.join(30)
        t.close()
    assert b.get("r") is not None and b["r"].observation == "pong", b
    assert a.get("r") is not None and a["r"].exit_code == 0 and a["r"].cause == srv.actions("run")[0]["id"], a


def test_sync_reader_hands_over_when_its_wait_runs_out():
    """A reads for both; its wait runs out; B's answer, sent after, still
    reaches B (B reads from then on)."""
    gave_up = threading.Event()

    async def script(n, c):
        await c.hello()
        await c.recv()
        b = await c.recv()
        await asyncio.get_running_loop().run_in_executor(None, gave_up.wait, 30)
        await c.answer(b, observation="pong")
        while True:
            await c.recv()
    with FakeServer(script) as srv:
        t = termd.Termd(srv.url, **FAST)
        ta, a = _bg(lambda: t.run("never answered", wait=0.5))
        _until(lambda: srv.actions("run"), "the run never reached the server")
        tb, b = _bg(lambda: t.ping(wait=30))
        _until(lambda: srv.actions("ping"), "the ping never reached the server")
        ta.join(30)
        assert isinstance(a.get("e"), termd.WaitTimeoutError), a
        gave_up.set()
        tb.join(30)
        t.close()
    assert b.get("r") is not None and b["r"].observation == "pong", b


def test_sync_pings_answered_and_fragments_joined_while_waiting():
    async def script(n, c):
        await c.hello()
        a = await c.recv()
        await asyncio.wait_for(await c.ws.ping(b"still there?"), 20)   # the client pongs while it waits
        text = json.dumps({"seq": 1, "cause": a["id"], "observation": "run", "content": "f" * 70000,
                           "extras": {"exit_code": 0}})
        await c.ws.send([text[:10], text[10:50000], text[50000:]])      # one message, three frames
        await c.ws.send(b"\x00binary")                                   # not ours: skipped
        await c.send("not json")
        b = await c.recv()
        await c.answer(b, observation="pong")
        while True:
            await c.recv()
    with FakeServer(script) as srv:
        t = termd.Termd(srv.url, **FAST)
        r = t.run("x", wait=30)
        assert r.output == "f" * 70000 and r.exit_code == 0
        assert t.ping(wait=30).observation == "pong"
        t.close()


def test_sync_big_frames_both_ways():
    """A frame over 64 KiB each way (64-bit lengths, masking, many reads)."""
    with FakeServer(answer_all) as srv:
        t = termd.Termd(srv.url, **FAST)
        big = "".join(chr(32 + i % 90) for i in range(300000)) + "\u00e9\u2603"
        obs = t.call("echo", data=big, wait=30)
        assert json.loads(obs.content) == {"data": big}
        assert t.call("echo", data="", wait=30).content == '{"data": ""}'
        t.close()
    assert srv.actions("echo")[0]["args"]["data"] == big


def test_sync_late_answer_is_skipped():
    async def script(n, c):
        await c.hello()
        first = await c.recv()                 # not answered in time
        second = await c.recv()
        await c.answer(first, observation="late")
        await c.answer(second, observation="pong")
        while True:
            await c.recv()
    with FakeServer(script) as srv:
        t = termd.Termd(srv.url, **FAST)
        with pytest.raises(termd.WaitTimeoutError):
            t.call("slow", wait=0.3)
        assert t.ping(wait=30).observation == "pong"
        assert t._aio._spending == {}
        t.close()


def test_sync_close_from_another_thread_ends_a_waiting_call():
    async def script(n, c):
        await c.hello()
        while True:
            await c.recv()       # never answers
    with FakeServer(script) as srv:
        t = termd.Termd(srv.url, **FAST)
        th, box = _bg(lambda: t.run("sleep 100"))
        _until(lambda: srv.actions("run"), "the run never reached the server")
        t.close()
        th.join(30)
        assert not th.is_alive(), "the call hung after close()"
        assert isinstance(box.get("e"), termd.TermdConnectionError) and "closed" in str(box["e"]), box


def test_sync_wait_bounds_a_reconnection_too():
    """The connection drops and termd is gone: the caller's wait (0.5 s) ends
    the call before retry_for (20 s) would."""
    async def script(n, c):
        await c.hello()
        await c.recv()
        c.server.server.close()
        c.abort()
    with FakeServer(script) as srv:
        t = termd.Termd(srv.url, retry_for=20, backoff=(0.05, 0.2))
        th, box = _bg(lambda: t.run("x", wait=0.5))
        th.join(15)      # (a bound on a failure: wait=0.5 ends it)
        assert isinstance(box.get("e"), termd.WaitTimeoutError), box
        t.close()


def test_sync_cause_null_too_large_goes_to_the_largest_action():
    async def script(n, c):
        await c.hello()
        small = await c.recv()
        await c.recv()            # the big one: "over the limit"
        await c.send({"seq": 9, "cause": None, "observation": "error", "content": "frame too large",
                      "extras": {"code": "too_large"}})
        await c.answer(small, observation="pong")
        while True:
            await c.recv()
    with FakeServer(script) as srv:
        t = termd.Termd(srv.url, **FAST)
        th, box = _bg(lambda: t.ping(wait=30))
        _until(lambda: srv.actions("ping"), "the ping never reached the server")
        with pytest.raises(termd.TooLargeError):
            t.write("/f", "x" * 100000, wait=30)
        th.join(30)
        t.close()
    assert box.get("r") is not None and box["r"].observation == "pong", box
