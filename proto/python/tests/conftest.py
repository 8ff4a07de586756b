"""Fixtures for the package's tests. Integration tests start a private termd
the way the regress suite does (tests/regress/conftest.py's Termd class,
loaded from there: unix socket or loopback TCP, token in the environment,
stopped and checked at the end). TERMD_BIN picks the binary (default the
checkout's build/termd)."""

import importlib.util
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(HERE.parent))                 # the package, uninstalled
sys.path.insert(0, str(REPO / "tests" / "regress"))  # wsclient, used by the regress Termd

_spec = importlib.util.spec_from_file_location("regress_conftest", REPO / "tests" / "regress" / "conftest.py")
regress = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(regress)


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


@pytest.fixture
def termd_factory(request, tmp_path):
    """start(args=(), env=None, token=None, listen=None, scheme="ws", tcp=False)
    -> a started regress Termd (`.url`, `.token`, `.proc`, `.home`). Each is
    stopped at the end and must exit 0, unless the test set `.may_die`."""
    started = []

    def start(args=(), env=None, token=None, listen=None, scheme="ws", tcp=False):
        t = regress.Termd(tmp_path / ("t%d" % len(started)), args, env, token, listen=listen,
                          scheme=scheme, tcp=tcp)
        t.may_die = False
        started.append(t)
        return t.start()

    yield start
    problems = []
    for t in started:
        p = t.stop()
        if p and not t.may_die:
            problems.append(p)
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed and not problems:
        for t in started:
            print("\n--- termd log tail (%s) ---\n%s" % (t.log, regress.log_tail(t.log)))
    if problems:
        pytest.fail("\n\n".join(problems), pytrace=False)


def pytest_configure(config):
    # an answer naming an argument termd did not read fails the test: the
    # package must never send a name termd does not know
    config.addinivalue_line("filterwarnings", "error::termd.errors.IgnoredArgsWarning")
