#!/usr/bin/python3
"""make_seeds.py — writes the hand-made seeds of tests/fuzz/corpus/<target>/
(run with /usr/bin/python3 from the repository root; crash-* seeds found by
fuzzing are kept as they are). Formats: see the comment at the top of each
tests/fuzz/fuzz_<target>.c."""
import json
import os

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def frames(*objs, readonly=False):
    parts = [o if isinstance(o, (bytes, str)) else json.dumps(o) for o in objs]
    parts = [p.encode() if isinstance(p, str) else p for p in parts]
    return bytes([1 if readonly else 0]) + b"\0".join(parts)


# ---- action: byte 0 bit 0 read-only, frames separated by NUL ----
A = "action"
put(A, "ping", frames({"id": 1, "action": "ping"}))
put(A, "run", frames({"id": "r1", "action": "run", "args": {"command": "ls -l", "timeout": 5,
                                                           "idle_timeout": 1.5, "max_output": 1000,
                                                           "is_input": False, "session": "main"}}))
put(A, "keys-screen-expect", frames(
    {"id": 2, "action": "keys", "args": {"keys": ["i", "hello", "Escape"], "settle_ms": 50}},
    {"id": 3, "action": "screen", "args": {"session": "main"}},
    {"id": 4, "action": "expect", "args": {"pattern": "\\$ $", "timeout": 2}}))
put(A, "sessions", frames(
    {"id": "o", "action": "session.open", "args": {"name": "py", "command": "python3", "cols": 80, "rows": 24}},
    {"id": "l", "action": "session.list"},
    {"id": "s", "action": "session.signal", "args": {"session": "py", "signal": "INT"}},
    {"id": "c", "action": "session.close", "args": {"session": "py"}}))
put(A, "files", frames(
    {"id": 10, "action": "read", "args": {"path": "/etc/hostname", "encoding": "base64"}},
    {"id": 11, "action": "write", "args": {"path": "/tmp/x", "content": "h\u00e9llo\n", "mode": "0644"}},
    {"id": 12, "action": "edit", "args": {"command": "str_replace", "path": "/tmp/x",
                                          "old_str": "h", "new_str": "j"}}))
put(A, "subscribe-replay", frames(
    {"id": 1, "action": "ping"}, {"id": 2, "action": "ping"}, {"id": 3, "action": "ping"},
    {"id": 4, "action": "ping"}, {"id": 5, "action": "ping"}, {"id": 6, "action": "ping"},
    {"id": "sub", "action": "subscribe", "args": {"since": 0}},
    {"id": 2, "action": "ping"}, {"id": 6, "action": "ping"}))
put(A, "readonly", frames({"id": 1, "action": "run", "args": {"command": "true"}},
                          {"id": 2, "action": "screen"}, {"action": "session.list"}, readonly=True))
put(A, "malformed", frames(
    b"", b"not json", b"[1,2]", b'"str"', b"{}", b'{"id":1.5,"action":"ping"}',
    b'{"id":{"a":1},"action":"ping"}', b'{"id":null,"action":"ping"}', b'{"id":7}',
    b'{"id":8,"action":42}', b'{"id":9,"action":"ping","args":[1]}', b'{"id":9,"action":"nope"}',
    b'{"id":10,"action":"run","args":{"command":1}}', b'{"id":11,"action":"run","args":{"timeout":"x"}}',
    b'{"id":12,"action":"run","args":{"command":"x","is_input":1}}',
    b'{"id":"\\u00e9\\ud83d\\ude00","action":"\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9'
    b'\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9'
    b'\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9'
    b'\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9"}',
    b'{"id":1e999,"action":"ping"}', b'{"id":-0,"action":"ping","args":null}',
    b'{"id":"a\\u0000b","action":"ping"}'))


# ---- tty: byte 0 bit 0 rw; fragments: header (len | 0x80 if more), bytes ----
def frag(data, more=False):
    out = b""
    while len(data) > 127:
        out += bytes([127 | 0x80]) + data[:127]
        data = data[127:]
    return out + bytes([len(data) | (0x80 if more else 0)]) + data


T = "tty"
put(T, "rw-input-resize", b"\x01" + frag(b"Ils -l\r") + frag(b'R{"cols":100,"rows":30}') +
    frag(b"I\x1b[A") + frag(b"I") + frag(b""))
put(T, "rw-bad", b"\x01" + frag(b'R{"cols":1,"rows":30}') + frag(b"Rnot json") + frag(b"R") +
    frag(b'R{"cols":2000,"rows":1}') + frag(b"Qwhat") + frag(b'R{"cols":"80","rows":24}'))
put(T, "rw-fragments", b"\x01" + frag(b"Iec", more=True) + frag(b"ho hi", more=True) + frag(b"\r") +
    frag(b'R{"cols":', more=True) + frag(b'2,"rows":1}'))
put(T, "ro", b"\x00" + frag(b"Ityped") + frag(b'R{"cols":80,"rows":24}') + frag(b"Z"))
put(T, "rw-long", b"\x01" + frag(b"I" + b"x" * 300) + frag(b'R{"cols":1000,"rows":1000}') +
    frag(b'R{"cols":2,"rows":1}'))


# ---- shellint: byte 0 low 3 bits k, k piece sizes - 1, output; NONCE = the nonce ----
def si(out, sizes=(0, 2, 6)):
    return bytes([len(sizes)]) + bytes(sizes) + out


def mark(rest, term=b"\x07"):
    return b"\x1b]6973;NONCE;" + rest + term


S = "shellint"
prompt = b"\x1b]0;user@host: ~\x07\x1b[01;32muser@host\x1b[00m:\x1b[01;34m~\x1b[00m$ \x1b[?2004h"
put(S, "bash-command", si(prompt + b"ls\r\n\x1b[?2004l\r" + mark(b"C") +
    b"a.txt  \x1b[01;34mdir\x1b[0m\r\n" + mark(b"D;0;/home/user") + prompt))
put(S, "bash-fail-st", si(mark(b"C", b"\x1b\\") + b"bash: nope: command not found\r\n" +
    mark(b"D;127;/tmp/a dir;x", b"\x1b\\") + b"\x1b]2;title\x1b\\$ \x1b[?2004h", sizes=(0,)))
put(S, "lookalikes", si(b"\x1b]6973;0123456789abcdef0123456789abcdef;C\x07" + b"\x1b]6973;NONCE\x07" +
    b"\x1b]6973;NONCE;D;-2\x07" + b"\x1b]6973;NONCE;X\x07" + b"\x1b]7;file://h/tmp\x07" +
    b"\x1b]6973;NONCE;D;99999999999;/\x07" + b"\x1b[?2004l\x1b[?1049h\x1b[?2004h"))
put(S, "cut-short", si(b"\x1b]0;ti\x1bXtle\x07" + b"\x1b[12\x1b]6973;NONCE;C\x07" + b"\x1b\x1b[?20" +
    b"04h\x1b]6973;NONCE;D;1;/x\x1b", sizes=(1, 3)))
put(S, "long-osc", si(b"\x1b]2;" + b"t" * 8300 + b"\x1bX" + mark(b"C") + b"\x1b]6973;NONCE;D;0;" +
    b"p" * 8200 + b"\x07done", sizes=(255, 100, 7)))
# a done mark whose exit-code field is the nonce (garbage): CI once saw it
# parse as -2231 whole and -22991 split, the two scanners having had
# different nonces; continuation marks (PS2) between pasted lines
put(S, "crash-done-code-garbage", si(b"\x1b]6973;NONCE;D;-NONCE;/tmp\x07" + mark(b"D;12x;/a") +
    mark(b"D;;/b") + mark(b"D;-;/c") + mark(b"D;7") + b"$ ", sizes=(3, 1)))
put(S, "continuation", si(b"cat << EOF\r\n\x1b[?2004l\r\x1b[?2004h" + mark(b"P") + b"> line 1\r\n" +
    mark(b"P") + b"> EOF\r\n" + mark(b"C") + b"line 1\r\n" + mark(b"D;0;/") + b"$ ", sizes=(4, 9)))
put(S, "osc-at-limit", si(b"\x1b]0;" + b"a" * 8188 + b"\x07" + mark(b"C"), sizes=(250,)))


# ---- render: byte 0 bits 0-2 k, bits 3-7 rows - 1; k piece sizes - 1; output ----
def rd(out, rows=8, sizes=(0, 4, 30)):
    return bytes([len(sizes) | ((rows - 1) << 3)]) + bytes(sizes) + out


R = "render"
put(R, "ls-color", rd(b"total 8\r\n\x1b[0m\x1b[01;34mdir\x1b[0m  \x1b[01;32mrun.sh\x1b[0m  "
   + "caf\u00e9.txt  \u65e5\u672c.txt\r\n".encode()))
put(R, "progress", rd(b"".join(b"\r[%-20s] %3d%%" % (b"#" * (i // 5), i) for i in range(0, 101, 7)) +
   b"\r\n\x1b[2K\rdone\r\n", rows=4))
put(R, "vim", rd(b"\x1b[?1049h\x1b[22;0;0t\x1b[?1h\x1b=\x1b[H\x1b[2J\x1b[1;1H\x1b[38;5;12m~\x1b[m\r\n"
   b"\x1b[38;5;12m~\x1b[m\x1b[24;1H\"f.txt\" [New]\x1b[1;1H\x1b[?25hi\x1b[4h\x1b[1Lhello\x1b[2;3H"
   b"\x1b[M\x1b[3@\x1b[2P\x1b[K\x1b7\x1b[10;5Hx\x1b8\x1b[?1049l\x1b[23;0;0t", rows=24, sizes=(2, 9)))
put(R, "unicode", rd("e\u0301 \u00e9 \U0001f600 \u4e2d\u6587 \u200b|\t|x\b\by\r\n".encode() +
   b"\xc3\x28 \xe0\x80\x80 \xed\xa0\x80 \xf4\x90\x80\x80 \xc2\x9b \xff\r\n", sizes=(0, 1, 2)))
put(R, "cursor", rd(b"line1\r\nline2\r\nline3\x1b[2A\x1b[3Cx\x1b[10;200Hfar\x1b[1;1H\x1b[J"
   b"\x1b[s\x1b[5Bdown\x1b[u\x1b[Kup\x1b[99999C!\x1b[3Z\x1b[2I\x1bMri\x1bD\x1bE\x1bc\x1b[?25l"
   b"\x1b]0;title\x07\x1bP+q\x1b\\\x1b(B\x1b[1;2;3;4;5;6;7;8;9;10;11;12;13;14;15;16;17;18m", rows=3))


# ---- vtparse: byte 0 bits 0-2 k, bits 3-4 options (1 C0 in text, 2 BEL ends all); k piece sizes - 1 ----
def vp(out, opts=0, sizes=(0, 3, 17)):
    return bytes([len(sizes) | (opts << 3)]) + bytes(sizes) + out


V = "vtparse"
put(V, "csi", vp(b"\x1b[1;31mred\x1b[0m\x1b[?1049h\x1b[>c\x1b[ q\x1b[38:2:1:2:3m\x1b[;5H\x1b[1?2h\x1b[ 1q"
   b"\x1b[1;2;3;4;5;6;7;8;9;10;11;12;13;14;15;16;17m\x1b[1234567C\x1b[1    q"))
put(V, "esc", vp(b"\x1b7\x1b8\x1b(B\x1b#8\x1bc\x1b*[?1m\x1b((((B\x1b\\\x1b\r(B", opts=1))
put(V, "osc", vp(b"a\x1b]0;title\x07b\x1b]2;t\x1b\\c\x1b]\x07\x1b]0;a\nb\xc3\xa9\x07"
   b"\x1b]0;t\x1b[1mx\x1b]0;t\x1b\x1b]1\x07\x1b]0;t\x18x", sizes=(0, 1)))
put(V, "strings", vp(b"\x1bPq#0\x07!\x1b\\x\x1bXs\x1b\\\x1b^p\x07\x1b_a\x1a\x1bPq\x1b", opts=2))
put(V, "cancel", vp(b"\x1b[1\n;2H\x1b[12\x18x\x1b[3\x1ay\x1b[12\x1b[3mx\x1b[1\xc3\xa9m\x1b[1\x7fm\x1b(\x18", opts=3))
put(V, "utf8-long", vp("caf\u00e9 \u65e5 \U0001f600 ".encode() + b"\xc2\x9b1m\x7f\r\n" * 20 +
   b"\x1b]2;" + b"x" * 3000 + b"\x07", opts=1, sizes=(255, 100, 7)))
