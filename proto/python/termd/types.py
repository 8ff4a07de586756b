"""termd.types: typed results (dataclasses) for the observations of
PROTOCOL.md, and the /tty frames of its section 6.

Every result keeps the whole observation: `extras` is the raw dict, so a
field this package does not name is still reachable."""

from __future__ import annotations

import base64
import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union


@dataclass
class Observation:
    """Any observation: `observation` (its kind), `content`, `extras`,
    `seq`, `ts` and `cause` (the id of the action it answers, or None)."""
    observation: str = ""
    content: str = ""
    extras: Dict[str, Any] = field(default_factory=dict)
    seq: Optional[int] = None
    ts: Optional[float] = None
    cause: Union[str, int, None] = None

    @property
    def replayed(self) -> bool:
        """True when termd sent a stored answer again (the action's id had
        already been answered, e.g. re-sent after a reconnect)."""
        return bool(self.extras.get("replayed"))

    @classmethod
    def from_dict(cls, obs: Dict[str, Any]):
        """Build this class from an observation dict: the common fields, then
        each further dataclass field from ``extras`` by its name (a field
        named ``x_`` reads ``extras["x"]``)."""
        extras = obs.get("extras") or {}
        if not isinstance(extras, dict):
            extras = {"value": extras}
        kw = {"observation": obs.get("observation") or "", "content": obs.get("content") or "",
              "extras": extras, "seq": obs.get("seq"), "ts": obs.get("ts"), "cause": obs.get("cause")}
        for name, key in _extra_fields(cls):
            if key in extras:
                kw[name] = extras[key]
        obj = cls(**kw)
        obj._post()
        return obj

    def _post(self) -> None:
        pass


_EXTRA_FIELDS: Dict[type, tuple] = {}


def _extra_fields(cls: type) -> tuple:
    """(field name, extras key) of each dataclass field of cls that
    Observation does not have, worked out once per class."""
    got = _EXTRA_FIELDS.get(cls)
    if got is None:
        base = {f.name for f in dataclasses.fields(Observation)}
        got = tuple((f.name, f.name[:-1] if f.name.endswith("_") else f.name)
                    for f in dataclasses.fields(cls) if f.name not in base)
        _EXTRA_FIELDS[cls] = got
    return got


@dataclass
class Waiting:
    """What a program waiting for input waits for (PROTOCOL.md §11):
    `kind` is "line" (a line, echoed), "password" (a line, not echoed),
    "key" (a key, raw mode), "pager" (less, more, man: `q` quits) or
    "editor" (vi, nano, an editor git or crontab opened); `prompt` is the
    last non-empty line of the screen; `pid` and `command` are the reading
    process's; `shell` is True when the reader is another interactive shell
    at its prompt (su's, a nested bash): kind "line", a command line."""
    kind: str = "line"
    prompt: str = ""
    pid: Optional[int] = None
    command: str = ""
    shell: bool = False

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Waiting":
        return cls(kind=d.get("kind") or "line", prompt=d.get("prompt") or "", pid=d.get("pid"),
                   command=d.get("command") or "", shell=d.get("shell") is True)


@dataclass
class RunResult(Observation):
    """Answer to ``run`` (PROTOCOL.md §4 run item 2). `output` is `content`.
    `exit_code` is -1 while `running`; `timed_out` is None, "idle" or "hard".
    With `waiting_for_input`, `waiting` (a Waiting) says what the program
    waits for; None otherwise (and from a termd older than 1.3)."""
    session: str = "main"
    exit_code: int = -1
    running: bool = False
    cwd: Optional[str] = None
    pid: Optional[int] = None
    duration_ms: Optional[float] = None
    timed_out: Optional[str] = None
    waiting_for_input: bool = False
    alt_screen: bool = False
    truncated: bool = False
    output_file: Optional[str] = None
    restarted: bool = False
    waiting: Optional[Waiting] = None

    def _post(self) -> None:
        if isinstance(self.waiting, dict):
            self.waiting = Waiting.from_dict(self.waiting)
        elif self.waiting is not None:
            self.waiting = None

    @property
    def output(self) -> str:
        """The command's output as a person sees it (same as `content`)."""
        return self.content


@dataclass
class Cursor:
    """A cursor position, 0-based."""
    row: int = 0
    col: int = 0


@dataclass
class Screen(Observation):
    """Answer to ``screen`` and ``keys``: the visible screen (`text`, one
    line per row), its size, `cursor`, `alt_screen` and `title`."""
    cols: int = 0
    rows: int = 0
    cursor: Any = None
    alt_screen: bool = False
    title: str = ""
    session: Optional[str] = None

    def _post(self) -> None:
        if isinstance(self.cursor, dict):
            self.cursor = Cursor(int(self.cursor.get("row", 0)), int(self.cursor.get("col", 0)))

    @property
    def text(self) -> str:
        """The screen as text (same as `content`)."""
        return self.content

    @property
    def lines(self) -> List[str]:
        """The screen's rows as a list of strings."""
        return self.content.split("\n")


@dataclass
class ExpectResult(Observation):
    """Answer to ``expect``: `matched`, the `match` text and regex `groups`;
    `content` is the text up to and including the match."""
    matched: bool = False
    match: Optional[str] = None
    groups: List[Any] = field(default_factory=list)
    session: Optional[str] = None

    def __bool__(self) -> bool:
        return bool(self.matched)


@dataclass
class ReadResult(Observation):
    """Answer to ``read``: `content` (text, or base64 with encoding
    "base64"), `path`, `total_lines`, `sha256` of the whole file."""
    path: str = ""
    total_lines: Optional[int] = None
    sha256: Optional[str] = None
    encoding: Optional[str] = None

    @property
    def data(self) -> bytes:
        """The content as bytes (decoded from base64 when it was read so)."""
        if self.encoding == "base64":
            return base64.b64decode(self.content)
        return self.content.encode("utf-8")


@dataclass
class WriteResult(Observation):
    """Answer to ``write``: the new file's `sha256` and size in `bytes`."""
    path: Optional[str] = None
    sha256: Optional[str] = None
    bytes: Optional[int] = None


@dataclass
class EditResult(Observation):
    """Answer to ``edit``: `content` is a numbered snippet around the change
    (or the listing, for view)."""
    path: Optional[str] = None


@dataclass
class SessionInfo:
    """One entry of ``session.list``."""
    name: str = ""
    pid: Optional[int] = None
    alive: bool = False
    exit_code: Optional[int] = None
    command: Optional[str] = None
    cwd: Optional[str] = None
    cols: Optional[int] = None
    rows: Optional[int] = None
    viewers: int = 0
    limits: Optional[Dict[str, Any]] = None   # {memory, pids, cpu}; None without cgroups
    usage: Optional[Dict[str, Any]] = None    # {memory, memory_peak, pids, cpu_s, ...}
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "SessionInfo":
        """From one ``extras.sessions`` entry (unknown keys kept in `raw`)."""
        names = {f.name for f in dataclasses.fields(cls)} - {"raw"}
        return cls(**{k: v for k, v in d.items() if k in names}, raw=dict(d))


@dataclass
class SessionList(Observation):
    """Answer to ``session.list``: `sessions`, a list of SessionInfo."""
    sessions: List[Any] = field(default_factory=list)

    def _post(self) -> None:
        self.sessions = [SessionInfo.from_dict(s) if isinstance(s, dict) else s for s in self.sessions]

    def __iter__(self):
        return iter(self.sessions)

    def names(self) -> List[str]:
        """The session names."""
        return [s.name for s in self.sessions]


@dataclass
class SessionOpened(Observation):
    """Answer to ``session.open`` (and the event of the same name)."""
    name: Optional[str] = None
    pid: Optional[int] = None
    command: Optional[str] = None


@dataclass
class PluginInfo:
    """One entry of ``plugin.list``: `state` is "installing", "ready" or "failed"."""
    name: str = ""
    version: Optional[str] = None
    state: Optional[str] = None
    actions: List[str] = field(default_factory=list)
    error: Optional[str] = None


@dataclass
class PluginList(Observation):
    """Answer to ``plugin.list``: `plugins`, a list of PluginInfo."""
    plugins: List[Any] = field(default_factory=list)

    def _post(self) -> None:
        names = {f.name for f in dataclasses.fields(PluginInfo)}
        self.plugins = [PluginInfo(**{k: v for k, v in p.items() if k in names}) if isinstance(p, dict) else p
                        for p in self.plugins]


@dataclass
class IPythonResult(Observation):
    """Answer to ``run_ipython`` (plugin jupyter): `status` "ok", "error" or
    "timeout", `image_urls`, `execution_count`, `restarted`."""
    code: Optional[str] = None
    image_urls: List[str] = field(default_factory=list)
    status: Optional[str] = None
    execution_count: Optional[int] = None
    restarted: bool = False

    @property
    def output(self) -> str:
        """The cell's output (same as `content`)."""
        return self.content


@dataclass
class BrowseResult(Observation):
    """Answer to ``browse`` / ``browse_interactive`` (plugin browser):
    `content` the page as readable text, `axtree` with bids, and the rest."""
    url: Optional[str] = None
    title: Optional[str] = None
    axtree: Optional[str] = None
    focused_element_bid: Optional[str] = None
    open_pages_urls: List[str] = field(default_factory=list)
    active_page_index: Optional[int] = None
    screenshot: Optional[str] = None
    last_browser_action: Optional[str] = None
    last_browser_action_error: Optional[str] = None
    error: bool = False
    trigger_by_action: Optional[str] = None

    @property
    def text(self) -> str:
        """The page as readable text (same as `content`)."""
        return self.content


@dataclass
class Event(Observation):
    """An item of ``events()``: any observation on the stream (section 5
    events such as command.start, and every action's answer)."""


@dataclass
class Gap(Event):
    """``events()`` item saying termd dropped `from_seq`..`to_seq`
    (inclusive) from retention before this client could read them."""
    from_seq: int = 0
    to_seq: int = 0

    def _post(self) -> None:
        self.from_seq = self.extras.get("from", self.from_seq)
        self.to_seq = self.extras.get("to", self.to_seq)


@dataclass
class PortInfo:
    """One listening socket of a session's program (``ports.list``,
    ``port.open``)."""
    port: int = 0
    address: str = ""
    session: str = ""
    pid: Optional[int] = None
    command: str = ""

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "PortInfo":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass
class PortList(Observation):
    """Answer to ``ports.list``: `ports`, a list of PortInfo."""
    ports: List[Any] = field(default_factory=list)

    def _post(self) -> None:
        self.ports = [PortInfo.from_dict(p) if isinstance(p, dict) else p for p in self.ports]

    def __iter__(self):
        return iter(self.ports)


@dataclass
class PortWaitResult(Observation):
    """Answer to ``port.wait``: `ready` (falsy at the timeout, then
    `listening` says what listens instead)."""
    port: int = 0
    ready: bool = False
    timed_out: bool = False
    listening: List[Any] = field(default_factory=list)

    def _post(self) -> None:
        self.listening = [PortInfo.from_dict(p) if isinstance(p, dict) else p for p in self.listening]

    def __bool__(self) -> bool:
        return bool(self.ready)


@dataclass
class PortEvent(Event):
    """A ``port.open`` or ``port.close`` event (``pid`` and ``command`` on
    port.open only)."""
    port: int = 0
    address: str = ""
    session: str = ""
    pid: Optional[int] = None
    command: Optional[str] = None


#: event observation -> Event class (events())
EVENTS = {"port.open": PortEvent, "port.close": PortEvent}


def _as_result(action: str, obs: Dict[str, Any]) -> Observation:
    cls = RESULTS.get(action, Observation)
    return cls.from_dict(obs)


#: action -> result class
RESULTS = {"run": RunResult, "keys": Screen, "screen": Screen, "expect": ExpectResult,
           "read": ReadResult, "write": WriteResult, "edit": EditResult,
           "session.list": SessionList, "session.open": SessionOpened,
           "plugin.list": PluginList, "run_ipython": IPythonResult,
           "browse": BrowseResult, "browse_interactive": BrowseResult,
           "ports.list": PortList, "port.wait": PortWaitResult}


# --------------------------------------------------------------- /tty frames

@dataclass
class TtyFrame:
    """A frame of the live terminal channel (/tty, PROTOCOL.md §6): `type`
    is its one-letter type, `payload` its bytes."""
    type: str = ""
    payload: bytes = b""


@dataclass
class Resize(TtyFrame):
    """'Z': the terminal's size, first and on every resize."""
    cols: int = 0
    rows: int = 0


@dataclass
class Snapshot(TtyFrame):
    """'S': bytes that reproduce the screen on a blank terminal (`data`)."""

    @property
    def data(self) -> bytes:
        """The snapshot's bytes."""
        return self.payload


@dataclass
class Output(TtyFrame):
    """'O': the pty's bytes, in order (`data`)."""

    @property
    def data(self) -> bytes:
        """The output bytes."""
        return self.payload


@dataclass
class Title(TtyFrame):
    """'T': the window title (`text`)."""
    text: str = ""


@dataclass
class Exit(TtyFrame):
    """'X': the session's program exited with `exit_code`; termd closes next."""
    exit_code: Optional[int] = None


@dataclass
class ErrorFrame(TtyFrame):
    """'E': an error message from termd (`text`), e.g. input on a read-only connection."""
    text: str = ""


def parse_tty_frame(msg: Union[bytes, str]) -> TtyFrame:
    """A /tty frame (bytes as received) as its typed object; an unknown
    type comes back as a plain TtyFrame."""
    if isinstance(msg, str):
        msg = msg.encode("utf-8")
    if not msg:
        return TtyFrame("", b"")
    t, p = chr(msg[0]), bytes(msg[1:])
    if t == "Z":
        try:
            d = json.loads(p)
        except ValueError:
            d = {}
        return Resize(t, p, int(d.get("cols", 0)), int(d.get("rows", 0)))
    if t == "S":
        return Snapshot(t, p)
    if t == "O":
        return Output(t, p)
    if t == "T":
        return Title(t, p, p.decode("utf-8", "replace"))
    if t == "X":
        try:
            code = json.loads(p).get("exit_code")
        except (ValueError, AttributeError):
            code = None
        return Exit(t, p, code)
    if t == "E":
        return ErrorFrame(t, p, p.decode("utf-8", "replace"))
    return TtyFrame(t, p)
