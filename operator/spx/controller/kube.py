"""A small async Kubernetes API client over aiohttp, using the credentials kopf logged in with.

The operator's own writes (Jobs, ConfigMaps, Events, status) go through this client; kopf does the
watching. It speaks plain JSON (no model classes) and raises :class:`ApiError` with the HTTP code
and the API's ``Status`` message. Optimistic concurrency: status writes (:mod:`spx.controller.writes`)
are merge patches carrying the ``resourceVersion`` they were computed from; a newer object gives a
409 ``Conflict``, a status the server refuses a 422 — told apart, never retried alike.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp
import kopf

logger = logging.getLogger("spx.controller.kube")

CREDENTIALS_WAIT_S = 60.0


class ApiError(Exception):
    """A non-2xx answer of the API server."""

    def __init__(self, code: int, reason: str, message: str, method: str = "", path: str = "") -> None:
        self.code = code
        self.reason = reason
        self.message = message
        self.method = method
        self.path = path
        super().__init__(f"{method} {path}: HTTP {code} {reason}: {message}")

    @property
    def not_found(self) -> bool:
        return self.code == 404

    @property
    def exists(self) -> bool:
        return self.code == 409 and self.reason in ("AlreadyExists", "Object Already Exists", "Conflict", "")

    @property
    def conflict(self) -> bool:
        """Optimistic-concurrency failure: a stale ``resourceVersion`` (409 ``Conflict``)."""
        return self.code == 409 and self.reason == "Conflict"


def resource_path(api_version: str, plural: str, namespace: str | None, name: str | None = None,
                  subresource: str | None = None) -> str:
    """The API server path of a resource: ``/api/v1/…`` for the core group, ``/apis/<group>/<version>/…``
    else; the collection when ``name`` is None; ``namespace`` and ``name`` are URL-quoted."""
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    path = base
    if namespace:
        path += f"/namespaces/{quote(namespace)}"
    path += f"/{plural}"
    if name:
        path += f"/{quote(name)}"
    if subresource:
        path += f"/{subresource}"
    return path


class KubeClient:
    """Async client bound to one ``kopf.ConnectionInfo`` (renewed through ``relogin`` on HTTP 401).

    ``max_connections`` bounds the keep-alive pool of ordinary requests (log streams have their own
    pool): the reactor sizes it to its workers plus a few for Events, re-lists and the Lease, so that
    ``SPX_RECONCILE_WORKERS`` above the old fixed 64 is not silently capped by the pool.
    """

    def __init__(self, request_timeout_s: float = 60.0, relogin: Callable[[], Awaitable[kopf.ConnectionInfo | None]] | None = None,
                 max_connections: int = 64) -> None:
        self._max_connections = max_connections
        self._info: kopf.ConnectionInfo | None = None
        self._ready = asyncio.Event()
        self._session: aiohttp.ClientSession | None = None
        self._timeout = aiohttp.ClientTimeout(total=request_timeout_s)
        self._relogin = relogin
        self._streams: aiohttp.ClientSession | None = None

    def set_credentials(self, info: kopf.ConnectionInfo) -> None:
        old = self._session
        self._info = info
        self._session = None
        if old is not None and not old.closed:
            asyncio.get_running_loop().create_task(old.close())
        self._ready.set()

    @property
    def server(self) -> str | None:
        return self._info.server if self._info else None

    async def _get_session(self) -> aiohttp.ClientSession:
        if self._info is None:
            await asyncio.wait_for(self._ready.wait(), CREDENTIALS_WAIT_S)
        assert self._info is not None
        if self._session is None or self._session.closed:
            info = self._info
            ssl_ctx: ssl.SSLContext | bool = False
            if info.server.startswith("https"):
                ssl_ctx = info.as_ssl_context()
            connector = aiohttp.TCPConnector(ssl=ssl_ctx, limit=self._max_connections)
            self._session = aiohttp.ClientSession(
                base_url=None,
                connector=connector,
                headers={**info.as_http_headers(), "User-Agent": "spx-operator"},
                timeout=self._timeout,
                trust_env=info.trust_env,
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
        if self._streams is not None and not self._streams.closed:
            await self._streams.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        text: bool = False,
        _retried: bool = False,
    ) -> Any:
        """``method`` on ``path`` of the API server: the JSON reply (the text with ``text=True``; None on 204).

        Raises :class:`ApiError` on an HTTP status >= 400 (after one re-login on 401) and
        :class:`TimeoutError` when no credentials arrive within ``CREDENTIALS_WAIT_S`` or the request
        outlasts ``request_timeout_s``.
        """
        session = await self._get_session()
        assert self._info is not None
        url = self._info.server.rstrip("/") + path
        if params:
            url += "?" + urlencode(params)
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type} if body is not None else {}
        async with session.request(method, url, data=data, headers=headers) as rsp:
            if rsp.status == 401 and self._relogin is not None and not _retried:
                info = await self._relogin()
                if info is not None:
                    self.set_credentials(info)
                    return await self.request(method, path, body=body, params=params, content_type=content_type,
                                              text=text, _retried=True)
            if rsp.status >= 400:
                raw = await rsp.text()
                reason, message = "", raw[:500]
                try:
                    status = json.loads(raw)
                    reason = str(status.get("reason") or "")
                    message = str(status.get("message") or message)
                except (json.JSONDecodeError, AttributeError):
                    pass
                raise ApiError(rsp.status, reason, message, method, path)
            if text:
                return await rsp.text(errors="replace")
            if rsp.status == 204:
                return None
            return await rsp.json(content_type=None)

    # Conveniences ----------------------------------------------------------------------------------

    async def get(self, path: str, **kw: Any) -> Any:
        return await self.request("GET", path, **kw)

    async def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self.request("POST", path, body=body)  # type: ignore[no-any-return]

    async def merge_patch(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self.request("PATCH", path, body=body, content_type="application/merge-patch+json")  # type: ignore[no-any-return]

    async def json_patch(self, path: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
        return await self.request("PATCH", path, body=ops, content_type="application/json-patch+json")  # type: ignore[no-any-return]

    async def delete(self, path: str, propagation: str = "Background") -> Any:
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": propagation}
        return await self.request("DELETE", path, body=body)

    async def stream(self, path: str, params: Mapping[str, str] | None = None) -> AsyncIterator[bytes]:
        """GET ``path`` and yield the body's chunks as they arrive (a followed pod log). No overall
        timeout (the stream lasts as long as the container runs); its own connection pool, so long
        streams never hold the request pool's connections.

        Raises :class:`ApiError` on an HTTP status >= 400 (no re-login: the caller retries).
        """
        if self._info is None:
            await asyncio.wait_for(self._ready.wait(), CREDENTIALS_WAIT_S)
        info = self._info
        assert info is not None
        if self._streams is None or self._streams.closed:
            ssl_ctx: ssl.SSLContext | bool = info.as_ssl_context() if info.server.startswith("https") else False
            self._streams = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=ssl_ctx, limit=0),
                headers={**info.as_http_headers(), "User-Agent": "spx-operator"},
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._timeout.total), trust_env=info.trust_env)
        url = info.server.rstrip("/") + path + ("?" + urlencode(params) if params else "")
        async with self._streams.get(url) as rsp:
            if rsp.status >= 400:
                raw = await rsp.text()
                raise ApiError(rsp.status, "", raw[:500], "GET", path)
            async for chunk in rsp.content.iter_any():
                yield chunk

    async def pod_log(self, namespace: str, name: str, container: str, limit_bytes: int) -> str:
        """The first ``limit_bytes`` bytes of ``container``'s log in pod ``namespace/name``."""
        path = resource_path("v1", "pods", namespace, name, "log")
        return await self.request(  # type: ignore[no-any-return]
            "GET", path, params={"container": container, "limitBytes": str(limit_bytes)}, text=True
        )
