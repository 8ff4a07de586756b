"""The read-only view token on /events (PROTOCOL.md section 1): it admits
subscribe, session.list, screen and ping only; every other action is
answered `forbidden` and nothing is carried out."""
import os

import tdtest
from tdtest import assert_error


def start(termd_factory, tmp_path):
    vt = tmp_path / "view"
    vt.write_text("viewsecret\n")
    return termd_factory(args=("--view-token-file", str(vt)), token="fullsecret")


def test_view_token_may_watch(termd_factory, tmp_path):
    t = start(termd_factory, tmp_path)
    ro = t.events(token="viewsecret")
    assert ro.call("ping", {})["observation"] == "pong"
    assert ro.call("screen", {})["observation"] == "screen"
    assert ro.call("subscribe", {})["observation"] == "subscribe"
    names = [s["name"] for s in ro.call("session.list", {})["extras"]["sessions"]]
    assert "main" in names


def test_view_token_cannot_act(termd_factory, tmp_path):
    t = start(termd_factory, tmp_path)
    ro = t.events(token="viewsecret")
    marker = tmp_path / "must-not-exist"
    forbidden = [
        ("run", {"command": "touch %s" % marker}),
        ("run", {"command": "touch %s" % marker, "session": "other"}),
        ("keys", {"keys": ["touch %s" % marker, "Enter"]}),
        ("expect", {"pattern": "x", "timeout": 1}),
        ("session.open", {"name": "ro-opened"}),
        ("session.signal", {"signal": "INT"}),
        ("session.close", {"name": "main"}),
    ]
    for action, args in forbidden:
        assert_error(ro.call(action, args), "forbidden")
    full = t.events(token="fullsecret")
    tdtest.run_done(full, "true")   # anything typed would have run by now
    assert not os.path.exists(marker)
    names = [s["name"] for s in full.call("session.list", {})["extras"]["sessions"]]
    assert names == ["main"]        # neither "other" nor "ro-opened" appeared
