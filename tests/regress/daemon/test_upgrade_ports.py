"""Issue 52: the ports table (which listening sockets are a session's, and
whether their port.open was sent) goes across an upgrade in place, so
port.open / port.close stay exactly-once: a listener open before the
upgrade is not announced again, and one that stops after it, or while no
termd image runs (between the old image's record and the new one's first
scan), gets its one port.close."""

import os
import stat

from conftest import TERMD_BIN
from tdtest import content, fmt, free_port, run_done
from test_upgrade import T, upgrade


class Stream:
    """A subscriber from seq `since` on (the retained ring replayed, then
    live): every observation it got, in order, in `seen`."""

    def __init__(self, td, since):
        self.ev = td.events()
        self.seen = []
        cid = self.ev.send_action("subscribe", {"since": since})
        self.until(lambda o: o.get("cause") == cid)

    def until(self, pred):
        while True:
            o = self.ev.recv_obs(T)
            if o.get("cause") is None:
                self.seen.append(o)
            if pred(o):
                return o

    def count(self, what, port):
        return len([o for o in self.seen if is_port(what, port)(o)])


def is_port(what, port):
    return lambda o: o.get("observation") == what and (o.get("extras") or {}).get("port") == port


def listen(ev, port):
    """A listener on port in main's background: its pid."""
    o = run_done(ev, "python3 -c \"import socket, time; s = socket.socket(); "
                     "s.bind(('127.0.0.1', %d)); s.listen(4); time.sleep(600)\" "
                     ">/dev/null 2>&1 & echo PID=$!" % port)
    return int([ln for ln in content(o).splitlines() if ln.startswith("PID=")][0][4:])


def kill_all(pids):
    for p in pids:
        try:
            os.kill(p, 9)
        except OSError:
            pass


def test_listener_open_before_upgrade_told_once(termd):
    """port.open before the upgrade, none again after it; the listener
    stopped after the upgrade: one port.close."""
    ev = termd.events()
    seq0 = ev.ping()["seq"]
    p1, p2, p3 = free_port(), free_port(), free_port()
    pids = [listen(ev, p1)]
    try:
        Stream(termd, seq0).until(is_port("port.open", p1))
        code, ev2, ans = upgrade(termd, ev)
        assert ans["extras"].get("ok") is True, fmt(ans)
        st = Stream(termd, seq0)
        # a port opened after the upgrade: its port.open comes from a scan
        # that saw p1 too (a second port.open for p1 would be before it)
        pids.append(listen(ev2, p2))
        st.until(is_port("port.open", p2))
        assert st.count("port.open", p1) == 1, [fmt(o)[:200] for o in st.seen]
        os.kill(pids[0], 9)
        st.until(is_port("port.close", p1))
        pids.append(listen(ev2, p3))
        st.until(is_port("port.open", p3))
        assert st.count("port.open", p1) == 1, [fmt(o)[:200] for o in st.seen]
        assert st.count("port.close", p1) == 1, [fmt(o)[:200] for o in st.seen]
    finally:
        kill_all(pids)


def test_listener_stopped_during_upgrade_closed_once(termd, tmp_path):
    """The listener is killed while no termd image runs: the new binary is
    a script that kills it (and waits until its socket is gone) before it
    execs termd. Its port.close comes from the new image's first scan."""
    ev = termd.events()
    seq0 = ev.ping()["seq"]
    p1, p2 = free_port(), free_port()
    pids = [listen(ev, p1)]
    try:
        Stream(termd, seq0).until(is_port("port.open", p1))
        wrapper = tmp_path / "termd-kills-listener"
        wrapper.write_text(
            "#!/bin/sh\n"
            "if [ \"$1\" != --check-handover ]; then\n"
            "  kill -9 %d\n"
            "  i=0\n"
            "  while [ -n \"$(ls /proc/%d/fd 2>/dev/null)\" ] && [ $i -lt 6000 ]; do\n"
            "    sleep 0.01; i=$((i+1))\n"
            "  done\n"
            "fi\n"
            "exec %s \"$@\"\n" % (pids[0], pids[0], TERMD_BIN))
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
        code, ev2, ans = upgrade(termd, ev, binary=str(wrapper))
        assert ans["extras"].get("ok") is True, fmt(ans)
        st = Stream(termd, seq0)
        # the new image's first scan already missed p1: its port.close is
        # told before (or with) any port.open of a later scan
        pids.append(listen(ev2, p2))
        st.until(is_port("port.open", p2))
        assert st.count("port.close", p1) == 1, [fmt(o)[:200] for o in st.seen]
        assert st.count("port.open", p1) == 1, [fmt(o)[:200] for o in st.seen]
    finally:
        kill_all(pids)
