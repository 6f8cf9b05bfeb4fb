"""An emulated API server (kmock's ``KubernetesEmulator``), kept only for tests not yet moved to the real one.

The operator's scenario tests run against a real control plane (``controlplane.py``, ``cluster.py``,
``nodeagent.py``, ``faultproxy.py``). What still imports this module: tests/gating/test_gate_cluster.py,
tests/observability/test_obs_prometheus.py and benchmarks/operator_scale.py (500 experiments; a real
API server on 2 shared cores would measure the machine, not the operator). It accepts what a real
server refuses (patternProperties, unguarded CEL, float timeoutSeconds, …; see docs/operator.md
"Testing against a real control plane"): do not add new tests on it.

kmock 0.8 (pinned) serves objects over HTTP with discovery, list, watch, create, merge/JSON patch
and finalizer-aware delete. This subclass takes over the object endpoints to add what the operator
relies on (see /work/shared/NOTES.md):

- ``metadata.uid``, ``resourceVersion`` (one global counter), ``generation`` (bumped only when
  something other than ``metadata``/``status`` changes), ``creationTimestamp``; ``generateName``;
- the status subresource split: ``PATCH …/status`` changes only ``.status``, a main-resource
  write never changes ``.status`` (for resources declared with a status subresource);
- label selectors (``=``, ``==``, ``!=``, ``in``, ``notin``, exists, ``!key``) and
  ``metadata.name``/``metadata.namespace`` field selectors on list and watch;
- 409 ``AlreadyExists`` on create, 409 ``Conflict`` on a stale ``resourceVersion`` in a merge patch
  or replace, 422 on a failed JSON-patch ``test``;
- owner-reference garbage collection on delete (dependents of a deleted object are deleted,
  recursively; ``propagationPolicy: Orphan`` orphans them instead);
- pod logs (``GET …/pods/NAME/log`` with ``container``, ``tailLines``, ``limitBytes``), answered by
  a pluggable reader (the kubelet driver in ``kubelet.py``);
- watch resumption from a ``resourceVersion`` (410 Gone when too old), ``timeoutSeconds``,
  periodic ``BOOKMARK`` events when ``allowWatchBookmarks=true``, ``ADDED``/``DELETED`` when an
  object starts/stops matching a selector;
- custom resources validated against the CRD's OpenAPI schema (422 ``Invalid``) and unknown
  fields pruned, as the API server does (kopf #574: undeclared status fields silently vanish).
  CEL rules (``x-kubernetes-validations``) are not evaluated.

Also here: :class:`Cluster`, which runs the emulator (and the kubelet driver) on an event loop in a
background thread, gives tests a small synchronous HTTP client, and starts/stops the real operator
as a subprocess (``python -m kopf run -m spx.controller …``).
"""

from __future__ import annotations

import asyncio
import collections
import copy
import json
import os
import random
import re
import signal
import socket
import string
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp.web
import attrs
import jsonpatch
import kmock
from kmock._internal.parsing import parse_path

from spx.controller.conditions import now_rfc3339
from spx.controller.kube import resource_path

Obj = dict[str, Any]
LogReader = Callable[[str, str, Mapping[str, str]], "str | None"]

REPO = Path(__file__).resolve().parents[2]


def _status(code: int, reason: str, message: str, details: Mapping[str, Any] | None = None) -> aiohttp.web.Response:
    return aiohttp.web.json_response({
        "apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
        "code": code, "reason": reason, "message": message, "details": dict(details or {}),
    }, status=code)


class ApiProblem(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


# Selectors ------------------------------------------------------------------------------------------

_SET_RE = re.compile(r"^\s*(!?)([A-Za-z0-9./_-]+)\s*(?:(in|notin)\s*\(([^)]*)\))?\s*$")


def _split_selector(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return parts


def label_selector(text: str | None) -> Callable[[Mapping[str, str]], bool]:
    """Compile a Kubernetes label selector into a predicate over a labels dict."""
    if not text:
        return lambda labels: True
    tests: list[Callable[[Mapping[str, str]], bool]] = []
    for part in _split_selector(text):
        part = part.strip()
        if "!=" in part:
            k, v = (s.strip() for s in part.split("!=", 1))
            tests.append(lambda lb, k=k, v=v: lb.get(k) != v)
        elif "==" in part or ("=" in part and " in " not in part):
            k, v = (s.strip() for s in re.split("==|=", part, maxsplit=1))
            tests.append(lambda lb, k=k, v=v: lb.get(k) == v)
        else:
            m = _SET_RE.match(part)
            if not m:
                raise ApiProblem(400, "BadRequest", f"unable to parse requirement: {part!r}")
            neg, key, op, values = m.groups()
            vals = {v.strip() for v in (values or "").split(",") if v.strip()}
            if op == "in":
                tests.append(lambda lb, k=key, vs=vals: lb.get(k) in vs)
            elif op == "notin":
                tests.append(lambda lb, k=key, vs=vals: lb.get(k) not in vs)
            elif neg:
                tests.append(lambda lb, k=key: k not in lb)
            else:
                tests.append(lambda lb, k=key: k in lb)
    return lambda labels: all(t(labels) for t in tests)


def field_selector(text: str | None) -> Callable[[Mapping[str, Any]], bool]:
    if not text:
        return lambda obj: True
    tests = []
    for part in text.split(","):
        neg = "!=" in part
        k, v = (s.strip() for s in re.split("!=|==|=", part, maxsplit=1))
        path = k.split(".")

        def get(obj: Mapping[str, Any], path: list[str] = path) -> Any:
            cur: Any = obj
            for p in path:
                cur = cur.get(p) if isinstance(cur, Mapping) else None
            return "" if cur is None else str(cur)

        tests.append(lambda o, get=get, v=v, neg=neg: (get(o) != v) if neg else (get(o) == v))
    return lambda obj: all(t(obj) for t in tests)


def clone(obj: Any) -> Any:
    """A deep copy of a JSON document (several times faster than copy.deepcopy)."""
    return json.loads(json.dumps(obj))


class PatchTestFailed(Exception):
    pass


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def json_patch(doc: Obj, ops: list[Mapping[str, Any]]) -> Obj:
    """RFC 6902 JSON patch, copy-on-write: only the containers along each path are copied.

    Raises:
        PatchTestFailed: a ``test`` op did not match.
        ValueError: a malformed op or a missing path.
    """
    for op in ops:
        kind, path = op.get("op"), op.get("path")
        if not isinstance(path, str) or (path and not path.startswith("/")):
            raise ValueError(f"invalid path {path!r}")
        tokens = [_unescape(t) for t in path.split("/")[1:]] if path else []
        if kind == "test":
            cur: Any = doc
            for t in tokens:
                cur = cur[int(t)] if isinstance(cur, list) else cur[t]
            if cur != op.get("value"):
                raise PatchTestFailed(f"test failed at {path}: {cur!r} != {op.get('value')!r}")
            continue
        if kind in ("move", "copy"):
            return jsonpatch.apply_patch(clone(doc), list(ops), in_place=True)  # rare: the general path
        if kind not in ("add", "replace", "remove") or not tokens:
            raise ValueError(f"unsupported op {op!r}")
        root = dict(doc)
        cur = root
        for t in tokens[:-1]:
            child = cur[int(t)] if isinstance(cur, list) else cur[t]
            child = list(child) if isinstance(child, list) else dict(child)
            if isinstance(cur, list):
                cur[int(t)] = child
            else:
                cur[t] = child
            cur = child
        last = tokens[-1]
        if isinstance(cur, list):
            idx = len(cur) if last == "-" else int(last)
            if kind == "add":
                cur.insert(idx, op.get("value"))
            elif kind == "replace":
                cur[idx] = op.get("value")
            else:
                del cur[idx]
        else:
            if kind in ("replace", "remove") and last not in cur:
                raise ValueError(f"path {path!r} does not exist")
            if kind == "remove":
                del cur[last]
            else:
                cur[last] = op.get("value")
        doc = root
    return doc


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, Mapping):
        return patch
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# CRD schema validation and pruning -------------------------------------------------------------------


def _to_jsonschema(node: Any) -> Any:
    if isinstance(node, list):
        return [_to_jsonschema(n) for n in node]
    if not isinstance(node, Mapping):
        return node
    out = {k: _to_jsonschema(v) for k, v in node.items() if not k.startswith("x-kubernetes")}
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    out.pop("nullable", None)
    return out


def prune(value: Any, schema: Mapping[str, Any]) -> Any:
    """Drop fields the structural schema does not declare (unless it preserves unknown fields)."""
    if isinstance(value, dict) and schema.get("type") == "object":
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            props = schema.get("properties")
            if not props:
                return value
        props = schema.get("properties") or {}
        addl = schema.get("additionalProperties")
        out = {}
        for k, v in value.items():
            if k in props:
                out[k] = prune(v, props[k])
            elif isinstance(addl, Mapping):
                out[k] = prune(v, addl)
            elif schema.get("x-kubernetes-preserve-unknown-fields"):
                out[k] = v
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [prune(v, schema["items"]) for v in value]
    return value


# The emulator ----------------------------------------------------------------------------------------


@attrs.define(frozen=True)
class Req:
    """What the object endpoints need of a request."""

    method: str
    params: Mapping[str, str]
    headers: Mapping[str, str]
    data: Any
    group: str
    version: str
    plural: str
    namespace: str | None
    name: str | None
    subresource: str | None
    raw: Any


@attrs.define(frozen=True)
class Kind:
    kind: str
    namespaced: bool = True
    subresources: frozenset[str] = frozenset()


BUILTIN_KINDS: dict[tuple[str, str, str], Kind] = {
    ("", "v1", "pods"): Kind("Pod", True, frozenset({"status", "log"})),
    ("", "v1", "configmaps"): Kind("ConfigMap"),
    ("", "v1", "events"): Kind("Event"),
    ("", "v1", "namespaces"): Kind("Namespace", False, frozenset({"status"})),
    ("batch", "v1", "jobs"): Kind("Job", True, frozenset({"status"})),
    ("events.k8s.io", "v1", "events"): Kind("Event"),
    ("apiextensions.k8s.io", "v1", "customresourcedefinitions"): Kind("CustomResourceDefinition", False, frozenset({"status"})),
}


@attrs.define(kw_only=True)
class Emulator(kmock.KubernetesEmulator):
    """kmock's emulator with the API-server behaviour listed in the module docstring."""

    bookmark_interval: float = 20.0
    #: Validate custom resources against their CRD schema (pruning happens either way).
    validate_schemas: bool = True
    #: Serve object endpoints without kmock's per-request parsing and recording (faster).
    fast_path: bool = True
    history_limit: int = 50_000
    log_reader: LogReader | None = None
    create_times: dict[tuple[str, str | None, str], float] = attrs.field(factory=dict)
    request_count: int = 0
    #: Record every object-endpoint request in :attr:`api_requests` (the fast path bypasses kmock's
    #: own request list, ``_requests``, which then holds only discovery requests).
    record_requests: bool = True
    #: ``(method, path with query, User-Agent)`` of each object-endpoint request served, in order.
    api_requests: list[tuple[str, str, str]] = attrs.field(factory=list, init=False)
    #: Refuse creates: ``(plural, name regex) -> (code, reason, message)`` (admission, quota, PSA …).
    reject_creates: dict[tuple[str, str], tuple[int, str, str]] = attrs.field(factory=dict)
    _rv: int = attrs.field(default=0, init=False)
    _kinds: dict[tuple[str, str, str], Kind] = attrs.field(factory=dict, init=False)
    _schemas: dict[tuple[str, str, str], Any] = attrs.field(factory=dict, init=False)
    _validators: dict[tuple[str, str, str], Any] = attrs.field(factory=dict, init=False)
    _index: dict[tuple[str, str, str], dict[tuple[str | None, str], Obj]] = attrs.field(factory=dict, init=False)
    _res: dict[tuple[str, str, str], kmock.resource] = attrs.field(factory=dict, init=False)
    _json: dict[int, tuple[Obj, bytes]] = attrs.field(factory=dict, init=False)
    _history: dict[tuple[str, str, str], collections.deque[tuple[int, str, Obj, Obj | None]]] = attrs.field(factory=dict, init=False)
    _trimmed: dict[tuple[str, str, str], int] = attrs.field(factory=dict, init=False)
    _subs: dict[tuple[str, str, str], set[asyncio.Queue[tuple[int, str, Obj, Obj | None]]]] = attrs.field(factory=dict, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        for key, kind in BUILTIN_KINDS.items():
            self.declare(*key, kind)
        for ns in ("default", "kube-system"):
            self.put_object("", "v1", "namespaces", None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})

    # Setup -----------------------------------------------------------------------------------------

    def declare(self, group: str, version: str, plural: str, kind: Kind) -> None:
        self._kinds[(group, version, plural)] = kind
        self.resources[kmock.resource(group, version, plural)] = kmock.ResourceInfo(
            kind=kind.kind, namespaced=kind.namespaced, singular=kind.kind.lower(),
            verbs={"get", "list", "watch", "create", "update", "patch", "delete"},
            subresources=set(kind.subresources),
        )

    def install_crd(self, crd: Mapping[str, Any]) -> None:
        """Serve a CustomResourceDefinition (its versions, status subresource and schema)."""
        spec = crd["spec"]
        for version in spec["versions"]:
            subs = frozenset(version.get("subresources") or {})
            key = (spec["group"], version["name"], spec["names"]["plural"])
            self.declare(*key, Kind(spec["names"]["kind"], spec["scope"] == "Namespaced", subs))
            schema = (version.get("schema") or {}).get("openAPIV3Schema")
            if schema:
                self._schemas[key] = schema
            info = self.resources[kmock.resource(*key)]
            info.shortnames = set(spec["names"].get("shortNames") or [])
            info.categories = set(spec["names"].get("categories") or [])
        self.put_object("apiextensions.k8s.io", "v1", "customresourcedefinitions", None, copy.deepcopy(dict(crd)))

    def put_object(self, group: str, version: str, plural: str, namespace: str | None, obj: Obj) -> Obj:
        """Create an object directly (test setup), with API-server metadata."""
        rkey = (group, version, plural)
        self._create(rkey, namespace, clone(obj))
        return self.get_object(group, version, plural, namespace, obj["metadata"]["name"]) or {}

    # Object access ---------------------------------------------------------------------------------

    def _okey(self, rkey: tuple[str, str, str], namespace: str | None, name: str) -> tuple[kmock.resource, str | None, str]:
        res = self._res.get(rkey)
        if res is None:
            res = self._res[rkey] = kmock.resource(*rkey)
        return (res, namespace, name)

    def _raw(self, rkey: tuple[str, str, str], namespace: str | None, name: str) -> Obj | None:
        """The stored object itself (never mutate it: stored versions are immutable)."""
        return self._index.get(rkey, {}).get((namespace, name))

    def get_object(self, group: str, version: str, plural: str, namespace: str | None, name: str) -> Obj | None:
        obj = self._raw((group, version, plural), namespace, name)
        return None if obj is None else clone(obj)

    def list_objects(self, group: str, version: str, plural: str, namespace: str | None = None) -> list[Obj]:
        return [clone(obj) for ns, _, obj in self._iter((group, version, plural)) if namespace is None or ns == namespace]

    def versions(self, group: str, version: str, plural: str, namespace: str | None, name: str) -> list[tuple[str, Obj]]:
        """Every (event type, object) this object went through, oldest first (from the watch history)."""
        out = []
        for _, type_, obj, _ in self._history.get((group, version, plural), ()):
            meta = obj.get("metadata", {})
            if meta.get("name") == name and meta.get("namespace") == namespace:
                out.append((type_, copy.deepcopy(obj)))
        return out

    def _iter(self, rkey: tuple[str, str, str]) -> Iterator[tuple[str | None, str, Obj]]:
        for (ns, name), obj in list(self._index.get(rkey, {}).items()):
            yield ns, name, obj

    def _store(self, rkey: tuple[str, str, str], namespace: str | None, name: str, obj: Obj | None) -> None:
        """Store a new version (or a deletion); kmock's ``objects`` view mirrors the last two."""
        index = self._index.setdefault(rkey, {})
        if obj is None:
            index.pop((namespace, name), None)
        else:
            index[(namespace, name)] = obj
        key = self._okey(rkey, namespace, name)
        if obj is None:
            if key in self._objects:
                self._objects[key].delete()
                del self._objects[key].history[:-1]
            return
        if key not in self._objects:
            self._objects[key] = obj
        else:
            self._objects[key].history.append(obj)
            del self._objects[key].history[:-2]

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _emit(self, rkey: tuple[str, str, str], type_: str, obj: Obj, old: Obj | None = None) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        hist = self._history.setdefault(rkey, collections.deque())
        hist.append((rv, type_, obj, old))
        while len(hist) > self.history_limit:
            dropped = hist.popleft()
            self._trimmed[rkey] = dropped[0]
        for q in list(self._subs.get(rkey, ())):
            q.put_nowait((rv, type_, obj, old))

    def _event_bytes(self, type_: str, obj: Obj) -> bytes:
        """One watch-event line; each stored version is serialised once for all watchers."""
        cached = self._json.get(id(obj))
        if cached is None or cached[0] is not obj:
            if len(self._json) > 20_000:
                self._json.clear()
            cached = (obj, json.dumps(obj).encode())
            self._json[id(obj)] = cached
        return b'{"type": "' + type_.encode() + b'", "object": ' + cached[1] + b"}\n"

    # Request routing ---------------------------------------------------------------------------------

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        """Object endpoints take a short path (no kmock request record: it costs ~0.25 ms a request;
        :attr:`api_requests` records them instead); everything else (discovery, user-defined kmock reactions) goes through kmock."""
        path = raw_request.path
        if path.startswith(("/api/", "/apis/")) and self.fast_path:
            k8s = parse_path(path)
            if k8s.plural and k8s.group is not None:
                body = await raw_request.read()
                try:
                    data = json.loads(body) if body else None
                except ValueError:
                    data = None
                req = Req(method=raw_request.method.upper(), params=dict(raw_request.query), headers=raw_request.headers,
                          data=data, group=k8s.group or "", version=k8s.version or "", plural=k8s.plural,
                          namespace=k8s.namespace, name=k8s.name, subresource=k8s.subresource, raw=raw_request)
                try:
                    return await self._dispatch(req)
                except Exception as err:  # a bug here must reach the client as a 500, like kmock does
                    return _status(500, type(err).__name__, repr(err))
        return await super().__call__(raw_request)

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        res = request.resource
        if res is None or not res.plural:
            return await kmock.RawHandler._handle(self, request)
        req = Req(method=str(request.method.value if hasattr(request.method, "value") else request.method).upper(),
                  params=request.params, headers=request.headers, data=request.data, group=res.group or "",
                  version=res.version or "", plural=res.plural, namespace=request.namespace, name=request.name,
                  subresource=request.subresource, raw=request._raw_request)
        return await self._dispatch(req)

    async def _dispatch(self, request: Req) -> aiohttp.web.StreamResponse:
        self.request_count += 1
        if self.record_requests:
            path = request.raw.path_qs if request.raw is not None else ""
            self.api_requests.append((request.method, path, request.headers.get("User-Agent", "")))
        rkey = (request.group, request.version, request.plural)
        kind = self._kinds.get(rkey)
        if kind is None:
            return _status(404, "NotFound", f"the server could not find the requested resource ({'/'.join(rkey)})")
        method = request.method
        params = request.params
        try:
            if method == "GET" and params.get("watch") in ("true", "1"):
                return await self._watch(request, rkey, kind)
            if method == "GET" and request.name is None:
                return aiohttp.web.json_response(self._list(rkey, kind, request.namespace, params))
            if method == "GET" and request.subresource == "log":
                return self._log(rkey, request.namespace, request.name or "", params)
            if method == "GET":
                return aiohttp.web.json_response(self._fetch(rkey, request.namespace, request.name or ""))
            if method == "POST" and request.name is None:
                body = request.data if isinstance(request.data, dict) else None
                if body is None:
                    raise ApiProblem(400, "BadRequest", "the body must be a JSON object")
                obj = self._create(rkey, request.namespace, body)
                return aiohttp.web.json_response(obj, status=201)
            if method == "PATCH" and request.name:
                ctype = request.headers.get("Content-Type", "").split(";")[0].strip()
                obj = self._patch(rkey, kind, request.namespace, request.name, request.subresource, ctype, request.data)
                return aiohttp.web.json_response(obj)
            if method == "PUT" and request.name:
                obj = self._replace(rkey, kind, request.namespace, request.name, request.subresource, request.data)
                return aiohttp.web.json_response(obj)
            if method == "DELETE" and request.name:
                body = request.data if isinstance(request.data, dict) else {}
                policy = body.get("propagationPolicy") or params.get("propagationPolicy") or "Background"
                obj = self._delete(rkey, request.namespace, request.name, policy)
                return aiohttp.web.json_response(obj)
            raise ApiProblem(405, "MethodNotAllowed", f"{method} is not supported here")
        except ApiProblem as p:
            return _status(p.code, p.reason, p.message)

    # Verbs ---------------------------------------------------------------------------------------------

    def _fetch(self, rkey: tuple[str, str, str], namespace: str | None, name: str) -> Obj:
        obj = self.get_object(*rkey, namespace, name)
        if obj is None:
            raise ApiProblem(404, "NotFound", f'{rkey[2]} "{name}" not found')
        return obj

    def _list(self, rkey: tuple[str, str, str], kind: Kind, namespace: str | None, params: Mapping[str, str]) -> Obj:
        match_labels = label_selector(params.get("labelSelector"))
        match_fields = field_selector(params.get("fieldSelector"))
        items = [
            obj for ns, _, obj in self._iter(rkey)
            if (namespace is None or ns == namespace)
            and match_labels(obj.get("metadata", {}).get("labels") or {}) and match_fields(obj)
        ]
        api_version = f"{rkey[0]}/{rkey[1]}" if rkey[0] else rkey[1]
        return {"apiVersion": api_version, "kind": f"{kind.kind}List",
                "metadata": {"resourceVersion": str(self._rv)}, "items": items}

    def _validate_cr(self, rkey: tuple[str, str, str], obj: Obj, only_status: bool = False) -> Obj:
        schema = self._schemas.get(rkey)
        if schema is None:
            return obj
        import jsonschema

        if only_status and "status" in (schema.get("properties") or {}):
            # A status write: prune and validate the status stanza (the rest is unchanged).
            sschema = schema["properties"]["status"]
            status = prune(obj.get("status"), sschema) if "status" in obj else None
            if not self.validate_schemas:
                return {**obj, "status": status} if status is not None else obj
            validator = self._validators.get((*rkey, "status"))  # type: ignore[arg-type]
            if validator is None:
                validator = self._validators[(*rkey, "status")] = jsonschema.Draft4Validator(_to_jsonschema(dict(sschema)))  # type: ignore[index]
            errs = sorted(validator.iter_errors(status), key=lambda e: list(e.path)) if status is not None else []
            if errs:
                lines = [f"status.{'.'.join(str(p) for p in e.path)}: {e.message}" for e in errs[:10]]
                raise ApiProblem(422, "Invalid", f"{obj.get('kind')} {obj.get('metadata', {}).get('name')!r} is invalid: " + "; ".join(lines))
            return {**obj, "status": status} if status is not None else obj

        pruned = prune({k: v for k, v in obj.items() if k not in ("metadata", "apiVersion", "kind")}, schema)
        pruned = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": obj.get("metadata"), **pruned}
        if not self.validate_schemas:
            return pruned
        validator = self._validators.get(rkey)
        if validator is None:
            validator = self._validators[rkey] = jsonschema.Draft4Validator(_to_jsonschema(dict(schema)))
        errors = sorted(validator.iter_errors(pruned), key=lambda e: list(e.path))
        if errors:
            lines = [f"{'.'.join(str(p) for p in e.path) or '(root)'}: {e.message}" for e in errors[:10]]
            raise ApiProblem(422, "Invalid", f"{obj.get('kind')} {obj.get('metadata', {}).get('name')!r} is invalid: " + "; ".join(lines))
        return pruned

    def _create(self, rkey: tuple[str, str, str], namespace: str | None, body: Obj) -> Obj:
        kind = self._kinds[rkey]
        meta = body.setdefault("metadata", {})
        if kind.namespaced:
            namespace = namespace or meta.get("namespace")
            if not namespace:
                raise ApiProblem(400, "BadRequest", "a namespace is required")
            if meta.get("namespace") not in (None, namespace):
                raise ApiProblem(400, "BadRequest", "the namespace of the object does not match the URL")
        else:
            namespace = None
        name = meta.get("name")
        if not name and meta.get("generateName"):
            suffix = "".join(random.choices(string.ascii_lowercase + string.digits, k=5))
            name = meta["generateName"] + suffix
        if not name:
            raise ApiProblem(422, "Invalid", "metadata.name or metadata.generateName is required")
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name) or len(name) > 253:
            raise ApiProblem(422, "Invalid", f"metadata.name {name!r}: a lowercase RFC 1123 subdomain is required")
        for (plural, pattern), (code, reason, message) in list(self.reject_creates.items()):
            if plural == rkey[2] and re.fullmatch(pattern, name):
                raise ApiProblem(code, reason, message)
        if rkey == ("batch", "v1", "jobs") and len(name) > 63:
            raise ApiProblem(422, "Invalid", f"Job {name!r}: metadata.name must be no more than 63 characters")
        if self._raw(rkey, namespace, name) is not None:
            raise ApiProblem(409, "AlreadyExists", f'{rkey[2]} "{name}" already exists')
        meta.update({
            "name": name,
            "uid": str(uuid.uuid4()),
            "generation": 1,
            "creationTimestamp": now_rfc3339(),
        })
        meta.pop("resourceVersion", None)
        meta.pop("deletionTimestamp", None)
        if namespace is not None:
            meta["namespace"] = namespace
        api_version = f"{rkey[0]}/{rkey[1]}" if rkey[0] else rkey[1]
        body.setdefault("apiVersion", api_version)
        body.setdefault("kind", kind.kind)
        if "status" in kind.subresources:
            body.pop("status", None)
        if rkey == ("", "v1", "pods"):
            body["status"] = {"phase": "Pending"}
        if rkey == ("batch", "v1", "jobs"):
            self._default_job(body)
        body = self._validate_cr(rkey, body)
        body["metadata"]["resourceVersion"] = self._next_rv()
        self._store(rkey, namespace, name, body)
        self.create_times[(rkey[2], namespace, name)] = time.monotonic()
        self._emit(rkey, "ADDED", body)
        return body

    @staticmethod
    def _default_job(job: Obj) -> None:
        uid, name = job["metadata"]["uid"], job["metadata"]["name"]
        spec = job.setdefault("spec", {})
        spec.setdefault("suspend", False)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("selector", {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}})
        labels = spec.setdefault("template", {}).setdefault("metadata", {}).setdefault("labels", {})
        labels.update({"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name,
                       "controller-uid": uid, "job-name": name})

    def _current(self, rkey: tuple[str, str, str], namespace: str | None, name: str) -> Obj:
        obj = self._raw(rkey, namespace, name)
        if obj is None:
            raise ApiProblem(404, "NotFound", f'{rkey[2]} "{name}" not found')
        return obj

    def _commit(self, rkey: tuple[str, str, str], kind: Kind, namespace: str | None, name: str, old: Obj, new: Obj,
                subresource: str | None) -> Obj:
        """Apply the subresource split, immutables and generation; store and emit if changed."""
        if subresource == "status":
            merged = dict(old)
            if "status" in new:
                merged["status"] = new["status"]
            else:
                merged.pop("status", None)
            new = merged
        elif subresource:
            raise ApiProblem(404, "NotFound", f"subresource {subresource!r} does not support writes")
        elif "status" in kind.subresources:
            new = {k: v for k, v in new.items() if k != "status"}
            if "status" in old:
                new["status"] = old["status"]
        meta = new["metadata"] = dict(new.get("metadata") or {})
        for field in ("uid", "creationTimestamp", "name", "namespace", "generation", "resourceVersion", "deletionTimestamp"):
            if field in old["metadata"]:
                meta[field] = old["metadata"][field]
            else:
                meta.pop(field, None)
        new = self._validate_cr(rkey, new, only_status=subresource == "status")
        if new == old:
            return old
        spec_old = {k: v for k, v in old.items() if k not in ("metadata", "status")}
        spec_new = {k: v for k, v in new.items() if k not in ("metadata", "status")}
        if spec_old != spec_new:
            new["metadata"]["generation"] = int(old["metadata"].get("generation", 1)) + 1
        new["metadata"]["resourceVersion"] = self._next_rv()
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            self._remove(rkey, namespace, name, new, "Background")
            return new
        self._store(rkey, namespace, name, new)
        self._emit(rkey, "MODIFIED", new, old)
        return new

    def _patch(self, rkey: tuple[str, str, str], kind: Kind, namespace: str | None, name: str, subresource: str | None,
               ctype: str, data: Any) -> Obj:
        old = self._current(rkey, namespace, name)
        if ctype == "application/json-patch+json":
            if not isinstance(data, list):
                raise ApiProblem(400, "BadRequest", "a JSON patch must be a list of operations")
            try:
                new = json_patch(old, data)
            except (PatchTestFailed, jsonpatch.JsonPatchTestFailed) as err:
                raise ApiProblem(422, "Invalid", f"the server rejected our request due to an error in our request: {err}") from None
            except (ValueError, KeyError, IndexError, TypeError, jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as err:
                raise ApiProblem(422, "Invalid", f"invalid JSON patch: {err}") from None
        elif ctype in ("application/merge-patch+json", "application/strategic-merge-patch+json", "application/apply-patch+yaml"):
            if not isinstance(data, dict):
                raise ApiProblem(400, "BadRequest", "a merge patch must be a JSON object")
            want_rv = (data.get("metadata") or {}).get("resourceVersion")
            if want_rv is not None and want_rv != old["metadata"]["resourceVersion"]:
                raise ApiProblem(409, "Conflict", f'Operation cannot be fulfilled on {rkey[2]} "{name}": '
                                 "the object has been modified; please apply your changes to the latest version and try again")
            new = merge_patch(old, data)
        else:
            raise ApiProblem(415, "UnsupportedMediaType", f"unsupported patch content type {ctype!r}")
        return self._commit(rkey, kind, namespace, name, old, new, subresource)

    def _replace(self, rkey: tuple[str, str, str], kind: Kind, namespace: str | None, name: str, subresource: str | None,
                 data: Any) -> Obj:
        old = self._current(rkey, namespace, name)
        if not isinstance(data, dict):
            raise ApiProblem(400, "BadRequest", "the body must be a JSON object")
        want_rv = (data.get("metadata") or {}).get("resourceVersion")
        if want_rv is not None and want_rv != old["metadata"]["resourceVersion"]:
            raise ApiProblem(409, "Conflict", f'Operation cannot be fulfilled on {rkey[2]} "{name}": the object has been modified')
        return self._commit(rkey, kind, namespace, name, old, data, subresource)

    def _delete(self, rkey: tuple[str, str, str], namespace: str | None, name: str, policy: str) -> Obj:
        old = self._current(rkey, namespace, name)
        meta = old["metadata"]
        if meta.get("finalizers"):
            if meta.get("deletionTimestamp"):
                return old
            new = {**old, "metadata": dict(old["metadata"])}
            new["metadata"]["deletionTimestamp"] = now_rfc3339()
            new["metadata"]["resourceVersion"] = self._next_rv()
            self._store(rkey, namespace, name, new)
            self._emit(rkey, "MODIFIED", new, old)
            return new
        return self._remove(rkey, namespace, name, old, policy)

    def _remove(self, rkey: tuple[str, str, str], namespace: str | None, name: str, obj: Obj, policy: str) -> Obj:
        final = {**obj, "metadata": dict(obj["metadata"])}
        final["metadata"]["resourceVersion"] = self._next_rv()
        self._store(rkey, namespace, name, None)
        self._emit(rkey, "DELETED", final)
        self._collect_garbage(str(obj["metadata"].get("uid")), policy)
        return final

    def _collect_garbage(self, owner_uid: str, policy: str) -> None:
        """Owner-reference cascade: delete (or orphan) every dependent of a deleted object."""
        dependents = []
        for rkey in list(self._kinds):
            for ns, name, obj in list(self._iter(rkey)):
                refs = obj.get("metadata", {}).get("ownerReferences") or []
                if any(r.get("uid") == owner_uid for r in refs):
                    dependents.append((rkey, ns, name, obj))
        for rkey, ns, name, obj in dependents:
            if policy == "Orphan":
                new = {**obj, "metadata": dict(obj["metadata"])}
                new["metadata"]["ownerReferences"] = [r for r in obj["metadata"]["ownerReferences"] if r.get("uid") != owner_uid]
                new["metadata"]["resourceVersion"] = self._next_rv()
                self._store(rkey, ns, name, new)
                self._emit(rkey, "MODIFIED", new, obj)
            else:
                try:
                    self._delete(rkey, ns, name, "Background")
                except ApiProblem:
                    pass

    # Logs -----------------------------------------------------------------------------------------------

    def _log(self, rkey: tuple[str, str, str], namespace: str | None, name: str, params: Mapping[str, str]) -> aiohttp.web.Response:
        if rkey != ("", "v1", "pods"):
            raise ApiProblem(404, "NotFound", "logs exist for pods only")
        self._fetch(rkey, namespace, name)
        text = self.log_reader(namespace or "", name, params) if self.log_reader else None
        if text is None:
            raise ApiProblem(400, "BadRequest", f'container in pod "{name}" is waiting to start or its log is gone')
        if params.get("tailLines"):
            n = int(params["tailLines"])
            lines = text.splitlines(keepends=True)
            text = "".join(lines[-n:]) if n > 0 else ""
        if params.get("limitBytes"):
            text = text.encode()[: int(params["limitBytes"])].decode(errors="ignore")
        return aiohttp.web.Response(text=text, content_type="text/plain")

    # Watch ----------------------------------------------------------------------------------------------

    async def _watch(self, request: Req, rkey: tuple[str, str, str], kind: Kind) -> aiohttp.web.StreamResponse:
        params = request.params
        namespace = request.namespace
        match_labels = label_selector(params.get("labelSelector"))
        match_fields = field_selector(params.get("fieldSelector"))
        if request.name:
            by_name = request.name
            base_fields = match_fields
            match_fields = lambda o: base_fields(o) and o.get("metadata", {}).get("name") == by_name  # noqa: E731

        def matches(obj: Obj | None) -> bool:
            if obj is None:
                return False
            meta = obj.get("metadata", {})
            return ((namespace is None or meta.get("namespace") == namespace)
                    and match_labels(meta.get("labels") or {}) and match_fields(obj))

        def translate(type_: str, obj: Obj, old: Obj | None) -> bytes | None:
            now_in, was_in = matches(obj), matches(old)
            if type_ == "MODIFIED":
                if now_in and not was_in:
                    type_ = "ADDED"
                elif was_in and not now_in:
                    type_ = "DELETED"
                elif not now_in:
                    return None
            elif not now_in:
                return None
            return self._event_bytes(type_, obj)

        queue: asyncio.Queue[tuple[int, str, Obj, Obj | None]] = asyncio.Queue()
        since = params.get("resourceVersion")
        initial: list[bytes] = []
        gone = False
        if since in (None, "", "0"):
            initial = [self._event_bytes("ADDED", obj) for _, _, obj in self._iter(rkey) if matches(obj)]
        else:
            since_rv = int(since)
            if since_rv < self._trimmed.get(rkey, 0):
                gone = True
            else:
                for rv, type_, obj, old in self._history.get(rkey, ()):
                    if rv > since_rv:
                        ev = translate(type_, obj, old)
                        if ev is not None:
                            initial.append(ev)
        self._subs.setdefault(rkey, set()).add(queue)

        raw_request = request.raw
        assert raw_request is not None
        response = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(raw_request)
        try:
            if gone:
                await response.write(json.dumps({"type": "ERROR", "object": {
                    "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410, "reason": "Expired",
                    "message": f"too old resource version: {since}"}}).encode() + b"\n")
                return response
            for ev in initial:
                await response.write(ev)
            timeout = float(params["timeoutSeconds"]) if params.get("timeoutSeconds") else None
            deadline = time.monotonic() + timeout if timeout else None
            bookmarks = params.get("allowWatchBookmarks") in ("true", "1")
            api_version = f"{rkey[0]}/{rkey[1]}" if rkey[0] else rkey[1]
            while True:
                wait = self.bookmark_interval if bookmarks else 3600.0
                if deadline is not None:
                    wait = min(wait, deadline - time.monotonic())
                    if wait <= 0:
                        break
                try:
                    first = await asyncio.wait_for(queue.get(), timeout=wait)
                except TimeoutError:
                    if bookmarks and (deadline is None or time.monotonic() < deadline):
                        await response.write(json.dumps({"type": "BOOKMARK", "object": {
                            "kind": kind.kind, "apiVersion": api_version,
                            "metadata": {"resourceVersion": str(self._rv)}}}).encode() + b"\n")
                    continue
                # Send everything queued by now in one write (a busy server batches its stream too).
                batch = [first]
                while not queue.empty():
                    batch.append(queue.get_nowait())
                chunks = [ev for _, type_, obj, old in batch if (ev := translate(type_, obj, old)) is not None]
                if chunks:
                    await response.write(b"".join(chunks))
        except (ConnectionResetError, asyncio.CancelledError, RuntimeError):
            pass
        finally:
            self._subs.get(rkey, set()).discard(queue)
        with_eof = not (raw_request.transport is None or raw_request.transport.is_closing())
        if with_eof:
            try:
                await response.write_eof()
            except (ConnectionResetError, RuntimeError):
                pass
        return response


# The test cluster: emulator + kubelet on a background loop, a sync client, the operator process ----------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """Runs an :class:`Emulator` (and optionally a kubelet driver) on a loop in a daemon thread.

    ``cluster.url`` is the API server; ``get``/``list``/``create``/``patch``/``delete`` are
    synchronous HTTP calls for the test body; ``start_operator``/``stop_operator`` manage the real
    operator as a subprocess (stdout/stderr to ``<workdir>/operator-N.log``).
    """

    def __init__(self, workdir: Path, kubelet_factory: Callable[[str], Any] | None = None, bookmark_interval: float = 20.0,
                 validate_schemas: bool = True) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="emulator", daemon=True)
        self._thread.start()
        self.emulator: Emulator = self.call(self._make_emulator, bookmark_interval)
        self.emulator.validate_schemas = validate_schemas
        self._server = kmock.Server(self.emulator, port=free_port())
        self.call(self._server.__aenter__)
        self.call(self.emulator.__aenter__)
        self.url = str(self._server.url).rstrip("/")
        self.kubelet = None
        if kubelet_factory is not None:
            self.kubelet = kubelet_factory(self.url)
            self.emulator.log_reader = self.kubelet.read_log
            self.call(self.kubelet.start)
        self.operator: subprocess.Popen[bytes] | None = None
        self.operator_logs: list[Path] = []
        self.metrics_port = 0
        self.liveness_port = 0

    @staticmethod
    async def _make_emulator(bookmark_interval: float) -> Emulator:
        return Emulator(bookmark_interval=bookmark_interval)

    def call(self, fn: Callable[..., Any], *args: Any, timeout: float = 60) -> Any:
        """Run a coroutine function (or a plain function) on the emulator's loop and wait for it."""
        async def wrapper() -> Any:
            result = fn(*args)
            if asyncio.iscoroutine(result):
                result = await result
            return result

        return asyncio.run_coroutine_threadsafe(wrapper(), self.loop).result(timeout)

    # Sync HTTP client ------------------------------------------------------------------------------------

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                params: Mapping[str, str] | None = None) -> Any:
        url = self.url + path + ("?" + urllib.parse.urlencode(params) if params else "")
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": content_type})
        try:
            with urllib.request.urlopen(req, timeout=30) as rsp:
                raw = rsp.read().decode()
                ctype = rsp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as err:
            raise ApiProblem(err.code, "", err.read().decode()) from None
        return json.loads(raw) if "json" in ctype else raw

    @staticmethod
    def path(api_version: str, plural: str, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
        return resource_path(api_version, plural, namespace, name, sub)

    def get(self, api_version: str, plural: str, namespace: str | None, name: str) -> Obj | None:
        try:
            return self.request("GET", self.path(api_version, plural, namespace, name))  # type: ignore[no-any-return]
        except ApiProblem as p:
            if p.code == 404:
                return None
            raise

    def list(self, api_version: str, plural: str, namespace: str | None = None, selector: str | None = None) -> list[Obj]:
        params = {"labelSelector": selector} if selector else None
        return self.request("GET", self.path(api_version, plural, namespace), params=params)["items"]  # type: ignore[no-any-return]

    def create(self, api_version: str, plural: str, namespace: str | None, body: Obj) -> Obj:
        return self.request("POST", self.path(api_version, plural, namespace), body)  # type: ignore[no-any-return]

    def patch(self, api_version: str, plural: str, namespace: str | None, name: str, body: Any,
              content_type: str = "application/merge-patch+json", sub: str | None = None) -> Obj:
        return self.request("PATCH", self.path(api_version, plural, namespace, name, sub), body, content_type)  # type: ignore[no-any-return]

    def delete(self, api_version: str, plural: str, namespace: str | None, name: str) -> Obj:
        return self.request("DELETE", self.path(api_version, plural, namespace, name))  # type: ignore[no-any-return]

    def wait_for(self, predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
        """Poll ``predicate`` until it returns something truthy; fail with the operator's log tail."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            if self.operator is not None and self.operator.poll() is not None:
                raise AssertionError(f"the operator exited ({self.operator.returncode}) while waiting for {what}\n{self.operator_log_tail()}")
            time.sleep(interval)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{self.operator_log_tail()}")

    # Experiment shorthands ----------------------------------------------------------------------------------

    def apply(self, name: str, spec: Mapping[str, Any], namespace: str = "default") -> Obj:
        return self.create(EXP_API, EXP_PLURAL, namespace, experiment(name, spec, namespace))

    def exp(self, name: str, namespace: str = "default") -> Obj | None:
        return self.get(EXP_API, EXP_PLURAL, namespace, name)

    def wait_decided(self, name: str, timeout: float = 60, namespace: str = "default") -> Obj:
        """Wait until ``Decided=True`` for the current generation (what ``kubectl wait`` would do)."""
        def decided() -> Obj | None:
            obj = self.exp(name, namespace)
            cond = condition(obj, "Decided")
            gen = (obj or {}).get("metadata", {}).get("generation")
            if cond and cond["status"] == "True" and cond.get("observedGeneration") == gen:
                return obj
            return None

        return self.wait_for(decided, timeout, f"Decided=True on {namespace}/{name}")  # type: ignore[no-any-return]

    def wait_phase(self, name: str, phases: set[str], timeout: float = 60, namespace: str = "default") -> Obj:
        return self.wait_for(  # type: ignore[no-any-return]
            lambda: (o := self.exp(name, namespace)) and (o.get("status") or {}).get("phase") in phases and o,
            timeout, f"{namespace}/{name} in phase {sorted(phases)}")

    def history(self, name: str, namespace: str = "default") -> list[Obj]:
        """Every version of the experiment the API server stored, oldest first."""
        return [o for _, o in self.call(self.emulator.versions, "bench.spx.dev", "v1alpha1", EXP_PLURAL, namespace, name)]

    def events(self, name: str, namespace: str = "default") -> list[Obj]:
        return [e for e in self.list("v1", "events", namespace) if e["involvedObject"].get("name") == name]

    def jobs_created(self, prefix: str, namespace: str = "default") -> list[str]:
        """Names of every Job ever created whose name starts with ``prefix``, in creation order."""
        times = self.call(lambda: dict(self.emulator.create_times))
        rows = sorted((t, n) for (plural, ns, n), t in times.items() if plural == "jobs" and ns == namespace and n.startswith(prefix))
        return [n for _, n in rows]

    def owned_by(self, uid: str) -> list[tuple[str, str]]:
        """(kind, name) of every live object with an owner reference to ``uid`` (recursively)."""
        def scan() -> list[tuple[str, str]]:
            found, owners = [], {uid}
            changed = True
            while changed:
                changed = False
                for rkey in self.emulator._kinds:
                    for _, name, obj in self.emulator._iter(rkey):
                        refs = obj.get("metadata", {}).get("ownerReferences") or []
                        if any(r.get("uid") in owners for r in refs) and obj["metadata"]["uid"] not in owners:
                            owners.add(obj["metadata"]["uid"])
                            found.append((obj.get("kind", rkey[2]), name))
                            changed = True
            return found

        return self.call(scan)  # type: ignore[no-any-return]

    # The operator process ---------------------------------------------------------------------------------

    def start_operator(self, env: Mapping[str, str] | None = None, namespaces: tuple[str, ...] = ()) -> subprocess.Popen[bytes]:
        assert self.operator is None or self.operator.poll() is not None, "the operator is already running"
        self.metrics_port = free_port()
        self.liveness_port = free_port()
        full_env = {
            **os.environ,
            "SPX_KUBE_SERVER": self.url,
            "SPX_METRICS_PORT": str(self.metrics_port),
            "SPX_WATCH_SERVER_TIMEOUT": "120",
            "SPX_WATCH_INACTIVITY_TIMEOUT": "60",
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        args = [sys.executable, "-m", "kopf", "run", "-m", "spx.controller", "--standalone", "--log-format=json",
                f"--liveness=http://127.0.0.1:{self.liveness_port}/healthz"]
        args += [a for ns in namespaces for a in ("-n", ns)] or ["-A"]
        log = self.workdir / f"operator-{len(self.operator_logs) + 1}.log"
        self.operator_logs.append(log)
        self.operator = subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=full_env, cwd=REPO)
        return self.operator

    def wait_operator_ready(self, timeout: float = 30) -> None:
        def ready() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.liveness_port}/healthz", timeout=2) as rsp:
                    return rsp.status == 200
            except OSError:
                return False

        self.wait_for(ready, timeout, "the operator's liveness endpoint")

    def stop_operator(self, kill: bool = False, timeout: float = 20) -> int | None:
        proc = self.operator
        if proc is None or proc.poll() is not None:
            return proc.returncode if proc else None
        proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait(5)

    def operator_log_tail(self, n: int = 40) -> str:
        if not self.operator_logs:
            return ""
        lines = self.operator_logs[-1].read_text(errors="replace").splitlines()
        return "\n".join(lines[-n:])

    def metrics_text(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as rsp:
            return str(rsp.read().decode())

    def metric_samples(self, name: str) -> list[tuple[dict[str, str], float]]:
        """(labels, value) of every sample named ``name`` on the operator's /metrics."""
        from prometheus_client.parser import text_string_to_metric_families

        return [(dict(s.labels), s.value) for fam in text_string_to_metric_families(self.metrics_text())
                for s in fam.samples if s.name == name]

    def close(self) -> None:
        self.stop_operator()
        if self.kubelet is not None:
            try:
                self.call(self.kubelet.stop, timeout=30)
            except Exception:
                pass
        try:
            self.call(self.emulator.__aexit__, None, None, None, timeout=10)
            self.call(self._server.__aexit__, None, None, None, timeout=10)
        except Exception:
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


# Shorthands for the experiment resource -------------------------------------------------------------------

EXP_API = "bench.spx.dev/v1alpha1"
EXP_PLURAL = "shardedprojectionexperiments"


def experiment(name: str, spec: Mapping[str, Any], namespace: str = "default", labels: Mapping[str, str] | None = None) -> Obj:
    return {
        "apiVersion": EXP_API,
        "kind": "ShardedProjectionExperiment",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "spec": dict(spec),
    }


def condition(obj: Mapping[str, Any] | None, type_: str) -> Mapping[str, Any] | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return c  # type: ignore[no-any-return]
    return None


__all__ = [
    "EXP_API", "EXP_PLURAL", "ApiProblem", "Cluster", "Emulator", "condition", "experiment",
    "field_selector", "free_port", "label_selector", "merge_patch", "now_rfc3339", "prune",
]
