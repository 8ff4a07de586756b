"""termd — Python client library for termd (named pty sessions over
WebSocket; the wire contract is PROTOCOL.md).

    from termd import Termd                 # synchronous; termd.aio.AsyncTermd for asyncio
    t = Termd("unix:/run/termd.sock")      # or ws://HOST:PORT, wss://... with cacert=
    r = t.run("make test", timeout=600)    # timeout: termd's; wait=: the caller's
    if r.waiting_for_input:                # r.waiting.kind: line, password, key, pager, editor
        r = t.run("y", is_input=True)

Errors are TermdError subclasses, one per error code (BusyError, NotFoundError,
...), carrying `code` and the error `observation`."""

from .errors import (ERRORS, IgnoredArgsError, IgnoredArgsWarning, BadJsonError, BadRequestError, BinaryFileError, BusyError, ForbiddenError,
                     GapError, InternalError, IoError, IsDirectoryError, MismatchError, NoCommandError,
                     NoSuchSessionError, NotFoundError, PluginFailedError, SessionExistsError,
                     TermdConnectionError, TermdError, TooLargeError, UnknownActionError,
                     WaitTimeoutError, error_from_observation)
from .types import (BrowseResult, Cursor, EditResult, ErrorFrame, Event, Exit, ExpectResult, Gap,
                    IPythonResult, Observation, Output, PluginInfo, PluginList, PortEvent, PortInfo,
                    PortList, PortWaitResult, ReadResult, Resize,
                    RunResult, Screen, SessionInfo, SessionList, SessionOpened, Snapshot, Title,
                    TtyFrame, Waiting, WriteResult, parse_tty_frame)
from .aio import AsyncTermd, AsyncTty, new_id
from .sync import Termd, Tty

__version__ = "0.1.0"

__all__ = [
    "Termd", "Tty", "AsyncTermd", "AsyncTty", "new_id",
    "TermdError", "TermdConnectionError", "WaitTimeoutError", "GapError", "ERRORS", "error_from_observation",
    "IgnoredArgsWarning", "IgnoredArgsError",
    "BadJsonError", "BadRequestError", "UnknownActionError", "NoSuchSessionError", "SessionExistsError",
    "BusyError", "NoCommandError", "TooLargeError", "NotFoundError", "IsDirectoryError", "BinaryFileError",
    "IoError", "MismatchError", "ForbiddenError", "PluginFailedError", "InternalError",
    "Observation", "RunResult", "Waiting", "Screen", "Cursor", "ExpectResult", "ReadResult", "WriteResult",
    "EditResult", "SessionInfo", "SessionList", "SessionOpened", "PluginInfo", "PluginList",
    "IPythonResult", "BrowseResult", "Event", "Gap",
    "PortInfo", "PortList", "PortWaitResult", "PortEvent",
    "TtyFrame", "Resize", "Snapshot", "Output", "Title", "Exit", "ErrorFrame", "parse_tty_frame",
]
