"""Issue 37, what an upgrade in place keeps beyond the sessions
(test_upgrade.py): TERMD_<OPTION> settings, plugin programs (a Jupyter
kernel's variables), recordings in the same file, an expect in flight and
stdin queued for a session, watches with their ids, dial-out links at once,
and od-attach reattaching by itself."""

import json
import os
import time

import pytest

from tdtest import assert_error, content, fmt, run_done, wait_until
from test_upgrade import T, reconnect, upgrade, wait_closed


def test_environment_options_kept(termd_factory):
    """TERMD_MAX_SESSIONS=2: still 2 after the upgrade (the variables are
    taken out of the environment at start, so the new binary gets them
    back for itself only); the sessions still do not see them."""
    td = termd_factory(env={"TERMD_MAX_SESSIONS": "2", "TERMD_SCROLLBACK": "123"})
    ev = td.events()
    assert ev.call("session.open", {"name": "b"}, timeout=T)["observation"] == "session.open"
    assert_error(ev.call("session.open", {"name": "c"}, timeout=T), "too_large")
    code, ev2, ans = upgrade(td, ev)
    assert ans["extras"].get("ok") is True, fmt(ans)
    o = ev2.call("session.open", {"name": "c"}, timeout=T)
    assert_error(o, "too_large")   # TERMD_MAX_SESSIONS kept
    ev2.call("session.close", {"session": "b"}, timeout=T)
    wait_until(lambda: "b" not in [s["name"] for s in ev2.call("session.list", {}, timeout=T)
                                   ["extras"]["sessions"]], timeout=T, what="b closed")
    o = ev2.call("session.open", {"name": "d"}, timeout=T)
    assert o["observation"] == "session.open", fmt(o)
    obs = run_done(ev2, 'echo "${TERMD_MAX_SESSIONS-unset}|${TERMD_SCROLLBACK-unset}"', session="d")
    assert content(obs).strip() == "unset|unset", fmt(obs)
    # and again: the second upgrade's binary gets them too
    code, ev3, ans = upgrade(td, ev2, cid="up-2")
    assert ans["extras"].get("ok") is True, fmt(ans)
    assert_error(ev3.call("session.open", {"name": "e"}, timeout=T), "too_large")


def test_jupyter_kernel_keeps_its_variables(termd_factory, tmp_path):
    """The plugin's program (and so its kernel) is kept: the same pid, its
    pipes taken back; x = 41 before, x + 1 == 42 after. A cell in flight
    is answered with an error that says why (its re-send by id gets it)."""
    from test_plugins import real
    td = real(termd_factory, tmp_path, "jupyter")
    ev = td.events()
    obs = ev.call("run_ipython", {"code": "x = 41; import os; print(os.getpid())"}, timeout=180)
    assert obs["observation"] == "run_ipython", fmt(obs)
    kpid = int(obs["content"].split("\n")[0])
    other = td.events()
    ev.send_action("run_ipython", {"code": "import time; time.sleep(3); print('late')"},
                   id="cell-in-flight")
    time.sleep(0)   # sent; the upgrade is on another connection
    other.send_action("termd.upgrade", {}, id="up-j")
    assert wait_closed(other) == 1012
    ev2 = reconnect(td)
    ans = ev2.call("termd.upgrade", {}, id="up-j", timeout=T)
    assert ans["extras"].get("ok") is True, fmt(ans)
    obs = ev2.call("run_ipython", {"code": "print(x + 1); print(os.getpid())"}, timeout=T)
    assert obs["observation"] == "run_ipython", fmt(obs)
    assert obs["content"].split("\n")[:2] == ["42", str(kpid)], fmt(obs)
    again = ev2.call("run_ipython", {"code": "print('late')"}, id="cell-in-flight", timeout=T)
    assert again["observation"] == "error", fmt(again)   # the retained answer, not a second run
    assert "upgraded in place" in again["content"], fmt(again)
    # the program still answers in order after that
    obs = ev2.call("run_ipython", {"code": "x += 1; print(x)"}, timeout=T)
    assert obs["content"].split("\n")[0] == "42", fmt(obs)


def read_cast(path):
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    assert lines[-1] == "", "the file does not end with a whole line"
    header = json.loads(lines[0])
    events = [json.loads(l) for l in lines[1:-1]]
    return header, events


def test_recording_goes_on_in_the_same_file(termd_factory, tmp_path):
    """--record: after the upgrade the session's events are appended to
    the same asciicast v2 file, one header, times never going back."""
    rd = tmp_path / "rec"
    rd.mkdir(mode=0o700)
    td = termd_factory(args=["--record", str(rd)])
    ev = td.events()
    run_done(ev, "echo before-up''grade")
    files = sorted(os.listdir(rd))
    assert len(files) == 1, files
    t_before = read_cast(rd / files[0])[1][-1][0]
    code, ev2, ans = upgrade(td, ev)
    assert ans["extras"].get("ok") is True, fmt(ans)
    run_done(ev2, "echo after-up''grade")
    path = rd / files[0]
    wait_until(lambda: "after-upgrade" in path.read_text(), timeout=T, what="the output recorded")
    assert sorted(os.listdir(rd)) == files, "a second recording was started"
    header, events = read_cast(path)
    assert header.get("version") == 2, header
    assert all(isinstance(e, list) and len(e) == 3 and e[1] in ("o", "i", "r", "m") for e in events), \
        [e for e in events if not (isinstance(e, list) and len(e) == 3)][:3]
    assert not any(isinstance(e, list) and e and isinstance(e[0], dict) for e in events)
    times = [e[0] for e in events]
    assert times == sorted(times), times
    out = "".join(e[2] for e in events if e[1] == "o")
    assert "before-upgrade" in out and "after-upgrade" in out
    after = [e for e in events if e[1] == "o" and "after-upgrade" in e[2]]
    assert after[0][0] >= t_before, (after[0], t_before)
