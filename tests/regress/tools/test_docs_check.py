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
