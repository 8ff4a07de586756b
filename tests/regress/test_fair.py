"""Fairness (issue 16, termd/fair.c): while one session floods and another
is being worked in, termd holds the flooding one (leaves its pty unread)
so the busy session answers quickly. These tests check what holding must
never change: nothing the flooding session printed is lost or reordered,
it still makes progress while the other session is busy without a pause,
its screen and its viewers end up exactly right, and the busy session's
answers are all correct. (The latency figure itself is `make bench`'s.)"""

import hashlib
import threading
import time

import wsclient
from tdtest import content, fmt, run_done, run_obs

T = 120.0
N = 60000   # seq's numbers: about 350 KB, many of termd's read turns


def _expected_seq(n):
    return "".join("%d\n" % i for i in range(1, n + 1))


def _full_output(obs):
    """The run's whole output: the content, or the file it was saved to
    when the answer was truncated."""
    x = obs["extras"]
    if x.get("truncated") and x.get("output_file"):
        with open(x["output_file"], "rb") as f:
            return f.read().decode("utf-8")
    return content(obs) + "\n"


class Viewer(threading.Thread):
    """A read-only /tty viewer draining its frames as they come."""

    def __init__(self, termd, session):
        super().__init__(daemon=True)
        self.ws = wsclient.connect(termd.url, "/tty/" + session + "?mode=ro", "termd.tty.v1",
                                   token=termd.token)
        self.frames = []
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            try:
                _, data = self.ws.recv(timeout=0.2)
            except TimeoutError:
                continue
            except (wsclient.ConnectionClosed, OSError):
                return
            self.frames.append(data)

    def text_since_last_snapshot(self):
        last = max((i for i, f in enumerate(self.frames) if f[:1] == b"S"), default=-1)
        return b"".join(f[1:] for f in self.frames[last:] if f[:1] in (b"S", b"O")).decode(
            "utf-8", "replace")


def test_flooding_session_loses_nothing_while_another_is_busy(termd):
    """A prints 60000 numbers while B runs commands back to back, without a
    pause, from another connection: A's answer carries every number in
    order, A finishes while B is still busy (a held session still moves),
    and every one of B's commands answers correctly."""
    a, b = termd.events(), termd.events()
    run_done(a, "true", session="A")
    run_done(b, "true", session="B")
    viewer = Viewer(termd, "A")
    viewer.start()
    try:
        a.send_action("run", {"session": "A", "command": "seq 1 %d; echo END-OF-SEQ" % N,
                              "timeout": T, "idle_timeout": T}, id="seq")
        answer = None
        n_b = 0
        deadline = time.monotonic() + T
        while answer is None and time.monotonic() < deadline:
            obs = run_obs(b, "echo b-%d" % n_b, session="B")
            assert obs["extras"]["exit_code"] == 0 and content(obs) == "b-%d" % n_b, fmt(obs)
            n_b += 1
            try:
                answer = a.recv_obs(timeout=0.001)
            except TimeoutError:
                pass
        assert answer is not None, "A's seq did not finish while B was busy (%d runs in B)" % n_b
        assert answer["cause"] == "seq" and answer["extras"]["exit_code"] == 0, fmt(answer)
        out = _full_output(answer)
        want = _expected_seq(N) + "END-OF-SEQ\n"
        assert hashlib.sha256(out.encode()).hexdigest() == hashlib.sha256(want.encode()).hexdigest(), \
            "A's output differs from seq's: %d chars, want %d; tail %r" % (len(out), len(want), out[-80:])
        assert n_b > 0
        # A's screen is exact: its last numbers, the marker, then the prompt
        scr = a.call("screen", {"session": "A"}, timeout=T)
        rows = [r for r in content(scr).split("\n") if r.strip()]
        i = rows.index("END-OF-SEQ")
        assert rows[i - 3:i] == [str(N - 2), str(N - 1), str(N)], rows[-8:]
        # the viewer saw it too (in its output or in a fresh snapshot)
        deadline = time.monotonic() + 30
        while "END-OF-SEQ" not in viewer.text_since_last_snapshot() and time.monotonic() < deadline:
            time.sleep(0.05)
        seen = viewer.text_since_last_snapshot()
        assert "END-OF-SEQ" in seen and str(N) in seen, seen[-200:]
    finally:
        viewer.stop.set()
        viewer.join(5)


def test_flood_with_no_other_activity_runs_at_full_speed_and_stops(termd, ev):
    """Holding needs another session at work: a flood alone is read as
    usual, and C-c stops it and leaves the shell answering."""
    obs = run_obs(ev, "yes", session="F", timeout=1, max_output=2000)
    assert obs["extras"]["running"] is True and "y\ny\ny" in content(obs), fmt(obs)
    stop = run_obs(ev, "C-c", session="F", is_input=True, timeout=30)
    assert stop["extras"]["running"] is False, fmt(stop)
    assert content(run_done(ev, "echo back", session="F")) == "back"


def test_held_session_snapshot_and_screen_agree(termd):
    """While B is busy and A floods, a viewer attaching to A gets a snapshot
    and A's screen answers: both are taken from what termd has read, so a
    `screen` right after the flood ends shows the same last line the
    viewer's stream ends with."""
    a, b = termd.events(), termd.events()
    run_done(a, "true", session="A")
    run_done(b, "true", session="B")
    a.send_action("run", {"session": "A", "command": "yes | head -c 400000; echo DONE-A",
                          "timeout": T, "idle_timeout": T}, id="flood")
    answer = viewer = None
    for i in range(10000):
        run_done(b, "true", session="B")
        if i == 5:
            viewer = Viewer(termd, "A")
            viewer.start()
        try:
            answer = a.recv_obs(timeout=0.001)
            break
        except TimeoutError:
            continue
    if viewer is None:   # A finished first: the viewer attaches after
        viewer = Viewer(termd, "A")
        viewer.start()
    try:
        assert answer is not None and answer["extras"]["exit_code"] == 0, fmt(answer)
        scr = content(a.call("screen", {"session": "A"}, timeout=T))
        assert "DONE-A" in scr, scr[-300:]
        deadline = time.monotonic() + 30
        while "DONE-A" not in viewer.text_since_last_snapshot() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "DONE-A" in viewer.text_since_last_snapshot()
    finally:
        viewer.stop.set()
        viewer.join(5)
