"""bench_input_wait.py — `make bench`: issue 33's two figures.

1. From a program blocking on the terminal to termd's answer saying so
   (`waiting_for_input: true` with `extras.waiting`): each program writes
   the wall-clock time to a file just before it blocks (a line read from
   /dev/tty, getpass's password, a one-key read), the client notes when the
   answer came; p50 and max per kind and over all (goal: p50 <= 1 s). Each
   is then answered so the command ends.
2. What detection costs: `run true` round trips (the C client, bench-rtt)
   in `main` while BENCH_WAIT_SESSIONS other sessions each run a `sleep`
   that no action waits on, and while a `run ""` waits on each (termd
   looks in /proc for each of them every 250 ms): the same sessions and
   processes, detection off and on, in 2.5 s windows alternated twice and
   pooled, in the same run against the same termd.

Informational: exit status 0 whenever the figures could be taken.
Environment: TERMD_BIN, BENCH_RTT_BIN (as bench.py), BENCH_WAIT_N (blocking
programs per kind, default 10), BENCH_WAIT_SESSIONS (default 8)."""

import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "proto", "python"))

import bench  # noqa: E402
import termd  # noqa: E402

N_WAIT = int(os.environ.get("BENCH_WAIT_N", "10"))
SESSIONS = int(os.environ.get("BENCH_WAIT_SESSIONS", "8"))
TARGET_S = 1.0
WINDOW_S = 2.5              # each timed window of run true round trips
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def programs(stamp):
    """kind -> (command that writes the time to `stamp` and blocks, answer)"""
    now = "%s -c 'import time; print(repr(time.time()))' > %s" % (PY, stamp)
    return {
        "line": ("%s; read x </dev/tty" % now, "yes"),
        "password": ("%s -c 'import getpass, time; open(\"%s\", \"w\").write(repr(time.time())); "
                     "getpass.getpass()'" % (PY, stamp), "hunter2"),
        "key": ("%s; read -n1 k" % now, None),
    }


def blocking_to_answer(td, tmp):
    """{kind: [seconds from blocking to the answer]}"""
    stamp = os.path.join(tmp, "blocked-at")
    out = {}
    with termd.Termd(td.url, wait=120) as c:
        for kind, (cmd, reply) in programs(stamp).items():
            got = []
            for _ in range(N_WAIT):
                if os.path.exists(stamp):
                    os.unlink(stamp)
                r = c.run(cmd, timeout=30)
                t_answer = time.time()
                if not r.waiting_for_input or r.waiting is None or r.waiting.kind != kind:
                    raise RuntimeError("%s: not seen waiting as %s: %r" % (cmd, kind, r))
                with open(stamp) as f:
                    got.append(t_answer - float(f.read().strip()))
                if reply is None:
                    c.keys("y")
                    r = c.run("", timeout=30)
                else:
                    r = c.run(reply, is_input=True, timeout=30)
                if r.running:
                    raise RuntimeError("%s: still running after its answer: %r" % (cmd, r))
            out[kind] = got
    return out


def rtt_with_detection(td):
    """(run true summary with SESSIONS sessions each running a sleep that
    no action waits on, the same with a pending `run ""` on each, which
    termd checks for input every 250 ms), alternated twice and pooled"""
    conns = []
    try:
        for i in range(SESSIONS):
            ws = bench.WS(td.sock)
            conns.append(ws)
            name = "w%d" % i
            ws.call("session.open", {"name": name})
            ws.call("run", {"command": "true", "session": name})
            # answered at its timeout: the sleep goes on, nothing waits on it
            obs = ws.call("run", {"command": "sleep 600", "session": name, "timeout": 0.2})
            if not (obs.get("extras") or {}).get("running"):
                raise RuntimeError("sleep 600 not running: %r" % obs)
        without, with_ = [], []
        for _ in range(2):
            without.append(bench.rtt_c(td, n=1000000, seconds=WINDOW_S, samples=True))
            # a poll on each, answered at its timeout, after the timed window
            polls = [ws.send_action("run", {"command": "", "session": "w%d" % i,
                                            "timeout": WINDOW_S + 2.0})
                     for i, ws in enumerate(conns)]
            time.sleep(1.0)   # past the quiet: each is now looked at every 250 ms
            with_.append(bench.rtt_c(td, n=1000000, seconds=WINDOW_S, samples=True))
            for ws, aid in zip(conns, polls):
                ws.wait([aid])
        return bench.pooled(*without), bench.pooled(*with_)
    finally:
        for i, ws in enumerate(conns):
            try:
                ws.call("session.close", {"name": "w%d" % i})
            except (OSError, RuntimeError):
                pass
            ws.close()


def main():
    tmp = tempfile.mkdtemp(prefix="bench-iw-")
    td = bench.Termd(tmp)
    try:
        td.start()
        sys.stdout.write("bench_input_wait: %d blocking programs per kind ... " % N_WAIT)
        sys.stdout.flush()
        waits = blocking_to_answer(td, tmp)
        sys.stdout.write("run true without and with %d sessions checked ... " % SESSIONS)
        sys.stdout.flush()
        quiet, busy = rtt_with_detection(td)
        print("done")
        allw = sorted(x for v in waits.values() for x in v)
        rows = [("program blocked -> answer says so", "p50", "max", "goal")]
        for kind, v in waits.items():
            v = sorted(v)
            rows.append(("  %s (%d)" % (kind, len(v)), "%.0f ms" % (bench.pctl(v, 50) * 1e3),
                         "%.0f ms" % (v[-1] * 1e3), ""))
        p50 = bench.pctl(allw, 50)
        rows.append(("  all (%d)" % len(allw), "%.0f ms" % (p50 * 1e3), "%.0f ms" % (allw[-1] * 1e3),
                     "p50 <= %.0f ms: %s" % (TARGET_S * 1e3, "met" if p50 <= TARGET_S else "NOT met")))
        rows.append(("run true (C client)", "p50", "p99", "p50 with / without"))
        rows.append(("  %d sessions sleeping, none checked" % SESSIONS, bench.ms(quiet["p50_us"]),
                     bench.ms(quiet["p99_us"]), ""))
        rows.append(("  the same, each checked for input" % (), bench.ms(busy["p50_us"]),
                     bench.ms(busy["p99_us"]), bench.ratio(busy["p50_us"], quiet["p50_us"])))
        w = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
        for r in rows:
            print("  " + "  ".join(str(c).ljust(w[i]) for i, c in enumerate(r)).rstrip())
    finally:
        td.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
