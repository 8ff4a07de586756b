"""plugbench.py — what the plugin benchmarks (bench_jupyter.py, bench_browser.py) share: a private termd
with --plugins on a unix socket (its whole process tree ended afterwards), /events through
tests/regress/wsclient.py, process memory from /proc, percentiles and the figure table."""

import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "regress"))
sys.path.insert(0, HERE)

import wsclient  # noqa: E402
from bench import all_pids, clean_env, kill_sids, proc_ids, proc_status, table  # noqa: E402,F401 (table: re-exported)

TERMD_BIN = os.path.abspath(os.environ.get("TERMD_BIN") or os.path.join(REPO, "build", "termd"))
PLUGIN_DIR = os.path.abspath(os.environ.get("TERMD_PLUGIN_DIR") or
                             os.path.join(os.path.dirname(TERMD_BIN), "plugins"))
PY = "/usr/bin/python3"


# ---------------------------------------------------------------- processes

def descendants(root):
    """Every live process below root (children, their children, ...)."""
    kids = {}
    for p in all_pids():
        ids = proc_ids(p)
        if ids:
            kids.setdefault(ids[0], []).append(p)
    out, todo = [], [root]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def mem_kb(pids):
    """(RSS sum, PSS sum) in kB over pids, from smaps_rollup (gone pids count 0)."""
    rss = pss = 0
    for pid in pids:
        try:
            with open("/proc/%d/smaps_rollup" % pid) as f:
                for line in f:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1])
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1])
        except (OSError, ValueError):
            pass
    return rss, pss


def settle_rss(pid, max_s=3.0, every_s=0.2):
    """VmRSS (kB) of pid once two readings every_s apart agree (or after max_s)."""
    prev, deadline = None, time.monotonic() + max_s
    while True:
        time.sleep(every_s)
        cur = proc_status(pid, "VmRSS")
        if cur is None or cur == prev or time.monotonic() >= deadline:
            return cur
        prev = cur


def settle_mem(pids_fn, max_s=10.0, every_s=0.25):
    """(RSS, PSS) kB over pids_fn() once two readings agree within 1% (or after max_s)."""
    prev, deadline = None, time.monotonic() + max_s
    while True:
        time.sleep(every_s)
        cur = mem_kb(pids_fn())
        if (prev and abs(cur[1] - prev[1]) <= 0.01 * max(prev[1], 1)) or time.monotonic() >= deadline:
            return cur
        prev = cur


# ---------------------------------------------------------------- termd

class PluginTermd:
    """A private termd on a unix socket in tmp, with --plugins/--plugin-dir/--state-dir.
    t_start: time.monotonic() just before it was started."""

    def __init__(self, tmp, plugins, state_dir, args=(), env=None):
        self.tmp = tmp
        self.home = os.path.join(tmp, "home")
        self.tmpdir = os.path.join(tmp, "tmp")
        os.makedirs(self.home, exist_ok=True)
        os.makedirs(self.tmpdir, exist_ok=True)
        self.sock = os.path.join(tmp, "termd.sock")
        self.url = "unix:" + self.sock
        self.log_path = os.path.join(tmp, "termd.log")
        self.argv = [TERMD_BIN, "--listen", self.url, "--cwd", self.home, "--plugins", plugins,
                     "--plugin-dir", PLUGIN_DIR, "--state-dir", state_dir] + list(args)
        self.env = clean_env(self.home, TMPDIR=self.tmpdir, TERMD_JUPYTER_PYTHON=PY, **(env or {}))
        self.proc = None
        self.t_start = None
        self.tree = set()

    def start(self):
        """Start termd and return an /events connection as soon as the socket answers."""
        log = open(self.log_path, "wb")
        self.t_start = time.monotonic()
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                     cwd=self.home, env=self.env, start_new_session=True)
        log.close()
        deadline = self.t_start + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("termd exited during start-up (%s):\n%s" % (self.proc.returncode, self.log_tail()))
            if os.path.exists(self.sock):
                try:
                    return wsclient.Events(self.url, timeout=30)
                except (OSError, wsclient.HandshakeError, wsclient.ConnectionClosed):
                    pass
            time.sleep(0.002)
        raise RuntimeError("termd did not come up within 30 s:\n" + self.log_tail())

    def events(self):
        return wsclient.Events(self.url, timeout=30)

    @property
    def pid(self):
        return self.proc.pid

    def rss(self):
        return proc_status(self.proc.pid, "VmRSS")

    def remember_tree(self):
        """Record termd's process tree now (plugin programs, kernels, Chromium) so stop() can end leftovers."""
        self.tree.update(descendants(self.proc.pid))

    def log_tail(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-30:])
        except OSError:
            return ""

    def stop(self):
        """SIGTERM termd (SIGKILL after 10 s), then end anything of its tree still alive. Returns the
        number of leftovers killed."""
        if self.proc is None or self.proc.poll() is not None:
            return 0
        self.remember_tree()
        sids = {self.proc.pid}
        for p in self.tree:
            ids = proc_ids(p)
            if ids:
                sids.add(ids[2])
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        n = kill_sids(sids, grace_s=3.0)
        for p in self.tree:
            if proc_ids(p):
                try:
                    os.kill(p, signal.SIGKILL)
                    n += 1
                except OSError:
                    pass
        return n


def wait_ready(ev, name, timeout=120):
    """Subscribe and wait for plugin `name` to be ready (plugin.list first: it may be already)."""
    ev.call("subscribe", {"since": 0})
    deadline = time.monotonic() + timeout
    while True:
        lst = ev.call("plugin.list", timeout=30)
        for p in lst["extras"]["plugins"]:
            if p["name"] == name and p["state"] == "ready":
                return
            if p["name"] == name and p["state"] == "failed":
                raise RuntimeError("plugin %s failed: %s" % (name, p.get("error")))
        if time.monotonic() > deadline:
            raise RuntimeError("plugin %s not ready within %d s" % (name, timeout))
        try:
            ev.wait_for(lambda o: o.get("observation") == "plugin.status" and o["extras"].get("name") == name,
                        timeout=1.0)
        except TimeoutError:
            pass


# ---------------------------------------------------------------- numbers

def pctl(values, p):
    v = sorted(values)
    k = max(0, min(len(v) - 1, int(p / 100.0 * len(v) + 0.999999) - 1))
    return v[k]


def ms(s):
    return "%.1f ms" % (s * 1000.0) if s < 10 else "%.2f s" % s


def mib(kb):
    return "%.1f MiB" % (kb / 1024.0)


def ratio(a, b):
    return "%.2fx" % (a / b) if a is not None and b else "-"


def met(ok):
    return "-" if ok is None else ("yes" if ok else "NO")


def header(what):
    print("%s: termd %s, plugins %s, pid %d, %d cores, load %s" % (
        what, TERMD_BIN, PLUGIN_DIR, os.getpid(), os.cpu_count(), " ".join("%.2f" % x for x in os.getloadavg())))
    print("(baselines measured in this same run; the machine is shared, so read the ratios)\n")


def step(text):
    sys.stdout.write(text + " ... ")
    sys.stdout.flush()
