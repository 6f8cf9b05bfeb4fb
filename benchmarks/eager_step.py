"""The split's effect on a whole eager step, against the per-op Δg and Δh (one GPU).

Per case (tokens × host ops × filler): a step of L layers (default 40, DeepSeek-V4.1's), each the real
projection (``replicated``; ``split``: ``sp_shard`` + shard GEMM + a real 1-rank NCCL all-gather
launch + trim; ``pad-free``: the same with the pad-free shard, rank TP − 1) followed by ``host_ops``
one-element ops and a GPU-only filler (``torch.cuda._sleep``) standing for attention/MoE, one host sync
per step (:mod:`spx.research.eager_step`). Each case is timed twice: **per arm** (one step closure per
arm, alternating per round) and **switched** (one step whose layers read the arm from a switch set
between steps, arms in a seeded random order per round: the one-server step A/B's design), so the
switched figures are checked against the per-arm ones of the same run. Per design the effect per layer
is the median of paired (arm − replicated) step times / L with a bootstrap interval
(:mod:`spx.research.step_queue`), from the host wall (issue start → after the sync) and from CUDA
events; ``saves`` is split − pad-free. Per token count the per-op Δg (CUPTI spans) and Δh (host issue
time, GPU kept busy) of the same ops come from :func:`spx.bench.timing.bench_time`. The table
says which of Δg/Δh each step effect matches: small fillers leave the host the bottleneck (Δh),
large ones the GPU (Δg).

    python benchmarks/eager_step.py --out DIR [--tokens 2048,8192,2049] [--fillers 0,25,...]
        [--host-ops 0,40] [--layers 40] [--steps 40] [--gemm-backend humming] [--budget-s 300]

Writes DIR/eager_step.json (every sample) and DIR/eager_step.csv (one row per case and design); prints the table
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


SHARDED = ("split", "pad-free")


def per_op(ctx: Any, layer: Any) -> dict[str, Any]:
    """Δg (CUPTI span) and Δh (host issue, GPU covered) of split − replicated and pad-free − replicated for
    one layer's ops, µs; ``saved_g`` / ``saved_h``: what pad-free saves against split (split − pad-free)."""
    from spx.bench.context import timing_protocol
    from spx.bench.timing import bench_time
    from spx.research.eager_step import arm_op
    from spx.research.step_queue import paired_effect

    ops = {arm: arm_op(layer, arm) for arm in ("replicated", *SHARDED)}
    timing = bench_time(ops, timing_protocol(ctx, "eager"))
    span, host = timing.span_us, timing.host_us
    out: dict[str, Any] = {"kernels": timing.kernels, "uncovered": timing.uncovered}
    for arm in ops:
        key = arm.replace("-", "_")
        out[f"{key}_span_us"], out[f"{key}_host_us"] = statistics.median(span[arm]), statistics.median(host[arm])
    out["dg"] = paired_effect(span["replicated"], span["split"]).as_dict()
    out["dh"] = paired_effect(host["replicated"], host["split"]).as_dict()
    out["dg_pad_free"] = paired_effect(span["replicated"], span["pad-free"]).as_dict()
    out["dh_pad_free"] = paired_effect(host["replicated"], host["pad-free"]).as_dict()
    out["saved_g"] = paired_effect(span["pad-free"], span["split"]).as_dict()
    out["saved_h"] = paired_effect(host["pad-free"], host["split"]).as_dict()
    return out


def effects(got: dict[str, Any], n: int) -> dict[str, Any]:
    """Per sharded arm, the step effect per layer against replicated (host wall, issue, CUDA events) and
    what pad-free saves against split; µs per layer, paired by round."""
    from spx.research.step_queue import paired_effect

    rep = got["replicated"]
    out: dict[str, Any] = {"medians_ms": {arm: statistics.median(s.wall_us) / 1e3 for arm, s in got.items()}}
    for arm in SHARDED:
        key = arm.replace("-", "_")
        out[key] = paired_effect(rep.wall_us, got[arm].wall_us, per=n).as_dict()
        out[f"{key}_issue"] = paired_effect(rep.issue_us, got[arm].issue_us, per=n).as_dict()
        if rep.event_us:
            out[f"{key}_events"] = paired_effect(rep.event_us, got[arm].event_us, per=n).as_dict()
    out["pad_free_saves"] = paired_effect(got["pad-free"].wall_us, got["split"].wall_us, per=n).as_dict()
    out["replicated_issue_over_wall"] = statistics.median(rep.issue_us) / statistics.median(rep.wall_us)
    return out


def run_case(ctx: Any, layers: list[Any], filler_us: float, host_ops: int, steps: int, op: dict[str, Any],
             seed: int = 0) -> dict[str, Any]:
    """Time the three arms' steps for one case twice — per-arm closures alternating per round, and one
    step switched between arms per step (seeded order) — and summarise both against the op's Δg/Δh."""
    import torch

    from spx.research.eager_step import (
        ArmSwitch,
        filler_gpu_us,
        make_step,
        make_switched_step,
        time_steps,
        time_switched,
    )
    from spx.research.step_queue import regime_of

    scratch = torch.zeros(1, device=ctx.device)
    arms = ("replicated", *SHARDED)
    n = len(layers)
    per_arm = time_steps({arm: make_step(layers, arm, filler_us, host_ops, scratch) for arm in arms},
                         steps, warmup=3, device=ctx.device)
    switch = ArmSwitch()
    switched = time_switched(make_switched_step(layers, switch, filler_us, host_ops, scratch), switch, arms,
                             steps, warmup=3, device=ctx.device, seed=seed)
    row: dict[str, Any] = {
        "filler_us": filler_us, "filler_gpu_us": filler_gpu_us(filler_us, ctx.device), "host_ops": host_ops,
        "layers": n, "steps": steps, "per_arm": effects(per_arm, n), "switched": effects(switched, n),
        "switch_seen": dict(switch.seen),
        "samples": {"per_arm": {a: vars(s) for a, s in per_arm.items()},
                    "switched": {a: vars(s) for a, s in switched.items()}},
    }
    label, pos = regime_of(row["per_arm"]["split"]["value"], op["dg"]["value"], op["dh"]["value"])
    row["matches"], row["position"] = label, None if pos is None else round(pos, 3)
    return row


def measure(args: argparse.Namespace, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The whole declared sweep; returns the JSON document (cases in the order run)."""
    import torch

    from spx.bench.context import setup, warm_up_gpu
    from spx.bench.correctness import check_correctness, check_pad_free
    from spx.bench.fingerprint import collect_environment
    from spx.research.eager_step import build_layers, build_projections, split_op

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
            pf_diff = check_pad_free(ctx, first, first.pad_free(), first.split())
            op = per_op(ctx, first) | {"tokens": tokens, "padded_tokens": first.plan.padded_tokens,
                                       "max_abs_error": err, "max_abs_reference": ref,
                                       "pad_free_max_abs_diff": pf_diff, "pad_free_rank": first.pad_free_rank}
            doc["per_op"][str(tokens)] = op
            for host_ops in args.host_ops:
                for filler in args.fillers:
                    if time.monotonic() - t0 > args.budget_s:
                        doc["skipped"].append({"tokens": tokens, "host_ops": host_ops, "filler_us": filler})
                        continue
                    row = run_case(ctx, layers, filler, host_ops, args.steps, op, seed=len(doc["cases"])) | {"tokens": tokens}
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


HEADER = (f"{'tokens':>6} {'hostops':>7} {'filler':>7} {'rep ms':>7} {'i/w':>5} | per arm: {'split':>22} {'pad-free':>22} "
          f"{'saves':>7} | switched: {'split':>22} {'pad-free':>22} {'saves':>7} | {'Δg':>7} {'Δh':>7} {'Δg pf':>7}  matches")


def _eff(e: dict[str, Any]) -> str:
    return f"{e['value']:+.1f} [{e['low']:+.1f}, {e['high']:+.1f}]"


def format_row(row: dict[str, Any], op: dict[str, Any]) -> str:
    """One table line of a case: µs per layer, per-arm and switched designs side by side."""
    pa, sw = row["per_arm"], row["switched"]
    filler = row["filler_gpu_us"] if row["filler_gpu_us"] is not None else row["filler_us"]
    pos = "" if row["position"] is None else f" ({row['position']:.2f})"
    return (f"{row['tokens']:>6} {row['host_ops']:>7} {filler:>7.0f} {pa['medians_ms']['replicated']:>7.2f} "
            f"{pa['replicated_issue_over_wall']:>5.2f} | {_eff(pa['split']):>31} {_eff(pa['pad_free']):>22} "
            f"{pa['pad_free_saves']['value']:>+7.1f} | {_eff(sw['split']):>32} {_eff(sw['pad_free']):>22} "
            f"{sw['pad_free_saves']['value']:>+7.1f} | {op['dg']['value']:>+7.1f} {op['dh']['value']:>+7.1f} "
            f"{op['dg_pad_free']['value']:>+7.1f}  {row['matches']}{pos}")


MD_HEADER = ("| tokens | host ops | filler (GPU µs) | replicated step ms | issue / wall | per arm: split µs/layer [95 %] | "
             "per arm: pad-free | per arm: pad-free saves | switched: split | switched: pad-free | switched: pad-free saves "
             "| Δg split | Δh split | Δg pad-free | matches (position) |\n"
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")


def format_row_md(row: dict[str, Any], op: dict[str, Any]) -> str:
    """The case as a Markdown table row (columns of :data:`MD_HEADER`)."""
    pa, sw = row["per_arm"], row["switched"]
    filler = row["filler_gpu_us"] if row["filler_gpu_us"] is not None else row["filler_us"]
    pos = "" if row["position"] is None else f" ({row['position']:.2f})"
    return (f"| {row['tokens']} | {row['host_ops']} | {filler:.0f} | {pa['medians_ms']['replicated']:.2f} | "
            f"{pa['replicated_issue_over_wall']:.2f} | **{_eff(pa['split'])}** | {_eff(pa['pad_free'])} | "
            f"{_eff(pa['pad_free_saves'])} | **{_eff(sw['split'])}** | {_eff(sw['pad_free'])} | "
            f"{_eff(sw['pad_free_saves'])} | {op['dg']['value']:+.1f} | {op['dh']['value']:+.1f} | "
            f"{op['dg_pad_free']['value']:+.1f} | {row['matches']}{pos} |")


PER_OP_MD = ("| tokens | M_pad | replicated span µs | split span µs | pad-free span µs | pad-free saves (span) µs [95 %] "
             "| split host µs | pad-free host µs | pad-free saves (host) µs [95 %] | max abs diff pad-free vs sp_shard |\n"
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")


def format_op_md(op: dict[str, Any]) -> str:
    """One per-op row (columns of :data:`PER_OP_MD`)."""
    return (f"| {op['tokens']} | {op['padded_tokens']} | {op['replicated_span_us']:.1f} | {op['split_span_us']:.1f} | "
            f"{op['pad_free_span_us']:.1f} | {_eff(op['saved_g'])} | {op['split_host_us']:.1f} | "
            f"{op['pad_free_host_us']:.1f} | {_eff(op['saved_h'])} | {op['pad_free_max_abs_diff']:g} |")


def write(doc: dict[str, Any], out: Path) -> None:
    """DIR/eager_step.json (everything) and DIR/eager_step.csv (one row per case and design, no samples)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "eager_step.json").write_text(json.dumps(doc, indent=1))
    fields = ["tokens", "host_ops", "filler_us", "filler_gpu_us", "design", "replicated_wall_ms", "split_us",
              "split_low", "split_high", "pad_free_us", "pad_free_low", "pad_free_high", "pad_free_saves_us",
              "split_events_us", "dg_us", "dh_us", "dg_pad_free_us", "matches", "position"]
    with (out / "eager_step.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for row in doc["cases"]:
            op = doc["per_op"][str(row["tokens"])]
            for design in ("per_arm", "switched"):
                e = row[design]
                w.writerow({k: row.get(k) for k in fields} | {
                    "design": design, "replicated_wall_ms": e["medians_ms"]["replicated"],
                    "split_us": e["split"]["value"], "split_low": e["split"]["low"], "split_high": e["split"]["high"],
                    "pad_free_us": e["pad_free"]["value"], "pad_free_low": e["pad_free"]["low"],
                    "pad_free_high": e["pad_free"]["high"], "pad_free_saves_us": e["pad_free_saves"]["value"],
                    "split_events_us": e.get("split_events", {}).get("value"), "dg_us": op["dg"]["value"],
                    "dh_us": op["dh"]["value"], "dg_pad_free_us": op["dg_pad_free"]["value"]})


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
    if args.markdown:
        print(PER_OP_MD)
        for op in doc["per_op"].values():
            print(format_op_md(op))
        print()
    print(MD_HEADER if args.markdown else HEADER)
    for row in doc["cases"]:
        print((format_row_md if args.markdown else format_row)(row, doc["per_op"][str(row["tokens"])]))
    if doc["skipped"]:
        print(f"skipped past the budget: {len(doc['skipped'])} case(s)")


if __name__ == "__main__":
    main()
