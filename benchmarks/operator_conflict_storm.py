"""Request rate of the operator during a 10-second 409 storm, and what a 422 does.

    KUBEBUILDER_ASSETS=/path/to/binaries .venv/bin/python benchmarks/operator_conflict_storm.py   # 20 experiments
    .venv/bin/python benchmarks/operator_conflict_storm.py -n 50 --storm-seconds 10 --json out.json

The real operator (``kopf run -m spx.controller``, a subprocess) talks to the real API server of a
control plane on loopback (``benchmarks/operator_cluster.py``) through the test suite's
fault-injecting proxy (``tests/support/spx_testing/faultproxy.py``), which records every request; the real
Job controller makes the pods, the test node agent replays one real CPU bench run in each. Phase 1:
N experiments are applied and, from that moment for ``--storm-seconds``, the proxy answers every
experiment status write with ``409 Conflict`` (as the API server does for a stale
``resourceVersion``) — so every transition of every experiment collides. The table gives the
operator's requests per second during the storm (all but watches, status writes, reads), the busiest
second, and the time after the storm until all are Decided. Phase 2: one experiment whose final
status the proxy refuses with ``422 Invalid`` (any status write carrying a kernel section): it must
end Decided/InfraFailed with reason ``StatusRejected`` after a bounded number of writes, not be
retried forever.
"""

from __future__ import annotations

import argparse
import collections
import json
import tempfile
import time
from pathlib import Path

from operator_cluster import (
    EXP_PLURAL,
    SPEC,
    Cluster,
    FaultProxy,
    Rule,
    condition,
    namespace_cluster,
    prime,
    start_control_plane,
)

STATUS_PATH = rf"/{EXP_PLURAL}/[^/]+/status$"
Log = list[tuple[float, str, str, str]]


def classify(method: str, path: str) -> str:
    if EXP_PLURAL in path.split("?")[0] and path.split("?")[0].endswith("/status") and method in ("PATCH", "PUT"):
        return "status-write"
    if method == "GET" and "watch=" not in path:
        return "read"
    if method == "GET":
        return "watch"
    return "other-write"


def rate(log: Log, t0: float, t1: float, kind: str | None = None) -> tuple[float, int]:
    """(mean requests/s in [t0, t1), busiest 1-s bin) of ``kind`` (None: all but watches)."""
    kinds = [(t, classify(m, p)) for t, m, p, _ in log if t0 <= t < t1]
    times = [t for t, k in kinds if (k == kind if kind else k != "watch")]
    bins = collections.Counter(int(t - t0) for t in times)
    return len(times) / max(t1 - t0, 1e-9), max(bins.values(), default=0)


def decided(c: Cluster, prefix: str) -> dict[str, str]:
    out = {}
    for obj in c.list("bench.spx.dev/v1alpha1", EXP_PLURAL):
        cond = condition(obj, "Decided")
        if obj["metadata"]["name"].startswith(prefix) and cond and cond["status"] == "True":
            out[obj["metadata"]["name"]] = cond["reason"]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--experiments", type=int, default=20)
    parser.add_argument("--storm-seconds", type=float, default=10.0)
    parser.add_argument("--bench-seconds", type=float, default=3.0)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--reject-timeout", type=float, default=120.0, help="seconds to wait for the 422 case")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="spx-storm-"))
    namespace = "storm"
    cp = start_control_plane(workdir)
    c: Cluster | None = None
    proxy = FaultProxy(cp.url, cp.ca)
    try:
        c = namespace_cluster(cp, namespace, workdir, nodes=max(args.experiments, 1) + 2,
                              replay_seconds=args.bench_seconds, pod_start_seconds=0.5)
        c.call(proxy.start)
        kubeconfig = cp.write_kubeconfig(c.workdir / "kubeconfig-proxy", server=proxy.url, namespace=namespace)
        c.start_operator(env={"SPX_MAX_CONCURRENT_EXPERIMENTS": "0", "SPX_BENCH_IMAGE": "spx-bench:bench"},
                         kubeconfig=kubeconfig)
        c.wait_operator_ready(60)
        prime(c)
        names = [f"storm-{i:03d}" for i in range(args.experiments)]
        storm = [c.call(lambda m=m: proxy.add(Rule("status", path=STATUS_PATH, method=m, code=409, reason="Conflict",
                                                   times=-1))) for m in ("PATCH", "PUT")]
        t0 = time.monotonic()
        for name in names:
            c.apply(name, SPEC)
        c.wait_for(lambda: time.monotonic() >= t0 + args.storm_seconds, args.storm_seconds + 60, "the storm's end",
                   interval=0.05)
        for rule in storm:
            c.call(lambda r=rule: setattr(r, "times", 0))
        t_storm_end = time.monotonic()
        c.wait_for(lambda: len(decided(c, "storm-")) >= len(names), args.timeout, "all Decided", interval=0.5)
        t_done = time.monotonic()
        log: Log = c.call(lambda: list(proxy.log))
        rates = {k or "all": rate(log, t0, t_storm_end, k) for k in (None, "status-write", "read")}
        outcomes = collections.Counter(decided(c, "storm-").values())
        conflicts = sum(r.hits for r in storm)

        # Phase 2: a status the API server always rejects (422).
        reject = [c.call(lambda m=m: proxy.add(Rule("status", path=r"/reject-0/status$", method=m, code=422,
                                                    reason="Invalid", body='"kernel"', times=-1))) for m in ("PATCH", "PUT")]
        n_before = len(c.call(lambda: list(proxy.log)))
        t2 = time.monotonic()
        c.apply("reject-0", SPEC)
        try:
            c.wait_for(lambda: "reject-0" in decided(c, "reject-"), args.reject_timeout, "reject-0 Decided", interval=0.5)
        except AssertionError:  # reported below as not decided
            pass
        t3 = time.monotonic()
        quiet_from = len(c.call(lambda: list(proxy.log)))
        c.wait_for(lambda: time.monotonic() >= t3 + 5.0, 60, "5 s after the decision", interval=0.1)  # does it stay quiet?
        log2: Log = c.call(lambda: list(proxy.log))
        writes_422 = sum(1 for _, m, p, _ in log2[n_before:] if classify(m, p) == "status-write" and "/reject-0/" in p)
        writes_after = sum(1 for _, m, p, _ in log2[quiet_from:] if classify(m, p) == "status-write" and "/reject-0/" in p)
        refused = sum(r.hits for r in reject)
        obj = c.exp("reject-0") or {}
        dec, comp = condition(obj, "Decided") or {}, condition(obj, "Completed") or {}
        if dec.get("status") != "True":
            dec = {"reason": f"not Decided within {args.reject_timeout:.0f} s (phase {(obj.get('status') or {}).get('phase')})"}
    finally:
        if c is not None:
            c.stop_operator()
            c.call(proxy.stop)
            c.close()
        cp.stop()

    figures = {
        "experiments": len(names), "storm_seconds": args.storm_seconds, "conflicts_injected": conflicts,
        "storm_requests_per_s": round(rates["all"][0], 1), "storm_busiest_second": rates["all"][1],
        "storm_status_writes_per_s": round(rates["status-write"][0], 1),
        "storm_status_writes_busiest_second": rates["status-write"][1],
        "storm_reads_per_s": round(rates["read"][0], 1),
        "decided_after_storm_s": round(t_done - t_storm_end, 2), "outcomes": dict(outcomes),
        "reject_decided_s": round(t3 - t2, 2), "reject_reason": f"{dec.get('reason')}/{comp.get('reason')}",
        "reject_status_writes": writes_422, "reject_422s": refused, "reject_writes_after_decided": writes_after,
    }
    print(f"\nspx operator under a {args.storm_seconds:.0f}-second 409 storm ({len(names)} experiments, real API server "
          "behind the fault proxy)")
    print("-" * 96)
    rows = [
        ("requests/s during the storm (no watches)", f"{figures['storm_requests_per_s']} (busiest second {figures['storm_busiest_second']})"),
        ("status writes/s during the storm", f"{figures['storm_status_writes_per_s']} (busiest second {figures['storm_status_writes_busiest_second']}, "
                                             f"{conflicts} answered 409)"),
        ("reads/s during the storm", f"{figures['storm_reads_per_s']}"),
        ("all Decided after the storm ended", f"{figures['decided_after_storm_s']} s: {dict(outcomes)}"),
        ("422 on the final status", f"Decided {figures['reject_reason']} after {figures['reject_decided_s']} s, "
                                    f"{writes_422} status writes to it in all ({refused} answered 422, "
                                    f"{writes_after} in the 5 s after)"),
    ]
    for label, value in rows:
        print(f"{label:44s} {value}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
