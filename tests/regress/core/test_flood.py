"""Overload: programs that print without end (`yes`, `cat /dev/urandom`)
keep termd's memory bounded, leave other sessions answering, and still stop
on C-c; a client that pipelines 10000 actions without reading gets every
answer, once, in order (or a clear error)."""
import json
import os
import time

import wsclient
from tdtest import (assert_error, content, fmt, rss_mb, run_done, run_obs)

T = 90.0


def _asan_small_quarantine():
    # ASan keeps freed memory in a quarantine (256 MB by default) that would
    # count as termd's RSS; keep it small so RSS measures what termd holds.
    asan = os.environ.get("ASAN_OPTIONS", "")
    return {"ASAN_OPTIONS": (asan + ":" if asan else "") + "quarantine_size_mb=16"}


def test_endless_output_is_bounded_and_stoppable(termd_factory):
    t = termd_factory(env=_asan_small_quarantine())
    pid = t.proc.pid
    ev = t.events()
    run_done(ev, "true")
    for name in ("yes", "rnd"):
        o = ev.call("session.open", {"name": name}, timeout=T)
        assert o.get("observation") == "session.open", fmt(o)
    base = rss_mb(pid)

    # two floods, started the way an agent would: run, which times out
    a = run_obs(ev, "yes", session="yes", timeout=1, max_output=2000)
    assert a["extras"]["running"] is True and a["extras"]["timed_out"] == "hard", fmt(a)
    assert "y\ny\ny" in content(a)
    b = run_obs(ev, "cat /dev/urandom", session="rnd", timeout=1, max_output=2000)
    assert b["extras"]["running"] is True, fmt(b)

    # meanwhile main answers normally, and termd's memory stays bounded
    peak = base
    t0 = time.monotonic()
    n = 0
    while time.monotonic() - t0 < 6 or n < 5:
        n += 1
        obs = run_done(ev, "echo main-$((%d * 2))" % n)
        assert content(obs) == "main-%d" % (n * 2), fmt(obs)
        assert ev.call("screen", {"session": "yes"})["observation"] == "screen"
        peak = max(peak, rss_mb(pid))
    # without a bound termd would hold hundreds of MB by now; what it holds
    # is screens, render windows and a command store's last chunk
    print("flood: base %.1f MB, peak %.1f MB, %d runs on main" % (base, peak, n))
    assert peak - base < 64, "termd's RSS grew from %.0f to %.0f MB under the flood" % (base, peak)

    # a C-c stops each, as typed by an agent
    for name, how in (("yes", "run"), ("rnd", "keys")):
        if how == "run":
            obs = run_obs(ev, "C-c", session=name, is_input=True, timeout=20, max_output=500)
        else:
            k = ev.call("keys", {"session": name, "keys": ["C-c"]}, timeout=T)
            assert k.get("observation") == "screen", fmt(k)
            obs = run_obs(ev, "", session=name, timeout=20, max_output=500)
        x = obs["extras"]
        assert x["running"] is False and x["exit_code"] == 130, fmt(obs)
        # and the shell there is usable again
        assert content(run_done(ev, "echo back-in-%s" % name, session=name)) == "back-in-" + name
    assert rss_mb(pid) - base < 64


def test_10000_pipelined_actions_all_answered_in_order(termd):
    ev = termd.events()
    run_done(ev, "true")
    kinds = []
    frames = []
    for i in range(10000):
        aid = "p%d" % i
        k = i % 10
        if k in (0, 1, 2, 3):
            msg = {"id": aid, "action": "ping"}
        elif k == 4:
            msg = {"id": aid, "action": "screen"}
        elif k == 5:
            msg = {"id": aid, "action": "session.list"}
        elif k == 6:
            msg = {"id": aid, "action": "no.such.action"}
        elif k == 7:
            msg = {"id": aid, "action": "run", "args": {"command": 5}}
        elif k == 8:
            msg = {"id": aid, "action": "screen", "args": {"session": "nope"}}
        else:
            msg = {"id": aid, "action": "ping", "args": {}}
        kinds.append(k)
        frames.append(json.dumps(msg))
    # one burst, written before reading any answer
    ws = ev.ws
    burst = b"".join(_masked_text(f) for f in frames)
    ws.sock.settimeout(T)
    ws.sock.sendall(burst)

    want_obs = {0: "pong", 1: "pong", 2: "pong", 3: "pong", 4: "screen", 5: "session.list",
                6: "error", 7: "error", 8: "error", 9: "pong"}
    want_code = {6: "unknown_action", 7: "bad_request", 8: "no_such_session"}
    for i in range(10000):
        o = ev.recv_obs(T)
        assert o.get("cause") == "p%d" % i, "answer %d: %s" % (i, fmt(o))
        k = kinds[i]
        assert o.get("observation") == want_obs[k], "answer %d: %s" % (i, fmt(o))
        if k in want_code:
            assert_error(o, want_code[k])
    # the seqs of one connection's answers increase; nothing else arrives
    assert ev.ping()["observation"] == "pong"


def test_pipelined_runs_get_an_answer_each(termd):
    ev = termd.events()
    run_done(ev, "true")
    ids = []
    burst = []
    for i in range(50):
        aid = wsclient.new_id("r")
        ids.append(aid)
        burst.append(_masked_text(json.dumps(
            {"id": aid, "action": "run", "args": {"command": "echo r%d" % i}})))
    ev.ws.sock.sendall(b"".join(burst))
    got = {}
    while len(got) < len(ids):
        o = ev.recv_obs(T)
        assert o.get("cause") in ids and o["cause"] not in got, fmt(o)
        got[o["cause"]] = o
    ran = 0
    for i, aid in enumerate(ids):
        o = got[aid]
        if o["observation"] == "run":
            assert content(o) == "r%d" % i, fmt(o)
            ran += 1
        else:
            # the shell is still busy with an earlier one: said plainly
            assert_error(o, "busy")
    assert ran >= 1


def _masked_text(text):
    data = text.encode("utf-8")
    key = os.urandom(4)
    return wsclient.frame_header(wsclient.OP_TEXT, len(data)) + key + wsclient.mask_bytes(data, key)
