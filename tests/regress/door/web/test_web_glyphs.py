"""The web page and the player draw every row of a glyph (issue 34 item 3):
at 14 px DejaVu Sans Mono xterm.js clipped the underline row of '_'
(xterm.js #1138), so `exit_test_1` read as `exit test 1`. Headless Chromium
(cdp.py) renders a line of underscores and spaces; a screenshot of each
cell must show pixels under a '_' that a space's cell does not have.
Skipped when Chromium is not installed."""

import base64
import json
import os
import struct
import time
import zlib

import pytest

import cdp
from tdtest import run_done
from test_web import TOKEN, base, http_get, start, wait_text

pytestmark = pytest.mark.skipif(not os.access(cdp.CHROMIUM, os.X_OK),
                                reason="Chromium is not installed at %s" % cdp.CHROMIUM)

LINE = "u:__________ s:          |"   # ten underscores, then ten spaces
# headless Chromium on a loaded machine may take long to parse and paint: every
# wait here is for a condition, with this generous deadline
WAIT = 60.0


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    b = cdp.Browser(str(tmp_path_factory.mktemp("chromium") / "chromium.log"))
    yield b
    b.close()


@pytest.fixture
def pages(browser):
    made = []

    def new(url=None, width=1000, height=600):
        p = browser.new_page(url, width, height)
        made.append(p)
        return p

    yield new
    for p in made:
        p.close()


def png_pixels(data):
    """(width, height, rows) of an 8-bit RGB/RGBA PNG; rows as lists of RGB tuples."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, w, h, bpp = 8, b"", 0, 0, 3
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", chunk[:13])
            assert depth == 8 and ctype in (2, 6) and interlace == 0, (depth, ctype, interlace)
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp
    prev = bytearray(stride)
    rows = []
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 0xFF
            elif f == 2:
                line[i] = (line[i] + b) & 0xFF
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(w)])
        prev = line
    return w, h, rows


# the cell grid of the line holding `marker`: its rectangle in CSS pixels
CELL_JS = """(() => {
  const b = term.buffer.active, d = term._core._renderService.dimensions.css.cell;
  const scr = document.querySelector('#term .xterm-screen').getBoundingClientRect();
  for (let i = b.viewportY; i < b.viewportY + term.rows; i++) {
    const l = b.getLine(i);
    if (l && l.translateToString(true).indexOf(%s) === 0)
      return { x: scr.left, y: scr.top + (i - b.viewportY) * d.height, w: d.width, h: d.height,
               font: term.options.fontSize, lineHeight: term.options.lineHeight };
  }
  return null; })()"""


def cells_of(page, text):
    """[(col, pixels of the cell)] for each column of the line starting with text."""
    g = page.wait(lambda: page.eval(CELL_JS % json.dumps(text)), WAIT, "the line on screen")
    clip = {"x": g["x"], "y": g["y"], "width": g["w"] * len(LINE), "height": g["h"], "scale": 1}
    shot = page.call("Page.captureScreenshot", {"format": "png", "clip": clip}, timeout=WAIT)
    w, h, rows = png_pixels(base64.b64decode(shot["data"]))
    cells = []
    for col in range(len(LINE)):
        x0, x1 = round(col * g["w"]), round((col + 1) * g["w"])
        cells.append([rows[y][x] for y in range(h) for x in range(x0, min(x1, w))])
    return g, cells


def underscores_missing(page, where):
    """None when every '_' of the line has a pixel a space's cell has not; else why not."""
    g, cells = cells_of(page, LINE[:2])
    background = cells[LINE.index(" s:") + 4]          # a space between the spaces
    bg = max(set(background), key=background.count)
    if any(px != bg for px in background):
        return "%s: a space's cell is not plain background" % where
    for col, ch in enumerate(LINE):
        if ch == "_" and all(px == bg for px in cells[col]):
            return ("%s: the '_' in column %d is not drawn at %s px (line height %s, cell "
                    "%.2fx%.2f): nothing differs from a space"
                    % (where, col, g["font"], g["lineHeight"], g["w"], g["h"]))
    return None


def assert_underscores_drawn(page, where, font_size=None):
    """Checked until it holds (the renderer draws after an option changes) or WAIT passes."""
    if font_size:
        page.eval("term.options.fontSize = %d; true" % font_size)
        page.wait(lambda: page.eval("term._core._renderService.dimensions.css.cell.width > 0 && "
                                    "term.options.fontSize") == font_size, WAIT, "the new size")
    deadline = time.monotonic() + WAIT
    why = underscores_missing(page, where)
    while why and time.monotonic() < deadline:
        time.sleep(0.1)
        why = underscores_missing(page, where)
    assert why is None, why


def test_underscores_are_drawn_in_the_session_page(termd_factory, tmp_path, pages):
    t = start(termd_factory, tmp_path)
    ev = t.events()
    run_done(ev, "clear; printf '%s\\n'" % LINE)
    # wide enough for the session at 14 px; then each size a read-only page
    # shrinks its font to (term.js fitFont: 14 down to 9)
    p = pages(base(t) + "/s/main?token=" + TOKEN, 1600, 900)
    p.wait_js("window.tdPage && tdPage.connected && tdPage.snapshots > 0", WAIT,
              "the page's first snapshot")
    wait_text(p, LINE, WAIT)
    assert p.eval("term.options.fontSize") == 14
    assert_underscores_drawn(p, "session page")
    for size in range(13, 8, -1):
        assert_underscores_drawn(p, "session page", size)


def test_underscores_are_drawn_in_the_player(termd_factory, tmp_path, pages):
    rec = tmp_path / "rec"
    rec.mkdir()
    t = termd_factory(args=["--record", str(rec)], token=TOKEN, tcp=True)
    ev = t.events()
    run_done(ev, "clear; printf '%s\\n'" % LINE)
    st, _, body = http_get(t, "/record/", {"Authorization": "Bearer " + TOKEN})
    assert st == 200, (st, body)
    main = next(f for f in json.loads(body) if f["session"] == "main")
    name = main["file"][:-5] if main["file"].endswith(".cast") else main["file"]
    p = pages(base(t) + "/r/" + name + "?token=" + TOKEN)
    p.wait_js("window.player && player.ended", WAIT, "the player at the end")
    # ended is set when the last output is handed to term.write, which parses
    # it later (asynchronously): the line is in the buffer only after that
    wait_text(p, LINE, WAIT)
    assert_underscores_drawn(p, "player")


LINK_JS = """(() => {
  const a = [...document.querySelectorAll('a')].find(e => e.textContent === %s);
  if (!a) return null;
  const r = a.getBoundingClientRect(), t = a.firstChild, under = [];
  for (let i = 0; i < t.length; i++) {
    if (t.data[i] !== '_') continue;
    const g = document.createRange();
    g.setStart(t, i); g.setEnd(t, i + 1);
    const c = g.getBoundingClientRect();
    under.push([c.left - r.left, c.right - r.left]);
  }
  return { x: r.left, y: r.top, w: r.width, h: r.height + 6, under }; })()"""


def underscores_hidden(page, text):
    """None when each '_' of the link `text` has ink of its own (rows that
    are not the underline's, or no underline at all), else why not."""
    g = page.wait(lambda: page.eval(LINK_JS % json.dumps(text)), WAIT, "the link %r" % text)
    scale = 4
    clip = {"x": g["x"], "y": g["y"], "width": g["w"], "height": g["h"], "scale": scale}
    shot = page.call("Page.captureScreenshot", {"format": "png", "clip": clip}, timeout=WAIT)
    w, h, rows = png_pixels(base64.b64decode(shot["data"]))
    bg = rows[0][0]
    ink = [[px != bg for px in r] for r in rows]
    # an underline: a row inked over most of the link's width
    line_rows = {y for y in range(h) if sum(ink[y]) > 0.85 * w}
    for x0, x1 in g["under"]:
        cols = range(int(x0 * scale) + 1, min(w, int(x1 * scale) - 1))
        own = [y for y in range(h // 2, h) if y not in line_rows and any(ink[y][x] for x in cols)]
        # its own mark: inked rows with at least a CSS pixel of background
        # between them and the underline (touching, the two read as one line)
        if len(own) < scale // 2 or (line_rows and min(abs(y - l) for y in own
                                                         for l in line_rows) <= scale):
            return ("'_' at %.0f-%.0f px of %r has no ink of its own (underline rows %s, "
                    "its rows %s)" % (x0, x1, text, sorted(line_rows), own))
    return None


def test_underscores_show_in_the_session_list_links(termd_factory, tmp_path, pages):
    """issue 51: the list's link underline hid the underscores of a name
    ("my_dev_app" read "my dev app"): each '_' must be drawn apart from
    any underline."""
    t = start(termd_factory, tmp_path)
    ev = t.events()
    assert ev.call("session.open", {"name": "my_dev_app"})["observation"] == "session.open"
    p = pages(base(t) + "/?token=" + TOKEN, 1000, 600)
    why = underscores_hidden(p, "my_dev_app")
    assert why is None, why
    # under the pointer too, where the link is underlined
    g = p.eval(LINK_JS % json.dumps("my_dev_app"))
    p.call("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": g["x"] + g["w"] / 2,
                                        "y": g["y"] + 5})
    p.wait(lambda: p.eval("getComputedStyle([...document.querySelectorAll('a')].find(e => "
                          "e.textContent === 'my_dev_app')).textDecorationLine") == "underline",
           WAIT, "the link underlined under the pointer")
    why = underscores_hidden(p, "my_dev_app")
    assert why is None, why
