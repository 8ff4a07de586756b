"""PROTOCOL.md §4 Watching files (1.2; the contract's §10): `watch` a folder
(recursive or not) and get `watch.event` events on the stream (create,
write, remove, rename, chmod, names relative to the folder), `watch.end`
when the folder itself goes, `watch.stop`, `watch.list`, the limits and
errors, a view token refused, watches that outlive the connection that
made them, and e2b's WatchDir as a `watch` on /events."""

import json
import os
import shutil
import struct
import http.client

from tdtest import assert_error, fmt, subscribed

T = 60.0


def call(ev, action, args=None):
    return ev.call(action, args, timeout=T)


def start(ev, path, **kw):
    a = {"path": str(path)}
    a.update(kw)
    o = call(ev, "watch", a)
    assert o.get("observation") == "watch", fmt(o)
    return o["extras"]["watch"]


def events_until(sub, pred, timeout=T):
    """watch.event/watch.end events up to (and with) the first that pred
    accepts (answers to actions reach subscribers too: skipped)."""
    got = []
    while True:
        o = sub.recv_obs(timeout)
        assert o is not None, "no matching event; got %r" % got
        if o.get("observation") in ("watch.event", "watch.end"):
            assert o.get("cause") is None, fmt(o)
            got.append(o)
            if pred(o):
                return got


def kinds(evs, wid):
    return [(o["extras"]["type"], o["extras"]["name"]) for o in evs
            if o["observation"] == "watch.event" and o["extras"]["watch"] == wid]


def test_events_for_create_write_chmod_rename_remove(termd, ev):
    sub = subscribed(termd)
    d = termd.home / "w"
    d.mkdir()
    wid = start(ev, d)
    f = d / "a.txt"
    f.write_text("one")                 # create (+ write)
    with open(f, "a") as fh:
        fh.write("two")                 # write
    os.chmod(f, 0o600)                  # chmod
    os.rename(f, d / "b.txt")           # rename (from) + create (to)
    os.remove(d / "b.txt")              # remove
    (d / "end").write_text("")
    evs = events_until(sub, lambda o: o["extras"].get("name") == "end")
    k = kinds(evs, wid)
    assert k[0] == ("create", "a.txt"), k
    assert ("write", "a.txt") in k and ("chmod", "a.txt") in k, k
    i = k.index(("rename", "a.txt"))
    assert k[i + 1] == ("create", "b.txt") and ("remove", "b.txt") in k[i:], k
    e = [o for o in evs if o["extras"].get("name") == "a.txt"][0]["extras"]
    assert e["path"] == str(f) and e["is_dir"] is False and e["watch"] == wid, e


def test_recursive_follows_new_folders_and_plain_does_not(termd, ev):
    sub = subscribed(termd)
    d = termd.home / "r"
    (d / "old").mkdir(parents=True)
    rec = start(ev, d, recursive=True)
    flat = start(ev, d)
    (d / "old" / "in-old").write_text("x")
    (d / "new" / "deeper").mkdir(parents=True)
    (d / "new" / "deeper" / "f").write_text("x")
    (d / "last").write_text("")
    # both watches saw "last": everything before it is in
    seen = set()

    def done(o):
        if o["observation"] == "watch.event" and o["extras"]["name"] == "last":
            seen.add(o["extras"]["watch"])
        return seen == {rec, flat}
    evs = events_until(sub, done)
    r = kinds(evs, rec)
    assert ("create", "old/in-old") in r and ("create", "new") in r, r
    # made before termd followed "new": told as created all the same
    assert ("create", "new/deeper") in r and ("create", "new/deeper/f") in r, r
    fl = kinds(evs, flat)
    assert ("create", "new") in fl and all("/" not in n for _, n in fl), fl
    dirs = [o["extras"] for o in evs if o["observation"] == "watch.event" and o["extras"]["name"] == "new"]
    assert all(x["is_dir"] for x in dirs), dirs


def test_folder_removed_ends_the_watch(termd, ev):
    sub = subscribed(termd)
    d = termd.home / "gone"
    d.mkdir()
    wid = start(ev, d)
    shutil.rmtree(d)
    evs = events_until(sub, lambda o: o["observation"] == "watch.end")
    end = evs[-1]["extras"]
    assert end["watch"] == wid and end["path"] == str(d) and end["reason"], end
    assert wid not in [w["watch"] for w in call(ev, "watch.list")["extras"]["watches"]]
    assert_error(call(ev, "watch.stop", {"watch": wid}), "not_found")


def test_stop_list_errors_and_limit(termd, ev):
    sub = subscribed(termd)
    d = termd.home / "s"
    d.mkdir()
    wid = start(ev, "s")                        # relative: main's cwd
    lst = call(ev, "watch.list")["extras"]["watches"]
    assert {"watch": wid, "path": str(d), "recursive": False} in lst, lst
    o = call(ev, "watch.stop", {"watch": wid})
    assert o.get("observation") == "watch.stop" and o["extras"] == {"watch": wid}, fmt(o)
    other = termd.home / "other"
    other.mkdir()
    oid = start(ev, other)
    (d / "unseen").write_text("x")
    (other / "seen").write_text("x")
    evs = events_until(sub, lambda o: o["extras"].get("name") == "seen")
    assert not kinds(evs, wid), evs
    call(ev, "watch.stop", {"watch": oid})
    e = call(ev, "watch", {"path": str(termd.home / "missing")})
    assert_error(e, "not_found")
    assert e["extras"]["errno"] == "ENOENT", fmt(e)
    (termd.home / "file").write_text("x")
    e = call(ev, "watch", {"path": str(termd.home / "file")})
    assert_error(e, "bad_request")
    assert e["extras"]["errno"] == "ENOTDIR", fmt(e)
    for bad in ({}, {"path": 5}, {"path": ""}, {"path": str(d), "recursive": "yes"}):
        assert_error(call(ev, "watch", bad), "bad_request")
    assert_error(call(ev, "watch.stop", {"watch": "watch-999"}), "not_found")
    assert_error(call(ev, "watch.stop", {}), "bad_request")
    ids = [start(ev, d) for _ in range(64)]
    assert_error(call(ev, "watch", {"path": str(d)}), "too_large")
    call(ev, "watch.stop", {"watch": ids[0]})
    start(ev, d)                                # room again


def test_a_symlink_to_a_folder_can_be_watched(termd, ev):
    sub = subscribed(termd)
    real = termd.home / "real"
    real.mkdir()
    os.symlink(str(real), termd.home / "link")
    wid = start(ev, termd.home / "link")
    (real / "via-link").write_text("x")
    evs = events_until(sub, lambda o: o["extras"].get("name") == "via-link")
    e = [o["extras"] for o in evs if o["observation"] == "watch.event"][-1]
    assert e["watch"] == wid and e["type"] == "create", e
    assert e["path"] == str(termd.home / "link" / "via-link"), e   # the path as asked


def test_a_watch_outlives_its_connection(termd):
    first = termd.events()
    d = termd.home / "o"
    d.mkdir()
    wid = start(first, d)
    first.close()
    sub = subscribed(termd)
    (d / "after").write_text("x")
    evs = events_until(sub, lambda o: o["extras"].get("name") == "after")
    assert ("create", "after") in kinds(evs, wid)


def test_view_token_cannot_watch(termd_factory, tmp_path):
    vt = tmp_path / "view"
    vt.write_text("viewsecret\n")
    t = termd_factory(args=("--view-token-file", str(vt)), token="fullsecret")
    ro = t.events(token="viewsecret")
    assert_error(call(ro, "watch", {"path": str(t.home)}), "forbidden")
    full = t.events(token="fullsecret")
    wid = start(full, t.home)
    assert_error(call(ro, "watch.stop", {"watch": wid}), "forbidden")
    assert_error(call(ro, "watch.list"), "forbidden")   # a view token's four actions only
    ro2 = t.events(token="viewsecret")
    assert call(ro2, "subscribe").get("observation") == "subscribe"
    (t.home / "seen-by-view").write_text("x")   # ... but it sees the events
    o = ro2.wait_for(lambda o: o.get("observation") == "watch.event", T)
    assert o["extras"]["watch"] == wid and o["extras"]["name"] == "seen-by-view", fmt(o)


def test_envd_watch_dir_is_a_watch_on_the_stream(termd_factory):
    tok = "watch-envd-token"
    td = termd_factory(token=tok, tcp=True)
    sub = td.events(token=tok)
    assert call(sub, "subscribe").get("observation") == "subscribe"
    port = int(td.url.rsplit(":", 1)[1])
    d = td.home / "ew"
    d.mkdir()
    msg = json.dumps({"path": str(d), "recursive": True}).encode()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=T)
    conn.request("POST", "/filesystem.Filesystem/WatchDir", body=struct.pack(">BI", 0, len(msg)) + msg,
                 headers={"Content-Type": "application/connect+json", "X-Access-Token": tok,
                          "Connect-Timeout-Ms": "3000"})
    w = sub.wait_for(lambda o: o.get("observation") == "watch", T)
    wid = w["extras"]["watch"]
    assert w["extras"]["path"] == str(d) and w["extras"]["recursive"] is True, fmt(w)
    (d / "x.txt").write_text("x")
    evs = events_until(sub, lambda o: o["extras"].get("name") == "x.txt")
    assert ("create", "x.txt") in kinds(evs, wid)
    resp = conn.getresponse()
    body = resp.read()    # the deadline ends the stream
    assert b"EVENT_TYPE_CREATE" in body and b"x.txt" in body, body
    # the stream over, the door stopped its watch
    stop = sub.wait_for(lambda o: o.get("observation") == "watch.stop", T)
    assert stop["extras"]["watch"] == wid


def test_a_folder_moved_inside_a_recursive_watch_is_told_by_its_new_name(termd, ev):
    """A folder renamed below a recursive watch: once the watch has told the
    move, what happens in it (and in a folder below it) is named by the new
    path, not the old one."""
    sub = subscribed(termd)
    d = termd.home / "mv"
    (d / "a" / "sub").mkdir(parents=True)
    (d / "a" / "old.txt").write_text("x")
    (d / "a" / "sub" / "old2.txt").write_text("x")
    wid = start(ev, d, recursive=True)
    os.rename(d / "a", d / "b")
    events_until(sub, lambda o: o["extras"].get("name") == "b" and o["extras"]["type"] == "create")
    with open(d / "b" / "old.txt", "a") as f:
        f.write("y")
    with open(d / "b" / "sub" / "old2.txt", "a") as f:
        f.write("y")
    (d / "b" / "new.txt").write_text("z")
    (d / "end").write_text("")
    evs = events_until(sub, lambda o: o["extras"].get("name") == "end")
    k = kinds(evs, wid)
    assert ("write", "b/old.txt") in k and ("write", "b/sub/old2.txt") in k, k
    assert ("create", "b/new.txt") in k, k
    assert not [n for _, n in k if n.startswith("a/")], k
    e = [o["extras"] for o in evs if o["observation"] == "watch.event"
         and o["extras"]["name"] == "b/sub/old2.txt"][0]
    assert e["path"] == str(d / "b" / "sub" / "old2.txt"), e


def test_a_folder_moved_in_whole_is_told_with_what_it_holds(termd, ev):
    """A tree made outside and moved into a recursive watch at once: its
    folders are followed and what they held already is told as created
    (inotify says only that the top folder came)."""
    sub = subscribed(termd)
    d = termd.home / "dest"
    d.mkdir()
    made = termd.home / "made-outside"
    (made / "deeper").mkdir(parents=True)
    (made / "deeper" / "f").write_text("x")
    (made / "top.txt").write_text("x")
    wid = start(ev, d, recursive=True)
    os.rename(made, d / "in")
    (d / "end").write_text("")
    evs = events_until(sub, lambda o: o["extras"].get("name") == "end")
    k = kinds(evs, wid)
    for want in (("create", "in"), ("create", "in/deeper"), ("create", "in/deeper/f"),
                 ("create", "in/top.txt")):
        assert want in k, (want, k)
    (d / "in" / "deeper" / "later").write_text("x")       # and it is followed
    evs = events_until(sub, lambda o: o["extras"].get("name") == "in/deeper/later")
    assert ("create", "in/deeper/later") in kinds(evs, wid)
