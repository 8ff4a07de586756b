"""The termd package against a real termd built from this checkout: every
action through the sync and asyncio APIs, errors as their classes, a
connection killed mid-command (the command runs once), events resumed
across a drop with a gap (--retain), a termd that dies (a clear error, no
hang), tokens, wss:// with a CA file (two threads on its one connection), /tty."""

import asyncio
import base64
import hashlib
import os
import shutil
import signal
import subprocess
import threading
import time

import pytest

import termd

FAST = dict(retry_for=10.0, backoff=(0.02, 0.5))


@pytest.fixture
def td(termd_factory):
    return termd_factory()


@pytest.fixture
def t(td):
    c = termd.Termd(td.url, **FAST)
    yield c
    c.close()


def test_run_state_exit_codes_cwd(t, td):
    r = t.run("cd /tmp && X=42 && false")
    assert isinstance(r, termd.RunResult)
    assert (r.exit_code, r.cwd, r.running, r.timed_out, r.waiting_for_input) == (1, "/tmp", False, None, False)
    r = t.run("echo $X; pwd")
    assert r.output == "42\n/tmp" and r.exit_code == 0 and r.session == "main" and isinstance(r.pid, int)
    assert r.duration_ms >= 0 and not r.replayed


def test_run_input_prompt_and_timeouts(t):
    r = t.run("read -p 'Continue? [y/N] ' a; echo got=$a")
    assert r.waiting_for_input and r.running and r.exit_code == -1 and "Continue?" in r.output
    assert isinstance(r.waiting, termd.Waiting) and r.waiting.kind == "line", r
    assert r.waiting.prompt.endswith("Continue? [y/N]") and r.waiting.pid > 0, r
    r = t.run("y", is_input=True)
    assert r.waiting is None, r
    assert r.output.endswith("got=y") and r.exit_code == 0
    r = t.run("sleep 2; echo late", timeout=0.5)
    assert r.running and r.timed_out == "hard"
    with pytest.raises(termd.BusyError) as ei:
        t.run("echo no")
    assert ei.value.code == "busy" and ei.value.observation["observation"] == "error"
    r = t.run("", timeout=10)
    assert r.output.endswith("late") and r.exit_code == 0
    r = t.run("sleep 30", timeout=0.3)
    assert r.running
    r = t.run("C-c", is_input=True, timeout=5)
    assert not r.running and r.exit_code != 0
    with pytest.raises(termd.NoCommandError):
        t.run("", timeout=1)
    with pytest.raises(termd.NoCommandError):
        t.run("x", is_input=True)
    r = t.run("seq 1 5000", max_output=200)
    assert r.truncated and r.output_file and "truncated" in r.output
    assert t.read(r.output_file).total_lines == 5000


def test_keys_screen_expect(t):
    s = t.keys("echo ab", "Space", "cd", "Enter")
    assert isinstance(s, termd.Screen) and (s.cols, s.rows) == (160, 48)
    s = t.screen()
    assert "ab cd" in s.text and isinstance(s.cursor, termd.Cursor) and s.alt_screen is False
    t.run("(sleep 0.5; echo zzz-42) &")
    m = t.expect(r"zzz-([0-9]+)", timeout=10)
    assert m and m.matched and m.match == "zzz-42" and m.groups == ["42"]
    m = t.expect("never-there", timeout=0.3)
    assert not m and m.matched is False
    t.run("vi -c 'set nocp' /tmp/x-pylib-$$", timeout=1)
    s = t.keys(["i", "hello"], settle_ms=200)
    assert s.alt_screen and "hello" in s.text
    t.keys("Escape", settle_ms=300)
    s = t.keys(":q!", "Enter", settle_ms=300)
    assert not s.alt_screen


def test_files(t, td):
    p = str(td.home / "d" / "f.txt")
    w = t.files.write(p, "one\ntwo\n")
    assert w.sha256 == hashlib.sha256(b"one\ntwo\n").hexdigest() and w.bytes == 8
    r = t.files.read(p, start=2)
    assert r.content.strip() == "two" and r.total_lines == 2 and r.sha256 == w.sha256
    with pytest.raises(termd.MismatchError):
        t.write(p, "x", expected_sha256="0" * 64)
    t.write(p, "three\n", expected_sha256=w.sha256, mode="0600")
    assert os.stat(p).st_mode & 0o777 == 0o600
    b = t.write(str(td.home / "bin"), b"\x00\xff\x01")
    assert b.bytes == 3 and t.read(str(td.home / "bin"), encoding="base64").data == b"\x00\xff\x01"
    with pytest.raises(termd.BinaryFileError):
        t.read(str(td.home / "bin"))
    with pytest.raises(termd.NotFoundError):
        t.read(str(td.home / "nope"))
    with pytest.raises(termd.IsDirectoryError):
        t.read(str(td.home))
    e = t.files.edit("create", str(td.home / "e.py"), file_text="a = 1\nb = 2\n")
    assert isinstance(e, termd.EditResult)
    e = t.edit("str_replace", str(td.home / "e.py"), old_str="b = 2", new_str="b = 3")
    assert "b = 3" in e.content
    t.edit("insert", str(td.home / "e.py"), insert_line=0, new_str="# top")
    assert (td.home / "e.py").read_text() == "# top\na = 1\nb = 3\n"
    v = t.edit("view", str(td.home / "e.py"), view_range=[2, 3])
    assert "a = 1" in v.content and "# top" not in v.content
    with pytest.raises(termd.MismatchError):
        t.edit("str_replace", str(td.home / "e.py"), old_str="zzz", new_str="")
    t.edit("undo_edit", str(td.home / "e.py"))
    assert (td.home / "e.py").read_text() == "a = 1\nb = 3\n"


def test_sessions_and_generic_call(t):
    o = t.sessions.open("srv", command="sleep 300", cols=100, rows=30, env={"A": "1"})
    assert isinstance(o, termd.SessionOpened)
    with pytest.raises(termd.SessionExistsError):
        t.sessions.open("srv")
    ls = t.sessions.list()
    assert isinstance(ls, termd.SessionList) and set(ls.names()) == {"main", "srv"}
    srv = [s for s in ls if s.name == "srv"][0]
    assert (srv.cols, srv.rows, srv.alive) == (100, 30, True)
    t.sessions.signal("srv", "TERM")
    deadline = time.monotonic() + 10
    while [s for s in t.session_list().sessions if s.name == "srv"][0].alive and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [s for s in t.session_list().sessions if s.name == "srv"][0].alive
    t.sessions.close("srv")
    assert t.session_list().names() == ["main"]
    with pytest.raises(termd.NoSuchSessionError):
        t.screen("srv")
    with pytest.raises(termd.BadRequestError):
        t.sessions.close("main")
    r = t.run("echo in-b", session="b")       # implicit session
    assert r.output == "in-b" and r.session == "b"
    assert t.ping().observation == "pong"
    assert t.plugin_list().plugins == []
    assert t.call("run", command="echo generic").output == "generic"
    raw = t.call("ping", raw=True)
    assert raw["observation"] == "pong" and "seq" in raw
    with pytest.raises(termd.UnknownActionError):
        t.call("no.such.action")
    with pytest.raises(termd.BadRequestError):
        t.call("run")
    # a plugin action with no plugin: bad_request naming --plugins
    with pytest.raises(termd.BadRequestError) as ei:
        t.run_ipython("1+1")
    assert "--plugins" in str(ei.value)
    with pytest.raises(termd.BadRequestError):
        t.browse("file:///")
    with pytest.raises(termd.BadRequestError):
        t.browse_interactive("noop()")


def test_same_id_is_answered_once(t, td):
    f = td.home / "count"
    a = t.call("run", command="echo x >> %s" % f, action_id="fixed-1")
    b = t.call("run", command="echo x >> %s" % f, action_id="fixed-1")
    assert not a.replayed and b.replayed and a.seq == b.seq
    assert f.read_text() == "x\n"


def test_too_large_frame(termd_factory):
    td = termd_factory(args=["--max-frame", "65536"])
    with termd.Termd(td.url, **FAST) as t:
        with pytest.raises(termd.TooLargeError):
            t.write(str(td.home / "big"), "x" * 200000)
        assert t.ping().observation == "pong"        # the connection stays usable


def test_pipe_session_stdin_and_output_events(t):
    seq0 = t.hello["seq"]
    o = t.sessions.open("pp", command="cat; echo bye >&2", kind="pipe", stdin=True)
    assert o.extras["kind"] == "pipe"
    t.sessions.stdin("pp", "hi\n")
    t.sessions.stdin("pp", b"\x00\x01", eof=True)
    got = {"stdout": b"", "stderr": b""}
    for ev in t.events(since=seq0, wait=10):
        if ev.observation == "session.output":
            x = ev.extras
            data = (base64.b64decode(ev.content) if x["encoding"] == "base64" else ev.content.encode())
            got[x["stream"]] += data
        if ev.observation == "session.exit" and ev.extras["name"] == "pp":
            break
    assert got == {"stdout": b"hi\n\x00\x01", "stderr": b"bye\n"}


def test_watch_and_file_actions(t, td):
    seq0 = t.hello["seq"]
    d = td.home / "pw"
    made = t.file_mkdir(str(d / "sub"))
    assert made.extras["created"] == [str(d), str(d / "sub")]
    w = t.watch(str(d), recursive=True).extras["watch"]
    assert [x["watch"] for x in t.watch_list().extras["watches"]] == [w]
    (d / "sub" / "f").write_text("x")
    assert t.file_stat(str(d / "sub" / "f")).extras["entry"]["size"] == 1
    for ev in t.events(since=seq0, wait=10):
        if ev.observation == "watch.event" and ev.extras["name"] == "sub/f":
            assert ev.extras["type"] == "create" and ev.extras["watch"] == w
            break
    assert [e["name"] for e in t.file_list(str(d), depth=2).extras["entries"]] == ["sub", "f"]
    t.file_move(str(d / "sub" / "f"), str(d / "g"))
    t.file_remove(str(d), recursive=True)
    assert not d.exists()
    for ev in t.events(since=seq0, wait=10):
        if ev.observation == "watch.end":
            assert ev.extras["watch"] == w
            break
    with pytest.raises(termd.NotFoundError):
        t.watch_stop(w)     # its folder went: the watch ended
    with pytest.raises(termd.NotFoundError):
        t.file_stat(str(d))


def test_events_stream(t):
    seq0 = t.hello["seq"]
    t.run("echo ev")
    kinds = []
    for ev in t.events(since=seq0, wait=10):
        assert isinstance(ev, termd.Event) and ev.seq > seq0
        kinds.append(ev.observation)
        if ev.observation == "run":
            break
    assert kinds == ["command.start", "command.end", "run"]


@pytest.mark.parametrize("tcp", [False, True], ids=["unix", "tcp"])
def test_reconnect_mid_command_runs_once(termd_factory, tcp):
    td = termd_factory(tcp=tcp)
    f = td.home / "ran"

    async def main():
        async with termd.AsyncTermd(td.url, **FAST) as t:
            task = asyncio.ensure_future(t.run("echo x >> %s; sleep 1.5; echo done" % f))
            while not f.exists():
                await asyncio.sleep(0.02)
            t._ws.transport.abort()          # the network drops the connection
            r = await asyncio.wait_for(task, 30)
            return r, t.reconnects
    r, reconnects = asyncio.run(main())
    assert reconnects == 1
    assert r.output == "done" and r.exit_code == 0
    assert f.read_text() == "x\n", "the command ran more than once"


def test_reconnect_after_answer_lost_is_replayed(termd_factory):
    """The answer is sent while the client is away: the re-sent id gets it, replayed."""
    td = termd_factory()
    f = td.home / "ran"

    async def main():
        async with termd.AsyncTermd(td.url, retry_for=10, backoff=(1.5, 2.0)) as t:
            task = asyncio.ensure_future(t.run("echo x >> %s; echo fast" % f))
            while not f.exists():
                await asyncio.sleep(0.01)
            t._ws.transport.abort()          # first reopen waits >= 0.75 s: the answer is already out
            r = await asyncio.wait_for(task, 30)
            return r
    r = asyncio.run(main())
    assert r.output == "fast" and f.read_text() == "x\n"


def test_events_resume_with_gap(termd_factory):
    td = termd_factory(args=["--retain", "5"])
    with termd.Termd(td.url, **FAST) as t:
        it = t.events(since=t.hello["seq"], wait=10)
        t.run("echo 1")
        first = next(it)
        assert first.observation == "command.start"
        # drop the stream's connection, then let 30 events happen while it is away
        for ws in list(t._aio._event_sockets):
            ws.transport.abort()
        for i in range(10):
            t.run("echo %d" % i)
        got = []
        for ev in it:
            got.append(ev)
            if ev.observation == "run" and ev.content == "9":
                break
        it.close()
    gaps = [g for g in got if isinstance(g, termd.Gap)]
    assert len(gaps) == 1, [(type(e).__name__, e.seq) for e in got]
    g = gaps[0]
    before = [e.seq for e in got[:got.index(g)]]
    after = [e.seq for e in got[got.index(g) + 1:]]
    seqs = [first.seq] + before
    assert g.from_seq == seqs[-1] + 1 and after[0] == g.to_seq + 1
    assert after == list(range(after[0], after[0] + len(after)))      # nothing lost after the gap
    assert len(after) <= 5
    # the same gap raised when asked
    with termd.Termd(td.url, **FAST) as t2:
        with pytest.raises(termd.GapError) as ei:
            for _ in t2.events(since=first.seq, gaps="raise", wait=10):
                pass
        assert ei.value.from_seq == first.seq + 1


def test_termd_dies_clear_error_no_hang(termd_factory):
    td = termd_factory()
    td.may_die = True
    t = termd.Termd(td.url, retry_for=2.0, backoff=(0.05, 0.5))
    out = {}

    def bg():
        try:
            out["r"] = t.run("sleep 60")
        except Exception as e:
            out["e"] = e
    th = threading.Thread(target=bg)
    th.start()
    time.sleep(0.5)
    t0 = time.monotonic()
    os.killpg(td.proc.pid, signal.SIGKILL)
    th.join(15)
    assert not th.is_alive(), "the call hung after termd died"
    assert isinstance(out.get("e"), termd.TermdConnectionError), out
    assert time.monotonic() - t0 < 8
    with pytest.raises(termd.TermdConnectionError):
        t.ping()
    with pytest.raises(termd.TermdConnectionError):
        next(t.events())
    t.close()


def test_token_and_view_token(termd_factory, tmp_path):
    vt = tmp_path / "view"
    vt.write_text("viewer-secret\n")
    td = termd_factory(token="full-secret", args=["--view-token-file", str(vt)])
    with pytest.raises(termd.TermdConnectionError) as ei:
        termd.Termd(td.url, token="wrong", retry_for=5)
    # refused at once, saying why (not retried as if termd were unreachable)
    assert "401" in str(ei.value) and "refused" in str(ei.value), ei.value
    assert "wrong or missing token" in str(ei.value), ei.value
    with termd.Termd(td.url, token="full-secret", **FAST) as t:
        assert t.run("echo ok").output == "ok"
    with termd.Termd(td.url, token_file=str(vt), **FAST) as v:
        assert "ok" in v.screen().text
        with pytest.raises(termd.ForbiddenError):
            v.run("echo no")
        with v.tty("main", mode="ro") as tty:
            assert isinstance(tty.recv(wait=5), termd.Resize)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_wss_with_cacert(termd_factory, tmp_path, monkeypatch):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True, timeout=60)
    import wsclient
    monkeypatch.setattr(wsclient, "tls_cafile", str(cert))
    td = termd_factory(args=["--tls-cert", str(cert), "--tls-key", str(key)], token="tls", tcp=True,
                       scheme="wss")
    assert td.url.startswith("wss://")
    with termd.Termd(td.url, token="tls", cacert=str(cert), **FAST) as t:
        assert t.run("echo tls").output == "tls"
        # one TLS connection, two threads: a run waiting (its thread reads)
        # while the other thread's actions are sent and answered on it; the
        # run ends only once the last of them (a write) is carried out
        flag, started = tmp_path / "flag", tmp_path / "started"
        out = {}
        th = threading.Thread(target=lambda: out.update(r=t.run(
            "touch %s; while [ ! -e %s ]; do sleep 0.05; done; echo done" % (started, flag), wait=60)))
        th.start()
        end = time.monotonic() + 60
        while not started.exists():
            assert time.monotonic() < end and th.is_alive(), out
            time.sleep(0.01)
        for _ in range(20):
            assert t.ping(wait=60).observation == "pong"
        t.write(str(flag), "", wait=60)
        th.join(60)
        assert out["r"].output == "done" and out["r"].exit_code == 0, out
    with pytest.raises(termd.TermdConnectionError):     # not trusted without the CA
        termd.Termd(td.url, token="tls", retry_for=0.5)


def test_tty_live(t):
    with t.tty("main", mode="rw") as tty:
        z = tty.recv(wait=5)
        assert isinstance(z, termd.Resize) and (z.cols, z.rows) == (160, 48)
        assert isinstance(tty.recv(wait=5), termd.Snapshot)
        tty.send("echo tty-$((6*7))\n")
        seen = b""
        while b"tty-42" not in seen:
            f = tty.recv(wait=5)
            if isinstance(f, termd.Output):
                seen += f.data
        tty.resize(90, 20)
        while True:
            f = tty.recv(wait=5)
            if isinstance(f, termd.Resize):
                assert (f.cols, f.rows) == (90, 20)
                break
    assert (t.screen().cols, t.screen().rows) == (90, 20)
    with t.tty("main", mode="ro") as ro:
        ro.send("nope\n")
        while True:
            f = ro.recv(wait=5)
            if isinstance(f, termd.ErrorFrame):
                break
    t.sessions.open("short", command="sleep 0.5; exit 3")
    with t.tty("short") as tty:
        frames = list(tty)
    assert isinstance(frames[-1], termd.Exit) and frames[-1].exit_code == 3


def test_async_api_same_names(td):
    async def main():
        async with termd.AsyncTermd(td.url, **FAST) as t:
            rs = await asyncio.gather(t.run("echo a", session="a"), t.run("echo b", session="b"), t.ping())
            assert [rs[0].output, rs[1].output, rs[2].observation] == ["a", "b", "pong"]
            seq = t.hello["seq"]
            agen = t.events(since=0)
            ev = await agen.__anext__()
            assert ev.seq >= 1
            await agen.aclose()
            tty = await t.tty("a", mode="ro")
            async with tty:
                assert isinstance(await tty.recv(wait=5), termd.Resize)
            return seq
    asyncio.run(main())


# the plugin actions' arguments go to the plugin whole (termd names none)
_PLUGIN_METHODS = {"run_ipython", "browse", "browse_interactive"}
_NOT_ACTIONS = {"connect", "close", "call", "events", "tty"}


def test_every_keyword_the_client_sends_is_read(td):
    """Each method with every keyword it takes, against termd, with
    ignored_args="raise": termd reads every name the client sends (a name
    misspelled in the package, as `existok` once was, is an IgnoredArgsError
    here). The calls made must cover every keyword of every method."""
    import inspect
    used = {}

    def call(t, name, *args, **kw):
        sig = inspect.signature(getattr(termd.AsyncTermd, name))
        used.setdefault(name, set()).update(sig.bind(None, *args, **kw).arguments)
        return getattr(t, name)(*args, **kw)

    home = td.home
    with termd.Termd(td.url, ignored_args="raise", **FAST) as t:
        call(t, "run", "echo kw", session="main", is_input=False, timeout=20, idle_timeout=20,
             max_output=1000)
        r = call(t, "run", "read x; echo got $x", timeout=3)
        assert r.waiting_for_input, r
        r = call(t, "run", "yes", session="main", is_input=True, timeout=20, idle_timeout=20,
                 max_output=1000)
        assert r.output.endswith("got yes"), r
        call(t, "keys", "echo k", "Enter", session="main", settle_ms=50, timeout=5)
        call(t, "screen", "main")
        call(t, "expect", "k", session="main", timeout=5)
        f = str(home / "kw.txt")
        w = call(t, "write", f, "one\ntwo\n", encoding="utf-8", mode="0644")
        call(t, "write", f, "one\ntwo\nthree\n", expected_sha256=w.sha256)
        call(t, "write", str(home / "kw.bin"), b"\x00\xff")
        call(t, "read", f, start=1, end=2, encoding="utf-8")
        call(t, "read", f, encoding="base64")
        e = str(home / "kw-edit.py")
        call(t, "edit", "create", e, file_text="a = 1\n")
        call(t, "edit", "str_replace", e, old_str="a = 1", new_str="a = 2")
        call(t, "edit", "insert", e, insert_line=1, new_str="b = 3")
        call(t, "edit", "view", e, view_range=[1, 2])
        call(t, "edit", "undo_edit", e)
        call(t, "session_open", "kwp", "cat", cwd=str(home), env={"A": "1"}, cols=80, rows=24,
             kind="pipe", stdin=True)
        call(t, "session_stdin", "kwp", "text\n")
        call(t, "session_stdin", "kwp", b"\x00bytes", eof=True)
        call(t, "session_list")
        call(t, "session_open", "kwq", "sleep 60")
        call(t, "session_signal", "kwq", "TERM", tree=True)
        call(t, "session_close", "kwq")
        try:   # limits need cgroups (root here); elsewhere bad_request, but every name read
            call(t, "session_open", "kwl", "sleep 1", limits={"pids": 100})
        except termd.BadRequestError as e:
            assert not getattr(e, "ignored_args", None), e
        call(t, "ports")
        assert not call(t, "port_wait", 1, timeout=0.3)
        d = str(home / "kwd")
        call(t, "file_mkdir", d + "/sub", parents=True, exist_ok=True)
        wid = call(t, "watch", d, recursive=True).extras["watch"]
        call(t, "watch_list")
        call(t, "watch_stop", wid)
        call(t, "file_stat", d)
        call(t, "file_list", d, depth=2, max_entries=10, offset=0)
        call(t, "file_move", d + "/sub", d + "/sub2")
        call(t, "file_remove", d, recursive=True)
        call(t, "ping")
        call(t, "plugin_list")
    methods = {n for n, f in inspect.getmembers(termd.AsyncTermd, inspect.iscoroutinefunction)
               if not n.startswith("_")} - _NOT_ACTIONS - _PLUGIN_METHODS
    missing = {}
    for name in sorted(methods):
        params = [p.name for p in inspect.signature(getattr(termd.AsyncTermd, name)).parameters.values()
                  if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in ("self", "wait")]
        left = set(params) - used.get(name, set())
        if left or name not in used:
            missing[name] = sorted(left)
    assert not missing, "methods or keywords this test does not send yet: %r" % missing


def test_ignored_args_warn_raise_or_pass(td):
    """An answer naming arguments termd did not read: a warning by default,
    IgnoredArgsError with ignored_args="raise" (the action was carried out),
    nothing with "ignore"; an error's exception names them too."""
    import warnings
    with termd.Termd(td.url, **FAST) as t:
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            assert t.run("echo warned", tmeout=3).output == "warned"
        w = [x.message for x in got if isinstance(x.message, termd.IgnoredArgsWarning)]
        assert len(w) == 1 and w[0].names == ["tmeout"] and w[0].action == "run", got
        assert "tmeout" in str(w[0])
        with pytest.raises(termd.BadRequestError) as ei:
            t.call("file.stat", pth="/")
        assert ei.value.ignored_args == ["pth"]
    with termd.Termd(td.url, ignored_args="raise", **FAST) as t:
        with pytest.raises(termd.IgnoredArgsError) as ei:
            t.call("file.mkdir", path=str(td.home / "made-anyway"), existok=True)
        assert ei.value.names == ["existok"] and ei.value.action == "file.mkdir"
        assert ei.value.observation["observation"] == "file.mkdir"
        assert (td.home / "made-anyway").is_dir()         # carried out, without it
    with termd.Termd(td.url, ignored_args="ignore", **FAST) as t:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert t.call("ping", bogus=1).observation == "pong"
    with pytest.raises(ValueError):
        termd.AsyncTermd(td.url, ignored_args="loud")
