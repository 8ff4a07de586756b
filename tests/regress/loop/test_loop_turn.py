"""The loop's longest turn in /metrics (issue 50): termd_loop_turn_max_seconds
is the longest turn of the event loop (its thread's CPU time) since the
previous scrape, which starts a new window; termd_loop_turns_total counts
the turns. A known slow turn (the tests' hook TERMD_TEST_TURN_BURN_MS: the
loop's first turn spends that much CPU) shows in the first scrape and not
in the next."""

import wsclient
from test_cgroups import metric, parse_metrics

BURN_MS = 600


def scrape(t):
    status, _, body = wsclient.http_request(t.url, "/metrics")
    assert status == 200
    return parse_metrics(body.decode())


def test_a_slow_turn_shows_once_then_a_new_window(termd_factory):
    t = termd_factory(env={"TERMD_TEST_TURN_BURN_MS": str(BURN_MS)})
    s1, types = scrape(t)
    assert types["termd_loop_turn_max_seconds"] == "gauge"
    assert types["termd_loop_turns_total"] == "counter"
    # the burnt turn is in the window up to the first scrape: at least the
    # CPU it spent (the thread's CPU clock, whatever the machine's load)
    assert metric(s1, "termd_loop_turn_max_seconds") >= BURN_MS / 1000.0
    n1 = metric(s1, "termd_loop_turns_total")
    assert n1 >= 1
    # the next window holds the turns since (the first scrape's among
    # them), not the burnt one; turns go on being counted
    s2, _ = scrape(t)
    m2 = metric(s2, "termd_loop_turn_max_seconds")
    assert 0 <= m2 < BURN_MS / 1000.0, m2
    assert metric(s2, "termd_loop_turns_total") > n1


def test_without_the_hook_turns_are_timed_and_counted(termd_factory):
    t = termd_factory()
    s1, _ = scrape(t)
    s2, _ = scrape(t)
    assert metric(s1, "termd_loop_turn_max_seconds") >= 0
    assert metric(s2, "termd_loop_turn_max_seconds") >= 0
    assert metric(s2, "termd_loop_turns_total") > metric(s1, "termd_loop_turns_total")
