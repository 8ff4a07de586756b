"""bench_jupyter.py — owns the jupyter plugin's figures in `make bench` (issue 11), measured through termd's
/events channel (a private termd with --plugins jupyter on a unix socket), next to an in-process Python
jupyter_client loop measured in the same run (in a child process of this script, so its RSS is its own):
the first cell after termd starts (from termd's start, and from the first action once the plugin is ready),
`1+1` round trips p50/p99, termd's VmRSS before/after 1000 cells (with the default --retain and with
--retain 100, to tell retained answers from a leak), termd-jupyter's and the kernel's RSS; and termd-jupyter
driven over its pipes without termd, to show what the plugin host adds. Prints one table; informational:
exits 0 whenever the measurements could be taken, goals met or not.

Environment: TERMD_BIN (default build/termd), TERMD_PLUGIN_DIR (default: plugins/ next to TERMD_BIN),
BENCH_COLD_RUNS (3), BENCH_CELLS (timed 1+1 cells, 200), BENCH_RSS_CELLS (1000)."""

import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time

import plugbench as pb

COLD_RUNS = int(os.environ.get("BENCH_COLD_RUNS", "3"))
CELLS = int(os.environ.get("BENCH_CELLS", "200"))
RSS_CELLS = int(os.environ.get("BENCH_RSS_CELLS", "1000"))
WARM = 20
FIRST_CELL_GOAL_S = 1.5
P50_GOAL_RATIO = 1.5
RSS_NOISE_KB = 128          # "no growth": at most this much over RSS_CELLS cells (pages, malloc's slack)
T = 120


def cell_ok(content):
    # after 1000 results IPython warns (on stderr) that it flushes its output cache; the result still comes
    return content.startswith("2\n") or "\n2\n[Jupyter current working directory: " in content


# ------------------------------------------------------------- through termd

def call_cell(ev, code="1+1", timeout=T):
    o = ev.call("run_ipython", {"code": code}, timeout=timeout)
    if o.get("observation") != "run_ipython" or not cell_ok(o.get("content", "")):
        raise RuntimeError("unexpected answer to run_ipython %r: %r" % (code, o))
    return o


def cold_from_start(tmp, name, state_dir, plugins="jupyter"):
    """termd start → first 1+1 answered (the action sent as soon as the socket answers)."""
    td = pb.PluginTermd(os.path.join(tmp, name), plugins, state_dir)
    try:
        ev = td.start()
        call_cell(ev)
        took = time.monotonic() - td.t_start
        ev.close()
        return took
    finally:
        td.stop()


def start_ready(tmp, name, state_dir, plugins="jupyter", args=()):
    td = pb.PluginTermd(os.path.join(tmp, name), plugins, state_dir, args)
    ev = td.start()
    for p in plugins.split(","):
        pb.wait_ready(ev, p)
    return td, ev


def first_action(tmp, name, state_dir, plugins="jupyter"):
    """plugin ready (plugin.list) → first 1+1 answered."""
    td, ev = start_ready(tmp, name, state_dir, plugins)
    try:
        t = time.monotonic()
        call_cell(ev)
        took = time.monotonic() - t
        ev.close()
        return took
    finally:
        td.stop()


def program_pids(td):
    """(termd-jupyter pid, [its kernel's pids]) under td."""
    tree = pb.descendants(td.pid)
    prog = [p for p in tree if pb.cmdline(p)[:1] and pb.cmdline(p)[0].endswith(b"termd-jupyter")]
    if not prog:
        return None, []
    return prog[0], pb.descendants(prog[0])


def rtts(call, n):
    out = []
    for _ in range(n):
        t = time.perf_counter()
        call()
        out.append(time.perf_counter() - t)
    return out


def rss_over_cells(td, ev, n):
    """termd's VmRSS (kB, settled) before and after n more 1+1 cells, and the bytes of their answers
    (as termd keeps them in its events ring: compact JSON)."""
    before = pb.settle_rss(td.pid)
    kept = 0
    for _ in range(n):
        o = call_cell(ev)
        kept += len(json.dumps(o, separators=(",", ":"), ensure_ascii=False).encode())
    after = pb.settle_rss(td.pid)
    return before, after, kept


class PipesPlugin:
    """termd-jupyter driven over its pipes, without termd (tests/plugins/jupyter_driver.py)."""

    def __init__(self, tmp):
        sys.path.insert(0, os.path.join(pb.REPO, "tests", "plugins"))
        os.environ["TERMD_PLUGIN_DIR"] = pb.PLUGIN_DIR
        from jupyter_driver import Plugin
        rundir = os.path.join(tmp, "pipes-run")
        os.makedirs(rundir)
        self.p = Plugin(cwd=tmp, rundir=rundir, env={"TERMD_JUPYTER_PYTHON": pb.PY})

    def cell(self):
        a = self.p.run("1+1", wait=T)
        if not cell_ok(a["content"]):
            raise RuntimeError("unexpected answer over pipes: %r" % a)

    def close(self):
        self.p.close()


class JupyterClient:
    """The baseline: an in-process jupyter_client loop, in a child process of this script (its RSS is its
    own), driven line by line over its stdin so that its cells can be interleaved with termd's."""

    def __init__(self, tmp):
        import subprocess
        home = os.path.join(tmp, "jc-home")
        os.makedirs(home)
        env = pb.clean_env(home, TMPDIR=os.path.join(tmp, "home"), PYDEVD_DISABLE_FILE_VALIDATION="1")
        self.p = subprocess.Popen([pb.PY, os.path.abspath(__file__), "--jupyter-client"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, cwd=home, env=env, text=True, bufsize=1)

    def ask(self, cmd):
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError("the jupyter_client loop ended (see its stderr above)")
        return json.loads(line)

    def close(self):
        try:
            self.p.stdin.close()
            self.p.wait(30)
        except Exception:
            self.p.kill()
            self.p.wait()


def jupyter_client_loop():
    """The child's side: "cold" (a fresh kernel: start to first 1+1 answered, seconds), "cell" (one 1+1,
    seconds, timed in here), "rss N" (own VmRSS before/after N cells, the kernel's RSS); JSON lines out."""
    from jupyter_client.manager import KernelManager

    def cell(kc, code):
        msg_id = kc.execute(code, store_history=True, allow_stdin=False, stop_on_error=False)
        out = result = ""
        while True:
            m = kc.get_iopub_msg(timeout=T)
            if m["parent_header"].get("msg_id") != msg_id:
                continue
            if m["msg_type"] == "execute_result":
                result = m["content"]["data"].get("text/plain", "")
                out += result
            elif m["msg_type"] == "stream":
                out += m["content"]["text"]
            elif m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                break
        while True:
            r = kc.get_shell_msg(timeout=T)
            if r["parent_header"].get("msg_id") == msg_id:
                break
        if result != "2":
            raise RuntimeError("jupyter_client: 1+1 gave %r" % out)

    km = kc = None

    def stop():
        if kc:
            kc.stop_channels()
        if km:
            km.shutdown_kernel(now=True)

    try:
        for line in sys.stdin:
            cmd = line.split()
            if cmd[0] == "cold":
                stop()
                t0 = time.monotonic()
                km = KernelManager(kernel_name="python3")
                km.start_kernel(cwd=os.getcwd())
                kc = km.client()
                kc.start_channels()
                kc.wait_for_ready(timeout=T)
                cell(kc, "1+1")
                res = time.monotonic() - t0
            elif cmd[0] == "cell":
                t = time.perf_counter()
                cell(kc, "1+1")
                res = time.perf_counter() - t
            elif cmd[0] == "rss":
                before = pb.settle_rss(os.getpid())
                for _ in range(int(cmd[1])):
                    cell(kc, "1+1")
                res = {"before": before, "after": pb.settle_rss(os.getpid()),
                       "kernel": pb.mem_kb(pb.descendants(os.getpid()))[0]}
            print(json.dumps(res), flush=True)
    finally:
        stop()


def bench(tmp):
    r = {}
    state = os.path.join(tmp, "state")
    import subprocess
    jc = None
    if subprocess.run([pb.PY, "-c", "import jupyter_client"], capture_output=True).returncode != 0:
        print("baseline skipped: jupyter_client is not installed (apt-get install python3-jupyter-client)")
    else:
        jc = JupyterClient(tmp)
    r["b_cold"] = []
    try:
        pb.step("1/5 first cell: termd start -> answer (fresh state dir: setup runs)")
        r["cold_setup"] = cold_from_start(tmp, "cold-setup", state)
        print("done")
        pb.step("2/5 first cell x%d, alternating: termd start -> answer, termd ready -> first action -> answer, "
                "jupyter_client kernel start -> answer" % COLD_RUNS)
        r["cold"], r["first"] = [], []
        for i in range(COLD_RUNS):
            r["cold"].append(cold_from_start(tmp, "cold%d" % i, state))
            r["first"].append(first_action(tmp, "first%d" % i, state))
            if jc:
                r["b_cold"].append(jc.ask("cold"))
        r["first_skills"] = first_action(tmp, "first-skills", state, "jupyter,agentskills")
        print("done")
        pb.step("3/5 1+1 x%d, interleaved: via termd, termd-jupyter over its pipes (no termd), jupyter_client "
                "(after %d warm-up each)" % (CELLS, WARM))
        td, ev = start_ready(tmp, "main", state)
        pipes = PipesPlugin(tmp)
        try:
            call_cell(ev)
            pipes.cell()
            r["rss_termd_start"] = pb.settle_rss(td.pid)
            legs = [("rtt", lambda: call_cell(ev)), ("pipes", pipes.cell), ("ping", lambda: ev.call("ping"))]
            if jc:
                legs.append(("b_rtt", lambda: jc.ask("cell")))
            for k, _ in legs:
                r[k] = []
            for i in range(WARM + CELLS):
                for k, f in legs[i % len(legs):] + legs[:i % len(legs)]:   # rotate the order each round
                    if k == "b_rtt":
                        x = f()       # timed inside the child: an in-process loop
                    else:
                        t = time.perf_counter()
                        f()
                        x = time.perf_counter() - t
                    if i >= WARM:
                        r[k].append(x)
        finally:
            pipes.close()
        print("done")
        try:
            pb.step("4/5 termd's RSS over %d more cells (jupyter_client's own over as many)" % RSS_CELLS)
            r["rss_before"], r["rss_after"], r["kept"] = rss_over_cells(td, ev, RSS_CELLS)
            prog, kern = program_pids(td)
            r["prog_rss"] = pb.proc_status(prog, "VmRSS") if prog else None
            r["kernel_rss"] = pb.mem_kb(kern)[0] if kern else None
            ev.close()
            if jc:
                r["b_rss"] = jc.ask("rss %d" % RSS_CELLS)
        finally:
            td.stop()
        print("done")
    finally:
        if jc:
            jc.close()
    pb.step("5/5 termd with --retain 100: RSS over %d cells (after %d)" % (RSS_CELLS, WARM + CELLS))
    td, ev = start_ready(tmp, "retain", state, args=["--retain", "100"])
    try:
        for _ in range(WARM + CELLS):    # the same history as above before measuring: the ring is full
            call_cell(ev)
        r["rss_before_r100"], r["rss_after_r100"], _ = rss_over_cells(td, ev, RSS_CELLS)
        ev.close()
    finally:
        td.stop()
    print("done")
    return r


# ------------------------------------------------------------- report

def report(r):
    med = statistics.median
    b = r.get("b_rss")
    p50, p99 = pb.pctl(r["rtt"], 50), pb.pctl(r["rtt"], 99)
    b_cold = med(r["b_cold"]) if r["b_cold"] else None
    b50 = pb.pctl(r["b_rtt"], 50) if b else None
    b99 = pb.pctl(r["b_rtt"], 99) if b else None
    base = lambda x, f=pb.ms: f(x) + " (jupyter_client)" if x is not None else "-"  # noqa: E731
    cold, first = med(r["cold"]), med(r["first"])
    pipe50 = pb.pctl(r["pipes"], 50)
    share = [a - b for a, b in zip(r["rtt"], r["pipes"])]   # the same round: interleaved
    grow = r["rss_after"] - r["rss_before"]
    grow100 = r["rss_after_r100"] - r["rss_before_r100"]
    b_grow = (b["after"] - b["before"]) if b else None
    rows = [
        ("first cell, termd start -> answer (median of %d)" % COLD_RUNS, pb.ms(cold), base(b_cold),
         pb.ratio(cold, b_cold), "<= %.1f s" % FIRST_CELL_GOAL_S, pb.met(cold <= FIRST_CELL_GOAL_S)),
        ("  the same with the first setup (fresh state dir)", pb.ms(r["cold_setup"]), base(b_cold),
         pb.ratio(r["cold_setup"], b_cold), "-", "-"),
        ("first cell, first action -> answer (median of %d)" % COLD_RUNS, pb.ms(first), base(b_cold),
         pb.ratio(first, b_cold), "<= %.1f s" % FIRST_CELL_GOAL_S, pb.met(first <= FIRST_CELL_GOAL_S)),
        ("  the same with agentskills", pb.ms(r["first_skills"]), base(b_cold),
         pb.ratio(r["first_skills"], b_cold), "-", "-"),
        ("1+1 round trip p50 (%d cells)" % CELLS, pb.ms(p50), base(b50), pb.ratio(p50, b50),
         "<= %.1fx jupyter_client" % P50_GOAL_RATIO, pb.met(b50 and p50 <= P50_GOAL_RATIO * b50)),
        ("1+1 round trip p99", pb.ms(p99), base(b99), pb.ratio(p99, b99), "-", "-"),
        ("1+1 p50, termd-jupyter over its pipes (no termd)", pb.ms(pipe50), base(b50), pb.ratio(pipe50, b50),
         "-", "-"),
        ("  via termd - over pipes, median of the %d pairs" % len(share), "%.0f us" % (med(share) * 1e6),
         "%.0f us (termd ping RTT p50)" % (pb.pctl(r["ping"], 50) * 1e6), "-", "-", "-"),
        ("termd VmRSS before -> after %d cells" % RSS_CELLS,
         "%s -> %s (%+d KiB)" % (pb.mib(r["rss_before"]), pb.mib(r["rss_after"]), grow),
         "%+d KiB (jupyter_client process)" % b_grow if b else "-", "-",
         "no growth (<= %d KiB)" % RSS_NOISE_KB, pb.met(grow <= RSS_NOISE_KB)),
        ("  the %d answers' JSON (kept in the events ring)" % RSS_CELLS, "%d KiB" % (r["kept"] // 1024),
         "-", "-", "-", "-"),
        ("termd VmRSS over %d cells with --retain 100" % RSS_CELLS,
         "%s -> %s (%+d KiB)" % (pb.mib(r["rss_before_r100"]), pb.mib(r["rss_after_r100"]), grow100),
         "-", "-", "no growth (<= %d KiB)" % RSS_NOISE_KB, pb.met(grow100 <= RSS_NOISE_KB)),
        ("termd VmRSS with the plugin (after 1 cell)", pb.mib(r["rss_termd_start"]), "-", "-", "-", "-"),
        ("termd-jupyter VmRSS", pb.mib(r["prog_rss"]) if r["prog_rss"] else "-",
         pb.mib(b["after"]) + " (jupyter_client process)" if b else "-",
         pb.ratio(r["prog_rss"], b["after"] if b else None), "-", "-"),
        ("ipykernel RSS", pb.mib(r["kernel_rss"]) if r["kernel_rss"] else "-",
         pb.mib(b["kernel"]) + " (jupyter_client's kernel)" if b else "-",
         pb.ratio(r["kernel_rss"], b["kernel"] if b else None), "-", "-"),
    ]
    print()
    pb.table(rows)
    print()
    us = lambda xs: " ".join("%.0f" % (pb.pctl(xs, p) * 1e6) for p in (0, 50, 90, 99, 100))  # noqa: E731
    print("1+1 us (min p50 p90 p99 max)   via termd: %s | over pipes: %s%s"
          % (us(r["rtt"]), us(r["pipes"]), " | jupyter_client: " + us(r["b_rtt"]) if b else ""))
    print("first cell runs (s)            from termd start: %s (with first setup: %.2f) | from first action: %s"
          "%s" % (" ".join("%.2f" % x for x in r["cold"]), r["cold_setup"], " ".join("%.2f" % x for x in r["first"]),
                  " | jupyter_client: " + " ".join("%.2f" % x for x in r["b_cold"]) if b else ""))


def main():
    if sys.argv[1:] == ["--jupyter-client"]:
        return jupyter_client_loop()
    if not os.access(pb.TERMD_BIN, os.X_OK) or not os.access(
            os.path.join(pb.PLUGIN_DIR, "jupyter", "termd-jupyter"), os.X_OK):
        print("bench_jupyter: %s or %s/jupyter/termd-jupyter missing (make all)" % (pb.TERMD_BIN, pb.PLUGIN_DIR),
              file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    started = time.monotonic()
    pb.header("jupyter plugin bench")
    tmp = tempfile.mkdtemp(prefix="tdpj-", dir="/tmp")   # short: unix socket path limit
    try:
        report(bench(tmp))
        print("bench took %.0f s" % (time.monotonic() - started))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
