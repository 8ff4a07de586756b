"""Issue 34 item 9: `make install` (PREFIX, DESTDIR) puts the programs, the
plugins (where the installed termd finds them), share/ files, the manual
pages and termctl's bash completion in place; each page renders with no
warning from man and names every option; the completion offers commands,
options and the running termd's session names."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import conftest

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    if not shutil.which("man"):
        pytest.skip("man is not installed (make deps)")
    dest = tmp_path_factory.mktemp("dest")
    build = os.path.relpath(os.path.dirname(conftest.TERMD_BIN), REPO)
    r = subprocess.run(["make", "-s", "-C", str(REPO), "install", "DESTDIR=%s" % dest, "PREFIX=/usr/local",
                        "BUILD=%s" % build], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return dest / "usr" / "local"


def test_programs_plugins_and_share(installed, tmp_path):
    for p in ("termd", "termctl", "od-attach"):
        r = subprocess.run([str(installed / "bin" / p), "--version"], capture_output=True, text=True)
        assert r.returncode == 0 and "contract 1.4" in r.stdout, r
    assert (installed / "share/termd/shell/termd.bash").is_file()
    # SWE-ReX's server name (issue 48): a link to termd
    assert os.readlink(installed / "bin" / "swerex-remote") == "termd"
    # the installed termd finds the installed plugins (its misspelt-name error lists them)
    r = subprocess.run([str(installed / "bin/termd"), "--listen", "unix:%s/s.sock" % tmp_path,
                        "--plugins", "nosuch", "--state-dir", str(tmp_path / "st")],
                       env=conftest.base_env(tmp_path), capture_output=True, text=True, timeout=30,
                       stdin=subprocess.DEVNULL)
    assert r.returncode != 0 and "share/termd/plugins" in r.stderr and "jupyter" in r.stderr, r.stderr
    assert not list((installed / "share/termd/plugins").glob("*/obj")), "build objects installed"


@pytest.mark.parametrize("prog", ["termd", "termctl", "od-attach"])
def test_man_pages_render_without_warnings_and_name_every_option(installed, prog):
    page = installed / "share/man/man1" / (prog + ".1")
    r = subprocess.run(["man", "--warnings", "-l", str(page)], capture_output=True, text=True,
                       env=dict(os.environ, MANWIDTH="80", MAN_KEEP_FORMATTING="0"), timeout=60)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    text = re.sub(r".\x08", "", r.stdout)
    for section in ("NAME", "SYNOPSIS", "OPTIONS", "EXIT STATUS", "ENVIRONMENT", "EXAMPLES"):
        assert section in text, (prog, section)
    helptext = subprocess.run([str(installed / "bin" / prog), "--help"], capture_output=True,
                              text=True).stdout
    for opt in set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]+)", helptext)):
        assert opt in text, "%s(1) does not name %s" % (prog, opt)


def complete(installed, words, env=None):
    script = installed / "share/bash-completion/completions/termctl"
    cmd = ('source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _termctl; '
           'printf "%s\\n" "${COMPREPLY[@]}"')
    r = subprocess.run(["bash", "-c", cmd, "x", str(script)] + words, capture_output=True, text=True,
                       env=env, timeout=60)
    assert r.returncode == 0, r
    return r.stdout.split()


def test_completion(installed, termd_factory):
    got = complete(installed, ["termctl", ""])
    assert {"run", "keys", "screen", "session", "subscribe"} <= set(got), got
    assert "--token-file" in complete(installed, ["termctl", "--t"]), "global options"
    assert set(complete(installed, ["termctl", "session", ""])) == {"list", "open", "stdin", "close", "signal"}
    assert "--timeout" in complete(installed, ["termctl", "run", "--"])
    t = termd_factory()
    ev = t.events()
    ev.call("session.open", {"name": "build-1"})
    env = conftest.base_env(t.home)
    env["TERMD_URL"] = t.url
    env["PATH"] = "%s:%s" % (installed / "bin", env.get("PATH", ""))
    assert set(complete(installed, ["termctl", "run", "-s", ""], env)) == {"main", "build-1"}
    assert complete(installed, ["termctl", "session", "close", "bu"], env) == ["build-1"]


def test_completion_offers_the_limit_and_tree_options(installed):
    """issue 51: session open --memory/--pids/--cpu, session signal --tree."""
    assert {"--memory", "--pids", "--cpu"} <= set(complete(installed, ["termctl", "session",
                                                                       "open", "x", "--"]))
    assert "--tree" in complete(installed, ["termctl", "session", "signal", "x", "INT", "--"])
    assert complete(installed, ["termctl", "session", "open", "x", "--memory", ""]) == []
