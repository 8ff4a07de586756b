"""cdp.py — headless Chromium driven over the DevTools protocol on its pipe
(--remote-debugging-pipe: fd 3 commands in, fd 4 replies and events out,
each message one JSON text and a NUL), for the web page's tests: tabs,
navigation, Runtime.evaluate, key and mouse input, the viewport, screenshots,
and the page's exceptions, console errors and CSP reports."""

import base64
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time

CHROMIUM = os.environ.get("TERMD_CHROMIUM") or "/usr/lib/chromium/chromium"


# what Runtime.evaluate answers while the page it targets is being replaced
_NAVIGATING = ("Inspected target navigated or closed", "Execution context was destroyed",
               "Cannot find context with specified id")


class CDPError(Exception):
    pass


class Browser:
    """One Chromium process with a private profile in a temp dir."""

    def __init__(self, log_path=None):
        if not os.access(CHROMIUM, os.X_OK):
            raise CDPError("Chromium not found at %s (make deps installs Debian's chromium)" % CHROMIUM)
        self.dir = tempfile.mkdtemp(prefix="td-chromium-")
        self.log = open(log_path or os.path.join(self.dir, "chromium.log"), "wb")
        to_r, to_w = os.pipe()
        fr_r, fr_w = os.pipe()

        def child():   # move both ends out of the way, then onto 3 and 4
            a, b = os.dup(to_r), os.dup(fr_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        args = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
                "--user-data-dir=" + os.path.join(self.dir, "profile"), "--no-first-run",
                "--no-default-browser-check", "--disable-dev-shm-usage", "--disable-extensions",
                "--disable-background-networking", "--window-size=1280,720", "about:blank"]
        self.proc = subprocess.Popen(args, pass_fds=(3, 4), preexec_fn=child, stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        os.close(to_r)
        os.close(fr_w)
        self.w, self.r = to_w, fr_r
        self.n = 0
        self.replies = {}
        self.events = []
        self.cv = threading.Condition()
        self.closed = False
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.call("Browser.getVersion", timeout=60)

    def _read(self):
        buf = b""
        while True:
            try:
                chunk = os.read(self.r, 1 << 20)
            except OSError:
                chunk = b""
            if not chunk:
                with self.cv:
                    self.closed = True
                    self.cv.notify_all()
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                with self.cv:
                    if "id" in msg:
                        self.replies[msg["id"]] = msg
                    else:
                        self.events.append(msg)
                    self.cv.notify_all()

    def call(self, method, params=None, session=None, timeout=30.0):
        with self.cv:
            self.n += 1
            i = self.n
        msg = {"id": i, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        with self.cv:
            while i not in self.replies:
                left = deadline - time.monotonic()
                if self.closed or left <= 0:
                    raise CDPError("%s: no reply within %.0fs%s" % (
                        method, timeout, " (Chromium is gone)" if self.closed else ""))
                self.cv.wait(left)
            rep = self.replies.pop(i)
        if "error" in rep:
            raise CDPError("%s: %s" % (method, rep["error"]))
        return rep.get("result", {})

    def new_page(self, url=None, width=1000, height=600):
        t = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        s = self.call("Target.attachToTarget", {"targetId": t, "flatten": True})["sessionId"]
        p = Page(self, t, s)
        for m in ("Page.enable", "Runtime.enable", "Log.enable"):
            self.call(m, session=s)
        p.viewport(width, height)
        if url:
            p.goto(url)
        return p

    def events_for(self, session):
        with self.cv:
            return [e for e in self.events if e.get("sessionId") == session]

    def close(self):
        try:
            os.close(self.w)   # Chromium exits when its command pipe closes
        except OSError:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.proc.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        os.close(self.r)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class Page:
    """One tab, attached with a flat session."""

    def __init__(self, browser, target, session):
        self.b, self.target, self.session = browser, target, session

    def call(self, method, params=None, timeout=30.0):
        return self.b.call(method, params, session=self.session, timeout=timeout)

    def goto(self, url, timeout=30.0):
        since = len(self.b.events_for(self.session))
        r = self.call("Page.navigate", {"url": url}, timeout=timeout)
        if r.get("errorText"):
            raise CDPError("navigate %s: %s" % (url, r["errorText"]))
        self.wait(lambda: any(e.get("method") == "Page.loadEventFired"
                              for e in self.b.events_for(self.session)[since:]),
                  timeout, "the load event of " + url)

    def reload(self, timeout=30.0):
        since = len(self.b.events_for(self.session))
        self.call("Page.reload")
        self.wait(lambda: any(e.get("method") == "Page.loadEventFired"
                              for e in self.b.events_for(self.session)[since:]),
                  timeout, "the load event after a reload")

    def eval(self, expr, timeout=30.0):
        r = self.call("Runtime.evaluate", {"expression": expr, "returnByValue": True,
                                           "awaitPromise": True}, timeout=timeout)
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            raise CDPError("evaluate %r: %s" % (expr[:200], (d.get("exception") or {}).get("description")
                                                 or d.get("text")))
        return r.get("result", {}).get("value")

    def wait(self, pred, timeout=30.0, what="a condition"):
        deadline = time.monotonic() + timeout
        last = None
        while True:
            last = pred()
            if last:
                return last
            if time.monotonic() > deadline:
                raise AssertionError("timed out after %.0fs waiting for %s (problems on the page: %r)"
                                     % (timeout, what, self.problems()))
            time.sleep(0.1)

    def wait_js(self, expr, timeout=30.0, what=None):
        """Poll a JS expression until it is truthy; its value. A page that
        is navigating (a reload the page itself asked for) has no context
        to evaluate in for a moment: that counts as not yet."""
        def probe():
            try:
                return self.eval(expr)
            except CDPError as e:
                if any(m in str(e) for m in _NAVIGATING):
                    return None
                raise
        return self.wait(probe, timeout, what or expr)

    def viewport(self, width, height):
        self.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": height,
                                                         "deviceScaleFactor": 1, "mobile": False})

    def key(self, key, text=None, code=None, vk=None):
        p = {"type": "keyDown", "key": key}
        if text is not None:
            p["text"] = p["unmodifiedText"] = text
        if code:
            p["code"] = code
        if vk:
            p["windowsVirtualKeyCode"] = p["nativeVirtualKeyCode"] = vk
        self.call("Input.dispatchKeyEvent", p)
        p = {k: v for k, v in p.items() if k not in ("text", "unmodifiedText")}
        p["type"] = "keyUp"
        self.call("Input.dispatchKeyEvent", p)

    def type(self, text):
        """Each character as a key press; '\\n' as Enter."""
        for ch in text:
            if ch == "\n":
                self.key("Enter", "\r", "Enter", 13)
            else:
                self.key(ch, ch)

    def screenshot(self):
        return base64.b64decode(self.call("Page.captureScreenshot", {"format": "png"}, timeout=60)["data"])

    def problems(self):
        """Exceptions, console errors and CSP reports on this page so far."""
        out = []
        for e in self.b.events_for(self.session):
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                out.append("exception: %s" % ((d.get("exception") or {}).get("description") or d.get("text")))
            elif m == "Runtime.consoleAPICalled" and p.get("type") == "error":
                out.append("console.error: %s" % " ".join(str(a.get("value", a.get("description")))
                                                          for a in p.get("args", [])))
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append("log: %s" % p["entry"].get("text"))
        return out

    def close(self):
        try:
            self.b.call("Target.closeTarget", {"targetId": self.target})
        except CDPError:
            pass
