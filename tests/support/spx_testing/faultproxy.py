"""A fault-injecting HTTP proxy between the operator and the real API server.

Stand-in for faults the real server does not make on demand: a watch answered ``410 Gone`` (the
server does it when a resourceVersion has been compacted away), 5xx answers, storms of ``409
Conflict`` / ``422`` on writes, stalled requests, and an unreachable server. Everything else is
forwarded as is to the real API server (HTTPS, its CA), streaming watches chunk by chunk; the
operator logs in with a kubeconfig whose server is this proxy's ``http://127.0.0.1:PORT`` and the
real admin token, which the proxy passes through.

Rules (:class:`Rule`) match on method, a path regex and whether the request is a watch; each fires
``times`` times (``-1``: until removed) and is counted in ``hits``. A rule with ``body`` matches
only requests whose body matches that regex. Every request is counted in ``requests`` and recorded
in ``log`` as ``(monotonic time, method, path?query, User-Agent)``. :meth:`FaultProxy.down` closes
the listening socket and every open connection (connection refused from then on); :meth:`up` opens
the same port again. Nothing here imports ``spx``.
"""

from __future__ import annotations

import asyncio
import json
import re
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import aiohttp.web

HOP_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "keep-alive", "accept-encoding"}


@dataclass
class Rule:
    """``action``: ``status`` (answer ``code``/``reason``), ``gone`` (a watch: one ERROR 410 event, then
    the end of the stream, as the server sends it), ``stall`` (hold the request ``stall_s`` seconds,
    then forward it), ``hold`` (hold the request until :meth:`release`, then forward it: a list that
    answers with what the server holds *after* the test changed it), ``reset`` (drop the connection
    without an answer)."""

    action: str
    path: str = ".*"
    method: str | None = None
    watch: bool | None = None
    code: int = 500
    reason: str = "InternalError"
    stall_s: float = 0.0
    times: int = 1
    hits: int = 0
    body: str | None = None
    released: asyncio.Event = field(default_factory=asyncio.Event)

    def release(self) -> None:
        """Forward the requests a ``hold`` rule holds (call it on the proxy's event loop)."""
        self.released.set()

    def matches(self, request: aiohttp.web.Request, body: bytes = b"") -> bool:
        if self.times == 0:
            return False
        if self.body is not None and re.search(self.body, body.decode(errors="replace")) is None:
            return False
        if self.method and request.method != self.method:
            return False
        if self.watch is not None and (request.query.get("watch") in ("true", "1")) != self.watch:
            return False
        return re.search(self.path, request.path) is not None


@dataclass
class FaultProxy:
    upstream: str
    ca: Path
    rules: list[Rule] = field(default_factory=list)
    port: int = 0
    requests: int = 0
    log: list[tuple[float, str, str, str]] = field(default_factory=list)
    _runner: aiohttp.web.AppRunner | None = None
    _site: aiohttp.web.TCPSite | None = None
    _session: aiohttp.ClientSession | None = None
    _open: set[aiohttp.web.StreamResponse] = field(default_factory=set)
    _open_paths: dict[int, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        ctx = ssl.create_default_context(cafile=str(self.ca))
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx),
                                              timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
                                              auto_decompress=False)
        app = aiohttp.web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = aiohttp.web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        await self.up()

    async def up(self) -> None:
        assert self._runner is not None
        self._site = aiohttp.web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True)
        await self._site.start()
        self.port = self._site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def cut(self) -> None:
        """End every forwarded response in flight (watches included), as a load balancer's idle cut would."""
        for rsp in list(self._open):
            if rsp.task is not None:
                rsp.task.cancel()

    async def cut_matching(self, path: str) -> int:
        """End the forwarded responses in flight whose request path matches the regex ``path`` (say, the
        Job watch only); the number ended."""
        cut = [rsp for rsp in list(self._open) if re.search(path, self._open_paths.get(id(rsp), ""))]
        for rsp in cut:
            if rsp.task is not None:
                rsp.task.cancel()
        return len(cut)

    async def down(self) -> None:
        """Stop listening and cut every open connection: the server is unreachable until :meth:`up`."""
        if self._site is not None:
            await self._site.stop()
            self._site = None
        await self.cut()
        if self._runner is not None and self._runner.server is not None:
            for proto in list(self._runner.server.connections):
                proto.force_close()

    async def stop(self) -> None:
        await self.down()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def add(self, rule: Rule) -> Rule:
        self.rules.append(rule)
        return rule

    async def _handle(self, request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
        self.requests += 1
        self.log.append((time.monotonic(), request.method, request.path_qs, request.headers.get("User-Agent", "")))
        payload = await request.read() if request.can_read_body else b""  # read once: forwarded below
        rule = next((r for r in self.rules if r.matches(request, payload)), None)
        if rule is not None:
            rule.hits += 1
            if rule.times > 0:
                rule.times -= 1
            if rule.action == "status":
                body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                        "message": f"injected by the test proxy: {rule.reason}", "reason": rule.reason, "code": rule.code}
                return aiohttp.web.json_response(body, status=rule.code)
            if rule.action == "gone":
                rsp = aiohttp.web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
                await rsp.prepare(request)
                event = {"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                                     "message": "too old resource version: 1 (2)", "reason": "Expired", "code": 410}}
                await rsp.write(json.dumps(event).encode() + b"\n")
                await rsp.write_eof()
                return rsp
            if rule.action == "reset":
                assert request.transport is not None
                request.transport.close()
                raise asyncio.CancelledError
            if rule.action == "stall":
                await asyncio.sleep(rule.stall_s)
            if rule.action == "hold":
                await rule.released.wait()
        return await self._forward(request, payload)

    async def _forward(self, request: aiohttp.web.Request, data: bytes) -> aiohttp.web.StreamResponse:
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        async with self._session.request(request.method, self.upstream + request.path_qs, headers=headers,
                                         data=data or None, allow_redirects=False) as up:
            rsp = aiohttp.web.StreamResponse(status=up.status, reason=up.reason)
            for k, v in up.headers.items():
                if k.lower() not in HOP_HEADERS and k.lower() != "content-encoding":
                    rsp.headers.add(k, v)
            if up.headers.get("Content-Encoding"):
                rsp.headers["Content-Encoding"] = up.headers["Content-Encoding"]
            await rsp.prepare(request)
            self._open.add(rsp)
            self._open_paths[id(rsp)] = request.path
            try:
                async for chunk in up.content.iter_any():
                    await rsp.write(chunk)
                await rsp.write_eof()
            finally:
                self._open.discard(rsp)
                self._open_paths.pop(id(rsp), None)
            return rsp
