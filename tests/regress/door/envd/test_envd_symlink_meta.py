"""Issue 32 items 2 and 3: symlinks and upload metadata as e2b's envd does
them (reference/e2b-envd.md; envd's GetEntryInfo in shared/pkg/filesystem/
entry.go, its api/upload.go and xattr.go).

- An EntryInfo for a symlink (Stat, ListDir, Move, WatchDir's entries) has
  what the link leads to: its type, its permission bits, its metadata, and
  symlinkTarget where it leads (resolved to the end, absolute); a dangling
  link is FILE_TYPE_UNSPECIFIED, mode 0, symlinkTarget its own path; never
  FILE_TYPE_SYMLINK. mode is the permission bits only (Go's Perm()).
  termd's own file.stat still describes the link as itself.
- POST /files stores the X-Metadata-<key> headers (folded by the front into
  X-Termd-Metadata: k=v&k=v, form-urlencoded) as user.e2b.<key> extended
  attributes of each uploaded file, as the request's user; answers them in
  the upload's metadata; Stat/ListDir/Move show them; an upload without
  metadata clears the old ones; bad ones are a 400 before anything is
  written."""

import http.client
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse
from pathlib import Path

import pytest

from conftest import TERMD_BIN
from test_envd import TOKEN, request, start, stream, unary

FS = "filesystem.Filesystem/"


def front_available():
    """termd folds X-Metadata-* itself once its --front lands (branch i32f)."""
    try:
        out = subprocess.run([TERMD_BIN, "--help"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "--front" in out


def stat(td, path):
    status, _, m = unary(td, FS + "Stat", {"path": str(path)})
    assert status == 200, (status, m)
    return m["entry"]


def listdir(td, path, depth=1):
    status, _, m = unary(td, FS + "ListDir", {"path": str(path), "depth": depth})
    assert status == 200, (status, m)
    return {os.path.relpath(e["path"], str(path)): e for e in m["entries"]}


def inner_socket(td):
    """The unix socket lws listens on behind the front (rundir/front.sock),
    found through termd's own fds: what the front's requests arrive on."""
    inodes = set()
    fd_dir = "/proc/%d/fd" % td.proc.pid
    for fd in os.listdir(fd_dir):
        try:
            link = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    with open("/proc/net/unix") as f:
        for line in f.readlines()[1:]:
            parts = line.split()
            if len(parts) >= 8 and parts[6] in inodes and parts[7].endswith("/front.sock"):
                return parts[7]
    raise AssertionError("termd %d has no front.sock" % td.proc.pid)


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path, timeout=30):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


def upload(td, path, data=b"data", meta=None, headers=None):
    """POST /files (octet-stream): (status, answer). With meta (a string
    sent as is, or a dict/list of pairs form-encoded) the request is sent as
    the front sends it, X-Termd-Metadata on lws's socket behind the front,
    so the parser's every check is reached (through the front a client's
    X-Metadata-* are always encoded well: test_upload_metadata_from_x_
    metadata_headers)."""
    h = {"Content-Type": "application/octet-stream"}
    if meta is None:
        h.update(headers or {})
        status, _, body = request(td, "POST", "/files?path=%s" % urllib.parse.quote(str(path)),
                                  data, h)
        return status, json.loads(body) if body else None
    h["X-Termd-Metadata"] = meta if isinstance(meta, str) else urllib.parse.urlencode(meta)
    h["X-Access-Token"] = TOKEN
    h.update(headers or {})
    c = _UnixHTTP(inner_socket(td))
    c.request("POST", "/files?path=%s" % urllib.parse.quote(str(path)), body=data, headers=h)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, json.loads(body) if body else None


def xattrs(path):
    return {k[9:]: os.getxattr(path, k).decode()
            for k in os.listxattr(path) if k.startswith("user.e2b.")}


# ================================================================ symlinks

def make_links(h):
    (h / "f.txt").write_bytes(b"12345")
    os.chmod(h / "f.txt", 0o640)
    os.mkdir(h / "d")
    os.chmod(h / "d", 0o750)
    os.symlink("f.txt", h / "to_file")              # relative text
    os.symlink(str(h / "d"), h / "to_dir")          # absolute text
    os.symlink("/no/where/at/all", h / "dangling")
    os.symlink("to_file", h / "chain")              # chain -> to_file -> f.txt
    os.symlink("loop_b", h / "loop_a")
    os.symlink("loop_a", h / "loop_b")


def check_link_entries(h, get):
    f = get("to_file")
    assert f["type"] == "FILE_TYPE_FILE" and f["mode"] == 0o640, f
    assert f["symlinkTarget"] == str(h / "f.txt"), f
    assert f["name"] == "to_file" and f["path"] == str(h / "to_file"), f
    # the link's own size, permissions (Go's "L") and owner, as envd's Lstat
    assert f["size"] == str(len("f.txt")) and f["permissions"] == "Lrwxrwxrwx", f
    d = get("to_dir")
    assert d["type"] == "FILE_TYPE_DIRECTORY" and d["mode"] == 0o750, d
    assert d["symlinkTarget"] == str(h / "d"), d
    c = get("chain")                                   # followed to the end
    assert c["type"] == "FILE_TYPE_FILE" and c["mode"] == 0o640, c
    assert c["symlinkTarget"] == str(h / "f.txt"), c
    for name in ("dangling", "loop_a"):
        g = get(name)
        assert g["type"] == "FILE_TYPE_UNSPECIFIED" and g["mode"] == 0, g
        assert g["symlinkTarget"] == str(h / name), g  # its own path
    # plain entries: no symlinkTarget
    p = get("f.txt")
    assert p["type"] == "FILE_TYPE_FILE" and p["mode"] == 0o640 and "symlinkTarget" not in p, p


def test_stat_symlinks_as_envd(termd_factory, tmp_path):
    td = start(termd_factory)
    h = tmp_path / "links"
    h.mkdir()
    make_links(h)
    check_link_entries(h, lambda n: stat(td, h / n))
    # metadata through the link (envd's xattr.List follows it)
    os.setxattr(h / "f.txt", "user.e2b.tag", b"linked")
    assert stat(td, h / "chain")["metadata"] == {"tag": "linked"}
    assert "metadata" not in stat(td, h / "dangling")
    # mode is the permission bits only, as Go's FileMode.Perm(): no sticky bit
    os.mkdir(h / "sticky")
    os.chmod(h / "sticky", 0o1777)
    os.symlink("sticky", h / "to_sticky")
    assert stat(td, h / "sticky")["mode"] == 0o777
    assert stat(td, h / "to_sticky")["mode"] == 0o777
    # never FILE_TYPE_SYMLINK anywhere
    for n in os.listdir(h):
        assert stat(td, h / n)["type"] != "FILE_TYPE_SYMLINK", n
    # termd's own file.stat describes the link as itself, and where it leads
    ev = td.events()
    e = ev.call("file.stat", {"path": str(h / "chain")}, timeout=60)["extras"]["entry"]
    assert e["type"] == "symlink" and e["symlink_target"] == str(h / "f.txt"), e
    assert e["target"] == {"type": "file", "mode": 0o640, "metadata": {"tag": "linked"}}, e
    e = ev.call("file.stat", {"path": str(h / "dangling")}, timeout=60)["extras"]["entry"]
    assert e["type"] == "symlink" and e["symlink_target"] == "/no/where/at/all", e
    assert "target" not in e, e


def test_listdir_symlinks_as_envd(termd_factory, tmp_path):
    td = start(termd_factory)
    h = tmp_path / "links"
    h.mkdir()
    make_links(h)
    (h / "d" / "inner").write_text("x")
    got = listdir(td, h)
    check_link_entries(h, lambda n: got[n])
    assert not any(e["type"] == "FILE_TYPE_SYMLINK" for e in got.values()), got
    deep = listdir(td, h, depth=2)
    assert "d/inner" in deep and "to_dir/inner" not in deep, deep   # a link is not entered
    # a link to a folder as the path lists the folder, under the link's path
    via = listdir(td, h / "to_dir")
    assert list(via) == ["inner"] and via["inner"]["path"] == str(h / "to_dir" / "inner"), via


def test_move_and_make_dir_symlinks_as_envd(termd_factory, tmp_path):
    td = start(termd_factory)
    h = tmp_path / "links"
    h.mkdir()
    make_links(h)
    status, _, m = unary(td, FS + "Move", {"source": str(h / "to_dir"),
                                            "destination": str(h / "moved" / "dir_link")})
    assert status == 200, m
    e = m["entry"]
    assert e["type"] == "FILE_TYPE_DIRECTORY" and e["mode"] == 0o750, e
    assert e["symlinkTarget"] == str(h / "d") and e["path"] == str(h / "moved" / "dir_link"), e
    # a relative link moved elsewhere leads nowhere now
    status, _, m = unary(td, FS + "Move", {"source": str(h / "to_file"),
                                            "destination": str(h / "moved" / "file_link")})
    assert status == 200, m
    e = m["entry"]
    assert e["type"] == "FILE_TYPE_UNSPECIFIED" and e["mode"] == 0, e
    assert e["symlinkTarget"] == str(h / "moved" / "file_link"), e
    # MakeDir below a linked folder: a folder (its permission bits), no target
    status, _, m = unary(td, FS + "MakeDir", {"path": str(h / "moved" / "dir_link" / "new")})
    assert status == 200, m
    e = m["entry"]
    assert e["type"] == "FILE_TYPE_DIRECTORY" and "symlinkTarget" not in e, e
    assert e["mode"] == os.stat(h / "d" / "new").st_mode & 0o777, e
    # MakeDir on a link to a folder: it is there already
    status, _, m = unary(td, FS + "MakeDir", {"path": str(h / "moved" / "dir_link")})
    assert status == 409 and m["code"] == "already_exists", (status, m)


def test_watch_entry_of_a_symlink(termd_factory, tmp_path):
    td = start(termd_factory)
    h = tmp_path / "w"
    h.mkdir()
    (h / "target.txt").write_text("t")
    os.chmod(h / "target.txt", 0o600)
    os.setxattr(h / "target.txt", "user.e2b.secret", b"s")
    status, _, m = unary(td, FS + "CreateWatcher", {"path": str(h), "includeEntry": True})
    assert status == 200, m
    wid = m["watcherId"]
    os.symlink("target.txt", h / "ln")
    deadline = time.monotonic() + 30
    entry = None
    while entry is None and time.monotonic() < deadline:
        status, _, m = unary(td, FS + "GetWatcherEvents", {"watcherId": wid})
        assert status == 200, m
        for e in m.get("events", []):
            if e.get("name") == "ln" and e.get("type") == "EVENT_TYPE_CREATE":
                entry = e.get("entry")
                assert entry, e
        if entry is None:
            time.sleep(0.05)
    assert entry, "no CREATE event for the link within 30 s"
    assert entry["type"] == "FILE_TYPE_FILE" and entry["mode"] == 0o600, entry
    assert entry["symlinkTarget"] == str(h / "target.txt"), entry
    # described on the loop with termd's ids, not the user's: a link's
    # target (anywhere) gives no metadata there
    assert "metadata" not in entry, entry
    unary(td, FS + "RemoveWatcher", {"watcherId": wid})


# ================================================================ metadata

def test_upload_metadata_stored_answered_listed(termd_factory, tmp_path):
    td = start(termd_factory)
    f = tmp_path / "up" / "a.txt"
    status, ans = upload(td, f, b"hello", "Owner=alice&note=a%20b+c%26d%3De&empty=")
    assert status == 200, ans
    want = {"owner": "alice", "note": "a b c&d=e", "empty": ""}
    assert ans == [{"path": str(f), "name": "a.txt", "type": "file", "metadata": want}], ans
    assert f.read_bytes() == b"hello" and xattrs(f) == want
    assert stat(td, f)["metadata"] == want
    assert listdir(td, f.parent)["a.txt"]["metadata"] == want
    status, _, m = unary(td, FS + "Move", {"source": str(f), "destination": str(tmp_path / "b")})
    assert status == 200 and m["entry"]["metadata"] == want, m
    # multipart: every file of the upload gets it
    body = (b"--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s\"\r\n\r\n"
            b"one\r\n--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s\""
            b"\r\n\r\ntwo\r\n--XyZ--\r\n") % (str(tmp_path / "m1").encode(),
                                             str(tmp_path / "m2").encode())
    status, _, raw = request(td, "POST", "/files", body,
                             {"Content-Type": "multipart/form-data; boundary=XyZ",
                              "X-Metadata-K": "v"})   # through the front, as a client
    ans = json.loads(raw)
    assert status == 200 and [a["metadata"] for a in ans] == [{"k": "v"}] * 2, ans
    assert xattrs(tmp_path / "m1") == xattrs(tmp_path / "m2") == {"k": "v"}


def test_upload_metadata_replaced_and_cleared(termd_factory, tmp_path):
    td = start(termd_factory)
    f = tmp_path / "c.txt"
    assert upload(td, f, b"1", "a=1&b=2")[0] == 200
    os.setxattr(f, "user.other", b"not e2b's")
    status, ans = upload(td, f, b"2", "b=3")            # a goes, b is replaced
    assert status == 200 and ans[0]["metadata"] == {"b": "3"}, ans
    assert xattrs(f) == {"b": "3"}
    status, ans = upload(td, f, b"3")                   # none: all of user.e2b.* go
    assert status == 200 and "metadata" not in ans[0], ans
    assert xattrs(f) == {} and os.getxattr(f, "user.other") == b"not e2b's"
    assert "metadata" not in stat(td, f)
    assert f.read_bytes() == b"3"


def test_upload_metadata_keys(termd_factory, tmp_path):
    td = start(termd_factory)
    f = tmp_path / "k.txt"
    # lowercased; the last of a key wins; an empty key (X-Metadata-) is
    # skipped as envd skips it; a pair without '=' is an empty value
    status, ans = upload(td, f, b"x", "MiXeD=1&dup=first&DUP=last&=nokey&bare&&")
    assert status == 200, ans
    want = {"mixed": "1", "dup": "last", "bare": ""}
    assert ans[0]["metadata"] == want and xattrs(f) == want, ans
    # many keys: all kept
    many = [("key%03d" % i, "value-%d" % i) for i in range(60)]
    status, ans = upload(td, f, b"x", many)
    assert status == 200 and ans[0]["metadata"] == dict(many), ans
    assert xattrs(f) == dict(many)
    assert len(stat(td, f)["metadata"]) == 60
    # the longest key an extended attribute's name takes (255 with user.e2b.)
    status, ans = upload(td, f, b"x", [("k" * 246, "v")])
    assert status == 200 and xattrs(f) == {"k" * 246: "v"}, ans
    # near the most envd takes (4096 bytes of names with user.e2b. and
    # values; ext4 holds a little less in one attribute), every byte
    # percent-encoded by the front: an 11 KiB header, taken
    big = "&" * 3900
    status, ans = upload(td, f, b"x", [("k", big)])
    assert status == 200 and xattrs(f) == {"k": big}, ans
    status, ans = upload(td, f, b"x", [("k", "&" * (4096 - 9))])
    assert status == 400 and "exceeds 4096 bytes" in ans["message"], ans


def test_upload_metadata_refused(termd_factory, tmp_path):
    td = start(termd_factory)
    f = tmp_path / "never.txt"
    for meta, words in (("a=%zz", "x-www-form-urlencoded"),
                        ("a=1&b=%4", "x-www-form-urlencoded"),
                        ("%G1=v", "x-www-form-urlencoded"),
                        ("a=line%0Abreak", "non-printable"),
                        ("a%00b=v", "non-printable"),
                        ("caf%C3%A9=v", "non-printable"),
                        ("k" * 247 + "=v", "exceeds 246 bytes"),
                        # envd's bound on names (with user.e2b.) and values together;
                        # short pairs: the header itself stays within lws's 4 KiB
                        ("&".join("k%03d=" % i for i in range(320)), "exceeds 4096 bytes")):
        status, ans = upload(td, f, b"x", meta)
        assert status == 400 and ans["code"] == 400, (meta, status, ans)
        assert ans["message"].startswith("invalid metadata: ") and words in ans["message"], \
            (meta, ans)
        assert not f.exists(), meta                      # checked before anything is written


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user needs termd to be root")
def test_upload_metadata_as_the_user(termd_factory, request):
    td = start(termd_factory, args=("--user", "nobody"))
    base = Path(tempfile.mkdtemp(prefix="termd-meta-"))
    request.addfinalizer(lambda: shutil.rmtree(base, ignore_errors=True))
    os.chmod(base, 0o777)
    f = base / "nob.txt"
    status, ans = upload(td, f, b"x", "who=nobody")
    assert status == 200 and ans[0]["metadata"] == {"who": "nobody"}, ans
    assert os.stat(f).st_uid != 0 and xattrs(f) == {"who": "nobody"}
    # a file nobody may not write keeps its attributes: 401, nothing changed
    g = base / "roots.txt"
    g.write_text("root's")
    os.chmod(g, 0o644)
    os.setxattr(g, "user.e2b.keep", b"1")
    status, ans = upload(td, g, b"x", "who=nobody")
    assert status == 401, ans
    assert xattrs(g) == {"keep": "1"} and g.read_text() == "root's"


@pytest.mark.skipif(not front_available(),
                    reason="termd has no --front yet (issue 32's front, branch i32f): "
                           "X-Metadata-* headers reach the door only folded by it")
def test_upload_metadata_from_x_metadata_headers(termd_factory, tmp_path):
    td = start(termd_factory)
    f = tmp_path / "front.txt"
    status, ans = upload(td, f, b"x", headers={"X-Metadata-Foo": "bar baz",
                                               "X-Metadata-Other": "a&b=c"})
    assert status == 200, ans
    assert ans[0]["metadata"] == {"foo": "bar baz", "other": "a&b=c"}, ans
    assert xattrs(f) == {"foo": "bar baz", "other": "a&b=c"}


@pytest.mark.parametrize("front", ["on", "off"])
def test_a_clients_own_x_termd_metadata_is_never_taken(termd_factory, tmp_path, front):
    """X-Termd-Metadata is the front's: a client that sends it itself gets no
    metadata stored, whether it comes through the front (which drops a
    client's X-Termd-* headers) or straight to lws (--front off: the header
    is read only on connections from the front's socket)."""
    td = start(termd_factory, args=["--front", front])
    f = tmp_path / ("spoof-%s.txt" % front)
    status, ans = upload(td, f, b"x", headers={"X-Termd-Metadata": "spoof=1"})
    assert status == 200, ans
    assert ans[0].get("metadata") in (None, {}), ans
    assert f.read_bytes() == b"x" and xattrs(f) == {}


def test_upload_events_as_envd(termd_factory, tmp_path):
    """envd opens an upload as root and chowns it to the user before it
    writes: a watcher sees CREATE, CHMOD, WRITE for a new file (e2b's SDK
    tests count them: test_watch_iterated). termd writes as the user; its
    chown to the user's own ids gives the same CHMOD, in the same place."""
    td = start(termd_factory)
    d = tmp_path / "ev"
    d.mkdir()
    status, _, m = unary(td, FS + "CreateWatcher", {"path": str(d)})
    assert status == 200, m
    wid = m["watcherId"]
    status, ans = upload(td, d / "new.txt", b"hello")
    assert status == 200, ans
    deadline = time.monotonic() + 20
    evs = []
    while time.monotonic() < deadline:
        status, _, m = unary(td, FS + "GetWatcherEvents", {"watcherId": wid})
        assert status == 200, m
        evs += [e["type"][len("EVENT_TYPE_"):] for e in m["events"] if e["name"] == "new.txt"]
        if "WRITE" in evs:
            break
        time.sleep(0.05)
    assert evs[:3] == ["CREATE", "CHMOD", "WRITE"], evs
    assert (d / "new.txt").read_bytes() == b"hello"
    assert (d / "new.txt").stat().st_uid == os.geteuid()
