"""Drives termd-jupyter (the jupyter plugin's program) over stdin/stdout JSON lines: start it, send requests,
read answers by id with a bound, find its kernel processes in /proc. Shared by test_jupyter.py,
test_agentskills.py and tests/bench/bench_jupyter.py."""
import json
import os
import select
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def plugin_dir():
    return os.environ.get("TERMD_PLUGIN_DIR") or os.path.join(REPO, "build", "plugins")


def program():
    return os.path.join(plugin_dir(), "jupyter", "termd-jupyter")


class Plugin:
    """One running termd-jupyter. Answers are read line by line and kept by id."""

    def __init__(self, cwd=None, env=None, plugins="jupyter", rundir=None):
        e = dict(os.environ)
        e["PLUGIN"] = "jupyter"
        e["TERMD_PLUGIN_DIR"] = plugin_dir()
        e["TERMD_PLUGINS"] = plugins
        if rundir:
            e["TERMD_PLUGIN_RUNDIR"] = rundir
        else:
            e.pop("TERMD_PLUGIN_RUNDIR", None)
        e.update(env or {})
        self.proc = subprocess.Popen([program()], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, cwd=cwd, env=e)
        self.buf = b""
        self.answers = {}
        self.order = []
        self.errbuf = b""
        self.n = 0

    def send_raw(self, data):
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, action="run_ipython", args=None, cwd=None, id=None):
        if id is None:
            self.n += 1
            id = "r%d" % self.n
        req = {"id": id, "action": action, "args": args or {}}
        if cwd is not None:
            req["cwd"] = cwd
        self.send_raw((json.dumps(req) + "\n").encode())
        return id

    def _pump(self, deadline):
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            fds = [self.proc.stdout, self.proc.stderr]
            r, _, _ = select.select(fds, [], [], left)
            if self.proc.stderr in r:
                chunk = os.read(self.proc.stderr.fileno(), 65536)
                self.errbuf = (self.errbuf + chunk)[-65536:]
            if self.proc.stdout in r:
                chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
                if not chunk:
                    return None
                self.buf += chunk
                got = False
                while b"\n" in self.buf:
                    line, self.buf = self.buf.split(b"\n", 1)
                    ans = json.loads(line.decode("utf-8"))
                    self.answers[json.dumps(ans.get("id"))] = ans
                    self.order.append(ans.get("id"))
                    got = True
                if got:
                    return True

    def wait(self, id, timeout=60):
        key = json.dumps(id)
        deadline = time.monotonic() + timeout
        while key not in self.answers:
            r = self._pump(deadline)
            if r is False:
                raise TimeoutError("no answer for %r within %ss; stderr: %s" % (id, timeout, self.errbuf[-2000:]))
            if r is None:
                raise EOFError("program closed stdout before answering %r; stderr: %s" % (id, self.errbuf[-2000:]))
        return self.answers.pop(key)

    def run(self, code, wait=60, **args):
        args["code"] = code
        cwd = args.pop("cwd", None)
        return self.wait(self.send(args=args, cwd=cwd), timeout=wait)

    def kernel_pids(self):
        return kernel_pids_of(self.proc.pid)

    def close(self, timeout=20):
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            for f in (self.proc.stdout, self.proc.stderr):
                f.close()
        return self.proc.returncode


def _env_of(pid):
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def kernel_pids_of(parent_pid):
    """Live processes started by termd-jupyter <parent_pid>: they carry JPY_PARENT_PID=<parent_pid>."""
    mark = ("JPY_PARENT_PID=%d" % parent_pid).encode()
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        pid = int(d)
        if mark in _env_of(pid):
            try:
                with open("/proc/%d/stat" % pid) as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state != "Z":
                out.append(pid)
    return out


def wait_gone(pids, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [p for p in pids if os.path.exists("/proc/%d" % p) and _state(p) != "Z"]
        if not left:
            return []
        time.sleep(0.05)
    return [p for p in pids if os.path.exists("/proc/%d" % p) and _state(p) != "Z"]


def wait_reaped(pids, timeout=10):
    """until the processes are gone from /proc altogether: their parent has reaped them (a killed
    multi-threaded process shows as a zombie before its parent can reap it)"""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(os.path.exists("/proc/%d" % p) for p in pids):
            return []
        time.sleep(0.05)
    return [p for p in pids if os.path.exists("/proc/%d" % p)]


def _state(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def body(ans):
    """content without the two trailing [Jupyter ...] lines"""
    lines = ans["content"].split("\n")
    assert lines[-2].startswith("[Jupyter current working directory: "), ans["content"]
    assert lines[-1].startswith("[Jupyter Python interpreter: "), ans["content"]
    return "\n".join(lines[:-2])
