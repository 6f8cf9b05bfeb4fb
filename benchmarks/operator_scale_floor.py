"""The API server's floor for a burst: how fast *any* operator could turn N experiments into Jobs here.

    KUBEBUILDER_ASSETS=/path/to/binaries .venv/bin/python benchmarks/operator_scale_floor.py   # 500 experiments
    .venv/bin/python benchmarks/operator_scale_floor.py -n 500 --json floor.json

The same control plane, node agent, experiments and measurement as ``benchmarks/operator_scale.py``
(creation → Job as this process's own watch sees both ``ADDED`` events), but no operator: an ideal
controller inside this process does the one request an operator must make per experiment — it
watches experiments and, for each ``ADDED`` event, POSTs the very Job the operator would create
(:func:`spx.controller.manifests.build_job`, the spec validated once), 64 requests at a time (the
operator's ``SPX_RECONCILE_WORKERS``). It has no store, status writes, pod/Job watches, log follows or
decisions. What it measures is the floor set by the API server, etcd, the Job controller and the
node agent sharing this machine's cores: an operator's create → Job p95 cannot be below it here, and
the operator's own cost is its figure minus this one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from operator_cluster import EXP_API, EXP_PLURAL, SPEC, namespace_cluster, start_control_plane
from operator_scale import TARGET_P95_S, apiserver_requests, apply_all, percentile
from spx.api.spec import ExperimentSpec
from spx.controller.manifests import build_job

WORKERS = 64


async def ideal_controller(c: Any, namespace: str, expected: int, ready: asyncio.Event) -> None:
    """Watch experiments; POST each new one's Job (64 in flight) until ``expected`` Jobs were created."""
    cp = c.cp
    spec = ExperimentSpec.model_validate(SPEC)
    base = f"{cp.url}/apis/{EXP_API}/namespaces/{namespace}/{EXP_PLURAL}"
    jobs = f"{cp.url}/apis/batch/v1/namespaces/{namespace}/jobs"
    gate = asyncio.Semaphore(WORKERS)
    done = 0
    connector = aiohttp.TCPConnector(limit=WORKERS + 1, ssl=cp.ssl_context())
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout,
                                     headers={"Authorization": f"Bearer {cp.token}"}) as session:
        async def create(obj: dict[str, Any]) -> None:
            nonlocal done
            meta = obj["metadata"]
            manifest = build_job(meta["name"], namespace, meta["uid"], int(meta.get("generation", 1)), spec, "spx-bench:bench")
            async with gate, session.post(jobs, json=manifest) as rsp:
                if rsp.status not in (201, 409):
                    raise RuntimeError(f"Job of {meta['name']}: {rsp.status} {(await rsp.text())[:300]}")
            done += 1

        tasks: dict[str, asyncio.Task[None]] = {}

        def seen(obj: dict[str, Any]) -> None:
            name = obj["metadata"]["name"]
            if name.startswith("scale-") and name not in tasks:
                tasks[name] = asyncio.ensure_future(create(obj))

        # list-then-watch, as every controller does: the API server closes a watch whose reader falls
        # behind in a burst, so each ended watch is followed by a list (nothing is missed) and a new watch.
        while len(tasks) < expected:
            async with session.get(base) as rsp:
                listed = await rsp.json()
            for obj in listed["items"]:
                seen(obj)
            params = {"watch": "1", "resourceVersion": listed["metadata"]["resourceVersion"]}
            async with session.get(base, params=params) as rsp:
                ready.set()
                async for line in rsp.content:
                    event = json.loads(line)
                    if event.get("type") == "ADDED":
                        seen(event["object"])
                    if len(tasks) >= expected:
                        break
        await asyncio.gather(*tasks.values())
    assert done == expected, (done, expected)


async def burst(c: Any, names: list[str], namespace: str) -> float:
    ready = asyncio.Event()
    controller = asyncio.ensure_future(ideal_controller(c, namespace, len(names), ready))
    await asyncio.wait_for(ready.wait(), 60)
    apply_s = await apply_all(c, names, namespace)
    await controller
    return apply_s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--experiments", type=int, default=500)
    parser.add_argument("--nodes", type=int, default=64, help="GPU nodes of the node agent (as operator_scale.py)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for all Jobs")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="spx-floor-"))
    namespace = "scale"
    cp = start_control_plane(workdir)
    c = None
    try:
        c = namespace_cluster(cp, namespace, workdir, nodes=args.nodes, replay_seconds=2.0, pod_start_seconds=1.0)
        names = [f"scale-{i:04d}" for i in range(args.experiments)]
        requests0 = apiserver_requests(c)
        t0 = time.monotonic()
        apply_s = asyncio.run(burst(c, names, namespace))
        c.wait_for(lambda: len(c.jobs_created("scale-")) >= len(names), args.timeout, f"{len(names)} Jobs", interval=0.5)
        admitted_s = time.monotonic() - t0
        requests = apiserver_requests(c) - requests0
        added: dict[tuple[str, str], float] = {}
        for rec, kind in ((c.experiments, "exp"), (c.jobs, "job")):
            for t, type_, obj in rec.snapshot():
                if type_ == "ADDED":
                    added.setdefault((kind, obj["metadata"]["name"]), t)
        latencies = [added[("job", f"{n}-g1")] - added[("exp", n)] for n in names
                     if ("job", f"{n}-g1") in added and ("exp", n) in added]
    finally:
        if c is not None:
            c.close()
        cp.stop()
    figures = {
        "experiments": len(names), "admitted": len(latencies), "apply_seconds": round(apply_s, 3),
        "create_to_job_p50_s": round(statistics.median(latencies), 3),
        "create_to_job_p95_s": round(percentile(latencies, 0.95), 3),
        "create_to_job_max_s": round(max(latencies), 3),
        "all_jobs_created_s": round(admitted_s, 2), "apiserver_requests": int(requests),
        "cpus": len(os.sched_getaffinity(0)),
    }
    print(f"\nAPI server floor for a burst ({len(names)} experiments, ideal controller, no operator, {figures['cpus']} CPUs)")
    print("-" * 72)
    for key, value in figures.items():
        print(f"{key:<24} {value}")
    below = figures["create_to_job_p95_s"] < TARGET_P95_S
    print(f"an operator's p95 < {TARGET_P95_S:.0f} s is {'possible' if below else 'NOT possible'} on this machine: "
          f"the floor's p95 is {figures['create_to_job_p95_s']:.2f} s")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
