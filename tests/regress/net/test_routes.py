"""Every route of every door (routes.ROUTES) walked for its credentials:
without a token only the public ones answer, each door refusing in its own
words; a wrong token is no token; the view token is refused wherever it
must not act (and admitted where it may watch); the full token is admitted
everywhere (so every row is a real route); with a view token and no full
token nothing acts; and the table names every route the doors register."""

import os
import re
import time
from pathlib import Path

import pytest

import routes
from conftest import REPO
from tdtest import wait_until

FULL = "routes-full-secret-1"
VIEW = "routes-view-secret-1"


def start(termd_factory, tmp_path, full=True):
    vt = tmp_path / "view.token"
    vt.write_text(VIEW + "\n")
    rec = tmp_path / "rec"
    rec.mkdir(mode=0o700, exist_ok=True)
    t = termd_factory(args=("--view-token-file", str(vt), "--record", str(rec)),
                      token=FULL if full else None, tcp=True)
    (t.home / "hello.txt").write_text("hello\n")
    cast = wait_until(lambda: [f for f in os.listdir(rec) if f.endswith(".cast")],
                      what="main's recording")[0]
    return t, [routes.fill(r, home=str(t.home), cast=cast) for r in routes.ROUTES]


def check(results):
    bad = [x for x in results if x]
    assert not bad, "\n".join(bad)


def test_without_a_token_only_the_public_routes_answer(termd_factory, tmp_path):
    t, rows = start(termd_factory, tmp_path)
    out = []
    for r in rows:
        want = routes.REFUSAL[r["door"]]
        status, body = routes.request(t.url, r)
        if r["access"] == "public":
            if not routes.admitted(r, status, body):
                out.append("%s: public, but %d without a token" % (routes.label(r), status))
        elif status != want:
            out.append("%s: %d without a token (want %d) %r" % (routes.label(r), status, want, body[:80]))
        if r["access"] == "public":
            continue
        # wrong, the full token with more after it, and one byte short
        for tok in ("wrong-" + FULL, FULL + "x", FULL[:-1]):
            for h in routes.credential_forms(tok):
                status, body = routes.request(t.url, r, h)
                if status != want:
                    out.append("%s: %d with a wrong token %s: %r" % (routes.label(r), status,
                                                                     list(h), tok))
    check(out)


def test_the_view_token_acts_nowhere(termd_factory, tmp_path):
    t, rows = start(termd_factory, tmp_path)
    out = []
    for r in rows:
        if r["access"] == "full":
            for h in routes.credential_forms(VIEW):
                status, body = routes.request(t.url, r, h)
                if status not in (401, 403):
                    out.append("%s: %d with the view token %s" % (routes.label(r), status, list(h)))
        elif r["access"] == "view":
            status, body = routes.request(t.url, r, {"Authorization": "Bearer " + VIEW})
            if not routes.admitted(r, status, body):
                out.append("%s: the view token may watch, but %d" % (routes.label(r), status))
    check(out)


def test_the_full_token_is_admitted_everywhere(termd_factory, tmp_path):
    t, rows = start(termd_factory, tmp_path)
    out = []
    for r in rows:
        status, body = routes.request(t.url, r, routes.full_headers(r, FULL))
        if not routes.admitted(r, status, body):
            out.append("%s: %d with the full token %r" % (routes.label(r), status, body[:120]))
    check(out)


def test_a_view_token_and_no_full_token_acts_nowhere(termd_factory, tmp_path):
    """With a view token and no full token (not --insecure-no-token), a
    request without the view token is nobody, and with it a viewer."""
    t, rows = start(termd_factory, tmp_path, full=False)
    marker = t.home / "up"
    out = []
    for r in rows:
        if r["access"] == "public":
            continue
        for h in [{}] + routes.credential_forms(VIEW) + [{"Content-Type": "text/plain"}]:
            status, body = routes.request(t.url, r, h)
            may = r["access"] == "view" and h.get("Authorization") == "Bearer " + VIEW
            if may and not routes.admitted(r, status, body):
                out.append("%s: %d for the view token" % (routes.label(r), status))
            if not may and status not in (401, 403):
                out.append("%s: %d with %s" % (routes.label(r), status, list(h) or "no token"))
    time.sleep(0.3)
    assert not marker.exists() and not (t.home / "made").exists()
    check(out)


# ------------------------------------------------------ the table is whole

def _c_string(expr, defines):
    expr = expr.strip()
    if expr.startswith('"'):
        return expr.strip('"')
    return defines.get(expr)


def registered_routes():
    """(method, path, prefix) of every http_route table in termd's sources,
    and envd's Connect methods as paths."""
    found, methods = [], []
    for src in sorted((REPO / "termd").rglob("*.c")):
        text = src.read_text(errors="replace")
        defines = dict(re.findall(r'#define\s+(\w+)\s+"([^"]*)"', text))
        for block in re.findall(r"struct http_route \w+\[\]\s*=\s*\{(.*?)\n\s*\};", text, re.S):
            for m in re.finditer(r"\{\s*\"([A-Z*]+)\",\s*([^,]+),\s*[^,]+,\s*[^,]+,\s*([01])(?:\s*,\s*[\w| ]+)?\s*\}", block):
                path = _c_string(m.group(2), defines)
                assert path, "cannot read the route %r in %s" % (m.group(0), src)
                found.append((m.group(1), path, m.group(3) == "1"))
        for svc, meth in re.findall(r'\{\s*"(process|filesystem)",\s*"(\w+)",\s*[01]\s*\}', text):
            methods.append("/%s.%s/%s" % (svc, svc.capitalize(), meth))
    return found, methods


def test_the_table_names_every_route():
    found, methods = registered_routes()
    assert len(found) >= 15 and len(methods) >= 10, (found, methods)   # the parse found them
    paths = [(r["method"], r["path"].split("?")[0]) for r in routes.ROUTES]
    paths += [mp for rs in routes.API_ONLY_ROUTES.values() for mp in rs]
    missing = []
    for method, path, prefix in found:
        ok = [p for m, p in paths if (m == method or method in ("*", "ANY")) and
              (p.startswith(path) if prefix else p == path)]
        if not ok:
            missing.append("%s %s%s" % (method, path, " (prefix)" if prefix else ""))
    for m in methods:
        if ("POST", m) not in paths:
            missing.append("POST %s (an envd method)" % m)
    for ws in ("/events", "/tty/"):
        if not [p for m, p in paths if m == "WS" and p.startswith(ws)]:
            missing.append("WS " + ws)
    assert not missing, "routes the doors serve that routes.ROUTES does not name: %s" % missing
