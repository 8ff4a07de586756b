"""bench_openhands.py — `make bench`: `run true` through OpenHands'
POST /execute_action (the exact body OpenHands sends, with its large
tool_call_metadata and llm_metrics; one kept-alive HTTP connection, as its
httpx client) next to the same command over termd's own /events, both from
Python, alternating in blocks in one termd, p50/p99 of each. Env: TERMD_BIN,
BENCH_OH_N (round trips each, default 500)."""

import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "regress"))
import wsclient  # noqa: E402

TERMD_BIN = os.environ.get("TERMD_BIN") or os.path.join(REPO, "build", "termd")
N = int(os.environ.get("BENCH_OH_N", "500"))
BLOCK = 50
ENVELOPE = json.load(open(os.path.join(REPO, "tests", "regress", "openhands", "envelope.json")))


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


def main():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    tmp = tempfile.mkdtemp(prefix="tdbench-oh-")
    log = open(os.path.join(tmp, "termd.log"), "wb")
    p = subprocess.Popen([TERMD_BIN, "--listen", "127.0.0.1:%d" % port, "--cwd", tmp],
                         stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         start_new_session=True)
    try:
        url = "ws://127.0.0.1:%d" % port
        deadline = time.monotonic() + 30
        while True:
            try:
                if wsclient.http_request(url, "/healthz", timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("termd did not start")
            time.sleep(0.05)
        ev = wsclient.Events(url)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        body = dict(ENVELOPE)
        body["args"] = {"command": "true", "is_input": False, "thought": "", "blocking": False,
                        "is_static": False, "cwd": None, "hidden": False,
                        "confirmation_state": "confirmed", "security_risk": -1}
        payload = json.dumps({"action": body}).encode()

        def oh_once():
            nonlocal conn
            try:
                conn.request("POST", "/execute_action", payload,
                             {"Content-Type": "application/json"})
                r = conn.getresponse()
            except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
                # idle over lws's keep-alive time (5 s, as uvicorn's): a new
                # connection, as httpx opens one
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                conn.request("POST", "/execute_action", payload,
                             {"Content-Type": "application/json"})
                r = conn.getresponse()
            obs = json.loads(r.read())
            if r.status != 200 or obs["extras"]["metadata"]["exit_code"] != 0:
                raise RuntimeError("unexpected answer: %.300s" % obs)

        def ev_once():
            obs = ev.call("run", {"command": "true"})
            if obs["extras"]["exit_code"] != 0:
                raise RuntimeError("unexpected answer: %.300s" % obs)

        for _ in range(20):
            oh_once()
            ev_once()
        t_oh, t_ev = [], []
        while len(t_oh) < N:
            for fn, acc in ((oh_once, t_oh), (ev_once, t_ev)):
                for _ in range(BLOCK):
                    t0 = time.perf_counter()
                    fn()
                    acc.append(time.perf_counter() - t0)
        print("OpenHands /execute_action vs /events, `run true`, %d each, %d KB request body, "
              "load %s" % (len(t_oh), len(payload) // 1024,
                           " ".join("%.2f" % x for x in os.getloadavg())))
        for name, t in (("POST /execute_action", t_oh), ("/events run", t_ev)):
            print("  %-22s p50 %7.0f us   p99 %7.0f us" % (name, pct(t, 50) * 1e6, pct(t, 99) * 1e6))
        print("  ratio p50 %.2fx" % (pct(t_oh, 50) / pct(t_ev, 50)))
        ev.close()
        conn.close()
        return 0
    finally:
        p.terminate()
        p.wait(10)


if __name__ == "__main__":
    sys.exit(main())
