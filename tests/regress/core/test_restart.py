"""PROTOCOL.md section 3: when the shell in `main` exits termd reports
session.exit, and the next action on main starts a fresh shell with
extras.restarted true."""

import os

from tdtest import content, fmt, run, run_done


def _restarted_fresh(ev, termd):
    obs = run_done(ev, "echo again")
    assert content(obs) == "again", fmt(obs)
    assert obs["extras"].get("restarted") is True, fmt(obs)
    # a fresh shell: no state from the old one, back in termd's cwd
    obs = run_done(ev, "echo ${MARK:-unset}")
    assert content(obs) == "unset", fmt(obs)
    assert not obs["extras"].get("restarted"), "restarted reported twice: %s" % fmt(obs)
    assert os.path.realpath(obs["extras"]["cwd"]) == os.path.realpath(termd.home), fmt(obs)
    assert content(run_done(ev, "echo $((6*7))")) == "42"


def test_exit_main_event_and_restart(termd):
    watcher = termd.events()
    sub = watcher.call("subscribe", {})
    assert sub.get("observation") != "error", fmt(sub)
    ev = termd.events()
    run_done(ev, "export MARK=1; cd /tmp")
    obs = run(ev, "exit 3")  # answered somehow: a run observation or an error
    assert obs.get("cause") is not None
    ex = watcher.wait_for(lambda o: o.get("observation") == "session.exit", 30)
    assert ex.get("cause") is None, fmt(ex)
    x = ex.get("extras") or {}
    assert x.get("name") == "main", fmt(ex)
    assert x.get("exit_code") == 3, fmt(ex)
    assert "signal" in x, fmt(ex)
    _restarted_fresh(ev, termd)


def test_exit_main_subscribed_self(termd):
    ev = termd.events()
    run_done(ev, "MARK=1")
    sub = ev.call("subscribe", {})
    assert sub.get("observation") != "error", fmt(sub)
    run(ev, "exit")
    ex = ev.wait_for(lambda o: o.get("observation") == "session.exit", 30)
    assert (ex.get("extras") or {}).get("name") == "main", fmt(ex)
    assert ex["extras"].get("exit_code") == 0, fmt(ex)
    _restarted_fresh(ev, termd)


def test_exit_twice(termd):
    ev = termd.events()
    for i in range(2):
        run(ev, "exit")
        obs = run_done(ev, "echo round%d" % i)
        assert content(obs) == "round%d" % i and obs["extras"].get("restarted") is True, fmt(obs)
    status, _, _ = termd.healthz()
    assert status == 200
