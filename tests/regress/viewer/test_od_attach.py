"""od-attach, the viewer for people (issue 4), used the way a person would:
it runs inside a private tmux server, keys are typed with `send-keys`, and
what it shows is read back with `capture-pane` (`-e` for colours).

Environment: OD_ATTACH_BIN (absolute path; default build/od-attach in the
repository), TERMD_BIN as for the rest of the suite."""

import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

import conftest
import tdtest

REPO = Path(__file__).resolve().parents[3]
OD_ATTACH_BIN = os.environ.get("OD_ATTACH_BIN") or str(REPO / "build" / "od-attach")
# Generous: under AddressSanitizer termd, bash and od-attach are all slower.
WAIT = float(os.environ.get("OD_ATTACH_TEST_WAIT", "15"))
PREFIX = "C-]"

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


@pytest.fixture(autouse=True)
def _need_binary():
    if not os.access(OD_ATTACH_BIN, os.X_OK):
        pytest.fail("od-attach not found at %s (set OD_ATTACH_BIN or run `make`)" % OD_ATTACH_BIN)


class Viewer:
    """od-attach running in its own tmux server (one session, one pane).
    The command is wrapped so that, once od-attach exits, the pane shows
    EXIT=<status>, then the terminal's modes (for the sanity check), and
    stays open."""

    def __init__(self, url, args=(), cols=120, rows=40, env=None, command=None):
        self.server = "od-%d-%s" % (os.getpid(), uuid.uuid4().hex[:8])
        self.tmpdir = tempfile.mkdtemp(prefix="od-")
        e = {"TERMD_URL": url, "TERM": "xterm-256color", "LANG": "C.UTF-8"}
        # sanitizer reports (the ASan build) go to files checked at the end
        for var in ("ASAN_OPTIONS", "UBSAN_OPTIONS"):
            old = os.environ.get(var)
            e[var] = (old + ":" if old else "") + "log_path=%s/san" % self.tmpdir
        if env:
            e.update(env)
        inner = " ".join(["env"] + ["%s=%s" % (k, shlex.quote(v)) for k, v in e.items()] +
                         [shlex.quote(OD_ATTACH_BIN)] + [shlex.quote(str(a)) for a in args])
        # stty's output is written to a file: the pane is too narrow to show it whole
        if command:
            inner = command
        wrapped = ("trap '' HUP; (trap - HUP; %s); echo EXIT=$?; stty -a > %s/stty 2>&1; "
                   "echo STTY-DONE; while read -r _; do :; done" % (inner, self.tmpdir))
        self.env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TERMD_URL", "TERMD_TOKEN")}
        self.env["LANG"] = "C.UTF-8"
        self.env["TMUX_TMPDIR"] = self.tmpdir      # the server's socket goes with the rest
        self.tmux("new-session", "-d", "-x", str(cols), "-y", str(rows), "-s", "v",
                  "sh -c %s" % shlex.quote(wrapped))
        # the pane's shell leads the session of everything the pane runs
        self.pane_pid = int(self.pane_value("#{pane_pid}"))

    def tmux(self, *args, check=True):
        return subprocess.run(["tmux", "-L", self.server, "-f", "/dev/null"] + list(args),
                              env=self.env, capture_output=True, text=True, timeout=30, check=check)

    def keys(self, *keys):
        self.tmux("send-keys", "-t", "v", *keys)

    def type(self, text):
        self.tmux("send-keys", "-t", "v", "-l", text)

    def prefix(self, key, prefix=PREFIX):
        self.keys(prefix)
        self.keys(key)

    def capture(self, escapes=False):
        args = ["capture-pane", "-p", "-t", "v"] + (["-e"] if escapes else [])
        return self.tmux(*args).stdout

    def lines(self):
        return self.capture().split("\n")

    def status(self):
        """The status line: the last non-empty row of the pane."""
        rows = [l for l in self.lines() if l.strip()]
        return rows[-1] if rows else ""

    def wait(self, pred, timeout=WAIT, what="text"):
        """Polls capture-pane until pred(text) is true; returns the text."""
        if isinstance(pred, str):
            s = pred
            pred = lambda t: s in t
            what = repr(s)
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.capture()
            if pred(text):
                return text
            time.sleep(0.1)
        raise AssertionError("od-attach never showed %s; the pane:\n%s" % (what, text))

    def pane_value(self, fmt):
        return self.tmux("display-message", "-p", "-t", "v", fmt).stdout.strip()

    def exit_status(self, timeout=WAIT):
        text = self.wait(lambda t: "STTY-DONE" in t, timeout, "od-attach exiting")
        m = re.search(r"EXIT=(\d+)", text)
        assert m, text
        return int(m.group(1)), text

    def stty(self):
        return Path(self.tmpdir, "stty").read_text()

    def sanitizer_reports(self):
        return "\n".join(p.read_text(errors="replace")
                         for p in sorted(Path(self.tmpdir).glob("san*")))

    def pane_processes(self):
        """{pid: command line} of the processes in the pane's session."""
        found = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % name) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[3]) != self.pane_pid or fields[0] == "Z":
                    continue
                with open("/proc/%s/cmdline" % name, "rb") as f:
                    found[int(name)] = f.read().replace(b"\0", b" ").decode(errors="replace")
            except (OSError, IndexError, ValueError):
                continue
        return found

    def kill(self):
        """Ends the tmux server, then waits until every process the pane ran
        (od-attach included) has ended: its terminal is gone, so it must exit.
        Returns any sanitizer reports od-attach wrote, and names (and kills)
        a process still running WAIT seconds later."""
        self.tmux("kill-server", check=False)
        deadline = time.monotonic() + WAIT
        left = self.pane_processes()
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = self.pane_processes()
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        reports = self.sanitizer_reports()
        if left:
            reports += ("\nstill running %.0f s after the terminal went away (killed): %s"
                        % (WAIT, "; ".join("pid %d: %s" % kv for kv in sorted(left.items()))))
        shutil.rmtree(self.tmpdir, ignore_errors=True)
        return reports


@pytest.fixture
def viewers():
    """viewers(url, *args, **kw) -> a started Viewer; all killed afterwards."""
    made = []

    def make(url, *args, **kw):
        v = Viewer(url, args, **kw)
        made.append(v)
        return v

    yield make
    reports = [r for r in (v.kill() for v in made) if r]
    if reports:
        pytest.fail("od-attach sanitizer reports:\n" + "\n".join(reports), pytrace=False)


def attached(v, session="main"):
    """Waits until the viewer shows the session's status line."""
    v.wait(lambda t: re.search(r"^ %s \d+x\d+ +WATCHING" % re.escape(session), t, re.M),
           what="the status line of %s" % session)
    return v


def assert_sane(v):
    """After od-attach: canonical mode and echo back on, primary screen."""
    modes = v.stty().split()
    assert "icanon" in modes and "echo" in modes and "isig" in modes, v.stty()
    assert v.pane_value("#{alternate_on}") == "0"


def own_termd(tmp_path, name):
    """A termd this test may kill (the fixture's must end with status 0)."""
    t = conftest.Termd(tmp_path / name, name=name)
    t.start()
    return t


def stop_quietly(t):
    try:
        t.stop()
    finally:
        try:
            os.killpg(t.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, AttributeError):
            pass


# ---------------------------------------------------------------- SGR parsing

def styled(text):
    """capture-pane -e text -> list of rows, each a list of (char, style)
    with style a tuple (fg, bg, bold, underline, reverse); colours as xterm
    indexes (0-255), ('rgb', r, g, b), or None for the default."""
    rows = []
    st = dict(fg=None, bg=None, bold=False, ul=False, rev=False)
    for line in text.split("\n"):
        row = []
        i = 0
        while i < len(line):
            m = re.match(r"\x1b\[([0-9;:]*)m", line[i:])
            if m:
                _sgr(st, m.group(1))
                i += m.end()
                continue
            if line[i] == "\x1b":      # some other sequence: skip it
                m = re.match(r"\x1b(\[[0-9;?]*[ -/]*[@-~]|\][^\x07]*\x07|.)", line[i:])
                i += m.end() if m else 1
                continue
            row.append((line[i], (st["fg"], st["bg"], st["bold"], st["ul"], st["rev"])))
            i += 1
        rows.append(row)
    return rows


def _sgr(st, params):
    ps = [int(p) if p else 0 for p in re.split(r"[;:]", params)] if params else [0]
    i = 0
    while i < len(ps):
        p = ps[i]
        if p == 0:
            st.update(fg=None, bg=None, bold=False, ul=False, rev=False)
        elif p == 1:
            st["bold"] = True
        elif p == 22:
            st["bold"] = False
        elif p == 4:
            st["ul"] = True
        elif p == 24:
            st["ul"] = False
        elif p == 7:
            st["rev"] = True
        elif p == 27:
            st["rev"] = False
        elif 30 <= p <= 37:
            st["fg"] = p - 30
        elif 40 <= p <= 47:
            st["bg"] = p - 40
        elif 90 <= p <= 97:
            st["fg"] = p - 90 + 8
        elif 100 <= p <= 107:
            st["bg"] = p - 100 + 8
        elif p == 39:
            st["fg"] = None
        elif p == 49:
            st["bg"] = None
        elif p in (38, 48) and i + 1 < len(ps):
            key = "fg" if p == 38 else "bg"
            if ps[i + 1] == 5 and i + 2 < len(ps):
                st[key] = ps[i + 2]
                i += 2
            elif ps[i + 1] == 2 and i + 4 < len(ps):
                st[key] = ("rgb",) + tuple(ps[i + 2:i + 5])
                i += 4
        i += 1


def style_of(text, word, row_start=""):
    """The style of the first character of the first occurrence of word (in
    the first row that starts with row_start)."""
    for row in styled(text):
        s = "".join(c for c, _ in row)
        if not s.startswith(row_start):
            continue
        k = s.find(word)
        if k >= 0:
            return row[k][1]
    raise AssertionError("%r not on screen:\n%s" % (word, text))


def output_line(text, s):
    """True if s is a whole line of the pane (output, not the echoed command)."""
    return any(l.rstrip() == s for l in text.split("\n"))


# ---------------------------------------------------------------- tests

def test_watch_shows_agent_output(termd, viewers):
    v = attached(viewers(termd.url, "main"))
    assert "WATCHING" in v.status() and "TYPING" not in v.status()
    p = termd.termctl("run", "echo from-agent")
    assert p.returncode == 0, p.stderr
    v.wait(lambda t: output_line(t, "from-agent"), what="from-agent")
    # the status line: session, size, mode, idle with the last exit code, viewers
    st = v.wait(lambda t: "last exit 0" in t, what="the last exit code")
    st = v.status()
    assert re.match(r" main 160x48 +WATCHING +idle \| last exit 0 \| 1 viewer\b", st), st


def test_colours_attributes_and_wide_characters(termd, ev, viewers):
    v = attached(viewers(termd.url))
    tdtest.run_done(ev, r"printf '\033[31mRED\033[0m \033[38;5;208mORANGE\033[0m "
                        r"\033[38;2;0;0;255mBLUE\033[0m \033[1mBOLD\033[0m \033[4mUNDER\033[0m "
                        r"\033[7mREV\033[0m \033[42mGREENBG\033[0m plain\n'")
    tdtest.run_done(ev, "printf '日本語|end\\n'")
    v.wait(lambda t: output_line(t, "日本語|end"), what="the wide characters")
    text = v.capture(escapes=True)
    out = "RED ORANGE"
    assert style_of(text, "RED", out)[0] == 1
    assert style_of(text, "ORANGE", out)[0] == 208
    assert style_of(text, "BLUE", out)[0] == 21                    # nearest of 256 to #0000ff
    assert style_of(text, "BOLD", out)[2] is True
    assert style_of(text, "UNDER", out)[3] is True
    assert style_of(text, "REV", out)[4] is True
    assert style_of(text, "GREENBG", out)[1] == 2
    assert style_of(text, "plain", out) == (None, None, False, False, False)


def test_ls_colours_match_a_plain_terminal(termd, ev, viewers, tmp_path):
    d = tmp_path / "lsdir"
    (d / "subdir").mkdir(parents=True)
    (d / "script").write_text("#!/bin/sh\n")
    (d / "script").chmod(0o755)
    (d / "plainfile").write_text("x")
    os.symlink("plainfile", d / "alink")
    cmd = "cd %s && env -u LS_COLORS ls --color=always" % shlex.quote(str(d))
    v = attached(viewers(termd.url))
    tdtest.run_done(ev, cmd)
    v.wait("plainfile")
    got = v.capture(escapes=True)
    # the same command in a plain tmux pane, for reference
    ref = Viewer(termd.url, command="env TERM=xterm-256color sh -c %s" % shlex.quote(cmd))
    try:
        ref.wait("plainfile")
        want = ref.capture(escapes=True)
    finally:
        ref.kill()
    for name in ("subdir", "script", "plainfile", "alink"):
        assert style_of(got, name) == style_of(want, name), name
    assert style_of(got, "subdir")[0] == 4 and style_of(got, "subdir")[2]   # bold blue


def test_read_only_typing_changes_nothing(termd, ev, viewers, tmp_path):
    marker = tmp_path / "should-not-exist"
    v = attached(viewers(termd.url))
    v.type("touch %s" % marker)
    v.keys("Enter")
    v.wait("read-only")
    time.sleep(0.5)
    obs = ev.call("screen", {})
    assert "should-not-exist" not in obs["content"]
    assert not marker.exists()
    assert "WATCHING" in v.status()


def test_take_the_keyboard_and_type(termd, ev, viewers):
    tdtest.run_done(ev, "true")
    sub = termd.events()
    assert sub.call("subscribe", {})["observation"] == "subscribe"
    v = attached(viewers(termd.url))
    v.prefix("i")
    v.wait(" TYPING ")
    v.type("echo hi-$((6*7))")
    v.keys("Enter")
    v.wait(lambda t: output_line(t, "hi-42"), what="the command's output")
    got = []
    deadline = time.monotonic() + WAIT
    while not any(o["observation"] == "command.end" for o in got):
        assert time.monotonic() < deadline, got
        got.append(sub.recv_obs(max(0.1, deadline - time.monotonic())))
    ui = "".join(o["extras"]["text"] for o in got if o["observation"] == "user.input")
    assert "echo hi-$((6*7))" in ui, ui
    starts = [o for o in got if o["observation"] == "command.start"]
    assert starts and starts[-1]["extras"]["by"] == "viewer", starts
    assert any(o["observation"] == "viewer.attach" and o["extras"]["mode"] == "rw" for o in got)
    # give the keyboard back: typing changes nothing again
    v.prefix("i")
    v.wait(lambda t: "WATCHING" in t and "keyboard given back" in t, what="WATCHING")
    v.type("echo nope-$((1+1))")
    v.keys("Enter")
    time.sleep(0.5)
    assert "nope" not in ev.call("screen", {})["content"]


def test_attach_while_vim_is_open(termd, ev, viewers):
    vim = tdtest.find_vim()
    if not vim:
        pytest.skip("no vim")
    obs = tdtest.run(ev, "%s -u NONE" % vim, timeout=3)
    assert obs["extras"]["alt_screen"] is True
    try:
        # vim's screen and od-attach's status line are drawn in steps (and
        # vim may still be drawing): wait until both are there
        v = attached(viewers(termd.url))
        text = v.wait(lambda t: sum(1 for l in t.split("\n") if l.startswith("~")) >= 20
                      and "WATCHING" in t, timeout=max(WAIT, 60),
                      what="vim's tildes under the status line")
        # the session's own screen and the viewer's come to agree on the first rows
        seen = {}

        def agree():
            seen["screen"] = ev.call("screen", {})["content"].split("\n")
            seen["shown"] = v.capture().split("\n")
            return ([l.rstrip() for l in seen["shown"][:10]]
                    == [l[:120].rstrip() for l in seen["screen"][:10]])
        tdtest.wait_until(agree, timeout=max(WAIT, 60), what="the viewer's rows to be the session's")
        assert "WATCHING" in v.status()
    finally:
        ev.call("keys", {"keys": ["Escape", ":q!", "Enter"]})


def test_two_viewers_at_once(termd, ev, viewers):
    a = attached(viewers(termd.url))
    b = attached(viewers(termd.url, cols=100, rows=30))
    tdtest.run_done(ev, "echo both-see-$((2+3))")
    for v in (a, b):
        v.wait(lambda t: output_line(t, "both-see-5"), what="the output")
        v.wait(lambda t: "2 viewers" in t, what="2 viewers")


def test_viewer_count_goes_down_when_one_leaves(termd, ev, viewers):
    a = attached(viewers(termd.url))
    a.wait(lambda t: "| 1 viewer " in t, what="1 viewer")
    b = attached(viewers(termd.url))
    a.wait(lambda t: "| 2 viewers" in t, what="2 viewers")
    b.prefix("d")
    rc, text = b.exit_status()
    assert rc == 0, text
    a.wait(lambda t: "| 1 viewer " in t, what="1 viewer again after a detach")


def test_running_command_and_exit_code_in_status(termd, ev, viewers):
    v = attached(viewers(termd.url))
    obs = tdtest.run(ev, "sleep 3; (exit 4)", timeout=0.3)
    assert obs["extras"]["running"] is True
    st = v.wait(lambda t: re.search(r"running: sleep 3; \(exit 4\) \(\d+s\)", t), what="running")
    v.wait("last exit 4", timeout=WAIT + 5)
    assert "running:" not in v.status()


def test_detach_restores_the_terminal(termd, viewers):
    v = attached(viewers(termd.url))
    v.prefix("?")
    v.wait("any key closes this help")
    v.keys("x")
    v.wait(lambda t: "any key closes" not in t, what="help closed")
    v.prefix("d")
    rc, text = v.exit_status()
    assert rc == 0, text
    assert_sane(v)


def test_session_exit_ends_the_viewer(termd, ev, viewers):
    ev.call("session.open", {"name": "short", "command": "sleep 2; exit 7"})
    v = viewers(termd.url, "short")
    rc, text = v.exit_status(timeout=WAIT + 5)
    assert rc == 3, text
    assert "session short ended" in text and "status 7" in text, text
    assert_sane(v)


def test_no_such_session(termd, viewers):
    v = viewers(termd.url, "nosuch")
    rc, text = v.exit_status()
    assert rc == 2 and "no session 'nosuch'" in text, text


def test_termd_killed(tmp_path, viewers):
    t = own_termd(tmp_path, "killme")
    try:
        v = attached(viewers(t.url))
        os.kill(t.proc.pid, signal.SIGKILL)
        v.wait("RECONNECTING")
        rc, text = v.exit_status(timeout=WAIT + 10)
        assert rc == 1, text
        assert "lost the connection to termd" in text and "gave up" in text, text
        assert_sane(v)
    finally:
        stop_quietly(t)


def test_transient_disconnect_reconnects(tmp_path, viewers):
    t1 = own_termd(tmp_path, "first")
    t2 = None
    try:
        v = attached(viewers(t1.url))
        os.kill(t1.proc.pid, signal.SIGKILL)
        os.killpg(t1.proc.pid, signal.SIGKILL)
        v.wait("RECONNECTING")
        # a new termd on the same socket, within the viewer's patience
        t2 = conftest.Termd(tmp_path / "second", name="second")
        shutil.rmtree(t2.sockdir, ignore_errors=True)
        t2.sockdir, t2.sock, t2.url = t1.sockdir, t1.sock, t1.url
        t2.argv[t2.argv.index("--listen") + 1] = t1.url
        if os.path.exists(t1.sock):
            os.unlink(t1.sock)
        t2.start()
        v.wait(lambda t: "reconnected" in t and "WATCHING" in t, what="reconnected")
        ev2 = t2.events()
        tdtest.run_done(ev2, "echo after-$((40+2))")
        v.wait(lambda t: output_line(t, "after-42"), what="output after reconnecting")
    finally:
        stop_quietly(t1)
        if t2:
            problem = t2.stop()
            assert problem is None, problem


def test_next_previous_and_pick(termd, ev, viewers):
    ev.call("session.open", {"name": "second", "cols": 80, "rows": 20})
    tdtest.run_done(ev, "echo in-second", session="second")
    v = attached(viewers(termd.url))
    v.prefix("n")
    attached(v, "second")
    # the name shows at once, the size with second's snapshot (under
    # ASan the status line was once caught in between, with main's size)
    v.wait(lambda t: re.search(r"^ second 80x20 ", t, re.M), what="second's size in the status")
    v.wait(lambda t: output_line(t, "in-second"), what="second's screen")
    v.prefix("p")
    attached(v, "main")
    v.prefix("s")
    v.wait("sessions (Enter: attach")
    v.keys("Down")
    v.wait(lambda t: "> second" in t, what="second selected")
    v.keys("Enter")
    attached(v, "second")


def test_previous_and_next_go_opposite_ways(termd, ev, viewers):
    # with three sessions (main, second, third) p from main wraps back to
    # third and n goes forward again: two sessions could not tell them apart
    for name in ("second", "third"):
        ev.call("session.open", {"name": name, "cols": 80, "rows": 20})
        tdtest.run_done(ev, "true", session=name)
    v = attached(viewers(termd.url))
    v.prefix("p")
    attached(v, "third")
    v.prefix("p")
    attached(v, "second")
    v.prefix("n")
    attached(v, "third")


def test_small_viewer_is_clipped_around_the_cursor(termd, ev, viewers):
    v = attached(viewers(termd.url, cols=60, rows=12))
    assert "clipped" in v.status()
    tdtest.run_done(ev, "clear; for i in $(seq 1 40); do echo row-$i; done")
    text = v.wait(lambda t: output_line(t, "row-40"), what="the rows near the cursor")
    assert not output_line(text, "row-1")
    # larger than the session: drawn at the top left, not clipped
    ev.call("session.open", {"name": "tiny", "cols": 40, "rows": 10})
    tdtest.run_done(ev, "echo tiny-here", session="tiny")
    w = attached(viewers(termd.url, "tiny"), "tiny")
    text = w.wait(lambda t: output_line(t, "tiny-here"), what="tiny's screen")
    assert "clipped" not in w.status()
    assert re.match(r"\S", text.split("\n")[0])      # starts at the top left


def test_resize_to_viewer_and_give_it_back(termd, ev, viewers):
    v = attached(viewers(termd.url, cols=100, rows=30))
    v.prefix("R")
    v.wait("typing mode")                      # R needs the keyboard first
    v.prefix("i")
    v.wait(" TYPING ")
    v.prefix("R")
    v.wait(lambda t: re.search(r"^ main 100x29 +TYPING", t, re.M), what="100x29")
    x = ev.call("screen", {})["extras"]
    assert (x["cols"], x["rows"]) == (100, 29)
    v.prefix("i")
    v.wait(lambda t: re.search(r"^ main 160x48 +WATCHING", t, re.M), what="160x48 again")
    x = ev.call("screen", {})["extras"]
    assert (x["cols"], x["rows"]) == (160, 48)


def test_prefix_option_and_prefix_twice(termd, ev, viewers):
    v = attached(viewers(termd.url, "--prefix", "C-b"))
    assert "C-b ? help" in v.status()
    v.prefix("i", prefix="C-b")
    v.wait(" TYPING ")
    v.type("cat -v")
    v.keys("Enter")
    time.sleep(0.3)
    v.keys("C-b")
    v.keys("C-b")
    v.keys("Enter")
    v.wait(lambda t: output_line(t, "^B"), what="^B from cat -v")
    v.keys("C-c")
    v.prefix("d", prefix="C-b")
    rc, text = v.exit_status()
    assert rc == 0, text


def test_typing_needs_the_full_token(termd_factory, tmp_path, viewers):
    vt = tmp_path / "view"
    vt.write_text("viewsecret\n")
    t = termd_factory(args=("--view-token-file", str(vt)), token="fullsecret")
    v = attached(viewers(t.url, "--token", "viewsecret"))
    v.prefix("i")
    v.wait("needs the full token")
    assert "WATCHING" in v.status()
    w = attached(viewers(t.url, env={"TERMD_TOKEN": "fullsecret"}))
    w.prefix("i")
    w.wait(" TYPING ")


# ------------------------------------------------- the terminal goes away

# The pane's shell leads the terminal's session; od-attach runs under it, so
# a hang-up signals the shell, not od-attach: od-attach hears SIGHUP only when
# the shell dies of it. When the shell stays (it ignores SIGHUP, as nohup or a
# shell with a trap does) od-attach must see the terminal gone on its own
# (read 0/EIO, POLLHUP), and exit: not spin on POLLHUP.
UNDER_A_SHELL = """f=$1; shift
[ -n "$KEEP_SHELL" ] && trap '' HUP
"$@" <&1 &
echo $! > "$f"
wait
exec sleep 600
"""


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("mode", ["live", "replay"])
@pytest.mark.parametrize("how", ["master-closed", "master-closed-shell-stays", "sighup"])
def test_exits_when_its_terminal_goes_away(termd, tmp_path, mode, how):
    import fcntl
    import pty
    import select
    import struct
    import termios
    if shutil.which("setsid") is None:
        pytest.skip("setsid (util-linux) is not installed")
    args = [OD_ATTACH_BIN]
    if mode == "replay":
        cast = tmp_path / "r.cast"
        cast.write_text('{"version": 2, "width": 80, "height": 24}\n'
                        '[0.1, "o", "first-line\\r\\n"]\n[500, "o", "never-shown\\r\\n"]\n')
        args += ["--replay", str(cast), "--idle-limit", "1000"]
    script = tmp_path / "under-a-shell"
    script.write_text(UNDER_A_SHELL)
    pidfile = tmp_path / "pid"
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = dict(conftest.base_env(tmp_path), TERMD_URL=termd.url, TERM="xterm-256color",
               LANG="C.UTF-8")
    if how == "master-closed-shell-stays":
        env["KEEP_SHELL"] = "1"
    for var in ("ASAN_OPTIONS", "UBSAN_OPTIONS"):   # reports to files, read below
        env[var] = (os.environ.get(var, "") + ":log_path=%s/san" % tmp_path).lstrip(":")
    sh = subprocess.Popen(["setsid", "-c", "sh", str(script), str(pidfile)] + args,
                          stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    od = None
    try:
        want = b"WATCHING" if mode == "live" else b"first-line"
        seen, deadline = b"", time.monotonic() + WAIT
        while want not in seen:
            assert time.monotonic() < deadline, "od-attach never drew %r: %r" % (want, seen[-500:])
            if select.select([master], [], [], 0.2)[0]:
                seen += os.read(master, 65536)
        od = int(pidfile.read_text())
        if how == "sighup":
            os.kill(od, signal.SIGHUP)
        else:
            os.close(master)
            master = None
        deadline = time.monotonic() + WAIT
        while _alive(od) and time.monotonic() < deadline:
            if master is not None and select.select([master], [], [], 0.05)[0]:
                os.read(master, 65536)   # what it draws on the way out
            else:
                time.sleep(0.02)
        assert not _alive(od), "od-attach (%s) still running %.0f s after %s" % (mode, WAIT, how)
        reports = "".join(p.read_text(errors="replace") for p in tmp_path.glob("san*"))
        assert reports == "", reports
    finally:
        if od and _alive(od):
            os.kill(od, signal.SIGKILL)
        try:
            os.killpg(sh.pid, signal.SIGKILL)
        except OSError:
            pass
        sh.wait()
        if master is not None:
            os.close(master)
