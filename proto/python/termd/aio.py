"""termd.aio: the asyncio client. AsyncTermd keeps one /events connection
for actions (reopened with backoff when it drops, actions in flight re-sent
with the same id), events() on a connection of its own (resumed with
`subscribe since`), tty() on /tty/<session>.

Two timeouts never mix: `timeout` (and `idle_timeout`, `settle_ms`) are
termd's action args exactly as PROTOCOL.md names them; `wait` is how long
the caller waits for the answer (None: until termd answers)."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import ssl as _ssl
import uuid
import warnings
from typing import Any, AsyncIterator, Dict, List, Optional, Sequence, Tuple, Union

from . import _ws
from .errors import (GapError, IgnoredArgsError, IgnoredArgsWarning, TermdConnectionError, TermdError,
                     TooLargeError, BadJsonError, WaitTimeoutError, error_from_observation, ignored_args_of)
from .types import (BrowseResult, EditResult, Event, ExpectResult, Gap, IPythonResult, Observation,
                    PluginList, ReadResult, RunResult, Screen, SessionList, SessionOpened, TtyFrame,
                    WriteResult, Exit, _as_result, parse_tty_frame, EVENTS, PortList,
                    PortWaitResult)

# the client's own log: a connection being retried says so (WARNING, once a second)
log = logging.getLogger("termd")

__all__ = ["AsyncTermd", "AsyncTty", "new_id"]


def new_id() -> str:
    """A fresh action id (uuid4, hex): unique per termd instance, so a
    re-sent action is recognised and answered once."""
    return uuid.uuid4().hex


def _args(**kw: Any) -> Dict[str, Any]:
    return {k: v for k, v in kw.items() if v is not None}


# what _parse_observation gives as the id an answer is for when it is an
# error no action id could be given to
_TO_LARGEST = object()


def _parse_observation(data: Union[str, bytes]) -> Optional[Tuple[Dict[str, Any], Any]]:
    """An action connection's text frame as (observation, the action id it
    answers), or None when it answers no action (not a JSON object, or no
    cause). The id is _TO_LARGEST for an error no action id could be given
    to: the frame did not parse (bad_json) or was over --max-frame
    (too_large). Frames from this client are valid JSON, so it goes to the
    largest action in flight. AsyncTermd._dispatch and _Actions._dispatch_sync
    (sync.py) hand it to their own pending actions."""
    try:
        obs = json.loads(data)
    except ValueError:
        return None
    if not isinstance(obs, dict):
        return None
    cause = obs.get("cause")
    if cause is not None:
        return obs, cause
    if obs.get("observation") != "error":
        return None
    extras = obs.get("extras")
    if not isinstance(extras, dict) or extras.get("code") not in (TooLargeError.code, BadJsonError.code):
        return None
    return obs, _TO_LARGEST


class _Pending:
    __slots__ = ("frame", "future", "gen", "size")

    def __init__(self, frame: str, future: "asyncio.Future[Dict[str, Any]]"):
        self.frame = frame
        self.future = future
        self.gen = -1          # the connection generation it was last sent on
        self.size = len(frame)


class _Sessions:
    """``t.sessions``: open, list, signal, stdin, close (PROTOCOL.md §4 Session management)."""

    def __init__(self, t: "AsyncTermd"):
        self._t = t

    async def open(self, name: str, command: Optional[str] = None, **kw: Any) -> SessionOpened:
        """session.open (see AsyncTermd.session_open)."""
        return await self._t.session_open(name, command, **kw)

    async def list(self, **kw: Any) -> SessionList:
        """session.list (see AsyncTermd.session_list)."""
        return await self._t.session_list(**kw)

    async def signal(self, session: str, signal: str, **kw: Any) -> Observation:
        """session.signal (see AsyncTermd.session_signal)."""
        return await self._t.session_signal(session, signal, **kw)

    async def close(self, name: str, **kw: Any) -> Observation:
        """session.close (see AsyncTermd.session_close)."""
        return await self._t.session_close(name, **kw)

    async def stdin(self, session: str, data: Union[str, bytes, None] = None, **kw: Any) -> Observation:
        """session.stdin (see AsyncTermd.session_stdin)."""
        return await self._t.session_stdin(session, data, **kw)


class _Files:
    """``t.files``: read, write, edit (PROTOCOL.md §4 Files)."""

    def __init__(self, t: "AsyncTermd"):
        self._t = t

    async def read(self, path: str, **kw: Any) -> ReadResult:
        """read (see AsyncTermd.read)."""
        return await self._t.read(path, **kw)

    async def write(self, path: str, content: Union[str, bytes], **kw: Any) -> WriteResult:
        """write (see AsyncTermd.write)."""
        return await self._t.write(path, content, **kw)

    async def edit(self, command: str, path: str, **kw: Any) -> EditResult:
        """edit (see AsyncTermd.edit)."""
        return await self._t.edit(command, path, **kw)


# OpenSSL's verify codes for a certificate nobody this client trusts vouches
# for (self-signed, or an unknown CA), and for one issued for another name
_UNTRUSTED = {2, 18, 19, 20, 21}
_OTHER_NAME = {62, 64}
# a plain listener's answer read as a TLS record
_PLAIN = {"WRONG_VERSION_NUMBER", "PACKET_LENGTH_TOO_LONG", "UNKNOWN_PROTOCOL", "HTTP_REQUEST"}


def _tls_refusal(url: str, e: BaseException) -> Optional[str]:
    """What a TLS failure of a wss:// connection means, with what to do; None
    for anything else."""
    ssl = _ssl
    if isinstance(e, ssl.SSLCertVerificationError):
        what = getattr(e, "verify_message", None) or str(e)
        code = getattr(e, "verify_code", None)
        if code in _UNTRUSTED:
            return ("termd at %s: TLS certificate verify failed: %s: give termd's certificate "
                    "(or its CA) as cacert=FILE, or an ssl= context that trusts it" % (url, what))
        if code in _OTHER_NAME:
            return ("termd at %s: TLS certificate verify failed: %s: connect with a name or "
                    "address the certificate is for" % (url, what))
        return "termd at %s: TLS certificate verify failed: %s" % (url, what)
    if isinstance(e, ssl.SSLError) and getattr(e, "reason", None) in _PLAIN:
        plain = "ws://" + url.split("://", 1)[-1]
        return ("termd at %s answered without TLS (a plain listener): use %s, or start termd "
                "with --tls-cert and --tls-key" % (url, plain))
    return None


# an upgrade answered with one of these is not retried
_REFUSALS = (400, 401, 403, 404)


def _refused(url: str, path: str, status: int) -> str:
    """What a refused upgrade says."""
    return "termd at %s refused %s: HTTP %s%s" % (url, path, status,
                                                 " (wrong or missing token)" if status == 401 else "")


class AsyncTermd:
    """An asyncio client of one termd.

    ``AsyncTermd(url, token=None, *, token_file=None, cacert=None, ssl=None,
    retry_for=30.0, backoff=(0.05, 2.0), wait=None, open_timeout=10.0,
    max_size=64 MiB, headers=None, ignored_args="warn")``

    - `url`: ``ws://HOST:PORT``, ``wss://HOST:PORT`` or ``unix:/path.sock``
      (default $TERMD_URL, else ws://127.0.0.1:8421); `token` (default
      $TERMD_TOKEN) is sent as ``Authorization: Bearer``; for wss://,
      `cacert` (a PEM file) or an `ssl` context.
    - `retry_for`: seconds to keep trying to (re)open a dropped connection,
      with exponential backoff between `backoff[0]` and `backoff[1]` and
      jitter; past it every waiting call raises TermdConnectionError.
    - `wait`: the default caller's wait for every action (None: until
      termd answers, which its own timeouts guarantee).
    - `ignored_args`: an answer that names arguments termd did not read
      (``extras.ignored_args``: a misspelled keyword, or one this termd does
      not know; the action was carried out without them) warns
      (IgnoredArgsWarning, the default), raises IgnoredArgsError ("raise")
      or passes ("ignore"). An error's exception has them as `ignored_args`.

    Use ``async with AsyncTermd(...) as t:`` or call ``await t.close()``.
    """

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, *,
                 token_file: Optional[str] = None, cacert: Optional[str] = None,
                 ssl: Optional[_ssl.SSLContext] = None, retry_for: float = 30.0,
                 backoff: Sequence[float] = (0.05, 2.0), wait: Optional[float] = None,
                 open_timeout: float = 10.0, max_size: Optional[int] = 64 << 20,
                 headers: Optional[Dict[str, str]] = None, ignored_args: str = "warn"):
        if ignored_args not in ("warn", "raise", "ignore"):
            raise ValueError("ignored_args is \"warn\", \"raise\" or \"ignore\"")
        self.endpoint = _ws.Endpoint(url, token, token_file, cacert, ssl, max_size, open_timeout, headers)
        #: what an answer naming arguments termd did not read does: "warn"
        #: (IgnoredArgsWarning), "raise" (IgnoredArgsError) or "ignore"
        self.ignored_args = ignored_args
        self.retry_for = retry_for
        self.backoff = (float(backoff[0]), float(backoff[1]))
        self.wait = wait
        #: extras of the last ``hello`` (version, protocol, seq, sessions, actions)
        self.hello: Dict[str, Any] = {}
        #: how many times the action connection was reopened after a drop
        self.reconnects = 0
        self.sessions = _Sessions(self)
        self.files = _Files(self)
        self._ws: Any = None
        self._gen = 0
        self._connecting: Optional[asyncio.Task] = None
        self._reader: Optional[asyncio.Task] = None
        self._pending: Dict[Union[str, int], _Pending] = {}
        self._closed = False
        self._event_sockets: set = set()   # the events() connections open now

    @property
    def url(self) -> str:
        """The URL this client connects to."""
        return self.endpoint.url

    # ------------------------------------------------------------ connection

    async def __aenter__(self) -> "AsyncTermd":
        await self.connect()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def connect(self) -> "AsyncTermd":
        """Open the action connection now (otherwise the first action does).
        Raises TermdConnectionError when termd cannot be reached within
        `retry_for` seconds."""
        await self._ensure()
        return self

    async def close(self) -> None:
        """Close every connection; actions still waiting raise TermdConnectionError."""
        self._closed = True
        if self._connecting is not None:
            self._connecting.cancel()
        ws, self._ws = self._ws, None
        if ws is not None:
            await ws.close()
        if self._reader is not None:
            try:
                await self._reader
            except (asyncio.CancelledError, Exception):
                pass
        self._fail_all(TermdConnectionError("client closed"))

    def _fail_all(self, err: BaseException) -> None:
        for p in list(self._pending.values()):
            if not p.future.done():
                p.future.set_exception(err)
                p.future.exception()  # marked retrieved: nobody may be waiting any more

    async def _open_with_backoff(self, path: str, proto: str) -> Any:
        """Open a WebSocket, retrying with backoff for up to `retry_for` s."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.retry_for
        delay = self.backoff[0]
        last: Optional[BaseException] = None
        started = loop.time()
        said = None   # when the last "still trying" line was logged
        while True:
            if self._closed:
                raise TermdConnectionError("client closed")
            try:
                return await self.endpoint.open(path, proto)
            except (OSError, asyncio.TimeoutError, _ws.websockets.exceptions.WebSocketException,
                    EOFError) as e:
                last = e
                tls = _tls_refusal(self.url, e)
                if tls:   # no point in retrying either: it is not a matter of time
                    raise TermdConnectionError(tls) from e
                status = getattr(e, "status_code", None) or getattr(getattr(e, "response", None),
                                                                    "status_code", None)
                if status is None and isinstance(e, _ws.websockets.exceptions.InvalidMessage):
                    status = await self.endpoint.refusal_status(path, proto)
                if status in _REFUSALS:   # no point in retrying a refusal
                    raise TermdConnectionError(_refused(self.url, path, status)) from e
            now = loop.time()
            if now >= deadline:
                raise TermdConnectionError("cannot reach termd at %s within %.1fs: %s"
                                           % (self.url, self.retry_for, last)) from last
            if said is None or now - said >= 1.0:   # what it is doing, once a second
                said = now
                log.warning("termd at %s not reachable (%s): retrying for %.0f s more (%.1f s so far)",
                            self.url, last, deadline - now, now - started)
            await asyncio.sleep(min(delay * (0.5 + random.random()), max(0.0, deadline - now)))
            delay = min(delay * 2, self.backoff[1])

    async def _ensure(self) -> None:
        if self._closed:
            raise TermdConnectionError("client closed")
        if self._ws is not None:
            return
        if self._connecting is None:
            self._connecting = asyncio.ensure_future(self._connect_task())
        task = self._connecting
        await asyncio.shield(task)

    async def _connect_task(self) -> None:
        try:
            ws = await self._open_with_backoff("/events", _ws.EVENTS_PROTOCOL)
            try:
                hello = json.loads(await asyncio.wait_for(ws.recv(), self.endpoint.open_timeout))
            except Exception as e:
                await ws.close()
                raise TermdConnectionError("no hello from termd at %s: %r" % (self.url, e)) from e
            self.hello = hello.get("extras") or {}
            if self._gen > 0:
                self.reconnects += 1
            self._gen += 1
            self._ws = ws
            self._reader = asyncio.ensure_future(self._read_loop(ws))
            # actions in flight: re-sent with their ids (termd answers each once)
            for p in list(self._pending.values()):
                if p.gen != self._gen and not p.future.done():
                    await self._send(p)
        except BaseException as e:
            if isinstance(e, TermdError):
                self._fail_all(e)
            raise
        finally:
            self._connecting = None

    async def _send(self, p: _Pending) -> None:
        ws = self._ws
        if ws is None:
            return
        p.gen = self._gen
        try:
            await ws.send(p.frame)
        except _ws.ConnectionClosed:
            pass   # the read loop sees it too and reconnects; p is re-sent then

    async def _read_loop(self, ws: Any) -> None:
        try:
            async for msg in ws:
                self._dispatch(msg)
        except _ws.ConnectionClosed:
            pass
        except Exception:   # a frame that is not ours to judge: drop the connection, reopen
            pass
        finally:
            if self._ws is ws:
                self._ws = None
                if self._pending and not self._closed and self._connecting is None:
                    self._connecting = asyncio.ensure_future(self._connect_task())
                    self._connecting.add_done_callback(lambda t: t.cancelled() or t.exception())

    def _dispatch(self, msg: Union[str, bytes]) -> None:
        got = _parse_observation(msg)
        if got is None:
            return
        obs, cause = got
        if cause is _TO_LARGEST:
            p = max((p for p in self._pending.values() if not p.future.done()),
                    key=lambda p: p.size, default=None)
        else:
            p = self._pending.get(cause)
        if p is not None and not p.future.done():
            p.future.set_result(obs)

    # ---------------------------------------------------------------- actions

    async def call(self, action: str, args: Optional[Dict[str, Any]] = None, *,
                   wait: Optional[float] = None, action_id: Union[str, int, None] = None,
                   raw: bool = False, **kwargs: Any) -> Any:
        """Send any action and return its answer: ``call("run", command="ls")``
        or ``call("run", {"command": "ls"})``. Args whose value is None are
        left out. The answer is typed for the actions this package knows
        (RunResult, Screen, ...), else an Observation; with ``raw=True`` the
        observation dict. An ``error`` answer raises its TermdError subclass.
        `wait`: the caller's wait in seconds (default: the client's);
        `action_id`: the id to use (default a fresh uuid4) — re-sending an
        id termd already answered gets the stored answer (``replayed``)."""
        a = dict(args or {})
        a.update({k: v for k, v in kwargs.items() if v is not None})
        aid = new_id() if action_id is None else action_id
        frame: Dict[str, Any] = {"id": aid, "action": action}
        if a:
            frame["args"] = a
        obs = await self._roundtrip(aid, json.dumps(frame, ensure_ascii=False), action,
                                    self.wait if wait is None else wait)
        if obs.get("observation") == "error":
            raise error_from_observation(obs)   # (its ignored_args attribute names them)
        names = ignored_args_of(obs)
        if names and self.ignored_args == "raise":
            raise IgnoredArgsError(action, names, obs)
        if names and self.ignored_args == "warn":
            warnings.warn(IgnoredArgsWarning(action, names), stacklevel=2)
        return obs if raw else _as_result(action, obs)

    async def _roundtrip(self, aid: Union[str, int], frame: str, action: str,
                         wait: Optional[float]) -> Dict[str, Any]:
        loop = asyncio.get_running_loop()
        if aid in self._pending:
            raise ValueError("action id %r is already in flight on this client" % (aid,))
        p = _Pending(frame, loop.create_future())
        self._pending[aid] = p
        try:
            deadline = None if wait is None else loop.time() + wait

            async def go() -> Dict[str, Any]:
                await self._ensure()
                if p.gen != self._gen:
                    await self._send(p)
                return await p.future
            try:
                return await asyncio.wait_for(go(), None if deadline is None else max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                if p.future.done() and not p.future.cancelled() and p.future.exception() is None:
                    return p.future.result()
                raise WaitTimeoutError("no answer to %s (id %s) within wait=%ss; the action is not cancelled in termd"
                                       % (action, aid, wait)) from None
        finally:
            self._pending.pop(aid, None)

    async def run(self, command: str, *, session: Optional[str] = None, is_input: Optional[bool] = None,
                  timeout: Optional[float] = None, idle_timeout: Optional[float] = None,
                  max_output: Optional[int] = None, wait: Optional[float] = None, **extra: Any) -> RunResult:
        """``run``: a command in the session's shell (default "main"), or with
        ``is_input=True`` a line (or a key name like "C-c") typed into the
        running program; ``run("")`` waits again for a running command.
        `timeout` / `idle_timeout` are termd's (seconds; they never kill);
        `max_output` characters. Returns RunResult (`exit_code`, `output`,
        `cwd`, `running`, `waiting_for_input`, `timed_out`, ...).
        Raises BusyError, NoCommandError, ..."""
        return await self.call("run", _args(command=command, session=session, is_input=is_input,
                                            timeout=timeout, idle_timeout=idle_timeout,
                                            max_output=max_output, **extra), wait=wait)

    async def keys(self, *keys: Union[str, Sequence[str]], session: Optional[str] = None,
                   settle_ms: Optional[int] = None, timeout: Optional[float] = None,
                   wait: Optional[float] = None, **extra: Any) -> Screen:
        """``keys``: keystrokes, each a tmux key name ("Enter", "C-c", "Up",
        "M-x", "F5", ...) or literal text: ``keys("C-c")``, ``keys(":q", "Enter")``
        or ``keys(["i", "hi", "Escape"])``. Returns the Screen once output
        settled for `settle_ms` (termd's default 100) or termd's `timeout`."""
        flat: List[str] = []
        for k in keys:
            flat.extend([k] if isinstance(k, str) else list(k))
        return await self.call("keys", _args(keys=flat, session=session, settle_ms=settle_ms,
                                             timeout=timeout, **extra), wait=wait)

    async def screen(self, session: Optional[str] = None, *, wait: Optional[float] = None,
                     **extra: Any) -> Screen:
        """``screen``: the rendered screen (`text`, `cols`, `rows`, `cursor`,
        `alt_screen`, `title`)."""
        return await self.call("screen", _args(session=session, **extra), wait=wait)

    async def expect(self, pattern: str, *, session: Optional[str] = None, timeout: Optional[float] = None,
                     wait: Optional[float] = None, **extra: Any) -> ExpectResult:
        """``expect``: wait for a POSIX extended regex in the session's output
        from now on (and the current screen); termd's `timeout` default 30.
        Returns ExpectResult (`matched`, `match`, `groups`); it is falsy when
        nothing matched."""
        return await self.call("expect", _args(pattern=pattern, session=session, timeout=timeout, **extra),
                               wait=wait)

    async def read(self, path: str, *, start: Optional[int] = None, end: Optional[int] = None,
                   encoding: Optional[str] = None, wait: Optional[float] = None, **extra: Any) -> ReadResult:
        """``read``: a file's lines `start`..`end` (1-based, inclusive; -1 the
        end), or with ``encoding="base64"`` its bytes (ReadResult.data).
        Raises NotFoundError, IsDirectoryError, BinaryFileError, ..."""
        r = await self.call("read", _args(path=path, start=start, end=end, encoding=encoding, **extra),
                            wait=wait)
        r.encoding = encoding or "utf-8"
        return r

    async def write(self, path: str, content: Union[str, bytes], *, encoding: Optional[str] = None,
                    mode: Optional[str] = None, expected_sha256: Optional[str] = None,
                    wait: Optional[float] = None, **extra: Any) -> WriteResult:
        """``write``: a whole file, atomically (parents created). `content` as
        bytes is sent base64 (any bytes); `mode` an octal string ("0755");
        `expected_sha256`: only if the file still has that hash, else
        MismatchError. Returns WriteResult (`sha256`, `bytes`)."""
        if isinstance(content, (bytes, bytearray, memoryview)):
            import base64
            content = base64.b64encode(bytes(content)).decode("ascii")
            encoding = "base64"
        return await self.call("write", _args(path=path, content=content, encoding=encoding, mode=mode,
                                              expected_sha256=expected_sha256, **extra), wait=wait)

    async def edit(self, command: str, path: str, *, file_text: Optional[str] = None,
                   old_str: Optional[str] = None, new_str: Optional[str] = None,
                   insert_line: Optional[int] = None, view_range: Optional[Sequence[int]] = None,
                   wait: Optional[float] = None, **extra: Any) -> EditResult:
        """``edit``: `command` one of "view", "create" (`file_text`),
        "str_replace" (`old_str`, `new_str`), "insert" (`insert_line`,
        `new_str`), "undo_edit"; `view_range` [start, end]. Returns
        EditResult (a numbered snippet). Raises MismatchError, NotFoundError, ..."""
        return await self.call("edit", _args(command=command, path=path, file_text=file_text, old_str=old_str,
                                             new_str=new_str, insert_line=insert_line,
                                             view_range=list(view_range) if view_range is not None else None,
                                             **extra), wait=wait)

    async def session_open(self, name: str, command: Optional[str] = None, *, cwd: Optional[str] = None,
                           env: Optional[Dict[str, str]] = None, cols: Optional[int] = None,
                           rows: Optional[int] = None, kind: Optional[str] = None,
                           stdin: Optional[bool] = None, limits: Optional[Dict[str, Any]] = None,
                           wait: Optional[float] = None, **extra: Any) -> SessionOpened:
        """``session.open``: a new session `name` running `command` (default
        an interactive shell) in `cwd` with `env`, `cols`×`rows`. `kind`
        "pipe" runs `command` without a terminal, stdout and stderr apart
        (``session.output`` events), stdin a pipe only with `stdin=True`.
        `limits` ({"memory": "512M", "pids": 100, "cpu": 0.5}, None for
        none) override termd's --session-*-max for this session's cgroup.
        Raises SessionExistsError."""
        return await self.call("session.open", _args(name=name, command=command, cwd=cwd, env=env,
                                                     cols=cols, rows=rows, kind=kind, stdin=stdin,
                                                     limits=limits, **extra), wait=wait)

    async def session_stdin(self, session: str, data: Union[str, bytes, None] = None, *,
                            eof: bool = False, wait: Optional[float] = None, **extra: Any) -> Observation:
        """``session.stdin``: `data` (text, or bytes sent as base64) to the
        session's input as it is; `eof=True` then closes a pipe session's stdin."""
        if isinstance(data, (bytes, bytearray)):
            import base64
            args = _args(session=session, content=base64.b64encode(bytes(data)).decode("ascii"),
                         encoding="base64", **extra)
        else:
            args = _args(session=session, content=data, **extra)
        if eof:
            args["eof"] = True
        return await self.call("session.stdin", args, wait=wait)

    async def session_list(self, *, wait: Optional[float] = None, **extra: Any) -> SessionList:
        """``session.list``: SessionList of SessionInfo (name, pid, alive,
        exit_code, command, cwd, cols, rows, viewers)."""
        return await self.call("session.list", _args(**extra), wait=wait)

    async def session_signal(self, session: str, signal: str, *, tree: bool = False,
                             wait: Optional[float] = None, **extra: Any) -> Observation:
        """``session.signal``: `signal` ("INT", "TERM", "KILL", "HUP", "QUIT",
        "STOP", "CONT", "USR1", "USR2") to the session's foreground process
        group; with `tree=True` to every process of the session (its cgroup:
        double-forked daemons too; a shell session's shell is spared)."""
        return await self.call("session.signal", _args(session=session, signal=signal,
                                                       tree=tree or None, **extra), wait=wait)

    async def session_close(self, name: str, *, wait: Optional[float] = None, **extra: Any) -> Observation:
        """``session.close``: end the session's process group and remove it
        ("main" cannot be closed)."""
        return await self.call("session.close", _args(name=name, **extra), wait=wait)

    async def watch(self, path: str, *, recursive: bool = False, wait: Optional[float] = None,
                    **extra: Any) -> Observation:
        """``watch``: follow the folder `path` (and below it with
        `recursive`); its changes come as ``watch.event`` events (see
        events()). extras["watch"] is the id for watch_stop."""
        return await self.call("watch", _args(path=path, recursive=recursive or None, **extra), wait=wait)

    async def watch_stop(self, watch: str, *, wait: Optional[float] = None) -> Observation:
        """``watch.stop``: stop the watch `watch` (an id from watch())."""
        return await self.call("watch.stop", _args(watch=watch), wait=wait)

    async def watch_list(self, *, wait: Optional[float] = None) -> Observation:
        """``watch.list``: extras["watches"], [{watch, path, recursive}]; extras["folders"]
        (followed by all watches) and extras["budget"] (at most)."""
        return await self.call("watch.list", wait=wait)

    async def ports(self, *, wait: Optional[float] = None) -> PortList:
        """``ports.list``: PortList of PortInfo (port, address, session, pid,
        command) for the sockets sessions' programs listen on."""
        return await self.call("ports.list", wait=wait)

    async def port_wait(self, port: int, *, timeout: Optional[float] = None,
                        wait: Optional[float] = None) -> PortWaitResult:
        """``port.wait``: until `port` accepts connections (termd's `timeout`
        default 30 s). PortWaitResult is falsy at the timeout."""
        if wait is None and timeout is not None:
            wait = timeout + 30
        return await self.call("port.wait", _args(port=port, timeout=timeout), wait=wait)

    async def file_stat(self, path: str, *, wait: Optional[float] = None) -> Observation:
        """``file.stat``: extras["entry"] (type, size, mode, permissions, owner, group, modified, ...)."""
        return await self.call("file.stat", _args(path=path), wait=wait)

    async def file_list(self, path: str, *, depth: Optional[int] = None, max_entries: Optional[int] = None,
                        offset: Optional[int] = None, wait: Optional[float] = None) -> Observation:
        """``file.list``: extras["entries"] in walk order down to `depth`, the
        first `offset` left out; extras["truncated"] and, when truncated,
        extras["next_offset"] (the next page's offset)."""
        return await self.call("file.list", _args(path=path, depth=depth, max_entries=max_entries,
                                                  offset=offset), wait=wait)

    async def file_mkdir(self, path: str, *, parents: Optional[bool] = None, exist_ok: Optional[bool] = None,
                         wait: Optional[float] = None) -> Observation:
        """``file.mkdir``: extras["entry"] and extras["created"] (the folders made)."""
        return await self.call("file.mkdir", _args(path=path, parents=parents, exist_ok=exist_ok), wait=wait)

    async def file_move(self, source: str, destination: str, *, wait: Optional[float] = None) -> Observation:
        """``file.move``: rename(2), the destination's folder made first; extras["entry"]."""
        return await self.call("file.move", _args(source=source, destination=destination), wait=wait)

    async def file_remove(self, path: str, *, recursive: Optional[bool] = None,
                          wait: Optional[float] = None) -> Observation:
        """``file.remove``: a file, a symlink, an empty folder, or a tree with `recursive`."""
        return await self.call("file.remove", _args(path=path, recursive=recursive), wait=wait)

    async def ping(self, *, wait: Optional[float] = None) -> Observation:
        """``ping``: the ``pong`` observation."""
        return await self.call("ping", wait=wait)

    async def plugin_list(self, *, wait: Optional[float] = None) -> PluginList:
        """``plugin.list``: PluginList of PluginInfo (name, version, state, actions, error)."""
        return await self.call("plugin.list", wait=wait)

    async def run_ipython(self, code: str, *, timeout: Optional[float] = None,
                          kernel_init_code: Optional[str] = None, wait: Optional[float] = None,
                          **extra: Any) -> IPythonResult:
        """``run_ipython`` (plugin jupyter): a cell in termd's IPython kernel;
        termd's `timeout` default 120. Returns IPythonResult."""
        return await self.call("run_ipython", _args(code=code, timeout=timeout,
                                                    kernel_init_code=kernel_init_code, **extra), wait=wait)

    async def browse(self, url: str, *, timeout: Optional[float] = None, screenshot: Optional[bool] = None,
                     wait: Optional[float] = None, **extra: Any) -> BrowseResult:
        """``browse`` (plugin browser): open `url` (or a local path) in
        termd's headless Chromium. Returns BrowseResult."""
        return await self.call("browse", _args(url=url, timeout=timeout, screenshot=screenshot, **extra),
                               wait=wait)

    async def browse_interactive(self, browser_actions: str, *, timeout: Optional[float] = None,
                                 screenshot: Optional[bool] = None, wait: Optional[float] = None,
                                 **extra: Any) -> BrowseResult:
        """``browse_interactive`` (plugin browser): `browser_actions`, one
        call a line (``click('12')``, ``fill('5', 'hi')``, ...). Returns BrowseResult."""
        return await self.call("browse_interactive", _args(browser_actions=browser_actions, timeout=timeout,
                                                           screenshot=screenshot, **extra), wait=wait)

    # ----------------------------------------------------------------- events

    async def events(self, since: Optional[int] = None, *, gaps: str = "yield") -> AsyncIterator[Event]:
        """Every event on termd's stream (``subscribe``), on a connection of
        its own: ``async for ev in t.events(since=seq): ...``.

        `since`: replay retained events with a greater seq first (default:
        only events from now on). A dropped connection is reopened with
        backoff and the stream resumes with ``subscribe since=<last seq
        seen>``, so nothing is seen twice. When termd no longer has some of
        the events asked for it says so: with ``gaps="yield"`` (default) a
        Gap item (`from_seq`, `to_seq`) comes first, with ``gaps="raise"``
        a GapError ends the iteration (resume with ``since=err.to_seq``).
        Raises TermdConnectionError when termd cannot be reached within
        `retry_for`."""
        if gaps not in ("yield", "raise"):
            raise ValueError("gaps must be 'yield' or 'raise'")
        last = since
        while True:
            ws = await self._open_with_backoff("/events", _ws.EVENTS_PROTOCOL)
            self._event_sockets.add(ws)
            try:
                hello = json.loads(await asyncio.wait_for(ws.recv(), self.endpoint.open_timeout))
                if last is None:
                    last = int((hello.get("extras") or {}).get("seq") or 0)
                sid = new_id()
                await ws.send(json.dumps({"id": sid, "action": "subscribe", "args": {"since": last}}))
                async for msg in ws:
                    try:
                        obs = json.loads(msg)
                    except ValueError:
                        continue
                    if not isinstance(obs, dict):
                        continue
                    kind = obs.get("observation")
                    if obs.get("cause") == sid:
                        if kind == "error":
                            raise error_from_observation(obs)
                        continue   # the subscribe answer itself
                    if kind == "gap" and obs.get("cause") is None:
                        g = Gap.from_dict(obs)
                        if isinstance(g.to_seq, int):
                            last = max(last, g.to_seq)
                        if gaps == "raise":
                            raise GapError(g.from_seq, g.to_seq, obs)
                        yield g
                        continue
                    seq = obs.get("seq")
                    if isinstance(seq, int):
                        if seq <= last:
                            continue
                        last = seq
                    yield EVENTS.get(obs.get("observation"), Event).from_dict(obs)
            except (_ws.ConnectionClosed, asyncio.TimeoutError, OSError):
                pass   # reopen and resume
            finally:
                self._event_sockets.discard(ws)
                await ws.close()
            if self._closed:
                return

    # -------------------------------------------------------------------- tty

    async def tty(self, session: str = "main", mode: str = "ro") -> "AsyncTty":
        """A live terminal on ``/tty/<session>``: ``mode="ro"`` watches,
        ``mode="rw"`` (full token) may also type and resize. Returns an
        open AsyncTty (``async with await t.tty("main") as tty``)."""
        if mode not in ("ro", "rw"):
            raise ValueError("mode must be 'ro' or 'rw'")
        ws = await self._open_with_backoff(_ws.tty_path(session, mode), _ws.TTY_PROTOCOL)
        return AsyncTty(ws, session, mode)


class AsyncTty:
    """One /tty connection: iterate it for TtyFrame objects (Resize,
    Snapshot, Output, Title, Exit, ErrorFrame); `send` types, `resize`
    resizes (both need mode "rw"). It renders nothing itself (the `screen`
    action does). Iteration ends when termd closes (after Exit) or the
    connection drops; open a new one to continue (it starts with a snapshot)."""

    def __init__(self, ws: Any, session: str, mode: str):
        self._ws = ws
        #: the session's name
        self.session = session
        #: "ro" or "rw"
        self.mode = mode

    async def __aenter__(self) -> "AsyncTty":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def __aiter__(self) -> "AsyncTty":
        return self

    async def __anext__(self) -> TtyFrame:
        try:
            return await self.recv()
        except _ws.ConnectionClosed:
            raise StopAsyncIteration from None

    async def recv(self, wait: Optional[float] = None) -> TtyFrame:
        """The next frame; raises ConnectionClosed (websockets') at the end,
        WaitTimeoutError after `wait` seconds."""
        while True:
            try:
                msg = await asyncio.wait_for(self._ws.recv(), wait)
            except asyncio.TimeoutError:
                raise WaitTimeoutError("no /tty frame within wait=%ss" % wait) from None
            if isinstance(msg, (bytes, bytearray)):
                return parse_tty_frame(bytes(msg))

    async def send(self, data: Union[str, bytes]) -> None:
        """Type `data` (str is sent as UTF-8) as an 'I' frame."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        await self._ws.send(b"I" + bytes(data))

    async def resize(self, cols: int, rows: int) -> None:
        """Resize the session's terminal (an 'R' frame)."""
        await self._ws.send(b"R" + json.dumps({"cols": int(cols), "rows": int(rows)}).encode())

    async def close(self) -> None:
        """Close the connection."""
        await self._ws.close()
