"""PROTOCOL.md section 4 "Files": `read` (line ranges, base64, sha256,
errors), `write` (parents, atomic temp + rename, mode kept or given,
expected_sha256) and `edit` (view, create, str_replace with the
exactly-once rule, insert, undo_edit through several edits), with files
lacking a trailing newline, CRLF files, UTF-8 text, paths with spaces,
relative paths against main's cwd and a 20 MB binary round trip."""

import base64
import hashlib
import os
import pwd
import stat
import threading
import time

import pytest

from tdtest import assert_error, content, fmt, run_done

EMPTY_SHA = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
ABC_SHA = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def sha(b):
    return hashlib.sha256(b).hexdigest()


def obs_ok(obs, kind):
    assert obs.get("observation") == kind, "expected %s, got %s" % (kind, fmt(obs))
    return obs


def read(ev, path, **args):
    a = {"path": str(path)}
    a.update(args)
    return ev.call("read", a)


def read_ok(ev, path, **args):
    return obs_ok(read(ev, path, **args), "read")


def write(ev, path, text, **args):
    a = {"path": str(path), "content": text}
    a.update(args)
    return ev.call("write", a)


def write_ok(ev, path, text, **args):
    return obs_ok(write(ev, path, text, **args), "write")


def edit(ev, command, path, **args):
    a = {"command": command, "path": str(path)}
    a.update(args)
    return ev.call("edit", a)


def edit_ok(ev, command, path, **args):
    return obs_ok(edit(ev, command, path, **args), "edit")


def mode_of(p):
    return stat.S_IMODE(os.stat(p).st_mode)


# ------------------------------------------------------------------ hello

def test_file_actions_are_listed_in_hello(ev):
    for a in ("read", "write", "edit"):
        assert a in ev.hello["extras"]["actions"], fmt(ev.hello)


# ------------------------------------------------------------------ read

def test_read_whole_file(ev, tmp_path):
    p = tmp_path / "a.txt"
    data = b"one\ntwo\nthree\n"
    p.write_bytes(data)
    obs = read_ok(ev, p)
    x = obs["extras"]
    assert content(obs) == "one\ntwo\nthree\n"
    assert x["path"] == str(p)
    assert x["total_lines"] == 3
    assert x["sha256"] == sha(data)
    assert x["encoding"] == "utf-8"
    assert (x["start"], x["end"]) == (1, 3)


def test_read_line_ranges(ev, tmp_path):
    p = tmp_path / "r.txt"
    data = "".join("line %d\n" % i for i in range(1, 11)).encode()
    p.write_bytes(data)
    obs = read_ok(ev, p, start=3, end=5)
    assert content(obs) == "line 3\nline 4\nline 5\n"
    assert (obs["extras"]["start"], obs["extras"]["end"]) == (3, 5)
    # the hash and line count are the whole file's, whatever the range
    assert obs["extras"]["sha256"] == sha(data) and obs["extras"]["total_lines"] == 10
    assert content(read_ok(ev, p, start=9)) == "line 9\nline 10\n"
    assert content(read_ok(ev, p, end=2)) == "line 1\nline 2\n"
    assert content(read_ok(ev, p, start=4, end=4)) == "line 4\n"
    # end past the last line: up to the end
    obs = read_ok(ev, p, start=10, end=99)
    assert content(obs) == "line 10\n" and obs["extras"]["end"] == 10
    assert content(read_ok(ev, p, start=1, end=-1)) == data.decode()


@pytest.mark.parametrize("args", [{"start": 0}, {"start": 5, "end": 4}, {"start": 11},
                                  {"start": 1.5}, {"start": "2"}, {"end": -2},
                                  {"encoding": "latin-1"}])
def test_read_bad_ranges_and_arguments(ev, tmp_path, args):
    p = tmp_path / "r.txt"
    p.write_text("".join("l%d\n" % i for i in range(10)))
    assert_error(read(ev, p, **args), "bad_request")


def test_read_missing_path_argument(ev):
    assert_error(ev.call("read", {}), "bad_request")
    assert_error(ev.call("read", {"path": ""}), "bad_request")
    assert_error(ev.call("read", {"path": 7}), "bad_request")


def test_read_file_without_trailing_newline(ev, tmp_path):
    p = tmp_path / "nonl.txt"
    p.write_bytes(b"first\nsecond\nlast")
    obs = read_ok(ev, p)
    assert content(obs) == "first\nsecond\nlast"
    assert obs["extras"]["total_lines"] == 3
    assert content(read_ok(ev, p, start=3)) == "last"
    assert content(read_ok(ev, p, start=2, end=2)) == "second\n"
    p.write_bytes(b"only")
    obs = read_ok(ev, p)
    assert content(obs) == "only" and obs["extras"]["total_lines"] == 1


def test_read_crlf_file_keeps_crlf(ev, tmp_path):
    p = tmp_path / "dos.txt"
    data = b"alpha\r\nbeta\r\ngamma\r\n"
    p.write_bytes(data)
    obs = read_ok(ev, p)
    assert content(obs) == "alpha\r\nbeta\r\ngamma\r\n"
    assert obs["extras"]["total_lines"] == 3 and obs["extras"]["sha256"] == sha(data)
    assert content(read_ok(ev, p, start=2, end=2)) == "beta\r\n"


def test_read_empty_file(ev, tmp_path):
    p = tmp_path / "empty"
    p.write_bytes(b"")
    obs = read_ok(ev, p)
    assert content(obs) == ""
    assert obs["extras"]["total_lines"] == 0 and obs["extras"]["sha256"] == EMPTY_SHA


def test_read_utf8_text(ev, tmp_path):
    p = tmp_path / "u.txt"
    text = "café é\n日本語のテキスト\n🎉 emoji\n"
    p.write_bytes(text.encode("utf-8"))
    obs = read_ok(ev, p)
    assert content(obs) == text
    assert obs["extras"]["sha256"] == sha(text.encode("utf-8"))
    assert content(read_ok(ev, p, start=2, end=2)) == "日本語のテキスト\n"


def test_sha256_known_vectors(ev, tmp_path):
    p = tmp_path / "abc"
    p.write_bytes(b"abc")
    assert read_ok(ev, p)["extras"]["sha256"] == ABC_SHA
    # lengths around the 55/56/64-byte padding boundaries, and a few blocks
    for n in (55, 56, 57, 63, 64, 65, 119, 120, 1000):
        data = bytes((i * 7 + n) % 251 for i in range(n))
        p.write_bytes(data)
        assert read_ok(ev, p, encoding="base64")["extras"]["sha256"] == sha(data), n


def test_read_errors(ev, tmp_path):
    obs = read(ev, tmp_path / "nope.txt")
    assert_error(obs, "not_found")
    assert "nope.txt" in obs["content"]
    assert_error(read(ev, tmp_path / "nope" / "deeper.txt"), "not_found")
    assert_error(read(ev, tmp_path), "is_directory")
    nul = tmp_path / "nul.bin"
    nul.write_bytes(b"text\x00more\n")
    obs = read(ev, nul)
    assert_error(obs, "binary_file")
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("caf\xe9\n".encode("latin-1"))
    assert_error(read(ev, latin1), "binary_file")
    # base64 reads any bytes
    obs = read_ok(ev, latin1, encoding="base64")
    assert base64.b64decode(content(obs)) == b"caf\xe9\n"


def test_read_fifo_is_refused_without_blocking(ev, tmp_path):
    f = tmp_path / "fifo"
    os.mkfifo(f)
    t0 = time.monotonic()
    obs = read(ev, f)
    assert_error(obs, "io_error")
    assert time.monotonic() - t0 < 10
    assert ev.ping()["observation"] == "pong"


def test_read_unreadable_file_is_io_error(ev, tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads files whatever their mode")
    p = tmp_path / "secret"
    p.write_text("x\n")
    p.chmod(0)
    obs = read(ev, p)
    assert_error(obs, "io_error")
    assert "Permission denied" in obs["content"]


def test_read_too_large(ev, tmp_path):
    p = tmp_path / "huge.bin"
    with open(p, "wb") as f:
        f.truncate(65 * 1024 * 1024)  # sparse: costs no disk
    assert_error(read(ev, p, encoding="base64"), "too_large")
    assert_error(read(ev, p), "too_large")


CAP = 64 * 1024 * 1024   # FSIO_MAX_BYTES (termd/action/fsio.h; no option changes it)


def test_read_cap_is_exact(ev, tmp_path):
    """A text file of exactly the cap is read (its first line, the whole
    file's hash); one byte more is too_large. Off by one either way fails."""
    p = tmp_path / "at-cap.txt"
    data = b"first line\n" + b"y" * (CAP - 11)
    p.write_bytes(data)
    assert os.path.getsize(p) == CAP
    obs = obs_ok(ev.call("read", {"path": str(p), "end": 1}, timeout=120), "read")
    assert content(obs) == "first line\n"
    assert obs["extras"]["sha256"] == sha(data) and obs["extras"]["total_lines"] == 2
    with open(p, "ab") as f:
        f.write(b"y")
    assert os.path.getsize(p) == CAP + 1
    assert_error(ev.call("read", {"path": str(p), "end": 1}, timeout=120), "too_large")


def test_read_base64(ev, tmp_path):
    p = tmp_path / "bin"
    data = bytes(range(256)) * 3 + b"\n\x00tail"
    p.write_bytes(data)
    obs = read_ok(ev, p, encoding="base64")
    assert base64.b64decode(content(obs), validate=True) == data
    assert obs["extras"]["sha256"] == sha(data)
    assert obs["extras"]["encoding"] == "base64"
    # start/end are ignored for base64: always the whole file
    obs = read_ok(ev, p, encoding="base64", start=2, end=2)
    assert base64.b64decode(content(obs)) == data


def test_paths_with_spaces(ev, tmp_path):
    p = tmp_path / "dir with spaces" / "file name.txt"
    obs = write_ok(ev, p, "spaced out\n")
    assert obs["extras"]["path"] == str(p)
    assert p.read_text() == "spaced out\n"
    assert content(read_ok(ev, p)) == "spaced out\n"
    edit_ok(ev, "str_replace", p, old_str="spaced", new_str="still spaced")
    assert p.read_text() == "still spaced out\n"


def test_relative_paths_follow_main_cwd(ev, tmp_path):
    d = tmp_path / "x"
    d.mkdir()
    (d / "here.txt").write_text("found me\n")
    run_done(ev, "cd %s" % d)
    obs = read_ok(ev, "here.txt")
    assert content(obs) == "found me\n"
    assert obs["extras"]["path"] == str(d / "here.txt")
    obs = write_ok(ev, "sub/new.txt", "relative\n")
    assert obs["extras"]["path"] == str(d / "sub" / "new.txt")
    assert (d / "sub" / "new.txt").read_text() == "relative\n"
    obs = read_ok(ev, "./sub/../here.txt")
    assert obs["extras"]["path"] == str(d / "here.txt")
    edit_ok(ev, "create", "made.txt", file_text="by edit\n")
    assert (d / "made.txt").read_text() == "by edit\n"
    # the shell's later cd is followed too
    run_done(ev, "cd sub")
    assert content(read_ok(ev, "new.txt")) == "relative\n"


# ------------------------------------------------------------------ write

def test_write_creates_parents(ev, tmp_path):
    p = tmp_path / "a" / "b" / "c" / "new.txt"
    obs = write_ok(ev, p, "hello\n")
    x = obs["extras"]
    assert p.read_bytes() == b"hello\n"
    assert x["path"] == str(p) and x["bytes"] == 6 and x["sha256"] == sha(b"hello\n")
    assert x["created"] is True
    assert mode_of(p) == 0o644
    assert stat.S_IMODE(os.stat(tmp_path / "a" / "b").st_mode) & 0o700 == 0o700


def test_write_utf8_and_base64(ev, tmp_path):
    p = tmp_path / "u.txt"
    text = "é 日本語\n"
    obs = write_ok(ev, p, text)
    assert p.read_bytes() == text.encode("utf-8")
    assert obs["extras"]["bytes"] == len(text.encode("utf-8"))
    assert obs["extras"]["sha256"] == sha(text.encode("utf-8"))
    data = b"\x00\x01\xff\xfe binary\r\n"
    obs = write_ok(ev, p, base64.b64encode(data).decode(), encoding="base64")
    assert p.read_bytes() == data and obs["extras"]["bytes"] == len(data)
    assert obs["extras"]["sha256"] == sha(data)
    write_ok(ev, p, "")
    assert p.read_bytes() == b""


@pytest.mark.parametrize("bad", ["not base64!", "QUJD=", "QUJDR", "QU=JD"])
def test_write_invalid_base64(ev, tmp_path, bad):
    p = tmp_path / "x"
    p.write_text("keep\n")
    assert_error(write(ev, p, bad, encoding="base64"), "bad_request")
    assert p.read_text() == "keep\n"


def test_write_keeps_existing_mode(ev, tmp_path):
    p = tmp_path / "script.sh"
    p.write_text("#!/bin/sh\necho old\n")
    p.chmod(0o755)
    obs = write_ok(ev, p, "#!/bin/sh\necho new\n")
    assert mode_of(p) == 0o755
    assert obs["extras"]["mode"] == "0755" and obs["extras"]["created"] is False
    assert p.read_text() == "#!/bin/sh\necho new\n"
    p.chmod(0o600)
    write_ok(ev, p, "again\n")
    assert mode_of(p) == 0o600


def test_write_explicit_mode(ev, tmp_path):
    p = tmp_path / "m1"
    write_ok(ev, p, "x\n", mode="0600")
    assert mode_of(p) == 0o600
    write_ok(ev, p, "y\n", mode="755")
    assert mode_of(p) == 0o755
    q = tmp_path / "m2"
    write_ok(ev, q, "z\n", mode="0640")
    assert mode_of(q) == 0o640


@pytest.mark.parametrize("mode", ["999", "rwx", "", "0o99", "123456", "-1"])
def test_write_invalid_mode(ev, tmp_path, mode):
    p = tmp_path / "m"
    assert_error(write(ev, p, "x", mode=mode), "bad_request")
    assert not p.exists()


def test_write_mode_must_be_a_string(ev, tmp_path):
    assert_error(write(ev, tmp_path / "m", "x", mode=0o644), "bad_request")


def test_write_expected_sha256(ev, tmp_path):
    p = tmp_path / "cas.txt"
    p.write_bytes(b"v1\n")
    obs = write_ok(ev, p, "v2\n", expected_sha256=sha(b"v1\n"))
    assert p.read_bytes() == b"v2\n"
    # stale hash: nothing written, the current hash is reported
    obs = write(ev, p, "v3\n", expected_sha256=sha(b"v1\n"))
    assert_error(obs, "mismatch")
    assert obs["extras"]["sha256"] == sha(b"v2\n")
    assert p.read_bytes() == b"v2\n"
    # upper-case hex is the same hash
    write_ok(ev, p, "v3\n", expected_sha256=sha(b"v2\n").upper())
    assert p.read_bytes() == b"v3\n"
    # a missing file does not match a hash, even the empty file's ...
    q = tmp_path / "new.txt"
    assert_error(write(ev, q, "x", expected_sha256=EMPTY_SHA), "mismatch")
    assert not q.exists()
    # ... "" means "must not exist yet"
    write_ok(ev, q, "first\n", expected_sha256="")
    assert q.read_text() == "first\n"
    assert_error(write(ev, q, "second\n", expected_sha256=""), "mismatch")
    assert q.read_text() == "first\n"
    assert_error(write(ev, q, "x", expected_sha256="abc"), "bad_request")


def test_write_is_atomic_rename(ev, tmp_path):
    d = tmp_path / "atomic"
    d.mkdir()
    p = d / "f.txt"
    p.write_text("old\n")
    ino = os.stat(p).st_ino
    held = open(p, "rb")  # a reader holding the old file sees the old bytes
    try:
        write_ok(ev, p, "new content\n")
        assert held.read() == b"old\n"
    finally:
        held.close()
    assert os.stat(p).st_ino != ino, "write did not replace the file by rename"
    assert p.read_text() == "new content\n"
    assert sorted(os.listdir(d)) == ["f.txt"], "temporary files left behind"


def test_write_through_symlink_keeps_the_link(ev, tmp_path):
    real = tmp_path / "real.txt"
    real.write_text("old\n")
    real.chmod(0o640)
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    write_ok(ev, link, "via link\n")
    assert link.is_symlink()
    assert real.read_text() == "via link\n" and mode_of(real) == 0o640


def test_write_errors(ev, tmp_path):
    d = tmp_path / "adir"
    d.mkdir()
    assert_error(write(ev, d, "x"), "is_directory")
    assert_error(write(ev, str(tmp_path / "nodir") + "/", "x"), "is_directory")
    f = tmp_path / "afile"
    f.write_text("x")
    # a parent that is a file
    assert_error(write(ev, f / "child.txt", "x"), "io_error")
    assert_error(ev.call("write", {"path": str(tmp_path / "y")}), "bad_request")
    assert_error(write(ev, tmp_path / "y", "x", encoding="utf-16"), "bad_request")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert_error(write(ev, fifo, "x"), "io_error")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_write_then_read_round_trip_crlf_and_no_newline(ev, tmp_path):
    p = tmp_path / "rt.txt"
    for text in ("a\r\nb\r\n", "no newline at end", "mixed\nlines\r\nend", "é\n日本語"):
        obs = write_ok(ev, p, text)
        assert p.read_bytes() == text.encode("utf-8")
        r = read_ok(ev, p)
        assert content(r) == text
        assert r["extras"]["sha256"] == obs["extras"]["sha256"]


# ------------------------------------------------------------------ edit: view

def test_edit_view_file(ev, tmp_path):
    p = tmp_path / "v.py"
    p.write_text("import os\n\ndef f():\n    return 1\n")
    obs = edit_ok(ev, "view", p)
    assert content(obs) == "     1\timport os\n     2\t\n     3\tdef f():\n     4\t    return 1"
    assert obs["extras"]["total_lines"] == 4
    obs = edit_ok(ev, "view", p, view_range=[2, 3])
    assert content(obs) == "     2\t\n     3\tdef f():"
    obs = edit_ok(ev, "view", p, view_range=[3, -1])
    assert content(obs) == "     3\tdef f():\n     4\t    return 1"
    for bad in ([0, 2], [3, 2], [1, 9], [5, -1], [1], "1-2", [1.5, 2]):
        assert_error(edit(ev, "view", p, view_range=bad), "bad_request")


def test_edit_view_numbers_wide_files(ev, tmp_path):
    p = tmp_path / "wide.txt"
    p.write_text("".join("x%d\n" % i for i in range(1, 1000001)))
    obs = edit_ok(ev, "view", p, view_range=[999999, 1000000])
    assert content(obs) == "999999\tx999999\n1000000\tx1000000"


def test_edit_view_directory(ev, tmp_path):
    root = tmp_path / "proj"
    (root / "src" / "deep" / "deeper").mkdir(parents=True)
    (root / "src" / "main.c").write_text("int main;\n")
    (root / "src" / "deep" / "hidden_by_depth.txt").write_text("x")
    (root / "README").write_text("r")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("c")
    (root / ".env").write_text("secret")
    (root / "src" / ".cache").write_text("c")
    (root / "b dir").mkdir()
    obs = edit_ok(ev, "view", root)
    assert content(obs).split("\n") == [
        str(root / "README"),
        str(root / "b dir") + "/",
        str(root / "src") + "/",
        str(root / "src" / "deep") + "/",
        str(root / "src" / "main.c"),
    ], fmt(obs)


def test_edit_view_errors(ev, tmp_path):
    assert_error(edit(ev, "view", tmp_path / "missing"), "not_found")
    b = tmp_path / "b.bin"
    b.write_bytes(b"\x00\x01\x02")
    assert_error(edit(ev, "view", b), "binary_file")


# ------------------------------------------------------------------ edit: create

def test_edit_create(ev, tmp_path):
    p = tmp_path / "new" / "dir" / "made.txt"
    obs = edit_ok(ev, "create", p, file_text="line one\nline two\n")
    assert "File created successfully at: %s" % p in content(obs)
    assert p.read_text() == "line one\nline two\n"
    assert mode_of(p) == 0o644
    # overwriting keeps the mode
    p.chmod(0o700)
    obs = edit_ok(ev, "create", p, file_text="replaced\n")
    assert p.read_text() == "replaced\n" and mode_of(p) == 0o700
    assert_error(edit(ev, "create", p), "bad_request")           # no file_text
    assert_error(edit(ev, "create", tmp_path, file_text="x"), "is_directory")


# ------------------------------------------------------------------ edit: str_replace

SRC = "def a():\n    return 1\n\ndef b():\n    return 2\n\ndef c():\n    return 3\n"


def test_str_replace_success_and_snippet(ev, tmp_path):
    p = tmp_path / "s.py"
    p.write_text(SRC)
    obs = edit_ok(ev, "str_replace", p, old_str="    return 2\n", new_str="    x = 2\n    return x\n")
    assert p.read_text() == SRC.replace("    return 2\n", "    x = 2\n    return x\n")
    c = content(obs)
    assert c.startswith("The file %s has been edited. Here's the result of running `cat -n` on a snippet of %s:\n"
                        % (p, p)), c
    # the change (lines 5-6) with up to 4 lines of context either side
    for ln in ("     1\tdef a():", "     4\tdef b():", "     5\t    x = 2", "     6\t    return x",
               "     9\t    return 3"):
        assert ln in c.split("\n"), c
    assert obs["extras"]["sha256"] == sha(p.read_bytes())


def test_str_replace_not_found(ev, tmp_path):
    p = tmp_path / "s.py"
    p.write_text(SRC)
    obs = edit(ev, "str_replace", p, old_str="return 42", new_str="x")
    assert_error(obs, "mismatch")
    assert content(obs) == ("No replacement was performed, old_str `return 42` did not appear "
                            "verbatim in %s." % p)
    assert p.read_text() == SRC


def test_str_replace_multiple_occurrences(ev, tmp_path):
    p = tmp_path / "s.py"
    p.write_text(SRC)
    obs = edit(ev, "str_replace", p, old_str="    return", new_str="    yield")
    assert_error(obs, "mismatch")
    msg = content(obs)
    assert "3 times" in msg and "2, 5, 8" in msg, msg
    assert obs["extras"]["occurrences"] == 3 and obs["extras"]["lines"] == [2, 5, 8]
    assert p.read_text() == SRC
    # twice on the same line
    q = tmp_path / "t.txt"
    q.write_text("ab ab\n")
    obs = edit(ev, "str_replace", q, old_str="ab", new_str="x")
    assert_error(obs, "mismatch")
    assert "2 times" in content(obs) and obs["extras"]["lines"] == [1, 1]


def test_str_replace_argument_errors(ev, tmp_path):
    p = tmp_path / "s.py"
    p.write_text(SRC)
    assert_error(edit(ev, "str_replace", p, new_str="x"), "bad_request")
    assert_error(edit(ev, "str_replace", p, old_str="", new_str="x"), "bad_request")
    assert_error(edit(ev, "str_replace", tmp_path / "missing", old_str="a"), "not_found")
    assert_error(edit(ev, "str_replace", tmp_path, old_str="a"), "is_directory")
    b = tmp_path / "b.bin"
    b.write_bytes(b"a\x00b")
    assert_error(edit(ev, "str_replace", b, old_str="a", new_str="c"), "binary_file")
    assert b.read_bytes() == b"a\x00b"
    assert_error(edit(ev, "frobnicate", p), "bad_request")
    assert_error(ev.call("edit", {"path": str(p)}), "bad_request")


def test_str_replace_delete_with_default_new_str(ev, tmp_path):
    p = tmp_path / "d.txt"
    p.write_text("keep\nremove me\nkeep too\n")
    edit_ok(ev, "str_replace", p, old_str="remove me\n")
    assert p.read_text() == "keep\nkeep too\n"


def test_str_replace_keeps_no_trailing_newline_and_mode(ev, tmp_path):
    p = tmp_path / "n.sh"
    p.write_bytes(b"#!/bin/sh\necho one\necho two")
    p.chmod(0o755)
    edit_ok(ev, "str_replace", p, old_str="echo two", new_str="echo 2")
    assert p.read_bytes() == b"#!/bin/sh\necho one\necho 2"
    assert mode_of(p) == 0o755


def test_str_replace_crlf(ev, tmp_path):
    p = tmp_path / "dos.txt"
    p.write_bytes(b"one\r\ntwo\r\nthree\r\n")
    # on the raw text, CR included
    edit_ok(ev, "str_replace", p, old_str="two\r\n", new_str="TWO\r\n")
    assert p.read_bytes() == b"one\r\nTWO\r\nthree\r\n"
    # within a line
    edit_ok(ev, "str_replace", p, old_str="thr", new_str="THR")
    assert p.read_bytes() == b"one\r\nTWO\r\nTHRee\r\n"
    # old_str/new_str with "\n" line endings (as shown by view) match the
    # CRLF text, and the file keeps CRLF everywhere
    edit_ok(ev, "str_replace", p, old_str="one\nTWO\n", new_str="1\n2\nand more\n")
    assert p.read_bytes() == b"1\r\n2\r\nand more\r\nTHRee\r\n"
    obs = edit_ok(ev, "view", p)
    assert content(obs) == "     1\t1\n     2\t2\n     3\tand more\n     4\tTHRee"


def test_str_replace_utf8(ev, tmp_path):
    p = tmp_path / "u.txt"
    p.write_text("prix: 5 €\nlangue: 日本語\n", encoding="utf-8")
    edit_ok(ev, "str_replace", p, old_str="日本語", new_str="français é")
    assert p.read_text(encoding="utf-8") == "prix: 5 €\nlangue: français é\n"


# ------------------------------------------------------------------ edit: insert

def test_insert(ev, tmp_path):
    p = tmp_path / "i.txt"
    p.write_text("a\nb\nc\n")
    obs = edit_ok(ev, "insert", p, insert_line=0, new_str="top")
    assert p.read_text() == "top\na\nb\nc\n"
    assert "     1\ttop" in content(obs).split("\n")
    edit_ok(ev, "insert", p, insert_line=2, new_str="after a\nsecond\n")
    assert p.read_text() == "top\na\nafter a\nsecond\nb\nc\n"
    edit_ok(ev, "insert", p, insert_line=6, new_str="end")
    assert p.read_text() == "top\na\nafter a\nsecond\nb\nc\nend\n"
    for bad in (-1, 8, 1.5, "2"):
        assert_error(edit(ev, "insert", p, insert_line=bad, new_str="x"), "bad_request")
    assert_error(edit(ev, "insert", p, new_str="x"), "bad_request")
    assert_error(edit(ev, "insert", p, insert_line=1), "bad_request")


def test_insert_no_trailing_newline_and_crlf(ev, tmp_path):
    p = tmp_path / "n.txt"
    p.write_bytes(b"x\ny")
    edit_ok(ev, "insert", p, insert_line=2, new_str="z")
    assert p.read_bytes() == b"x\ny\nz"
    edit_ok(ev, "insert", p, insert_line=1, new_str="mid")
    assert p.read_bytes() == b"x\nmid\ny\nz"
    q = tmp_path / "dos.txt"
    q.write_bytes(b"one\r\ntwo\r\n")
    edit_ok(ev, "insert", q, insert_line=1, new_str="new1\nnew2")
    assert q.read_bytes() == b"one\r\nnew1\r\nnew2\r\ntwo\r\n"
    e = tmp_path / "empty.txt"
    e.write_bytes(b"")
    edit_ok(ev, "insert", e, insert_line=0, new_str="first")
    assert e.read_bytes() == b"first\n"


# ------------------------------------------------------------------ edit: undo_edit

def test_undo_edit_through_three_edits(ev, tmp_path):
    p = tmp_path / "u.txt"
    v0 = "alpha\nbeta\ngamma\n"
    p.write_text(v0)
    edit_ok(ev, "str_replace", p, old_str="beta", new_str="BETA")
    v1 = p.read_text()
    edit_ok(ev, "insert", p, insert_line=3, new_str="delta")
    v2 = p.read_text()
    edit_ok(ev, "str_replace", p, old_str="alpha\n", new_str="")
    assert p.read_text() == "BETA\ngamma\ndelta\n"
    obs = edit_ok(ev, "undo_edit", p)
    assert "Last edit to %s undone successfully." % p in content(obs)
    assert p.read_text() == v2
    edit_ok(ev, "undo_edit", p)
    assert p.read_text() == v1
    edit_ok(ev, "undo_edit", p)
    assert p.read_text() == v0
    obs = edit(ev, "undo_edit", p)
    assert_error(obs, "mismatch")
    assert "No edit history" in content(obs)
    assert p.read_text() == v0


def test_undo_edit_of_create(ev, tmp_path):
    p = tmp_path / "c.txt"
    edit_ok(ev, "create", p, file_text="v1\n")
    edit_ok(ev, "create", p, file_text="v2\n")
    edit_ok(ev, "undo_edit", p)
    assert p.read_text() == "v1\n"
    obs = edit_ok(ev, "undo_edit", p)    # before the first create: no file
    assert not p.exists(), fmt(obs)


def test_undo_edit_keeps_mode_and_history_is_per_file(ev, tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("a1\n")
    b.write_text("b1\n")
    a.chmod(0o750)
    edit_ok(ev, "str_replace", a, old_str="a1", new_str="a2")
    edit_ok(ev, "str_replace", b, old_str="b1", new_str="b2")
    edit_ok(ev, "undo_edit", a)
    assert a.read_text() == "a1\n" and b.read_text() == "b2\n" and mode_of(a) == 0o750
    edit_ok(ev, "undo_edit", b)
    assert b.read_text() == "b1\n"


def test_undo_edit_keeps_ten_steps(ev, tmp_path):
    p = tmp_path / "many.txt"
    p.write_text("0\n")
    for i in range(1, 13):
        edit_ok(ev, "str_replace", p, old_str="%d\n" % (i - 1), new_str="%d\n" % i)
    for i in range(11, 1, -1):
        edit_ok(ev, "undo_edit", p)
        assert p.read_text() == "%d\n" % i
    assert_error(edit(ev, "undo_edit", p), "mismatch")
    assert p.read_text() == "2\n"


def test_undo_edit_refuses_to_lose_outside_changes(ev, tmp_path):
    p = tmp_path / "o.txt"
    p.write_text("one\n")
    edit_ok(ev, "str_replace", p, old_str="one", new_str="two")
    p.write_text("changed by someone else\n")
    assert_error(edit(ev, "undo_edit", p), "mismatch")
    assert p.read_text() == "changed by someone else\n"


# ------------------------------------------------------------------ one at a time

def test_edits_from_four_connections_lose_no_line(termd, tmp_path):
    """write and edit run one at a time (fsact.c's ACT_SERIAL): 4
    connections each send 50 inserts of their own lines into one file, all
    at once (the worker pool runs 4 jobs in parallel); every line is there
    at the end. Unserialized, two read-modify-writes of the same text lose
    one of the lines (or the undo history is corrupted)."""
    p = tmp_path / "shared.txt"
    p.write_text("end\n")
    evs = [termd.events() for _ in range(4)]
    answers = [[] for _ in evs]
    errors = []

    def client(k):
        try:
            ev = evs[k]
            ids = [ev.send_action("edit", {"command": "insert", "path": str(p), "insert_line": 0,
                                           "new_str": "conn %d line %02d" % (k, i)},
                                  id="ins-%d-%d" % (k, i))
                   for i in range(50)]
            for i in ids:
                answers[k].append(ev.wait_for(lambda o, i=i: o.get("cause") == i, timeout=120))
        except Exception as e:   # noqa: BLE001 - shown by the main thread
            errors.append(e)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert not errors, errors
    for a in answers:
        assert len(a) == 50 and all(o.get("observation") == "edit" for o in a), \
            [fmt(o) for o in a if o.get("observation") != "edit"][:3]
    got = p.read_text().split("\n")
    want = ["conn %d line %02d" % (k, i) for k in range(4) for i in range(50)]
    assert sorted(x for x in got if x.startswith("conn")) == sorted(want), \
        "lost %d lines" % (len(want) - len([x for x in got if x.startswith("conn")]))
    assert got[-2:] == ["end", ""]


# ------------------------------------------------------------------ owners

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="files of other owners need root")


@ROOT_ONLY
@pytest.mark.parametrize("action", ["write", "str_replace", "insert"])
def test_atomic_replace_keeps_owner_and_group(ev, tmp_path, action):
    """The new file of an atomic write is given the old one's owner and
    group when either differs from termd's (root): root:nogroup keeps its
    group, nobody:root its owner."""
    nobody = pwd.getpwnam("nobody")
    nogroup = nobody.pw_gid   # nogroup (65534)
    assert nogroup != 0 and nobody.pw_uid != 0
    for name, uid, gid in (("gid.txt", 0, nogroup), ("uid.txt", nobody.pw_uid, 0)):
        p = tmp_path / name
        p.write_text("old\n")
        os.chown(p, uid, gid)
        if action == "write":
            write_ok(ev, p, "new\n")
        elif action == "str_replace":
            edit_ok(ev, "str_replace", p, old_str="old", new_str="new")
        else:
            edit_ok(ev, "insert", p, insert_line=1, new_str="new")
        assert "new" in p.read_text()
        st = os.stat(p)
        assert (st.st_uid, st.st_gid) == (uid, gid), (name, st.st_uid, st.st_gid)


# ------------------------------------------------------------------ big files

def test_20mb_binary_round_trip_via_base64(termd_factory, tmp_path):
    t = termd_factory(args=["--max-frame", "67108864"])
    ev = t.events()
    src = tmp_path / "big.bin"
    data = os.urandom(20 * 1024 * 1024)
    src.write_bytes(data)
    obs = ev.call("read", {"path": str(src), "encoding": "base64"}, timeout=120)
    obs_ok(obs, "read")
    b64 = content(obs)
    assert len(b64) == (len(data) + 2) // 3 * 4   # a ~27 MB message received whole
    assert obs["extras"]["sha256"] == sha(data)
    assert base64.b64decode(b64, validate=True) == data
    dst = tmp_path / "copy" / "big.bin"
    obs = ev.call("write", {"path": str(dst), "content": b64, "encoding": "base64"}, timeout=120)
    obs_ok(obs, "write")
    assert obs["extras"]["bytes"] == len(data) and obs["extras"]["sha256"] == sha(data)
    assert dst.read_bytes() == data
    assert ev.ping()["observation"] == "pong"


# ------------------------------------------------------------------ read-only token

def test_view_token_cannot_use_file_actions(termd_factory, tmp_path):
    """PROTOCOL.md section 1: the read-only token admits subscribe,
    session.list, screen and ping only - not reading files."""
    vt = tmp_path / "view-token"
    vt.write_text("viewsecret\n")
    t = termd_factory(args=["--view-token-file", str(vt)], token="fullsecret")
    p = tmp_path / "private.txt"
    p.write_text("secret\n")
    ro = t.events(token="viewsecret")
    assert_error(read(ro, p), "forbidden")
    assert_error(write(ro, p, "x"), "forbidden")
    assert_error(edit(ro, "view", p), "forbidden")
    assert p.read_text() == "secret\n"
    rw = t.events(token="fullsecret")
    assert content(read_ok(rw, p)) == "secret\n"
