"""Tests of the jupyter plugin's program (termd-jupyter) driven directly over its stdin/stdout JSON lines,
with a real IPython kernel: cell output formats, errors, images, timeouts, restarts, cwd, ordering,
bad input, process lifetime, and setup.sh's failures."""
import base64
import json
import os
import signal
import struct
import subprocess
import zlib

import pytest

from jupyter_driver import Plugin, body, kernel_pids_of, wait_gone, wait_reaped, plugin_dir

NO_OUTPUT = "[Code executed successfully with no output]"


@pytest.fixture(scope="module")
def plug():
    p = Plugin(cwd="/")
    yield p
    p.close()


def png_bytes(w, h, rgb):
    """a w×h PNG of one colour, built here and in the kernel the same way"""
    raw = b"".join(b"\0" + bytes(rgb) * w for _ in range(h))

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def test_one_plus_one_and_the_trailer(plug):
    a = plug.run("1+1")
    assert a["observation"] == "run_ipython"
    assert body(a) == "2"
    ex = a["extras"]
    assert ex["code"] == "1+1" and ex["image_urls"] == [] and ex["status"] == "ok"
    assert ex["restarted"] is False and isinstance(ex["execution_count"], int)
    lines = a["content"].split("\n")
    interp = lines[-1][len("[Jupyter Python interpreter: "):-1]
    assert os.path.isabs(interp) and os.access(interp, os.X_OK)
    # the interpreter line is the kernel's own sys.executable
    assert body(plug.run("import sys; print(sys.executable)")) == interp
    cwd = lines[-2][len("[Jupyter current working directory: "):-1]
    assert body(plug.run("import os; print(os.getcwd())")) == cwd


def test_execution_count_grows(plug):
    a = plug.run("None")
    b = plug.run("None")
    assert b["extras"]["execution_count"] == a["extras"]["execution_count"] + 1


def test_print_and_no_output(plug):
    assert body(plug.run("print('hello')\nprint('world')")) == "hello\nworld"
    assert body(plug.run("no_out = 1")) == NO_OUTPUT
    # output then a result, in order
    assert body(plug.run("print('a'); 6*7")) == "a\n42"


def test_stderr_in_order(plug):
    code = "import sys\nprint('out1', flush=True)\nprint('err1', file=sys.stderr, flush=True)\nprint('out2', flush=True)"
    assert body(plug.run(code)) == "out1\nerr1\nout2"


def test_exception_has_no_colour_and_later_cells_run(plug):
    a = plug.run("def f():\n    return 1/0\nf()")
    assert a["extras"]["status"] == "error"
    t = body(a)
    assert "ZeroDivisionError" in t and "division by zero" in t and "\x1b" not in t
    # an error cell followed at once by another cell, many times: none is aborted (stop_on_error false)
    ids = []
    for i in range(30):
        ids.append((plug.send(args={"code": "raise ValueError(%d)" % i}),
                    plug.send(args={"code": "after_err = %d; print(after_err)" % i})))
    for i, (e, ok) in enumerate(ids):
        ae, ao = plug.wait(e), plug.wait(ok)
        assert ae["extras"]["status"] == "error" and "ValueError: %d" % i in body(ae)
        assert ao["extras"]["status"] == "ok" and body(ao) == str(i)


def test_private_mode_sequences_are_stripped_too(plug):
    # ESC [ ? 25 l (hide the cursor) is a CSI with a private marker: stripped
    # like the colours, not left in the answer
    a = plug.run("print('\\x1b[?25lhidden\\x1b[?25h \\x1b[1;31mred\\x1b[0m')")
    assert body(a) == "hidden red", repr(body(a))


def test_input_is_not_available(plug):
    a = plug.run("input('name? ')")
    assert a["extras"]["status"] == "error" and "StdinNotImplementedError" in body(a)


def test_png_display_gives_image_url(plug):
    want = png_bytes(3, 2, (255, 0, 0))
    code = ("import struct, zlib\nfrom IPython.display import Image, display\n"
            "raw = b''.join(b'\\0' + bytes((255, 0, 0)) * 3 for _ in range(2))\n"
            "def chunk(t, d):\n    return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d) & 0xFFFFFFFF)\n"
            "png = b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 3, 2, 8, 2, 0, 0, 0)) + "
            "chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b'')\n"
            "print('before')\ndisplay(Image(data=png))\nprint('after')")
    a = plug.run(code)
    urls = a["extras"]["image_urls"]
    assert len(urls) == 1
    prefix = "data:image/png;base64,"
    assert urls[0].startswith(prefix) and "\n" not in urls[0]
    assert base64.b64decode(urls[0][len(prefix):]) == want
    assert body(a) == "before\nafter"
    # a result that is an image also lands in image_urls; a cell without images has []
    b = plug.run("Image(data=png)")
    assert len(b["extras"]["image_urls"]) == 1 and body(b) == NO_OUTPUT
    assert plug.run("print(1)")["extras"]["image_urls"] == []


def test_display_text_without_image(plug):
    a = plug.run("from IPython.display import display\ndisplay('shown'); print('x')")
    assert body(a) == "'shown'\nx"


def test_timeout_interrupts_keeps_output_and_variables(plug):
    code = "kept = 42\nprint('started', flush=True)\nimport time\ntime.sleep(30)\nprint('never')"
    a = plug.run(code, timeout=1)
    assert a["extras"]["status"] == "timeout"
    t = body(a)
    assert t.startswith("started") and t.endswith("[Execution timed out (1 seconds).]")
    assert "never" not in t and "KeyboardInterrupt" not in t
    b = plug.run("print(kept)")
    assert body(b) == "42" and b["extras"]["restarted"] is False


def test_cell_sent_right_after_a_timeout_runs(plug):
    # the next request is already queued when the interrupt happens: it must not be aborted
    slow = plug.send(args={"code": "import time\ntime.sleep(30)", "timeout": 1})
    nxt = plug.send(args={"code": "queued_val = 5"})
    check = plug.send(args={"code": "print(queued_val)"})
    assert plug.wait(slow)["extras"]["status"] == "timeout"
    assert plug.wait(nxt)["extras"]["status"] == "ok"
    assert body(plug.wait(check)) == "5"


def test_timeout_without_output(plug):
    a = plug.run("import time; time.sleep(20)", timeout=0.5)
    assert body(a) == "[Execution timed out (0.5 seconds).]"


def test_requests_written_back_to_back_are_answered_in_order(plug):
    lines = b"".join((json.dumps({"id": 100 + i, "action": "run_ipython",
                                  "args": {"code": "seq_v = %d\nprint(seq_v * 2)" % i}}) + "\n").encode()
                     for i in range(5))
    plug.send_raw(lines)
    got = [plug.wait(100 + i) for i in range(5)]
    assert [body(g) for g in got] == [str(2 * i) for i in range(5)]
    order = [x for x in plug.order if isinstance(x, int) and 100 <= x < 105]
    assert order == list(range(100, 105))


def test_stdin_is_read_while_a_cell_runs(plug):
    slow = plug.send(args={"code": "import time\ntime.sleep(3)\nprint('slow done')"})
    plug.send_raw(b"this is not json\n")
    bad = plug.send(action="nope")
    # both errors come back while the slow cell still runs, before its answer
    a = plug.wait(bad, timeout=30)
    assert a["extras"]["code"] == "unknown_action"
    assert json.dumps(slow) not in plug.answers
    assert body(plug.wait(slow)) == "slow done"


def test_malformed_requests(plug):
    plug.send_raw(b"{not json\n")
    a = plug.wait(None)
    assert a["observation"] == "error" and a["extras"]["code"] == "bad_json"
    plug.send_raw(b"[1, 2]\n")
    assert plug.wait(None)["extras"]["code"] == "bad_json"
    plug.send_raw(b'{"id": "noact"}\n')
    assert plug.wait("noact")["extras"]["code"] == "bad_request"
    assert plug.wait(plug.send(action="run"))["extras"]["code"] == "unknown_action"
    a = plug.wait(plug.send(args={}))
    assert a["extras"]["code"] == "bad_request" and "code" in a["content"]
    assert plug.wait(plug.send(args={"code": 5}))["extras"]["code"] == "bad_request"
    assert plug.wait(plug.send(args={"code": "1", "timeout": -1}))["extras"]["code"] == "bad_request"
    assert plug.wait(plug.send(args={"code": "1", "timeout": "soon"}))["extras"]["code"] == "bad_request"
    assert plug.wait(plug.send(args={"code": "1", "kernel_init_code": 3}))["extras"]["code"] == "bad_request"
    plug.send_raw(b'{"id": 7, "action": "run_ipython", "args": {"code": "1"}, "cwd": 3}\n')
    assert plug.wait(7)["extras"]["code"] == "bad_request"
    plug.send_raw(b"\n   \n")   # blank lines are no requests
    # integer ids come back as integers, and the program still works
    plug.send_raw(b'{"id": 99, "action": "run_ipython", "args": {"code": "3*3"}}\n')
    a = plug.wait(99)
    assert a["id"] == 99 and body(a) == "9"


def test_invalid_utf8_output_is_replaced(plug):
    a = plug.run("import sys\nsys.stdout.buffer.write(b'ok\\xff\\xfe!\\n') if hasattr(sys.stdout, 'buffer') "
                 "else print('ok\\udcff!')")
    # the answer line parsed as JSON (the driver decodes UTF-8 strictly), whatever the kernel sent
    assert body(a).startswith("ok")


def test_huge_output_is_bounded(plug):
    a = plug.run("for i in range(60000):\n    print('%05d' % i + 'x' * 50)")
    t = body(a)
    assert len(t) < 1200 * 1024
    assert t.startswith("00000x") and t.rstrip().endswith("59999" + "x" * 50)
    assert "bytes of output left out" in t


def test_cwd_follows_the_request(tmp_path):
    d1, d2 = tmp_path / "one", tmp_path / "two"
    d1.mkdir()
    d2.mkdir()
    p = Plugin(cwd="/")
    try:
        code = "import os; print(os.getcwd())"
        a = p.run(code, cwd=str(d1))
        assert body(a) == str(d1)
        assert a["content"].split("\n")[-2] == "[Jupyter current working directory: %s]" % d1
        assert body(p.run(code, cwd=str(d2))) == str(d2)
        # the cell moves itself: main's cwd did not change, so the kernel stays where the cell went
        assert body(p.run("os.chdir(%r)" % str(d1), cwd=str(d2))) == NO_OUTPUT
        a = p.run(code, cwd=str(d2))
        assert body(a) == str(d1) and a["content"].split("\n")[-2].endswith("%s]" % d1)
        # main moves again: followed, silently
        assert body(p.run(code, cwd="/")) == "/"
        # a cwd that does not exist is no error; the kernel stays
        a = p.run(code, cwd=str(tmp_path / "missing"))
        assert body(a) == "/" and a["extras"]["status"] == "ok"
    finally:
        assert p.close() == 0


def test_the_cell_after_an_error_runs_with_a_kernel_slow_to_stop_aborting(tmp_path):
    # termd-jupyter asks with stop_on_error false: a cell after one that raised
    # runs, even on a kernel that goes on aborting requests for a minute after
    # an error it was told to stop on (its stop_on_error_timeout, set here)
    prof = tmp_path / "ipython" / "profile_default"
    prof.mkdir(parents=True)
    (prof / "ipython_kernel_config.py").write_text(
        "c.Kernel.stop_on_error_timeout = 60.0\nc.IPythonKernel.stop_on_error_timeout = 60.0\n")
    p = Plugin(cwd=str(tmp_path), env={"IPYTHONDIR": str(tmp_path / "ipython")})
    try:
        a = p.run("raise ValueError('boom')")
        assert a["extras"]["status"] == "error" and "ValueError: boom" in body(a), a
        a = p.run("print('after')")
        assert a["extras"]["status"] == "ok" and body(a) == "after", a
    finally:
        assert p.close() == 0


def test_kernel_death_restart_and_init_code(tmp_path):
    p = Plugin(cwd=str(tmp_path))
    try:
        a = p.run("print(ki)", kernel_init_code="ki = 7")
        assert body(a) == "7" and a["extras"]["restarted"] is False
        # init code runs once per kernel start, not again
        assert body(p.run("ki += 1; print(ki)", kernel_init_code="ki = 100")) == "8"
        old = p.kernel_pids()
        assert old
        a = p.run("print('going', flush=True); import os; os._exit(1)")
        assert a["extras"]["status"] == "error" and a["extras"]["restarted"] is False
        assert "died" in body(a)
        assert wait_gone(old) == []
        a = p.run("print(ki)", kernel_init_code="ki = 9")
        assert a["extras"]["restarted"] is True
        assert "restarted" in body(a) and body(a).endswith("9")
        assert a["extras"]["status"] == "ok"
        new = p.kernel_pids()
        assert new and not set(new) & set(old)
        b = p.run("print(ki)", kernel_init_code="ki = 9")
        assert body(b) == "9" and b["extras"]["restarted"] is False
    finally:
        assert p.close() == 0


def test_kernel_killed_between_cells_is_restarted(tmp_path):
    p = Plugin(cwd=str(tmp_path))
    try:
        assert body(p.run("v = 1; print(v)")) == "1"
        pids = p.kernel_pids()
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        assert wait_reaped(pids) == []   # termd-jupyter saw it die
        a = p.run("print('v' in globals())")
        assert a["extras"]["restarted"] is True and body(a).endswith("False")
    finally:
        assert p.close() == 0


def test_kernel_that_ignores_the_interrupt_is_replaced(tmp_path):
    p = Plugin(cwd=str(tmp_path))
    try:
        code = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nprint('stubborn', flush=True)\ntime.sleep(120)"
        a = p.run(code, timeout=1, wait=60)
        assert a["extras"]["status"] == "timeout"
        t = body(a)
        assert t.startswith("stubborn") and "[Execution timed out (1 seconds).]" in t and "restarted" in t
        b = p.run("1+1")
        assert b["extras"]["restarted"] is True and body(b).endswith("2")
    finally:
        assert p.close() == 0


def _files_in(d):
    return sorted(os.listdir(d))


def test_eof_ends_program_and_kernel(tmp_path):
    rd = tmp_path / "run"
    rd.mkdir(mode=0o700)
    p = Plugin(cwd=str(tmp_path), rundir=str(rd))
    assert body(p.run("1+1")) == "2"
    pids = p.kernel_pids()
    assert pids and any(f.endswith(".json") for f in _files_in(rd))
    # a cell still running when stdin closes is answered, then everything ends
    pending = p.send(args={"code": "import time; time.sleep(60)"})
    p.proc.stdin.close()
    assert p.proc.wait(15) == 0
    out = p.proc.stdout.read().decode()
    assert json.loads(out.strip().splitlines()[-1])["id"] == pending
    assert wait_gone(pids) == []
    assert _files_in(rd) == []
    p.proc.stdout.close()
    p.proc.stderr.close()


def test_own_rundir_is_private_and_removed(tmp_path):
    p = Plugin(cwd=str(tmp_path), env={"TMPDIR": str(tmp_path)})
    assert body(p.run("1+1")) == "2"
    dirs = [d for d in os.listdir(tmp_path) if d.startswith("termd-jupyter.")]
    assert len(dirs) == 1
    assert os.stat(tmp_path / dirs[0]).st_mode & 0o777 == 0o700
    assert p.close() == 0
    assert not (tmp_path / dirs[0]).exists()


def test_sigterm_ends_program_and_kernel(tmp_path):
    p = Plugin(cwd=str(tmp_path))
    assert body(p.run("1+1")) == "2"
    pids = p.kernel_pids()
    p.proc.send_signal(signal.SIGTERM)
    assert p.proc.wait(15) == 0
    assert wait_gone(pids) == []
    p.close()


def test_sigkill_of_program_takes_the_kernel(tmp_path):
    # a SIGKILLed program cannot clean up: its rundir is termd's to remove, so give it one here
    rd = tmp_path / "run"
    rd.mkdir(mode=0o700)
    p = Plugin(cwd=str(tmp_path), rundir=str(rd))
    assert body(p.run("1+1")) == "2"
    pids = p.kernel_pids()
    assert pids
    p.proc.kill()
    p.proc.wait(10)
    assert wait_gone(pids, timeout=10) == []
    p.close()


def test_kernel_starts_on_first_use_only(tmp_path):
    p = Plugin(cwd=str(tmp_path))
    try:
        assert p.wait(p.send(action="nope"))["extras"]["code"] == "unknown_action"
        assert kernel_pids_of(p.proc.pid) == []
        assert body(p.run("1+1")) == "2"
        assert kernel_pids_of(p.proc.pid) != []
    finally:
        assert p.close() == 0


def test_no_python_with_ipykernel_is_a_clear_error(tmp_path):
    fake = tmp_path / "python3"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    p = Plugin(cwd=str(tmp_path), env={"TERMD_JUPYTER_PYTHON": str(fake)})
    try:
        a = p.run("1+1")
        assert a["observation"] == "error" and a["extras"]["code"] == "plugin_failed"
        assert "ipykernel" in a["content"] and str(fake) in a["content"]
        # still serving
        assert p.wait(p.send(args={}))["extras"]["code"] == "bad_request"
    finally:
        assert p.close() == 0


def test_kernel_that_fails_to_start_is_a_clear_error(tmp_path):
    # passes the ipykernel probe, then dies at start with a message on stderr
    fake = tmp_path / "python3"
    fake.write_text("#!/bin/sh\ncase \"$1\" in -c) exit 0;; esac\necho 'boom: no kernel today' >&2\nexit 3\n")
    fake.chmod(0o755)
    p = Plugin(cwd=str(tmp_path), env={"TERMD_JUPYTER_PYTHON": str(fake)})
    try:
        for _ in range(2):   # each request tries again, and says why it failed
            a = p.run("1+1")
            assert a["observation"] == "error" and a["extras"]["code"] == "plugin_failed"
            assert "exit status 3" in a["content"] and a["content"].endswith("boom: no kernel today")
    finally:
        assert p.close() == 0


# ---------------------------------------------------------------- setup.sh

SAFE_TOOLS = ["sh", "dirname", "mktemp", "rm", "id", "grep", "awk", "tr", "cat", "head", "tail", "cut"]


def _tool_dir(tmp_path, extra=None):
    """a PATH holding only harmless tools (no package manager), plus the given fake scripts"""
    b = tmp_path / "bin"
    b.mkdir()
    for t in SAFE_TOOLS:
        for d in ("/usr/bin", "/bin"):
            if os.path.exists(os.path.join(d, t)):
                os.symlink(os.path.join(d, t), b / t)
                break
    for name, text in (extra or {}).items():
        (b / name).write_text(text)
        (b / name).chmod(0o755)
    return b


def _setup(tmp_path, env):
    script = os.path.join(plugin_dir(), "jupyter", "setup.sh")
    e = {"PLUGIN": "jupyter", "SANDBOX_TYPE": "debian 12", "HOME": str(tmp_path)}
    e.update(env)
    return subprocess.run(["/bin/sh", script], env=e, capture_output=True, text=True, timeout=60)


def test_setup_fails_clearly_without_a_package_manager(tmp_path):
    b = _tool_dir(tmp_path, {"python3": "#!/bin/sh\nexit 1\n"})
    r = _setup(tmp_path, {"PATH": str(b), "PKG_MANAGER": "", "TERMD_JUPYTER_PYTHON": str(b / "python3")})
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last == "python3 with ipykernel is missing and no package manager was found (apt-get, apk, dnf, yum, microdnf)"


@pytest.mark.skipif(os.geteuid() != 0, reason="the install path runs only as root")
def test_setup_reports_the_installer_error(tmp_path):
    apt = "#!/bin/sh\ncase \"$*\" in *update*) exit 0;; esac\necho 'E: Unable to locate package python3-ipykernel' >&2\nexit 100\n"
    b = _tool_dir(tmp_path, {"python3": "#!/bin/sh\nexit 1\n", "apt-get": apt})
    r = _setup(tmp_path, {"PATH": str(b), "PKG_MANAGER": "apt-get", "TERMD_JUPYTER_PYTHON": str(b / "python3")})
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last == "apt-get install python3 python3-ipykernel failed: E: Unable to locate package python3-ipykernel"


def test_setup_installs_nothing_when_ipykernel_is_there(tmp_path):
    py = "/usr/bin/python3"
    r0 = subprocess.run([py, "-c", "import ipykernel"], capture_output=True)
    if r0.returncode != 0:
        pytest.skip("python3-ipykernel is not installed here (make deps)")
    b = _tool_dir(tmp_path)   # no package manager: installing anything would fail
    r = _setup(tmp_path, {"PATH": str(b), "PKG_MANAGER": "apt-get", "TERMD_JUPYTER_PYTHON": py})
    assert r.returncode == 0, r.stderr
    assert "nothing to install" in r.stderr
