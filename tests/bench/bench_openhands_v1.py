"""bench_openhands_v1.py — `make bench`: OpenHands V1's
POST /api/bash/execute_bash_command of `true` on termd's api=openhands
listener next to a stand-in that does what the reference agent server
does (a Python HTTP server: `sh -c` through subprocess in a new session,
stdout/stderr read to the end, one BashOutput at the end, each event
written as a JSON file as V1 keeps them), alternating in blocks in one run,
one kept-alive connection each, p50/p99; then the latency from a
command's first output line (its own clock) to that line's BashOutput
arriving over termd's /sockets/bash-events (V1 holds output until the
command ends or 1 MiB, so there the latency is the rest of the command's
run; the stand-in's is printed as that). Env: TERMD_BIN, BENCH_OHV1_N
(round trips each, default 300), BENCH_OHV1_WS_N (default 30),
BENCH_OHV1_ARGS (more termd options, e.g. --cgroups off)."""

import http.client
import http.server
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "regress"))
import wsclient  # noqa: E402

TERMD_BIN = os.environ.get("TERMD_BIN") or os.path.join(REPO, "build", "termd")
N = int(os.environ.get("BENCH_OHV1_N", "300"))
WS_N = int(os.environ.get("BENCH_OHV1_WS_N", "30"))
BLOCK = 50
KEY = "bench-v1-key"
HOLD = 0.3   # the latency command runs this long after its first line


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class StandIn(http.server.BaseHTTPRequestHandler):
    """The reference's execute_bash_command, minus FastAPI."""
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True   # (as uvicorn: no 40 ms delayed-ACK stall)
    events_dir = None

    def log_message(self, *a):
        pass

    def _event(self, ev):
        name = "%s_%s_%s" % (ev["timestamp"], ev["kind"], ev["id"])
        with open(os.path.join(self.events_dir, name), "w") as f:
            json.dump(ev, f)

    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        now = lambda: datetime.now(timezone.utc).isoformat()   # noqa: E731
        cmd = {"kind": "BashCommand", "id": uuid.uuid4().hex, "timestamp": now(),
               "command": req["command"], "cwd": req.get("cwd"), "timeout": req.get("timeout", 300)}
        self._event(cmd)
        p = subprocess.Popen(req["command"], shell=True, cwd=req.get("cwd"),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)
        out, err = p.communicate(timeout=cmd["timeout"])
        ev = {"kind": "BashOutput", "id": uuid.uuid4().hex, "timestamp": now(),
              "command_id": cmd["id"], "order": 0, "exit_code": p.returncode,
              "stdout": out.decode(errors="replace") or None,
              "stderr": err.decode(errors="replace") or None}
        self._event(ev)
        body = json.dumps(ev).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def executor(port, headers):
    state = {"conn": http.client.HTTPConnection("127.0.0.1", port, timeout=60)}
    body = json.dumps({"command": "true"}).encode()
    h = dict(headers, **{"Content-Type": "application/json"})

    def once():
        for attempt in (0, 1):
            try:
                state["conn"].request("POST", "/api/bash/execute_bash_command", body, h)
                r = state["conn"].getresponse()
                ev = json.loads(r.read())
                break
            except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
                state["conn"].close()
                state["conn"] = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                if attempt:
                    raise
        if r.status != 200 or ev["exit_code"] != 0:
            raise RuntimeError("unexpected answer: %.300s" % ev)
    return once, state


def ws_latency(url, n):
    """first line (the command's clock) to its BashOutput over the socket"""
    s = wsclient.connect(url, "/sockets/bash-events?session_api_key=" + KEY, subprotocol=None,
                         timeout=30)
    lat = []
    try:
        for _ in range(n):
            s.send_text(json.dumps({"command": "python3 -c 'import time; print(time.time(), "
                                               "flush=True); time.sleep(%s)'" % HOLD}))
            while True:
                op, data = s.recv(30)
                now = time.time()
                e = json.loads(data)
                if e["kind"] == "BashOutput" and e.get("stdout"):
                    lat.append(now - float(e["stdout"].split()[0]))
                    break
            while True:   # its end, before the next one
                e = json.loads(s.recv(30)[1])
                if e["kind"] == "BashOutput" and e["exit_code"] is not None:
                    break
    finally:
        s.abort()
    return lat


def main():
    port = free_port()
    tmp = tempfile.mkdtemp(prefix="tdbench-ohv1-")
    log = open(os.path.join(tmp, "termd.log"), "wb")
    env = dict(os.environ, TERMD_TOKEN=KEY)
    p = subprocess.Popen([TERMD_BIN, "--listen", "127.0.0.1:%d,api=openhands" % port,
                          "--cwd", tmp] + os.environ.get("BENCH_OHV1_ARGS", "").split(), stdout=log, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL, start_new_session=True, env=env)
    StandIn.events_dir = tempfile.mkdtemp(prefix="tdbench-ohv1-events-")
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = "ws://127.0.0.1:%d" % port
        deadline = time.monotonic() + 30
        while True:
            try:
                if wsclient.http_request(url, "/alive", timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("termd did not start")
            time.sleep(0.05)
        td_once, td_state = executor(port, {"X-Session-API-Key": KEY})
        si_once, si_state = executor(srv.server_address[1], {})
        for _ in range(20):
            td_once()
            si_once()
        t_td, t_si = [], []
        while len(t_td) < N:
            for fn, acc in ((td_once, t_td), (si_once, t_si)):
                for _ in range(BLOCK):
                    t0 = time.perf_counter()
                    fn()
                    acc.append(time.perf_counter() - t0)
        print("OpenHands V1 execute_bash_command `true`, %d each, load %s" % (
            len(t_td), " ".join("%.2f" % x for x in os.getloadavg())))
        for name, t in (("termd", t_td), ("reference stand-in", t_si)):
            print("  %-20s p50 %7.0f us   p99 %7.0f us" % (name, pct(t, 50) * 1e6,
                                                          pct(t, 99) * 1e6))
        print("  ratio p50 %.2fx (stand-in / termd)" % (pct(t_si, 50) / pct(t_td, 50)))
        lat = ws_latency(url, WS_N)
        print("first output line -> its BashOutput on /sockets/bash-events, %d runs:" % len(lat))
        print("  %-20s p50 %7.1f ms   p99 %7.1f ms" % ("termd", pct(lat, 50) * 1e3,
                                                       pct(lat, 99) * 1e3))
        print("  %-20s at the command's end: >= %.0f ms here (V1 publishes output at exit "
              "or past 1 MiB)" % ("reference", HOLD * 1e3))
        td_state["conn"].close()
        si_state["conn"].close()
        return 0
    finally:
        srv.shutdown()
        p.terminate()
        p.wait(10)


if __name__ == "__main__":
    sys.exit(main())
