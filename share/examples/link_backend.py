#!/usr/bin/python3
"""share/examples/link_backend.py — a small backend for termd's dial-out links
(PROTOCOL.md section 10): many termds dial in on /termd, each named by its
X-Termd-Sandbox header; API clients connect to /sandboxes/<id>/events and talk
termd's /events protocol to that sandbox as if they had dialed it themselves.
The starting point for a hosted setup (one proxy for many sandboxes, none of
them reachable from outside).

What it does, and what a real service adds:
- checks each termd's `Authorization: Bearer` against --link-token-file (a
  real service: one credential per sandbox, from its own store);
- routes: a client's action id is rewritten to "c<N>:<id>" on the way in and
  back on the way out, so many clients share one link; events that no action
  caused go to the clients that subscribed;
- keeps each client's actions in flight and sends them again, same ids, when
  the sandbox's link comes back: termd answers each once (no command runs
  twice);
- viewers: /sandboxes/<id>/tty/<session>[?mode=rw] asks the sandbox's termd,
  over its link, to dial back /relay/<n> (`link.tty`) and relays the /tty
  frames both ways, so od-attach and the web page work through the backend
  (`od-attach --url ws://BACKEND/sandboxes/<id> main`);
- previews: GET /sandboxes/<id>/proxy/<port>/<path> asks the sandbox's termd,
  over its link, to dial back /relay/<n> (`link.proxy`) carrying one TCP
  connection to that port, sends the request (HTTP/1.0, path and query kept)
  and answers with what the sandbox's program answered (gathered whole: an
  example, not a streaming proxy; GET only);
- GET /sandboxes lists the connected sandbox ids (JSON).
It holds no state on disk and checks no client credential (put it behind
your own authentication). Needs python3-websockets (10 or later).

    link_backend.py --listen 127.0.0.1:9000 [--link-token-file F]
    termd --listen none --connect ws://127.0.0.1:9000/termd --sandbox-id sb-1 ...
    client: ws://127.0.0.1:9000/sandboxes/sb-1/events
"""

import argparse
import asyncio
import http
import itertools
import json

import websockets

SUB = "termd.events.v1"
TTY = "termd.tty.v1"
PROXY = "termd.proxy.v1"


class Sandbox:
    def __init__(self, sid):
        self.id = sid
        self.link = None          # termd's connection, while up
        self.hello = None         # its latest hello
        self.clients = {}         # n -> Client
        self.inflight = {}        # rewritten id -> frame (sent again after a reconnect)
        self.up = asyncio.Event()


class Client:
    def __init__(self, n, ws):
        self.n = n
        self.ws = ws
        self.subscribed = False


class Backend:
    def __init__(self, link_token, public_url):
        self.link_token = link_token
        self.public_url = public_url.rstrip("/")
        self.sandboxes = {}
        self.counter = itertools.count(1)
        self.relays = {}          # n -> Future of termd's /tty connection

    def sandbox(self, sid):
        if sid not in self.sandboxes:
            self.sandboxes[sid] = Sandbox(sid)
        return self.sandboxes[sid]

    async def process_request(self, path, headers):
        if path == "/sandboxes":
            ids = sorted(s.id for s in self.sandboxes.values() if s.link)
            return (http.HTTPStatus.OK, [("Content-Type", "application/json")],
                    json.dumps(ids).encode())
        if path == "/termd":
            if self.link_token and headers.get("Authorization") != "Bearer " + self.link_token:
                return (http.HTTPStatus.UNAUTHORIZED, [], b"unauthorized\n")
            if not headers.get("X-Termd-Sandbox"):
                return (http.HTTPStatus.BAD_REQUEST, [], b"no X-Termd-Sandbox\n")
        if path.startswith("/sandboxes/") and "/proxy/" in path:
            sid, _, rest = path[len("/sandboxes/"):].partition("/proxy/")
            port, _, sub = rest.partition("/")
            if not port.isdigit():
                return (http.HTTPStatus.NOT_FOUND, [], b"no such port\n")
            return await self.serve_preview(sid, int(port), "/" + sub)
        return None

    async def serve_preview(self, sid, port, path):
        sb = self.sandboxes.get(sid)
        if not sb or not sb.link:
            return (http.HTTPStatus.BAD_GATEWAY, [], b"no such sandbox connected\n")
        n = str(next(self.counter))
        fut = asyncio.get_running_loop().create_future()
        self.relays[n] = fut
        try:
            await sb.link.send(json.dumps({"id": "p" + n, "action": "link.proxy", "args": {
                "port": port, "url": "%s/relay/%s" % (self.public_url, n)}}))
            conn, done = await asyncio.wait_for(fut, 15)
        except (asyncio.TimeoutError, websockets.ConnectionClosed):
            return (http.HTTPStatus.BAD_GATEWAY, [], b"the sandbox did not dial back\n")
        finally:
            self.relays.pop(n, None)
        data = b""
        try:
            await conn.send(("GET %s HTTP/1.0\r\nHost: localhost:%d\r\n\r\n" % (path, port)).encode())
            async for m in conn:
                data += m if isinstance(m, bytes) else m.encode()
        except websockets.ConnectionClosed:
            pass
        finally:
            done.set_result(None)
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("iso-8859-1").split("\r\n")
        try:
            status = http.HTTPStatus(int(lines[0].split()[1]))
        except (IndexError, ValueError):
            return (http.HTTPStatus.BAD_GATEWAY, [], b"the program answered no HTTP\n")
        hop = {"connection", "keep-alive", "transfer-encoding", "content-length"}
        hdrs = [tuple(x.strip() for x in ln.split(":", 1)) for ln in lines[1:] if ":" in ln]
        return (status, [h for h in hdrs if h[0].lower() not in hop], body)

    async def handler(self, ws, path):
        path, _, query = path.partition("?")
        if path == "/termd":
            await self.serve_link(ws)
        elif path.startswith("/relay/"):
            fut = self.relays.get(path[len("/relay/"):])
            if fut and not fut.done():
                done = asyncio.get_running_loop().create_future()
                fut.set_result((ws, done))
                await done          # the viewer's relay ends it
            else:
                await ws.close(1008, "no such relay")
        elif path.startswith("/sandboxes/") and "/tty/" in path:
            sid, _, session = path[len("/sandboxes/"):].partition("/tty/")
            await self.serve_viewer(ws, sid, session, "rw" if "mode=rw" in query else "ro")
        elif path.startswith("/sandboxes/") and path.endswith("/events"):
            await self.serve_client(ws, path[len("/sandboxes/"):-len("/events")])
        else:
            await ws.close(1008, "unknown path")

    async def serve_link(self, ws):
        sb = self.sandbox(ws.request_headers["X-Termd-Sandbox"])
        if sb.link:
            await sb.link.close(1000, "replaced by a newer link")
        sb.link = ws
        try:
            sb.hello = json.loads(await ws.recv())
            sb.up.set()
            for frame in list(sb.inflight.values()):   # same ids: answered once
                await ws.send(frame)
            if any(c.subscribed for c in sb.clients.values()):
                await ws.send(json.dumps({"action": "subscribe",
                                          "args": {"since": sb.hello["extras"]["seq"]}}))
            async for msg in ws:
                await self.from_termd(sb, msg)
        except websockets.ConnectionClosed:
            pass
        finally:
            if sb.link is ws:
                sb.link = None
                sb.up.clear()

    async def serve_viewer(self, ws, sid, session, mode):
        sb = self.sandboxes.get(sid)
        if not sb or not sb.link:
            await ws.close(1011, "no such sandbox connected")
            return
        n = str(next(self.counter))
        fut = asyncio.get_running_loop().create_future()
        self.relays[n] = fut
        try:
            await sb.link.send(json.dumps({"id": "r" + n, "action": "link.tty", "args": {
                "session": session, "url": "%s/relay/%s" % (self.public_url, n), "mode": mode}}))
            term, done = await asyncio.wait_for(fut, 15)
        except (asyncio.TimeoutError, websockets.ConnectionClosed):
            await ws.close(1011, "the sandbox did not dial back")
            return
        finally:
            self.relays.pop(n, None)

        async def pump(src, dst):
            try:
                async for m in src:
                    await dst.send(m)
            except websockets.ConnectionClosed:
                pass
            finally:
                await dst.close()
        try:
            await asyncio.gather(pump(term, ws), pump(ws, term))
        finally:
            done.set_result(None)

    async def from_termd(self, sb, msg):
        obs = json.loads(msg)
        cause = obs.get("cause")
        if isinstance(cause, str) and cause[:1] in ("r", "p") and cause[1:].isdigit():
            if obs["observation"] == "error":   # a viewer's or a preview's dial-back failed
                fut = self.relays.get(cause[1:])
                if fut and not fut.done():
                    fut.set_exception(asyncio.TimeoutError())
            return
        if isinstance(cause, str) and cause.startswith("c") and ":" in cause:
            n, orig = cause[1:].split(":", 1)
            sb.inflight.pop(cause, None)
            client = sb.clients.get(int(n)) if n.isdigit() else None
            if client:
                obs["cause"] = json.loads(orig)
                await client.ws.send(json.dumps(obs))
            return
        for c in list(sb.clients.values()):
            if c.subscribed or obs["observation"] == "error":
                try:
                    await c.ws.send(msg)
                except websockets.ConnectionClosed:
                    pass

    async def serve_client(self, ws, sid):
        sb = self.sandboxes.get(sid)
        if not sb or not sb.link:
            await ws.close(1011, "no such sandbox connected")
            return
        c = Client(next(self.counter), ws)
        sb.clients[c.n] = c
        try:
            await ws.send(json.dumps(sb.hello))
            async for msg in ws:
                try:
                    frame = json.loads(msg)
                except ValueError:
                    continue
                if not isinstance(frame, dict):
                    continue
                if frame.get("action") == "subscribe":
                    c.subscribed = True
                if "id" in frame:
                    frame["id"] = "c%d:%s" % (c.n, json.dumps(frame["id"]))
                data = json.dumps(frame)
                if "id" in frame:
                    sb.inflight[frame["id"]] = data
                await sb.up.wait()
                try:
                    await sb.link.send(data)
                except (websockets.ConnectionClosed, AttributeError):
                    pass   # sent again when the link is back
        except websockets.ConnectionClosed:
            pass
        finally:
            sb.clients.pop(c.n, None)
            for k in [k for k in sb.inflight if k.startswith("c%d:" % c.n)]:
                del sb.inflight[k]


async def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--listen", default="127.0.0.1:9000")
    ap.add_argument("--link-token-file")
    ap.add_argument("--public-url", help="where termds dial back for viewers (default "
                    "ws://LISTEN)")
    a = ap.parse_args()
    token = None
    if a.link_token_file:
        with open(a.link_token_file) as f:
            token = f.readline().strip()
    host, port = a.listen.rsplit(":", 1)
    b = Backend(token, a.public_url or "ws://" + a.listen)
    async with websockets.serve(b.handler, host, int(port), subprotocols=[SUB, TTY, PROXY],
                                process_request=b.process_request, max_size=None):
        print("listening on %s" % a.listen, flush=True)
        await asyncio.Future()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
