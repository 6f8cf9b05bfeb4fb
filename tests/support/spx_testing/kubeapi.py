"""A small synchronous client of the real API server for test bodies, and a watch recorder.

Plain HTTPS with the control plane's CA and admin token (urllib): tests read and write objects the
way ``kubectl`` does, and :class:`Recorder` keeps every event of a watch so a test can replay the
versions the server stored (``resourceVersion`` by ``resourceVersion``). Deliberately independent of
``spx``: nothing here imports the code under test.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

Obj = dict[str, Any]


class ApiProblem(Exception):
    """A non-2xx answer: ``code``, the Status ``reason`` and ``message`` (or the raw body)."""

    def __init__(self, code: int, reason: str, message: str, body: Any = None) -> None:
        super().__init__(f"HTTP {code} {reason}: {message}")
        self.code, self.reason, self.message, self.body = code, reason, message, body


def path(api_version: str, plural: str, namespace: str | None = None, name: str | None = None,
         sub: str | None = None) -> str:
    """``/api/v1/...`` for the core group, ``/apis/<group>/<version>/...`` else."""
    p = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    if namespace:
        p += f"/namespaces/{quote(namespace)}"
    p += f"/{plural}"
    if name:
        p += f"/{quote(name)}"
    if sub:
        p += f"/{sub}"
    return p


class Api:
    """Synchronous JSON client: ``request`` raises :class:`ApiProblem`; ``warnings`` collects ``Warning`` headers."""

    def __init__(self, url: str, token: str, ctx: ssl.SSLContext | None) -> None:
        self.url, self.token, self.ctx = url.rstrip("/"), token, ctx
        self.warnings: list[str] = []

    def request(self, method: str, p: str, body: Any = None, content_type: str = "application/json",
                params: Mapping[str, str] | None = None, timeout: float = 30) -> Any:
        url = self.url + p + ("?" + urllib.parse.urlencode(params) if params else "")
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self.ctx) as rsp:
                self.warnings += rsp.headers.get_all("Warning") or []
                raw = rsp.read().decode()
                ctype = rsp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as err:
            text = err.read().decode(errors="replace")
            self.warnings += err.headers.get_all("Warning") or []
            try:
                st = json.loads(text)
                raise ApiProblem(err.code, st.get("reason", ""), st.get("message", text), st) from None
            except json.JSONDecodeError:
                raise ApiProblem(err.code, "", text) from None
        return json.loads(raw) if "json" in ctype and raw else raw

    def get(self, api_version: str, plural: str, namespace: str | None, name: str) -> Obj | None:
        try:
            return self.request("GET", path(api_version, plural, namespace, name))  # type: ignore[no-any-return]
        except ApiProblem as p:
            if p.code == 404:
                return None
            raise

    def list(self, api_version: str, plural: str, namespace: str | None = None, selector: str | None = None) -> list[Obj]:
        params = {"labelSelector": selector} if selector else None
        return self.request("GET", path(api_version, plural, namespace), params=params)["items"]  # type: ignore[no-any-return]

    def create(self, api_version: str, plural: str, namespace: str | None, body: Obj,
               params: Mapping[str, str] | None = None) -> Obj:
        return self.request("POST", path(api_version, plural, namespace), body, params=params)  # type: ignore[no-any-return]

    def patch(self, api_version: str, plural: str, namespace: str | None, name: str, body: Any,
              content_type: str = "application/merge-patch+json", sub: str | None = None) -> Obj:
        return self.request("PATCH", path(api_version, plural, namespace, name, sub), body, content_type)  # type: ignore[no-any-return]

    def delete(self, api_version: str, plural: str, namespace: str | None, name: str,
               propagation: str = "Background") -> Obj:
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": propagation}
        return self.request("DELETE", path(api_version, plural, namespace, name), body)  # type: ignore[no-any-return]

    def apply(self, obj: Obj, manager: str = "spx-tests", strict: bool = True) -> Obj:
        """Server-side apply (``kubectl apply --server-side --force-conflicts``), strict field validation."""
        meta = obj["metadata"]
        plural = {"CustomResourceDefinition": "customresourcedefinitions", "Namespace": "namespaces",
                  "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
                  "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings"}[obj["kind"]]
        params = {"fieldManager": manager, "force": "true"}
        if strict:
            params["fieldValidation"] = "Strict"
        return self.request("PATCH", path(obj["apiVersion"], plural, meta.get("namespace"), meta["name"]),  # type: ignore[no-any-return]
                            json.dumps(obj).encode(), "application/apply-patch+yaml", params=params)


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.2,
             context: Callable[[], str] | None = None) -> Any:
    """Poll ``predicate`` until it returns something truthy (generous deadlines: the machine is shared)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}" + (f"\n{context()}" if context else ""))
        time.sleep(interval)


class Recorder:
    """Watches a collection from now on and keeps every event ``(monotonic time, type, object)``.

    A watch the server ends (timeout, ``ERROR`` 410) is resumed from the last ``resourceVersion``; if
    that is gone, the collection is re-listed (and ``relists`` counts it) — versions in between are
    then lost, which a test can check.
    """

    def __init__(self, api: Api, api_version: str, plural: str, namespace: str | None) -> None:
        self.api, self.p = api, path(api_version, plural, namespace)
        self.events: list[tuple[float, str, Obj]] = []
        self.relists = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._rv = api.request("GET", self.p)["metadata"]["resourceVersion"]
        self._thread = threading.Thread(target=self._run, name=f"recorder {self.p}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            params = {"watch": "true", "resourceVersion": self._rv, "allowWatchBookmarks": "true", "timeoutSeconds": "30"}
            url = self.api.url + self.p + "?" + urllib.parse.urlencode(params)
            req = urllib.request.Request(url, headers={"Authorization": f"Bearer {self.api.token}"})
            try:
                with urllib.request.urlopen(req, timeout=60, context=self.api.ctx) as rsp:
                    for line in rsp:
                        if self._stop.is_set():
                            return
                        ev = json.loads(line)
                        if ev["type"] == "ERROR":
                            self.relists += 1
                            self._rv = self.api.request("GET", self.p)["metadata"]["resourceVersion"]
                            break
                        if ev["type"] != "BOOKMARK":
                            with self._lock:
                                self.events.append((time.monotonic(), ev["type"], ev["object"]))
                        self._rv = ev["object"]["metadata"]["resourceVersion"]  # (after the event: has_seen)
            except (OSError, urllib.error.URLError, json.JSONDecodeError):
                time.sleep(0.5)

    def snapshot(self) -> list[tuple[float, str, Obj]]:
        with self._lock:
            return list(self.events)

    def has_seen(self, uid: str, resource_version: str) -> bool:
        """Whether the watch has delivered the version ``resource_version`` of the object ``uid`` (or a later event
        of the collection: the watch is in order)."""
        with self._lock:
            if any(o["metadata"].get("uid") == uid and o["metadata"].get("resourceVersion") == resource_version
                   for _, _, o in self.events):
                return True
        try:
            return int(self._rv) >= int(resource_version)  # (etcd revisions: what the kube-apiserver hands out)
        except ValueError:
            return False

    def versions(self, name: str) -> list[Obj]:
        """Every stored version of object ``name`` since the recorder started, oldest first."""
        return [o for _, t, o in self.snapshot() if o["metadata"]["name"] == name and t != "DELETED"]

    def created(self, prefix: str = "") -> list[str]:
        """Names of the objects created (``ADDED``) since the recorder started, in order."""
        return [o["metadata"]["name"] for _, t, o in self.snapshot() if t == "ADDED" and o["metadata"]["name"].startswith(prefix)]

    def stop(self) -> None:
        self._stop.set()
