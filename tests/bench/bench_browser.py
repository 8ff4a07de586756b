"""browser plugin numbers (make bench-plugin-browser): cold start to the first browse answer, warm browse p50,
a fill+click round trip, program + Chromium memory, next to Chromium's own one-shot --dump-dom of the same page."""
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

BIN = os.path.abspath(os.environ.get("TERMD_BROWSER_BIN") or os.path.join(
    os.path.dirname(__file__), "..", "..", "build", "plugins", "browser", "termd-browser"))
PAGE = """<html><head><title>Bench</title></head><body><h1>Bench page</h1>
<p>A small page with a <a href="/index.html">link</a>.</p>
<label for="n">Name</label><input id="n"><button id="b" onclick="document.getElementById('o').textContent='hi '+document.getElementById('n').value">Go</button>
<p id="o">-</p></body></html>"""


class Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *a):
        pass


class Plugin:
    def __init__(self):
        self.rundir = tempfile.mkdtemp(prefix="tb-bench-")
        self.p = subprocess.Popen([BIN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  env=dict(os.environ, TERMD_PLUGIN_RUNDIR=self.rundir))
        self.n = 0

    def call(self, action, args):
        self.n += 1
        self.p.stdin.write((json.dumps({"id": self.n, "action": action, "args": args}) + "\n").encode())
        self.p.stdin.flush()
        a = json.loads(self.p.stdout.readline())
        assert a["id"] == self.n and not a["extras"].get("error"), a
        return a

    def close(self):
        self.p.stdin.close()
        self.p.wait(60)
        shutil.rmtree(self.rundir, ignore_errors=True)


def mem(pids):
    rss = pss = 0
    for pid in pids:
        try:
            for line in open("/proc/%d/smaps_rollup" % pid):
                if line.startswith("Rss:"):
                    rss += int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss += int(line.split()[1])
        except OSError:
            pass
    return rss // 1024, pss // 1024


def chromium_pids(rundir):
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if rundir.encode() in open("/proc/%s/cmdline" % pid, "rb").read():
                    out.append(int(pid))
            except OSError:
                pass
    return out


def ms(x):
    return "%.0f ms" % (x * 1000)


def main():
    root = tempfile.mkdtemp(prefix="tb-bench-www-")
    with open(os.path.join(root, "index.html"), "w") as f:
        f.write(PAGE)
    srv = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=root))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = "http://127.0.0.1:%d/index.html" % srv.server_address[1]

    colds = []
    for _ in range(3):
        t = time.perf_counter()
        p = Plugin()
        p.call("browse", {"url": url})
        colds.append(time.perf_counter() - t)
        p.close()

    p = Plugin()
    p.call("browse", {"url": url})
    warm = []
    for _ in range(20):
        t = time.perf_counter()
        p.call("browse", {"url": url})
        warm.append(time.perf_counter() - t)
    tree = p.call("browse_interactive", {"browser_actions": "noop(0)"})["extras"]["axtree"]
    import re
    box = re.search(r"\[(\w+)\] textbox 'Name'", tree).group(1)
    btn = re.search(r"\[(\w+)\] button 'Go'", tree).group(1)
    rt = []
    for i in range(10):
        t = time.perf_counter()
        a = p.call("browse_interactive", {"browser_actions": "fill('%s', 'n%d')\nclick('%s')" % (box, i, btn)})
        rt.append(time.perf_counter() - t)
        assert "hi n%d" % i in a["extras"]["axtree"]
    noop = []
    for _ in range(10):
        t = time.perf_counter()
        p.call("browse_interactive", {"browser_actions": "noop(0)"})
        noop.append(time.perf_counter() - t)
    prog_rss, _ = mem([p.p.pid])
    cpids = chromium_pids(p.rundir)
    c_rss, c_pss = mem(cpids)
    p.close()

    exe = "/usr/lib/chromium/chromium" if os.path.exists("/usr/lib/chromium/chromium") else shutil.which("chromium")
    dump = []
    for _ in range(3):
        d = tempfile.mkdtemp(prefix="tb-bench-dd-")
        t = time.perf_counter()
        out = subprocess.run([exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--user-data-dir=" + d,
                              "--dump-dom", url], capture_output=True, env=dict(os.environ, HOME=d))
        dump.append(time.perf_counter() - t)
        assert b"Bench page" in out.stdout
        shutil.rmtree(d, ignore_errors=True)
    srv.shutdown()

    print("browser plugin (termd-browser + %s)" % os.path.basename(exe))
    print("  cold start → first browse answer     median %s   (runs: %s)" % (ms(statistics.median(colds)), ", ".join(ms(x) for x in colds)))
    print("  warm browse, small local page        p50 %s   p90 %s   (20 runs)" % (ms(statistics.median(warm)), ms(sorted(warm)[17])))
    print("  browse_interactive noop(0)           p50 %s   (10 runs: observation only)" % ms(statistics.median(noop)))
    print("  fill + click round trip              p50 %s   (10 runs)" % ms(statistics.median(rt)))
    print("  termd-browser RSS                    %d MiB" % prog_rss)
    print("  Chromium (%d processes)              RSS sum %d MiB, PSS sum %d MiB" % (len(cpids), c_rss, c_pss))
    print("  baseline: chromium --headless --dump-dom (one-shot, same page)   median %s   (runs: %s)" % (
        ms(statistics.median(dump)), ", ".join(ms(x) for x in dump)))


if __name__ == "__main__":
    sys.exit(main())
