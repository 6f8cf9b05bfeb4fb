"""Operator scale benchmark: N experiments applied at once against the emulated API server.

    .venv/bin/python benchmarks/operator_scale.py            # 500 experiments
    .venv/bin/python benchmarks/operator_scale.py -n 100 --json out.json

The real operator runs as a subprocess (``kopf run -m spx.controller``, no concurrency limit) against
the emulator of ``tests/integration/emulator.py``; the stand-in kubelet of
``tests/integration/kubelet.py`` plays every pod with a canned bench (no process, a schema-valid
result after ``--bench-seconds``, its container starting ``--pod-start-seconds`` after the pod is
bound, as an image pull and container start would) on ``--nodes`` 8-GPU nodes — pods beyond that
wait Unschedulable for a free node, as on a real GPU pool. All N experiments are POSTed concurrently; the script measures,
from the API server's own clock, the time from each experiment's creation to its Job's creation
(p50, p95, max), the time until every experiment is ``Decided``, and the operator's resident memory
after they all finish (``VmRSS``; peak ``VmHWM``). Targets: all admitted, p95 < 2 s, RSS < 200 MiB.
The emulator, the kubelet and the client share this process; the operator has its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from emulator import EXP_API, EXP_PLURAL, Cluster, experiment  # noqa: E402
from kubelet import Fault, Kubelet  # noqa: E402

from spx.api.crd import build_crd  # noqa: E402

SPEC: dict[str, Any] = {
    "parallelism": {"tensorParallelSize": 8},
    "sweep": {"tokens": [6, 12, 24, 48, 96, 384, 1024, 2048, 4096, 8192, 16384]},
    "kernel": {"samples": 50},
}
TARGET_P95_S = 2.0
TARGET_RSS_MIB = 200.0


def proc_memory(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process in MiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return fields["VmRSS"], fields["VmHWM"]


def proc_cpu_seconds(pid: int) -> float:
    """user + system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


async def apply_all(url: str, names: list[str], namespace: str) -> float:
    path = f"{url}/apis/{EXP_API}/namespaces/{namespace}/{EXP_PLURAL}"
    t0 = time.monotonic()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64)) as session:
        async def post(name: str) -> None:
            async with session.post(path, json=experiment(name, SPEC, namespace)) as rsp:
                if rsp.status != 201:
                    raise RuntimeError(f"create {name}: {rsp.status} {await rsp.text()}")

        await asyncio.gather(*(post(n) for n in names))
    return time.monotonic() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--experiments", type=int, default=500)
    parser.add_argument("--bench-seconds", type=float, default=2.0, help="how long each canned bench 'runs'")
    parser.add_argument("--pod-start-seconds", type=float, default=1.0,
                        help="stand-in kubelet: seconds from binding a pod to its container running (image pull + start)")
    parser.add_argument("--nodes", type=int, default=64,
                        help="stand-in cluster: GPU nodes, one bench pod each; the other pods wait Unschedulable (0 = unlimited)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for all to be Decided")
    parser.add_argument("--workers", type=int, default=None, help="SPX_RECONCILE_WORKERS of the operator")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--pin", action=argparse.BooleanOptionalAction, default=False,
                        help="pin the operator to the last CPU and this process to the others (less interference)")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="spx-scale-"))
    # The API server stand-in prunes but does not schema-validate (validation is the CRD's business and
    # tested elsewhere; here it would only make the Python emulator the bottleneck).
    cluster = Cluster(workdir, bookmark_interval=30, validate_schemas=False, kubelet_factory=lambda url: Kubelet(
        url, workdir, default_fault=Fault(canned=True, canned_seconds=args.bench_seconds, start_delay=args.pod_start_seconds), nodes=args.nodes or None))
    namespace = "scale"
    try:
        cluster.emulator.install_crd(build_crd())
        cluster.call(cluster.emulator.put_object, "", "v1", "namespaces", None,
                     {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        env = {"SPX_MAX_CONCURRENT_EXPERIMENTS": "0"}
        if args.workers:
            env["SPX_RECONCILE_WORKERS"] = str(args.workers)
        operator = cluster.start_operator(env=env)
        cpus = sorted(os.sched_getaffinity(0))
        if args.pin and len(cpus) >= 2:
            os.sched_setaffinity(operator.pid, {cpus[-1]})
            for tid in os.listdir("/proc/self/task"):  # every thread of this process: emulator, kubelet, client
                os.sched_setaffinity(int(tid), set(cpus[:-1]))
        cluster.wait_operator_ready(60)
        rss_idle, _ = proc_memory(operator.pid)
        cpu_idle = proc_cpu_seconds(operator.pid)

        names = [f"scale-{i:04d}" for i in range(args.experiments)]

        def harness_cpu_s() -> float:
            r = resource.getrusage(resource.RUSAGE_SELF)
            return r.ru_utime + r.ru_stime

        cpu0 = (proc_cpu_seconds(operator.pid), harness_cpu_s())
        t0 = time.monotonic()
        apply_s = asyncio.run(apply_all(cluster.url, names, namespace))

        def count_jobs() -> int:
            times = cluster.call(lambda: dict(cluster.emulator.create_times))
            return sum(1 for (plural, ns, _), _t in times.items() if plural == "jobs" and ns == namespace)

        cluster.wait_for(lambda: count_jobs() >= len(names), args.timeout, f"{len(names)} Jobs", interval=0.5)
        admitted_s = time.monotonic() - t0
        cpu_admission = (proc_cpu_seconds(operator.pid) - cpu0[0], harness_cpu_s() - cpu0[1])

        def decided() -> int:
            def scan() -> int:
                n = 0
                for _, _, obj in cluster.emulator._iter(("bench.spx.dev", "v1alpha1", EXP_PLURAL)):
                    for c in (obj.get("status") or {}).get("conditions") or []:
                        if c["type"] == "Decided" and c["status"] == "True":
                            n += 1
                return n
            return int(cluster.call(scan))

        cluster.wait_for(lambda: decided() >= len(names), args.timeout, "all experiments Decided", interval=1.0)
        all_decided_s = time.monotonic() - t0
        time.sleep(2.0)  # let the last writes and events settle
        rss_after, rss_peak = proc_memory(operator.pid)
        operator_cpu = proc_cpu_seconds(operator.pid) - cpu_idle
        self_cpu = resource.getrusage(resource.RUSAGE_SELF)
        harness_cpu = self_cpu.ru_utime + self_cpu.ru_stime

        times = cluster.call(lambda: dict(cluster.emulator.create_times))
        latencies = []
        for name in names:
            job_t = times.get(("jobs", namespace, f"{name}-g1"))
            exp_t = times[(EXP_PLURAL, namespace, name)]
            if job_t is not None:
                latencies.append(job_t - exp_t)
        jobs_total = sum(1 for (plural, ns, _), _t in times.items() if plural == "jobs" and ns == namespace)
        phases: dict[str, int] = {}
        for obj in cluster.call(cluster.emulator.list_objects, "bench.spx.dev", "v1alpha1", EXP_PLURAL, namespace):
            phase = (obj.get("status") or {}).get("phase", "?")
            phases[phase] = phases.get(phase, 0) + 1
        requests = cluster.emulator.request_count
    finally:
        cluster.close()

    figures = {
        "experiments": len(names),
        "admitted": len(latencies),
        "jobs_created": jobs_total,
        "phases": phases,
        "apply_seconds": round(apply_s, 3),
        "create_to_job_p50_s": round(statistics.median(latencies), 3),
        "create_to_job_p95_s": round(percentile(latencies, 0.95), 3),
        "create_to_job_max_s": round(max(latencies), 3),
        "all_jobs_created_s": round(admitted_s, 2),
        "all_decided_s": round(all_decided_s, 2),
        "operator_rss_idle_mib": round(rss_idle, 1),
        "operator_rss_after_mib": round(rss_after, 1),
        "operator_rss_peak_mib": round(rss_peak, 1),
        "api_requests": requests,
        "operator_cpu_s": round(operator_cpu, 2),
        "harness_cpu_s": round(harness_cpu, 2),
        "admission_cpu_operator_s": round(cpu_admission[0], 2),
        "admission_cpu_harness_s": round(cpu_admission[1], 2),
    }
    ok_admitted = figures["admitted"] == len(names) and jobs_total == len(names)
    ok_p95 = figures["create_to_job_p95_s"] < TARGET_P95_S
    ok_rss = figures["operator_rss_after_mib"] < TARGET_RSS_MIB
    rows = [
        ("experiments applied at once", f"{len(names)} (POSTs took {apply_s:.2f} s)", ""),
        ("admitted (Job created)", f"{figures['admitted']} / {len(names)}, {jobs_total} Jobs in all",
         "ok" if ok_admitted else "MISSED"),
        ("create → Job p50", f"{figures['create_to_job_p50_s']:.3f} s", ""),
        ("create → Job p95", f"{figures['create_to_job_p95_s']:.3f} s", ("ok" if ok_p95 else "MISSED") + f" (< {TARGET_P95_S:.0f} s)"),
        ("create → Job max", f"{figures['create_to_job_max_s']:.3f} s", ""),
        ("all Jobs created after", f"{admitted_s:.2f} s", ""),
        ("all Decided after", f"{all_decided_s:.2f} s ({args.nodes or 'unlimited'} nodes, {args.pod_start_seconds:g} s pod start "
                              f"+ {args.bench_seconds:g} s canned bench)", ""),
        ("final phases", ", ".join(f"{k} {v}" for k, v in sorted(phases.items())), ""),
        ("operator RSS idle", f"{rss_idle:.1f} MiB", ""),
        ("operator RSS after", f"{rss_after:.1f} MiB (peak {rss_peak:.1f})", ("ok" if ok_rss else "MISSED") + f" (< {TARGET_RSS_MIB:.0f} MiB)"),
        ("API requests served", str(requests), ""),
        ("CPU: operator / emulator+kubelet", f"{operator_cpu:.1f} s / {harness_cpu:.1f} s", ""),
        ("CPU until all Jobs existed", f"operator {cpu_admission[0]:.2f} s / harness {cpu_admission[1]:.2f} s "
                                       f"in {admitted_s:.2f} s", ""),
    ]
    width = max(len(r[0]) for r in rows)
    vwidth = max(len(r[1]) for r in rows)
    print(f"\nspx operator scale benchmark ({len(names)} experiments, emulated API server)")
    print("-" * (width + vwidth + 20))
    for label, value, verdict in rows:
        print(f"{label:<{width}}  {value:<{vwidth}}  {verdict}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0 if ok_admitted and ok_p95 and ok_rss else 1


if __name__ == "__main__":
    raise SystemExit(main())
