"""Every route of every door on termd's listener, in one table the auth tests
walk (test_routes.py; test_view_token_and_ids.py and test_envd.py take their rows
from it): termd's own (termd/net/http.c: /healthz, the /events and /tty
upgrades), the web page (termd/door/web.c), recordings (termd/door/record.c),
e2b's envd (termd/door/envd/: every Connect method, /health, /envs,
/files), OpenHands' action server (termd/door/openhands/) and its V1
workspace API (termd/door/ohv1/; its WebSocket takes its key in a first
frame, so it is test_openhands_v1.py's).

A row: door, method ("GET", "POST", or "WS" for an upgrade), path (with a
query where the route needs one), who may use it, and for a POST the body
and content type. `access` is
  "public"  answered without any token (it holds no data);
  "view"    the view token may use it (it watches: /events is then
            read-only, /tty read-only);
  "full"    the full token only: it acts, or shows what only the full
            token may see.
Each door takes the full token its own way (`full_headers`) and refuses in
its own words (`refusal`): 401 for termd's routes, the web page, /record and
envd ("unauthenticated"), 403 for OpenHands ("Invalid API Key"), 401 for
OpenHands V1 ("Unauthorized").

A route added to a door and not here fails test_routes.py's
test_the_table_names_every_route."""

import json
import struct

import wsclient

SESSION = "main"
EVENTS_PROTO = wsclient.EVENTS_SUBPROTOCOL
TTY_PROTO = wsclient.TTY_SUBPROTOCOL


def _envelope(msg):
    data = json.dumps(msg).encode()
    return struct.pack(">BI", 0, len(data)) + data


def _envd(method, msg, stream=False):
    """An envd Connect call: unary JSON, or a server stream (one envelope)."""
    if stream:
        return dict(door="envd", method="POST", path="/" + method, access="full",
                    body=_envelope(msg), ctype="application/connect+json")
    return dict(door="envd", method="POST", path="/" + method, access="full",
                body=json.dumps(msg).encode(), ctype="application/json")


def _oh(method, path, body=None, access="full"):
    return dict(door="openhands", method=method, path=path, access=access,
                body=json.dumps(body).encode() if body is not None else b"",
                ctype="application/json" if body is not None else None)


def _v1(method, path, body=None, access="full"):
    return dict(_oh(method, path, body, access), door="ohv1")


# {home} and {cast} are filled in by the test: termd's home and a recording's file name
ROUTES = [
    # termd's own (termd/net/http.c)
    dict(door="termd", method="GET", path="/healthz", access="public"),
    dict(door="termd", method="WS", path="/events", access="view", proto=EVENTS_PROTO),
    dict(door="termd", method="WS", path="/tty/" + SESSION, access="view", proto=TTY_PROTO),
    dict(door="termd", method="WS", path="/tty/%s?mode=ro" % SESSION, access="view", proto=TTY_PROTO),
    dict(door="termd", method="WS", path="/tty/%s?mode=rw" % SESSION, access="full", proto=TTY_PROTO),
    # the web page (termd/door/web.c): shells with no data, and /auth
    dict(door="web", method="GET", path="/", access="public"),
    dict(door="web", method="GET", path="/s/" + SESSION, access="public"),
    dict(door="web", method="GET", path="/r/{cast}", access="public"),
    dict(door="web", method="GET", path="/assets/term.js", access="public"),
    dict(door="web", method="GET", path="/auth", access="view"),
    # Prometheus metrics (termd/net/metrics.c): behind the full or the view token
    dict(door="termd", method="GET", path="/metrics", access="view"),
    # the preview proxy (termd/door/preview/proxy.c): a port nobody listens on is the
    # proxy's own 404 once past the check (a listening one: test_ports.py)
    dict(door="termd", method="GET", path="/proxy/9/", access="full",
         admitted_when=b"no program of termd's listens on that port"),
    # recordings (termd/door/record.c), with --record
    dict(door="record", method="GET", path="/record/", access="view"),
    dict(door="record", method="GET", path="/record/" + SESSION, access="view"),
    dict(door="record", method="GET", path="/record/{cast}", access="view"),
    # e2b's envd (termd/door/envd/: envd.c, process.c, fs.c, watch.c)
    dict(door="envd", method="GET", path="/health", access="public"),
    dict(door="envd", method="GET", path="/envs", access="full"),
    dict(door="envd", method="GET", path="/files?path={home}/hello.txt", access="full"),
    dict(door="envd", method="POST", path="/files?path={home}/posted.txt", access="full",
         body=b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"p.txt\"\r\n\r\n"
              b"posted\r\n--b--\r\n", ctype="multipart/form-data; boundary=b"),
    _envd("process.Process/Start", {"process": {"cmd": "/bin/true"}}, stream=True),
    _envd("process.Process/Connect", {"process": {"pid": 999999}}, stream=True),
    _envd("process.Process/List", {}),
    _envd("process.Process/SendInput", {"process": {"pid": 999999}, "input": {"stdin": ""}}),
    _envd("process.Process/SendSignal", {"process": {"pid": 999999}, "signal": "SIGNAL_SIGTERM"}),
    _envd("process.Process/Update", {"process": {"pid": 999999}}),
    _envd("process.Process/CloseStdin", {"process": {"pid": 999999}}),
    _envd("filesystem.Filesystem/Stat", {"path": "{home}"}),
    _envd("filesystem.Filesystem/MakeDir", {"path": "{home}/made"}),
    _envd("filesystem.Filesystem/Move", {"source": "{home}/nope", "destination": "{home}/nope2"}),
    _envd("filesystem.Filesystem/ListDir", {"path": "{home}"}),
    _envd("filesystem.Filesystem/Remove", {"path": "{home}/nope"}),
    _envd("filesystem.Filesystem/WatchDir", {"path": "{home}/none"}, stream=True),
    _envd("filesystem.Filesystem/CreateWatcher", {"path": "{home}/none"}),
    _envd("filesystem.Filesystem/GetWatcherEvents", {"watcherId": "none"}),
    _envd("filesystem.Filesystem/RemoveWatcher", {"watcherId": "none"}),
    # OpenHands' action execution server (termd/door/openhands/: openhands.c, run.c, files.c, transfer.c)
    _oh("GET", "/alive", access="public"),
    _oh("GET", "/server_info", access="public"),
    _oh("POST", "/execute_action", {"action": {"action": "run", "args": {"command": "true",
                                                                          "is_input": False,
                                                                          "blocking": False},
                                               "timeout": 20}}),
    _oh("POST", "/list_files", {}),
    _oh("POST", "/upload_file?destination={home}/up&recursive=false", {}),
    _oh("GET", "/download_files?path={home}"),
    _oh("GET", "/vscode/connection_token"),
    # OpenHands V1's workspace API (termd/door/ohv1/; /alive, /server_info and /health above)
    _v1("GET", "/ready", access="public"),
    _v1("POST", "/api/bash/start_bash_command", {"command": "true"}),
    _v1("POST", "/api/bash/execute_bash_command", {"command": "true"}),
    _v1("GET", "/api/bash/bash_events/search"),
    _v1("DELETE", "/api/bash/bash_events"),
    dict(door="ohv1", method="POST", path="/api/file/upload?path={home}/v1up.txt", access="full",
         body=b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"p.txt\"\r\n\r\n"
              b"posted\r\n--b--\r\n", ctype="multipart/form-data; boundary=b"),
    _v1("GET", "/api/file/download?path={home}/hello.txt"),
    _v1("GET", "/api/git/changes?path={home}"),
    _v1("GET", "/api/git/diff?path={home}/hello.txt"),
]

REFUSAL = {"termd": 401, "web": 401, "record": 401, "envd": 401, "openhands": 403, "ohv1": 401}


def label(r):
    return "%s %s %s" % (r["door"], r["method"], r["path"])


def full_headers(r, token):
    """The full token, the way the route's door takes it."""
    if r["door"] == "envd":
        return {"X-Access-Token": token}
    if r["door"] in ("openhands", "ohv1"):
        return {"X-Session-API-Key": token}
    return {"Authorization": "Bearer " + token}


def credential_forms(token):
    """Every way a token can be presented: each door's header and termd's
    bearer (a door must refuse its wrong ones too)."""
    return [{"Authorization": "Bearer " + token}, {"X-Access-Token": token},
            {"X-Session-API-Key": token}]


def fill(r, **values):
    """The row with {home}/{cast} put in."""
    out = dict(r)
    out["path"] = r["path"].format(**values)
    if r.get("body"):
        body = r["body"]
        for k, v in values.items():
            body = body.replace(("{%s}" % k).encode(), v.encode())
        out["body"] = body
    return out


def request(url, r, headers=None, timeout=30):
    """One request on the route (a fresh connection): (status, body). An
    upgrade answers 101 when it is accepted (then closed)."""
    headers = dict(headers or {})
    if r["method"] == "WS":
        token = None
        auth = headers.pop("Authorization", None)
        if auth and auth.startswith("Bearer "):
            token = auth[7:]
        try:
            ws = wsclient.connect(url, r["path"], r["proto"], token=token, timeout=timeout,
                                  headers=headers)
        except wsclient.HandshakeError as e:
            return e.status, e.body or b""
        ws.abort()
        return 101, b""
    if r.get("ctype"):
        headers.setdefault("Content-Type", r["ctype"])
    status, _, body = wsclient.http_request(url, r["path"], method=r["method"], headers=headers,
                                            body=r.get("body") or b"", timeout=timeout)
    return status, body


def admitted(r, status, body):
    """The route took the request past its credential check, and is one
    (not a 404 for a path nobody serves, not envd's "no such method")."""
    if status in (401, 403):
        return False
    if r["door"] == "envd" and r["method"] == "POST" and r["path"].split("?")[0] != "/files":
        # a Connect method: anything but "unimplemented" (a 404 there is a
        # process or a watcher not found)
        try:
            return json.loads(body or b"{}").get("code") != "unimplemented"
        except (ValueError, AttributeError):
            return True   # a stream's envelopes
    if r.get("admitted_when"):   # the route's own answer past its check
        return r["admitted_when"] in (body or b"")
    return status != 404


# Routes served only on a listener of their own API (--listen ADDR,api=NAME;
# termd started as swerex-remote): named here so the table stays whole, and
# walked (no key, a wrong key) by that API's own tests.
API_ONLY_ROUTES = {
    "swerex": [("GET", "/"), ("GET", "/is_alive"), ("POST", "/create_session"),
               ("POST", "/run_in_session"), ("POST", "/close_session"), ("POST", "/execute"),
               ("POST", "/read_file"), ("POST", "/write_file"), ("POST", "/upload"),
               ("POST", "/close")],   # test_swerex.py
    "agent-sandbox": [("GET", "/"), ("POST", "/execute"), ("POST", "/upload"),
                      ("GET", "/download/"), ("GET", "/list/"),
                      ("GET", "/exists/")],   # test_agent_sandbox.py
}
