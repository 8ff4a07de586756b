"""bench_cgroups.py — `make bench`: what a cgroup per session costs (issue
35). Two termds in the same run, one with a cgroup per session (--cgroups
auto, --session-pids-max and --session-memory-max set, so limits are
written too) and one with --cgroups off; where a cgroup2 tree is
mounted, two more with --cgroups v2 forced (the process born in its cgroup by clone3, and with
clone3 taken as refused: fork, then join); samples rotate among them.
Measured through /events: `run true` in main (the answer reads the
session's cgroup for left_running and the OOM counters), session.open
alone, and a session's start to its first answer (session.open, then
`run true` in it: the shell started, joined its cgroup, showed a prompt),
back to back and after a pause, each closed again after. p50/p90/p99
and each one's p50 and p90 over --cgroups off's (the goal: 1.15 at
most). Env: TERMD_BIN, BENCH_CGROUPS_N (samples each, default 200 runs, 40 starts)."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "regress"))
import wsclient  # noqa: E402

TERMD_BIN = os.environ.get("TERMD_BIN") or os.path.join(REPO, "build", "termd")
N = int(os.environ.get("BENCH_CGROUPS_N", "200"))
NSTART = max(10, N // 5)


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


def line(name, ms):
    print("  %-52s p50 %8.3f ms   p90 %8.3f ms   p99 %8.3f ms   (n=%d)"
          % (name, pct(ms, 50), pct(ms, 90), pct(ms, 99), len(ms)))


class Daemon:
    def __init__(self, args, extra_env=None):
        self.dir = tempfile.mkdtemp(prefix="bench-cg-")
        self.sock = os.path.join(self.dir, "t.sock")
        self.log = open(os.path.join(self.dir, "termd.log"), "wb")
        env = {k: v for k, v in os.environ.items() if k not in ("TERMD_TOKEN", "PROMPT_COMMAND")}
        env["HOME"] = self.dir
        env.update(extra_env or {})
        self.p = subprocess.Popen([TERMD_BIN, "--listen", "unix:" + self.sock, "--cwd", self.dir]
                                  + args, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                  start_new_session=True)
        url = "unix:" + self.sock
        deadline = time.monotonic() + 30
        while True:
            try:
                st, _, body = wsclient.http_request(url, "/healthz", timeout=2)
                if st == 200:
                    self.health = json.loads(body)
                    break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self.ev = wsclient.Events(url)
        self.call("run", {"command": "true"})   # main's shell is up

    def call(self, action, args):
        o = self.ev.call(action, args, timeout=60)
        if o.get("observation") == "error":
            raise RuntimeError("%s: %r" % (action, o))
        return o

    def stop(self):
        self.ev.close()
        self.p.terminate()
        self.p.wait(10)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def timed(f):
    t0 = time.perf_counter()
    f()
    return (time.perf_counter() - t0) * 1000


def has_cgroup2():
    with open("/proc/self/mountinfo") as f:
        return any(l.partition(" - ")[2].startswith("cgroup2 ") for l in f)


def main():
    ds = [("on", Daemon(["--cgroups", "auto", "--session-pids-max", "1000",
                         "--session-memory-max", "1G"]))]
    if has_cgroup2():
        # v2 forced (where the unified tree has no controllers, as on a v1
        # host: no limits, the placement only): born in the cgroup by
        # clone3, and with clone3 taken as refused (fork, then join)
        ds.append(("v2", Daemon(["--cgroups", "v2"])))
        ds.append(("v2fork", Daemon(["--cgroups", "v2"], {"TERMD_TEST_NO_CLONE3": "1"})))
    ds.append(("off", Daemon(["--cgroups", "off"])))
    started = list(ds)
    try:
        on = ds[0][1]
        if not on.health.get("cgroups"):
            print("bench_cgroups: this termd uses no cgroups here (not root, read-only?): "
                  "both columns measure the same thing")
        ds = [(k, d) for k, d in ds if k in ("on", "off") or d.health.get("cgroups") == "v2"]
        res = {k: {"run": [], "open": [], "start": [], "cold": []} for k, _ in ds}
        for _ in range(20):   # warm up
            for _, d in ds:
                d.call("run", {"command": "true"})
        for i in range(N):
            for k, d in ds[i % len(ds):] + ds[:i % len(ds)]:   # each first in turn
                res[k]["run"].append(timed(lambda: d.call("run", {"command": "true"})))
        for i in range(NSTART):
            for k, d in ds[i % len(ds):] + ds[:i % len(ds)]:
                name = "b%d" % i
                res[k]["open"].append(timed(lambda: d.call("session.open", {"name": name})))
                d.call("session.close", {"name": name})
                for what, pause in (("start", 0), ("cold", 0.3)):
                    # cold: after a pause, as sessions are opened in use (on
                    # cgroup v1 the first move into a cgroup after a quiet
                    # spell waits for an RCU grace period, in the new process)
                    time.sleep(pause)
                    name = "%s%d" % (what, i)

                    def start():
                        d.call("session.open", {"name": name})
                        d.call("run", {"command": "true", "session": name})
                    res[k][what].append(timed(start))
                    d.call("session.close", {"name": name})
        label_of = {"on": "cgroups (%s)" % (on.health.get("cgroups") or "none"),
                    "v2": "cgroups v2, clone3 into the cgroup",
                    "v2fork": "cgroups v2, fork then join",
                    "off": "--cgroups off"}
        print("bench_cgroups: a cgroup per session next to --cgroups off, same run "
              "(%s)" % ", ".join(label_of[k] for k, _ in ds))
        for what, label in (("run", "run true in main"), ("open", "session.open"),
                            ("start", "session start to its first answer"),
                            ("cold", "the same after a 0.3 s pause")):
            for k, _ in ds:
                line("%s, %s" % (label, label_of[k]), res[k][what])
            for k, _ in ds:
                if k == "off":
                    continue
                r = [pct(res[k][what], p) / pct(res["off"][what], p) for p in (50, 90)]
                print("  %-52s x%.2f (p50)  x%.2f (p90)%s"
                      % (label + ": " + label_of[k], r[0], r[1],
                         "" if max(r) <= 1.15 else "   OVER 1.15"))
    finally:
        for _, d in started:
            d.stop()


if __name__ == "__main__":
    main()
