"""PROTOCOL.md section 4 `run` items 2-3: content as a person would see it
on the terminal, and truncation of long output."""

import os
import re

from tdtest import PY, content, fmt, lines, run_done

MARKER = re.compile(r"^\[\.\.\. (\d+) lines truncated \.\.\.\]$")


def test_carriage_return(ev):
    assert content(run_done(ev, "printf 'a\\rb\\n'")) == "b"
    assert content(run_done(ev, "printf 'xxxxx\\ryy\\n'")) == "yyxxx"


def test_backspace(ev):
    assert content(run_done(ev, "printf 'abc\\bd\\n'")) == "abd"


def test_progress_bar_last_state(ev):
    obs = run_done(ev, "for i in $(seq 1 100); do printf '\\rprogress %3d%%' $i; done; echo")
    assert content(obs) == "progress 100%", fmt(obs)


def test_progress_bar_between_lines(ev):
    obs = run_done(ev, "echo before; for i in $(seq 1 100); do printf '\\r[%-10s] %d' "
                       "$(printf '#%.0s' $(seq 1 $((i/10+1)))) $i; done; echo; echo after")
    assert lines(obs) == ["before", "[" + "#" * 11 + "] 100", "after"], fmt(obs)


def test_erase_line_and_cursor_up(ev):
    assert content(run_done(ev, "printf 'loading...\\r\\033[Kdone\\n'")) == "done"
    obs = run_done(ev, "printf 'one\\ntwo\\n\\033[2Aone-fixed\\n\\n'")
    assert lines(obs) == ["one-fixed", "two"], fmt(obs)


def test_tabs_stop_every_eight_columns(ev):
    # from column 7, the column just before a stop, a tab goes to that stop
    # (8), not the next one; from a stop it goes to the next
    obs = run_done(ev, "printf 'abcdefg\\tX\\nabcdefgh\\tY\\n\\tZ\\n'")
    assert lines(obs) == ["abcdefg X", "abcdefgh        Y", "        Z"], fmt(obs)


def test_erase_to_the_cursor_erases_the_cursors_cell(ev):
    # ESC[1K erases from the line's start through the cursor's column,
    # inclusive (ECMA-48 EL 1): "abcdef", back to the 'c', erase: "   def";
    # then an X at column 6 (after a move, so it cannot cover the 'c')
    obs = run_done(ev, "printf 'abcdef\\033[4D\\033[1K\\033[6GX\\n'")
    assert content(obs) == "   deX", fmt(obs)


def test_colours_stripped(ev):
    assert content(run_done(ev, "printf '\\033[31mred\\033[0m\\n'")) == "red"
    obs = run_done(ev, "printf '\\033[1;38;5;208mbold\\033[0m \\033[48;2;10;20;30mtrue\\033[m\\n'")
    assert content(obs) == "bold true", fmt(obs)
    obs = run_done(ev, "ls --color=always -d /tmp")
    assert content(obs) == "/tmp", fmt(obs)


def test_trailing_spaces_trimmed(ev):
    assert lines(run_done(ev, "printf 'a   \\nb \\n'")) == ["a", "b"]


def test_long_line_is_one_line(ev):
    want = "".join(str(i % 10) for i in range(5000))
    obs = run_done(ev, "%s -c \"print(''.join(str(i %% 10) for i in range(5000)))\"" % PY)
    assert lines(obs) == [want], fmt(obs)


def test_long_line_from_printf(ev):
    obs = run_done(ev, "printf 'x%.0s' $(seq 1 5000); echo")
    assert content(obs) == "x" * 5000, fmt(obs)


def test_utf8_and_wide_chars(ev):
    s = "héllo 日本語 ✓"
    assert content(run_done(ev, "echo '%s'" % s)) == s
    # the same bytes produced by printf escapes (not typed)
    obs = run_done(ev, "printf 'h\\303\\251llo \\346\\227\\245\\346\\234\\254\\350\\252\\236 \\342\\234\\223\\n'")
    assert content(obs) == s, fmt(obs)
    obs = run_done(ev, "printf '日本語日本語\\n中文 end\\n'")
    assert lines(obs) == ["日本語日本語", "中文 end"], fmt(obs)


def _check_truncated(obs, total, max_output):
    x = obs["extras"]
    assert x.get("truncated") is True, fmt(obs)
    c = content(obs)
    ls = c.split("\n")
    marks = [i for i, ln in enumerate(ls) if MARKER.match(ln)]
    assert len(marks) == 1, "want exactly one truncation marker line: %s" % fmt(obs)
    m = marks[0]
    head, tail = ls[:m], ls[m + 1:]
    assert len(c) <= max_output + len(ls[m]) + 2, "content %d chars for max_output %d" % (len(c), max_output)
    assert head and tail, "want both head and tail: %s" % fmt(obs)
    assert head == [str(i) for i in range(1, len(head) + 1)], "head is not the first lines: %s" % fmt(obs)
    first_tail = total - len(tail) + 1
    assert tail == [str(i) for i in range(first_tail, total + 1)], "tail is not the last lines: %s" % fmt(obs)
    n = int(MARKER.match(ls[m]).group(1))
    assert n == total - len(head) - len(tail), "marker says %d lines, %d missing" % (
        n, total - len(head) - len(tail))
    f = x.get("output_file")
    assert isinstance(f, str) and os.path.isabs(f), fmt(obs)
    assert os.path.isfile(f), "output_file %s does not exist" % f
    with open(f, encoding="utf-8", errors="replace") as fh:
        got = fh.read().splitlines()
    assert got == [str(i) for i in range(1, total + 1)], \
        "output_file %s: %d lines, first %r, last %r" % (f, len(got), got[:3], got[-3:])


def test_50000_lines_truncated(ev):
    obs = run_done(ev, "seq 1 50000")
    _check_truncated(obs, 50000, 30000)


def test_custom_max_output(ev):
    obs = run_done(ev, "seq 1 1000", max_output=500)
    _check_truncated(obs, 1000, 500)


def test_output_under_the_limit_is_whole(ev):
    obs = run_done(ev, "seq 1 5000")  # 23893 characters
    assert lines(obs) == [str(i) for i in range(1, 5001)], fmt(obs)
    assert obs["extras"]["truncated"] is False
    assert obs["extras"].get("output_file") is None, fmt(obs)
    obs = run_done(ev, "seq 1 10", max_output=500)
    assert obs["extras"]["truncated"] is False and lines(obs) == [str(i) for i in range(1, 11)]


def test_shell_fine_after_big_output(ev):
    run_done(ev, "seq 1 200000 >/dev/null; seq 1 100000")
    assert content(run_done(ev, "echo small")) == "small"


def test_output_that_broke_libvterm(ev, tmp_path):
    # Each of these corrupted libvterm 0.1.4's memory before termd filtered
    # what it is given (proto/vtfilter.c; found by tests/fuzz/fuzz_render):
    # a CSI with 20 separators, ESC * [ with many ':', and an OSC broken by
    # ESCs. termd must stay up and the screen keep working.
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"A\x1b[" + b";" * 40 + b"mB\x1b*[?" + b":" * 30 + b"mC"
                    + b"\x1b]0;x\x1b\x01\x00[1;2;3;4;5;6;7;8;9;10;11;12;13;14;15;16;17;18m\x07D"
                    + b"\x1bP+q\x1b(\x1b]" + b"x" * 5000 + b"\x07E\n")
    obs = run_done(ev, "cat %s; echo after" % bad)
    assert content(obs).endswith("after"), fmt(obs)
    scr = ev.call("screen", {})
    assert scr["observation"] == "screen" and "after" in scr["content"]
    assert content(run_done(ev, "echo still-fine")) == "still-fine"
