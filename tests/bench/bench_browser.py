"""bench_browser.py — owns the browser plugin's figures in `make bench` (issue 12), measured through termd's
/events channel (a private termd with --plugins browser on a unix socket), next to Chromium's own one-shot
modes (--headless --dump-dom / --screenshot of the same page) measured in the same run: cold start to the
first browse answer, warm browse p50 of a small page served by a local http.server on 127.0.0.1 and as a
file:// URL, a browse with a screenshot, a fill+click round trip, termd's RSS, termd-browser + Chromium
RSS/PSS; and termd-browser over its pipes without termd, interleaved, to show what the plugin host adds.
Prints one table; informational: exits 0 whenever the measurements could be taken, goals met or not.

Environment: TERMD_BIN (default build/termd), TERMD_PLUGIN_DIR (default: plugins/ next to TERMD_BIN),
TERMD_BROWSER_BIN (the program for the over-pipes leg; default <plugin dir>/browser/termd-browser),
BENCH_COLD_RUNS (3), BENCH_WARM (20), BENCH_ONESHOTS (5)."""

import functools
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import plugbench as pb

COLD_RUNS = int(os.environ.get("BENCH_COLD_RUNS", "3"))
WARM = int(os.environ.get("BENCH_WARM", "20"))
ONESHOTS = int(os.environ.get("BENCH_ONESHOTS", "5"))
ROUND_TRIPS = 10
WARMUP = 3                  # rounds of warm browses not counted
WARM_GOAL_S = 0.100
T = 120
BROWSER_BIN = os.path.abspath(os.environ.get("TERMD_BROWSER_BIN") or
                              os.path.join(pb.PLUGIN_DIR, "browser", "termd-browser"))

PAGE = """<html><head><title>Bench</title></head><body><h1>Bench page</h1>
<p>A small page with a <a href="/index.html">link</a>.</p>
<label for="n">Name</label><input id="n"><button id="b" onclick="document.getElementById('o').textContent='hi '+document.getElementById('n').value">Go</button>
<p id="o">-</p></body></html>"""
# the same page filling and clicking by itself once loaded: what --dump-dom can do of a fill+click
AUTO = PAGE.replace("</body>", "<script>document.getElementById('n').value='auto';"
                    "document.getElementById('b').click();</script></body>")
# Chromium's flags as termd-browser passes them (plugins/browser/cdp.c), less the DevTools pipe
FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
         "--disable-dev-shm-usage", "--window-size=1280,720", "--disable-extensions",
         "--disable-background-networking", "--disable-sync", "--disable-default-apps",
         "--disable-component-update", "--disable-breakpad", "--mute-audio", "--password-store=basic",
         "--use-mock-keychain", "--disable-features=Translate,MediaRouter,OptimizationHints,BackForwardCache"]


class Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *a):
        pass


def chromium():
    for c in (os.environ.get("TERMD_BROWSER_CHROMIUM"), "/usr/lib/chromium/chromium", shutil.which("chromium"),
              shutil.which("chromium-browser")):
        if c and os.access(c, os.X_OK):
            return c
    return None


def check(o, want):
    """o is a browse observation (browse_interactive answers with one too) without error, holding want."""
    ex = o.get("extras") or {}
    if o.get("observation") != "browse" or ex.get("error") or want not in (o.get("content", "") + ex.get("axtree", "")):
        raise RuntimeError("unexpected answer (wanted %r): %s" % (want, json.dumps(o)[:1500]))
    return o


def timed(f):
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


# ------------------------------------------------------------- through termd

def cold_from_start(tmp, name, state, url):
    td = pb.PluginTermd(os.path.join(tmp, name), "browser", state)
    try:
        ev = td.start()
        check(ev.call("browse", {"url": url}, timeout=T), "Bench page")
        took = time.monotonic() - td.t_start
        ev.close()
        return took
    finally:
        td.stop()


def start_ready(tmp, name, state):
    td = pb.PluginTermd(os.path.join(tmp, name), "browser", state)
    ev = td.start()
    pb.wait_ready(ev, "browser")
    return td, ev


def first_action(tmp, name, state, url):
    td, ev = start_ready(tmp, name, state)
    try:
        took = timed(lambda: check(ev.call("browse", {"url": url}, timeout=T), "Bench page"))
        ev.close()
        return took
    finally:
        td.stop()


class PipesBrowser:
    """termd-browser over its pipes, without termd."""

    def __init__(self, tmp):
        self.rundir = os.path.join(tmp, "pipes-run")
        os.makedirs(self.rundir)
        self.p = subprocess.Popen([BROWSER_BIN], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, cwd=tmp, start_new_session=True,
                                  env=pb.clean_env(os.path.join(tmp, "pipes-run"), TERMD_PLUGIN_RUNDIR=self.rundir,
                                                   PLUGIN="browser"))
        self.n = 0

    def call(self, action, args):
        self.n += 1
        self.p.stdin.write((json.dumps({"id": self.n, "action": action, "args": args, "cwd": self.rundir})
                            + "\n").encode())
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError("termd-browser closed its stdout")
        a = json.loads(line)
        if a.get("id") != self.n:
            raise RuntimeError("termd-browser answered %r, asked %d" % (a.get("id"), self.n))
        return a

    def close(self):
        tree = pb.descendants(self.p.pid)
        self.p.stdin.close()
        try:
            self.p.wait(30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.p.stdout.close()
        for c in tree:
            if pb.proc_ids(c):
                try:
                    os.kill(c, signal.SIGKILL)
                except OSError:
                    pass


def bids(axtree):
    box = re.search(r"\[(\w+)\] textbox 'Name'", axtree)
    btn = re.search(r"\[(\w+)\] button 'Go'", axtree)
    if not box or not btn:
        raise RuntimeError("no textbox 'Name' / button 'Go' in the axtree:\n" + axtree[:2000])
    return box.group(1), btn.group(1)


# ------------------------------------------------------------- Chromium's one-shots

def oneshot(exe, tmp, mode, url, want=None):
    """chromium --headless --dump-dom URL or --screenshot=FILE URL, a fresh profile each time; seconds."""
    d = tempfile.mkdtemp(prefix="oneshot-", dir=tmp)
    shot = os.path.join(d, "shot.png")
    argv = [exe] + FLAGS + ["--user-data-dir=" + os.path.join(d, "profile")]
    argv += ["--dump-dom"] if mode == "dump" else ["--screenshot=" + shot]
    t = time.perf_counter()
    out = subprocess.run(argv + [url], capture_output=True, cwd=d, env=pb.clean_env(d), timeout=T)
    took = time.perf_counter() - t
    if mode == "dump" and (want or "Bench page").encode() not in out.stdout:
        raise RuntimeError("chromium --dump-dom %s: %r not in its output; stderr: %s"
                           % (url, want, out.stderr[-1500:].decode(errors="replace")))
    if mode == "shot" and not (os.path.exists(shot) and os.path.getsize(shot) > 0):
        raise RuntimeError("chromium --screenshot %s wrote no PNG; stderr: %s"
                           % (url, out.stderr[-1500:].decode(errors="replace")))
    shutil.rmtree(d, ignore_errors=True)
    return took


def chromium_resident(exe, tmp, url):
    """A Chromium left open on url with termd-browser's flags (no DevTools): its tree's (RSS, PSS) kB, settled."""
    d = tempfile.mkdtemp(prefix="resident-", dir=tmp)
    p = subprocess.Popen([exe] + FLAGS + ["--user-data-dir=" + os.path.join(d, "profile"), url],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         cwd=d, env=pb.clean_env(d), start_new_session=True)
    try:
        time.sleep(1.0)   # let it load; then settle_mem waits for its memory to stop moving
        return pb.settle_mem(lambda: [p.pid] + pb.descendants(p.pid))
    finally:
        tree = pb.descendants(p.pid)
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        for c in tree:
            if pb.proc_ids(c):
                try:
                    os.kill(c, signal.SIGKILL)
                except OSError:
                    pass
        shutil.rmtree(d, ignore_errors=True)


# ------------------------------------------------------------- the run

def bench(tmp, exe, url, furl, auto_url):
    r = {}
    state = os.path.join(tmp, "state")
    pb.step("1/6 cold: termd start -> first browse answer (fresh state dir: setup runs)")
    r["cold_setup"] = cold_from_start(tmp, "cold-setup", state, url)
    print("done")
    pb.step("2/6 cold x%d, alternating: termd start -> browse answer, termd ready -> first browse -> answer, "
            "chromium --dump-dom" % COLD_RUNS)
    r["cold"], r["first"], r["b_cold"] = [], [], []
    for i in range(COLD_RUNS):
        r["cold"].append(cold_from_start(tmp, "cold%d" % i, state, url))
        r["first"].append(first_action(tmp, "first%d" % i, state, url))
        r["b_cold"].append(oneshot(exe, tmp, "dump", url))
    print("done")

    pb.step("3/6 warm browse x%d (after %d), interleaved: via termd, termd-browser over its pipes, ping; http, "
            "then file://" % (WARM, WARMUP))
    td, ev = start_ready(tmp, "main", state)
    pipes = None
    try:
        r["rss_termd_ready"] = pb.settle_rss(td.pid)
        pipes = PipesBrowser(tmp)
        # the same URL again and again on both sides: a switch between http and file:// would make
        # Chromium swap renderer processes (another site) on every browse
        for name, u in (("", url), ("_file", furl)):
            check(ev.call("browse", {"url": u}, timeout=T), "Bench page")
            check(pipes.call("browse", {"url": u}), "Bench page")
            legs = [("warm" + name, lambda: check(ev.call("browse", {"url": u}, timeout=T), "Bench page")),
                    ("pipes" + name, lambda: check(pipes.call("browse", {"url": u}), "Bench page")),
                    ("ping" + name, lambda: ev.call("ping"))]
            for k, _ in legs:
                r[k] = []
            for i in range(WARMUP + WARM):
                for k, f in legs[i % len(legs):] + legs[:i % len(legs)]:
                    x = timed(f)
                    if i >= WARMUP:
                        r[k].append(x)
        check(ev.call("browse", {"url": url}, timeout=T), "Bench page")
        check(pipes.call("browse", {"url": url}), "Bench page")
        print("done")

        pb.step("4/6 browse with a screenshot x%d, fill+click round trips x%d (via termd and over pipes)"
                % (ROUND_TRIPS, ROUND_TRIPS))
        r["shot"] = []
        for _ in range(ROUND_TRIPS):
            o = None

            def shot():
                nonlocal o
                o = check(ev.call("browse", {"url": url, "screenshot": True}, timeout=T), "Bench page")
            r["shot"].append(timed(shot))
            if not (o["extras"].get("screenshot") or "").startswith("data:image/png;base64,"):
                raise RuntimeError("browse with screenshot: true gave no PNG: %s" % json.dumps(o)[:500])
        ax = check(ev.call("browse_interactive", {"browser_actions": "noop(0)"}, timeout=T), "Name")["extras"]["axtree"]
        box, btn = bids(ax)
        pax = check(pipes.call("browse_interactive", {"browser_actions": "noop(0)"}), "Name")["extras"]["axtree"]
        pbox, pbtn = bids(pax)
        r["fill"], r["fill_pipes"] = [], []
        for i in range(ROUND_TRIPS):
            acts = "fill('%s', 'n%d')\nclick('%s')"
            r["fill"].append(timed(lambda: check(ev.call("browse_interactive",
                                                         {"browser_actions": acts % (box, i, btn)}, timeout=T),
                                                 "hi n%d" % i)))
            r["fill_pipes"].append(timed(lambda: check(pipes.call("browse_interactive",
                                                                  {"browser_actions": acts % (pbox, i, pbtn)}),
                                                       "hi n%d" % i)))
        print("done")

        pb.step("5/6 memory: termd, termd-browser + Chromium (settled)")
        r["rss_termd"] = pb.settle_rss(td.pid)
        tree = pb.descendants(td.pid)
        prog = [p for p in tree if pb.cmdline(p)[:1] and pb.cmdline(p)[0].endswith(b"termd-browser")]
        r["prog_rss"] = pb.proc_status(prog[0], "VmRSS") if prog else None
        r["tree_mem"] = pb.settle_mem(lambda: pb.descendants(td.pid))
        r["chromium_n"] = len(pb.descendants(td.pid)) - len(prog)
        ev.close()
    finally:
        if pipes:
            pipes.close()
        td.stop()
    print("done")

    pb.step("6/6 baselines: chromium one-shots x%d each (--dump-dom file://, --screenshot, --dump-dom of a page "
            "that fills and clicks itself), a resident Chromium's memory" % ONESHOTS)
    r["b_dump"], r["b_dump_file"], r["b_shot"], r["b_auto"] = [], [], [], []
    for _ in range(ONESHOTS):
        r["b_dump"].append(oneshot(exe, tmp, "dump", url))
        r["b_dump_file"].append(oneshot(exe, tmp, "dump", furl))
        r["b_shot"].append(oneshot(exe, tmp, "shot", url))
        r["b_auto"].append(oneshot(exe, tmp, "dump", auto_url, "hi auto"))
    r["b_mem"] = chromium_resident(exe, tmp, url)
    print("done")
    return r


def report(r):
    med = statistics.median
    p50 = lambda k: pb.pctl(r[k], 50)  # noqa: E731
    dump, cold = med(r["b_dump"]), med(r["b_cold"])
    base = lambda x, what: "%s (%s)" % (pb.ms(x), what)  # noqa: E731
    share = [a - b for a, b in zip(r["warm"], r["pipes"])]
    rss, pss = r["tree_mem"]
    brss, bpss = r["b_mem"]
    rows = [
        ("cold: termd start -> first browse (median of %d)" % COLD_RUNS, pb.ms(med(r["cold"])),
         base(cold, "--dump-dom, interleaved"), pb.ratio(med(r["cold"]), cold), "-", "-"),
        ("  the same with the first setup (fresh state dir)", pb.ms(r["cold_setup"]), base(cold, "the same"),
         pb.ratio(r["cold_setup"], cold), "-", "-"),
        ("cold: plugin ready -> first browse (median of %d)" % COLD_RUNS, pb.ms(med(r["first"])),
         base(cold, "the same"), pb.ratio(med(r["first"]), cold), "-", "-"),
        ("warm browse p50, http://127.0.0.1 (%d runs)" % WARM, pb.ms(p50("warm")),
         base(dump, "--dump-dom, median of %d" % len(r["b_dump"])),
         pb.ratio(p50("warm"), dump), "< %.0f ms" % (WARM_GOAL_S * 1000), pb.met(p50("warm") < WARM_GOAL_S)),
        ("warm browse p90, http", pb.ms(pb.pctl(r["warm"], 90)), "-", "-", "-", "-"),
        ("warm browse p50, file://", pb.ms(p50("warm_file")),
         base(med(r["b_dump_file"]), "--dump-dom file://"), pb.ratio(p50("warm_file"), med(r["b_dump_file"])),
         "< %.0f ms" % (WARM_GOAL_S * 1000), pb.met(p50("warm_file") < WARM_GOAL_S)),
        ("warm browse p50, termd-browser over pipes (no termd)", pb.ms(p50("pipes")), base(dump, "--dump-dom"),
         pb.ratio(p50("pipes"), dump), "-", "-"),
        ("  the same, file://", pb.ms(p50("pipes_file")), base(med(r["b_dump_file"]), "--dump-dom file://"),
         pb.ratio(p50("pipes_file"), med(r["b_dump_file"])), "-", "-"),
        ("  via termd - over pipes, median of %d pairs" % len(share), "%.2f ms" % (med(share) * 1000),
         "%.2f ms (termd ping RTT p50)" % (p50("ping") * 1000), "-", "-", "-"),
        ("browse + screenshot p50 (%d runs)" % len(r["shot"]), pb.ms(p50("shot")),
         base(med(r["b_shot"]), "--screenshot"), pb.ratio(p50("shot"), med(r["b_shot"])), "-", "-"),
        ("fill+click round trip p50 (%d runs)" % len(r["fill"]), pb.ms(p50("fill")),
         base(med(r["b_auto"]), "--dump-dom, page fills+clicks itself"), pb.ratio(p50("fill"), med(r["b_auto"])),
         "-", "-"),
        ("  the same over pipes (no termd)", pb.ms(p50("fill_pipes")), "-", "-", "-", "-"),
        ("termd VmRSS, plugin ready -> after the browsing", "%s -> %s" % (pb.mib(r["rss_termd_ready"]),
                                                                         pb.mib(r["rss_termd"])),
         "-", "-", "-", "-"),
        ("termd-browser VmRSS", pb.mib(r["prog_rss"]) if r["prog_rss"] else "-", "-", "-", "-", "-"),
        ("termd-browser + Chromium (%d procs) RSS sum" % r["chromium_n"], pb.mib(rss),
         pb.mib(brss) + " (chromium left open on the page)", pb.ratio(rss, brss), "-", "-"),
        ("termd-browser + Chromium PSS sum", pb.mib(pss), pb.mib(bpss) + " (the same)", pb.ratio(pss, bpss),
         "-", "-"),
    ]
    print()
    pb.table(rows)
    print()
    lst = lambda xs: " ".join("%.0f" % (x * 1000) for x in xs)  # noqa: E731
    print("runs (ms)  cold from start: %s (first setup %.0f) | from ready: %s" % (
        lst(r["cold"]), r["cold_setup"] * 1000, lst(r["first"])))
    print("           warm http via termd: %s" % lst(r["warm"]))
    print("           warm http over pipes: %s" % lst(r["pipes"]))
    print("           warm file:// via termd: %s" % lst(r["warm_file"]))
    print("           warm file:// over pipes: %s" % lst(r["pipes_file"]))
    print("           fill+click via termd: %s | over pipes: %s" % (lst(r["fill"]), lst(r["fill_pipes"])))
    print("           one-shots --dump-dom http, cold phase: %s | later: %s | file: %s | --screenshot: %s | "
          "auto fill+click: %s" % (lst(r["b_cold"]), lst(r["b_dump"]), lst(r["b_dump_file"]), lst(r["b_shot"]),
                                    lst(r["b_auto"])))


def main():
    exe = chromium()
    for f in (pb.TERMD_BIN, os.path.join(pb.PLUGIN_DIR, "browser", "termd-browser"), BROWSER_BIN):
        if not os.access(f, os.X_OK):
            print("bench_browser: %s missing (make all)" % f, file=sys.stderr)
            return 2
    if not exe:
        print("bench_browser: no chromium found (make deps installs it)", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    started = time.monotonic()
    pb.header("browser plugin bench (%s)" % exe)
    tmp = tempfile.mkdtemp(prefix="tdpb-", dir="/tmp")   # short: unix socket path limit
    www = os.path.join(tmp, "www")
    os.makedirs(www)
    with open(os.path.join(www, "index.html"), "w") as f:
        f.write(PAGE)
    with open(os.path.join(www, "auto.html"), "w") as f:
        f.write(AUTO)
    srv = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=www))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    base = "http://127.0.0.1:%d/" % srv.server_address[1]
    try:
        report(bench(tmp, exe, base + "index.html", "file://" + os.path.join(www, "index.html"),
                     base + "auto.html"))
        print("bench took %.0f s" % (time.monotonic() - started))
    finally:
        srv.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
