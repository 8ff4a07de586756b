"""bench_seq.py — owns issue 50's `seq` figure taken on its own, for work on
termd's pty output path: `seq 1 2000000` through `run` in one termd (or two,
TERMD_BIN and TERMD_BASE_BIN, e.g. a change and main, their runs
alternated) next to a bare pty read as fast as Python can, in the same run.
Prints each one's median wall time, its ratio to the bare pty, termd's CPU
for it, and where the writer's time went: `seq` (wrapped, it reports its
own /proc schedstat) on the CPU, runnable but waiting for one, or blocked
(the pty's buffer full: the reader behind). Informational: exit status 0
whenever the figures could be taken. bench.py's step 4 is the same figure
in `make bench`.

Environment: TERMD_BIN (required), TERMD_BASE_BIN (optional), BENCH_REPS
(default 7)."""

import os
import pty
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402

REPS = int(os.environ.get("BENCH_REPS", "7"))
COUNT = 2000000

# seq as the child of a Python that, before reaping it, reads its
# schedstat (ns on a CPU, ns runnable and waiting) and writes the figures
# to the file named in argv[1]; seq's output is untouched
WRAP = r"""
import os, subprocess, sys, time
t0 = time.perf_counter()
p = subprocess.Popen(["seq", "1", sys.argv[2]])
os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)
wall = time.perf_counter() - t0
with open("/proc/%d/schedstat" % p.pid) as f:
    run, wait = [int(x) / 1e9 for x in f.read().split()[:2]]
p.wait()
with open(sys.argv[1], "w") as f:
    f.write("%f %f %f\n" % (wall, run, wait))
"""


def writer_split(path):
    """(on CPU, waiting for a CPU, blocked) seconds of the last seq."""
    with open(path) as f:
        wall, run, wait = [float(x) for x in f.read().split()]
    return run, wait, max(0.0, wall - run - wait)


def seq_bare(wrap, stat):
    master, slave = pty.openpty()
    try:
        t0 = time.perf_counter()
        p = subprocess.Popen([sys.executable, wrap, stat, str(COUNT)], stdin=slave, stdout=slave,
                             stderr=slave, close_fds=True, start_new_session=True)
        os.close(slave)
        slave = -1
        while True:
            try:
                if not os.read(master, 65536):
                    break
            except OSError:  # EIO: the slave side is gone
                break
        dt = time.perf_counter() - t0
        p.wait()
        return dt
    finally:
        if slave >= 0:
            os.close(slave)
        os.close(master)


def main():
    bins = [("termd", os.environ.get("TERMD_BIN") or bench.TERMD_BIN)]
    if os.environ.get("TERMD_BASE_BIN"):
        bins.append(("base", os.environ["TERMD_BASE_BIN"]))
    tmp = tempfile.mkdtemp(prefix="tdseq-", dir="/tmp")  # short: unix socket path limit
    wrap, stat = os.path.join(tmp, "wrap.py"), os.path.join(tmp, "seq.stat")
    with open(wrap, "w") as f:
        f.write(WRAP)
    tds, wss = [], []
    try:
        for i, (_, b) in enumerate(bins):
            bench.TERMD_BIN = b
            d = os.path.join(tmp, "t%d" % i)
            os.makedirs(d)
            td = bench.Termd(d)
            td.start()
            tds.append(td)
            ws = bench.WS(td.sock)
            ws.call("run", {"command": "true"})
            wss.append(ws)
        bench.SEQ_CMD = "%s %s %s %d" % (sys.executable, wrap, stat, COUNT)
        print("seq 1 %d through run, %d runs alternating %s and a bare pty; %d cores, load %s"
              % (COUNT, REPS, " / ".join(n for n, _ in bins), os.cpu_count(),
                 " ".join("%.2f" % x for x in os.getloadavg())))
        res = {n: {"wall": [], "cpu": [], "split": []} for n, _ in bins}
        bare = {"wall": [], "split": []}
        for _ in range(REPS):
            for (n, _), td, ws in zip(bins, tds, wss):
                dt, cpu, _info = bench.seq_termd(td, ws)
                res[n]["wall"].append(dt)
                res[n]["cpu"].append(cpu)
                res[n]["split"].append(writer_split(stat))
            bare["wall"].append(seq_bare(wrap, stat))
            bare["split"].append(writer_split(stat))
        mb = statistics.median(bare["wall"])

        def row(name, r, cpu):
            split = [statistics.median(x[i] for x in r["split"]) for i in range(3)]
            print("%-9s %6.3f s  %5.2fx  termd CPU %s  seq: on CPU %.2f s, waiting for one %.2f s, "
                  "blocked %.2f s   runs: %s"
                  % (name, statistics.median(r["wall"]), statistics.median(r["wall"]) / mb,
                     "%.2f s" % statistics.median(cpu) if cpu else "   -  ", split[0], split[1],
                     split[2], " ".join("%.2f" % x for x in r["wall"])))
        for n, _ in bins:
            row(n, res[n], res[n]["cpu"])
        row("bare pty", bare, None)
        print("(issue 50's target: termd <= 1.00x the bare pty; the machine is shared, read the ratios)")
    finally:
        for ws in wss:
            ws.close()
        for td in tds:
            td.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
