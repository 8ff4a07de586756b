"""PROTOCOL.md §4 pipe sessions (contract §10): `session.open` with
`kind: "pipe"` runs a program without a terminal, stdin a pipe only with
`stdin: true` (else /dev/null), stdout and stderr kept apart as
`session.output` events; `session.stdin` writes bytes and closes stdin;
`run` and `keys` refuse a pipe session; the screen shows both streams as
lines; session.list says the kind; signals and close end it."""

import base64
import os
import time

from tdtest import PY, assert_error, fmt, run_done, subscribed, dead_or_zombie, wait_until

T = 90.0


def call(ev, action, args=None, **kw):
    return ev.call(action, args, timeout=kw.pop("timeout", T), **kw)


def open_pipe(ev, name, command, **args):
    a = {"name": name, "kind": "pipe", "command": command}
    a.update(args)
    obs = call(ev, "session.open", a)
    assert obs.get("observation") == "session.open", fmt(obs)
    assert obs["extras"]["kind"] == "pipe", fmt(obs)
    return obs


def collect(sub, name, until_exit=True, timeout=T):
    """The session's output events' bytes by stream, up to its exit; and
    the exit event."""
    out = {"stdout": b"", "stderr": b"", "order": []}
    deadline = time.monotonic() + timeout
    while True:
        o = sub.recv_obs(max(0.1, deadline - time.monotonic()))
        assert o is not None, "no session.exit for %s; got %r" % (name, out)
        x = o.get("extras") or {}
        if o.get("observation") == "session.output" and x.get("session") == name:
            assert o.get("cause") is None, fmt(o)
            data = (base64.b64decode(o["content"]) if x["encoding"] == "base64"
                    else o["content"].encode())
            assert len(data) == x["bytes"], fmt(o)
            out[x["stream"]] += data
            out["order"].append((x["stream"], x["encoding"], data))
        if o.get("observation") == "session.exit" and x.get("name") == name:
            return out, o
        if not until_exit and out["stdout"]:
            return out, None


def test_stdout_and_stderr_apart_and_exit_code(termd, ev):
    sub = subscribed(termd)
    obs = open_pipe(ev, "p1", "echo out1; echo err1 >&2; printf 'no newline'; echo err2 >&2; exit 3")
    pid = obs["extras"]["pid"]
    out, ex = collect(sub, "p1")
    assert out["stdout"] == b"out1\nno newline", out
    assert out["stderr"] == b"err1\nerr2\n", out
    assert ex["extras"]["exit_code"] == 3, fmt(ex)
    s = {x["name"]: x for x in call(ev, "session.list")["extras"]["sessions"]}["p1"]
    assert s["kind"] == "pipe" and s["pid"] == pid and s["alive"] is False, s
    assert s["stdin"] is False and s["exit_code"] == 3, s
    # main is a terminal
    m = {x["name"]: x for x in call(ev, "session.list")["extras"]["sessions"]}["main"]
    assert m["kind"] == "pty" and "stdin" not in m, m


def test_the_program_has_no_terminal(termd, ev):
    sub = subscribed(termd)
    open_pipe(ev, "p2", PY + " -c 'import os,sys; print([os.isatty(i) for i in (0,1,2)]);"
              " print(sys.stdin.read() == \"\")'")
    out, ex = collect(sub, "p2")
    assert out["stdout"] == b"[False, False, False]\nTrue\n", out   # stdin /dev/null
    assert ex["extras"]["exit_code"] == 0


def test_stdin_pipe_write_and_eof(termd, ev):
    sub = subscribed(termd)
    open_pipe(ev, "cat", "cat; echo done >&2", stdin=True)
    s = {x["name"]: x for x in call(ev, "session.list")["extras"]["sessions"]}["cat"]
    assert s["stdin"] is True, s
    r = call(ev, "session.stdin", {"session": "cat", "content": "hello\n"})
    assert r.get("observation") == "session.stdin" and r["extras"]["bytes"] == 6, fmt(r)
    raw = bytes(range(256))
    r = call(ev, "session.stdin", {"session": "cat", "content": base64.b64encode(raw).decode(),
                                   "encoding": "base64", "eof": True})
    assert r["extras"] == {"session": "cat", "bytes": 256, "eof": True}, fmt(r)
    out, ex = collect(sub, "cat")
    assert out["stdout"] == b"hello\n" + raw, out
    assert out["stderr"] == b"done\n", out
    assert ex["extras"]["exit_code"] == 0
    # the binary part came as base64, the text as text
    encs = {e for (_, e, _) in out["order"]}
    assert "base64" in encs and "utf-8" in encs, out["order"]
    assert_error(call(ev, "session.stdin", {"session": "cat", "content": "x"}), "no_command")


def test_stdin_errors(termd, ev):
    open_pipe(ev, "noin", "sleep 30")
    assert_error(call(ev, "session.stdin", {"session": "noin", "content": "x"}), "bad_request")
    open_pipe(ev, "in", "sleep 30", stdin=True)
    assert_error(call(ev, "session.stdin", {"session": "in"}), "bad_request")
    assert_error(call(ev, "session.stdin", {"session": "in", "content": "%%%",
                                            "encoding": "base64"}), "bad_request")
    assert_error(call(ev, "session.stdin", {"session": "in", "content": 5}), "bad_request")
    assert call(ev, "session.stdin", {"session": "in", "eof": True})["extras"]["eof"] is True
    assert_error(call(ev, "session.stdin", {"session": "in", "eof": True}), "bad_request")
    assert_error(call(ev, "session.stdin", {"session": "nope", "content": "x"}), "no_such_session")
    # a terminal's input cannot be closed; bytes go to it as they are
    assert_error(call(ev, "session.stdin", {"session": "main", "eof": True}), "bad_request")
    # open's own errors
    assert_error(call(ev, "session.open", {"name": "x", "kind": "pipe"}), "bad_request")
    assert_error(call(ev, "session.open", {"name": "x", "kind": "fifo", "command": "true"}),
                 "bad_request")
    assert_error(call(ev, "session.open", {"name": "x", "command": "true", "stdin": True}),
                 "bad_request")
    assert_error(call(ev, "session.open", {"name": "x", "kind": "pipe", "command": "true",
                                           "stdin": "yes"}), "bad_request")
    for n in ("noin", "in"):
        call(ev, "session.close", {"name": n})


def test_run_and_keys_refuse_a_pipe_session(termd, ev):
    open_pipe(ev, "pp", "sleep 30", stdin=True)
    for obs in (call(ev, "run", {"command": "echo hi", "session": "pp"}),
                call(ev, "run", {"command": "x", "is_input": True, "session": "pp"}),
                call(ev, "keys", {"keys": ["a", "Enter"], "session": "pp"})):
        assert_error(obs, "bad_request")
        assert "session.stdin" in obs["content"], fmt(obs)
    call(ev, "session.close", {"name": "pp"})


def test_screen_shows_both_streams_as_lines(termd, ev):
    sub = subscribed(termd)
    open_pipe(ev, "scr", "echo alpha; echo beta >&2; echo gamma")
    collect(sub, "scr")
    sc = call(ev, "screen", {"session": "scr"})
    text = sc.get("content", "")
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    assert lines[:3] == ["alpha", "beta", "gamma"] or sorted(lines[:3]) == ["alpha", "beta", "gamma"], text
    # each on its own line at column 0 (the \n became \r\n for the screen)
    for ln in lines[:3]:
        assert ln == ln.lstrip(), text


def test_utf8_split_across_reads_stays_text(termd, ev):
    sub = subscribed(termd)
    # "é" (c3 a9) and "€" (e2 82 ac) split across writes with a pause between
    prog = (PY + " -c 'import sys,time,os;"
            " os.write(1, b\"caf\\xc3\"); time.sleep(0.3); os.write(1, b\"\\xa9 \\xe2\\x82\"); time.sleep(0.3);"
            " os.write(1, b\"\\xac\\n\")'")
    open_pipe(ev, "u8", prog)
    out, ex = collect(sub, "u8")
    assert out["stdout"].decode() == "café €\n", out
    assert all(e == "utf-8" for (_, e, _) in out["order"]), out["order"]
    assert len(out["order"]) >= 2, out["order"]   # it did come in parts


def test_signal_and_close(termd, ev):
    sub = subscribed(termd)
    obs = open_pipe(ev, "sl", "echo started; exec sleep 60")
    first, _ = collect(sub, "sl", until_exit=False)
    assert first["stdout"] == b"started\n", first
    r = call(ev, "session.signal", {"session": "sl", "signal": "TERM"})
    assert r.get("observation") == "session.signal", fmt(r)
    out, ex = collect(sub, "sl")
    assert out["stdout"] == b"", out
    assert ex["extras"]["signal"] == "TERM", fmt(ex)
    obs = open_pipe(ev, "sl2", "sleep 60 & sleep 60")
    pid = obs["extras"]["pid"]
    assert call(ev, "session.close", {"name": "sl2"}).get("observation") == "session.close"
    wait_until(lambda: dead_or_zombie(pid), what="closed")


def test_a_flood_on_both_streams_arrives_whole_and_main_answers(termd, ev):
    sub = subscribed(termd)
    n = 20000
    open_pipe(ev, "fl", "seq 1 %d; seq 1 %d >&2" % (n, n))
    # main answers while it floods
    r = run_done(ev, "echo main-ok")
    assert "main-ok" in r.get("content", ""), fmt(r)
    out, ex = collect(sub, "fl")
    want = "".join("%d\n" % i for i in range(1, n + 1)).encode()
    assert out["stdout"] == want and out["stderr"] == want, (len(out["stdout"]), len(out["stderr"]))
    assert ex["extras"]["exit_code"] == 0


def test_view_token_cannot_open_or_write(termd_factory, tmp_path):
    vt = tmp_path / "view"
    vt.write_text("viewsecret\n")
    t = termd_factory(args=("--view-token-file", str(vt)), token="fullsecret")
    full = t.events(token="fullsecret")
    open_pipe(full, "v", "cat", stdin=True)
    view = t.events(token="viewsecret")
    assert_error(call(view, "session.open", {"name": "w", "kind": "pipe", "command": "true"}),
                 "forbidden")
    assert_error(call(view, "session.stdin", {"session": "v", "content": "x"}), "forbidden")
    lst = call(view, "session.list")
    assert "v" in {x["name"] for x in lst["extras"]["sessions"]}


def test_a_flood_past_the_kept_share_leaves_notes_in_the_ring(termd, ev):
    """Past a session's first 4 MiB, output events reach subscribers whole
    but the retained ring keeps a note (bytes, kept: false), so a flood
    cannot push every other event out of retention."""
    sub = subscribed(termd)
    first = call(ev, "ping")["seq"]
    total = 6 * 1024 * 1024
    open_pipe(ev, "big", "head -c %d /dev/zero | tr '\\0' x" % total)
    out, ex = collect(sub, "big")
    assert out["stdout"] == b"x" * total, len(out["stdout"])
    late = termd.events()
    late.send_action("subscribe", {"since": first})
    kept = noted = 0
    while True:
        o = late.recv_obs(T)
        assert o is not None
        if o.get("observation") == "subscribe":
            break
        x = o.get("extras") or {}
        if o.get("observation") == "session.output" and x.get("session") == "big":
            if x.get("kept") is False:
                assert o["content"] == "", fmt(o)
                noted += x["bytes"]
            else:
                assert len(o["content"]) == x["bytes"]
                kept += x["bytes"]
    assert kept + noted == total, (kept, noted)
    assert 0 < kept <= 4 * 1024 * 1024 and noted >= 2 * 1024 * 1024, (kept, noted)


def test_envd_process_without_pty_is_a_pipe_session_on_the_stream(termd_factory):
    """e2b's Start without a PTY is a termd pipe session: session.open
    (kind pipe) and its output as session.output events on /events."""
    import http.client
    import json
    import struct
    tok = "pipe-envd-token"
    td = termd_factory(token=tok, tcp=True)
    sub = td.events(token=tok)
    assert call(sub, "subscribe").get("observation") == "subscribe"
    port = int(td.url.rsplit(":", 1)[1])
    msg = json.dumps({"process": {"cmd": "/bin/sh", "args": ["-c", "echo to-out; echo to-err >&2"]}}).encode()
    body = struct.pack(">BI", 0, len(msg)) + msg
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=T)
    conn.request("POST", "/process.Process/Start", body=body, headers={
        "Content-Type": "application/connect+json", "X-Access-Token": tok})
    resp = conn.getresponse()
    data = resp.read()
    assert resp.status == 200, data
    assert b"dG8tb3V0Cg==" in data and b"dG8tZXJyCg==" in data, data   # to-out / to-err, base64
    opened = sub.wait_for(lambda o: o.get("observation") == "session.open", T)
    name = opened["extras"]["name"]
    assert opened["extras"]["kind"] == "pipe" and name.startswith("e2b-"), fmt(opened)
    out, ex = collect(sub, name)
    assert out["stdout"] == b"to-out\n" and out["stderr"] == b"to-err\n", out


def test_stdin_over_a_pipe_buffer_to_a_late_reader_then_eof_arrives_whole(termd, ev):
    """More than a pipe holds (64 KiB) to a program that starts reading a
    second later, with eof in the same call: every byte arrives before its
    stdin is closed (the rest waits in termd, and eof waits for it)."""
    import hashlib
    sub = subscribed(termd)
    open_pipe(ev, "late", "sleep 1; sha256sum", stdin=True)
    data = os.urandom(300 * 1024 + 7)
    r = call(ev, "session.stdin", {"session": "late", "content": base64.b64encode(data).decode(),
                                   "encoding": "base64", "eof": True})
    assert r["extras"] == {"session": "late", "bytes": len(data), "eof": True}, fmt(r)
    out, ex = collect(sub, "late")
    assert out["stdout"].decode() == "%s  -\n" % hashlib.sha256(data).hexdigest(), out["stdout"]
    assert ex["extras"]["exit_code"] == 0, fmt(ex)
