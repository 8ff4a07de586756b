"""A scripted fake termd for the package's unit tests: a websockets server
on loopback (or a unix socket) in a thread of its own; each connection runs
the test's `script(n, conn)` coroutine (n counts connections from 0)."""

import asyncio
import json
import os
import tempfile
import threading

import websockets


class Conn:
    """One accepted connection, as the script sees it."""

    def __init__(self, ws, server):
        self.ws = ws
        self.server = server
        hdrs = getattr(ws, "request_headers", None)
        if hdrs is None:
            hdrs = ws.request.headers
        self.headers = {k.lower(): v for k, v in hdrs.items()}
        self.path = getattr(ws, "path", None) or ws.request.path
        self.subprotocol = ws.subprotocol

    async def hello(self, seq=0, actions=("run", "ping")):
        await self.send({"seq": None, "cause": None, "observation": "hello",
                         "extras": {"version": "fake", "protocol": 1, "seq": seq, "sessions": ["main"],
                                    "actions": list(actions)}})

    async def send(self, obj):
        await self.ws.send(obj if isinstance(obj, (str, bytes)) else json.dumps(obj))

    async def recv(self):
        msg = await self.ws.recv()
        obj = json.loads(msg)
        self.server.received.append(obj)
        return obj

    async def answer(self, action, observation=None, content="", extras=None, seq=1):
        await self.send({"seq": seq, "ts": 1.0, "cause": action["id"],
                         "observation": observation or action["action"], "content": content,
                         "extras": extras or {}})

    def abort(self):
        self.ws.transport.abort()


class FakeServer:
    def __init__(self, script, unix=False):
        self.script = script
        self.received = []
        self.conns = []
        self.unix = unix
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.server = None
        self.sockdir = tempfile.mkdtemp(prefix="tdfake-", dir="/tmp")

    async def _handler(self, ws, *rest):
        c = Conn(ws, self)
        c.task = asyncio.current_task()
        n = len(self.conns)
        self.conns.append(c)
        try:
            await self.script(n, c)
        except (websockets.exceptions.ConnectionClosed, asyncio.CancelledError):
            pass

    async def _start(self):
        kw = {"subprotocols": ["termd.events.v1", "termd.tty.v1"]}
        if self.unix:
            path = os.path.join(self.sockdir, "s")
            self.server = await websockets.unix_serve(self._handler, path, **kw)
            self.url = "unix:" + path
        else:
            self.server = await websockets.serve(self._handler, "127.0.0.1", 0, **kw)
            port = list(self.server.sockets)[0].getsockname()[1]
            self.url = "ws://127.0.0.1:%d" % port

    def __enter__(self):
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        return self

    def stop(self):
        async def stop():
            self.server.close()
            for c in self.conns:
                c.ws.transport.abort()
                c.task.cancel()
            await self.server.wait_closed()
        if self.server is not None:
            asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
            self.server = None

    def __exit__(self, *exc):
        self.stop()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    def actions(self, name=None):
        return [a for a in self.received if name is None or a.get("action") == name]
