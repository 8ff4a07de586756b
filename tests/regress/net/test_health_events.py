"""PROTOCOL.md sections 1-2: /healthz, the hello observation, ping, seq,
error observations, frame size limits, misbehaving clients, token auth."""

import json
import os
import socket
import subprocess
import time

import pytest

import wsclient
from conftest import TERMD_BIN, base_env
from tdtest import assert_error, content, fmt, run, run_done


def session_names(sessions):
    return [s if isinstance(s, str) else s.get("name") for s in sessions]


# ---------------------------------------------------------------- /healthz

def test_healthz_fields(termd):
    status, headers, body = termd.healthz()
    assert status == 200, (status, body)
    h = json.loads(body)
    assert h.get("ok") is True, h
    assert isinstance(h.get("version"), str) and h["version"], h
    assert isinstance(h.get("sessions"), int) and not isinstance(h["sessions"], bool), h
    assert h["sessions"] >= 1, h  # main exists from start-up
    assert isinstance(h.get("uptime_s"), (int, float)) and h["uptime_s"] >= 0, h


def test_healthz_uptime_grows(termd):
    _, _, b1 = termd.healthz()
    time.sleep(0.3)
    _, _, b2 = termd.healthz()
    assert json.loads(b2)["uptime_s"] > json.loads(b1)["uptime_s"]


# ---------------------------------------------------------------- hello, ping, seq

def test_hello(termd):
    ev = termd.events()
    h = ev.hello
    assert h["observation"] == "hello"
    x = h.get("extras") or {}
    assert isinstance(x.get("version"), str) and x["version"], fmt(h)
    assert x.get("protocol") == 1, fmt(h)
    assert isinstance(x.get("seq"), int), fmt(h)
    assert "main" in session_names(x.get("sessions") or []), fmt(h)
    actions = x.get("actions")
    assert isinstance(actions, list), fmt(h)
    for a in ("run", "keys", "screen", "ping"):
        assert a in actions, "%s missing from hello actions %r" % (a, actions)
    # hello's version is the same termd as /healthz
    _, _, body = termd.healthz()
    assert json.loads(body)["version"] == x["version"]


def test_ping_pong(ev):
    obs = ev.call("ping", id="ping-1")
    assert obs["observation"] == "pong", fmt(obs)
    assert obs["cause"] == "ping-1"
    assert isinstance(obs.get("seq"), int) and obs["seq"] > ev.hello["extras"]["seq"], fmt(obs)
    assert isinstance(obs.get("ts"), (int, float)), fmt(obs)
    assert abs(obs["ts"] - time.time()) < 300, "ts %r is not Unix seconds" % obs["ts"]


def test_integer_id_is_echoed_as_cause(ev):
    n = 900000000 + os.getpid()
    obs = ev.call("ping", id=n)
    assert obs["observation"] == "pong", fmt(obs)
    assert obs["cause"] == n and isinstance(obs["cause"], int), fmt(obs)


def test_action_without_args_and_with_empty_args(ev):
    obs = ev.call("ping", args={})
    assert obs["observation"] == "pong", fmt(obs)


def test_seq_increases_across_connections(termd):
    a = termd.events()
    b = termd.events()
    seqs = []
    for _ in range(3):
        for ev in (a, b):
            obs = ev.ping()
            assert obs["observation"] == "pong", fmt(obs)
            seqs.append(obs["seq"])
    assert all(x < y for x, y in zip(seqs, seqs[1:])), "seq not strictly increasing: %r" % seqs
    c = termd.events()
    assert c.hello["extras"]["seq"] >= seqs[-1], (c.hello, seqs)
    obs = c.ping()
    assert obs["seq"] > seqs[-1]


def test_a_running_command_does_not_block_other_clients(termd):
    a = termd.events()
    b = termd.events()
    rid = a.send_action("run", {"command": "sleep 3; echo done-a"})
    obs = b.ping()
    assert obs["observation"] == "pong", fmt(obs)
    # If termd had blocked on A's command, A's answer would already be
    # waiting in A's socket before B's pong was sent.
    try:
        early = a.ws.recv(0.05)
    except TimeoutError:
        early = None
    assert early is None, "A's run was answered before B's ping: termd blocks on commands (%r)" % (early,)
    obs = a.wait_for(lambda o: o.get("cause") == rid, 60)
    assert content(obs) == "done-a", fmt(obs)
    # B, not subscribed, received nothing of A's
    try:
        stray = b.recv_obs(0.5)
    except TimeoutError:
        stray = None
    assert stray is None, "observation for another client delivered to B: %s" % fmt(stray)


# ---------------------------------------------------------------- errors

def test_bad_json(ev):
    ev.send_raw("this is not json {")
    obs = ev.recv_obs(30)
    assert_error(obs, "bad_json", cause=None)
    ev.send_raw('{"id": "x", "action": "ping"')  # truncated
    assert_error(ev.recv_obs(30), "bad_json", cause=None)
    # the connection is still usable
    assert ev.ping()["observation"] == "pong"


@pytest.mark.parametrize("frame", ['[1, 2, 3]', '"ping"', '42', 'null'])
def test_json_not_an_object(ev, frame):
    ev.send_raw(frame)
    obs = ev.recv_obs(30)
    assert_error(obs, "bad_request")
    assert obs.get("cause") is None, fmt(obs)
    assert ev.ping()["observation"] == "pong"


def test_missing_action(ev):
    ev.send_raw(json.dumps({"id": "no-action-1", "args": {}}))
    obs = ev.recv_obs(30)
    assert_error(obs, "bad_request")
    assert obs.get("cause") in ("no-action-1", None), fmt(obs)
    ev.send_raw(json.dumps({"id": "no-action-2", "action": 7}))
    obs = ev.recv_obs(30)
    assert_error(obs, "bad_request")
    assert obs.get("cause") in ("no-action-2", None), fmt(obs)
    assert ev.ping()["observation"] == "pong"


def test_unknown_action(ev):
    obs = ev.call("no.such.action", {"x": 1}, id="unk-1")
    assert_error(obs, "unknown_action", cause="unk-1")
    assert ev.ping()["observation"] == "pong"


def test_run_without_command(ev):
    assert_error(ev.call("run", {}, id="r-nocmd"), "bad_request", cause="r-nocmd")
    assert_error(ev.call("run", id="r-noargs"), "bad_request", cause="r-noargs")


@pytest.mark.parametrize("args", [
    {"command": 42},
    {"command": None},
    {"command": ["echo", "hi"]},
    {"command": "echo hi", "timeout": "soon"},
    {"command": "echo hi", "session": 5},
])
def test_run_mistyped_fields(ev, args):
    obs = ev.call("run", args)
    assert_error(obs, "bad_request")
    # nothing ran: the shell is idle and answers normally
    assert content(run_done(ev, "echo fine")) == "fine"


def test_run_args_not_an_object(ev):
    ev.send_raw(json.dumps({"id": "args-str", "action": "run", "args": "echo hi"}))
    obs = ev.wait_for(lambda o: o.get("observation") == "error" or o.get("cause") == "args-str")
    assert_error(obs, "bad_request")


def test_run_in_session_with_invalid_name(ev):
    for name in ("bad name/with*chars", "", "x" * 65, "../main"):
        obs = ev.call("run", {"command": "echo hi", "session": name})
        assert_error(obs, "bad_request", "no_such_session")
    assert ev.ping()["observation"] == "pong"


# ---------------------------------------------------------------- frame limits

def _padded_ping(id, size):
    """A valid JSON ping action exactly `size` bytes long (whitespace padded)."""
    head = '{"id": "%s", "action": "ping"' % id
    return (head + " " * (size - len(head) - 1) + "}").encode()


def test_frame_just_under_limit_works(termd_factory):
    t = termd_factory(args=["--max-frame", "1048576"])
    ev = t.events()
    ev.send_raw(_padded_ping("under-1", 1000000))
    obs = ev.wait_for(lambda o: o.get("cause") == "under-1" or o.get("observation") == "error", 60)
    assert obs["observation"] == "pong", fmt(obs)


def test_frame_over_max_frame(termd_factory):
    t = termd_factory(args=["--max-frame", "1048576"])
    ev = t.events()
    ev.send_raw(_padded_ping("over-1", 2 * 1024 * 1024))
    obs = ev.recv_obs(60)
    assert_error(obs, "too_large", cause=None)
    # the connection may stay open (the contract says it does) ...
    try:
        still = ev.ping()
    except wsclient.ConnectionClosed:
        still = None
    if still is not None:
        assert still["observation"] == "pong", fmt(still)
    # ... and termd keeps serving others
    other = t.events()
    assert other.ping()["observation"] == "pong"
    assert content(run_done(other, "echo alive")) == "alive"


def test_100mb_frame_default_limit(termd):
    ev = termd.events()
    total = 100 * 1024 * 1024
    head = b'{"id": "huge-1", "action": "ping"'
    chunk = b" " * (1 << 20)

    def chunks():
        yield head
        left = total - len(head) - 1
        while left > 0:
            k = min(left, len(chunk))
            yield chunk if k == len(chunk) else chunk[:k]
            left -= k
        yield b"}"

    try:
        ev.ws.send_large(wsclient.OP_TEXT, total, chunks(), send_timeout=120)
    except (BrokenPipeError, ConnectionResetError, socket.timeout, TimeoutError):
        pass  # termd may close the connection (or stop reading) part-way
    obs = ev.recv_obs(120)
    assert_error(obs, "too_large", cause=None)
    other = termd.events()
    assert other.ping()["observation"] == "pong"
    assert content(run_done(other, "echo alive")) == "alive"


# ---------------------------------------------------------------- misbehaving clients

def test_client_disconnects_mid_command(termd):
    a = termd.events()
    a.send_action("run", {"command": "sleep 2; echo x"})
    time.sleep(0.3)  # let the command start
    a.ws.abort()
    b = termd.events()
    assert b.ping()["observation"] == "pong"
    # The command keeps running; once it is over, main works as usual.
    deadline = time.monotonic() + 60
    while True:
        obs = run(b, "echo after")
        if obs.get("observation") == "error" and (obs.get("extras") or {}).get("code") == "busy":
            assert time.monotonic() < deadline, "main still busy long after sleep 2 ended"
            time.sleep(0.2)
            continue
        break
    assert obs.get("observation") == "run", fmt(obs)
    assert content(obs) == "after", fmt(obs)
    assert obs["extras"]["exit_code"] == 0


def test_client_disconnects_mid_frame(termd):
    a = termd.events()
    payload = b'{"id": "half", "action": "ping"}' + b" " * 2000
    key = b"\x01\x02\x03\x04"
    a.ws.sock.sendall(wsclient.frame_header(wsclient.OP_TEXT, len(payload)) + key
                      + wsclient.mask_bytes(payload[:100], key))
    a.ws.abort()
    # garbage that is not WebSocket at all after the upgrade
    c = termd.events()
    c.ws.sock.sendall(b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff")
    c.ws.abort()
    b = termd.events()
    assert b.ping()["observation"] == "pong"
    assert content(run_done(b, "echo ok")) == "ok"


def test_many_connections_come_and_go(termd):
    for _ in range(20):
        ev = termd.events()
        ev.ws.abort()
    ev = termd.events()
    assert ev.ping()["observation"] == "pong"


# ---------------------------------------------------------------- auth

def _upgrade_status(url, path, headers=None):
    try:
        ws = wsclient.connect(url, path, wsclient.EVENTS_SUBPROTOCOL, headers=headers)
    except wsclient.HandshakeError as e:
        return e.status
    ws.abort()
    return 101


def test_token_auth(termd_factory):
    t = termd_factory(token="secret")
    # no token, wrong token: 401 and no upgrade
    assert _upgrade_status(t.url, "/events") == 401
    assert _upgrade_status(t.url, "/events", {"Authorization": "Bearer wrong"}) == 401
    assert _upgrade_status(t.url, "/events?token=wrong") == 401
    assert _upgrade_status(t.url, "/events?token=secre") == 401
    # the whole token and nothing more: longer ones that start with it fail
    assert _upgrade_status(t.url, "/events?token=secretx") == 401
    assert _upgrade_status(t.url, "/events", {"Authorization": "Bearer secret secret"}) == 401
    assert _upgrade_status(t.url, "/events", {"Authorization": "Bearer secre"}) == 401
    # /healthz needs none
    status, _, body = t.healthz()
    assert status == 200 and json.loads(body)["ok"] is True
    # header works
    ev = t.events(token="secret")
    assert ev.ping()["observation"] == "pong"
    # query works
    ev2 = wsclient.Events(t.url, path="/events?token=secret")
    t.clients.append(ev2)
    assert ev2.ping()["observation"] == "pong"


def test_token_from_token_file(termd_factory, tmp_path):
    f = tmp_path / "tok"
    f.write_text("filesecret\n")
    t = termd_factory(args=["--token-file", str(f)])
    assert _upgrade_status(t.url, "/events") == 401
    ev = t.events(token="filesecret")
    assert ev.ping()["observation"] == "pong"


def test_refuses_non_loopback_without_token(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = base_env(home)
    try:
        p = subprocess.run([TERMD_BIN, "--listen", "0.0.0.0:18421", "--cwd", str(home)],
                           env=env, capture_output=True, text=True, timeout=20,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail("termd started on 0.0.0.0 without a token (still running after 20 s)")
    assert p.returncode != 0, "termd exited 0 on a non-loopback address without a token"
    assert p.returncode > 0, "termd died of signal %d instead of refusing" % -p.returncode
    assert p.stderr.strip(), "no message on stderr"
