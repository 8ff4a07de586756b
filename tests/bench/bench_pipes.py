"""bench_pipes.py — `make bench`: pipe sessions (session.open kind "pipe").
Start to end of `exec /bin/true` as a pipe session and as a pty session
through /events (session.open → session.exit), next to the same command
run by `subprocess.run(["/bin/bash", "-c", …])` in this process; and a
pipe session's output throughput (`head -c 32 MiB` of text to stdout, read
as session.output events by a subscriber) next to the same bytes through
a plain pipe into this process. All in one run, p50/p99. Env: TERMD_BIN,
BENCH_PIPES_N (starts each, default 100)."""

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
N = int(os.environ.get("BENCH_PIPES_N", "100"))
FLOOD = 32 << 20
FLOOD_CMD = "yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c %d" % FLOOD


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


def line(name, ms, unit="ms"):
    print("  %-52s p50 %8.2f %s   p99 %8.2f %s   (n=%d)"
          % (name, pct(ms, 50), unit, pct(ms, 99), unit, len(ms)))


def start_to_exit(ev, name, kind):
    args = {"name": name, "command": "exec /bin/true"}
    if kind:
        args["kind"] = kind
    t0 = time.perf_counter()
    ev.send_action("session.open", args)
    while True:
        o = ev.recv_obs(60)
        if o["observation"] == "session.exit" and o["extras"]["name"] == name:
            break
    dt = (time.perf_counter() - t0) * 1000
    ev.call("session.close", {"name": name})
    return dt


def flood_termd(ev, name):
    t0 = time.perf_counter()
    ev.send_action("session.open", {"name": name, "kind": "pipe", "command": FLOOD_CMD})
    got = 0
    while True:
        o = ev.recv_obs(120)
        x = o.get("extras") or {}
        if o["observation"] == "session.output" and x.get("session") == name:
            got += x["bytes"]
        if o["observation"] == "session.exit" and x.get("name") == name:
            break
    dt = time.perf_counter() - t0
    assert got == FLOOD, got
    ev.call("session.close", {"name": name})
    return dt


def flood_pipe():
    t0 = time.perf_counter()
    p = subprocess.Popen(["/bin/sh", "-c", FLOOD_CMD], stdout=subprocess.PIPE)
    got = 0
    while True:
        b = p.stdout.read1(65536)
        if not b:
            break
        got += len(b)
    p.wait()
    assert got == FLOOD, got
    return time.perf_counter() - t0


def main():
    tmp = tempfile.mkdtemp(prefix="tdbench-pipes-", dir="/tmp")
    home = os.path.join(tmp, "home")
    os.makedirs(home)
    sock = os.path.join(tmp, "s.sock")
    env = {k: v for k, v in os.environ.items() if k not in ("TERMD_TOKEN", "ENV", "BASH_ENV")}
    env["HOME"] = home
    td = subprocess.Popen([TERMD_BIN, "--listen", "unix:" + sock, "--cwd", home],
                          env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(sock) and time.monotonic() < deadline:
            time.sleep(0.05)
        ev = wsclient.Events("unix:" + sock)
        ev.call("subscribe", {})
        pipe, pty, bare = [], [], []
        for i in range(N + 5):   # the first 5 warm up
            a = start_to_exit(ev, "p%d" % i, "pipe")
            b = start_to_exit(ev, "t%d" % i, None)
            t0 = time.perf_counter()
            subprocess.run(["/bin/bash", "-c", "exec /bin/true"], env=env)
            c = (time.perf_counter() - t0) * 1000
            if i >= 5:
                pipe.append(a)
                pty.append(b)
                bare.append(c)
        fl_td, fl_pipe = [], []
        for i in range(5):
            fl_td.append(flood_termd(ev, "f%d" % i))
            fl_pipe.append(flood_pipe())
        print("pipe sessions (termd %s, %d cores, load %s; baselines in this same run):"
              % (TERMD_BIN, os.cpu_count(), " ".join("%.2f" % x for x in os.getloadavg())))
        line("pipe session `exec /bin/true`, open to exit", pipe)
        line("pty session `exec /bin/true`, open to exit", pty)
        line("baseline: subprocess.run(bash -c 'exec /bin/true')", bare)
        mib = FLOOD / float(1 << 20)
        print("  %-52s median %6.0f MiB/s (%.2f s)   baseline: a plain pipe %6.0f MiB/s (%.2f s)"
              % ("%d MiB to stdout as session.output events" % mib,
                 mib / pct(fl_td, 50), pct(fl_td, 50), mib / pct(fl_pipe, 50), pct(fl_pipe, 50)))
        ev.close()
    finally:
        td.terminate()
        td.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
