"""bench_fidelity.py — `make bench`: issue 22's figure, what an agent pays per
step. The differential corpus (tests/regress/fidelity.py, every command)
run through termd's `run` in `main` (the Python package, one connection),
next to the same commands run by `bash -c` on a pty, each in a fresh copy
of the fixture folder, in the same run. Prints the totals and the per
command p50/p99 of both. Informational: exit status 0 whenever the figures
could be taken.

Environment: TERMD_BIN (as bench.py), BENCH_REPS (passes over the corpus,
default 2)."""

import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "proto", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "regress"))

import bench  # noqa: E402
import fidelity  # noqa: E402
import termd  # noqa: E402

REPS = int(os.environ.get("BENCH_REPS", "2"))


def main():
    tmp = tempfile.mkdtemp(prefix="bench-fid-")
    # both sides find the same programs (a pyenv shim on PATH costs 0.5 s a python3)
    os.environ["PATH"] = fidelity.shell_env(tmp)["PATH"]
    td = bench.Termd(tmp)
    try:
        td.start()
        env = fidelity.shell_env(td.home)
        t_termd, t_bash, waited, names = [], [], [], []
        n = 0
        with termd.Termd(td.url, wait=120) as c:
            cols, rows = c.screen().cols, c.screen().rows
            for rep in range(REPS):
                for cmd in fidelity.CORPUS:
                    n += 1
                    a = os.path.join(tmp, "t%d" % n, "work")
                    b = os.path.join(tmp, "b%d" % n, "work")
                    fidelity.make_fixture(a)
                    fidelity.make_fixture(b)
                    t0 = time.perf_counter()
                    fidelity.bash_c(cmd, b, env, cols=cols, rows=rows)
                    t_bash.append(time.perf_counter() - t0)
                    # the cd into the fixture is not timed: it is the harness's
                    c.run("cd '%s'" % a)
                    t0 = time.perf_counter()
                    r = c.run(cmd, timeout=20)
                    asked = r.waiting_for_input
                    while r.running:
                        r = c.run("C-d", is_input=True, timeout=20) if r.waiting_for_input else c.run("", timeout=20)
                    t_termd.append(time.perf_counter() - t0)
                    waited.append(asked)
                    names.append(cmd)
                    c.run(fidelity.RESET)
        tt, tb = sum(t_termd), sum(t_bash)
        st, sb = bench.summary_us(t_termd), bench.summary_us(t_bash)
        print("bench_fidelity: %d commands (%d x the corpus of %d)" % (len(t_termd), REPS, len(fidelity.CORPUS)))
        print("  termd run in main: total %.2f s, per command p50 %s p99 %s"
              % (tt, bench.ms(st["p50_us"]), bench.ms(st["p99_us"])))
        print("  bash -c on a pty:  total %.2f s, per command p50 %s p99 %s"
              % (tb, bench.ms(sb["p50_us"]), bench.ms(sb["p99_us"])))
        print("  termd / bash -c: total %s, p50 %s" % (bench.ratio(tt, tb), bench.ratio(st["p50_us"], sb["p50_us"])))
        # a program that reads the terminal is answered after about a second
        # of quiet (waiting_for_input), where bash -c hands it /dev/null
        keep = [i for i, w in enumerate(waited) if not w]
        tt2, tb2 = sum(t_termd[i] for i in keep), sum(t_bash[i] for i in keep)
        print("  without the %d that waited for input: termd %.2f s, bash -c %.2f s, %s"
              % (len(waited) - len(keep), tt2, tb2, bench.ratio(tt2, tb2)))
        slow = sorted(keep, key=lambda i: t_bash[i] - t_termd[i])[:5]
        print("  slowest against bash -c: " + "; ".join("%r %.0f vs %.0f ms" % (
            names[i][:40], t_termd[i] * 1e3, t_bash[i] * 1e3) for i in slow))
    finally:
        td.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
