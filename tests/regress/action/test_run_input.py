"""PROTOCOL.md section 4 `run` items 5 and 9: programs waiting for input,
answering them with is_input, and control keys."""

import time

from tdtest import PY, content, fmt, lines, run_done, run_obs

# A program waiting for input must be reported well before the default 30 s
# idle timeout; the contract says "about a second".
PROMPT_DEADLINE = 15.0


def _input(ev, text, **args):
    return run_obs(ev, text, is_input=True, **args)


def _assert_waiting(obs, t0):
    took = time.monotonic() - t0
    x = obs["extras"]
    assert x["waiting_for_input"] is True, fmt(obs)
    assert x["running"] is True and x["exit_code"] == -1, fmt(obs)
    assert x["timed_out"] is None, fmt(obs)
    assert took < PROMPT_DEADLINE, "waiting for input reported after %.1f s" % took


def test_read_prompt_then_answer(ev):
    t0 = time.monotonic()
    obs = run_obs(ev, 'read -p "Name: " n && echo "Hello $n"')
    _assert_waiting(obs, t0)
    assert "Name:" in content(obs), fmt(obs)
    obs = _input(ev, "Ann")
    assert "Hello Ann" in lines(obs), fmt(obs)
    assert obs["extras"]["exit_code"] == 0 and obs["extras"]["running"] is False, fmt(obs)
    assert obs["extras"]["waiting_for_input"] is False, fmt(obs)
    # the variable is set in the shell
    assert content(run_done(ev, 'echo "n=$n"')) == "n=Ann"


def test_erase_takes_a_whole_utf8_character_in_cooked_mode(ev):
    # the pty is in UTF-8 mode (IUTF8): BSpace at a line read in cooked mode
    # erases the whole "é", not the last of its two bytes
    t0 = time.monotonic()
    obs = run_obs(ev, 'read -r -p "Word: " w && echo "got=[$w]"')
    _assert_waiting(obs, t0)
    k = ev.call("keys", {"keys": ["a\u00e9", "BSpace", "b", "Enter"]})
    assert k.get("observation") == "screen", fmt(k)
    obs = run_obs(ev, "")
    assert "got=[ab]" in lines(obs), fmt(obs)
    assert obs["extras"]["running"] is False and obs["extras"]["exit_code"] == 0, fmt(obs)


def test_password_prompt_not_echoed(ev):
    t0 = time.monotonic()
    obs = run_obs(ev, 'read -s -p "Password: " pw && echo && echo "len ${#pw}"')
    _assert_waiting(obs, t0)
    assert "Password:" in content(obs), fmt(obs)
    obs = _input(ev, "hunter2")
    assert "len 7" in lines(obs), fmt(obs)
    assert "hunter2" not in content(obs), "input with echo off shows up in content: %s" % fmt(obs)
    assert obs["extras"]["exit_code"] == 0


def test_python_input_two_questions(ev, tmp_path):
    script = tmp_path / "ask.py"
    script.write_text('a = input("First? ")\nb = input("Second? ")\nprint("got %s and %s" % (a, b))\n')
    t0 = time.monotonic()
    obs = run_obs(ev, "%s %s" % (PY, script))
    _assert_waiting(obs, t0)
    assert "First?" in content(obs), fmt(obs)
    t0 = time.monotonic()
    obs = _input(ev, "one")
    _assert_waiting(obs, t0)
    assert "Second?" in content(obs), fmt(obs)
    assert "First?" not in content(obs), "old output repeated: %s" % fmt(obs)
    obs = _input(ev, "two")
    assert "got one and two" in lines(obs), fmt(obs)
    assert obs["extras"]["exit_code"] == 0 and obs["extras"]["running"] is False, fmt(obs)


def test_python_repl(ev):
    t0 = time.monotonic()
    obs = run_obs(ev, "%s -q" % PY)
    _assert_waiting(obs, t0)
    assert ">>>" in content(obs), fmt(obs)
    obs = _input(ev, "print(6*7)")
    assert "42" in lines(obs), fmt(obs)
    assert obs["extras"]["running"] is True and obs["extras"]["waiting_for_input"] is True, fmt(obs)
    obs = _input(ev, "x = 'abc' * 2")
    assert obs["extras"]["waiting_for_input"] is True, fmt(obs)
    obs = _input(ev, "print(x.upper())")
    assert "ABCABC" in lines(obs), fmt(obs)
    obs = _input(ev, "exit()")
    assert obs["extras"]["running"] is False and obs["extras"]["exit_code"] == 0, fmt(obs)
    assert content(run_done(ev, "echo back")) == "back"


def test_ctrl_c_sleep(ev):
    obs = run_obs(ev, "sleep 100", timeout=1)
    assert obs["extras"]["running"] is True, fmt(obs)
    assert obs["extras"]["timed_out"] == "hard", fmt(obs)
    assert obs["extras"]["waiting_for_input"] is False, fmt(obs)
    t0 = time.monotonic()
    obs = _input(ev, "C-c")
    took = time.monotonic() - t0
    assert obs["extras"]["running"] is False, fmt(obs)
    assert obs["extras"]["exit_code"] == 130, fmt(obs)
    assert took < 15, "C-c took %.1f s to end sleep" % took
    assert content(run_done(ev, "echo after-ctrl-c")) == "after-ctrl-c"


def test_ctrl_c_at_a_prompt(ev):
    obs = run_obs(ev, 'read -p "Continue? [y/N] " a; echo "answer=$a"')
    assert obs["extras"]["waiting_for_input"] is True, fmt(obs)
    obs = _input(ev, "C-c")
    assert obs["extras"]["running"] is False, fmt(obs)
    assert obs["extras"]["exit_code"] == 130, fmt(obs)
    assert "answer=" not in content(obs), "C-c did not interrupt the whole line: %s" % fmt(obs)


def test_ctrl_d_ends_cat(ev):
    obs = run_obs(ev, "cat")
    assert obs["extras"]["waiting_for_input"] is True, fmt(obs)
    obs = _input(ev, "meow")
    assert "meow" in lines(obs), fmt(obs)
    assert obs["extras"]["running"] is True, fmt(obs)
    obs = _input(ev, "C-d")
    assert obs["extras"]["running"] is False and obs["extras"]["exit_code"] == 0, fmt(obs)


def test_ctrl_c_http_server(ev):
    obs = run_obs(ev, "%s -m http.server 0 --bind 127.0.0.1" % PY, timeout=2)
    x = obs["extras"]
    assert x["running"] is True, fmt(obs)
    assert x["waiting_for_input"] is False, "http.server is not reading the terminal: %s" % fmt(obs)
    assert x["timed_out"] == "hard", fmt(obs)
    assert "Serving HTTP" in content(obs), fmt(obs)
    obs = _input(ev, "C-c")
    assert "Keyboard interrupt" in content(obs), fmt(obs)
    assert obs["extras"]["running"] is False, fmt(obs)
    assert obs["extras"]["exit_code"] == 0, fmt(obs)
    assert content(run_done(ev, "echo server-gone")) == "server-gone"


RELAY = r'''
import os, select, sys, time
done_r, done_w = os.pipe()      # the silent worker says it finished
idle_r, idle_w = os.pipe()      # never written: a second descriptor to poll
pid = os.fork()
if pid == 0:
    os.close(done_r)
    time.sleep(float(sys.argv[1]))
    os.write(done_w, b"x")
    os._exit(0)
os.close(done_w)
print("Working...", flush=True)
p = select.poll()
p.register(0, select.POLLIN)
p.register(done_r, select.POLLIN)
while True:
    ready = dict(p.poll())
    if done_r in ready:
        break
    if 0 in ready:
        os.read(0, 1024)         # a relay passes this on to its worker
os.waitpid(pid, 0)
sys.stdout.write("Continue? [Y/n] ")
sys.stdout.flush()
q = select.poll()
q.register(0, select.POLLIN)
q.register(idle_r, select.POLLIN)
q.poll()
print("answer=" + sys.stdin.readline().strip())
'''


def test_relay_polling_the_tty_is_not_waiting_until_it_asks(ev, tmp_path):
    """A program polling the tty among other descriptors while a silent child
    works (as apt does while dpkg runs triggers) is not waiting for input;
    once it really asks (the cursor after a question), it is."""
    script = tmp_path / "relay.py"
    script.write_text(RELAY)
    obs = run_obs(ev, "%s %s 3" % (PY, script))
    x = obs["extras"]
    # before the fix this came after about a second with only "Working..."
    assert "Continue? [Y/n]" in content(obs), fmt(obs)
    assert x["waiting_for_input"] is True and x["running"] is True, fmt(obs)
    assert x["timed_out"] is None, fmt(obs)
    obs = _input(ev, "y")
    assert "answer=y" in lines(obs), fmt(obs)
    assert obs["extras"]["running"] is False and obs["extras"]["exit_code"] == 0, fmt(obs)
