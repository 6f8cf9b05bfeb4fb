"""The split's effect on a whole eager step, against the per-op Δg and Δh (one GPU).

Per case (tokens × host ops × filler): a step of L layers (default 40, DeepSeek-V4.1's), each the real
projection (``replicated``, or ``split``: ``sp_shard`` + shard GEMM + a real 1-rank NCCL all-gather
launch + trim) followed by ``host_ops`` one-element ops and a GPU-only filler (``torch.cuda._sleep``)
standing for attention/MoE, one host sync per step (:mod:`spx.bench.eager_step`). Steps of the two
arms alternate; per case the effect per layer is the median of paired (split − replicated) step
times / L with a bootstrap interval (:mod:`spx.bench.step_queue`), from the host wall (issue start →
after the sync) and from CUDA events. Per token count the per-op Δg (CUPTI spans) and Δh (host issue
time, GPU kept busy) of the same two ops come from :func:`spx.bench.timing.bench_time`. The table
says which of Δg/Δh each step effect matches: small fillers leave the host the bottleneck (Δh),
large ones the GPU (Δg).

    python benchmarks/eager_step.py --out DIR [--tokens 2048,8192,2049] [--fillers 0,25,...]
        [--host-ops 0,40] [--layers 40] [--steps 40] [--gemm-backend humming] [--budget-s 300]

Writes DIR/eager_step.json (every sample) and DIR/eager_step.csv (one row per case); prints the table
(``--table DIR/eager_step.json`` prints it again from the file).
On CPU (torch-bf16, a tiny projection) it runs as a pipeline smoke test only: no filler, no meaning.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import time
from pathlib import Path
from typing import Any

SPEC = "examples/deepseek-v41-tp8.yaml"


def _ints(text: str) -> list[int]:
    return [int(t) for t in text.split(",") if t.strip()]


def _floats(text: str) -> list[float]:
    return [float(t) for t in text.split(",") if t.strip()]


def load_spec(path: str, gemm_backend: str, samples: int, tokens: list[int], overrides: dict[str, Any] | None = None) -> Any:
    """The experiment spec at ``path`` with the backend, per-op samples and token counts set (no refinement;
    the GPU warm-up runs the largest count), plus ``overrides`` of spec fields."""
    from spx.api.loading import load_experiment, validate_spec

    spec = load_experiment(Path(path).read_text(), path).spec
    raw = spec.model_dump(by_alias=True, exclude_none=True)
    raw["kernel"].update({"gemmBackend": gemm_backend, "samples": samples, "execution": "eager"})
    raw["sweep"] = {"tokens": sorted(set(tokens))}
    raw.pop("serving", None)
    raw.pop("accuracy", None)
    for key, value in (overrides or {}).items():
        raw.setdefault(key, {}).update(value)
    return validate_spec(raw, path)


def per_op(ctx: Any, layer: Any) -> dict[str, Any]:
    """Δg (CUPTI span) and Δh (host issue, GPU covered) of split − replicated for one layer's ops, µs."""
    from spx.bench.context import timing_protocol
    from spx.bench.eager_step import split_op
    from spx.bench.step_queue import paired_effect
    from spx.bench.timing import bench_time

    ops = {"replicated": layer.replicated, "split": split_op(layer)}
    timing = bench_time(ops, timing_protocol(ctx, "eager"))
    span, host = timing.span_us, timing.host_us
    return {
        "replicated_span_us": statistics.median(span["replicated"]), "split_span_us": statistics.median(span["split"]),
        "replicated_host_us": statistics.median(host["replicated"]), "split_host_us": statistics.median(host["split"]),
        "dg": paired_effect(span["replicated"], span["split"]).as_dict(),
        "dh": paired_effect(host["replicated"], host["split"]).as_dict(),
        "kernels": timing.kernels, "uncovered": timing.uncovered,
    }


def run_case(ctx: Any, layers: list[Any], filler_us: float, host_ops: int, steps: int, op: dict[str, Any]) -> dict[str, Any]:
    """Time both arms' steps for one case and summarise the effect per layer against the op's Δg/Δh."""
    import torch

    from spx.bench.eager_step import filler_gpu_us, make_step, time_steps
    from spx.bench.step_queue import paired_effect, regime_of

    scratch = torch.zeros(1, device=ctx.device)
    arms = {arm: make_step(layers, arm, filler_us, host_ops, scratch) for arm in ("replicated", "split")}
    got = time_steps(arms, steps, warmup=3, device=ctx.device)
    n = len(layers)
    rep, spl = got["replicated"], got["split"]
    effect = paired_effect(rep.wall_us, spl.wall_us, per=n)
    row: dict[str, Any] = {
        "filler_us": filler_us, "filler_gpu_us": filler_gpu_us(filler_us, ctx.device), "host_ops": host_ops,
        "layers": n, "steps": steps,
        "replicated_wall_ms": statistics.median(rep.wall_us) / 1e3, "split_wall_ms": statistics.median(spl.wall_us) / 1e3,
        "replicated_issue_ms": statistics.median(rep.issue_us) / 1e3, "split_issue_ms": statistics.median(spl.issue_us) / 1e3,
        "effect": effect.as_dict(),
        "effect_issue": paired_effect(rep.issue_us, spl.issue_us, per=n).as_dict(),
        "samples": {arm: vars(s) for arm, s in got.items()},
    }
    if rep.event_us:
        row["effect_events"] = paired_effect(rep.event_us, spl.event_us, per=n).as_dict()
    label, pos = regime_of(effect.value, op["dg"]["value"], op["dh"]["value"])
    row["matches"], row["position"] = label, None if pos is None else round(pos, 3)
    return row


def measure(args: argparse.Namespace, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The whole declared sweep; returns the JSON document (cases in the order run)."""
    import torch

    from spx.bench.context import setup, warm_up_gpu
    from spx.bench.correctness import check_correctness
    from spx.bench.eager_step import build_layers, build_projections, split_op
    from spx.bench.fingerprint import collect_environment

    t0 = time.monotonic()
    spec = load_spec(args.spec, args.gemm_backend, args.op_samples, args.tokens, overrides)
    ctx = setup(spec)
    doc: dict[str, Any] = {"spec": args.spec, "gemm_backend": ctx.gemm_backend, "gemm_backend_reason": ctx.gemm_backend_reason,
                           "tp": ctx.tp, "layers": args.layers, "per_op": {}, "cases": [], "skipped": []}
    try:
        warm_up_gpu(ctx)
        projections = build_projections(ctx, args.layers)
        for tokens in args.tokens:
            layers = build_layers(ctx, tokens, projections)
            first = layers[0]
            err, ref = check_correctness(ctx, first.replicated(), split_op(first)(), first.plan)
            op = per_op(ctx, first) | {"tokens": tokens, "padded_tokens": first.plan.padded_tokens,
                                       "max_abs_error": err, "max_abs_reference": ref}
            doc["per_op"][str(tokens)] = op
            for host_ops in args.host_ops:
                for filler in args.fillers:
                    if time.monotonic() - t0 > args.budget_s:
                        doc["skipped"].append({"tokens": tokens, "host_ops": host_ops, "filler_us": filler})
                        continue
                    row = run_case(ctx, layers, filler, host_ops, args.steps, op) | {"tokens": tokens}
                    doc["cases"].append(row)
                    print(format_row(row, op), flush=True)
            del layers
            if ctx.device.type == "cuda":
                torch.cuda.empty_cache()
        env = collect_environment(ctx.device, ctx.world_size, sorted(ctx.kernels_seen))
        doc["environment"] = env.model_dump(by_alias=True, mode="json")
    finally:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    doc["wall_seconds"] = round(time.monotonic() - t0, 1)
    return doc


HEADER = (f"{'tokens':>6} {'hostops':>7} {'filler':>7} {'rep ms':>7} {'split ms':>8} {'issue/wall':>10} "
          f"{'effect µs/layer [95%]':>24} {'events':>8} {'in-step Δh':>10} {'Δg':>7} {'Δh':>7}  matches")


def format_row(row: dict[str, Any], op: dict[str, Any]) -> str:
    """One table line of a case (µs per layer unless said)."""
    e = row["effect"]
    ev = row.get("effect_events", {}).get("value")
    filler = row["filler_gpu_us"] if row["filler_gpu_us"] is not None else row["filler_us"]
    ratio = row["replicated_issue_ms"] / row["replicated_wall_ms"]
    pos = "" if row["position"] is None else f" ({row['position']:.2f})"
    eff = f"{e['value']:+.1f} [{e['low']:+.1f}, {e['high']:+.1f}]"
    events = f"{ev:+.1f}" if ev is not None else "-"
    return (f"{row['tokens']:>6} {row['host_ops']:>7} {filler:>7.0f} {row['replicated_wall_ms']:>7.2f} "
            f"{row['split_wall_ms']:>8.2f} {ratio:>10.2f} {eff:>24} {events:>8} {row['effect_issue']['value']:>+10.1f} "
            f"{op['dg']['value']:>+7.1f} {op['dh']['value']:>+7.1f}  {row['matches']}{pos}")


MD_HEADER = ("| tokens | host ops | filler (GPU µs) | replicated step ms | split step ms | issue / wall | "
             "step effect µs/layer [95 %] | events | in-step Δh | Δg | Δh | matches (position) |\n"
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")


def format_row_md(row: dict[str, Any], op: dict[str, Any]) -> str:
    """The case as a Markdown table row (columns of :data:`MD_HEADER`)."""
    e, ev = row["effect"], row.get("effect_events", {}).get("value")
    filler = row["filler_gpu_us"] if row["filler_gpu_us"] is not None else row["filler_us"]
    pos = "" if row["position"] is None else f" ({row['position']:.2f})"
    return (f"| {row['tokens']} | {row['host_ops']} | {filler:.0f} | {row['replicated_wall_ms']:.2f} | "
            f"{row['split_wall_ms']:.2f} | {row['replicated_issue_ms'] / row['replicated_wall_ms']:.2f} | "
            f"**{e['value']:+.1f}** [{e['low']:+.1f}, {e['high']:+.1f}] | {'-' if ev is None else f'{ev:+.1f}'} | "
            f"{row['effect_issue']['value']:+.1f} | {op['dg']['value']:+.1f} | {op['dh']['value']:+.1f} | "
            f"{row['matches']}{pos} |")


def write(doc: dict[str, Any], out: Path) -> None:
    """DIR/eager_step.json (everything) and DIR/eager_step.csv (one row per case, no samples)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "eager_step.json").write_text(json.dumps(doc, indent=1))
    fields = ["tokens", "host_ops", "filler_us", "filler_gpu_us", "replicated_wall_ms", "split_wall_ms",
              "replicated_issue_ms", "split_issue_ms", "effect_us", "effect_low", "effect_high", "effect_events_us",
              "effect_issue_us", "dg_us", "dh_us", "matches", "position"]
    with (out / "eager_step.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for row in doc["cases"]:
            op = doc["per_op"][str(row["tokens"])]
            w.writerow({k: row.get(k) for k in fields} | {
                "effect_us": row["effect"]["value"], "effect_low": row["effect"]["low"],
                "effect_high": row["effect"]["high"], "effect_events_us": row.get("effect_events", {}).get("value"),
                "effect_issue_us": row["effect_issue"]["value"], "dg_us": op["dg"]["value"], "dh_us": op["dh"]["value"]})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spec", default=SPEC)
    parser.add_argument("--gemm-backend", default="humming")
    parser.add_argument("--tokens", type=_ints, default=[2048, 8192, 2049])
    parser.add_argument("--fillers", type=_floats, default=[0, 25, 50, 100, 150, 200, 300, 500, 800])
    parser.add_argument("--host-ops", type=_ints, default=[0, 40])
    parser.add_argument("--layers", type=int, default=40)
    parser.add_argument("--steps", type=int, default=40, help="timed steps per arm and case")
    parser.add_argument("--op-samples", type=int, default=50, help="per-op Δg/Δh samples per candidate")
    parser.add_argument("--budget-s", type=float, default=300.0, help="no case starts after this many seconds")
    parser.add_argument("--out", type=Path, help="where eager_step.json and eager_step.csv go (required to measure)")
    parser.add_argument("--table", type=Path, metavar="JSON", help="print the table of a saved eager_step.json; measure nothing")
    parser.add_argument("--markdown", action="store_true", help="print the final table in Markdown")
    args = parser.parse_args(argv)
    if args.table is not None:
        doc = json.loads(args.table.read_text())
    elif args.out is None:
        parser.error("--out is required to measure (or --table JSON to print a saved run)")
    else:
        print(HEADER, flush=True)
        doc = measure(args)
        write(doc, args.out)
    print(MD_HEADER if args.markdown else HEADER)
    for row in doc["cases"]:
        print((format_row_md if args.markdown else format_row)(row, doc["per_op"][str(row["tokens"])]))
    if doc["skipped"]:
        print(f"skipped past the budget: {len(doc['skipped'])} case(s)")


if __name__ == "__main__":
    main()
