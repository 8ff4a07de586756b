"""termd.sync: the synchronous client, the asyncio one driven from one event
loop in a background thread, with the same names (Termd, Tty)."""

from __future__ import annotations

import asyncio
import functools
import threading
from typing import Any, Callable, Iterator, Optional, Union

from .aio import AsyncTermd, AsyncTty
from .errors import WaitTimeoutError
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


def _sync(name: str) -> Callable[..., Any]:
    target = getattr(AsyncTermd, name)

    @functools.wraps(target)
    def method(self: "Termd", *args: Any, **kw: Any) -> Any:
        return self._loop.run(getattr(self._aio, name)(*args, **kw))
    return method


class _SyncNamespace:
    def __init__(self, owner: "Termd", ns: Any):
        self._owner = owner
        self._ns = ns

    def _run(self, name: str, *args: Any, **kw: Any) -> Any:
        return self._owner._loop.run(getattr(self._ns, name)(*args, **kw))


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
        self._loop = _Loop()

        async def make() -> AsyncTermd:
            return AsyncTermd(url, token, **kw)
        #: the asyncio client underneath (runs on this object's loop thread)
        self._aio: AsyncTermd = self._loop.run(make())
        self.sessions = _Sessions(self, self._aio.sessions)
        self.files = _Files(self, self._aio.files)
        if connect:
            try:
                self.connect()
            except BaseException:
                self.close()
                raise

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
        self._loop.run(self._aio.connect())
        return self

    def close(self) -> None:
        """Close the connections and stop the loop thread."""
        try:
            self._loop.run(self._aio.close())
        finally:
            self._loop.stop()

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
            if self._loop.loop.is_running():
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
        if self._owner._loop.loop.is_running():
            self._owner._loop.run(self._aio.close())
