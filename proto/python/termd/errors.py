"""termd.errors: one exception class per error code of the wire contract
(PROTOCOL.md section 2), all under TermdError, plus the client's own
failures (the connection could not be kept, the caller's wait ran out, a
gap in the event stream)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional


class TermdError(Exception):
    """Base of every error this package raises.

    `code` is termd's error code (``"busy"``, ``"not_found"``, ...) or None
    for the client's own failures; `observation` is the error observation
    termd sent (a dict, None when there is none); `message` its text."""

    code: Optional[str] = None

    def __init__(self, message: str = "", code: Optional[str] = None,
                 observation: Optional[Dict[str, Any]] = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.observation = observation
        #: argument names termd did not read before it answered
        #: (``extras.ignored_args``; on an error, those after the one it
        #: failed on are among them)
        self.ignored_args: List[str] = ignored_args_of(observation)

    def __str__(self) -> str:
        return "%s: %s" % (self.code, self.message) if self.code else self.message


def _err(name: str, code: str, doc: str) -> type:
    cls = type(name, (TermdError,), {"code": code, "__doc__": doc, "__module__": __name__})
    return cls


BadJsonError = _err("BadJsonError", "bad_json", "termd could not parse a frame as JSON (code bad_json).")
BadRequestError = _err("BadRequestError", "bad_request", "A missing or mistyped field (code bad_request).")
UnknownActionError = _err("UnknownActionError", "unknown_action", "termd has no such action (code unknown_action).")
NoSuchSessionError = _err("NoSuchSessionError", "no_such_session", "The session does not exist (code no_such_session).")
SessionExistsError = _err("SessionExistsError", "session_exists", "session.open of a name taken (code session_exists).")
BusyError = _err("BusyError", "busy", "A command is still running in the session; nothing was typed (code busy).")
NoCommandError = _err("NoCommandError", "no_command", "Input or a wait with nothing running (code no_command).")
TooLargeError = _err("TooLargeError", "too_large", "A frame or file over termd's limit (code too_large).")
NotFoundError = _err("NotFoundError", "not_found", "No such file (code not_found).")
IsDirectoryError = _err("IsDirectoryError", "is_directory",
                        "The path is a folder (code is_directory). Not the builtin IsADirectoryError: "
                        "it does not derive from OSError.")
BinaryFileError = _err("BinaryFileError", "binary_file", "utf-8 asked of a file that is not text (code binary_file).")
IoError = _err("IoError", "io_error", "A file-system failure in termd (code io_error). Not the builtin IOError.")
MismatchError = _err("MismatchError", "mismatch",
                     "expected_sha256 differs, old_str not found exactly once, nothing to undo (code mismatch).")
ForbiddenError = _err("ForbiddenError", "forbidden", "Not allowed with a read-only token (code forbidden).")
PluginFailedError = _err("PluginFailedError", "plugin_failed", "The action's plugin failed to install (code plugin_failed).")
InternalError = _err("InternalError", "internal", "termd failed inside (code internal).")

#: error code -> exception class
ERRORS = {c.code: c for c in (BadJsonError, BadRequestError, UnknownActionError, NoSuchSessionError,
                              SessionExistsError, BusyError, NoCommandError, TooLargeError, NotFoundError,
                              IsDirectoryError, BinaryFileError, IoError, MismatchError, ForbiddenError,
                              PluginFailedError, InternalError)}


class TermdConnectionError(TermdError, ConnectionError):
    """The connection to termd could not be opened or reopened within the
    client's `retry_for` budget (termd gone, refused, wrong token, ...)."""


class WaitTimeoutError(TermdError, TimeoutError):
    """The caller's own wait (`wait=`) ran out before termd answered. The
    action is not cancelled in termd: a `run` keeps running (continue it
    with ``run("")``)."""


class GapError(TermdError):
    """Raised by ``events(gaps="raise")`` when termd says events were
    dropped from retention: `from_seq`..`to_seq` (inclusive) are lost.
    Resume with ``events(since=err.to_seq)``."""

    def __init__(self, from_seq: int, to_seq: int, observation: Optional[Dict[str, Any]] = None):
        super().__init__("events %s..%s were dropped from termd's retention" % (from_seq, to_seq),
                         None, observation)
        self.from_seq = from_seq
        self.to_seq = to_seq


def ignored_args_of(obs: Optional[Dict[str, Any]]) -> List[str]:
    """The argument names an answer says termd did not read
    (``extras.ignored_args``), [] when none."""
    names = ((obs or {}).get("extras") or {}).get("ignored_args") if isinstance(obs, dict) else None
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


class IgnoredArgsWarning(UserWarning):
    """termd carried out an action without some of the arguments it was
    sent: no part of it read them (``extras.ignored_args``, PROTOCOL.md §2),
    a misspelled keyword or one this termd is too old to know. Warned by
    default; ``ignored_args="raise"`` raises IgnoredArgsError instead, and a
    test suite can make it an error (``-W error::termd.IgnoredArgsWarning``)."""

    def __init__(self, action: str, names: List[str]):
        super().__init__("termd did not read the argument%s %s of %s (misspelled, or not known to this termd)"
                         % ("s" if len(names) > 1 else "", ", ".join(repr(n) for n in names), action))
        self.action = action
        self.names = list(names)


class IgnoredArgsError(TermdError):
    """Raised with ``ignored_args="raise"`` when an answer names arguments
    termd did not read. The action WAS carried out (without them):
    `observation` is its answer, `names` the arguments, `action` its name."""

    def __init__(self, action: str, names: List[str], observation: Optional[Dict[str, Any]] = None):
        super().__init__(str(IgnoredArgsWarning(action, names)), None, observation)
        self.action = action
        self.names = list(names)


def error_from_observation(obs: Dict[str, Any]) -> TermdError:
    """The exception for an ``error`` observation: the class of its
    ``extras.code`` (TermdError itself for a code this package does not know)."""
    extras = obs.get("extras") or {}
    code = extras.get("code")
    cls = ERRORS.get(code, TermdError)
    return cls(str(obs.get("content") or ""), code, obs)
