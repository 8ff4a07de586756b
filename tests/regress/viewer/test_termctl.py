"""termctl, the scriptable client (issue 2): exit codes follow the command,
2 on protocol or connection errors with a message on stderr."""

import json
import time

import tdtest
from tdtest import content, run_done


def _json_out(stdout):
    s = stdout.strip()
    try:
        return json.loads(s)
    except ValueError:
        return json.loads(s.splitlines()[-1])


def test_run_prints_output(termd):
    p = termd.termctl("run", "echo hi")
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    assert p.stdout == "hi\n", p.stdout            # a whole line: what follows starts on its own
    p = termd.termctl("run", "printf no-newline")
    assert p.stdout == "no-newline\n", p.stdout


def test_run_exit_code(termd):
    p = termd.termctl("run", "false")
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    p = termd.termctl("run", "(exit 5)")
    assert p.returncode == 5, (p.returncode, p.stdout, p.stderr)
    p = termd.termctl("run", "true")
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    p = termd.termctl("run", "(exit 255)")     # the top of the range is the command's too
    assert p.returncode == 255, (p.returncode, p.stdout, p.stderr)


def test_run_state_persists_between_invocations(termd):
    assert termd.termctl("run", "cd /tmp && export TC=7").returncode == 0
    p = termd.termctl("run", "echo $TC $PWD")
    assert p.stdout.strip() == "7 /tmp", p.stdout


def test_run_multiline_output(termd):
    p = termd.termctl("run", "printf 'a\\nb\\nc\\n'")
    assert p.returncode == 0 and p.stdout.splitlines() == ["a", "b", "c"], p.stdout


def test_url_option(termd):
    p = termd.termctl("--url", termd.url, "run", "echo via-url", url=False)
    assert p.returncode == 0 and p.stdout.strip() == "via-url", (p.returncode, p.stdout, p.stderr)


def test_expect_prints_up_to_the_match_and_exits_by_it(termd):
    p = termd.termctl("run", "echo ex-pect-ed-$((40 + 2))")
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    p = termd.termctl("expect", "--timeout", "20", "ex-pect-ed-4[0-9]")
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    assert "ex-pect-ed-42" in p.stdout and not p.stderr, (p.stdout, p.stderr)
    p = termd.termctl("expect", "--timeout", "0.3", "never-seen-[0-9]")
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)


def test_ping(termd):
    p = termd.termctl("ping")
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    assert "pong" in p.stdout, p.stdout


def test_raw(termd):
    p = termd.termctl("raw", '{"action":"ping"}')
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    obs = _json_out(p.stdout)
    assert obs.get("observation") == "pong", p.stdout
    p = termd.termctl("raw", '{"id":"raw-run-1","action":"run","args":{"command":"echo raw-ok"}}')
    obs = _json_out(p.stdout)
    assert obs.get("observation") == "run" and obs.get("cause") == "raw-run-1", p.stdout
    assert obs["content"] == "raw-ok" and obs["extras"]["exit_code"] == 0, p.stdout


def test_raw_error_observation(termd):
    p = termd.termctl("raw", '{"action":"no.such.action"}')
    obs = _json_out(p.stdout)
    assert obs.get("observation") == "error", p.stdout
    assert obs["extras"]["code"] == "unknown_action", p.stdout


def test_screen(termd):
    ev = termd.events()
    run_done(ev, "echo on-the-screen")
    p = termd.termctl("screen")
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    assert "on-the-screen" in p.stdout.splitlines(), p.stdout


def test_keys(termd):
    p = termd.termctl("keys", "echo via-keys", "Enter")
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    ev = termd.events()
    deadline = time.monotonic() + 15
    while True:
        obs = ev.call("screen", {})
        if "via-keys" in content(obs).split("\n"):
            break
        assert time.monotonic() < deadline, "keys did not reach the shell: %r" % obs
        time.sleep(0.2)


def test_input_option(termd):
    p = termd.termctl("run", "--timeout", "1", "sleep 30")
    # still running: termctl's documented exit status for that is 124
    assert p.returncode == 124, (p.returncode, p.stdout, p.stderr)
    p = termd.termctl("run", "--input", "C-c")
    assert p.returncode == 130, (p.returncode, p.stdout, p.stderr)


def test_no_such_socket(tmp_path, termd):
    p = termd.termctl("ping", env={"TERMD_URL": "unix:%s" % (tmp_path / "nope.sock")})
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert p.stderr.strip(), "no message on stderr"
    p = termd.termctl("run", "echo x", env={"TERMD_URL": "unix:%s" % (tmp_path / "nope.sock")})
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert p.stderr.strip()


def test_protocol_error_exits_2(termd):
    p = termd.termctl("run", "-s", "bad/name", "echo x")
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert p.stderr.strip(), "no message on stderr"


def test_token(termd_factory):
    t = termd_factory(token="tctoken")
    p = t.termctl("ping")
    assert p.returncode == 2 and p.stderr.strip(), (p.returncode, p.stdout, p.stderr)
    p = t.termctl("--token", "tctoken", "ping")
    assert p.returncode == 0 and "pong" in p.stdout, (p.returncode, p.stdout, p.stderr)
    p = t.termctl("run", "echo tok-env", env={"TERMD_TOKEN": "tctoken"})
    assert p.returncode == 0 and p.stdout.strip() == "tok-env", (p.returncode, p.stdout, p.stderr)


def test_session_signal_passes_the_name_through(termd, ev):
    # termd knows the names, with or without SIG, in any case; termctl sends
    # what it is given (no table of its own, no signal numbers)
    o = ev.call("session.open", {"name": "sigjob", "command": "sleep 300"})
    assert o["observation"] == "session.open", o
    for bad in ("9", "BOGUS"):
        p = termd.termctl("session", "signal", "sigjob", bad)
        assert p.returncode == 2 and "bad_request" in p.stderr, (bad, p.returncode, p.stderr)
    p = termd.termctl("session", "signal", "sigjob", "sigCont")
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    p = termd.termctl("session", "signal", "sigjob", "term")
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)

    def ended():
        lst = ev.call("session.list", {})["extras"]["sessions"]
        return [s for s in lst if s["name"] == "sigjob" and not s["alive"]]
    s = tdtest.wait_until(ended, what="sigjob ended by TERM")[0]
    assert s["exit_code"] == 128 + 15, s


def test_session_open_pipe_and_stdin(termd, ev, tmp_path):
    out = tmp_path / "got"
    p = termd.termctl("session", "open", "cat", "--pipe", "--stdin", "--cmd", "cat > %s" % out)
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    s = [x for x in ev.call("session.list", {})["extras"]["sessions"] if x["name"] == "cat"][0]
    assert s["kind"] == "pipe" and s["stdin"] is True, s
    p = termd.termctl("session", "stdin", "cat", "line one\n")
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    p = termd.termctl("session", "stdin", "cat", "--eof", "-", input="\x00bin\u00e9")
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)

    def ended():
        lst = ev.call("session.list", {})["extras"]["sessions"]
        return [x for x in lst if x["name"] == "cat" and not x["alive"]]
    tdtest.wait_until(ended, what="cat ended at end of file")
    assert out.read_bytes() == b"line one\n\x00bin\xc3\xa9"   # a NUL kept: bytes, not a C string
    p = termd.termctl("session", "stdin", "cat", "more")
    assert p.returncode == 2 and "no_command" in p.stderr, (p.returncode, p.stderr)
    p = termd.termctl("session", "stdin", "cat")
    assert p.returncode == 2 and "usage" in p.stderr, (p.returncode, p.stderr)


# ---- issue 51: termctl's names for PROTOCOL.md section 11

def _need_cgroups(termd):
    import pytest
    st, _, body = termd.healthz()
    if json.loads(body).get("cgroups") is None:
        pytest.skip("termd uses no cgroups here: session limits are refused")


def test_session_open_takes_limits(termd, ev):
    _need_cgroups(termd)
    p = termd.termctl("session", "open", "lim51", "--memory", "64M", "--pids", "40",
                      "--cpu=0.5")
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    assert "warning" not in p.stderr, p.stderr
    lst = ev.call("session.list", {})["extras"]["sessions"]
    s = [s for s in lst if s["name"] == "lim51"][0]
    assert s["limits"] == {"memory": 64 << 20, "pids": 40, "cpu": 0.5}, s
    p = termd.termctl("session", "open", "lim51b", "--memory", "1048576")
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    lst = ev.call("session.list", {})["extras"]["sessions"]
    assert [s for s in lst if s["name"] == "lim51b"][0]["limits"]["memory"] == 1 << 20
    p = termd.termctl("session", "open", "lim51c", "--pids", "many")
    assert p.returncode == 2 and "--pids" in p.stderr, (p.returncode, p.stderr)
    # session list shows each session's use of its limits
    p = termd.termctl("session", "list")
    head, *rows = p.stdout.splitlines()
    assert "MEMORY" in head.split() and "PIDS" in head.split(), p.stdout
    row = [r for r in rows if r.split()[0] == "lim51"][0].split()
    assert row[3].endswith("/64M") and row[4].endswith("/40"), p.stdout


def test_session_signal_says_when_no_job_got_it(termd, ev):
    # an idle shell: INT reaches only the shell at its prompt; termctl says so
    assert ev.call("session.open", {"name": "sig51"})["observation"] == "session.open"
    run_done(ev, "true", session="sig51")
    p = termd.termctl("session", "signal", "sig51", "INT")
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    assert "no foreground job in session sig51" in p.stderr, p.stderr
    assert "--tree signals what runs behind it" in p.stderr, p.stderr
    # a job in the foreground: it gets it, exit 0
    ev.send_action("run", {"command": "sleep 300", "session": "sig51", "timeout": 60})
    tdtest.wait_until(lambda: any(s["name"] == "sig51" and s.get("command")
                                  for s in ev.call("session.list", {})["extras"]["sessions"]),
                      what="sleep running in sig51")
    p = termd.termctl("session", "signal", "sig51", "INT")
    assert p.returncode == 0 and not p.stderr, (p.returncode, p.stdout, p.stderr)
    # --tree: every process the session started
    p = termd.termctl("session", "signal", "sig51", "TERM", "--tree")
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)


def test_subscribe_resumes_after_an_upgrade(termd, ev):
    import queue
    import subprocess
    import threading
    from conftest import TERMCTL_BIN, base_env
    e = base_env(termd.home)
    e["TERMD_URL"] = termd.url
    proc = subprocess.Popen([TERMCTL_BIN, "subscribe"], env=e, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    lines = queue.Queue()
    t = threading.Thread(target=lambda: [lines.put(l) for l in proc.stdout], daemon=True)
    t.start()
    seen = []

    def saw(text, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                l = lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            seen.append(json.loads(l))
            if text in l:
                return
        raise AssertionError("termctl subscribe never printed %r (rc %r): %s" %
                             (text, proc.poll(), [str(o)[:120] for o in seen[-5:]]))
    try:
        saw('"subscribe"')
        run_done(ev, "echo before-up-$((50+1))")
        saw("before-up-51")
        ev.send_action("termd.upgrade", {}, id="up51")
        deadline = time.monotonic() + 60
        ev2 = None
        while ev2 is None and time.monotonic() < deadline:
            try:
                ev2 = termd.events(timeout=10)
                ev2.ping()
            except Exception:   # noqa: BLE001 — the old one closing, the new one starting
                ev2 = None
        assert ev2 is not None
        run_done(ev2, "echo after-up-$((50+1))")
        saw("after-up-51")
        assert proc.poll() is None, proc.stderr.read()
        seqs = [o["seq"] for o in seen if "seq" in o and o.get("observation") != "subscribe"]
        assert seqs == sorted(set(seqs)), seqs                   # none twice, in order
        assert all(o.get("observation") != "gap" for o in seen)
    finally:
        proc.kill()
        proc.wait()
        t.join(5)


def test_run_says_a_command_is_queued_not_just_still_running(termd, ev, tmp_path):
    """first-hour walk (issue 51): a run answered before its command was
    typed (the shell starting, or not reading yet) said only "still
    running"; it says the command is queued and how to wait for it."""
    gate = tmp_path / "gate"
    run_done(ev, "PROMPT_COMMAND+=('while [ ! -e %s ]; do sleep 0.1; done')" % gate)
    try:
        p = termd.termctl("run", "--timeout", "1", "echo queued-$((50+1))")
        assert p.returncode == 124, (p.returncode, p.stdout, p.stderr)
        assert "the shell of session main is up but does not read yet" in p.stderr, p.stderr
        assert "the command is queued" in p.stderr and "`termctl run`" in p.stderr, p.stderr
    finally:
        gate.touch()
    p = termd.termctl("run")
    assert p.returncode == 0 and "queued-51" in p.stdout, (p.returncode, p.stdout, p.stderr)


def test_session_signal_to_a_loop_of_the_shell_itself_reached_it(termd, ev):
    """A loop the shell runs itself (no child in its own process group)
    is in the foreground: INT reaches it, and termctl does not say no job."""
    assert ev.call("session.open", {"name": "loop51"})["observation"] == "session.open"
    run_done(ev, "true", session="loop51")
    cid = ev.send_action("run", {"command": "while :; do :; done", "session": "loop51",
                                 "timeout": 60})
    tdtest.wait_until(lambda: any(s["name"] == "loop51" and s.get("command")
                                  for s in ev.call("session.list", {})["extras"]["sessions"]),
                      what="the loop running in loop51")
    p = termd.termctl("session", "signal", "loop51", "INT")
    assert p.returncode == 0 and "no foreground job" not in p.stderr, (p.returncode, p.stderr)
    while True:   # the loop's run ends by the interrupt
        o = ev.recv_obs(60)
        if o.get("cause") == cid:
            break
    assert o["extras"]["running"] is False and o["extras"]["exit_code"] == 130, o
    o = run_done(ev, "echo after-loop", session="loop51")
    assert "after-loop" in o["content"], o


def test_a_command_left_running_says_how_to_go_on(termd):
    """first-hour walk (issue 51): "still running" said nothing of what to
    do next."""
    p = termd.termctl("run", "-s", "goes51", "--timeout", "0.5", "sleep 30")
    assert p.returncode == 124, (p.returncode, p.stdout, p.stderr)
    assert "termctl run -s goes51 --input C-c interrupts it" in p.stderr, p.stderr
    p = termd.termctl("run", "-s", "goes51", "--input", "C-c")
    assert p.returncode == 130, (p.returncode, p.stdout, p.stderr)
