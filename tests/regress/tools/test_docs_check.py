# test_docs_check.py — tests/docs/check_docs.py, the check that runs the
# READMEs' shell blocks as written: output and exit statuses as the text says,
# placeholder ports, blocks marked skip counted, a drifted block fails.
import os
import subprocess
import sys
from pathlib import Path

import conftest

REPO = Path(__file__).resolve().parents[3]
CHECK = str(REPO / "tests" / "docs" / "check_docs.py")
BUILD = os.path.relpath(os.path.dirname(conftest.TERMD_BIN), REPO)


def check(tmp_path, text):
    md = tmp_path / "DOC.md"
    md.write_text(text)
    return subprocess.run([sys.executable, CHECK, "--build", BUILD, str(md)], capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)


GOOD = """<!-- docs-check: ports 8421 -->
```sh
$ make run &
$ build/termctl run 'echo $((6*7)); cd /tmp'
42
$ build/termctl run 'read -p "Name: " n'
Name:
termd: waiting for a line of input (pid …)   # exit status 124
$ build/termctl run --input Ann
$ build/termctl --url ws://127.0.0.1:8421 run 'pwd'   # the placeholder is termd's port
/tmp
```

<!-- docs-check: skip needs a cloud account -->
```sh
$ false
```
"""


def test_a_block_as_written_passes_and_skips_are_counted(tmp_path):
    r = check(tmp_path, GOOD)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 shell blocks run, 1 skipped as marked" in r.stdout, r.stdout
    line = GOOD.split("\n").index("<!-- docs-check: skip needs a cloud account -->") + 2
    assert "DOC.md:%d (needs a cloud account)" % line in r.stdout, r.stdout


def test_drifted_output_fails_and_says_where(tmp_path):
    r = check(tmp_path, GOOD.replace("42\n", "43\n"))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "DOC.md:2" in r.stderr and "never printed '43'" in r.stderr, r.stderr


def test_a_wrong_exit_status_fails(tmp_path):
    r = check(tmp_path, GOOD.replace("# exit status 124", ""))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "exit status 124, the README says 0" in r.stderr, r.stderr


def _docs():
    paths = [REPO / "README.md", REPO / "SECURITY.md", REPO / "termd" / "README"]
    paths += sorted((REPO / "share").rglob("*.1")) + sorted((REPO / "share").rglob("*.md"))
    return [p for p in paths if p.is_file()]


def test_token_recipes_are_url_safe():
    """issue 51: base64's + / = break ?token= addresses: every recipe the
    docs give makes a URL-safe token."""
    bad = []
    for p in _docs():
        for n, line in enumerate(p.read_text().splitlines(), 1):
            if "urandom" in line and "base64" in line and "tr '+/'" not in line:
                bad.append("%s:%d: %s" % (p.relative_to(REPO), n, line.strip()))
    assert not bad, "\n".join(bad)


def test_termd_man_page_does_not_send_the_web_page_to_share():
    """issue 51: the web page's files are built into termd, not read from
    PREFIX/share/termd."""
    page = (REPO / "share" / "man" / "termd.1").read_text()
    files = page.split(".SH FILES", 1)[1].split(".SH ", 1)[0]
    assert "web page's files, " not in files and "built into the termd binary" in files, files


def test_runs_in_a_checkout_under_tmp():
    """issue 51: a checkout under /tmp (a fresh clone at /tmp/x): the
    private /tmp of the check's termd hid the checkout's own build/termd."""
    import shutil
    import tempfile
    top = Path(tempfile.mkdtemp(prefix="i51-docs-", dir="/tmp"))
    try:
        (top / "tests" / "docs").mkdir(parents=True)
        shutil.copy(CHECK, top / "tests" / "docs" / "check_docs.py")
        shutil.copytree(str(REPO / "tests" / "regress"), str(top / "tests" / "regress"),
                        ignore=shutil.ignore_patterns("__pycache__", "openhands"))
        (top / "build").mkdir()
        for prog in ("termd", "termctl"):
            shutil.copy(str(REPO / BUILD / prog), str(top / "build" / prog))
        md = top / "DOC.md"
        md.write_text(GOOD)
        r = subprocess.run([sys.executable, str(top / "tests" / "docs" / "check_docs.py"),
                            str(md)], capture_output=True, text=True, timeout=300,
                           stdin=subprocess.DEVNULL)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "1 shell blocks run" in r.stdout, r.stdout
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_readme_tours_wave_4_in_blocks_the_check_runs():
    """issue 51: the README said nothing of session limits, /metrics,
    upgrade in place, previews or password prompts: a tour of each, in
    shell blocks (make docs-check runs all but the one marked)."""
    text = (REPO / "README.md").read_text()
    blocks, skip, cur = [], False, None
    for line in text.splitlines():
        if cur is None and line.startswith("<!-- docs-check: skip"):
            skip = True
        elif cur is None and line.startswith("```sh"):
            cur = []
        elif cur is not None and line.startswith("```"):
            blocks.append(("\n".join(cur), skip))
            cur, skip = None, False
        elif cur is not None:
            cur.append(line)
    run = "\n".join(b for b, s in blocks if not s)
    for what in ("--memory", "--pids", "killed: out of memory", "signal small KILL --tree",
                 "/proxy/8000/", "port wait", "waiting for a password", "/metrics",
                 "answer with: termctl run --input"):
        assert what in run, what
    assert "termctl upgrade" in text and "SIGUSR2" in text or "kill -USR2" in text
