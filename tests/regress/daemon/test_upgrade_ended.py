"""Processes that ended before an upgrade in place with nobody looking
(PROTOCOL.md §11): a pipe session whose process termd had reaped but whose
output it had not read yet, and an e2b (envd door) process that ended
while no stream was attached. After the upgrade the client still gets all
of the output and the exit, exactly once.

The first case is a window of termd's grace time (150 ms after the reap,
for the output's end of file): termd is stopped (SIGSTOP) while the
program writes and exits, the upgrade is asked for, then termd goes on;
it reaps the zombie, then reads the request and upgrades, the output
still in the pipes. Which came first is termd's to choose, so an attempt
whose upgrade came before the reap (or after the end) is made again; the
new termd's log says when a session came across reaped."""

import pytest

from tdtest import (BIG, ended_command, exited_once, fmt, replay, streams, until_reaped, upgrade,
                    wait_until)
from test_upgrade import T
from test_envd import end_error, events_of, start, start_cmd, stdout_of, stream, unary


@pytest.mark.parametrize("mode", ["kept-open", "hangup"])
def test_a_pipe_session_reaped_but_not_read_keeps_its_output_and_exit(termd, mode):
    """A pipe session's program wrote 600000 bytes of stdout and a line of
    stderr, exited 7 and was reaped; not all of it read when termd
    upgraded: every byte comes once (session.output, in order), then one
    session.exit with 7, whichever termd read them."""
    ev = termd.events()
    release = termd.home / "release"
    try:
        pipe_attempts(termd, ev, mode, release)
    finally:
        release.touch()


def pipe_attempts(termd, ev, mode, release):
    seq0 = ev.ping()["seq"]

    def begin(ev, n, gate):
        o = ev.call("session.open", {"name": "ended-%d" % n, "kind": "pipe",
                                     "command": ended_command(gate, release, n, mode=mode)},
                    timeout=T)
        assert o["observation"] == "session.open", fmt(o)
        return o["extras"]

    def check(ev, n, started):
        evs = exited_once(ev, seq0, "ended-%d" % n, 7)
        assert evs[-1]["extras"].get("signal") is None, fmt(evs[-1])
        for e in evs[:-1]:
            assert e["extras"]["encoding"] == "utf-8" and e["extras"].get("kept") is not False, \
                fmt(e)[:200]
        out = streams(evs)
        assert out["stdout"] == "o" * BIG + "tail-%d\n" % n, (len(out["stdout"]),
                                                                 out["stdout"][-40:])
        assert out["stderr"] == "err-%d\n" % n, out["stderr"]
    until_reaped(termd, ev, termd.home, begin, check, "up-ended-%d").close()


def e2b_sessions(ev):
    return [s["name"] for s in ev.call("session.list", {}, timeout=T)["extras"]["sessions"]
            if s["name"].startswith("e2b-")]


def connect_all(td, sel):
    """A Connect to sel read to its end: its events (the stream ends clean)"""
    status, _, envs = stream(td, "process.Process/Connect", {"process": sel}, timeout=T)
    assert status == 200, envs
    assert end_error(envs) is None, envs
    return events_of(envs)


def assert_connects_once(td, pid, tag, out, err, code):
    """Not in List; Connect by tag gives start, the output nobody saw, the
    end; then it is gone (a Connect by pid or tag: not_found)"""
    _, _, m = unary(td, "process.Process/List", {})
    assert pid not in [p["pid"] for p in m["processes"]], m
    evs = connect_all(td, {"tag": tag})
    assert evs[0] == {"start": {"pid": pid}}, evs
    assert stdout_of(evs) == out, evs
    assert stdout_of(evs, "stderr") == err, evs
    assert evs[-1] == {"end": {"exitCode": code, "exited": True,
                               "status": "exit status %d" % code}}, evs
    assert all("end" not in e for e in evs[:-1]), evs
    for sel in ({"pid": pid}, {"tag": tag}):
        status, _, envs = stream(td, "process.Process/Connect", {"process": sel}, timeout=T)
        assert end_error(envs)["code"] == "not_found", envs


def start_unseen(td, cmd, tag):
    """Start cmd (waiting for a gate first) with a stream that termd ends
    at its deadline (Connect-Timeout-Ms): then no stream is attached for
    sure, the process goes on; its pid"""
    status, _, envs = stream(td, "process.Process/Start", start_cmd(cmd, tag=tag),
                             headers={"Connect-Timeout-Ms": "300"}, timeout=T)
    assert status == 200, envs
    assert end_error(envs)["code"] == "deadline_exceeded", envs
    evs = events_of(envs)
    assert list(evs[0]) == ["start"] and len(evs) == 1, evs
    return evs[0]["start"]["pid"]


def test_an_e2b_process_that_ended_unseen_keeps_its_output_across_an_upgrade(termd_factory):
    """envd's Start stream ended (its deadline), the process then prints (stdout, stderr)
    and exits 5, termd closes its session: after an upgrade in place it
    is not listed (envd lists running processes), and one Connect (by tag)
    still gets the output printed meanwhile and the end (as before the
    upgrade: kept 60 s for a Connect that has not seen its end); then
    not_found, as for any process whose end was seen."""
    td = start(termd_factory)
    ev = td.events()
    gate = td.home / "gate-e2b"
    pid = start_unseen(td, "while [ ! -e %s ]; do sleep 0.01; done; echo after; echo oops >&2; "
                       "exit 5" % gate, "unseen")
    gate.touch()
    wait_until(lambda: not e2b_sessions(ev), timeout=T, what="its session closed at its end")
    code, ev, ans = upgrade(td, ev, cid="up-e2b-unseen")
    assert code == 1012 and ans["extras"]["ok"] is True, (code, fmt(ans))
    assert_connects_once(td, pid, "unseen", b"after\n", b"oops\n", 5)
    ev.close()


def test_an_e2b_process_reaped_but_not_read_at_an_upgrade(termd_factory):
    """envd's Start stream ended (its deadline), the process writes 600000 bytes and a line
    of stderr and exits 3; termd reaped it, read none of it, and upgraded:
    the new termd reads it all, ends it, closes its session; one Connect
    gets it all and the end, then not_found."""
    td = start(termd_factory)
    release = td.home / "release"
    try:
        e2b_attempts(td, release)
    finally:
        release.touch()


def e2b_attempts(td, release):
    def begin(ev, n, gate):
        return {"pid": start_unseen(td, ended_command(gate, release, n, code=3, tail=False),
                                    "reaped-%d" % n)}

    def check(ev, n, started):
        wait_until(lambda: not e2b_sessions(ev), timeout=T, what="its session closed at its end")
        assert_connects_once(td, started["pid"], "reaped-%d" % n, b"o" * BIG,
                             ("err-%d\n" % n).encode(), 3)
    until_reaped(td, td.events(), td.home, begin, check, "up-e2b-reaped-%d").close()


def test_a_character_split_at_an_upgrade_comes_whole(termd):
    """A pipe session printed "a" and the first byte of "é" (its stdout and
    its stderr), termd upgraded, then it printed the rest: the output is
    "aé-b\\n" on each, as UTF-8 text (the held beginning of the character
    goes across with the session; was: lost, the rest sent alone as
    base64)."""
    ev = termd.events()
    seq0 = ev.ping()["seq"]
    gate = termd.home / "gate-split"
    cmd = ("printf 'a\\303'; printf 'a\\303' >&2; while [ ! -e %s ]; do sleep 0.01; done; "
           "printf '\\251-b\\n'; printf '\\251-b\\n' >&2; exit 4" % gate)
    o = ev.call("session.open", {"name": "split", "kind": "pipe", "command": cmd}, timeout=T)
    assert o["observation"] == "session.open", fmt(o)

    def outputs():
        return [e for e in replay(ev, seq0) if e.get("observation") in ("session.output",
                                                                       "session.exit")
                and (e["extras"].get("session") or e["extras"].get("name")) == "split"]
    # "a" told on both, the byte after it held back
    wait_until(lambda: sorted(e["extras"]["stream"] for e in outputs()) == ["stderr", "stdout"],
               timeout=T, what="the first bytes")
    code, ev, ans = upgrade(termd, ev, cid="up-split")
    assert code == 1012 and ans["extras"]["ok"] is True, (code, fmt(ans))
    gate.touch()
    wait_until(lambda: outputs() and outputs()[-1]["observation"] == "session.exit", timeout=T,
               what="its end")
    evs = outputs()
    assert evs[-1]["extras"]["exit_code"] == 4, fmt(evs[-1])
    out = {"stdout": b"", "stderr": b""}
    for e in evs[:-1]:
        assert e["extras"]["encoding"] == "utf-8", [fmt(x) for x in evs]
        out[e["extras"]["stream"]] += e["content"].encode()
    assert out == {"stdout": "aé-b\n".encode(), "stderr": "aé-b\n".encode()}, out
    ev.close()
