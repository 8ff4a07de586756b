# test_test_run.py — tools/test-run, the wrapper `make test` runs its suites
# under: a process of the run left at its end is named, killed and fails the
# run; the command's status otherwise; nothing outside the run is touched.
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

TEST_RUN = str(Path(__file__).resolve().parents[3] / "tools" / "test-run")


def run(*argv, timeout=60):
    """tools/test-run argv; its output goes through files, not pipes, so a
    process left holding them cannot stall the test."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.run([sys.executable, TEST_RUN] + list(argv), stdout=out, stderr=err,
                           timeout=timeout, stdin=subprocess.DEVNULL)
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(p.args, p.returncode, out.read(), err.read())


def alive(pid):
    """True while pid runs (a zombie counts as ended)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def gone_within(pids, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.02)
    return False


def kill_all(pids):
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


def test_left_processes_are_named_killed_and_fail_the_run(tmp_path):
    pidfile = tmp_path / "pids"
    # one in its own session (as termd's shells are), one double-forked orphan
    script = ("setsid sleep 300 & echo $! >> %s; (sleep 301 & echo $! >> %s); exit 0"
              % (pidfile, pidfile))
    r = run("--settle", "0.5", "sh", "-c", script)
    pids = [int(x) for x in pidfile.read_text().split()]
    try:
        assert r.returncode == 1, r
        assert "2 processes of the test run" in r.stderr, r.stderr
        assert "sleep 300" in r.stderr and "sleep 301" in r.stderr, r.stderr
        for p in pids:
            assert "pid %d " % p in r.stderr, r.stderr
        # the wrapper reaped them before it exited: they are gone, not zombies
        assert not any(alive(p) for p in pids), pids
    finally:
        kill_all(pids)


def test_a_failing_run_keeps_its_status_and_still_reports(tmp_path):
    pidfile = tmp_path / "pid"
    r = run("--settle", "0.2", "sh", "-c", "setsid sleep 302 & echo $! > %s; exit 3" % pidfile)
    pid = int(pidfile.read_text())
    try:
        assert r.returncode == 3, r
        assert "sleep 302" in r.stderr, r.stderr
        assert not alive(pid)
    finally:
        kill_all([pid])


def test_clean_run_passes_its_status_and_waits_for_what_is_ending():
    assert run("true").returncode == 0
    assert run("sh", "-c", "exit 7").returncode == 7
    # a process that ends within the settle time is not a leak
    r = run("--settle", "20", "sh", "-c", "setsid sleep 0.3 & exit 0")
    assert r.returncode == 0 and r.stderr == "", r


def test_the_run_is_marked_and_nothing_outside_it_is_touched(tmp_path):
    outside = subprocess.Popen(["sleep", "303"], start_new_session=True)
    try:
        r = run("--settle", "0.2", "sh", "-c", 'echo "$TERMD_TEST_RUN"')
        assert r.returncode == 0 and len(r.stdout.strip()) >= 8, r
        assert alive(outside.pid)
    finally:
        outside.kill()
        outside.wait()


@pytest.mark.parametrize("sig", [signal.SIGTERM])
def test_a_signal_to_the_wrapper_goes_to_the_command_then_the_check_runs(tmp_path, sig):
    pidfile = tmp_path / "pid"
    errf = tmp_path / "err"
    p = subprocess.Popen([sys.executable, TEST_RUN, "--settle", "0.2", "sh", "-c",
                          "setsid sleep 304 & echo $! > %s; exec sleep 305" % pidfile],
                         stderr=open(errf, "w"), stdin=subprocess.DEVNULL)
    pid = None
    try:
        deadline = time.monotonic() + 30
        while not (pidfile.exists() and pidfile.read_text().strip()):
            assert time.monotonic() < deadline, "the command never started"
            time.sleep(0.02)
        pid = int(pidfile.read_text())
        p.send_signal(sig)
        p.wait(timeout=30)
        err = errf.read_text()
        assert p.returncode == 128 + sig, (p.returncode, err)
        assert "sleep 304" in err, err
        assert gone_within([pid], 5)
    finally:
        p.kill()
        p.wait()
        if pid:
            kill_all([pid])


def test_orphans_are_reaped_while_the_run_goes_on(tmp_path):
    # an orphan that ends mid-run must not stay a zombie until the end: the
    # command itself waits (up to 20 s) for the orphan's pid to disappear
    pidfile = tmp_path / "pid"
    script = ("(true & echo $! > %s); p=$(cat %s); i=0; "
              "while [ -e /proc/$p ]; do i=$((i+1)); [ $i -gt 400 ] && exit 9; sleep 0.05; done; "
              "exit 0" % (pidfile, pidfile))
    r = run("--settle", "0.2", "sh", "-c", script)
    assert r.returncode == 0, (r, "the orphan's zombie was not reaped during the run")


REAPER = r"""
import ctypes, os, sys, time
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)          # PR_SET_CHILD_SUBREAPER
child = os.spawnv(os.P_NOWAIT, sys.executable, [sys.executable] + sys.argv[1:])
os.waitpid(child, 0)
time.sleep(0.3)
me = str(os.getpid())
left = []
for name in os.listdir("/proc"):
    try:
        with open("/proc/%s/stat" % name) as f:
            rest = f.read().rsplit(")", 1)[1].split()
    except OSError:
        continue
    if rest[1] == me:
        left.append("%s %s" % (name, rest[0]))
print(";".join(left))
for pid in left:
    os.waitpid(int(pid.split()[0]), 0)
"""


def test_no_zombie_is_handed_on_when_the_wrapper_exits(tmp_path):
    # The orphans that ended in the last moments of the run are reaped by the
    # wrapper, not left to whoever inherits them (on this VM, an init that
    # reaps lazily). The outer reaper here is a subreaper and lists every
    # process re-parented to it after the wrapper ended.
    script = "for i in 1 2 3 4 5; do (sleep 0.2 & :); done; sleep 0.6; exit 0"
    with tempfile.TemporaryFile("w+") as out:
        p = subprocess.run([sys.executable, "-c", REAPER, TEST_RUN, "--settle", "0.2",
                            "sh", "-c", script], stdout=out, timeout=60, stdin=subprocess.DEVNULL)
        out.seek(0)
        handed = out.read().strip()
    assert p.returncode == 0
    assert handed == "", "processes handed on by the wrapper: " + handed


def test_a_termd_or_swerex_folder_left_in_the_runs_tmpdir_fails_the_run(tmp_path):
    # the run has a TMPDIR of its own (so another run's folders on the same
    # machine are never counted); what it leaves there is named and removed
    seen = tmp_path / "tmpdir"
    r = run("--settle", "0.2", "sh", "-c",
            'echo "$TMPDIR" > %s; mkdir "$TMPDIR/termd-AbC123" "$TMPDIR/termd-AbC123/plugin-mine" '
            '"$TMPDIR/swx-q1" "$TMPDIR/termd-fw-abc"; : > "$TMPDIR/stray"; exit 0' % seen)
    d = seen.read_text().strip()
    assert d != tempfile.gettempdir() and os.path.basename(d).startswith("tr-"), d
    assert r.returncode == 1, r
    assert "termd-AbC123: plugin-mine" in r.stderr and "swx-q1" in r.stderr, r.stderr
    assert "also left in the run's TMPDIR, removed: stray termd-fw-abc" in r.stderr, r.stderr
    assert not os.path.exists(d)


def test_what_the_run_cleans_up_itself_passes_and_its_status_is_kept(tmp_path):
    seen = tmp_path / "tmpdir"
    r = run("--settle", "0.2", "sh", "-c",
            'echo "$TMPDIR" > %s; d=$(mktemp -d -t termd-XXXXXX); : > $d/termd.sh; rm -r $d; '
            'exit 5' % seen)
    assert r.returncode == 5 and r.stderr == "", r
    assert not os.path.exists(seen.read_text().strip())
    # a failing run with a leftover keeps its own status
    r = run("--settle", "0.2", "sh", "-c", 'mkdir "$TMPDIR/termd-x1Y2z3"; exit 4')
    assert r.returncode == 4 and "termd-x1Y2z3: (empty)" in r.stderr, r
