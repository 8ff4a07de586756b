"""Benchmark of the jupyter plugin: cold start (program start → first cell answered) and `1+1` round trips
through termd-jupyter, next to the same with a Python jupyter_client loop (python3-jupyter-client), when
that is installed. Prints both; asserts nothing. Run: make bench-jupyter (or with TERMD_PLUGIN_DIR set)."""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "plugins"))
from jupyter_driver import Plugin  # noqa: E402

COLD_RUNS = int(os.environ.get("BENCH_COLD_RUNS", "5"))
CELLS = int(os.environ.get("BENCH_CELLS", "200"))


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def show(name, cold, rtts):
    print("%-22s cold start→first answer: median %.2f s (min %.2f, max %.2f, %d runs)"
          % (name, statistics.median(cold), min(cold), max(cold), len(cold)))
    print("%-22s 1+1 round trip over %d cells: p50 %.2f ms, p99 %.2f ms, min %.2f ms"
          % ("", len(rtts), pct(rtts, 50) * 1e3, pct(rtts, 99) * 1e3, min(rtts) * 1e3))


def bench_plugin():
    cold = []
    rtts = []
    for i in range(COLD_RUNS):
        t0 = time.monotonic()
        p = Plugin(cwd="/tmp")
        a = p.run("1+1", wait=120)
        cold.append(time.monotonic() - t0)
        assert a["content"].startswith("2\n"), a
        if i == COLD_RUNS - 1:
            for _ in range(CELLS):
                t = time.monotonic()
                a = p.run("1+1")
                rtts.append(time.monotonic() - t)
                assert a["content"].startswith("2\n"), a
        p.close()
    show("termd-jupyter (C)", cold, rtts)


def bench_jupyter_client():
    try:
        from jupyter_client.manager import KernelManager
    except ImportError:
        print("jupyter_client: not installed (apt-get install python3-jupyter-client) — skipped")
        return

    def cell(kc, code):
        msg_id = kc.execute(code, store_history=True, allow_stdin=False, stop_on_error=False)
        out = ""
        while True:
            m = kc.get_iopub_msg(timeout=60)
            if m["parent_header"].get("msg_id") != msg_id:
                continue
            if m["msg_type"] == "execute_result":
                out += m["content"]["data"].get("text/plain", "")
            elif m["msg_type"] == "stream":
                out += m["content"]["text"]
            elif m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                break
        while True:
            r = kc.get_shell_msg(timeout=60)
            if r["parent_header"].get("msg_id") == msg_id:
                return out

    cold = []
    rtts = []
    for i in range(COLD_RUNS):
        t0 = time.monotonic()
        km = KernelManager(kernel_name="python3")
        km.kernel_cmd = None
        os.environ["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
        km.start_kernel(cwd="/tmp")
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=120)
        assert cell(kc, "1+1") == "2"
        cold.append(time.monotonic() - t0)
        if i == COLD_RUNS - 1:
            for _ in range(CELLS):
                t = time.monotonic()
                assert cell(kc, "1+1") == "2"
                rtts.append(time.monotonic() - t)
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    show("jupyter_client (Py)", cold, rtts)


if __name__ == "__main__":
    print("load average: %.2f %.2f %.2f, %d CPUs" % (os.getloadavg() + (os.cpu_count(),)))
    bench_plugin()
    bench_jupyter_client()
