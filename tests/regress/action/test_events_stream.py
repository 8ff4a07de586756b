"""PROTOCOL.md sections 2, 4 (subscribe, idempotency) and 5: one seq over
the whole instance, subscribe with replay and gap, retention, --event-log,
command.start/command.end for every command, idempotent ids and results
that survive a client's disconnect."""

import json
import os
import time

import pytest

import wsclient
from tdtest import assert_error, content, drain, fmt, run_done, wait_until

T = 90.0


# ---------------------------------------------------------------- helpers

def read_until(ev, pred, timeout=T):
    """Every observation received (from `others` first, then the wire), in
    order, up to and including the first for which pred is true."""
    got = []
    while ev.others:
        o = ev.others.pop(0)
        got.append(o)
        if pred(o):
            return got
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError("no matching observation within %.0fs; got %r"
                                 % (timeout, [fmt(o) for o in got[-5:]]))
        o = ev.recv_obs(left)
        got.append(o)
        if pred(o):
            return got


def by_cause(cid):
    return lambda o: "cause" in o and o.get("cause") == cid


def subscribe(ev, since=None, timeout=T):
    """Send subscribe; returns (replayed observations before the answer, the
    subscribe answer)."""
    args = {} if since is None else {"since": since}
    cid = ev.send_action("subscribe", args)
    got = read_until(ev, by_cause(cid), timeout)
    ans = got[-1]
    assert ans.get("observation") == "subscribe", fmt(ans)
    return got[:-1], ans


def seqs(obs_list):
    return [o.get("seq") for o in obs_list]


def strictly_increasing(xs):
    return all(isinstance(x, int) for x in xs) and all(a < b for a, b in zip(xs, xs[1:]))



def last_seq(ev):
    obs = ev.ping()
    assert obs.get("observation") == "pong", fmt(obs)
    return obs["seq"]


def read_log(path):
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    assert lines[-1] == b"", "event log does not end with a newline: %r" % data[-200:]
    out = []
    for i, ln in enumerate(lines[:-1]):
        try:
            o = json.loads(ln.decode("utf-8"))
        except ValueError as e:
            raise AssertionError("event log line %d is not JSON (%s): %r" % (i + 1, e, ln[:300]))
        assert isinstance(o, dict), "event log line %d is not an object: %r" % (i + 1, ln[:300])
        out.append(o)
    return out


# ---------------------------------------------------------------- seq

def test_seq_strictly_increasing_across_interleaved_connections(termd):
    a = termd.events()
    b = termd.events()
    _, sub = subscribe(a)
    stream = []
    b_answers = []
    for i in range(4):
        aid = a.send_action("run", {"command": "echo a%d" % i})
        # B alternates between main (busy with A's command, or not yet)
        # and a session of its own
        bo = b.call("run", {"command": "echo b%d" % i, "session": "main" if i % 2 else "bside"},
                    timeout=T)
        assert bo.get("observation") in ("run", "error"), fmt(bo)
        b_answers.append(bo)
        stream += read_until(a, by_cause(aid))
        b_answers.append(b.ping())
        stream += read_until(a, by_cause(a.send_action("ping")))
    assert strictly_increasing([sub["seq"]] + seqs(stream)), \
        "seq not strictly increasing on a subscribed connection: %r" % seqs(stream)
    assert strictly_increasing(seqs(b_answers)), seqs(b_answers)
    # a subscriber receives every observation, the other client's included
    a_by_seq = {o["seq"]: o for o in stream}
    for bo in b_answers:
        assert bo["seq"] in a_by_seq, "B's answer %s never reached the subscriber A" % fmt(bo)
        assert a_by_seq[bo["seq"]] == bo, (fmt(a_by_seq[bo["seq"]]), fmt(bo))
    # B is not subscribed: it got nothing but its own answers
    stray = [o for o in drain(b, 0.3)]
    assert not stray, "unsubscribed B received others' observations: %r" % [fmt(o) for o in stray]
    kinds = [o["observation"] for o in stream]
    n = 4 + len([o for o in b_answers if o.get("observation") == "run"])
    assert kinds.count("command.start") == n and kinds.count("command.end") == n, kinds


# ---------------------------------------------------------------- command.start / command.end

def test_subscriber_sees_command_start_end_then_run(termd):
    a = termd.events()
    watcher = termd.events()
    subscribe(a)
    subscribe(watcher)
    cmd = "cd /tmp && echo started && (exit 3)"
    rid = a.send_action("run", {"command": cmd})
    for ev in (a, watcher):
        got = read_until(ev, by_cause(rid))
        run = got[-1]
        assert run.get("observation") == "run" and run["extras"]["exit_code"] == 3, fmt(run)
        starts = [o for o in got if o.get("observation") == "command.start"]
        ends = [o for o in got if o.get("observation") == "command.end"]
        assert len(starts) == 1 and len(ends) == 1, [fmt(o) for o in got]
        s, e = starts[0], ends[0]
        assert s.get("cause") is None and e.get("cause") is None, (fmt(s), fmt(e))
        assert s["extras"].get("session") == "main", fmt(s)
        assert s["extras"].get("command") == cmd, fmt(s)
        assert s["extras"].get("by") == "agent", fmt(s)
        assert e["extras"].get("session") == "main", fmt(e)
        assert e["extras"].get("exit_code") == 3, fmt(e)
        assert e["extras"].get("cwd") == "/tmp", fmt(e)
        d = e["extras"].get("duration_ms")
        assert isinstance(d, (int, float)) and 0 <= d < 60000, fmt(e)
        assert s["seq"] < e["seq"] < run["seq"], (fmt(s), fmt(e), fmt(run))
    # not subscribed: no command events
    b = termd.events()
    run_done(b, "true")
    assert not [o for o in drain(b, 0.3)], "unsubscribed client got events"
    assert not [o for o in b.others if o.get("observation", "").startswith("command.")]


def test_command_events_for_keys_typed_command(termd, ev):
    """A command typed with `keys` (no run): command.start/command.end, by
    the agent. (by "viewer" needs the live terminal channel: not tested.)"""
    sub = termd.events()
    subscribe(sub)
    scr = ev.call("keys", {"keys": ["echo viakeys-$((40+2))", "Enter"]}, timeout=T)
    assert scr.get("observation") == "screen", fmt(scr)
    wait_until(lambda: "viakeys-42" in content(ev.call("screen", timeout=T)).split("\n"),
               timeout=30, what="the keys-typed command's output on the screen")
    s = sub.wait_for(lambda o: o.get("observation") == "command.start", T)
    e = sub.wait_for(lambda o: o.get("observation") == "command.end", T)
    assert s["extras"].get("session") == "main" and s["extras"].get("by") == "agent", fmt(s)
    assert e["extras"].get("session") == "main" and e["extras"].get("exit_code") == 0, fmt(e)
    assert s["seq"] < e["seq"]
    # the shell is idle again and run works
    assert content(run_done(ev, "echo after-keys")) == "after-keys"


def test_command_start_of_keys_typed_command_names_it(termd, ev):
    """command.start carries `command` (section 5) also for a command that
    was typed rather than sent through `run`."""
    sub = termd.events()
    subscribe(sub)
    ev.call("keys", {"keys": ["echo named-by-keys", "Enter"]}, timeout=T)
    s = sub.wait_for(lambda o: o.get("observation") == "command.start", T)
    # Found as a daemon bug (since fixed): for a command not sent through
    # `run` termd emitted command.start with "command": null.
    assert s["extras"].get("command") == "echo named-by-keys", fmt(s)


def test_command_events_for_session_open_program(termd, ev):
    sub = termd.events()
    subscribe(sub)
    cmd = "echo hi; exit 4"
    o = ev.call("session.open", {"name": "prog", "command": cmd}, timeout=T)
    assert o.get("observation") == "session.open", fmt(o)
    got = read_until(sub, lambda x: x.get("observation") == "session.exit")
    starts = [x for x in got if x.get("observation") == "command.start"]
    ends = [x for x in got if x.get("observation") == "command.end"]
    assert len(starts) == 1 and len(ends) == 1, [fmt(x) for x in got]
    s, e = starts[0], ends[0]
    assert s["extras"].get("session") == "prog" and s["extras"].get("command") == cmd, fmt(s)
    assert s["extras"].get("by") == "agent", fmt(s)
    assert e["extras"].get("session") == "prog" and e["extras"].get("exit_code") == 4, fmt(e)
    x = got[-1]["extras"]
    assert x.get("name") == "prog" and x.get("exit_code") == 4, fmt(got[-1])
    assert s["seq"] < e["seq"] <= got[-1]["seq"]


def test_run_in_new_session_announces_it(termd, ev):
    sub = termd.events()
    subscribe(sub)
    rid = ev.send_action("run", {"command": "echo in-new", "session": "implicit"})
    got = read_until(sub, by_cause(rid))
    kinds = [o.get("observation") for o in got]
    assert got[-1].get("observation") == "run" and content(got[-1]) == "in-new", fmt(got[-1])
    opens = [o for o in got if o.get("observation") == "session.open"]
    assert len(opens) == 1, kinds
    op = opens[0]
    assert op.get("cause") is None, fmt(op)
    assert op["extras"].get("name") == "implicit", fmt(op)
    assert isinstance(op["extras"].get("pid"), int), fmt(op)
    start = [o for o in got if o.get("observation") == "command.start"]
    assert start and op["seq"] < start[0]["seq"], kinds
    # the run's own connection is not subscribed: it got only its answer
    assert not [o for o in ev.others if o.get("observation") == "session.open"], ev.others


# ---------------------------------------------------------------- subscribe {since}

def test_subscribe_since_replays_exactly_the_later_events(termd):
    a = termd.events()
    b = termd.events()
    subscribe(a)
    stream = []
    rid = a.send_action("run", {"command": "echo one"})
    stream += read_until(a, by_cause(rid))
    bid = b.send_action("no.such.action")
    assert_error(b.wait_for(by_cause(bid), T), "unknown_action")
    stream += read_until(a, by_cause(bid))
    bid = b.send_action("run", {"command": "echo two", "session": "other"})
    assert content(b.wait_for(by_cause(bid), T)) == "two"
    stream += read_until(a, by_cause(bid))
    pid = a.send_action("ping")
    stream += read_until(a, by_cause(pid))
    assert len(stream) >= 8, [fmt(o) for o in stream]
    x = stream[2]["seq"]

    c = termd.events()
    replay, ans = subscribe(c, since=x)
    assert ans["extras"].get("since") == x, fmt(ans)
    # A (subscribed) also sees C's subscribe answer: everything in between
    # is what C must have been replayed
    stream += read_until(a, by_cause(ans["cause"]))
    want = [o for o in stream if x < o["seq"] < ans["seq"]]
    assert replay == want, "replay after %d:\n got %r\nwant %r" % (
        x, [(o["seq"], o["observation"]) for o in replay], [(o["seq"], o["observation"]) for o in want])
    assert not [o for o in replay if o.get("observation") == "gap"]

    # then live events
    pong = b.ping()
    live = c.wait_for(lambda o: o.get("seq") == pong["seq"], T)
    assert live == pong, (fmt(live), fmt(pong))

    # since = the last seq: nothing replayed
    d = termd.events()
    last = last_seq(d)
    replay, ans = subscribe(d, since=last)
    assert replay == [], [fmt(o) for o in replay]
    assert ans["seq"] > last
    # without since: only new events
    e = termd.events()
    replay, ans = subscribe(e)
    assert replay == [], [fmt(o) for o in replay]


def test_subscribe_twice_does_not_duplicate(termd):
    a = termd.events()
    b = termd.events()
    subscribe(a)
    subscribe(a)
    pong = b.ping()
    got = read_until(a, lambda o: o.get("seq") == pong["seq"])
    more = drain(a, 0.5)
    dup = [o for o in got + more if o.get("seq") == pong["seq"]]
    assert len(dup) == 1, "event delivered %d times after subscribing twice" % len(dup)


def test_retention_gap(termd_factory):
    td = termd_factory(args=["--retain", "5"])
    a = td.events()
    pongs = [a.ping() for _ in range(10)]
    last = pongs[-1]["seq"]
    b = td.events()
    replay, ans = subscribe(b, since=0)
    assert replay, "nothing replayed"
    gap = replay[0]
    assert gap.get("observation") == "gap", "first replayed observation is not gap: %s" % fmt(gap)
    assert gap.get("cause") is None, fmt(gap)
    rest = replay[1:]
    assert len(rest) == 5, [fmt(o) for o in rest]
    assert seqs(rest) == list(range(last - 4, last + 1)), seqs(rest)
    assert [o["cause"] for o in rest] == [p["cause"] for p in pongs[-5:]], [fmt(o) for o in rest]
    assert gap["extras"].get("from") == 1, fmt(gap)
    assert gap["extras"].get("to") == last - 5, fmt(gap)
    assert ans["seq"] > last

    # since inside the retained window: no gap
    c = td.events()
    replay, _ = subscribe(c, since=last - 3)
    # (b's subscribe answer is an event too)
    assert seqs(replay) == [last - 2, last - 1, last, ans["seq"]], [fmt(o) for o in replay]

    # since just before the window: a gap of the dropped ones only
    d = td.events()
    lastnow = last_seq(d)
    replay, ans = subscribe(d, since=lastnow - 7)
    assert replay[0].get("observation") == "gap", [fmt(o) for o in replay]
    oldest = replay[1]["seq"]
    gx = replay[0]["extras"]
    assert (gx.get("from"), gx.get("to")) == (lastnow - 6, oldest - 1), fmt(replay[0])
    assert strictly_increasing(seqs(replay[1:]) + [ans["seq"]])


# ---------------------------------------------------------------- --event-log

def test_event_log(termd_factory, tmp_path):
    log = tmp_path / "events.jsonl"
    td = termd_factory(args=["--event-log", str(log)])
    a = td.events()
    subscribe(a)
    pong = a.ping()
    # flushed per event: the line is there as soon as the client has it
    wait_until(lambda: pong["seq"] in [o["seq"] for o in read_log(log)], timeout=3,
               what="the pong in the event log")
    run_done(a, "echo logged")
    assert_error(a.call("nope.action", timeout=T), "unknown_action")

    # a client that sends a command and disconnects at once
    d = td.events()
    did = d.send_action("run", {"command": "sleep 1; echo after-disconnect"})
    d.ws.abort()
    wait_until(lambda: [o for o in read_log(log) if o.get("cause") == did], timeout=60,
               what="the disconnected client's answer in the event log")
    # events after the disconnect reach the log too
    pong2 = a.ping()
    wait_until(lambda: pong2["seq"] in [o["seq"] for o in read_log(log)], timeout=3,
               what="a later pong in the event log")
    seen = list(a.others) + [pong2]   # all a received, subscribed

    entries = read_log(log)
    s = seqs(entries)
    assert strictly_increasing(s), s
    assert s == list(range(s[0], s[-1] + 1)), "event log skips seqs: %r" % s
    assert s[-1] == pong2["seq"]
    by_seq = {o["seq"]: o for o in entries}
    for o in seen:
        assert by_seq.get(o["seq"]) == o, "log entry differs from the observation sent: %s vs %s" % (
            fmt(by_seq.get(o["seq"]) or {}), fmt(o))
    ans = [o for o in entries if o.get("cause") == did]
    assert len(ans) == 1 and ans[0]["observation"] == "run", [fmt(o) for o in ans]
    assert content(ans[0]) == "after-disconnect", fmt(ans[0])
    assert not [o for o in entries if o.get("observation") == "hello"], "hello is not an event"


def test_event_log_appends(termd_factory, tmp_path):
    log = tmp_path / "events.jsonl"
    log.write_text('{"seq":0,"note":"from before"}\n')
    td = termd_factory(args=["--event-log", str(log)])
    a = td.events()
    pong = a.ping()
    wait_until(lambda: pong["seq"] in [o["seq"] for o in read_log(log)], timeout=3,
               what="the pong in the event log")
    entries = read_log(log)
    assert entries[0] == {"seq": 0, "note": "from before"}, "the log was truncated, not appended to"


# ---------------------------------------------------------------- idempotency

@pytest.mark.parametrize("kind", ["string", "integer"])
def test_resent_id_is_not_run_twice(termd, ev, tmp_path, kind):
    f = tmp_path / ("count-%s" % kind)
    aid = wsclient.new_id("idem") if kind == "string" else 700000000 + os.getpid() % 100000
    first = ev.call("run", {"command": "echo x >> '%s'" % f}, id=aid, timeout=T)
    assert first.get("observation") == "run" and first["extras"]["exit_code"] == 0, fmt(first)
    assert first["extras"].get("replayed") in (None, False), fmt(first)
    second = ev.call("run", {"command": "echo x >> '%s'" % f}, id=aid, timeout=T)
    assert second["extras"].get("replayed") is True, fmt(second)
    assert second["cause"] == aid and type(second["cause"]) is type(aid), fmt(second)
    assert second["seq"] == first["seq"], (fmt(first), fmt(second))
    assert second["content"] == first["content"] and second["observation"] == "run", fmt(second)
    x1 = dict(first["extras"])
    x2 = dict(second["extras"])
    x2.pop("replayed")
    assert x1 == x2, (x1, x2)
    # from another connection too
    other = termd.events()
    third = other.call("run", {"command": "echo x >> '%s'" % f}, id=aid, timeout=T)
    assert third["extras"].get("replayed") is True and third["seq"] == first["seq"], fmt(third)
    assert f.read_text() == "x\n", "the command ran more than once: %r" % f.read_text()
    # a resent ping is replayed as well
    pid = wsclient.new_id("ping")
    p1 = ev.call("ping", id=pid)
    p2 = ev.call("ping", id=pid)
    assert p2["seq"] == p1["seq"] and p2["extras"].get("replayed") is True, (fmt(p1), fmt(p2))


def test_resent_session_open_is_replayed_not_refused(ev):
    oid = wsclient.new_id("open")
    first = ev.call("session.open", {"name": "once"}, id=oid, timeout=T)
    assert first.get("observation") == "session.open", fmt(first)
    second = ev.call("session.open", {"name": "once"}, id=oid, timeout=T)
    assert second.get("observation") == "session.open", "resent session.open: %s" % fmt(second)
    assert second["extras"].get("replayed") is True and second["seq"] == first["seq"], fmt(second)
    names = [s["name"] for s in ev.call("session.list", timeout=T)["extras"]["sessions"]]
    assert names.count("once") == 1, names


def test_string_and_integer_ids_are_distinct(ev, tmp_path):
    f = tmp_path / "count"
    ev.call("run", {"command": "echo a >> '%s'" % f}, id="424242", timeout=T)
    obs = ev.call("run", {"command": "echo b >> '%s'" % f}, id=424242, timeout=T)
    assert obs["extras"].get("replayed") in (None, False), fmt(obs)
    assert f.read_text() == "a\nb\n"


# ---------------------------------------------------------------- disconnect safety

@pytest.mark.parametrize("how", ["abort", "close"])
def test_result_survives_disconnect(termd, how):
    a = termd.events()
    seen = last_seq(a)
    did = wsclient.new_id("gone")
    a.send_action("run", {"command": "sleep 2; echo done"}, id=did)
    if how == "abort":
        a.ws.abort()
    else:
        a.close()
    b = termd.events()
    replay, ans = subscribe(b, since=seen)
    got = replay + read_until(b, by_cause(did)) if not [o for o in replay if o.get("cause") == did] \
        else replay
    mine = [o for o in got if o.get("cause") == did]
    assert len(mine) == 1, [fmt(o) for o in got]
    obs = mine[0]
    assert obs.get("observation") == "run", fmt(obs)
    assert content(obs) == "done" and obs["extras"]["exit_code"] == 0, fmt(obs)
    # exactly once
    more = drain(b, 0.5)
    assert not [o for o in more if o.get("cause") == did], [fmt(o) for o in more]


def test_result_of_finished_command_replayed_after_disconnect(termd):
    a = termd.events()
    seen = last_seq(a)
    did = wsclient.new_id("gone2")
    a.send_action("run", {"command": "echo early-$((1+1))"}, id=did)
    a.ws.abort()
    # wait until it has certainly finished, then come back
    c = termd.events()
    # (busy while the orphaned run is still pending, then free)
    wait_until(lambda: c.call("run", {"command": "true"}, timeout=T).get("observation") == "run",
               timeout=30, interval=0.2, what="main to be free again")
    b = termd.events()
    replay, _ = subscribe(b, since=seen)
    mine = [o for o in replay if o.get("cause") == did]
    assert len(mine) == 1 and content(mine[0]) == "early-2", [fmt(o) for o in replay]
    assert strictly_increasing(seqs(replay)), seqs(replay)


def test_resent_id_while_running_gets_the_answer(termd, tmp_path):
    f = tmp_path / "ran"
    a = termd.events()
    b = termd.events()
    b.call("subscribe", {})
    did = wsclient.new_id("inflight")
    cmd = "sleep 2; echo line >> '%s'; echo done" % f
    a.send_action("run", {"command": cmd}, id=did)
    # the cut comes once termd has taken the action: its command started
    started = b.wait_for(lambda o: o.get("observation") == "command.start" and
                         (o.get("extras") or {}).get("command") == cmd, timeout=T)
    a.ws.abort()
    obs = b.call("run", {"command": cmd}, id=did, timeout=T)
    assert obs.get("observation") == "run", "resent in-flight id answered %s" % fmt(obs)
    assert content(obs) == "done" and obs["extras"]["exit_code"] == 0, fmt(obs)
    # answered once its sleep 2 was over, by termd's own clock (less 0.5 s
    # for a start seen late); before: "more than 0.5 s after the resend",
    # which a command.start delivered late to a loaded test could leave no
    # room for
    assert obs["ts"] - started["ts"] >= 1.5, \
        "answered before the command could have finished: %s after %s" % (fmt(obs), fmt(started))
    assert f.read_text() == "line\n", "ran %d times" % f.read_text().count("line")
    more = drain(b, 0.5)
    assert not [o for o in more if o.get("cause") == did], [fmt(o) for o in more]
