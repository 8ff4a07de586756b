#!/usr/bin/env python3
"""agent_loop.py — the skeleton of an agent backend on termd: run a list of
commands in one shell, answer the prompts they ask (a rule table standing
in for the model), interrupt what hangs, report each result.

    python3 agent_loop.py [URL]      (default $TERMD_URL or ws://127.0.0.1:8421)
"""

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # the package, uninstalled
import termd  # noqa: E402

COMMANDS = [
    "mkdir -p /tmp/agent-demo && cd /tmp/agent-demo",
    "printf 'a\\nb\\n' > f.txt && wc -l f.txt",
    "read -p 'Overwrite f.txt? [y/N] ' a && [ \"$a\" = y ] && echo overwritten",
    "python3 -c 'import getpass; print(\"hello\", len(getpass.getpass(\"Password: \")))'",
    "less f.txt",
    "sleep 100",
    "echo done; false",
]

# what the "model" answers to a prompt: (pattern on the last line, answer)
ANSWERS = [(re.compile(r"\[y/N\]|\[Y/n\]|\(y/n\)", re.I), "y"),
           (re.compile(r"password:?\s*$", re.I), "hunter2")]


def answer_for(r):
    """The text to type, or None. termd says what a waiting program waits
    for (r.waiting.kind); the prompt is the screen's last line."""
    if r.waiting and r.waiting.kind == "password":
        return "hunter2"
    last = r.waiting.prompt if r.waiting else (r.output.rstrip("\n").split("\n")[-1] if r.output else "")
    for pat, ans in ANSWERS:
        if pat.search(last):
            return ans
    return None


def run_one(t, command, max_prompts=5):
    r = t.run(command, timeout=5)
    for _ in range(max_prompts):
        # waiting_for_input is termd's word; a prompt on the last line of a command
        # that is still running after its timeout is answered too
        if r.waiting and r.waiting.kind == "pager":   # less, more, man: q quits
            t.keys("q")
            r = t.run("", timeout=10)
        elif r.waiting_for_input or r.running:
            ans = answer_for(r)
            if ans is None:
                break
            r = t.run(ans, is_input=True, timeout=10)
        else:
            break
    if r.running:                        # still going (or a prompt we cannot answer): stop it
        r = t.run("C-c", is_input=True, timeout=5)
    return r


def main():
    url = sys.argv[1] if len(sys.argv) > 1 else None
    with termd.Termd(url) as t:
        for cmd in COMMANDS:
            try:
                r = run_one(t, cmd)
            except termd.BusyError:
                t.run("C-c", is_input=True, timeout=5)
                r = run_one(t, cmd)
            print("$ %s\n%s\n[exit %s, cwd %s%s]\n" % (cmd, r.output, r.exit_code, r.cwd,
                                                      ", timed out: %s" % r.timed_out if r.timed_out else ""))


if __name__ == "__main__":
    main()
