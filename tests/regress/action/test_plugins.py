"""The plugin host (PROTOCOL.md §7): plugins found in --plugin-dir, setups
run once in the background (a marker in --state-dir), plugin.status and
plugin.list, actions registered in the action table (in hello once ready),
the JSON-lines program protocol with several requests in flight, failures
with the exact message, restarts, misbehaving programs, processes ending
with termd; then the real jupyter (+agentskills) and browser plugins
driven through termd."""

import json
import os
import signal
import stat
import time
from pathlib import Path

import pytest

from conftest import REPO
from tdtest import PY, assert_error, content, drain, fmt, run_done, dead_or_zombie, wait_until

T = 60
BUILT_PLUGINS = Path(os.environ.get("TERMD_PLUGIN_DIR_BUILT") or
                     Path(os.environ.get("TERMD_BIN", REPO / "build" / "termd")).parent / "plugins")

# A plugin program in Python: answers "echo" (after args.delay seconds, so
# requests overlap), "die" (exits at once), "garbage" (junk lines and an
# answer to an id that was never sent, then the real answer), "flood"
# (megabytes of junk, then the answer), "hang" (never answers).
PROGRAM = r'''#!%s
import json, os, sys, threading, time
lock = threading.Lock()
def out(o):
    with lock:
        sys.stdout.write(json.dumps(o) + "\n")
        sys.stdout.flush()
def handle(req):
    a, args = req["action"], req.get("args") or {}
    if a == "echo":
        time.sleep(float(args.get("delay", 0)))
        out({"id": req["id"], "observation": "echo", "content": args.get("text", ""),
             "extras": {"cwd": req.get("cwd"), "pid": os.getpid(),
                        "env": {k: os.environ.get(k) for k in ("PLUGIN", "SANDBOX_TYPE", "PKG_MANAGER")}}})
    elif a == "die":
        os._exit(3)
    elif a == "garbage":
        with lock:
            sys.stdout.write("not json at all\n{\"half\": \n\n")
            sys.stdout.write(json.dumps({"id": 999999, "observation": "echo", "content": "stray"}) + "\n")
            sys.stdout.flush()
        out({"id": req["id"], "observation": "echo", "content": "after garbage"})
    elif a == "flood":
        with lock:
            for _ in range(2000):
                sys.stdout.write("x" * 4000 + "\n")
            sys.stdout.flush()
        out({"id": req["id"], "observation": "echo", "content": "after flood"})
    elif a == "fail":
        out({"id": req["id"], "observation": "error", "content": "nope", "extras": {"code": "mismatch"}})
    elif a == "hang":
        pass
    elif a == "scribble":   # what a browser or kernel leaves in its run folder
        d = os.path.join(os.environ["TERMD_PLUGIN_RUNDIR"], "profile", "cache")
        os.makedirs(d, exist_ok=True)
        open(os.path.join(d, "entry"), "w").write("x")
        open(os.path.join(os.environ["TERMD_PLUGIN_RUNDIR"], "program.log"), "w").write("x")
        out({"id": req["id"], "observation": "scribble", "content": "",
             "extras": {"rundir": os.environ["TERMD_PLUGIN_RUNDIR"]}})
for line in sys.stdin:
    threading.Thread(target=handle, args=(json.loads(line),), daemon=True).start()
''' % PY

ACTIONS = ["echo", "die", "garbage", "flood", "fail", "hang"]


def sandbox_type():
    vals = {}
    for p in ("/etc/os-release", "/usr/lib/os-release"):
        if os.path.exists(p):
            for line in open(p):
                if "=" in line:
                    k, v = line.rstrip("\n").split("=", 1)
                    vals[k] = v.strip('"\'')
            break
    if not vals.get("ID"):
        return "unknown"
    return vals["ID"] + (" " + vals["VERSION_ID"] if vals.get("VERSION_ID") else "")


def make_plugin(root, name, setup=None, program=True, actions=ACTIONS, needs=None):
    d = root / name
    d.mkdir(parents=True)
    m = {"name": name, "version": "1.0", "actions": actions}
    if setup is not None:
        (d / "setup.sh").write_text(setup)
        m["setup"] = "setup.sh"
    if program:
        (d / "prog.py").write_text(PROGRAM)
        (d / "prog.py").chmod(0o755)
        m["run"] = "prog.py"
    if needs:
        m["needs"] = needs
    (d / "plugin.json").write_text(json.dumps(m))
    return d


def start(termd_factory, tmp_path, plugins, **kw):
    args = ["--plugins", plugins, "--plugin-dir", str(tmp_path / "plugins"),
            "--state-dir", str(tmp_path / "state")]
    return termd_factory(args=args, **kw)


def stop(t):
    """Stop termd now (checked as at teardown), and not again at teardown."""
    assert t.stop() is None
    t.proc = None


def until_status(ev, name, states, timeout=T):
    return ev.wait_for(lambda o: o.get("observation") == "plugin.status" and
                       o["extras"].get("name") == name and o["extras"].get("state") in states,
                       timeout=timeout)


def test_custom_plugin_json_lines(termd_factory, tmp_path):
    make_plugin(tmp_path / "plugins", "mine", setup="exit 0\n")
    t = start(termd_factory, tmp_path, "mine")
    ev = t.events()
    ev.call("subscribe", {"since": 0})
    until_status(ev, "mine", ["ready"])
    assert "echo" in t.events().hello["extras"]["actions"]
    run_done(ev, "cd /tmp")
    # three in flight, answered out of order (the first is the slowest)
    ev.send_action("echo", {"text": "slow", "delay": 1.0}, id="e1")
    ev.send_action("echo", {"text": "mid", "delay": 0.5}, id="e2")
    ev.send_action("echo", {"text": "fast"}, id="e3")
    got = []
    while len(got) < 3:
        o = ev.recv_obs(timeout=T)
        if o.get("cause") in ("e1", "e2", "e3"):
            got.append(o)
    assert [o["cause"] for o in got] == ["e3", "e2", "e1"]
    by = {o["cause"]: o for o in got}
    assert by["e1"]["content"] == "slow" and by["e1"]["observation"] == "echo"
    x = by["e3"]["extras"]
    assert x["cwd"] == "/tmp", "requests carry main's cwd: %s" % fmt(by["e3"])
    assert x["env"] == {"PLUGIN": "mine", "SANDBOX_TYPE": sandbox_type(),
                        "PKG_MANAGER": x["env"]["PKG_MANAGER"]}
    assert "restarted" not in x
    # a plugin's own error observation is passed on as an error
    assert_error(ev.call("fail", {}, timeout=T), "mismatch")
    lst = ev.call("plugin.list", {})
    assert lst["extras"]["plugins"] == [{"name": "mine", "version": "1.0", "state": "ready",
                                         "actions": ACTIONS, "error": None}]


def test_request_bigger_than_the_pipe_reaches_the_program_whole(termd_factory, tmp_path):
    """A 2 MB request line (more than the program's stdin pipe takes at
    once) reaches the plugin program whole, and its answer comes back:
    termd writes the rest as the program reads, over many turns. Its wish
    to write again, made while writing (lws drops it after its WRITEABLE
    callback), was once lost: the request stopped half written."""
    make_plugin(tmp_path / "plugins", "mine", setup="exit 0\n")
    t = start(termd_factory, tmp_path, "mine")
    ev = t.events()
    ev.call("subscribe", {"since": 0})
    until_status(ev, "mine", ["ready"])
    text = "".join("%07d\n" % i for i in range(250000))
    o = ev.call("echo", {"text": text}, timeout=T)
    assert o.get("observation") == "echo" and o["content"] == text, fmt(o)[:300]
    # the program goes on with the next request
    assert ev.call("echo", {"text": "after"}, timeout=T)["content"] == "after"


def test_setup_failure_message_exact(termd_factory, tmp_path):
    make_plugin(tmp_path / "plugins", "bad",
                setup="echo progress on stdout\necho 'first problem' >&2\necho 'E: Unable to locate package nope' >&2\nexit 100\n")
    t = start(termd_factory, tmp_path, "bad")
    ev = t.events()
    ev.call("subscribe", {"since": 0})
    st = until_status(ev, "bad", ["failed"])
    want = "Failed to install bad on %s: E: Unable to locate package nope" % sandbox_type()
    assert st["extras"]["error"] == want
    obs = ev.call("echo", {"text": "x"}, timeout=T)
    assert_error(obs, "plugin_failed")
    assert obs["content"] == want
    lst = ev.call("plugin.list", {})["extras"]["plugins"][0]
    assert lst["state"] == "failed" and lst["error"] == want
    assert "echo" not in t.events().hello["extras"]["actions"]


def test_needs_a_failed_plugin(termd_factory, tmp_path):
    make_plugin(tmp_path / "plugins", "base", setup="echo 'no network' >&2; exit 1\n")
    make_plugin(tmp_path / "plugins", "top", actions=["top_action"], needs=["base"])
    t = start(termd_factory, tmp_path, "base,top")
    ev = t.events()
    ev.call("subscribe", {"since": 0})
    st = until_status(ev, "top", ["failed"])
    assert st["extras"]["error"] == ("Failed to install top on %s: it needs the base plugin, which "
                                     "is not enabled or failed (--plugins)" % sandbox_type())


def test_setup_without_stderr_says_status(termd_factory, tmp_path):
    make_plugin(tmp_path / "plugins", "quiet", setup="exit 7\n")
    t = start(termd_factory, tmp_path, "quiet")
    ev = t.events()
    ev.call("subscribe", {"since": 0})
    st = until_status(ev, "quiet", ["failed"])
    assert st["extras"]["error"] == "Failed to install quiet on %s: its setup exited with status 7" % sandbox_type()


def test_setup_runs_once_per_image(termd_factory, tmp_path):
    count = tmp_path / "setup-runs"
    make_plugin(tmp_path / "plugins", "once", setup="echo run >> '%s'\n" % count)
    for _ in range(2):
        t = start(termd_factory, tmp_path, "once")
        ev = t.events()
        ev.call("subscribe", {"since": 0})
        until_status(ev, "once", ["ready"])
        assert ev.call("echo", {"text": "hi"}, timeout=T)["content"] == "hi"
        stop(t)
    assert count.read_text() == "run\n"


def test_action_waits_for_installing_plugin_and_healthz_does_not(termd_factory, tmp_path):
    # the setup ends when the test says so, and says it ended (a "sleep 2"
    # setup could be over before a loaded termd had started and answered
    # plugin.list, and how much of it was left when echo was sent was
    # anyone's guess)
    gate, done = tmp_path / "gate", tmp_path / "setup-done"
    make_plugin(tmp_path / "plugins", "slow",
                setup="while [ ! -e '%s' ]; do sleep 0.05; done\ntouch '%s'\n" % (gate, done))
    t = start(termd_factory, tmp_path, "slow")
    status, _, body = t.healthz()
    assert status == 200
    ev = t.events()
    assert "echo" not in ev.hello["extras"]["actions"]
    assert ev.call("plugin.list", {})["extras"]["plugins"][0]["state"] == "installing"
    eid = ev.send_action("echo", {"text": "waited"})
    try:
        early = ev.recv_obs(timeout=0.5)
    except TimeoutError:
        early = None
    assert early is None, "answered while the setup was still running: %s" % fmt(early)
    gate.touch()
    obs = ev.wait_for(lambda o: o.get("cause") == eid, T)
    assert obs["observation"] == "echo" and obs["content"] == "waited", fmt(obs)
    assert done.exists(), "answered before the setup had finished"


def test_installing_past_the_actions_timeout(termd_factory, tmp_path):
    make_plugin(tmp_path / "plugins", "slower", setup="sleep 30\n")
    t = start(termd_factory, tmp_path, "slower")
    ev = t.events()
    obs = ev.call("echo", {"text": "x", "timeout": 0.5}, timeout=T)
    assert_error(obs, "busy")
    assert "still installing" in obs["content"]


def test_plugin_not_asked_for_and_unknown_name(termd_factory, tmp_path):
    make_plugin(tmp_path / "plugins", "mine", setup="exit 0\n")
    make_plugin(tmp_path / "plugins", "other", actions=["other_action"])
    t = start(termd_factory, tmp_path, "mine")
    ev = t.events()
    obs = ev.call("other_action", {}, timeout=T)
    assert_error(obs, "bad_request")
    assert "--plugins other" in obs["content"], fmt(obs)
    assert "other_action" not in ev.hello["extras"]["actions"]
    stop(t)
    # a name that is not a plugin: termd does not start
    import subprocess
    from conftest import TERMD_BIN
    r = subprocess.run([TERMD_BIN, "--listen", "unix:" + str(tmp_path / "x.sock"), "--plugins", "nosuch",
                        "--plugin-dir", str(tmp_path / "plugins"), "--state-dir", str(tmp_path / "st")],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "no plugin named 'nosuch'" in r.stderr, r


def test_dead_program_restarted_and_said_so(termd_factory, tmp_path):
    make_plugin(tmp_path / "plugins", "mine")
    t = start(termd_factory, tmp_path, "mine")
    ev = t.events()
    first = ev.call("echo", {"text": "a"}, timeout=T)
    pid1 = first["extras"]["pid"]
    assert "restarted" not in first["extras"]
    obs = ev.call("die", {}, timeout=T)
    assert_error(obs, "internal")
    assert "ended" in obs["content"] and "status 3" in obs["content"], fmt(obs)
    again = ev.call("echo", {"text": "b"}, timeout=T)
    assert again["content"] == "b" and again["extras"]["restarted"] is True, fmt(again)
    assert again["extras"]["pid"] != pid1
    after = ev.call("echo", {"text": "c"}, timeout=T)
    assert "restarted" not in after["extras"]
    # killed from outside, between actions
    os.kill(after["extras"]["pid"], signal.SIGKILL)
    wait_until(lambda: dead_or_zombie(after["extras"]["pid"]),
               what="the program gone")
    time.sleep(0.2)
    obs = ev.call("echo", {"text": "d"}, timeout=T)
    assert obs["content"] == "d" and obs["extras"].get("restarted") is True, fmt(obs)


def test_garbage_flood_and_hang_do_not_stall_termd(termd_factory, tmp_path):
    make_plugin(tmp_path / "plugins", "mine")
    t = start(termd_factory, tmp_path, "mine")
    ev = t.events()
    assert ev.call("garbage", {}, timeout=T)["content"] == "after garbage"
    ev.send_action("flood", {}, id="fl")
    assert ev.call("ping", {}, timeout=T)["observation"] == "pong"
    got = ev.wait_for(lambda o: o.get("cause") == "fl", timeout=T)
    assert got["content"] == "after flood"
    # a request the program never answers: answered by termd after the
    # action's timeout and termd's grace, the program kept
    t0 = time.monotonic()
    ev.send_action("hang", {"timeout": 0.2}, id="hg")
    assert content(run_done(ev, "echo main-works")) == "main-works"
    obs = ev.wait_for(lambda o: o.get("cause") == "hg", timeout=T)
    assert_error(obs, "internal")
    assert "did not answer" in obs["content"]
    assert time.monotonic() - t0 >= 0.2
    assert ev.call("echo", {"text": "still"}, timeout=T)["content"] == "still"


def test_readonly_and_resent_id(termd_factory, tmp_path):
    make_plugin(tmp_path / "plugins", "mine")
    tok, view = tmp_path / "tok", tmp_path / "view"
    tok.write_text("full-token\n")
    view.write_text("view-token\n")
    args = ["--plugins", "mine", "--plugin-dir", str(tmp_path / "plugins"), "--state-dir",
            str(tmp_path / "state"), "--view-token-file", str(view)]
    t = termd_factory(args=args, token="full-token")
    ro = t.events(token="view-token")
    assert_error(ro.call("echo", {"text": "x"}, timeout=T), "forbidden")
    assert_error(ro.call("plugin.list", {}, timeout=T), "forbidden")
    a = t.events()
    a.send_action("echo", {"text": "rebound", "delay": 1.0}, id="same-id")
    time.sleep(0.2)
    a.ws.abort()
    b = t.events()
    obs = b.call("echo", {"text": "rebound", "delay": 1.0}, id="same-id", timeout=T)
    assert obs["content"] == "rebound"
    assert not [o for o in drain(b, 0.5) if o.get("cause") == "same-id"]


def test_plugin_processes_end_with_termd(termd_factory, tmp_path):
    make_plugin(tmp_path / "plugins", "mine")
    t = start(termd_factory, tmp_path, "mine")
    ev = t.events()
    pid = ev.call("echo", {"text": "a"}, timeout=T)["extras"]["pid"]
    assert os.path.exists("/proc/%d" % pid)
    stop(t)
    wait_until(lambda: not os.path.exists("/proc/%d" % pid), timeout=10, what="the plugin program gone")


def test_run_folder_goes_with_termd_plugin_folders_and_all(termd_factory, tmp_path):
    """termd's run folder ($TMPDIR/termd-XXXXXX) is removed when termd
    ends, the plugin-<name>/ folder in it too with what the program wrote
    there, folders and all (a flat removal left both behind)."""
    make_plugin(tmp_path / "plugins", "mine", actions=ACTIONS + ["scribble"])
    rt = tmp_path / "rt"
    rt.mkdir()
    t = start(termd_factory, tmp_path, "mine", env={"TMPDIR": str(rt)})
    ev = t.events()
    got = ev.call("scribble", {}, timeout=T)
    rundir = Path(got["extras"]["rundir"])
    assert rundir.parent.parent == rt and rundir.name == "plugin-mine", fmt(got)
    assert (rundir / "profile" / "cache" / "entry").exists()
    stop(t)
    assert list(rt.iterdir()) == []


# ---- the real plugins through termd ----

def real(termd_factory, tmp_path, plugins):
    if not (BUILT_PLUGINS / "jupyter" / "termd-jupyter").exists():
        pytest.fail("built plugins not found in %s (make all)" % BUILT_PLUGINS)
    return termd_factory(args=["--plugins", plugins, "--plugin-dir", str(BUILT_PLUGINS),
                               "--state-dir", str(tmp_path / "state")],
                         env={"TERMD_JUPYTER_PYTHON": PY})


def test_jupyter_through_termd(termd_factory, tmp_path):
    t = real(termd_factory, tmp_path, "jupyter,agentskills")
    ev = t.events()
    obs = ev.call("run_ipython", {"code": "1+1"}, timeout=180)
    assert obs["observation"] == "run_ipython", fmt(obs)
    assert obs["content"].startswith("2\n[Jupyter current working directory: "), fmt(obs)
    assert obs["extras"]["status"] == "ok"
    # the kernel follows main's cwd
    d = tmp_path / "work dir"
    d.mkdir()
    run_done(ev, "cd '%s'" % d)
    obs = ev.call("run_ipython", {"code": "import os; print(os.getcwd())"}, timeout=T)
    assert obs["content"].split("\n")[0] == str(d), fmt(obs)
    # agentskills is imported
    (d / "f.txt").write_text("alpha\nbeta\n")
    obs = ev.call("run_ipython", {"code": "open_file('f.txt')"}, timeout=T)
    assert "[File: %s/f.txt (2 lines total)]" % d in obs["content"], fmt(obs)
    # main answers while a long cell runs: the cell runs until the test
    # opens its gate, after main's answer (before: a 4 s cell and "main
    # answered within 4 s", a bound a loaded machine could pass by itself)
    gate = tmp_path / "cell-gate"
    ev.send_action("run_ipython", {"code": "import os, time\nwhile not os.path.exists(%r): "
                                           "time.sleep(0.05)\nprint('slept')" % str(gate)},
                   id="long")
    t0 = time.monotonic()
    assert content(run_done(ev, "echo main-answers")) == "main-answers"
    took = time.monotonic() - t0
    early = [o for o in ev.others if o.get("cause") == "long"]
    assert not early, "the cell answered before its gate opened: %s" % early
    gate.touch()
    cell = ev.wait_for(lambda o: o.get("cause") == "long", timeout=T)
    assert cell["content"].startswith("slept"), fmt(cell)
    print("main answered in %.2f s while the cell ran" % took)


def test_browser_through_termd(termd_factory, tmp_path):
    page = tmp_path / "page.html"
    page.write_text("<html><head><title>T</title></head><body><h1>Hello termd</h1>"
                    "<a href='https://example.invalid/'>a link</a></body></html>")
    t = real(termd_factory, tmp_path, "browser")
    ev = t.events()
    obs = ev.call("browse", {"url": "file://%s" % page}, timeout=180)
    assert obs["observation"] == "browse", fmt(obs)
    assert "Hello termd" in obs["content"] and obs["extras"]["title"] == "T", fmt(obs)
    assert obs["extras"]["error"] is False
