"""bench_python.py — `make bench`: `run true` round trips through the Python
package (proto/python, its synchronous API) next to the C client
(bench-rtt), bench.py's own minimal Python client (one blocking socket: the
floor for a Python client) and pexpect driving bash, in the same run against one private
termd (bench.py's Termd, on a unix socket), taken in turn 100 at a time
so that load swings hit all of them. Informational: exit status 0
whenever the figures could be taken.

Environment: TERMD_BIN, BENCH_RTT_BIN (as bench.py), BENCH_N (timed round
trips, default 2000)."""

import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "proto", "python"))

import bench  # noqa: E402
import termd  # noqa: E402


def package_client(td):
    """(name, connect) for bench.rtt_interleaved: a `run true` through the
    package's synchronous API"""
    def connect():
        t = termd.Termd(td.url)
        t.__enter__()

        def one():
            r = t.run("true")
            if r.exit_code != 0 or r.running:
                raise RuntimeError("unexpected answer: %r" % (r,))
        return one, lambda: t.__exit__(None, None, None)
    return ("package", connect)


def main():
    tmp = tempfile.mkdtemp(prefix="bench-py-")
    td = bench.Termd(tmp)
    try:
        td.start()
        sys.stdout.write("bench_python: run true x%d: package, C client, minimal client, pexpect bash, "
                         "%d at a time in turn ... " % (bench.N, bench.RTT_BLOCK))
        sys.stdout.flush()
        os.makedirs(os.path.join(tmp, "pexpect-home"))
        rt = bench.rtt_interleaved(td, os.path.join(tmp, "pexpect-home"), others=[package_client(td)])
        py, c, mini, px = rt["package"], rt["c"], rt["py"], rt["pexpect"]
        print("done")
        rows = [("client", "p50", "p99", "p50 vs C", "p50 vs pexpect")]
        for name, r in (("termd Python package (sync)", py), ("termd C client (bench-rtt)", c),
                        ("bench.py's minimal Python client", mini), ("pexpect + bash (no termd)", px)):
            rows.append((name, bench.ms(r["p50_us"]), bench.ms(r["p99_us"]),
                         bench.ratio(r["p50_us"], c["p50_us"]), bench.ratio(r["p50_us"], px["p50_us"])))
        w = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
        for r in rows:
            print("  ".join(str(x).ljust(w[i]) for i, x in enumerate(r)))
        for name, r in (("package", py), ("C", c), ("minimal", mini), ("pexpect", px)):
            print("RTT detail (us) %-8s min %.0f p50 %.0f p99 %.0f max %.0f"
                  % (name, r["min_us"], r["p50_us"], r["p99_us"], r["max_us"]))
    finally:
        td.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
