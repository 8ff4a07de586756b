"""e2b's envd API on termd's listener (PROTOCOL.md §10, reference/e2b-envd.md):
the published e2b SDK (tests/e2b, pinned, installed by `make deps`) drives
termd unchanged in its debug mode through tests/e2b/drive.mjs — commands
(run, exit codes, CommandExitError, envs, cwd, background, wait, kill,
list, stdin, connect by pid), a client that disconnects and reconnects
without losing output, PTYs (create, input, resize, kill, exit), files
(read/write text and bytes, uploads, list with depth, exists, info, make
dir, rename, remove, errors) — and the Connect wire from Python: auth,
envelopes, end-of-stream, error codes and statuses, keepalives,
Connect-Timeout-Ms, and hostile input (malformed envelopes, lengths past
--max-frame, unknown methods, wrong content types, a stream client that
never reads)."""

import base64
import http.client
import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import TERMD_BIN
import routes
import wsclient
from tdtest import free_port, upgrade, wait_until, with_few_fds

ROOT = Path(__file__).resolve().parents[4]
# make test-e2b-latest: a scratch copy with the newest published SDK
E2B = Path(os.environ.get("TERMD_E2B_DIR") or ROOT / "tests" / "e2b")
TOKEN = "envd-test-token-0123456789"

NODE = shutil.which("node")


def _node_major():
    try:
        v = subprocess.run([NODE, "--version"], capture_output=True, text=True, timeout=30).stdout
        return int(v.strip().lstrip("v").split(".")[0])
    except (OSError, ValueError, subprocess.SubprocessError):
        return 0


NODE_MAJOR = _node_major() if NODE else 0


def drive(td, scenario, token=TOKEN, extra_env=None, timeout=120):
    """Run one scenario of drive.mjs against td; its JSON observations."""
    if not NODE:
        pytest.skip("node is not installed: the e2b SDK cannot run here")
    if NODE_MAJOR < 20:
        # e2b 2.45's undici 7 needs Node >= 20.18 (Debian 12's nodejs is 18)
        pytest.skip("node %d is too old for the e2b SDK (needs 20 or later)" % NODE_MAJOR)
    if not (E2B / "node_modules" / "e2b").is_dir():
        if not shutil.which("npm"):
            pytest.skip("npm is not installed: `make deps` could not fetch the e2b SDK")
        pytest.fail("the e2b SDK is not installed: run `make deps` (npm ci in tests/e2b)")
    env = dict(os.environ)
    env.update({"E2B_DEBUG": "true", "E2B_SANDBOX_URL": "http://" + td.url.split("://", 1)[1]})
    env.pop("TERMD_TOKEN", None)
    if token:
        env["TERMD_TOKEN"] = token
    env.update(extra_env or {})
    p = subprocess.run([NODE, str(E2B / "drive.mjs"), scenario], cwd=str(E2B), env=env,
                       capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    assert lines, "drive.mjs %s printed nothing\nstdout: %s\nstderr: %s" % (
        scenario, p.stdout[-2000:], p.stderr[-4000:])
    out = json.loads(lines[-1])
    assert "fatal" not in out, "drive.mjs %s failed: %s\n%s" % (scenario, out["fatal"],
                                                                 out.get("stack"))
    assert p.returncode == 0, p.stderr[-4000:]
    return out


def start(termd_factory, token=TOKEN, args=()):
    return termd_factory(token=token, tcp=True, args=args)


def port_of(td):
    return int(td.url.rsplit(":", 1)[1])


# ------------------------------------------------------------ the wire

def request(td, method, path, body=b"", headers=None, token=TOKEN, timeout=30):
    """One HTTP request on a fresh connection: (status, headers, body)."""
    c = http.client.HTTPConnection("127.0.0.1", port_of(td), timeout=timeout)
    h = {}
    if token:
        h["X-Access-Token"] = token
    h.update(headers or {})
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    hdrs = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    return r.status, hdrs, data


def unary(td, service_method, msg, token=TOKEN, headers=None):
    h = {"Content-Type": "application/json", "Connect-Protocol-Version": "1"}
    h.update(headers or {})
    status, hdrs, body = request(td, "POST", "/" + service_method, json.dumps(msg).encode(), h,
                                 token=token)
    return status, hdrs, json.loads(body) if body else None


def envelope(msg, flags=0):
    data = msg if isinstance(msg, bytes) else json.dumps(msg).encode()
    return struct.pack(">BI", flags, len(data)) + data


def parse_envelopes(data):
    """[(flags, message)], every envelope complete."""
    out, off = [], 0
    while off < len(data):
        assert len(data) - off >= 5, "a cut envelope header: %r" % data[off:]
        flags, n = struct.unpack(">BI", data[off:off + 5])
        body = data[off + 5:off + 5 + n]
        assert len(body) == n, "a cut envelope"
        out.append((flags, json.loads(body)))
        off += 5 + n
    return out


def stream(td, service_method, msg, headers=None, raw=None, token=TOKEN, timeout=30):
    """A whole server stream: (status, content type, [(flags, message)])."""
    h = {"Content-Type": "application/connect+json", "Connect-Protocol-Version": "1"}
    h.update(headers or {})
    status, hdrs, body = request(td, "POST", "/" + service_method,
                                 raw if raw is not None else envelope(msg), h, token=token,
                                 timeout=timeout)
    return status, hdrs.get("content-type"), parse_envelopes(body) if status == 200 else body


def end_error(envs):
    """The end-of-stream message's error (None for a clean end); it is last
    and the only one flagged 0x02."""
    assert envs, "no envelopes"
    flags, last = envs[-1]
    assert flags == 2, envs
    assert all(f == 0 for f, _ in envs[:-1]), envs
    return last.get("error")


def events_of(envs):
    return [m["event"] for f, m in envs if f == 0]


def start_cmd(cmd, **kw):
    m = {"process": {"cmd": "/bin/bash", "args": ["-l", "-c", cmd]}}
    m.update(kw)
    return m


def b64(s):
    return base64.b64encode(s if isinstance(s, bytes) else s.encode()).decode()


def unb64(s):
    return base64.b64decode(s)


def stdout_of(evs, key="stdout"):
    return b"".join(unb64(e["data"][key]) for e in evs if "data" in e and key in e["data"])


# ================================================================== SDK

def test_sdk_commands(termd_factory):
    td = start(termd_factory)
    ev = td.events()
    ev.call("subscribe", {})
    o = drive(td, "commands")
    assert o["run"] == {"exitCode": 0, "stdout": "out\ntail", "stderr": "err\n"}
    assert o["exit3"]["name"] == "CommandExitError"
    assert o["exit3"]["exitCode"] == 3 and o["exit3"]["stdout"] == "before\n"
    assert o["envs"]["stdout"] == "bar baz\n"
    assert o["envsLeak"]["stdout"] == "[]\n"           # envs of one command do not leak
    assert o["cwd"]["stdout"] == "/tmp\n"
    assert o["home"]["stdout"] == str(td.home) + "\n"  # default cwd: the home
    assert o["badCwd"]["name"] == "InvalidArgumentError"
    assert o["onStdout"]["stdout"] == "1\n2\n3\n"
    assert o["chunks"] == ["1\n", "2\n", "3\n"]         # streamed as printed
    assert o["bgWait"] == {"exitCode": 0, "stdout": "bg-done\n", "stderr": ""}
    assert {"pid": o["longPid"], "cmd": "/bin/bash", "args": ["-l", "-c", "sleep 60"]} in o["list"]
    assert o["kill"] is True
    assert o["killWait"]["name"] == "CommandExitError" and o["killWait"]["exitCode"] == -1
    assert "No such process" in o["aliveAfterKill"]["stderr"]   # really gone: kill -0 fails
    assert o["killUnknown"] is False
    assert o["longPid"] not in o["listAfter"]
    assert o["cat"] == {"exitCode": 0, "stdout": "line one\nline two\n", "stderr": ""}
    assert o["noStdin"]["stdout"] == "rc=0\n"           # stdin closed: cat ends at once
    assert o["sendUnknown"]["name"] == "NotFoundError"
    assert o["connectWait"]["name"] == "CommandExitError"
    assert o["connectWait"]["exitCode"] == 4 and o["connectWait"]["stdout"] == "late\n"
    assert o["connectUnknown"]["name"] == "NotFoundError"
    assert o["bytes"]["stdout"] == "\u00e9\u0000z"
    # every process was a termd session, announced on the event stream
    pids = {s["pid"] for s in sessions_opened(ev) if s["name"].startswith("e2b-")}
    assert o["longPid"] in pids and o["bgPid"] in pids


def sessions_opened(ev):
    """The extras of the session.open events ev receives until it has been
    quiet for 0.5 s (10 s at the most)."""
    opened = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            m = ev.recv_obs(timeout=0.5)
        except Exception:
            break
        if m.get("observation") == "session.open":
            opened.append(m["extras"])
    return opened


def test_sdk_create_in_debug_mode_without_token(termd_factory):
    """Sandbox.create() unchanged (no token) against a termd without one."""
    td = termd_factory(tcp=True)
    o = drive(td, "create", token=None)
    assert o == {"sandboxId": "debug_sandbox_id", "stdout": "created\n"}


def test_sdk_reconnect_loses_nothing(termd_factory):
    td = start(termd_factory)
    o = drive(td, "reconnect", extra_env={"TERMD_GATE": str(td.home / "reconnect-gate")})
    lines = ["line%d\n" % i for i in range(1, 7)]
    assert o["exitCode"] == 0
    assert o["first"] + o["second"] == "".join(lines), o
    assert o["first"] and o["second"].startswith("line")  # some before, the rest after


def test_sdk_pty(termd_factory):
    td = start(termd_factory)
    ev = td.events()
    ev.call("subscribe", {})
    o = drive(td, "pty")
    assert o["cols80"] and o["cols123"], o["out"][-400:]
    assert o["pid"] in o["list"]
    assert o["end"]["exitCode"] == 0
    assert o["killed"] is True
    assert o["killedWait"]["name"] == "CommandExitError"
    sessions = sessions_opened(ev)
    # the PTY was a termd session of its own, as wide as asked
    s = [x for x in sessions if x["pid"] == o["pid"]]
    assert s and s[0]["cols"] == 80 and s[0]["rows"] == 24


def test_sdk_files(termd_factory, tmp_path):
    td = start(termd_factory)
    base = tmp_path / "files"
    base.mkdir()
    o = drive(td, "files", extra_env={"E2B_TEST_DIR": str(base)})
    assert o["write"] == {"path": str(base / "dir/a.txt"), "name": "a.txt", "type": "file"}
    assert o["read"] == "hello files"
    assert o["bytesSame"] and o["bigSame"]
    assert o["empty"] == ""
    assert o["relative"]["path"] == str(td.home / "rel/r.txt")
    assert (td.home / "rel/r.txt").read_text() == "relative"
    assert o["exists"] is True and o["existsNot"] is False
    info = o["info"]
    st = os.stat(base / "moved/b.txt")
    assert info["name"] == "a.txt" and info["type"] == "file" and info["size"] == 11
    assert info["mode"] == 0o644 and info["permissions"] == "-rw-r--r--"
    assert info["path"] == str(base / "dir/a.txt")
    assert info["modifiedTime"].startswith(time.strftime("%Y-%m-%dT", time.gmtime(st.st_mtime)))
    assert o["infoMissing"]["name"] == "FileNotFoundError"
    assert o["readMissing"]["name"] == "FileNotFoundError"
    assert o["makeDir"] is True and o["makeDirAgain"] is False
    assert [x[0] for x in o["list1"]] == ["big.bin", "dir", "empty.txt", "made"]
    assert ["dir", "dir", str(base / "dir")] in o["list1"]
    assert o["list3"] == [str(base / p) for p in (
        "big.bin", "dir", "dir/a.txt", "dir/bytes.bin", "empty.txt", "made", "made/deep",
        "made/deep/x.txt")]
    assert o["listFile"]["name"] == "InvalidArgumentError"
    assert o["rename"]["path"] == str(base / "moved/b.txt") and o["renamedOld"] is False
    assert o["renamedNew"] == "hello files"
    assert o["renameMissing"]["name"] == "FileNotFoundError"
    assert o["removed"] is False and not (base / "made").exists()
    assert o["removeMissing"] is None
    assert [f["path"] for f in o["multi"]] == [str(base / "m1.txt"), str(base / "m2.txt")]
    assert (base / "m2.txt").read_text() == "two"
    assert (base / "octet.txt").read_text() == "via octet-stream"
    assert oct(os.stat(base / "octet.txt").st_mode & 0o777) == "0o644"
    assert o["gzipSame"] and (base / "gz.txt").read_text() == "gzip both ways " * 1000


# ========================================================== the wire

def test_auth_health_envs(termd_factory):
    td = start(termd_factory)
    status, _, body = request(td, "GET", "/health", token=None)
    assert status == 204 and body == b""
    # every envd route (routes.py's table): none, a wrong token and termd's
    # own bearer are all unauthenticated; only /health is public
    (td.home / "hello.txt").write_text("hi\n")
    for r in routes.ROUTES:
        if r["door"] != "envd" or r["access"] == "public":
            continue
        r = routes.fill(r, home=str(td.home), cast="x.cast")
        for h in ({}, {"X-Access-Token": "wrong"}, {"Authorization": "Bearer " + TOKEN},
                  {"X-Access-Token": TOKEN[:-1]}):
            status, body = routes.request(td.url, r, h)
            assert status == 401, (routes.label(r), h, status, body[:200])
            assert json.loads(body)["code"] in ("unauthenticated", 401), (routes.label(r), body)
        status, body = routes.request(td.url, r, {"X-Access-Token": TOKEN})
        assert routes.admitted(r, status, body), (routes.label(r), status, body[:200])
    for tok in (None, "wrong"):
        status, _, m = unary(td, "filesystem.Filesystem/Stat", {"path": "/"}, token=tok)
        assert status == 401 and m["code"] == "unauthenticated"
        status, ctype, body = stream(td, "process.Process/Start", start_cmd("true"), token=tok)
        assert status == 401
        status, _, _ = request(td, "GET", "/files?path=/etc/hostname", token=tok)
        assert status == 401
    # termd's own credential forms are not envd's
    status, _, _ = unary(td, "filesystem.Filesystem/Stat", {"path": "/"}, token=None,
                         headers={"Authorization": "Bearer " + TOKEN})
    assert status == 401
    status, hdrs, body = request(td, "GET", "/envs")
    env = json.loads(body)
    assert status == 200 and env["HOME"] == str(td.home) and "TERMD_TOKEN" not in env
    status, _, m = unary(td, "filesystem.Filesystem/Stat", {"path": "/"})
    assert status == 200 and m["entry"]["type"] == "FILE_TYPE_DIRECTORY"
    assert m["entry"]["size"].isdigit()        # int64 as a string


def test_start_stream_shape_and_connect_by_tag(termd_factory):
    td = start(termd_factory)
    status, ctype, envs = stream(td, "process.Process/Start",
                                 start_cmd("echo o; echo e >&2; exit 7"))
    assert status == 200 and ctype.startswith("application/connect+json")
    assert end_error(envs) is None
    evs = events_of(envs)
    assert list(evs[0]) == ["start"] and evs[0]["start"]["pid"] > 0
    assert stdout_of(evs) == b"o\n" and stdout_of(evs, "stderr") == b"e\n"
    assert evs[-1] == {"end": {"exitCode": 7, "exited": True, "status": "exit status 7"}}
    # a tag names a process for Connect; output made while nobody listened comes first
    s = socket.create_connection(("127.0.0.1", port_of(td)))
    body = envelope(start_cmd("echo early; sleep 1; echo late", tag="t1"))
    s.sendall(("POST /process.Process/Start HTTP/1.1\r\nHost: x\r\nX-Access-Token: %s\r\n"
               "Content-Type: application/connect+json\r\nContent-Length: %d\r\n\r\n"
               % (TOKEN, len(body))).encode() + body)
    time.sleep(0.3)
    s.close()                                  # gone before "early" was read, perhaps
    status, _, envs = stream(td, "process.Process/Connect", {"process": {"tag": "t1"}})
    evs = events_of(envs)
    assert "start" in evs[0] and b"late\n" in stdout_of(evs)
    assert stdout_of(evs).count(b"early\n") <= 1
    assert evs[-1]["end"]["exitCode"] == 0 and end_error(envs) is None
    status, _, envs = stream(td, "process.Process/Connect", {"process": {"tag": "t1"}})
    assert end_error(envs)["code"] == "not_found"   # its end was seen: gone


def test_signal_list_update_close_stdin(termd_factory):
    td = start(termd_factory)
    s = socket.create_connection(("127.0.0.1", port_of(td)))
    body = envelope(start_cmd("cat; echo rc=$?", stdin=True))
    s.sendall(("POST /process.Process/Start HTTP/1.1\r\nHost: x\r\nX-Access-Token: %s\r\n"
               "Content-Type: application/connect+json\r\nContent-Length: %d\r\n\r\n"
               % (TOKEN, len(body))).encode() + body)
    deadline = time.monotonic() + 10
    pids = []
    while not pids and time.monotonic() < deadline:
        _, _, m = unary(td, "process.Process/List", {})
        pids = [p["pid"] for p in m["processes"]]
        time.sleep(0.05)
    pid = pids[0]
    status, _, m = unary(td, "process.Process/SendInput",
                         {"process": {"pid": pid}, "input": {"stdin": b64("abc\n")}})
    assert status == 200 and m == {}
    status, _, m = unary(td, "process.Process/Update",
                         {"process": {"pid": pid}, "pty": {"size": {"cols": 90, "rows": 20}}})
    assert status == 400 and m["code"] == "failed_precondition"   # not a PTY
    status, _, m = unary(td, "process.Process/SendInput",
                         {"process": {"pid": pid}, "input": {"stdin": "not base64!"}})
    assert status == 400 and m["code"] == "invalid_argument"
    status, _, m = unary(td, "process.Process/CloseStdin", {"process": {"pid": pid}})
    assert status == 200
    s.settimeout(10)
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    envs = parse_envelopes(data.split(b"\r\n\r\n", 1)[1])
    evs = events_of(envs)
    assert stdout_of(evs) == b"abc\nrc=0\n"
    assert evs[-1]["end"]["exitCode"] == 0
    status, _, m = unary(td, "process.Process/SendSignal",
                         {"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"})
    assert status == 404 and m["code"] == "not_found"
    status, _, m = unary(td, "process.Process/SendSignal",
                         {"process": {"pid": 1}, "signal": "SIGNAL_SIGHUP"})
    assert status == 404


def test_keepalive_and_connect_timeout(termd_factory):
    td = start(termd_factory)
    t0 = time.monotonic()
    status, _, envs = stream(td, "process.Process/Start", start_cmd("sleep 2.6; echo done"),
                             headers={"Keepalive-Ping-Interval": "1"})
    evs = events_of(envs)
    assert sum(1 for e in evs if "keepalive" in e) >= 2, evs
    assert stdout_of(evs) == b"done\n" and end_error(envs) is None
    t0 = time.monotonic()
    status, _, envs = stream(td, "process.Process/Start", start_cmd("sleep 30"),
                             headers={"Connect-Timeout-Ms": "400"})
    assert status == 200 and end_error(envs)["code"] == "deadline_exceeded"
    assert time.monotonic() - t0 < 5
    status, _, envs = stream(td, "process.Process/Start", start_cmd("true"),
                             headers={"Connect-Timeout-Ms": "soon"})
    assert end_error(envs)["code"] == "invalid_argument"


def test_hostile_envelopes(termd_factory):
    td = start(termd_factory, args=("--max-frame", "4096"))
    good = json.dumps(start_cmd("true")).encode()
    cases = {
        "short": b"\x00\x00\x00",
        "empty": b"",
        "length over the body": struct.pack(">BI", 0, len(good) + 10) + good,
        "length under the body": struct.pack(">BI", 0, len(good) - 3) + good,
        "two envelopes": envelope(good) + envelope(good),
        "unknown flags": struct.pack(">BI", 0x80, len(good)) + good,
        "not json": envelope(b"{nope"),
        "json array": envelope(b"[1,2]"),
        "end-stream flag from the client": envelope(good, flags=2),
    }
    for why, raw in cases.items():
        status, ctype, envs = stream(td, "process.Process/Start", None, raw=raw)
        assert status == 200, why
        assert len(envs) == 1, why
        assert end_error(envs)["code"] == "invalid_argument", why
    status, _, envs = stream(td, "process.Process/Start", None, raw=envelope(good, flags=1))
    assert end_error(envs)["code"] == "internal"          # compression: not offered
    # an envelope that says it is past --max-frame (the body itself is small)
    status, _, envs = stream(td, "process.Process/Start", None,
                             raw=struct.pack(">BI", 0, 1 << 30) + good)
    assert end_error(envs)["code"] == "resource_exhausted"
    # a body past --max-frame is refused before it is read
    status, _, body = request(td, "POST", "/process.Process/Start", b"\x00" * 5000,
                              {"Content-Type": "application/connect+json"})
    assert status == 413
    # and termd still works
    status, _, envs = stream(td, "process.Process/Start", start_cmd("echo ok"))
    assert stdout_of(events_of(envs)) == b"ok\n"


def test_unknown_methods_and_content_types(termd_factory):
    td = start(termd_factory)
    for path in ("process.Process/Nope", "filesystem.Filesystem/WatchDir2",
                 "process.Process/StreamInput", "process.Process/"):
        status, _, m = unary(td, path, {})
        assert status == 404 and m["code"] == "unimplemented", path
    status, _, _ = request(td, "GET", "/process.Process/List")
    assert status == 405
    for ctype in ("application/proto", "text/plain", "application/grpc", ""):
        status, hdrs, body = request(td, "POST", "/process.Process/List", b"{}",
                                     {"Content-Type": ctype})
        assert status == 415, ctype
    # a unary method asked for as a stream, and a stream as unary
    status, _, _ = request(td, "POST", "/process.Process/List", envelope({}),
                           {"Content-Type": "application/connect+json"})
    assert status == 415
    status, _, _ = request(td, "POST", "/process.Process/Start", b"{}",
                           {"Content-Type": "application/json"})
    assert status == 415
    status, _, m = unary(td, "process.Process/List", {}, headers={"Connect-Protocol-Version": "2"})
    assert status == 400 and m["code"] == "invalid_argument"
    status, _, body = request(td, "POST", "/filesystem.Filesystem/Stat", b"{not json",
                              {"Content-Type": "application/json"})
    assert status == 400 and json.loads(body)["code"] == "invalid_argument"
    status, _, m = unary(td, "filesystem.Filesystem/Stat", {"path": 7})
    assert status == 400 and m["code"] == "invalid_argument"
    status, _, m = unary(td, "process.Process/Start".replace("Start", "SendSignal"),
                         {"process": {}, "signal": "SIGNAL_SIGKILL"})
    assert status == 400 and m["code"] == "invalid_argument"
    status, _, m = unary(td, "filesystem.Filesystem/MakeDir", {"path": str(td.home)})
    assert status == 409 and m["code"] == "already_exists"
    status, _, m = unary(td, "filesystem.Filesystem/ListDir", {"path": "/no/such"})
    assert status == 404 and m["code"] == "not_found"


def vm_rss_kb(pid):
    for line in Path("/proc/%d/status" % pid).read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def test_stream_client_that_never_reads(termd_factory):
    """A client that starts a process printing 300 MB and never reads: termd
    keeps a bounded amount for it (holding the process, contract 1.4), then
    cuts its stream after --stream-stall; it stays healthy."""
    td = start(termd_factory, args=("--stream-stall", "2"))
    s = socket.create_connection(("127.0.0.1", port_of(td)))
    body = envelope(start_cmd("head -c 300000000 /dev/zero"))
    s.sendall(("POST /process.Process/Start HTTP/1.1\r\nHost: x\r\nX-Access-Token: %s\r\n"
               "Content-Type: application/connect+json\r\nContent-Length: %d\r\n\r\n"
               % (TOKEN, len(body))).encode() + body)
    peak = 0
    deadline = time.monotonic() + 60
    done = False
    while time.monotonic() < deadline:
        peak = max(peak, vm_rss_kb(td.proc.pid))
        _, _, m = unary(td, "process.Process/List", {})
        if not m["processes"]:
            done = True
            break
        time.sleep(0.2)
    assert done, "the process did not finish printing within 60 s"
    # (unbounded, termd grows to ~400 MB here; AddressSanitizer's shadow and
    # quarantine make any termd larger)
    asan = "libasan" in Path("/proc/%d/maps" % td.proc.pid).read_text()
    limit = (320 if asan else 100) * 1024
    assert peak < limit, "termd grew to %d KiB for a client that never reads" % peak
    status, _, _ = request(td, "GET", "/health", token=None)
    assert status == 204
    # the client's stream was ended (cut) on termd's side; it can read the end now
    s.settimeout(20)
    data = b""
    while True:
        try:
            chunk = s.recv(1 << 20)
        except socket.timeout:
            break
        if not chunk:
            break
        data += chunk
    s.close()
    envs = parse_envelopes(data.split(b"\r\n\r\n", 1)[1])
    assert end_error(envs)["code"] == "resource_exhausted"


def test_user_lookup_without_fds_is_not_no_such_user(termd_factory):
    """Issue 52's soak: with termd's descriptors exhausted for a moment,
    getpwuid (reading /etc/passwd) fails with EMFILE, and a Start was
    answered invalid_argument "no user named '?'". A lookup that could not
    be made says why and is resource_exhausted; the next one, with fds
    back, works."""
    td = start(termd_factory)
    answers, hits = with_few_fds(
        td.proc.pid, lambda extra: unary(td, "filesystem.Filesystem/Stat", {"path": "/"}),
        lambda a: isinstance(a, tuple) and "user" in json.dumps(a[2]))
    msgs = [a[2] for a in hits]
    assert msgs, "no answer came from the user lookup with fds exhausted: %r" % answers
    for m in msgs:
        assert m == {"code": "resource_exhausted",
                     "message": "cannot look up the user: Too many open files"}, msgs
    status, _, body = unary(td, "filesystem.Filesystem/Stat", {"path": "/"})
    assert status == 200, body


def test_start_after_an_upgrade_skips_the_names_still_in_use(termd_factory):
    """Issue 52's soak: after an upgrade in place the e2b-N count started
    again, so a Start while e2b-1 (of the termd before) still ran failed
    "a session named 'e2b-1' exists". A name in use is skipped."""
    td = start(termd_factory)
    held = http.client.HTTPConnection("127.0.0.1", port_of(td), timeout=30)
    held.request("POST", "/process.Process/Start", body=envelope(start_cmd("sleep 60")),
                 headers={"X-Access-Token": TOKEN, "Content-Type": "application/connect+json",
                          "Connect-Protocol-Version": "1"})
    assert held.getresponse().status == 200   # the stream goes on: the process runs
    ev = td.events()
    names = [s["name"] for s in ev.call("session.list")["extras"]["sessions"]]
    assert "e2b-1" in names, names
    _, ev, ans = upgrade(td, ev, cid="up-e2b")
    assert ans["extras"]["ok"] is True, ans
    status, _, envs = stream(td, "process.Process/Start", start_cmd("echo after"))
    assert status == 200, envs
    assert end_error(envs) is None, envs
    names = [s["name"] for s in ev.call("session.list")["extras"]["sessions"]]
    assert "e2b-1" in names, names   # the one of the termd before, still running
    out = b"".join(unb64(e["data"]["stdout"]) for e in events_of(envs) if "data" in e and "stdout" in e["data"])
    assert out == b"after\n", envs
    held.close()


class RawStream:
    """A server stream on its own socket, read as it comes."""

    def __init__(self, td, service_method, msg):
        self.s = socket.create_connection(("127.0.0.1", port_of(td)))
        self.s.settimeout(60)
        body = envelope(msg)
        self.s.sendall(("POST /%s HTTP/1.1\r\nHost: x\r\nX-Access-Token: %s\r\n"
                        "Content-Type: application/connect+json\r\nContent-Length: %d\r\n\r\n"
                        % (service_method, TOKEN, len(body))).encode() + body)
        self.data = b""
        self.closed = False

    def envs(self):
        """the whole envelopes so far"""
        if b"\r\n\r\n" not in self.data:
            return []
        body = self.data.split(b"\r\n\r\n", 1)[1]
        out, off = [], 0
        while len(body) - off >= 5:
            flags, n = struct.unpack(">BI", body[off:off + 5])
            if len(body) - off - 5 < n:
                break
            out.append((flags, json.loads(body[off + 5:off + 5 + n])))
            off += 5 + n
        return out

    def read_until(self, pred, what):
        while not pred(self.envs()):
            assert not self.closed, "the stream ended before %s: %r" % (what, self.envs())
            chunk = self.s.recv(65536)   # (the socket's timeout bounds the wait)
            if not chunk:
                self.closed = True
            self.data += chunk
        return self.envs()

    def close(self):
        self.s.close()


def e2b_sessions(ev):
    return [s["name"] for s in ev.call("session.list")["extras"]["sessions"]
            if s["name"].startswith("e2b-")]


def test_processes_go_across_an_upgrade_in_place(termd_factory, tmp_path):
    """Issue 52: the envd door's process table goes across an upgrade in
    place with the sessions. A process that prints a line a second and
    reads its stdin is still listed after it (pid, tag, cmd, args, cwd,
    envs as given), Connect by tag streams its further output and its end,
    SendInput reaches it; a PTY one is killed by SendSignal after it; both
    are closed when they end (no e2b-* session left). Was: List empty,
    Connect not_found, the sessions left for ever."""
    td = start(termd_factory)
    ev = td.events()
    script = ('i=0; while :; do i=$((i+1)); echo "line-$i $FOO"; '
              'if read -t 1 x; then echo "got-$x"; [ "$x" = stop ] && exit 3; fi; done')
    cfg = {"cmd": "/bin/bash", "args": ["-c", script], "cwd": str(tmp_path),
           "envs": {"FOO": "bar"}}
    first = RawStream(td, "process.Process/Start", {"process": cfg, "tag": "ticker",
                                                    "stdin": True})
    envs = first.read_until(lambda e: b"line-1 bar" in stdout_of(events_of(e)), "line-1")
    pid = events_of(envs)[0]["start"]["pid"]
    sleeper = RawStream(td, "process.Process/Start", start_cmd(
        "echo sleeper; exec sleep 600", tag="sleeper", pty={"size": {"cols": 80, "rows": 24}}))
    envs = sleeper.read_until(lambda e: b"sleeper" in stdout_of(events_of(e), "pty"), "sleeper")
    sleeper_pid = events_of(envs)[0]["start"]["pid"]
    assert sorted(e2b_sessions(ev)) == ["e2b-1", "e2b-2"]

    _, ev, ans = upgrade(td, ev, cid="up-e2b-table")
    assert ans["extras"]["ok"] is True, ans
    first.close()
    sleeper.close()
    _, _, m = unary(td, "process.Process/List", {})
    listed = {p["pid"]: p for p in m["processes"]}
    assert set(listed) == {pid, sleeper_pid}, m
    assert listed[pid]["tag"] == "ticker" and listed[pid]["config"] == cfg, m
    assert listed[sleeper_pid]["tag"] == "sleeper", m

    # Connect by tag: the lines printed since, then more as they come
    again = RawStream(td, "process.Process/Connect", {"process": {"tag": "ticker"}})
    envs = again.read_until(lambda e: len(events_of(e)) >= 2, "its output")
    evs = events_of(envs)
    assert evs[0] == {"start": {"pid": pid}}
    status, _, m = unary(td, "process.Process/SendInput",
                         {"process": {"pid": pid}, "input": {"stdin": b64("hello\n")}})
    assert status == 200 and m == {}
    again.read_until(lambda e: b"got-hello" in stdout_of(events_of(e)), "got-hello")
    status, _, m = unary(td, "process.Process/SendInput",
                         {"process": {"tag": "ticker"}, "input": {"stdin": b64("stop\n")}})
    assert status == 200 and m == {}
    envs = again.read_until(lambda e: e and e[-1][0] == 2, "its end")
    again.close()
    evs = events_of(envs)
    out = stdout_of(evs)
    assert b"got-stop\n" in out and out.count(b"got-hello\n") == 1, out
    assert evs[-1] == {"end": {"exitCode": 3, "exited": True, "status": "exit status 3"}}
    assert end_error(envs) is None

    # SendSignal by pid; Connect gets the end
    status, _, m = unary(td, "process.Process/SendSignal",
                         {"process": {"pid": sleeper_pid}, "signal": "SIGNAL_SIGKILL"})
    assert status == 200, m
    status, _, envs = stream(td, "process.Process/Connect", {"process": {"pid": sleeper_pid}})
    assert events_of(envs)[-1]["end"]["status"] == "signal: killed", envs

    wait_until(lambda: not e2b_sessions(ev), timeout=60, what="the e2b-* sessions closed")
    _, _, m = unary(td, "process.Process/List", {})
    assert m["processes"] == [], m
    status, _, envs = stream(td, "process.Process/Connect", {"process": {"tag": "ticker"}})
    assert end_error(envs)["code"] == "not_found"   # its end was seen: gone


def test_files_rest_errors(termd_factory, tmp_path):
    td = start(termd_factory)
    status, _, body = request(td, "GET", "/files?path=%s" % (tmp_path / "missing"))
    m = json.loads(body)
    assert status == 404 and m["code"] == 404 and "missing" in m["message"]
    status, _, body = request(td, "GET", "/files?path=%s" % tmp_path)
    assert status == 400
    status, _, body = request(td, "POST", "/files", b"data",
                              {"Content-Type": "application/octet-stream"})
    assert status == 400 and "path" in json.loads(body)["message"]
    status, _, body = request(td, "POST", "/files?path=%s" % (tmp_path / "g"), b"data",
                              {"Content-Type": "application/octet-stream",
                               "Content-Encoding": "br"})
    assert status == 400
    status, _, body = request(td, "POST", "/files?path=%s" % (tmp_path / "x"), b"x",
                              {"Content-Type": "multipart/form-data"})
    assert status == 400
    (tmp_path / "f.bin").write_bytes(bytes(range(256)))
    status, hdrs, body = request(td, "GET", "/files?path=%s" % (tmp_path / "f.bin"))
    assert status == 200 and body == bytes(range(256))
    assert hdrs["content-type"] == "application/octet-stream"


def test_sdk_watch_dir(termd_factory, tmp_path):
    td = start(termd_factory)
    base = tmp_path / "watched"
    base.mkdir()
    o = drive(td, "watch", extra_env={"E2B_TEST_DIR": str(base)})
    ev = o["events"]
    # in order per file; a new folder is watched too (recursive)
    for e in (["create", "a.txt"], ["write", "a.txt"], ["create", "sub"],
              ["create", "sub/deep.txt"], ["write", "sub/deep.txt"], ["rename", "a.txt"],
              ["create", "b.txt"], ["chmod", "b.txt"], ["remove", "b.txt"]):
        assert e in ev, (e, ev)
    assert ev.index(["create", "a.txt"]) < ev.index(["rename", "a.txt"]) < \
        ev.index(["remove", "b.txt"])
    assert ev.count(["write", "a.txt"]) >= 2          # the second write is in place
    assert o["missing"]["name"] == "FileNotFoundError"
    assert o["onFile"]["name"] == "InvalidArgumentError"
    # not recursive: only the folder's own entries
    assert ["create", "top.txt"] in o["flat"]
    assert not [e for e in o["flat"] if e[1].startswith("sub/")]


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user needs termd to be root")
def test_sdk_users_when_root(termd_factory, request):
    td = start(termd_factory)
    # file work acts as the user (issue 31): nobody must reach the folder
    # itself (pytest's own tmp_path sits under a 0700 folder of root's)
    base = Path(tempfile.mkdtemp(prefix="termd-users-"))
    request.addfinalizer(lambda: shutil.rmtree(base, ignore_errors=True))
    os.chmod(base, 0o777)
    o = drive(td, "user", extra_env={"E2B_TEST_DIR": str(base)})
    assert o["nobody"]["stdout"].splitlines()[0] == "nobody"
    assert o["root"]["stdout"] == "root\n"
    assert o["default"]["stdout"] == "root\n%s\n" % td.home   # termd's own user, its HOME
    assert o["info"]["owner"] == "nobody" and o["mkInfo"]["owner"] == "nobody"
    assert os.stat(base / "nob.txt").st_uid == os.stat(base / "nobdir").st_uid != 0
    assert o["unknown"]["name"] == "InvalidArgumentError"
    # --user: the user requests without one act as
    td2 = start(termd_factory, args=("--user", "nobody"))
    o = drive(td2, "user", extra_env={"E2B_TEST_DIR": str(base), "E2B_DEFAULT_CWD": "/tmp"})
    assert o["default"]["stdout"] == "nobody\n/tmp\n"
    status, _, m = unary(td2, "filesystem.Filesystem/Stat", {"path": "x"})
    assert status == 404 and "/nonexistent/x" in m["message"]   # nobody's home


def test_sdk_short_programs_end_with_their_own_code(termd_factory):
    """`id` closes stdout and stderr before it exits; with stdin on
    /dev/null that once left the pty readerless, termd closed the master and
    the hangup killed `id` (SIGHUP, exit code -1) in about 1 run in 3."""
    td = start(termd_factory)
    o = drive(td, "quick")
    assert o["codes"] == [0] * 40


def test_listen_more_than_once(termd_factory, tmp_path):
    """--listen again: one more TCP address (envd's port), the same termd."""
    port = free_port()
    td = termd_factory(token=TOKEN, args=("--listen", "127.0.0.1:%d" % port))  # unix first
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("POST", "/filesystem.Filesystem/Stat", json.dumps({"path": "/"}),
              {"Content-Type": "application/json", "X-Access-Token": TOKEN})
    r = c.getresponse()
    assert r.status == 200 and json.loads(r.read())["entry"]["path"] == "/"
    c.request("GET", "/healthz")
    r = c.getresponse()
    assert r.status == 200 and json.loads(r.read())["ok"] is True
    c.close()
    status, _, _ = wsclient_http(td.url, "/healthz")
    assert status == 200                        # the unix socket still serves
    home = tmp_path / "h"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "TERMD_TOKEN"}
    tb = TERMD_BIN
    # every address passes the non-loopback rule, and unix: only first
    p = subprocess.run([tb, "--listen", "127.0.0.1:%d" % free_port(), "--listen",
                        "0.0.0.0:%d" % free_port(), "--cwd", str(home)], env=env,
                       capture_output=True, text=True, timeout=20)
    assert p.returncode == 2 and "refusing" in p.stderr
    p = subprocess.run([tb, "--listen", "127.0.0.1:%d" % free_port(), "--listen",
                        "unix:%s" % (tmp_path / "s"), "--cwd", str(home)], env=env,
                       capture_output=True, text=True, timeout=20)
    assert p.returncode == 2 and "unix" in p.stderr


def wsclient_http(url, path):
    return wsclient.http_request(url, path, timeout=10)


def test_polled_watchers(termd_factory, tmp_path):
    td = start(termd_factory)
    d = tmp_path / "pw"
    (d / "sub").mkdir(parents=True)
    status, _, m = unary(td, "filesystem.Filesystem/CreateWatcher",
                         {"path": str(d), "recursive": True, "includeEntry": True})
    assert status == 200
    wid = m["watcherId"]
    (d / "sub" / "f.txt").write_text("x")
    (d / "g.txt").write_text("y")
    # termd reads the kernel's events when its loop next runs (late under
    # load, where a fixed 0.2 s was not always enough): polled until both
    # have come (g.txt's WRITE is the last event made: nothing comes after)
    want = [("EVENT_TYPE_CREATE", "sub/f.txt"), ("EVENT_TYPE_WRITE", "g.txt")]
    got, deadline = [], time.monotonic() + 20
    while not all(w in [(e["type"], e["name"]) for e in got] for w in want):
        assert time.monotonic() < deadline, "not all of %r within 20 s: %r" % (want, got)
        status, _, m = unary(td, "filesystem.Filesystem/GetWatcherEvents", {"watcherId": wid})
        assert status == 200, m
        got += m["events"]
        if not m["events"]:
            time.sleep(0.05)
    evs = [(e["type"], e["name"]) for e in got]
    assert ("EVENT_TYPE_CREATE", "sub/f.txt") in evs and ("EVENT_TYPE_WRITE", "g.txt") in evs
    assert got[0]["entry"]["path"].startswith(str(d))
    status, _, m = unary(td, "filesystem.Filesystem/GetWatcherEvents", {"watcherId": wid})
    assert status == 200 and m["events"] == []          # fetched once
    status, _, m = unary(td, "filesystem.Filesystem/RemoveWatcher", {"watcherId": wid})
    assert status == 200
    for method in ("GetWatcherEvents", "RemoveWatcher"):
        status, _, m = unary(td, "filesystem.Filesystem/" + method, {"watcherId": wid})
        assert status == 404 and m["code"] == "not_found"
    status, _, m = unary(td, "filesystem.Filesystem/CreateWatcher", {"path": str(d / "nope")})
    assert status == 404


def test_files_gzip(termd_factory, tmp_path):
    import gzip
    td = start(termd_factory, args=("--max-frame", "65536"))
    data = bytes(range(256)) * 100
    (tmp_path / "d.bin").write_bytes(data)
    status, hdrs, body = request(td, "GET", "/files?path=%s" % (tmp_path / "d.bin"),
                                 headers={"Accept-Encoding": "gzip"})
    assert status == 200 and hdrs.get("content-encoding") == "gzip"
    assert gzip.decompress(body) == data
    status, hdrs, body = request(td, "GET", "/files?path=%s" % (tmp_path / "d.bin"),
                                 headers={"Accept-Encoding": "gzip;q=0, identity"})
    assert status == 200 and "content-encoding" not in hdrs and body == data
    status, _, body = request(td, "POST", "/files?path=%s" % (tmp_path / "up.bin"),
                              gzip.compress(data), {"Content-Type": "application/octet-stream",
                                                    "Content-Encoding": "gzip"})
    assert status == 200 and (tmp_path / "up.bin").read_bytes() == data
    for bad in (b"not gzip", gzip.compress(data)[:-9], gzip.compress(b"\0" * 200000)):
        status, _, body = request(td, "POST", "/files?path=%s" % (tmp_path / "bad.bin"), bad,
                                  {"Content-Type": "application/octet-stream",
                                   "Content-Encoding": "gzip"})
        assert status == 400, bad[:20]           # not gzip, cut, over --max-frame inflated


def test_termd_stops_cleanly_with_streams_processes_and_watches_open(termd_factory, tmp_path):
    """SIGTERM with a Start stream open, an unseen process end kept for a
    reconnect, a WatchDir stream and a polled watcher: termd exits 0 (the
    fixture checks it; under ASan a use after free or a leak would not)."""
    td = start(termd_factory)
    socks = []
    for path, msg in (("/process.Process/Start", start_cmd("sleep 30")),
                      ("/filesystem.Filesystem/WatchDir", {"path": str(tmp_path)})):
        s = socket.create_connection(("127.0.0.1", port_of(td)))
        body = envelope(msg)
        s.sendall(("POST %s HTTP/1.1\r\nHost: x\r\nX-Access-Token: %s\r\nKeepalive-Ping-Interval: 1\r\n"
                   "Content-Type: application/connect+json\r\nContent-Length: %d\r\n\r\n"
                   % (path, TOKEN, len(body))).encode() + body)
        socks.append(s)
    s = socket.create_connection(("127.0.0.1", port_of(td)))
    body = envelope(start_cmd("echo unseen"))
    s.sendall(("POST /process.Process/Start HTTP/1.1\r\nHost: x\r\nX-Access-Token: %s\r\n"
               "Content-Type: application/connect+json\r\nContent-Length: %d\r\n\r\n"
               % (TOKEN, len(body))).encode() + body)
    s.close()                                   # gone before the end: kept 60 s
    status, _, m = unary(td, "filesystem.Filesystem/CreateWatcher", {"path": str(tmp_path)})
    assert status == 200
    (tmp_path / "f").write_text("x")
    time.sleep(1.5)                             # keepalives sent; then the fixture stops termd
