"""Issue 21's findings, each a promise in SECURITY.md: a view token never
acts and never removes a check (OpenHands routes, uploads, downloads and
/events with a view token and no full token; a cross-site request from
headless Chromium); ids belong to the full token (a viewer cannot take,
block, replay or squat one); ids termd and termctl make are random; a view
never starts a process; /record/ refuses hard links."""

import http.server
import json
import os
import re
import subprocess
import threading
import time

import pytest

import routes
import tdtest
import wsclient
from tdtest import assert_error

CHROMIUM = os.environ.get("TERMD_CHROMIUM") or "/usr/lib/chromium/chromium"


def view_only(termd_factory, tmp_path, *extra):
    """termd on loopback TCP with a view token and no full token."""
    vt = tmp_path / "view.token"
    vt.write_text("viewsecret\n")
    return termd_factory(args=("--view-token-file", str(vt)) + extra, tcp=True)


def oh_run(command):
    return json.dumps({"action": {"action": "run", "args": {"command": command, "is_input": False,
                                                             "blocking": False}, "timeout": 20}}).encode()


# every route that acts, of every door (routes.py's table)
ACTING = [r for r in routes.ROUTES if r["access"] == "full"]


def test_view_token_alone_never_acts(termd_factory, tmp_path):
    t = view_only(termd_factory, tmp_path)
    marker = tmp_path / "ran"
    body = oh_run("touch %s" % marker)
    variants = [
        {},                                                       # no credential
        {"Content-Type": "text/plain"},                           # a "simple" cross-site request
        {"Content-Type": "text/plain", "Origin": "http://evil.example"},
        {"Authorization": "Bearer viewsecret"},                   # the view token itself
        {"X-Session-API-Key": "viewsecret"},
        {"Authorization": "Bearer wrong"},
    ]
    for r in ACTING:
        r = routes.fill(r, home=str(t.home), cast="none.cast")
        if r["path"] == "/execute_action":
            r["body"] = body
        for h in variants:
            s, data = routes.request(t.url, r, h, timeout=20)
            assert s in (401, 403), (routes.label(r), h, s, data[:200])
    # a rebound Host (a DNS name pointing at 127.0.0.1) is foreign too
    s, _, _ = wsclient.http_request(t.url, "/execute_action", method="POST",
                                    headers={"Host": "rebind.example:80"}, body=body)
    assert s == 403
    # /events without the view token: nothing; with it: a viewer only
    with pytest.raises(wsclient.HandshakeError) as ei:
        t.events(token=None)
    assert ei.value.status == 401
    ro = t.events(token="viewsecret")
    assert ro.hello["extras"]["readonly"] is True
    assert_error(ro.call("run", {"command": "touch %s" % marker}), "forbidden")
    time.sleep(0.5)   # anything that had been run would have touched it by now
    assert not marker.exists()
    # the viewer still sees: screen and session.list work
    assert ro.call("screen", {})["observation"] == "screen"


def test_no_token_at_all_still_admits_local_programs(termd_factory, tmp_path):
    # the contrast: with no token at all a local program (no Origin) acts,
    # and a cross-site one does not
    t = termd_factory(tcp=True)
    marker = tmp_path / "ran-local"
    s, _, data = wsclient.http_request(t.url, "/execute_action", method="POST",
                                       body=oh_run("touch %s" % marker), timeout=30)
    assert s == 200, data[:300]
    assert marker.exists()
    s, _, _ = wsclient.http_request(t.url, "/execute_action", method="POST",
                                    headers={"Origin": "http://evil.example", "Content-Type": "text/plain"},
                                    body=oh_run("true"))
    assert s == 403


PAGE = """<!doctype html><html><body><p id=s>start</p><script>
async function go() {
  try {
    await fetch("%(termd)s/execute_action", {method: "POST", mode: "no-cors",
      headers: {"Content-Type": "text/plain"}, body: %(body)s});
  } catch (e) {}
  try { await fetch("/beacon", {method: "POST", body: "sent"}); } catch (e) {}
  document.getElementById("s").textContent = "done";
}
go();
</script></body></html>"""


@pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK), reason="no chromium")
@pytest.mark.parametrize("mode", ["view-token-only", "no-token"])
def test_cross_site_page_in_chromium_cannot_run_a_command(termd_factory, tmp_path, mode):
    t = view_only(termd_factory, tmp_path) if mode == "view-token-only" else termd_factory(tcp=True)
    marker = tmp_path / "ran-from-page"
    page = PAGE % {"termd": "http://" + t.url.split("://", 1)[1],
                   "body": json.dumps(oh_run("touch %s" % marker).decode())}
    beacons = []

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            b = page.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(b)))
            self.end_headers()
            self.wfile.write(b)

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            beacons.append(self.rfile.read(n))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        out = subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
                              "--user-data-dir=%s" % (tmp_path / "profile"),
                              "--virtual-time-budget=8000", "--dump-dom",
                              "http://127.0.0.1:%d/" % srv.server_address[1]],
                             capture_output=True, timeout=90, text=True)
    finally:
        srv.shutdown()
    # the page ran its script through (the control: the browser did send)
    assert beacons == [b"sent"], (beacons, out.stdout[-500:], out.stderr[-1500:])
    assert "done" in out.stdout
    time.sleep(0.5)
    assert not marker.exists(), "a page on another site ran a command through termd"


# ------------------------------------------------------------------- ids

def full_and_view(termd_factory, tmp_path):
    vt = tmp_path / "view.token"
    vt.write_text("viewsecret\n")
    t = termd_factory(args=("--view-token-file", str(vt)), token="fullsecret")
    full = t.events(token="fullsecret")
    full.call("subscribe", {})
    return t, full, t.events(token="viewsecret")


def recv_for(conn, id_, timeout=30):
    return conn.wait_for(lambda o: o.get("cause") == id_, timeout=timeout)


def test_viewer_cannot_take_a_running_actions_answer(termd_factory, tmp_path):
    t, full, ro = full_and_view(termd_factory, tmp_path)
    full.send_action("run", {"command": "sleep 1; echo finished"}, id="agent-1")
    full.wait_for(lambda o: o.get("observation") == "command.start", timeout=30)
    ro.send_action("ping", id="agent-1")
    err = recv_for(ro, "agent-1")
    assert_error(err, "forbidden")
    obs = recv_for(full, "agent-1")
    assert obs["observation"] == "run" and obs["content"] == "finished", obs
    # and a replay of the answered id is refused to the viewer, not sent
    ro.send_action("ping", id="agent-1")
    err = recv_for(ro, "agent-1")
    assert_error(err, "forbidden")
    assert "replayed" not in (err.get("extras") or {})
    # the full token's replay still works
    again = full.call("run", {"command": "echo no"}, id="agent-1")
    assert again["extras"].get("replayed") is True and again["content"] == "finished", again


def test_viewer_cannot_squat_the_next_id(termd_factory, tmp_path):
    t, full, ro = full_and_view(termd_factory, tmp_path)
    marker = tmp_path / "squatted"
    pong = ro.call("ping", id="agent-7")
    assert pong["observation"] == "pong", pong
    obs = full.call("run", {"command": "touch %s && echo ran" % marker}, id="agent-7")
    assert obs["observation"] == "run" and obs["content"] == "ran", obs
    assert not (obs.get("extras") or {}).get("replayed")
    assert marker.exists()


def test_forbidden_id_error_goes_to_the_viewer_alone(termd_factory, tmp_path):
    t, full, ro = full_and_view(termd_factory, tmp_path)
    watcher = t.events(token="fullsecret")
    watcher.call("subscribe", {})
    tdtest.run_done(full, "true")
    full.send_action("run", {"command": "sleep 1"}, id="agent-9")
    full.wait_for(lambda o: o.get("observation") == "command.start", timeout=30)
    ro.send_action("ping", id="agent-9")
    assert_error(recv_for(ro, "agent-9"), "forbidden")
    recv_for(full, "agent-9")
    # the subscriber saw agent-9's run answer and no error with its id
    seen = watcher.wait_for(lambda o: o.get("cause") == "agent-9", timeout=30)
    assert seen["observation"] == "run", seen


def test_generated_ids_are_random(termd_factory, tmp_path):
    t = termd_factory(token="fullsecret")
    ev = t.events(token="fullsecret")
    ev.call("subscribe", {})
    for _ in range(3):
        r = t.termctl("run", "true", env={"TERMD_TOKEN": "fullsecret"})
        assert r.returncode == 0, r
    ids = []
    deadline = time.monotonic() + 30
    while len(ids) < 3 and time.monotonic() < deadline:
        o = ev.recv_obs(timeout=30)
        if o.get("observation") == "run" and isinstance(o.get("cause"), str):
            ids.append(o["cause"])
    assert len(ids) == 3, ids
    rnd = [re.match(r"termctl-\d+-([0-9a-f]{16})-\d+$", i) for i in ids]
    assert all(rnd), ids
    assert len({m.group(1) for m in rnd}) == 3, ids


def test_openhands_ids_are_random(termd_factory, tmp_path):
    t = termd_factory(tcp=True)
    ev = t.events()
    ev.call("subscribe", {})
    for _ in range(2):
        s, _, _ = wsclient.http_request(t.url, "/execute_action", method="POST", body=oh_run("true"), timeout=30)
        assert s == 200
    ids = []
    deadline = time.monotonic() + 30
    while len(ids) < 2 and time.monotonic() < deadline:
        o = ev.recv_obs(timeout=30)
        c = o.get("cause")
        if o.get("observation") == "run" and isinstance(c, str) and c.startswith("openhands-"):
            ids.append(c)
    assert len(ids) == 2, ids
    tails = [re.match(r"openhands-\d+-([0-9a-f]{24})$", i) for i in ids]
    assert all(tails), ids
    assert tails[0].group(1) != tails[1].group(1)


# ------------------------------------------------------ views and records

def test_view_never_starts_a_shell(termd_factory, tmp_path):
    t, full, ro = full_and_view(termd_factory, tmp_path)
    pid = tdtest.run_done(full, "echo $$")["extras"]["pid"]
    full.send_action("run", {"command": "exit 0"}, id="bye")
    recv_for(full, "bye")
    tdtest.wait_until(lambda: not os.path.exists("/proc/%d" % pid), what="the shell to exit")
    scr = ro.call("screen", {})
    assert scr["observation"] == "screen", scr
    assert not (scr.get("extras") or {}).get("restarted"), scr
    time.sleep(0.5)
    out = subprocess.run(["pgrep", "-s", "0", "-f", "rcfile"], capture_output=True, text=True)
    lst = ro.call("session.list", {})
    (main,) = [s for s in lst["extras"]["sessions"] if s["name"] == "main"]
    assert main.get("alive") is False or main.get("running") is False or main.get("exit_code") is not None, (main, out)
    # the full token's next run starts it again, and says so
    obs = tdtest.run_done(full, "echo back")
    assert obs["extras"].get("restarted") is True, obs
    # a view's screen of a session that does not exist creates none
    assert_error(ro.call("screen", {"session": "fresh"}), "no_such_session")
    names = [s["name"] for s in full.call("session.list", {})["extras"]["sessions"]]
    assert "fresh" not in names


def test_record_refuses_hard_links(termd_factory, tmp_path):
    d = tmp_path / "rec"
    d.mkdir(mode=0o700)
    t = termd_factory(args=("--record", str(d)))
    secret = tmp_path / "secret.txt"
    secret.write_text("not a recording\n")
    name = "main-20260101T000000Z.cast"
    os.link(secret, d / name)
    s, _, body = wsclient.http_request(t.url, "/record/" + name, timeout=30)
    assert s == 404 and b"not a recording" not in body, (s, body)
    s, _, lb = wsclient.http_request(t.url, "/record/", timeout=30)
    assert s == 200 and name not in lb.decode(), lb
    # a file termd wrote is still served
    ev = t.events()
    tdtest.run_done(ev, "echo recorded")
    s, _, lb = wsclient.http_request(t.url, "/record/", timeout=30)
    files = [i["file"] for i in json.loads(lb)]
    assert files and all(f != name for f in files)
    s, _, b = wsclient.http_request(t.url, "/record/" + files[0], timeout=30)
    assert s == 200 and b"recorded" in b


def test_token_in_the_query_is_url_decoded(termd_factory, tmp_path):
    # SECURITY.md: ?token= is URL-decoded, so a token's "+" must be sent as %2B
    tok = tmp_path / "tok"
    tok.write_text("a+b/c=\n")
    t = termd_factory(args=("--token-file", str(tok)))
    assert wsclient.http_request(t.url, "/auth?token=a%2Bb%2Fc%3D", timeout=30)[0] == 200
    assert wsclient.http_request(t.url, "/auth?token=a+b/c=", timeout=30)[0] == 401
    assert wsclient.http_request(t.url, "/auth", headers={"Authorization": "Bearer a+b/c="},
                                 timeout=30)[0] == 200
