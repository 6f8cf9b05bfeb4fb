"""Do two runs of the same sweep reproduce? Per token count: GPU medians and host medians, run B vs run A.

    python benchmarks/compare_runs.py A/result.json B/result.json [--min-tokens 1024] [--gpu-pct 3] [--host-pct 15]
    python benchmarks/compare_runs.py A/stage.json B/stage.json      # the input-projection stage, per kind

Prints one row per token count (and candidate), the relative difference in percent, and whether every
GPU median at >= --min-tokens is within --gpu-pct and every host median within --host-pct. Exit 0
when they are, 1 when not, 3 when the files cannot be compared. CPU runs (``device: cpu``, the smoke
run) are printed but not judged: their timings say nothing about a GPU's reproducibility (exit 0).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _rows(doc: dict) -> dict[tuple[str, int, str], tuple[float, float | None]]:
    out: dict[tuple[str, int, str], tuple[float, float | None]] = {}
    if "points" in doc:
        for p in doc["points"]:
            for c in ("replicated", "split"):
                out[("sweep", p["tokens"], c)] = (p[c]["medianUs"], p[c].get("hostMedianUs"))
    else:
        for r in doc["rows"]:
            for c, t in r["candidates"].items():
                out[(r["kind"], r["tokens"], c)] = (t["gpuUs"], t.get("hostUs"))
    return out


def _pct(a: float | None, b: float | None) -> float | None:
    return None if not a or b is None else (b - a) / a * 100.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    ap.add_argument("--min-tokens", type=int, default=1024)
    ap.add_argument("--gpu-pct", type=float, default=3.0)
    ap.add_argument("--host-pct", type=float, default=15.0)
    args = ap.parse_args()
    try:
        docs = [json.loads(p.read_text()) for p in (args.a, args.b)]
        a, b = _rows(docs[0]), _rows(docs[1])
    except (OSError, ValueError, KeyError, TypeError) as err:
        print(f"compare_runs: cannot read a result.json or stage.json from {args.a} and {args.b}: {err!r}", file=sys.stderr)
        return 3
    cpu = [str(p) for p, d in zip((args.a, args.b), docs, strict=True) if d.get("device") == "cpu"]
    worst_gpu = worst_host = 0.0
    print(f"{'kind':<16}{'tokens':>7} {'candidate':<11}{'gpu A':>9}{'gpu B':>9}{'Δ%':>7}{'host A':>9}{'host B':>9}{'Δ%':>7}")
    for key in sorted(set(a) & set(b), key=lambda k: (k[0], k[1], k[2])):
        (ga, ha), (gb, hb) = a[key], b[key]
        dg, dh = _pct(ga, gb), _pct(ha, hb)
        if key[1] >= args.min_tokens:
            worst_gpu = max(worst_gpu, abs(dg or 0.0))
            worst_host = max(worst_host, abs(dh or 0.0))
        fmt = lambda v: f"{v:9.1f}" if v is not None else f"{'-':>9}"  # noqa: E731
        pct = lambda v: f"{v:+7.1f}" if v is not None else f"{'-':>7}"  # noqa: E731
        print(f"{key[0]:<16}{key[1]:>7} {key[2]:<11}{fmt(ga)}{fmt(gb)}{pct(dg)}{fmt(ha)}{fmt(hb)}{pct(dh)}")
    ok = worst_gpu <= args.gpu_pct and worst_host <= args.host_pct
    if cpu:
        print(f"CPU run(s) {', '.join(cpu)}: timings say nothing about GPUs; not judged against the GPU limits")
        return 0
    print(f"at >= {args.min_tokens} tokens: largest GPU difference {worst_gpu:.1f} % (limit {args.gpu_pct:g} %), "
          f"largest host difference {worst_host:.1f} % (limit {args.host_pct:g} %): {'reproduces' if ok else 'DOES NOT reproduce'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
