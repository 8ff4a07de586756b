"""termd.sync: the synchronous client, with the asyncio one's names (Termd,
Tty). Actions go over a blocking WebSocket of the package's own
(termd._wsync) on the calling thread: a call is one send and one blocking
receive, with AsyncTermd's methods, reconnects (same-id re-send), wait and
errors. Several threads may call at once: one of them reads the connection
for all (a leader), the others wait for their answers. events() and tty()
run on an asyncio loop in a daemon thread, started at their first use."""

from __future__ import annotations

import asyncio
import functools
import json
import random
import threading
import time
from typing import Any, Callable, Dict, Iterator, Optional, Union

from . import _ws, _wsync
from .aio import AsyncTermd, AsyncTty, _REFUSALS, _TO_LARGEST, _parse_observation, _refused, _tls_refusal, log
from .errors import TermdConnectionError, TermdError, WaitTimeoutError
from .types import Event, TtyFrame

__all__ = ["Termd", "Tty"]


class _Loop:
    """One asyncio loop running in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._main, name="termd-loop", daemon=True)
        self.thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Any) -> Any:
        if threading.current_thread() is self.thread:
            raise RuntimeError("the synchronous termd API cannot be called from its own loop thread")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)
        if not self.loop.is_running():
            self.loop.close()


def _drive(coro: Any) -> Any:
    """The value of a coroutine that never suspends (AsyncTermd's action
    methods over _Actions, whose _roundtrip blocks instead of awaiting)."""
    try:
        coro.send(None)
    except StopIteration as e:
        return e.value
    coro.close()
    raise RuntimeError("termd: a synchronous call suspended")


class _Pend:
    __slots__ = ("frame", "size", "gen", "done", "obs", "err")

    def __init__(self, frame: str):
        self.frame = frame
        self.size = len(frame)
        self.gen = -1          # the connection generation it was last sent on
        self.done = False
        self.obs: Optional[Dict[str, Any]] = None
        self.err: Optional[BaseException] = None


class _Deadline(Exception):
    """The caller's wait ran out (turned into WaitTimeoutError by the call)."""


class _Actions(AsyncTermd):
    """AsyncTermd whose actions block on the calling thread: _roundtrip
    sends on a blocking WebSocket and reads it (or waits while another
    thread reads it), so every action method runs to its end without
    suspending (see _drive). events() and tty() are AsyncTermd's, on the
    owner's loop thread.

    Locks: _send_lock, then _cond's. The connection (_sws, _sgen) changes
    under both; a frame is sent under _send_lock; _pending entries, _leader
    and _closed change under _cond. Only the leader reads the connection,
    connects, and closes a connection it dropped."""

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        self._sws: Optional[_wsync.SyncWebSocket] = None
        self._sgen = 0
        self._spending: Dict[Union[str, int], _Pend] = {}
        self._cond = threading.Condition(threading.Lock())
        self._send_lock = threading.Lock()
        self._leader = False
        self._waiters = 0      # threads in _cond.wait (none: no notify to make)
        self._retry_until: Optional[float] = None   # the current reconnection's end (retry_for)
        self._retry_delay = self.backoff[0]
        self._retry_said: Optional[float] = None
        self._retry_started = 0.0

    # ------------------------------------------------------------ the caller

    async def _roundtrip(self, aid: Union[str, int], frame: str, action: str,
                         wait: Optional[float]) -> Dict[str, Any]:
        return self._sync_roundtrip(aid, frame, action, wait)

    def _sync_roundtrip(self, aid: Union[str, int], frame: str, action: str,
                        wait: Optional[float]) -> Dict[str, Any]:
        deadline = None if wait is None else time.monotonic() + wait
        p = _Pend(frame)
        with self._cond:
            if self._closed:
                raise TermdConnectionError("client closed")
            if aid in self._spending:
                raise ValueError("action id %r is already in flight on this client" % (aid,))
            self._spending[aid] = p
        try:
            self._send(p)
            try:
                self._until_done(p, deadline)
            except _Deadline:
                if not p.done:
                    raise WaitTimeoutError("no answer to %s (id %s) within wait=%ss; the action is not "
                                           "cancelled in termd" % (action, aid, wait)) from None
            if p.err is not None:
                raise p.err
            assert p.obs is not None
            return p.obs
        finally:
            with self._cond:
                self._spending.pop(aid, None)

    def _until_done(self, p: Optional[_Pend], deadline: Optional[float]) -> None:
        """Until p is answered (p None: until connected), reading the
        connection whenever no other thread does."""
        cond = self._cond
        while True:
            with cond:
                while self._leader and not (p.done if p is not None else self._sws is not None):
                    left = None
                    if deadline is not None:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            raise _Deadline()
                    self._waiters += 1
                    try:
                        cond.wait(left)
                    finally:
                        self._waiters -= 1
                if p is not None and p.done:
                    return
                if self._closed:
                    raise TermdConnectionError("client closed")
                if p is None and self._sws is not None:
                    return
                self._leader = True
            try:
                self._lead(p, deadline)
                return
            finally:
                with cond:
                    self._leader = False
                    if self._waiters:
                        cond.notify_all()

    def connect_sync(self) -> None:
        """Open the action connection now (TermdConnectionError past retry_for)."""
        self._until_done(None, None)

    # ------------------------------------------------------------ the leader

    def _lead(self, p: Optional[_Pend], deadline: Optional[float]) -> None:
        while p is None or not p.done:
            ws = self._sws
            if ws is None:
                self._reconnect(deadline)
                if p is None:
                    return
                continue
            if p is None:
                return
            try:
                msg = ws.recv(deadline)
            except (OSError, EOFError, ValueError, _wsync.Closed, _wsync.ProtocolError):
                # (a frame that is not ours to judge too: drop the connection, reopen)
                self._drop(ws)
                continue
            if msg is None:
                if p is not None and p.done:
                    return
                raise _Deadline()
            if msg[0] == _wsync.OP_TEXT:
                self._dispatch_sync(msg[1])

    def _dispatch_sync(self, data: bytes) -> None:
        got = _parse_observation(data)
        if got is None:
            return
        obs, cause = got
        with self._cond:
            if cause is _TO_LARGEST:
                q = max((q for q in self._spending.values() if not q.done), key=lambda q: q.size, default=None)
            else:
                q = self._spending.get(cause)
            if q is not None and not q.done:
                q.obs = obs
                q.done = True
                if self._waiters:
                    self._cond.notify_all()

    def _send(self, p: _Pend) -> None:
        """p on the connection open now, unless it was sent on it already
        (none open: the leader sends it once it has one)."""
        with self._send_lock:
            ws = self._sws
            if ws is None or p.gen == self._sgen or p.done:
                return
            p.gen = self._sgen
            try:
                ws.send_text(p.frame)
            except OSError:
                ws.shutdown()   # the reader sees it, reconnects and sends p again
            except BaseException:
                ws.shutdown()   # (KeyboardInterrupt: maybe half a frame out; a new connection)
                raise

    def _drop(self, ws: _wsync.SyncWebSocket) -> None:
        with self._send_lock:
            with self._cond:
                if self._sws is ws:
                    self._sws = None
        ws.close()

    def _fail_pending(self, err: BaseException) -> None:
        with self._cond:
            for q in self._spending.values():
                if not q.done:
                    q.err = err
                    q.done = True
            self._cond.notify_all()

    def _reconnect(self, deadline: Optional[float]) -> None:
        """Open the action connection (backoff for up to retry_for, counted
        from the first attempt), read hello, send every action waiting."""
        if self._retry_until is None:
            self._retry_until = time.monotonic() + self.retry_for
            self._retry_delay = self.backoff[0]
            self._retry_said = None
            self._retry_started = time.monotonic()
        try:
            ws = self._open_sync("/events", deadline)
            try:
                msg = ws.recv(time.monotonic() + self.endpoint.open_timeout)
                if msg is None:
                    raise TimeoutError()
                hello = json.loads(msg[1])
                if not isinstance(hello, dict):
                    raise ValueError("not an object: %r" % (hello,))
            except Exception as e:
                ws.close()
                raise TermdConnectionError("no hello from termd at %s: %r" % (self.url, e)) from e
        except TermdError as e:
            self._retry_until = None
            self._fail_pending(e)
            raise
        self._retry_until = None
        with self._send_lock:
            with self._cond:
                if self._closed:
                    ws.close()
                    raise TermdConnectionError("client closed")
                self.hello = hello.get("extras") or {}
                if self._sgen > 0:
                    self.reconnects += 1
                self._sgen += 1
                self._sws = ws
                todo = [q for q in self._spending.values() if not q.done and q.gen != self._sgen]
        # actions in flight: re-sent with their ids (termd answers each once)
        for q in todo:
            self._send(q)

    def _open_sync(self, path: str, deadline: Optional[float]) -> _wsync.SyncWebSocket:
        """AsyncTermd._open_with_backoff's blocking twin."""
        last: Optional[BaseException] = None
        while True:
            if self._closed:
                raise TermdConnectionError("client closed")
            timeout = self.endpoint.open_timeout
            if deadline is not None:   # (the caller's wait bounds a slow connect too)
                timeout = max(0.001, min(timeout, deadline - time.monotonic()))
            try:
                return _wsync.connect(self.endpoint, path, _ws.EVENTS_PROTOCOL, timeout)
            except _wsync.Refused as e:
                last = e
                if e.status_code in _REFUSALS:   # no point in retrying a refusal
                    raise TermdConnectionError(_refused(self.url, path, e.status_code)) from e
            except (OSError, EOFError, _wsync.ProtocolError) as e:
                last = e
                tls = _tls_refusal(self.url, e)
                if tls:   # no point in retrying either: it is not a matter of time
                    raise TermdConnectionError(tls) from e
            now = time.monotonic()
            until = self._retry_until or now
            if now >= until:
                raise TermdConnectionError("cannot reach termd at %s within %.1fs: %s"
                                           % (self.url, self.retry_for, last)) from last
            if self._retry_said is None or now - self._retry_said >= 1.0:   # once a second
                self._retry_said = now
                log.warning("termd at %s not reachable (%s): retrying for %.0f s more (%.1f s so far)",
                            self.url, last, until - now, now - self._retry_started)
            pause = min(self._retry_delay * (0.5 + random.random()), max(0.0, until - now))
            if deadline is not None and now + pause >= deadline:   # the caller's wait ends first
                time.sleep(max(0.0, deadline - now))
                raise _Deadline()
            time.sleep(pause)
            self._retry_delay = min(self._retry_delay * 2, self.backoff[1])

    def close_sync(self) -> None:
        """Close the action connection; calls waiting raise TermdConnectionError."""
        with self._send_lock:
            with self._cond:
                self._closed = True
                ws, self._sws = self._sws, None
                leader = self._leader
        self._fail_pending(TermdConnectionError("client closed"))
        if ws is not None:
            if leader:
                ws.shutdown()   # the leader wakes up and closes it
            else:
                ws.close(polite=True)


def _sync(name: str) -> Callable[..., Any]:
    target = getattr(AsyncTermd, name)

    @functools.wraps(target)
    def method(self: "Termd", *args: Any, **kw: Any) -> Any:
        return _drive(getattr(self._aio, name)(*args, **kw))
    return method


class _SyncNamespace:
    def __init__(self, owner: "Termd", ns: Any):
        self._owner = owner
        self._ns = ns

    def _run(self, name: str, *args: Any, **kw: Any) -> Any:
        return _drive(getattr(self._ns, name)(*args, **kw))


class _Sessions(_SyncNamespace):
    """``t.sessions``: open, list, signal, stdin, close (session.* actions)."""

    def open(self, name: str, command: Optional[str] = None, **kw: Any) -> Any:
        """session.open (see Termd.session_open)."""
        return self._run("open", name, command, **kw)

    def list(self, **kw: Any) -> Any:
        """session.list (see Termd.session_list)."""
        return self._run("list", **kw)

    def signal(self, session: str, signal: str, **kw: Any) -> Any:
        """session.signal (see Termd.session_signal)."""
        return self._run("signal", session, signal, **kw)

    def close(self, name: str, **kw: Any) -> Any:
        """session.close (see Termd.session_close)."""
        return self._run("close", name, **kw)

    def stdin(self, session: str, data: Any = None, **kw: Any) -> Any:
        """session.stdin (see Termd.session_stdin)."""
        return self._run("stdin", session, data, **kw)


class _Files(_SyncNamespace):
    """``t.files``: read, write, edit."""

    def read(self, path: str, **kw: Any) -> Any:
        """read (see Termd.read)."""
        return self._run("read", path, **kw)

    def write(self, path: str, content: Union[str, bytes], **kw: Any) -> Any:
        """write (see Termd.write)."""
        return self._run("write", path, content, **kw)

    def edit(self, command: str, path: str, **kw: Any) -> Any:
        """edit (see Termd.edit)."""
        return self._run("edit", command, path, **kw)


class Termd:
    """The synchronous client: the same constructor arguments and methods as
    termd.aio.AsyncTermd (see there), each call blocking until termd
    answers (or the caller's `wait=` runs out). The connection is opened in
    the constructor, so a wrong URL or token fails here.

    >>> t = Termd("unix:/run/termd.sock")
    >>> t.run("echo hi").output
    'hi'
    """

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, *,
                 connect: bool = True, **kw: Any):
        #: the client underneath: AsyncTermd's methods, its actions blocking
        #: on the calling thread, its events() and tty() on the loop thread
        self._aio: _Actions = _Actions(url, token, **kw)
        self._loop_: Optional[_Loop] = None    # started by the first events() or tty()
        self._loop_lock = threading.Lock()
        self.sessions = _Sessions(self, self._aio.sessions)
        self.files = _Files(self, self._aio.files)
        if connect:
            try:
                self.connect()
            except BaseException:
                self.close()
                raise

    @property
    def _loop(self) -> _Loop:
        """The asyncio loop thread of events() and tty(), started on first use."""
        with self._loop_lock:
            if self._loop_ is None:
                if self._aio._closed:
                    raise TermdConnectionError("client closed")
                self._loop_ = _Loop()
            return self._loop_

    def _loop_running(self) -> bool:
        return self._loop_ is not None and self._loop_.loop.is_running()

    def __enter__(self) -> "Termd":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def url(self) -> str:
        """The URL this client connects to."""
        return self._aio.url

    @property
    def hello(self) -> dict:
        """extras of termd's last hello (version, protocol, seq, sessions, actions)."""
        return self._aio.hello

    @property
    def reconnects(self) -> int:
        """How many times the action connection was reopened after a drop."""
        return self._aio.reconnects

    def connect(self) -> "Termd":
        """Open the action connection (done by the constructor unless connect=False)."""
        self._aio.connect_sync()
        return self

    def close(self) -> None:
        """Close the connections and stop the loop thread."""
        with self._loop_lock:
            lp, self._loop_ = self._loop_, None
            self._aio.close_sync()
        if lp is not None:
            try:
                lp.run(self._aio.close())
            finally:
                lp.stop()

    call = _sync("call")
    run = _sync("run")
    keys = _sync("keys")
    screen = _sync("screen")
    expect = _sync("expect")
    read = _sync("read")
    write = _sync("write")
    edit = _sync("edit")
    session_open = _sync("session_open")
    session_list = _sync("session_list")
    session_signal = _sync("session_signal")
    session_close = _sync("session_close")
    session_stdin = _sync("session_stdin")
    ports = _sync("ports")
    port_wait = _sync("port_wait")
    watch = _sync("watch")
    watch_stop = _sync("watch_stop")
    watch_list = _sync("watch_list")
    file_stat = _sync("file_stat")
    file_list = _sync("file_list")
    file_mkdir = _sync("file_mkdir")
    file_move = _sync("file_move")
    file_remove = _sync("file_remove")
    ping = _sync("ping")
    plugin_list = _sync("plugin_list")
    run_ipython = _sync("run_ipython")
    browse = _sync("browse")
    browse_interactive = _sync("browse_interactive")

    def events(self, since: Optional[int] = None, *, gaps: str = "yield",
               wait: Optional[float] = None) -> Iterator[Event]:
        """Every event on termd's stream, as AsyncTermd.events (resumes after
        a reconnect, reports gaps as Gap items or GapError). `wait`: give up
        with WaitTimeoutError when no event comes for that many seconds.
        Close the generator (or leave the for loop) to unsubscribe."""
        agen = self._aio.events(since, gaps=gaps)

        async def nxt() -> Event:
            return await asyncio.wait_for(agen.__anext__(), wait)
        try:
            while True:
                try:
                    ev = self._loop.run(nxt())
                except StopAsyncIteration:
                    return
                except asyncio.TimeoutError:
                    raise WaitTimeoutError("no event within wait=%ss" % wait) from None
                yield ev
        finally:
            if self._loop_running():
                try:
                    self._loop.run(agen.aclose())
                except Exception:
                    pass

    def tty(self, session: str = "main", mode: str = "ro") -> "Tty":
        """A live terminal on /tty/<session> (``mode`` "ro" or "rw"): a Tty to
        iterate for frames, with send() and resize(). Use it in a with block."""
        return Tty(self, self._loop.run(self._aio.tty(session, mode)))


class Tty:
    """Synchronous /tty connection (see termd.aio.AsyncTty): iterate it for
    TtyFrame objects; `recv(wait=)`, `send(data)`, `resize(cols, rows)`, `close()`."""

    def __init__(self, owner: Termd, aio: AsyncTty):
        self._owner = owner
        self._aio = aio
        #: the session's name
        self.session = aio.session
        #: "ro" or "rw"
        self.mode = aio.mode

    def __enter__(self) -> "Tty":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __iter__(self) -> Iterator[TtyFrame]:
        while True:
            try:
                yield self._owner._loop.run(self._aio.__anext__())
            except StopAsyncIteration:
                return

    def recv(self, wait: Optional[float] = None) -> TtyFrame:
        """The next frame (WaitTimeoutError after `wait` seconds; websockets'
        ConnectionClosed once the connection has ended)."""
        return self._owner._loop.run(self._aio.recv(wait))

    def send(self, data: Union[str, bytes]) -> None:
        """Type `data` (needs mode "rw")."""
        self._owner._loop.run(self._aio.send(data))

    def resize(self, cols: int, rows: int) -> None:
        """Resize the session's terminal (needs mode "rw")."""
        self._owner._loop.run(self._aio.resize(cols, rows))

    def close(self) -> None:
        """Close the connection."""
        if self._owner._loop_running():
            self._owner._loop.run(self._aio.close())
