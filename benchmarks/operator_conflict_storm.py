"""Request rate of the operator during a 10-second 409 storm, and what a 422 does.

    .venv/bin/python benchmarks/operator_conflict_storm.py              # 20 experiments, 10 s storm
    .venv/bin/python benchmarks/operator_conflict_storm.py -n 50 --storm-seconds 10 --json out.json

The real operator (``kopf run -m spx.controller``, a subprocess) talks to the API server through a
small fault-injecting HTTP proxy in this process; behind it, the emulated API server and stand-in
kubelet of ``tests/integration`` (canned benches, no process). Phase 1: N experiments are applied
and, from that moment for ``--storm-seconds``, the proxy answers every status write with
``409 Conflict`` (as the API server does for a stale ``resourceVersion``) — so every transition of
every experiment (Pending, Running, Analyzing, Decided) collides. The table gives the operator's
requests per second during the storm (all, status writes, reads), the busiest second, and the time
after the storm until all are Decided. Phase 2: one experiment whose final status the proxy refuses
with ``422 Invalid`` (any status write carrying a kernel section): it must end Decided/InfraFailed
with reason ``StatusRejected`` after a bounded number of writes, not be retried forever.

The proxy stands in for the fault-injecting proxy of the real-control-plane test fixture (not here
yet); the emulator for the real API server.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from emulator import EXP_API, EXP_PLURAL, Cluster, experiment  # noqa: E402
from kubelet import Fault, Kubelet  # noqa: E402

from spx.api.crd import build_crd  # noqa: E402

SPEC: dict[str, Any] = {
    "parallelism": {"tensorParallelSize": 8},
    "sweep": {"tokens": [6, 12, 24, 48, 96, 384, 1024, 2048, 4096, 8192, 16384]},
    "kernel": {"samples": 20},
}
CONFLICT = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409,
            "message": "Operation cannot be fulfilled on shardedprojectionexperiments.bench.spx.dev: the object has "
                       "been modified; please apply your changes to the latest version and try again"}
INVALID = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Invalid", "code": 422,
           "message": "ShardedProjectionExperiment.bench.spx.dev is invalid: status.kernel: Invalid value: "
                      "injected by the benchmark's proxy"}


class FaultProxy:
    """HTTP proxy to ``upstream`` that counts requests and injects 409/422 on experiment status writes."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.storm_until = 0.0
        self.reject_prefix: str | None = None
        self.log: list[tuple[float, str, str]] = []  # (monotonic time, class, path)
        self.loop = asyncio.new_event_loop()
        self.url = ""
        started = threading.Event()
        threading.Thread(target=self._serve, args=(started,), daemon=True, name="proxy").start()
        started.wait(10)

    def _serve(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)

        async def boot() -> None:
            self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None),
                                                 connector=aiohttp.TCPConnector(limit=0))
            app = web.Application(client_max_size=64 * 1024 * 1024)
            app.router.add_route("*", "/{tail:.*}", self.handle)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            self.url = f"http://127.0.0.1:{port}"
            started.set()

        self.loop.run_until_complete(boot())
        self.loop.run_forever()

    def close(self) -> None:
        """Close the upstream connections (the watches) and stop the proxy's loop."""
        asyncio.run_coroutine_threadsafe(self.session.close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)

    @staticmethod
    def classify(method: str, path: str) -> str:
        if EXP_PLURAL in path and path.endswith("/status") and method in ("PATCH", "PUT"):
            return "status-write"
        if method == "GET" and "watch=" not in path:
            return "read"
        if method == "GET":
            return "watch"
        return "other-write"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        kind = self.classify(request.method, str(request.rel_url))
        self.log.append((time.monotonic(), kind, request.path))
        if kind == "status-write":
            if time.monotonic() < self.storm_until:
                return web.json_response(CONFLICT, status=409)
            name = request.path.rsplit("/", 2)[-2]
            if self.reject_prefix and name.startswith(self.reject_prefix) and b'"kernel"' in body:
                return web.json_response(INVALID, status=422)
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("content-type", "authorization", "accept")}
        async with self.session.request(request.method, self.upstream + str(request.rel_url), data=body or None,
                                        headers=headers) as up:
            rsp = web.StreamResponse(status=up.status, headers={"Content-Type": up.headers.get("Content-Type", "application/json")})
            await rsp.prepare(request)
            async for chunk in up.content.iter_any():
                await rsp.write(chunk)
            await rsp.write_eof()
            return rsp


def rate(log: list[tuple[float, str, str]], t0: float, t1: float, kind: str | None = None) -> tuple[float, int]:
    """(mean requests/s in [t0, t1), busiest 1-s bin) of ``kind`` (None: all but watches)."""
    times = [t for t, k, _ in log if t0 <= t < t1 and (k == kind if kind else k != "watch")]
    bins = collections.Counter(int(t - t0) for t in times)
    return len(times) / max(t1 - t0, 1e-9), max(bins.values(), default=0)


def decided(cluster: Cluster, namespace: str) -> dict[str, str]:
    out = {}
    for obj in cluster.call(cluster.emulator.list_objects, "bench.spx.dev", "v1alpha1", EXP_PLURAL, namespace):
        for c in (obj.get("status") or {}).get("conditions") or []:
            if c["type"] == "Decided" and c["status"] == "True":
                out[obj["metadata"]["name"]] = c["reason"]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--experiments", type=int, default=20)
    parser.add_argument("--storm-seconds", type=float, default=10.0)
    parser.add_argument("--bench-seconds", type=float, default=3.0)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--reject-timeout", type=float, default=60.0, help="seconds to wait for the 422 case")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="spx-storm-"))
    cluster = Cluster(workdir, bookmark_interval=30, validate_schemas=False, kubelet_factory=lambda url: Kubelet(
        url, workdir, default_fault=Fault(canned=True, canned_seconds=args.bench_seconds, start_delay=0.5), nodes=None))
    namespace = "storm"
    proxy = FaultProxy(cluster.url)
    try:
        cluster.emulator.install_crd(build_crd())
        cluster.call(cluster.emulator.put_object, "", "v1", "namespaces", None,
                     {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        cluster.start_operator(env={"SPX_KUBE_SERVER": proxy.url, "SPX_MAX_CONCURRENT_EXPERIMENTS": "0"})
        cluster.wait_operator_ready(60)
        time.sleep(1.0)
        names = [f"storm-{i:03d}" for i in range(args.experiments)]
        t0 = time.monotonic()
        proxy.storm_until = t0 + args.storm_seconds
        for name in names:
            cluster.request("POST", f"/apis/{EXP_API}/namespaces/{namespace}/{EXP_PLURAL}", experiment(name, SPEC, namespace))
        t_storm_end = proxy.storm_until
        time.sleep(max(0.0, t_storm_end - time.monotonic()))
        cluster.wait_for(lambda: len(decided(cluster, namespace)) >= len(names), args.timeout, "all Decided", interval=0.5)
        t_done = time.monotonic()
        storm = {k or "all": rate(proxy.log, t0, t_storm_end, k) for k in (None, "status-write", "read")}
        outcomes = collections.Counter(decided(cluster, namespace).values())

        # Phase 2: a status the API server always rejects (422).
        proxy.reject_prefix = "reject-"
        n_before = len(proxy.log)
        t2 = time.monotonic()
        cluster.request("POST", f"/apis/{EXP_API}/namespaces/{namespace}/{EXP_PLURAL}", experiment("reject-0", SPEC, namespace))
        try:
            cluster.wait_for(lambda: "reject-0" in decided(cluster, namespace), args.reject_timeout, "reject-0 Decided",
                             interval=0.5)
            time.sleep(5.0)  # and then it stays quiet
        except Exception:  # reported below as not decided
            pass
        t3 = time.monotonic()
        writes_422 = sum(1 for t, k, p in proxy.log[n_before:] if k == "status-write" and "reject-0" in p)
        obj = cluster.get(EXP_API, EXP_PLURAL, namespace, "reject-0") or {}
        conds = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
        dec, comp = conds.get("Decided", {}), conds.get("Completed", {})
        if dec.get("status") != "True":
            dec = {"reason": f"not Decided within {args.reject_timeout:.0f} s (phase {(obj.get('status') or {}).get('phase')})"}
    finally:
        proxy.close()
        cluster.close()

    figures = {
        "experiments": len(names), "storm_seconds": args.storm_seconds,
        "storm_requests_per_s": round(storm["all"][0], 1), "storm_busiest_second": storm["all"][1],
        "storm_status_writes_per_s": round(storm["status-write"][0], 1),
        "storm_status_writes_busiest_second": storm["status-write"][1],
        "storm_reads_per_s": round(storm["read"][0], 1),
        "decided_after_storm_s": round(t_done - t_storm_end, 2), "outcomes": dict(outcomes),
        "reject_decided_s": round(t3 - t2, 2), "reject_reason": f"{dec.get('reason')}/{comp.get('reason')}",
        "reject_status_writes": writes_422,
    }
    print(f"\nspx operator under a {args.storm_seconds:.0f}-second 409 storm ({len(names)} experiments, emulated API server)")
    print("-" * 96)
    rows = [
        ("requests/s during the storm (no watches)", f"{figures['storm_requests_per_s']} (busiest second {figures['storm_busiest_second']})"),
        ("status writes/s during the storm", f"{figures['storm_status_writes_per_s']} (busiest second {figures['storm_status_writes_busiest_second']})"),
        ("reads/s during the storm", f"{figures['storm_reads_per_s']}"),
        ("all Decided after the storm ended", f"{figures['decided_after_storm_s']} s: {dict(outcomes)}"),
        ("422 on the final status", f"Decided {figures['reject_reason']} after {figures['reject_decided_s']} s, "
                                    f"{writes_422} status writes to it in all"),
    ]
    for label, value in rows:
        print(f"{label:44s} {value}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
