"""core/screen.c's plain-line fast path (runs of plain ASCII lines at the
bottom of the screen put in the grid without libvterm) against termd with
it off (TERMD_TEST_NO_FASTPATH): the same random mixes of plain lines, long
lines that wrap, tabs, CR without LF, LF without CR, UTF-8 wide and
combining characters, colours, cursor moves, scroll regions, insert mode,
double-width lines, the alternate screen, erases, REP and character sets,
written in random chunks (with the fast path) and in one write (without):
screen text, cursor, alternate screen and scrollback must be the same."""

import os
import random

from tdtest import PY, fmt, wait_until

# the session's program: the tty raw (bytes arrive as written), the file
# written in chunks of random sizes (argv[2] > 0: seeded; 0: one write;
# -1: at its NUL bytes, a pause after each, for separate reads), then an
# end marker, then it waits on stdin
WRITER = r"""
import os, random, sys, time, tty
tty.setraw(1)
data = open(sys.argv[1], "rb").read()
seed = int(sys.argv[2])
if seed < 0:
    for part in data.split(b"\0"):
        os.write(1, part)
        time.sleep(0.05)
    data = b""
data = data.replace(b"\0", b"")
if seed > 0:
    rnd = random.Random(seed)
    i = 0
    while i < len(data):
        k = rnd.choice([1, 7, 50, 333, 4096, 4096, 20000, 20000])
        os.write(1, data[i:i + k])
        i += k
        if rnd.random() < 0.05:
            time.sleep(0.002)   # a separate read now and then
else:
    while data:
        data = data[os.write(1, data):]
os.write(1, b"\x1b[0m\x1b[4l\x1b[?7h\r\nEND-OF-FEED")
sys.stdin.read()
"""

ROWS, COLS = 10, 30


def plain_lines(rnd, n, cols):
    out = []
    for _ in range(n):
        k = rnd.choice([0, 1, 5, 10, cols - 1, cols, cols + 1, 2 * cols + 3])
        out.append("".join(rnd.choice("abcdefghij0123456789 .-") for _ in range(k)))
    return "".join(x + "\r\n" for x in out)


PIECES = [
    lambda r: plain_lines(r, r.randint(1, 40), COLS),
    lambda r: plain_lines(r, r.randint(20, 200), COLS),
    lambda r: "a\tb\tc\r\n",
    lambda r: "over\rOV\r\n",
    lambda r: "lf only\n",
    lambda r: "x" * (COLS - 1) + "\u4e2d\u6587" + "\r\n",
    lambda r: "e\u0301\u00e9\u2500\r\n",
    lambda r: "\x1b[3%dm" % r.randint(0, 7),
    lambda r: "\x1b[4%dm" % r.randint(0, 7),
    lambda r: "\x1b[0m",
    lambda r: "\x1b(B\x1b[m",
    lambda r: "\x1b[1;7m",
    lambda r: "\x1b[%d;%dH" % (r.randint(1, ROWS), r.randint(1, COLS)),
    lambda r: "\x1b[%dA" % r.randint(1, 5),
    lambda r: "\x1b[%dC" % r.randint(1, 5),
    lambda r: "\x1b[%dG" % r.randint(1, COLS),
    lambda r: "\x1b[%d;%dr" % (r.randint(1, 4), r.randint(5, ROWS)),
    lambda r: "\x1b[r",
    lambda r: "\x1b[4h",
    lambda r: "\x1b[4l",
    lambda r: "\x1b[?7l",
    lambda r: "\x1b[?7h",
    lambda r: "\x1b[20h",
    lambda r: "\x1b[20l",
    lambda r: "\x1b#6",
    lambda r: "\x1b[?1049h",
    lambda r: "\x1b[?1049l",
    lambda r: "\x1b[K",
    lambda r: "\x1b[1J",
    lambda r: "\x1b[2J",
    lambda r: "\x1b[3L",
    lambda r: "\x1b[2M",
    lambda r: "\x1b[3b",
    lambda r: "\x1b[?6h",
    lambda r: "\x1b[?6l",
    lambda r: "\x1bD\x1bM",
    lambda r: "\x1b7\x1b8",
    lambda r: "\u00e4 ok",
]


def mix(seed, charsets):
    rnd = random.Random(seed)
    parts = []
    for _ in range(400):
        # plain lines most often: the fast path's case
        x = rnd.random()
        if x < 0.05:
            # long enough that whole reads are plain (no ESC): the fast
            # path takes only those
            parts.append(plain_lines(rnd, rnd.randint(500, 1500), COLS))
        elif x < 0.3:
            parts.append(PIECES[1](rnd))
        elif x < 0.4:
            # back to a plain state: the fast path's condition, often
            parts.append("\x1b[r\x1b[4l\x1b[?6l\x1b[?1049l\x1b[%dH" % ROWS)
        else:
            parts.append(rnd.choice(PIECES)(rnd))
    if charsets:
        # late: from here on the fast path is off for good
        parts.insert(200, rnd.choice(["\x1b(0lqqk\r\n", "\x0eabc\x0f\r\n", "\x1b)0\x0elqk\x0f",
                                      "\x1b(0" + plain_lines(rnd, 800, COLS) + "\x1b(B"]))
        parts.insert(300, "\x1bc")   # a reset: ASCII again
    data = "".join(parts).encode()
    if rnd.random() < 0.5:
        # a UTF-8 sequence cut by the chunks, then plain lines
        data += b"\xe4\xb8" + plain_lines(rnd, 50, COLS).encode()
    return data


def screen_of(ev, name, path, seed):
    o = ev.call("session.open", {"name": name, "rows": ROWS, "cols": COLS,
                                 "command": "%s -c '%s' %s %d" % (PY, WRITER.replace("'", "'\\''"),
                                                                   path, seed)})
    assert o["observation"] == "session.open", fmt(o)
    got = {}

    def done():
        got["o"] = ev.call("screen", {"session": name, "scrollback": True})
        return "END-OF-FEED" in got["o"]["content"]
    wait_until(done, timeout=60, what="the feed's end on %s's screen" % name)
    o = got["o"]
    ev.call("session.close", {"name": name})
    return o["content"], o["extras"]["cursor"], o["extras"]["alt_screen"], \
        o["extras"]["scrollback_lines"]


def test_fast_path_same_screen_as_libvterm(termd_factory, tmp_path):
    fast = termd_factory().events()
    slow = termd_factory(env={"TERMD_TEST_NO_FASTPATH": "1"}).events()
    for seed in range(1, 13):
        path = str(tmp_path / ("mix%d" % seed))
        with open(path, "wb") as f:
            f.write(mix(seed, charsets=seed % 3 == 0))
        a = screen_of(fast, "f%d" % seed, path, seed)
        b = screen_of(slow, "s%d" % seed, path, 0)
        assert a == b, "seed %d:\nfast path:\n%s\n\nlibvterm:\n%s" % (seed, a, b)
        os.unlink(path)


def test_plain_run_after_partial_line(termd_factory, tmp_path):
    # the fast path's case in its simplest form, chunks cut mid-line
    fast = termd_factory().events()
    slow = termd_factory(env={"TERMD_TEST_NO_FASTPATH": "1"}).events()
    path = str(tmp_path / "seq")
    with open(path, "wb") as f:
        f.write("".join("%d\r\n" % i for i in range(1, 20001)).encode())
    a = screen_of(fast, "f", path, 99)
    b = screen_of(slow, "s", path, 0)
    assert a == b
    assert a[0].split("\n")[-3] == "20000", a[0][-200:]
    os.unlink(path)


def test_state_changes_between_plain_runs(termd_factory, tmp_path):
    # long plain runs (reads of only plain text) with a change of
    # libvterm's state between them that the next run must see
    fast = termd_factory().events()
    slow = termd_factory(env={"TERMD_TEST_NO_FASTPATH": "1"}).events()
    rnd = random.Random(7)
    changes = ["\x1b[2;6r", "\x1b[r\x1b[%dH" % ROWS, "\x1b[?1049h", "\x1b[?1049l", "\x1b[5A",
               "\x1b[3;5H\x1b[4h", "\x1b[4l\x1b[%dH" % ROWS, "\x1b#6", "\x1b[?6h\x1b[1;4r",
               "\x1b[?6l\x1b[r", "\x1b[%dH\x1b[7b" % ROWS, "half a line", "\x1b[?7l", "\x1b[20h",
               "\x1b[3;%dr" % ROWS, "\x1b[r\x1b(0", "\x1b(B"]
    # NUL: where the writer pauses (seed -1): a read of plain lines, then
    # one of the change, then more plain lines
    # the lines after ESC ( 0 mostly digits (which DEC graphics leaves as
    # they are), some letters (which it draws as lines)
    digits = "".join("%d\r\n" % i if i % 7 else "abc%d\r\n" % i for i in range(400))
    data = "".join((digits if c == "\x1b(B" else plain_lines(rnd, 300, COLS)) + "\0" + c + "\0"
                   for c in changes).encode()
    path = str(tmp_path / "runs")
    with open(path, "wb") as f:
        f.write(data + plain_lines(rnd, 300, COLS).encode())
    for seed in (-1, 5, 6):
        a = screen_of(fast, "f%d" % seed, path, seed)
        b = screen_of(slow, "s%d" % seed, path, 0)
        assert a == b, "seed %d:\nfast path:\n%s\n\nlibvterm:\n%s" % (seed, a, b)
    os.unlink(path)
