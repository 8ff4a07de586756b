#!/usr/bin/env python3
"""make mutants: plant each mutant of tests/mutants/mutants.py, one at a
time, in a scratch copy of the checkout (never in the working tree), build
it, run the tests that must catch it, and say which survive.

    tests/mutants/run.py [-k NAME]... [--check] [--keep] [--no-baseline]
                         [--timeout S] [--report FILE]

The copy holds the checkout's files as they are now (tracked and new ones,
not what .gitignore names) and its build/ folder when there is one (so the
first build is incremental). The listed tests first run once on the copy
unmutated (the baseline: a test that fails there proves nothing); then each
mutant is planted, built, its tests run (-x: the first failure is enough),
and the file put back. Exit status 1 when a mutant survived or could not
be tried. Slow (minutes): not part of `make test`; run it when a change
touches the files the list names."""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
from mutants import MUTANTS  # noqa: E402

PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
BUILD_SKIP = {"build-asan", "build-vg"}


def log(msg):
    print(msg, flush=True)


def select(names):
    if not names:
        return list(MUTANTS)
    out = [m for m in MUTANTS if any(n in m["name"] for n in names)]
    if not out:
        sys.exit("run.py: no mutant named like %s" % ", ".join(names))
    return out


def check(mutants, root):
    """Each search string once in its file: [] or what is wrong."""
    bad = []
    for m in mutants:
        p = root / m["file"]
        try:
            text = p.read_text()
        except OSError as e:
            bad.append((m, "cannot read %s: %s" % (m["file"], e)))
            continue
        n = text.count(m["search"])
        if n != 1:
            bad.append((m, "search text found %d times in %s" % (n, m["file"])))
    return bad


def copy_tree(dest):
    """The checkout's files (tracked and untracked, not ignored) into dest,
    times kept; build/ too, for an incremental first build."""
    out = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others",
                          "--exclude-standard"], check=True, capture_output=True).stdout
    n = 0
    for rel in out.decode().split("\0"):
        if not rel:
            continue
        src = REPO / rel
        if not src.exists() and not src.is_symlink():
            continue   # deleted in the working tree
        dst = dest / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst, follow_symlinks=False)
        n += 1
    build = REPO / "build"
    if build.is_dir():
        # the SWE-ReX clients' venv (make deps-swerex, ~760 MB) is linked, not copied
        shutil.copytree(build, dest / "build", symlinks=True,
                        ignore=lambda d, names: ["swerex-venv"] if Path(d) == build else [])
        if (build / "swerex-venv").is_dir():
            os.symlink(build / "swerex-venv", dest / "build" / "swerex-venv")
    nm = REPO / "tests" / "e2b" / "node_modules"
    if nm.is_dir():
        os.symlink(nm, dest / "tests" / "e2b" / "node_modules")
    return n


def build(root, logf):
    t0 = time.monotonic()
    r = subprocess.run(["make", "-C", str(root), "-j%d" % (os.cpu_count() or 2), "all"],
                       stdout=logf, stderr=subprocess.STDOUT)
    return r.returncode == 0, time.monotonic() - t0


def env_for(root):
    e = dict(os.environ)
    e.update(TERMD_BIN=str(root / "build" / "termd"), TERMCTL_BIN=str(root / "build" / "termctl"),
             OD_ATTACH_BIN=str(root / "build" / "od-attach"))
    e.pop("TERMD_TOKEN", None)
    return e


def groups(tests):
    """Node ids by the folder pytest runs them from (each test tree has a
    conftest of its own): [(rootdir, [ids relative to it])]."""
    out = {}
    for t in tests:
        top = "proto/python" if t.startswith("proto/python/") else "."
        rel = t[len(top) + 1:] if top != "." else t
        out.setdefault(top, []).append(rel)
    return list(out.items())


def pytest(root, tests, timeout, logf, junit=None, stop_first=True):
    """Run tests in the copy: ("passed"|"failed"|"timeout"|"error", failed
    ids, seconds)."""
    t0 = time.monotonic()
    failed, status = [], "passed"
    for i, (top, ids) in enumerate(groups(tests)):
        cmd = [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=short"]
        if stop_first:
            cmd.append("-x")
        xml = None
        if junit:
            xml = "%s.%d.xml" % (junit, i)
            cmd.append("--junitxml=" + xml)
        left = timeout - (time.monotonic() - t0)
        try:
            r = subprocess.run(cmd + ids, cwd=str(root / top), env=env_for(root), stdout=logf,
                               stderr=subprocess.STDOUT, timeout=max(1, left))
        except subprocess.TimeoutExpired:
            return "timeout", failed, time.monotonic() - t0
        if r.returncode == 1:
            status = "failed"
            if xml:
                failed += junit_failures(xml, top)
            if stop_first:
                break
        elif r.returncode != 0:
            return "error", failed, time.monotonic() - t0
    return status, failed, time.monotonic() - t0


def junit_failures(path, top):
    ids = []
    try:
        tree = ET.parse(path)
    except (OSError, ET.ParseError):
        return ids
    for tc in tree.iter("testcase"):
        if tc.find("failure") is not None or tc.find("error") is not None:
            mod = tc.get("classname", "").replace(".", "/")
            ids.append("%s%s.py::%s" % ("" if top == "." else top + "/", mod, tc.get("name")))
    return ids


def covers(test, failed_id):
    """failed_id (from junit: its module path as pytest named it) is one of
    the tests a selector names (a file, or a file::test)."""
    tfile, _, tname = test.partition("::")
    ffile, _, fname = failed_id.split("[", 1)[0].partition("::")
    if Path(tfile).name != Path(ffile).name:
        return False
    return not tname or fname == tname or fname.startswith(tname + "::")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-k", action="append", default=[], metavar="NAME",
                    help="only the mutants whose name contains NAME (repeatable)")
    ap.add_argument("--check", action="store_true",
                    help="only check that every search text is found once in the working tree")
    ap.add_argument("--keep", action="store_true", help="keep the scratch copy (its path is printed)")
    ap.add_argument("--no-baseline", action="store_true", help="skip the unmutated run of the tests")
    ap.add_argument("--timeout", type=float, default=900, help="seconds for one mutant's tests")
    ap.add_argument("--report", help="also write the table to this file")
    a = ap.parse_args()
    mutants = select(a.k)
    bad = check(mutants, REPO)
    for m, why in bad:
        log("run.py: %s: %s" % (m["name"], why))
    if a.check:
        log("%d mutants, %d with a search text that is not found once" % (len(mutants), len(bad)))
        return 1 if bad else 0

    scratch = Path(tempfile.mkdtemp(prefix="termd-mutants-"))
    logpath = scratch / "mutants.log"
    results = []
    try:
        n = copy_tree(scratch)
        log("scratch copy: %s (%d files); log: %s" % (scratch, n, logpath))
        with open(logpath, "w") as logf:
            ok, secs = build(scratch, logf)
            if not ok:
                log("run.py: the unmutated copy does not build (see %s)" % logpath)
                a.keep = True
                return 1
            log("built in %.0f s" % secs)
            baseline_failed = []
            if not a.no_baseline:
                tests = sorted({t for m in mutants for t in m["tests"]})
                log("baseline: %d test selectors, unmutated ..." % len(tests))
                logf.write("\n==== baseline\n")
                logf.flush()
                st, baseline_failed, secs = pytest(scratch, tests, a.timeout * 4, logf,
                                                   junit=str(scratch / "baseline"), stop_first=False)
                log("baseline: %s in %.0f s%s" % (st, secs, "".join("\n  fails unmutated: " + f
                                                                  for f in baseline_failed)))
                if st in ("error", "timeout"):
                    log("run.py: the baseline run did not finish (see %s)" % logpath)
                    a.keep = True
                    return 1
            for m in mutants:
                if any(m is b for b, _ in bad):
                    results.append((m, "NOT TRIED", "search text not found once", 0))
                    continue
                broken = [t for t in m["tests"] if any(covers(t, f) for f in baseline_failed)]
                if broken:
                    results.append((m, "NOT TRIED", "its tests fail unmutated: %s" % ", ".join(broken), 0))
                    continue
                path = scratch / m["file"]
                orig = path.read_bytes()
                logf.write("\n==== %s: %s\n" % (m["name"], m["why"]))
                logf.flush()
                t0 = time.monotonic()
                try:
                    path.write_bytes(orig.replace(m["search"].encode(), m["replace"].encode(), 1))
                    ok, _ = build(scratch, logf)
                    if not ok:
                        results.append((m, "NOT TRIED", "does not build", time.monotonic() - t0))
                    else:
                        st, _, _ = pytest(scratch, m["tests"], a.timeout, logf)
                        verdict = {"failed": ("caught", ""), "passed": ("SURVIVED", ""),
                                   "timeout": ("caught", "the tests hung past --timeout"),
                                   "error": ("NOT TRIED", "pytest could not run the tests")}[st]
                        results.append((m, verdict[0], verdict[1], time.monotonic() - t0))
                finally:
                    path.write_bytes(orig)
                r = results[-1]
                log("%-32s %-9s %5.0f s  %s" % (m["name"], r[1], r[3], r[2]))
            build(scratch, logf)   # leave the copy as the checkout is
    finally:
        if a.keep:
            log("scratch copy kept: %s" % scratch)
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    table = report(results)
    print(table)
    if a.report:
        Path(a.report).write_text(table)
    return 0 if results and all(r[1] == "caught" for r in results) else 1


def report(results):
    lines = ["", "| mutant | file | result | seconds | tests that must catch it |",
             "|---|---|---|---|---|"]
    for m, verdict, note, secs in results:
        tests = ", ".join(t.split("/")[-1] for t in m["tests"])
        lines.append("| %s | %s | %s%s | %.0f | %s |" % (m["name"], m["file"], verdict,
                                                          " (%s)" % note if note else "", secs, tests))
    n = {v: sum(1 for r in results if r[1] == v) for v in ("caught", "SURVIVED", "NOT TRIED")}
    lines.append("")
    lines.append("%d mutants: %d caught, %d survived, %d not tried" % (
        len(results), n["caught"], n["SURVIVED"], n["NOT TRIED"]))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
