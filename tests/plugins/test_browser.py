"""tests for the browser plugin program (plugins/browser, termd-browser): driven over stdin/stdout as termd's
plugin host will, with pages from a local http.server on 127.0.0.1 and file:// pages in temp dirs."""
import base64
import json
import os
import queue
import re
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest

BIN = os.environ.get("TERMD_BROWSER_BIN") or os.path.join(
    os.path.dirname(__file__), "..", "..", "build", "plugins", "browser", "termd-browser")
WAIT = 120          # bounds a failure (Chromium on two shared cores), never an assertion about speed


class Plugin:
    """one termd-browser process with its own run folder; answers collected by id"""

    def __init__(self):
        self.rundir = tempfile.mkdtemp(prefix="tb-run-")
        self.proc = subprocess.Popen([os.path.abspath(BIN)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=dict(os.environ, TERMD_PLUGIN_RUNDIR=self.rundir))
        self.answers = {}
        self.cv = threading.Condition()
        self.next = 0
        threading.Thread(target=self._reader, daemon=True).start()

    def _reader(self):
        for line in self.proc.stdout:
            msg = json.loads(line)
            with self.cv:
                self.answers.setdefault(json.dumps(msg.get("id")), []).append(msg)
                self.cv.notify_all()

    def send_raw(self, text):
        self.proc.stdin.write(text.encode())
        self.proc.stdin.flush()

    def send(self, action, args, cwd=None):
        self.next += 1
        rid = "r%d" % self.next
        req = {"id": rid, "action": action, "args": args}
        if cwd:
            req["cwd"] = cwd
        self.send_raw(json.dumps(req) + "\n")
        return rid

    def wait(self, rid, timeout=WAIT):
        key = json.dumps(rid)
        with self.cv:
            ok = self.cv.wait_for(lambda: self.answers.get(key), timeout)
            assert ok, "no answer for %r within %ss" % (rid, timeout)
            return self.answers[key].pop(0)

    def call(self, action, args, cwd=None):
        a = self.wait(self.send(action, args, cwd))
        assert a["observation"] == "browse", a
        return a

    def browse(self, url, **kw):
        return self.call("browse", dict(url=url, **kw), kw.pop("cwd", None))

    def act(self, actions, **kw):
        return self.call("browse_interactive", dict(browser_actions=actions, **kw))

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def chromium_procs(rundir):
    """pids of live processes whose command line names this run folder (Chromium's profile is in it)"""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = open("/proc/%s/cmdline" % pid, "rb").read()
            state = open("/proc/%s/stat" % pid).read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if rundir.encode() in cmd and state != "Z":
            found.append(int(pid))
    return found


def wait_gone(rundir, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        left = chromium_procs(rundir)
        if not left:
            return []
        time.sleep(0.1)
    return chromium_procs(rundir)


# ---- the local web site ----

PAGES = {
    "index.html": """<html><head><title>Index Page</title></head><body>
<h1>Welcome Header</h1>
<p>Plain <b>bold words</b> and a <a href="/second.html">link to second</a>.</p>
<div style="display:none">SECRET-DISPLAY-NONE</div>
<span style="visibility:hidden">SECRET-VISIBILITY</span>
<p hidden>SECRET-HIDDEN-ATTR</p>
<ul><li>first item</li><li>second item</li></ul>
<table><tr><th>Name</th><th>Value</th></tr><tr><td>alpha</td><td>42</td></tr></table>
</body></html>""",
    "second.html": """<html><head><title>Second Page</title></head><body><h2>Second Heading</h2>
<a href="/third.html">to third</a></body></html>""",
    "third.html": "<html><head><title>Third Page</title></head><body><p>third body</p></body></html>",
    "form.html": """<html><head><title>Form Page</title></head><body>
<label for="who">Your name</label> <input id="who" name="who">
<label for="color">Color</label> <select id="color" name="color"><option value="r">Red</option><option value="b">Blue</option></select>
<textarea id="notes" aria-label="Notes"></textarea>
<button id="go" onclick="document.getElementById('out').textContent =
  document.getElementById('who').value + ' likes ' + document.getElementById('color').selectedOptions[0].text">Submit Form</button>
<form onsubmit="document.getElementById('out').textContent='submitted ' + this.q.value; return false;">
  <input name="q" aria-label="Query"></form>
<p id="out">no result yet</p>
</body></html>""",
    "alert.html": """<html><head><title>Alert Page</title></head><body>
<script>alert('hello from alert');</script><p>after the alert</p>
<button onclick="document.getElementById('r').textContent = 'confirm said ' + confirm('sure?')">Ask</button>
<p id="r">not asked</p></body></html>""",
}


class Handler(SimpleHTTPRequestHandler):
    release = threading.Event()

    def log_message(self, *a):
        pass

    def do_GET(self):
        if self.path == "/hang":                 # never answers
            Handler.release.wait(300)
            return
        if self.path == "/partial":              # headers and some body, then nothing
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(b"<html><head><title>Partial</title></head><body><p>partial text arrived</p>" + b" " * 4096)
            self.wfile.flush()
            Handler.release.wait(300)
            return
        return super().do_GET()


@pytest.fixture(scope="module")
def site():
    root = tempfile.mkdtemp(prefix="tb-www-")
    for name, text in PAGES.items():
        with open(os.path.join(root, name), "w") as f:
            f.write(text)
    handler = lambda *a, **kw: Handler(*a, directory=root, **kw)
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield "http://127.0.0.1:%d" % srv.server_address[1]
    Handler.release.set()
    srv.shutdown()
    srv.server_close()


@pytest.fixture(scope="module")
def plugin():
    p = Plugin()
    yield p
    p.close()


def bid_of(axtree, role, name):
    m = re.search(r"^\s*\[(\w+)\] %s '%s'" % (re.escape(role), re.escape(name)), axtree, re.M)
    assert m, "no %s %r in\n%s" % (role, name, axtree)
    return m.group(1)


# ---- browse ----

def test_text_headings_links_lists_tables_and_hidden(plugin, site):
    a = plugin.browse(site + "/index.html")
    ex, text = a["extras"], a["content"]
    assert ex["error"] is False and ex["last_browser_action_error"] == ""
    assert ex["url"] == site + "/index.html" and ex["title"] == "Index Page"
    assert ex["trigger_by_action"] == "browse"
    assert text.startswith("[Current URL: %s/index.html]\n" % site)
    assert "============== BEGIN webpage content ==============" in text
    assert "# Welcome Header" in text
    assert "**bold words**" in text
    assert "[link to second](%s/second.html)" % site in text
    assert "* first item\n* second item" in text
    assert "Name | Value" in text and "alpha | 42" in text
    for secret in ("SECRET-DISPLAY-NONE", "SECRET-VISIBILITY", "SECRET-HIDDEN-ATTR"):
        assert secret not in text
    assert ex["screenshot"] == ""
    assert ex["open_pages_urls"][ex["active_page_index"]] == ex["url"]


def test_local_files_absolute_relative_and_file_url(plugin):
    d = tempfile.mkdtemp(prefix="tb-files-")
    os.mkdir(os.path.join(d, "sub"))
    with open(os.path.join(d, "sub", "local page.html"), "w") as f:
        f.write("<title>Local</title><h3>Local Heading</h3><p>from a file</p>")
    full = os.path.join(d, "sub", "local page.html")
    for url, cwd in ((full, None), ("sub/local page.html", d), ("file://" + full.replace(" ", "%20"), None)):
        a = plugin.call("browse", {"url": url}, cwd)
        assert a["extras"]["error"] is False, a["extras"]
        assert a["extras"]["url"] == "file://" + full.replace(" ", "%20")
        assert "### Local Heading" in a["content"] and "from a file" in a["content"]


def test_screenshot_is_a_png(plugin, site):
    a = plugin.browse(site + "/index.html", screenshot=True)
    shot = a["extras"]["screenshot"]
    assert shot.startswith("data:image/png;base64,")
    png = base64.b64decode(shot.split(",", 1)[1])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert png[12:16] == b"IHDR"
    w, h = struct.unpack(">II", png[16:24])
    assert (w, h) == (1280, 720)


# ---- the tree and bids ----

def test_axtree_lines_and_stable_bids(plugin, site):
    plugin.browse(site + "/form.html")
    one = plugin.act("noop(wait_ms=10)")["extras"]["axtree"]
    two = plugin.act("noop(10)")["extras"]["axtree"]
    assert one == two
    lines = one.split("\n")
    assert lines[0].startswith("RootWebArea 'Form Page'")
    bids = re.findall(r"^\t*\[(\w+)\] ", one, re.M)
    assert len(bids) == len(set(bids)) and len(bids) > 5
    assert re.search(r"^\t+\[\w+\] button 'Submit Form', clickable", one, re.M)
    assert re.search(r"^\t+\[\w+\] textbox 'Your name'", one, re.M)
    assert re.search(r"^\t+\[\w+\] combobox 'Color' value='Red'", one, re.M)
    for line in lines:
        assert re.match(r"^\t*(\[\w+\] )?[A-Za-z]+( (['\"]).*\3)?", line), line


def test_fill_select_click_change_the_page(plugin, site):
    a = plugin.browse(site + "/form.html")
    tree = plugin.act("noop(0)")["extras"]["axtree"]
    who, color, go = bid_of(tree, "textbox", "Your name"), bid_of(tree, "combobox", "Color"), bid_of(tree, "button", "Submit Form")
    a = plugin.act("fill('%s', 'Alice')\nselect_option('%s', 'Blue')\nclick('%s')" % (who, color, go))
    ex = a["extras"]
    assert ex["error"] is False, ex["last_browser_action_error"]
    assert "[Action executed successfully.]" in a["content"]
    assert "StaticText 'Alice likes Blue'" in ex["axtree"]
    assert re.search(r"\[%s\] textbox 'Your name' value='Alice'" % who, ex["axtree"])
    assert ex["focused_element_bid"] == go
    # the same bids still name the same elements
    a = plugin.act("clear('%s')\nfill('%s', 'Bob')\nclick('%s')" % (who, who, go))
    assert "StaticText 'Bob likes Blue'" in a["extras"]["axtree"]
    assert "Bob likes Blue" in plugin.act("noop(0)")["content"]


def test_python_literals_in_actions(plugin, site):
    plugin.browse(site + "/form.html")
    tree = plugin.act("noop(0)")["extras"]["axtree"]
    notes = bid_of(tree, "textbox", "Notes")
    a = plugin.act('# a comment line\nfill(bid="%s", value="""two\nlines, it\'s "quoted" \\u00e9""")   # trailing comment\n'
                   "noop(wait_ms=1_0); noop(-0)" % notes)
    assert a["extras"]["error"] is False, a["extras"]["last_browser_action_error"]
    assert "value='two\\nlines, it\\'s \"quoted\" \u00e9'" in a["extras"]["axtree"]
    a = plugin.act("fill(%s, 'con' \"cat\" r'\\n')" % notes)     # an int bid, adjacent literals, a raw string
    assert a["extras"]["error"] is False, a["extras"]["last_browser_action_error"]
    assert "value='concat\\\\n'" in a["extras"]["axtree"]


def test_tab_escape_in_an_action_and_in_the_axtree(plugin, site):
    # '\t' in an action's string is a tab (as in Python), and the axtree shows
    # a tab in a value as Python's repr() does: \t
    plugin.browse(site + "/form.html")
    notes = bid_of(plugin.act("noop(0)")["extras"]["axtree"], "textbox", "Notes")
    a = plugin.act("fill('%s', 'a\\tb')" % notes)
    assert a["extras"]["error"] is False, a["extras"]["last_browser_action_error"]
    assert "value='a\\tb'" in a["extras"]["axtree"], a["extras"]["axtree"]


def test_press_enter_submits(plugin, site):
    plugin.browse(site + "/form.html")
    q = bid_of(plugin.act("noop(0)")["extras"]["axtree"], "textbox", "Query")
    a = plugin.act("fill('%s', 'cats')\npress('%s', 'Enter')" % (q, q))
    assert a["extras"]["error"] is False, a["extras"]["last_browser_action_error"]
    assert "StaticText 'submitted cats'" in a["extras"]["axtree"]


# ---- navigation and tabs ----

def test_press_with_shift_types_the_shifted_character(plugin, site):
    plugin.browse(site + "/form.html")
    q = bid_of(plugin.act("noop(0)")["extras"]["axtree"], "textbox", "Query")
    a = plugin.act("fill('%s', 'x')\npress('%s', 'Shift+a')\npress('%s', 'b')" % (q, q, q))
    assert a["extras"]["error"] is False, a["extras"]["last_browser_action_error"]
    assert "value='xAb'" in a["extras"]["axtree"], a["extras"]["axtree"]


def test_click_link_go_back_go_forward(plugin, site):
    plugin.browse(site + "/second.html")
    link = bid_of(plugin.act("noop(0)")["extras"]["axtree"], "link", "to third")
    a = plugin.act("click('%s')" % link)
    assert a["extras"]["url"] == site + "/third.html" and a["extras"]["title"] == "Third Page"
    a = plugin.act("go_back()")
    assert a["extras"]["url"] == site + "/second.html"
    assert bid_of(a["extras"]["axtree"], "link", "to third")
    a = plugin.act("go_forward()")
    assert a["extras"]["url"] == site + "/third.html", a["extras"]


def test_tabs(plugin, site):
    plugin.browse(site + "/index.html")
    a = plugin.act("new_tab()")
    ex = a["extras"]
    n = len(ex["open_pages_urls"])
    assert n >= 2 and ex["active_page_index"] == n - 1 and ex["url"] == "about:blank"
    a = plugin.act("goto('%s/second.html')" % site)
    assert a["extras"]["open_pages_urls"][n - 1] == site + "/second.html"
    a = plugin.act("tab_focus(%d)" % (n - 2))
    assert a["extras"]["active_page_index"] == n - 2 and a["extras"]["url"] == site + "/index.html"
    a = plugin.act("tab_focus(%d)\ntab_close()" % (n - 1))
    ex = a["extras"]
    assert len(ex["open_pages_urls"]) == n - 1 and site + "/second.html" not in ex["open_pages_urls"]
    assert ex["active_page_index"] == n - 2
    a = plugin.act("tab_focus(7)")
    assert a["extras"]["error"] is True and "no such tab" in a["extras"]["last_browser_action_error"]


# ---- errors are answers ----

def closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_unreachable_url(plugin):
    url = "http://127.0.0.1:%d/" % closed_port()
    a = plugin.browse(url, timeout=30)
    ex = a["extras"]
    assert ex["error"] is True
    assert "ERR_CONNECTION_REFUSED" in ex["last_browser_action_error"]
    assert "ERR_CONNECTION_REFUSED" in a["content"] and "BEGIN error message" in a["content"]


def test_unknown_bid(plugin, site):
    plugin.browse(site + "/index.html")
    a = plugin.act("click('987654')")
    assert a["extras"]["error"] is True
    assert "987654" in a["extras"]["last_browser_action_error"]
    assert "987654" in a["content"]
    assert a["extras"]["url"] == site + "/index.html"


@pytest.mark.parametrize("actions,words", [
    ("click('12'", "never closed"),
    ("fill('12', 'unterminated)", "unterminated string"),
    ("click(some_name)", "not a literal"),
    ("click('1') click('2')", "one call per line"),
    ("click('1', button='left', button='right')", "repeated"),
    ("fill('1')", "missing required argument 'value'"),
    ("click('1', colour='red')", "unexpected keyword argument 'colour'"),
    ("", "No browser action"),
])
def test_malformed_actions(plugin, actions, words):
    a = plugin.act(actions)
    assert a["extras"]["error"] is True
    assert words in a["extras"]["last_browser_action_error"], a["extras"]["last_browser_action_error"]
    assert a["extras"]["last_browser_action"] == actions


def test_unknown_function(plugin):
    a = plugin.act("launch_rocket('moon')")
    assert a["extras"]["error"] is True
    assert "Unknown action function 'launch_rocket'" in a["extras"]["last_browser_action_error"]


def test_page_that_never_answers_is_bounded_by_the_timeout(plugin, site):
    t = time.time()
    a = plugin.browse(site + "/hang", timeout=3)
    assert a["extras"]["error"] is True and "Timeout" in a["extras"]["last_browser_action_error"]
    assert time.time() - t < WAIT
    a = plugin.browse(site + "/partial", timeout=3)
    assert a["extras"]["error"] is True and "Timeout" in a["extras"]["last_browser_action_error"]
    assert "partial text arrived" in a["content"]
    a = plugin.browse(site + "/second.html")           # the browser is still fine
    assert a["extras"]["error"] is False and a["extras"]["title"] == "Second Page"


def test_dialogs_do_not_hang(plugin, site):
    a = plugin.browse(site + "/alert.html", timeout=30)
    assert a["extras"]["error"] is False, a["extras"]
    assert "after the alert" in a["content"]
    assert "hello from alert" in a["content"]
    ask = bid_of(plugin.act("noop(0)")["extras"]["axtree"], "button", "Ask")
    a = plugin.act("click('%s')" % ask, timeout=30)
    assert "StaticText 'confirm said true'" in a["extras"]["axtree"]


# ---- the program ----

def test_bad_lines_get_errors_and_the_program_goes_on(plugin, site):
    plugin.send_raw("this is not json\n")
    a = plugin.wait(None)
    assert a["observation"] == "error" and a["extras"]["code"] == "bad_json"
    plugin.send_raw(json.dumps({"id": 77, "action": "fly", "args": {}}) + "\n")
    a = plugin.wait(77)
    assert a["observation"] == "error" and a["extras"]["code"] == "unknown_action"
    plugin.send_raw(json.dumps({"id": "nourl", "action": "browse", "args": {}}) + "\n")
    a = plugin.wait("nourl")
    assert a["observation"] == "error" and a["extras"]["code"] == "bad_request"
    plugin.send_raw(json.dumps({"id": "badto", "action": "browse", "args": {"url": "x", "timeout": "soon"}}) + "\n")
    assert plugin.wait("badto")["extras"]["code"] == "bad_request"
    assert plugin.browse(site + "/third.html")["extras"]["title"] == "Third Page"


def test_several_requests_in_flight(plugin, site):
    ids = [plugin.send("browse", {"url": site + "/%s.html" % n}) for n in ("index", "second", "third")]
    ids.append(plugin.send("nope", {}))
    bad = plugin.wait(ids[3])              # answered while the browses are still queued or running
    assert bad["extras"]["code"] == "unknown_action"
    titles = [plugin.wait(i)["extras"]["title"] for i in ids[:3]]
    assert titles == ["Index Page", "Second Page", "Third Page"]


def test_chromium_killed_is_started_again(site):
    p = Plugin()
    try:
        assert p.browse(site + "/index.html")["extras"]["restarted"] is False
        procs = chromium_procs(p.rundir)
        assert procs
        browser = [pid for pid in procs if open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[1] == str(p.proc.pid)]
        assert len(browser) == 1
        os.kill(browser[0], signal.SIGKILL)
        a = p.browse(site + "/second.html")
        assert a["extras"]["restarted"] is True, (a["content"], a["extras"]["last_browser_action_error"])
        assert a["extras"]["error"] is False and a["extras"]["title"] == "Second Page"
        assert p.browse(site + "/third.html")["extras"]["restarted"] is False
    finally:
        p.close()
    assert wait_gone(p.rundir) == []


def test_eof_ends_the_program_and_chromium(site):
    p = Plugin()
    p.browse(site + "/index.html")
    assert chromium_procs(p.rundir)
    p.proc.stdin.close()
    assert p.proc.wait(60) == 0
    assert wait_gone(p.rundir) == []
    assert not [f for f in os.listdir(p.rundir) if f.startswith("chromium-profile")]


def test_sigterm_and_sigkill_leave_no_chromium(site):
    for sig in (signal.SIGTERM, signal.SIGKILL):
        p = Plugin()
        p.browse(site + "/index.html")
        assert chromium_procs(p.rundir)
        p.proc.send_signal(sig)
        rc = p.proc.wait(60)
        assert rc == (0 if sig == signal.SIGTERM else -signal.SIGKILL)
        assert wait_gone(p.rundir) == [], "Chromium outlived a %s'd program" % sig.name
