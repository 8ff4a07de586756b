"""PROTOCOL.md §4 Files (1.2): file.stat, file.list, file.mkdir, file.move
and file.remove — each entry described the same way, errors that name the
errno, relative paths from main's cwd, a view token refused, and e2b's
Stat/ListDir/MakeDir/Move/Remove on the event stream as these actions."""

import json
import os
import http.client

from tdtest import assert_error, fmt

T = 60.0


def call(ev, action, args=None):
    return ev.call(action, args, timeout=T)


def ok(obs, name):
    assert obs.get("observation") == name, fmt(obs)
    return obs["extras"]


def test_stat_describes_files_folders_and_symlinks(termd, ev):
    h = termd.home
    (h / "f.txt").write_bytes(b"12345")
    os.chmod(h / "f.txt", 0o640)
    os.mkdir(h / "d")
    os.symlink("f.txt", h / "ln")
    os.symlink("/no/where", h / "dangling")
    e = ok(call(ev, "file.stat", {"path": str(h / "f.txt")}), "file.stat")["entry"]
    st = os.lstat(h / "f.txt")
    assert e["type"] == "file" and e["name"] == "f.txt" and e["path"] == str(h / "f.txt"), e
    assert e["size"] == 5 and e["mode"] == 0o640 and e["permissions"] == "-rw-r-----", e
    assert e["modified"].endswith("Z"), e
    import datetime
    when = datetime.datetime.fromtimestamp(st.st_mtime, datetime.timezone.utc)
    assert e["modified"][:19] == when.strftime("%Y-%m-%dT%H:%M:%S"), (e, when)
    assert "symlink_target" not in e
    d = ok(call(ev, "file.stat", {"path": "d"}), "file.stat")["entry"]   # relative: main's cwd
    assert d["type"] == "directory" and d["path"] == str(h / "d") and d["permissions"][0] == "d", d
    ln = ok(call(ev, "file.stat", {"path": str(h / "ln")}), "file.stat")["entry"]
    assert ln["type"] == "symlink" and ln["symlink_target"] == str(h / "f.txt"), ln
    dg = ok(call(ev, "file.stat", {"path": str(h / "dangling")}), "file.stat")["entry"]
    assert dg["symlink_target"] == "/no/where", dg
    err = call(ev, "file.stat", {"path": str(h / "missing")})
    assert_error(err, "not_found")
    assert err["extras"]["errno"] == "ENOENT" and err["extras"]["path"] == str(h / "missing"), fmt(err)
    assert_error(call(ev, "file.stat", {}), "bad_request")
    assert_error(call(ev, "file.stat", {"path": 3}), "bad_request")
    assert_error(call(ev, "file.stat", {"path": ""}), "bad_request")


def test_list_walk_order_depth_and_cap(termd, ev):
    h = termd.home / "tree"
    for p in ("b/y", "b/x", "a", "c/z/deep"):
        os.makedirs(h / p)
    (h / "b" / "x" / "f").write_text("x")
    (h / "a.txt").write_text("a")
    x = ok(call(ev, "file.list", {"path": str(h)}), "file.list")
    assert [e["name"] for e in x["entries"]] == ["a", "a.txt", "b", "c"], x
    assert x["truncated"] is False and x["path"] == str(h)
    x = ok(call(ev, "file.list", {"path": str(h), "depth": 2}), "file.list")
    rel = [os.path.relpath(e["path"], h) for e in x["entries"]]
    assert rel == ["a", "a.txt", "b", "b/x", "b/y", "c", "c/z"], rel
    x = ok(call(ev, "file.list", {"path": str(h), "depth": 3}), "file.list")
    rel = [os.path.relpath(e["path"], h) for e in x["entries"]]
    assert rel == ["a", "a.txt", "b", "b/x", "b/x/f", "b/y", "c", "c/z", "c/z/deep"], rel
    x = ok(call(ev, "file.list", {"path": str(h), "depth": 3, "max_entries": 4}), "file.list")
    assert len(x["entries"]) == 4 and x["truncated"] is True, x
    e = call(ev, "file.list", {"path": str(h / "a.txt")})
    assert_error(e, "bad_request")
    assert e["extras"]["errno"] == "ENOTDIR", fmt(e)
    assert_error(call(ev, "file.list", {"path": str(h / "nope")}), "not_found")
    for bad in ({"path": str(h), "depth": 0}, {"path": str(h), "depth": 65},
                {"path": str(h), "max_entries": 0}, {"path": str(h), "depth": "2"}):
        assert_error(call(ev, "file.list", bad), "bad_request")


def test_mkdir_move_remove(termd, ev):
    h = termd.home
    x = ok(call(ev, "file.mkdir", {"path": str(h / "p/q/r")}), "file.mkdir")
    assert x["created"] == [str(h / "p"), str(h / "p/q"), str(h / "p/q/r")], x
    assert x["entry"]["type"] == "directory" and os.path.isdir(h / "p/q/r")
    e = call(ev, "file.mkdir", {"path": str(h / "p/q/r")})
    assert_error(e, "bad_request")
    assert e["extras"]["errno"] == "EEXIST", fmt(e)
    x = ok(call(ev, "file.mkdir", {"path": str(h / "p/q/r"), "exist_ok": True}), "file.mkdir")
    assert x["created"] == []
    e = call(ev, "file.mkdir", {"path": str(h / "s/t"), "parents": False})
    assert_error(e, "not_found")
    # move makes the destination's folder
    (h / "m.txt").write_text("move me")
    x = ok(call(ev, "file.move", {"source": str(h / "m.txt"), "destination": str(h / "new/dir/m2.txt")}),
           "file.move")
    assert x["entry"]["path"] == str(h / "new/dir/m2.txt") and x["source"] == str(h / "m.txt"), x
    assert x["created"] == [str(h / "new"), str(h / "new/dir")], x
    assert (h / "new/dir/m2.txt").read_text() == "move me" and not (h / "m.txt").exists()
    assert_error(call(ev, "file.move", {"source": str(h / "gone"), "destination": str(h / "x")}),
                 "not_found")
    assert_error(call(ev, "file.move", {"source": str(h / "p")}), "bad_request")
    # remove: a file, an empty folder, a full one only with recursive
    x = ok(call(ev, "file.remove", {"path": str(h / "new/dir/m2.txt")}), "file.remove")
    assert x == {"path": str(h / "new/dir/m2.txt"), "type": "file"}, x
    e = call(ev, "file.remove", {"path": str(h / "p")})
    assert_error(e, "bad_request")
    assert e["extras"]["errno"] == "ENOTEMPTY" and (h / "p/q/r").is_dir(), fmt(e)
    ok(call(ev, "file.remove", {"path": str(h / "p"), "recursive": True}), "file.remove")
    assert not (h / "p").exists()
    os.symlink(str(h / "new"), h / "link")
    ok(call(ev, "file.remove", {"path": str(h / "link")}), "file.remove")   # the link, not its folder
    assert (h / "new").is_dir() and not os.path.lexists(h / "link")
    assert_error(call(ev, "file.remove", {"path": str(h / "p")}), "not_found")
    assert_error(call(ev, "file.remove", {"path": "/"}), "bad_request")
    assert_error(call(ev, "file.remove", {"path": "/tmp/../"}), "bad_request")


def test_permission_denied_names_the_errno(termd, ev):
    if os.geteuid() == 0:
        # root reads anything; a read-only file system still says no
        e = call(ev, "file.mkdir", {"path": "/proc/termd-test-dir"})
        assert e.get("observation") == "error", fmt(e)
        assert e["extras"]["errno"] in ("ENOENT", "EACCES", "EPERM", "EROFS"), fmt(e)
        return
    d = termd.home / "locked"
    d.mkdir()
    os.chmod(d, 0)
    try:
        e = call(ev, "file.list", {"path": str(d)})
        assert e["extras"]["errno"] == "EACCES", fmt(e)
    finally:
        os.chmod(d, 0o755)


def test_view_token_cannot_use_them(termd_factory, tmp_path):
    vt = tmp_path / "view"
    vt.write_text("viewsecret\n")
    t = termd_factory(args=("--view-token-file", str(vt)), token="fullsecret")
    ro = t.events(token="viewsecret")
    for action, args in (("file.stat", {"path": "/etc"}), ("file.list", {"path": "/"}),
                         ("file.mkdir", {"path": str(t.home / "x")}),
                         ("file.move", {"source": "/etc/hostname", "destination": str(t.home / "h")}),
                         ("file.remove", {"path": str(t.home)})):
        assert_error(call(ro, action, args), "forbidden")
    assert t.home.is_dir() and not (t.home / "x").exists()


def test_envd_filesystem_calls_are_actions_on_the_stream(termd_factory):
    tok = "fsops-envd-token"
    td = termd_factory(token=tok, tcp=True)
    sub = td.events(token=tok)
    assert call(sub, "subscribe").get("observation") == "subscribe"
    port = int(td.url.rsplit(":", 1)[1])

    def unary(method, msg):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=T)
        c.request("POST", "/filesystem.Filesystem/" + method, body=json.dumps(msg),
                  headers={"Content-Type": "application/json", "X-Access-Token": tok})
        r = c.getresponse()
        return r.status, json.loads(r.read() or b"{}")

    d = str(td.home / "envd-dir")
    st, m = unary("MakeDir", {"path": d})
    assert st == 200 and m["entry"]["type"] == "FILE_TYPE_DIRECTORY" and m["entry"]["path"] == d, m
    assert isinstance(m["entry"]["size"], str), m   # int64 as a string
    os.setxattr(d, "user.e2b.owner-note", b"kept")
    st, m = unary("Stat", {"path": d})
    assert st == 200 and m["entry"]["metadata"] == {"owner-note": "kept"}, m
    st, m = unary("ListDir", {"path": str(td.home), "depth": 1})
    assert st == 200 and any(e["path"] == d for e in m["entries"]), m
    st, m = unary("Move", {"source": d, "destination": d + "2"})
    assert st == 200 and m["entry"]["path"] == d + "2", m
    st, m = unary("Remove", {"path": d + "2"})
    assert st == 200
    st, m = unary("Remove", {"path": d + "2"})   # already gone: fine, as envd
    assert st == 200
    st, m = unary("Stat", {"path": d + "2"})
    assert st == 404 and m["code"] == "not_found", m
    st, m = unary("MakeDir", {"path": str(td.home)})
    assert st == 409 and m["code"] == "already_exists", m
    seen = []
    while len(seen) < 8:
        o = sub.recv_obs(T)
        assert o is not None, seen
        seen.append(o["observation"])
    assert seen == ["file.mkdir", "file.stat", "file.list", "file.move", "file.remove",
                    "error", "error", "error"], seen


def test_recursive_remove_leaves_what_links_lead_to(termd, ev):
    """A tree holding symlinks to a folder and a file outside it: the tree
    goes, the links with it, and nothing they lead to."""
    h = termd.home
    out = h / "outside"
    (out / "sub").mkdir(parents=True)
    (out / "keep.txt").write_text("keep")
    (out / "sub" / "deep.txt").write_text("deep")
    tree = h / "tree"
    (tree / "nested").mkdir(parents=True)
    (tree / "own.txt").write_text("own")
    os.symlink(str(out), tree / "link")
    os.symlink(str(out), tree / "nested" / "inner-link")
    os.symlink(str(out / "keep.txt"), tree / "file-link")
    x = ok(call(ev, "file.remove", {"path": str(tree), "recursive": True}), "file.remove")
    assert x["path"] == str(tree) and x["type"] == "directory", x
    assert not os.path.lexists(tree)
    assert (out / "keep.txt").read_text() == "keep"
    assert (out / "sub" / "deep.txt").read_text() == "deep"


def test_modified_is_the_whole_time_to_its_nanoseconds(termd, ev):
    """`modified` compared whole: a whole second has no fraction, and a
    whole millisecond, a microsecond and a nanosecond time each have the
    digits they need (os.utime with ns sets them exactly)."""
    h = termd.home
    base = 1700000000   # 2023-11-14T22:13:20Z
    for ns, want in ((0, "2023-11-14T22:13:20Z"),
                     (123000000, "2023-11-14T22:13:20.123Z"),
                     (7000000, "2023-11-14T22:13:20.007Z"),
                     (123456000, "2023-11-14T22:13:20.123456Z"),
                     (123456789, "2023-11-14T22:13:20.123456789Z")):
        f = h / ("t%d" % ns)
        f.write_text("x")
        os.utime(f, ns=(base * 10**9, base * 10**9 + ns))
        assert os.stat(f).st_mtime_ns == base * 10**9 + ns   # the file system keeps them
        e = ok(call(ev, "file.stat", {"path": str(f)}), "file.stat")["entry"]
        assert e["modified"] == want, (ns, e["modified"], want)


def test_mkdir_exist_ok_is_for_a_folder_only(termd, ev):
    """exist_ok accepts an existing folder, never a file in the way."""
    h = termd.home
    (h / "plain").write_text("a file")
    e = call(ev, "file.mkdir", {"path": str(h / "plain"), "exist_ok": True})
    assert_error(e, "bad_request")
    assert e["extras"]["errno"] == "EEXIST" and e["extras"]["path"] == str(h / "plain"), fmt(e)
    e = call(ev, "file.mkdir", {"path": str(h / "plain"), "exist_ok": True, "parents": False})
    assert_error(e, "bad_request")
    assert e["extras"]["errno"] == "EEXIST", fmt(e)
    assert (h / "plain").is_file() and (h / "plain").read_text() == "a file"
    (h / "folder").mkdir()
    x = ok(call(ev, "file.mkdir", {"path": str(h / "folder"), "exist_ok": True}), "file.mkdir")
    assert x["created"] == [] and x["entry"]["type"] == "directory", x


def test_list_shows_a_symlinked_folder_as_the_link(termd, ev):
    """Recursion does not go through a symlink to a folder: the link is an
    entry of its own (type symlink), its folder's entries are not listed
    under it."""
    h = termd.home
    real = h / "real"
    (real / "inside").mkdir(parents=True)
    (real / "inside" / "f.txt").write_text("x")
    tree = h / "walk"
    (tree / "d").mkdir(parents=True)
    (tree / "d" / "in.txt").write_text("x")
    os.symlink(str(real), tree / "ln")
    os.symlink("d", tree / "rel-ln")
    x = ok(call(ev, "file.list", {"path": str(tree), "depth": 4}), "file.list")
    rel = [os.path.relpath(e["path"], tree) for e in x["entries"]]
    assert rel == ["d", "d/in.txt", "ln", "rel-ln"], rel
    by = {os.path.relpath(e["path"], tree): e for e in x["entries"]}
    assert by["ln"]["type"] == "symlink" and by["ln"]["symlink_target"] == str(real), by["ln"]
    assert by["rel-ln"]["type"] == "symlink" and by["rel-ln"]["symlink_target"] == str(tree / "d")
    assert x["truncated"] is False
