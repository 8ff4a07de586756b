"""Issue 47 / PROTOCOL.md §12: OpenHands V1 (the agent-server's workspace
API) on an `api=openhands` listener, on the wire: health and info, the
key (401 {"detail":"Unauthorized"}; the view token opens nothing), bash
commands (sh -c, no terminal, concurrent, own process group, timeout ends
the group with -1, a pipe session of their own on /events and in
session.list), events (V1 ids and timestamps, search filters, sort, pages,
422s, by id, batch, clear), BashOutput pieces while output flows, in
order, none repeated, execute_bash_command's whole tail, files (upload,
download, V1's 400/404), git (changes, diff, not a repository), and the
/sockets/bash-events WebSocket (three ways to give the key, 4001, resend,
a frame that starts a command, a bad frame's BashError)."""

import json
import os
import re
import subprocess
import time
import uuid

import pytest

import tdtest
import wsclient
from tdtest import BIG, dead_or_zombie, ended_command, free_port, until_reaped, upgrade

T = 60.0
KEY = "v1-full-token"
VIEW = "v1-view-token"
ID_RE = re.compile(r"^[0-9a-f]{32}$")
TS_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|\+00:00)$")


class V1:
    def __init__(self, url, key=KEY):
        self.url, self.key = url, key

    def req(self, method, path, body=None, key="default", headers=None, raw=False):
        h = dict(headers or {})
        k = self.key if key == "default" else key
        if k is not None:
            h["X-Session-API-Key"] = k
        data = b""
        if body is not None and not isinstance(body, bytes):
            data = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        elif body is not None:
            data = body
        st, hd, b = wsclient.http_request(self.url, path, method=method, headers=h, body=data,
                                          timeout=T)
        if raw:
            return st, hd, b
        try:
            return st, json.loads(b) if b else None
        except ValueError:
            return st, b

    def get(self, path, **kw):
        return self.req("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.req("POST", path, body, **kw)

    def execute(self, command, **kw):
        st, ev = self.post("/api/bash/execute_bash_command", dict(command=command, **kw))
        assert st == 200, ev
        return ev

    def outputs(self, cid):
        st, page = self.get("/api/bash/bash_events/search?command_id__eq=%s&kind__eq=BashOutput"
                            "&limit=100" % cid)
        assert st == 200, page
        return page["items"]


@pytest.fixture
def v1(termd_factory, tmp_path):
    port = free_port()
    vt = tmp_path / "view"
    vt.write_text(VIEW)
    td = termd_factory(token=KEY, args=["--listen", "127.0.0.1:%d,api=openhands" % port,
                                        "--view-token-file", str(vt)])
    c = V1("ws://127.0.0.1:%d" % port)
    c.td = td
    return c


def wait_until(fn, timeout=T, what="condition"):
    return tdtest.wait_until(fn, timeout=timeout, interval=0.02, what=what)


# ------------------------------------------------------------- health, key

def test_health_and_server_info(v1):
    assert v1.get("/alive", key=None) == (200, {"status": "ok"})
    assert v1.get("/health", key=None) == (200, {"status": "ok"})
    assert v1.get("/ready", key=None) == (200, {"status": "ready"})
    st, info = v1.get("/server_info", key=None)
    assert st == 200
    for k in ("uptime", "idle_time", "title", "version", "sdk_version", "tools_version",
              "workspace_version", "build_git_sha", "build_git_ref", "python_version",
              "usable_tools", "runtime_idle_timeout_seconds", "capabilities",
              "max_foreground_terminal_timeout_seconds", "docs", "redoc"):
        assert k in info, k
    assert isinstance(info["uptime"], float) and isinstance(info["idle_time"], float)
    for k in ("title", "version", "sdk_version", "tools_version", "workspace_version",
              "build_git_sha", "build_git_ref", "python_version"):
        assert isinstance(info[k], str), k   # str in V1's ServerInfo
    assert info["docs"] == "/docs" and info["redoc"] == "/redoc"
    assert v1.get("/no/such/route", key=None) == (404, {"detail": "Not Found"})


@pytest.mark.parametrize("key", [None, "", "wrong", VIEW])
def test_api_needs_the_full_token(v1, key):
    for method, path, body in (("POST", "/api/bash/start_bash_command", {"command": "true"}),
                               ("POST", "/api/bash/execute_bash_command", {"command": "true"}),
                               ("GET", "/api/bash/bash_events/search", None),
                               ("DELETE", "/api/bash/bash_events", None),
                               ("GET", "/api/file/download?path=/etc/hostname", None),
                               ("GET", "/api/git/changes?path=/tmp", None)):
        st, b = v1.req(method, path, body, key=key)
        assert (st, b) == (401, {"detail": "Unauthorized"}), (method, path, st, b)
    # nothing ran
    st, page = v1.get("/api/bash/bash_events/search")
    assert st == 200 and page["items"] == []


# -------------------------------------------------------------------- bash

def test_start_answers_the_bash_command_at_once(v1):
    st, ev = v1.post("/api/bash/start_bash_command", {"command": "sleep 30", "timeout": 60})
    assert st == 200
    assert ev["kind"] == "BashCommand" and ID_RE.match(ev["id"]) and TS_RE.match(ev["timestamp"])
    assert ev["command"] == "sleep 30" and ev["cwd"] is None and ev["timeout"] == 60
    st, got = v1.get("/api/bash/bash_events/%s" % ev["id"])
    assert (st, got) == (200, ev)
    # a pipe session of its own, in session.list
    ans = v1.td.events().call("session.list", {})
    names = [s["name"] for s in ans["extras"]["sessions"]]
    assert "ohv1-" + ev["id"] in names


def test_execute_runs_sh_c_without_a_terminal(v1):
    ev = v1.execute("echo out; echo err >&2; test -t 0 || echo no-tty; echo $0; exit 3")
    assert ev["kind"] == "BashOutput" and ev["exit_code"] == 3
    assert ev["stdout"] == "out\nno-tty\n/bin/sh\n" and ev["stderr"] == "err\n"
    assert ID_RE.match(ev["id"]) and ID_RE.match(ev["command_id"])


def test_commands_share_no_shell_state(v1):
    v1.execute("cd /; export V1X=1")
    ev = v1.execute("pwd; echo x${V1X}x", cwd="/tmp")
    assert ev["stdout"] == "/tmp\nxx\n"


def test_commands_run_concurrently_in_their_own_groups(v1):
    # two commands that can only finish together: each waits for the other's file
    d = v1.td.home
    a = v1.post("/api/bash/start_bash_command", {
        "command": "touch %s/a; while [ ! -e %s/b ]; do sleep 0.01; done; "
                   "ps -o pgid= -p $$ | tr -d ' '; echo $$" % (d, d)})[1]
    b = v1.post("/api/bash/start_bash_command", {
        "command": "touch %s/b; while [ ! -e %s/a ]; do sleep 0.01; done; echo done" % (d, d)})[1]

    def ended(cid):
        outs = v1.outputs(cid)
        return outs if outs and outs[-1]["exit_code"] is not None else None
    oa = wait_until(lambda: ended(a["id"]), what="command a")
    ob = wait_until(lambda: ended(b["id"]), what="command b")
    assert oa[-1]["exit_code"] == 0 and ob[-1]["exit_code"] == 0
    pgid, pid = "".join(o["stdout"] or "" for o in oa).split()
    assert pgid == pid   # the shell leads its own process group


def test_timeout_ends_the_group_with_minus_one(v1):
    pidfile = v1.td.home / "child.pid"
    ev = v1.execute("echo started; sleep 300 & echo $! > %s; wait" % pidfile, timeout=1)
    assert ev["exit_code"] == -1
    assert "started" in (ev["stdout"] or "")
    pid = int(pidfile.read_text())
    wait_until(lambda: dead_or_zombie(pid), what="the child gone")


def test_output_pieces_come_while_it_runs_in_order_none_repeated(v1):
    gate = v1.td.home / "gate"
    st, cmd = v1.post("/api/bash/start_bash_command", {
        "command": "echo first; echo e1 >&2; while [ ! -e %s ]; do sleep 0.01; done; "
                   "seq 1 20000; echo e2 >&2" % gate})
    # the first line is an event before the command ends
    first = wait_until(lambda: v1.outputs(cmd["id"]), what="a BashOutput while running")
    assert first[0]["exit_code"] is None and first[0]["order"] == 0
    gate.touch()
    outs = wait_until(lambda: (lambda o: o if o and o[-1]["exit_code"] is not None else None)(
        v1.outputs(cmd["id"])), what="the end")
    assert [o["order"] for o in outs] == list(range(len(outs)))
    assert len({o["id"] for o in outs}) == len(outs)
    out = "".join(o["stdout"] or "" for o in outs)
    err = "".join(o["stderr"] or "" for o in outs)
    assert out == "first\n" + "".join("%d\n" % i for i in range(1, 20001))
    assert err == "e1\ne2\n"
    assert outs[-1]["exit_code"] == 0


def test_execute_returns_the_whole_output(v1):
    ev = v1.execute("seq 1 50000")
    assert ev["stdout"] == "".join("%d\n" % i for i in range(1, 50001))


def test_bad_request_is_422(v1):
    st, b = v1.post("/api/bash/start_bash_command", {"cwd": "/"})
    assert st == 422 and b["detail"][0]["loc"] == ["body", "command"]
    assert b["detail"][0]["type"] == "missing"
    st, b = v1.post("/api/bash/execute_bash_command", {"command": "true", "timeout": "x"})
    assert st == 422 and b["detail"][0]["loc"] == ["body", "timeout"]


def test_spawn_failure_is_an_output_with_minus_one(v1):
    ev = v1.execute("true", cwd="/nonexistent/dir")
    assert ev["exit_code"] == -1 and ev["stderr"].startswith("Error executing command")


def test_command_is_on_the_event_stream(v1):
    ev = v1.td.events()
    ev.call("subscribe", {})
    v1.execute("echo on-events")
    def seen():
        try:
            o = ev.recv_obs(5)
        except Exception:
            return None
        return o if o.get("observation") == "session.open" and \
            o.get("extras", {}).get("name", "").startswith("ohv1-") else None
    wait_until(seen, what="session.open of the command on /events")


# ------------------------------------------------------------------ events

def test_search_filters_sort_and_pages(v1):
    ids = [v1.execute("echo %d" % i)["command_id"] for i in range(3)]
    st, page = v1.get("/api/bash/bash_events/search?kind__eq=BashCommand")
    assert st == 200 and [e["id"] for e in page["items"]] == ids
    assert page["next_page_id"] is None
    st, page = v1.get("/api/bash/bash_events/search?kind__eq=BashCommand"
                      "&sort_order=TIMESTAMP_DESC")
    assert [e["id"] for e in page["items"]] == ids[::-1]
    # pages of 2
    got, pid = [], None
    while True:
        q = "/api/bash/bash_events/search?limit=2" + ("&page_id=" + pid if pid else "")
        st, page = v1.get(q)
        assert st == 200 and len(page["items"]) <= 2
        got += page["items"]
        pid = page["next_page_id"]
        if not pid:
            break
    st, allp = v1.get("/api/bash/bash_events/search")
    assert got == allp["items"]
    ts = [e["timestamp"] for e in got]
    assert ts == sorted(ts) and len(set(ts)) == len(ts)
    # by command, timestamps, order
    dashed = str(uuid.UUID(ids[1]))
    st, page = v1.get("/api/bash/bash_events/search?command_id__eq=" + dashed)
    assert page["items"] and all(e["kind"] == "BashOutput" and e["command_id"] == ids[1]
                                 for e in page["items"])
    mid = [e for e in got if e["id"] == ids[1]][0]["timestamp"]
    st, page = v1.get("/api/bash/bash_events/search?timestamp__gte=%s" % mid)
    assert page["items"][0]["id"] == ids[1]
    st, page = v1.get("/api/bash/bash_events/search?timestamp__lt=%s" % mid)
    assert all(e["timestamp"] < mid for e in page["items"]) and page["items"]
    st, page = v1.get("/api/bash/bash_events/search?kind__eq=BashOutput&order__gt=0")
    assert all(e["order"] > 0 for e in page["items"])


@pytest.mark.parametrize("q,loc", [("limit=101", "limit"), ("limit=0", "limit"),
                                   ("limit=x", "limit"), ("kind__eq=Nope", "kind__eq"),
                                   ("sort_order=UP", "sort_order"),
                                   ("command_id__eq=zz", "command_id__eq"),
                                   ("order__gt=a", "order__gt"),
                                   ("timestamp__gte=yesterday", "timestamp__gte")])
def test_search_validation_is_422(v1, q, loc):
    st, b = v1.get("/api/bash/bash_events/search?" + q)
    assert st == 422, b
    d = b["detail"][0]
    assert d["loc"] == ["query", loc] and d["msg"] and d["type"]
    if q == "limit=101":
        assert d["type"] == "less_than_equal" and d["ctx"] == {"le": 100}


def test_event_by_id_batch_and_clear(v1):
    ev = v1.execute("echo x")
    st, got = v1.get("/api/bash/bash_events/%s" % ev["command_id"])
    assert st == 200 and got["kind"] == "BashCommand"
    missing = uuid.uuid4().hex
    assert v1.get("/api/bash/bash_events/%s" % missing) == (404, {"detail": "Not Found"})
    st, batch = v1.get("/api/bash/bash_events/", body=[ev["command_id"], missing])
    assert st == 200 and batch[0]["id"] == ev["command_id"] and batch[1] is None
    st, b = v1.req("DELETE", "/api/bash/bash_events")
    assert st == 200 and b["cleared_count"] >= 2
    st, page = v1.get("/api/bash/bash_events/search")
    assert page["items"] == []


def test_kept_events_counted_in_metrics(v1):
    """/metrics tells how many V1 events are kept and their bytes (the
    soak's figure that tells this bounded store from a leak): each kept
    event as GET by id gives it counted once, and a clear takes both to 0
    (the store's own count and bytes are what its 20000 / 64 MiB bound
    is checked against)."""
    from test_cgroups import metric, parse_metrics

    def kept():
        st, _, body = wsclient.http_request(v1.td.url, "/metrics", headers={"Authorization": "Bearer " + KEY},
                                            timeout=T)
        assert st == 200
        s, types = parse_metrics(body.decode())
        assert types["termd_ohv1_events_kept"] == types["termd_ohv1_events_kept_bytes"] == "gauge"
        if "termd_heap_in_use_bytes" in types:   # (glibc)
            assert metric(s, "termd_heap_in_use_bytes") > 0
        return metric(s, "termd_ohv1_events_kept"), metric(s, "termd_ohv1_events_kept_bytes")

    for i in range(3):
        v1.execute("echo kept-%d" % i)
    st, page = v1.get("/api/bash/bash_events/search?limit=100")
    assert st == 200 and len(page["items"]) >= 6 and not page.get("next_page_id")
    total = 0
    for it in page["items"]:
        st, _, raw = v1.get("/api/bash/bash_events/%s" % it["id"], raw=True)
        assert st == 200
        total += len(raw)
    assert kept() == (len(page["items"]), total)
    st, b = v1.req("DELETE", "/api/bash/bash_events")
    assert st == 200 and b["cleared_count"] == len(page["items"])
    assert kept() == (0, 0)
    v1.execute("echo after")
    n, nbytes = kept()
    assert n >= 2 and nbytes > 0


# ------------------------------------------------------------------- files

def multipart(name, data):
    b = uuid.uuid4().hex
    body = ("--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s\"\r\n"
            "Content-Type: application/octet-stream\r\n\r\n" % (b, name)).encode() + data + \
        ("\r\n--%s--\r\n" % b).encode()
    return body, {"Content-Type": "multipart/form-data; boundary=" + b}


def test_upload_and_download(v1):
    data = bytes(range(256)) * 100
    dest = v1.td.home / "new" / "deeper" / "blob.bin"
    body, h = multipart("src.bin", data)
    st, b = v1.post("/api/file/upload?path=%s" % dest, body, headers=h)
    assert (st, b) == (200, {"success": True})
    assert dest.read_bytes() == data
    st, hd, got = v1.get("/api/file/download?path=%s" % dest, raw=True)
    assert st == 200 and got == data
    assert hd["content-type"] == "application/octet-stream"
    assert 'filename="blob.bin"' in hd.get("content-disposition", "")


def test_file_errors(v1):
    body, h = multipart("a.txt", b"x")
    assert v1.post("/api/file/upload?path=rel/a.txt", body, headers=h) == \
        (400, {"detail": "Path must be absolute"})
    assert v1.get("/api/file/download?path=rel") == (400, {"detail": "Path must be absolute"})
    assert v1.get("/api/file/download?path=%s/nope" % v1.td.home) == \
        (404, {"detail": "File not found"})
    assert v1.get("/api/file/download?path=%s" % v1.td.home) == \
        (400, {"detail": "Path is not a file"})


# --------------------------------------------------------------------- git

def git(repo, *args):
    subprocess.run(["git", "-C", str(repo)] + list(args), check=True, capture_output=True,
                   env=dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t",
                            GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t"))


def test_git_changes_and_diff(v1):
    repo = v1.td.home / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "kept.txt").write_text("one\n")
    (repo / "gone.txt").write_text("bye\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "c1")
    (repo / "kept.txt").write_text("two\n")
    (repo / "gone.txt").unlink()
    (repo / "sub").mkdir()
    (repo / "sub" / "new.txt").write_text("new\n")
    st, ch = v1.get("/api/git/changes?path=%s" % repo)
    assert st == 200
    assert sorted((c["status"], c["path"]) for c in ch) == [
        ("ADDED", "sub/new.txt"), ("DELETED", "gone.txt"), ("UPDATED", "kept.txt")]
    st, d = v1.get("/api/git/diff?path=%s/kept.txt" % repo)
    # (as the SDK: the file's lines joined by \n, git show's output stripped)
    assert (st, d) == (200, {"modified": "two", "original": "one"})
    st, d = v1.get("/api/git/diff?path=%s/sub/new.txt" % repo)
    assert (st, d) == (200, {"modified": "new", "original": ""})
    git(repo, "mv", "kept.txt", "moved.txt")
    st, ch = v1.get("/api/git/changes?path=%s" % repo)
    assert [(c["status"], c["path"]) for c in ch] == [   # a rename: DELETED + ADDED, by path
        ("DELETED", "gone.txt"), ("DELETED", "kept.txt"), ("ADDED", "moved.txt"),
        ("ADDED", "sub/new.txt")]
    st, d = v1.get("/api/git/diff?path=%s/nope.txt" % repo)
    assert st == 500 and d["detail"] == "Internal Server Error" and "nope.txt" in d["exception"]
    st, d = v1.get("/api/git/diff?path=%s/kept.txt&ref=HEAD&commit=HEAD" % repo)
    assert st == 400


def test_git_outside_a_repository(v1):
    plain = v1.td.home / "plain"
    plain.mkdir()
    (plain / "f").write_text("x")
    assert v1.get("/api/git/changes?path=%s" % plain) == (200, [])
    assert v1.get("/api/git/diff?path=%s/f" % plain) == \
        (200, {"modified": None, "original": None})


# --------------------------------------------------------------- WebSocket

def ws(v1, query="", headers=None):
    return wsclient.connect(v1.url, "/sockets/bash-events" + query, subprotocol=None,
                            headers=headers, timeout=T)


def recv_json(sock, timeout=T):
    op, data = sock.recv(timeout)
    return json.loads(data)


def until_kind(sock, pred, timeout=T):
    deadline = time.monotonic() + timeout
    while True:
        e = recv_json(sock, deadline - time.monotonic())
        if pred(e):
            return e


@pytest.mark.parametrize("how", ["query", "header", "frame"])
def test_socket_pushes_every_event(v1, how):
    if how == "query":
        s = ws(v1, "?session_api_key=" + KEY)
    elif how == "header":
        s = ws(v1, headers={"X-Session-API-Key": KEY})
    else:
        s = ws(v1)
        s.send_text(json.dumps({"type": "auth", "session_api_key": KEY}))
    try:
        st, cmd = v1.post("/api/bash/start_bash_command", {"command": "echo pushed"})
        e = until_kind(s, lambda e: e["kind"] == "BashCommand")
        assert e == cmd
        e = until_kind(s, lambda e: e["kind"] == "BashOutput" and e["stdout"])
        assert e["stdout"] == "pushed\n" and e["command_id"] == cmd["id"]
        until_kind(s, lambda e: e["kind"] == "BashOutput" and e["exit_code"] == 0)
    finally:
        s.abort()


def test_socket_wrong_key_is_refused(v1):
    with pytest.raises(wsclient.HandshakeError) as e:
        ws(v1, "?session_api_key=wrong")
    assert e.value.status == 403
    s = ws(v1)
    s.send_text(json.dumps({"type": "auth", "session_api_key": "wrong"}))
    with pytest.raises(wsclient.ConnectionClosed) as c:
        recv_json(s)
    assert c.value.code == 4001
    s = ws(v1)   # a command before auth is no auth
    s.send_text(json.dumps({"command": "touch %s/never" % v1.td.home}))
    with pytest.raises(wsclient.ConnectionClosed) as c:
        recv_json(s)
    assert c.value.code == 4001
    assert not (v1.td.home / "never").exists()


def test_socket_without_auth_is_closed_after_10s(v1):
    s = ws(v1)
    with pytest.raises(wsclient.ConnectionClosed) as c:
        recv_json(s, timeout=30)
    assert c.value.code == 4001


def test_socket_resend_and_commands(v1):
    first = v1.execute("echo before")
    s = ws(v1, "?resend_mode=all&session_api_key=" + KEY)
    try:
        e = until_kind(s, lambda e: e["kind"] == "BashCommand")
        assert e["id"] == first["command_id"]
        s.send_text(json.dumps({"command": "echo via-socket"}))
        e = until_kind(s, lambda e: e["kind"] == "BashOutput" and e.get("stdout") == "via-socket\n")
        s.send_text("not json")
        e = until_kind(s, lambda e: e["kind"] == "BashError")
        assert e["code"] == "JSONDecodeError" and e["detail"]
        s.send_text(json.dumps({"type": "auth", "session_api_key": KEY}))   # ignored
        s.send_text(json.dumps({"cwd": "/"}))
        e = until_kind(s, lambda e: e["kind"] == "BashError")
        assert e["code"] == "ValidationError" and "command" in e["detail"]
    finally:
        s.abort()


# --------------------------------------------------------- upgrade in place

def test_commands_and_events_survive_an_upgrade_in_place(v1):
    done = v1.execute("echo earlier")
    gate = v1.td.home / "gate-up"
    st, cmd = v1.post("/api/bash/start_bash_command", {
        "command": "echo before; while [ ! -e %s ]; do sleep 0.01; done; echo after; exit 5"
                   % gate})
    wait_until(lambda: v1.outputs(cmd["id"]), what="the first piece")
    code, ev2, ans = upgrade(v1.td, v1.td.events(), cid="up-v1")
    assert ans["extras"]["ok"] is True, ans
    # the kept events came across
    assert v1.get("/api/bash/bash_events/%s" % done["command_id"])[0] == 200
    assert v1.get("/api/bash/bash_events/%s" % cmd["id"]) == (200, cmd)
    gate.touch()
    outs = wait_until(lambda: (lambda o: o if o and o[-1]["exit_code"] is not None else None)(
        v1.outputs(cmd["id"])), what="the end after the upgrade")
    assert outs[-1]["exit_code"] == 5
    assert "".join(o["stdout"] or "" for o in outs) == "before\nafter\n"
    assert [o["order"] for o in outs] == list(range(len(outs)))
    assert len({o["id"] for o in outs}) == len(outs)
    ev2.close()


def test_a_command_printing_while_termd_upgrades_ends_whole(v1):
    """Issue 52 (soak seed 202): a command that prints all along while
    termd upgrades in place ends with its own exit code, every line once,
    in order (not exit_code -1 with its output cut)"""
    gate = v1.td.home / "gate-print"
    st, cmd = v1.post("/api/bash/start_bash_command", {
        "command": "for i in $(seq 1 30); do echo line$i; [ $i = 5 ] && "
                   "while [ ! -e %s ]; do sleep 0.01; done; sleep 0.05; done" % gate})
    assert st == 200, cmd
    wait_until(lambda: "line5" in "".join(o["stdout"] or "" for o in v1.outputs(cmd["id"])),
               what="the first lines")
    gate.touch()   # it prints on while termd upgrades
    code, ev2, ans = upgrade(v1.td, v1.td.events(), cid="up-v1-print")
    assert ans["extras"]["ok"] is True, ans
    outs = wait_until(lambda: (lambda o: o if o and o[-1]["exit_code"] is not None else None)(
        v1.outputs(cmd["id"])), what="the end after the upgrade")
    assert outs[-1]["exit_code"] == 0, outs
    assert "".join(o["stdout"] or "" for o in outs) == "".join(
        "line%d\n" % i for i in range(1, 31))
    assert [o["order"] for o in outs] == list(range(len(outs)))
    ev2.close()


@pytest.mark.parametrize("closes", ["stdout", "both"])
def test_a_command_whose_output_ended_survives_an_upgrade(v1, closes):
    """Issue 52 (soak seed 202): a command whose stdout (or both outputs)
    had ended while it ran on was left behind by an upgrade in place (its
    session was not handed over): it ended with exit_code -1, the stderr
    it wrote after cut. Its session goes across; its end is its own."""
    gate = v1.td.home / ("gate-" + closes)
    shut = "exec >&- 2>&-" if closes == "both" else "exec >&-"
    st, cmd = v1.post("/api/bash/start_bash_command", {
        "command": "echo out; echo err1 >&2; %s; touch %s-shut; "
                   "while [ ! -e %s ]; do sleep 0.01; done; echo err2 >&2; exit 7"
                   % (shut, gate, gate)})
    assert st == 200, cmd
    wait_until(lambda: os.path.exists("%s-shut" % gate), what="its output closed")
    wait_until(lambda: "err1" in "".join(o["stderr"] or "" for o in v1.outputs(cmd["id"])),
               what="the first pieces")
    code, ev2, ans = upgrade(v1.td, v1.td.events(), cid="up-v1-" + closes)
    assert ans["extras"]["ok"] is True, ans
    gate.touch()
    outs = wait_until(lambda: (lambda o: o if o and o[-1]["exit_code"] is not None else None)(
        v1.outputs(cmd["id"])), what="the end after the upgrade")
    assert outs[-1]["exit_code"] == 7, outs
    assert "".join(o["stdout"] or "" for o in outs) == "out\n"
    assert "".join(o["stderr"] or "" for o in outs) == (
        "err1\n" if closes == "both" else "err1\nerr2\n")
    assert [o["order"] for o in outs] == list(range(len(outs)))
    ev2.close()



def test_a_character_split_at_an_upgrade_comes_whole(v1):
    """A command printed "a" and the first byte of "é" (on stdout and on
    stderr), termd upgraded in place, then it printed the rest: its
    BashOutput events say "aé-b" on each, whole, nothing lost or twice
    (the held-back byte goes across with the command; was: lost, the rest
    told as U+FFFD)."""
    gate = v1.td.home / "gate-split"
    st, cmd = v1.post("/api/bash/start_bash_command", {
        "command": "printf 'a\\303'; printf 'a\\303' >&2; while [ ! -e %s ]; do sleep 0.01; "
                   "done; printf '\\251-b'; printf '\\251-b' >&2; exit 3" % gate})
    assert st == 200, cmd

    def text(outs, k):
        return "".join(o[k] or "" for o in outs)
    # "a" told on both, the byte after it held back
    wait_until(lambda: (lambda o: text(o, "stdout") == "a" and text(o, "stderr") == "a")(
        v1.outputs(cmd["id"])), what="the first pieces")
    code, ev2, ans = upgrade(v1.td, v1.td.events(), cid="up-v1-split")
    assert ans["extras"]["ok"] is True, ans
    gate.touch()
    outs = wait_until(lambda: (lambda o: o if o and o[-1]["exit_code"] is not None else None)(
        v1.outputs(cmd["id"])), what="the end after the upgrade")
    assert outs[-1]["exit_code"] == 3, outs
    assert (text(outs, "stdout"), text(outs, "stderr")) == ("a\u00e9-b", "a\u00e9-b"), outs
    assert [o["order"] for o in outs] == list(range(len(outs)))
    assert len({o["id"] for o in outs}) == len(outs)
    ev2.close()



def test_a_command_reaped_but_not_read_at_an_upgrade_ends_whole_once(v1):
    """A command writes 600000 bytes and a line of stderr and exits 7;
    termd reaped it, had not read it all, and upgraded in place: its
    BashOutput events carry every byte once, in order, the last one
    exit_code 7. Technique of test_upgrade_ended.py: termd is stopped while
    the program writes and exits, the upgrade asked for, then let go; an
    attempt whose upgrade missed the window is made again."""
    release = v1.td.home / "release"

    def begin(ev, n, gate):
        script = v1.td.home / ("prog-%d.sh" % n)
        script.write_text(ended_command(gate, release, n) + "\n")
        st, cmd = v1.post("/api/bash/start_bash_command", {"command": "sh %s" % script})
        assert st == 200, cmd
        s = wait_until(lambda: [x for x in ev.call("session.list", {})["extras"]["sessions"]
                                if x["name"] == "ohv1-" + cmd["id"] and x["alive"]],
                       what="its session")[0]
        return {"pid": s["pid"], "id": cmd["id"]}

    def check(ev, n, cmd):
        outs = wait_until(lambda: (lambda o: o if o and o[-1]["exit_code"] is not None
                                   else None)(v1.outputs(cmd["id"])), what="its end")
        assert len(outs) < 100, len(outs)   # (one page)
        assert outs[-1]["exit_code"] == 7, outs[-1]
        assert [o["exit_code"] for o in outs[:-1]] == [None] * (len(outs) - 1)
        out = "".join(o["stdout"] or "" for o in outs)
        assert out == "o" * BIG + "tail-%d\n" % n, (len(out), out[-40:])
        assert "".join(o["stderr"] or "" for o in outs) == "err-%d\n" % n
        assert [o["order"] for o in outs] == list(range(len(outs)))
        assert len({o["id"] for o in outs}) == len(outs)
    try:
        until_reaped(v1.td, v1.td.events(), v1.td.home, begin, check, "v1-up-ended-%d").close()
    finally:
        release.touch()


def fds_to(pid, target):
    n = 0
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            n += os.readlink("/proc/%d/fd/%s" % (pid, fd)) == target
        except OSError:
            pass
    return n


def test_ids_file_not_carried_across_upgrades(v1):
    """The /dev/urandom V1's ids are read from was opened without
    O_CLOEXEC: every upgrade in place carried it into the new termd, which
    opened one more (the soak: termd's fds once idle +4 /dev/urandom after 4
    upgrades). Its count stays the same across upgrades."""
    pid = v1.td.proc.pid
    v1.execute("echo one")   # ids made: the file is open
    n0 = fds_to(pid, "/dev/urandom")
    for i in range(2):
        code, ev2, ans = upgrade(v1.td, v1.td.events(), cid="up-urandom-%d" % i)
        assert ans["extras"]["ok"] is True, ans
        ev2.close()
        v1.execute("echo again")
    assert fds_to(pid, "/dev/urandom") == n0


def test_events_are_kept_within_the_bound_oldest_dropped(v1):
    """64 MiB of event text at most (proto/PROTOCOL.md §14): 70 MB of output
    drops the oldest events, the command's own BashCommand first"""
    ev = v1.execute("head -c 70000000 /dev/zero | tr '\\0' a")
    assert ev["exit_code"] == 0
    assert v1.get("/api/bash/bash_events/%s" % ev["command_id"]) == (404, {"detail": "Not Found"})
    st, page = v1.get("/api/bash/bash_events/search?limit=1")
    oldest = page["items"][0]
    assert oldest["kind"] == "BashOutput" and oldest["order"] > 0
    st, page = v1.get("/api/bash/bash_events/search?limit=1&sort_order=TIMESTAMP_DESC")
    assert page["items"][0]["id"] == ev["id"]


def test_a_view_token_alone_opens_nothing(termd_factory, tmp_path):
    """no full token, a view token: neither it nor no key acts (termd's rule)"""
    port = free_port()
    vt = tmp_path / "view-only"
    vt.write_text(VIEW)
    td = termd_factory(args=["--listen", "127.0.0.1:%d,api=openhands" % port,
                             "--view-token-file", str(vt)])
    c = V1("ws://127.0.0.1:%d" % port, key=VIEW)
    for key in (VIEW, None, "x"):
        assert c.post("/api/bash/start_bash_command", {"command": "true"}, key=key) == \
            (401, {"detail": "Unauthorized"})
    s = wsclient.connect(c.url, "/sockets/bash-events", subprotocol=None, timeout=T)
    s.send_text(json.dumps({"type": "auth", "session_api_key": VIEW}))
    with pytest.raises(wsclient.ConnectionClosed) as e:
        recv_json(s)
    assert e.value.code == 4001
    s = wsclient.connect(c.url, "/sockets/bash-events", subprotocol=None, timeout=T)
    s.send_text(json.dumps({"command": "touch %s/never" % td.home}))
    with pytest.raises(wsclient.ConnectionClosed) as e:
        recv_json(s)
    assert e.value.code == 4001
    assert not (td.home / "never").exists()


def test_no_token_at_all_lets_local_programs_in(termd_factory):
    """no key configured (V1 lets everyone in; termd: local programs)"""
    port = free_port()
    termd_factory(args=["--listen", "127.0.0.1:%d,api=openhands" % port])
    c = V1("ws://127.0.0.1:%d" % port, key=None)
    s = wsclient.connect(c.url, "/sockets/bash-events", subprotocol=None, timeout=T)
    try:
        st, cmd = c.post("/api/bash/start_bash_command", {"command": "echo open"})
        assert st == 200
        assert until_kind(s, lambda e: e["kind"] == "BashCommand")["id"] == cmd["id"]
    finally:
        s.abort()
