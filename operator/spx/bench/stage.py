"""Time DeepSeek-V4.1's whole input-projection stage per layer kind: replicated, split, split-all.

What one layer issues (:mod:`spx.api.stage` for the vLLM sources): ``fused_wqa_wkv`` on the current
stream (through the spec's GEMM backend, as :mod:`spx.bench.kernel` times it), the compressor's
``torch.mm(h, W_c.T, out_dtype=torch.float32)`` (bf16 weight) and the indexer's bf16
``torch.nn.functional.linear(h, W_i)``; the two light GEMMs on two auxiliary streams while
``tokens <= multiStreamThreshold`` (``execute_in_parallel``: the aux streams wait on the current
stream, run, and the current stream waits on them), sequentially on the current stream above.

Candidates: ``replicated`` (nothing split), ``split`` (``fused_wqa_wkv`` split as vLLM's split path:
``sp_shard``, GEMM, all-gather, trim), ``split-all`` (the compressor and indexer split the same way,
the seed PR's last column). Each is timed by :func:`spx.bench.timing.bench_time` in the mode vLLM
would run that batch (graph or eager), with GPU span and host issue time. With fewer ranks than TP
every gather is modelled (``kernel.gatherModel``: GPU time added to the span, host time to the host
time, both labelled modelled). Run: ``python -m spx.bench.stage SPEC.yaml --out stage.json``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from spx.analysis.execution import stream_mode
from spx.api.spec import ExperimentSpec
from spx.api.stage import LayerKindSpec, StageResult, StageRow, StageSpec, StageTimes
from spx.bench.candidates import PointPlan, activations, gather_fn
from spx.bench.context import BenchContext, point_execution, setup, timing_protocol, warm_up_gpu
from spx.bench.fingerprint import host_cpu_model
from spx.bench.sequence_parallel import resolve_sp_shard, sp_trim
from spx.bench.timing import bench_time
from spx.vocabulary import CPU_NOTE, EXECUTIONS, GEMM_BACKENDS, STAGE_CANDIDATES, StageStreams

if TYPE_CHECKING:
    import torch


def compressor_mm(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``torch.mm(h, w.T, out_dtype=torch.float32)``: the compressor's ``kv_score`` (bf16 in, fp32 out).

    Where this torch's ``mm`` takes no ``out_dtype`` for the device (CPU builds), the same product in
    fp32: ``h.float() @ w.float().T`` (a CPU smoke run only).
    """
    import torch

    try:
        return torch.mm(h, w.t(), out_dtype=torch.float32)
    except (TypeError, RuntimeError):
        return h.float() @ w.float().t()


class _Layer:
    """The tensors and callables of one layer kind at one token count."""

    def __init__(self, ctx: BenchContext, kind: LayerKindSpec, tokens: int, stage: StageSpec) -> None:
        import torch

        self.ctx, self.kind, self.tokens = ctx, kind, tokens
        k = ctx.spec.projection.hidden_size
        self.plan = PointPlan.of(tokens, ctx.tp)
        self.h = activations(ctx, tokens, k)
        gen = torch.Generator(device=ctx.device).manual_seed(ctx.spec.kernel.seed + 7)
        self.w_c = (torch.randn(kind.compressor_output_size, k, generator=gen, device=ctx.device) / k**0.5).to(ctx.dtype) \
            if kind.compressor_output_size else None
        self.w_i = (torch.randn(kind.indexer_heads, k, generator=gen, device=ctx.device) / k**0.5).to(ctx.dtype) \
            if kind.indexer_heads else None
        self.streams: StageStreams = "none" if self.w_c is None and self.w_i is None else stream_mode(tokens, stage.multi_stream_threshold)
        cuda = ctx.device.type == "cuda"
        self.aux = [torch.cuda.Stream(ctx.device), torch.cuda.Stream(ctx.device)] if cuda and self.streams == "parallel" else []
        self.shard, _ = resolve_sp_shard(ctx.tp, ctx.rank, use_vllm=ctx.gather_backend == "vllm")
        self.modelled = ctx.gather_source == "modelled" or ctx.gather_backend == "none"
        self.gathers: dict[tuple[int, str], Callable[[torch.Tensor], torch.Tensor]] = {}

    def _gathered(self, y: torch.Tensor) -> torch.Tensor:
        if self.modelled or self.ctx.tp == 1:
            return y
        key = (y.shape[1], str(y.dtype))
        if key not in self.gathers:
            self.gathers[key] = gather_fn(self.ctx, self.plan.padded_tokens, y.shape[1], y.dtype)
        return sp_trim(self.gathers[key](y), self.tokens)

    def _split(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        return self._gathered(fn(self.shard(self.h)))

    def light(self, split: bool) -> list[Callable[[], torch.Tensor]]:
        """The compressor and indexer GEMMs of this kind (replicated or split)."""
        import torch

        fns: list[Callable[[], torch.Tensor]] = []
        w_c, w_i = self.w_c, self.w_i
        if w_c is not None:
            fns.append((lambda: self._split(lambda x: compressor_mm(x, w_c))) if split else (lambda: compressor_mm(self.h, w_c)))
        if w_i is not None:
            fns.append((lambda: self._split(lambda x: torch.nn.functional.linear(x, w_i))) if split
                       else (lambda: torch.nn.functional.linear(self.h, w_i)))
        return fns

    def candidate(self, name: str) -> Callable[[], torch.Tensor]:
        """One candidate's whole stage as a zero-argument callable returning the main output."""
        import torch

        proj = self.ctx.projection
        main: Callable[[], torch.Tensor] = (lambda: proj(self.h)) if name == "replicated" else (lambda: self._split(proj))
        light = self.light(split=name == "split-all")
        aux = self.aux

        def run() -> torch.Tensor:
            if not light:
                return main()
            if not aux:  # sequential on the current stream (or CPU)
                out = main()
                for fn in light:
                    fn()
                return out
            cur = torch.cuda.current_stream()
            for s in aux:
                s.wait_stream(cur)
            out = main()
            for s, fn in zip(aux, light, strict=False):
                with torch.cuda.stream(s):
                    fn()
            for s in aux:
                cur.wait_stream(s)
            return out

        return run

    def modelled_gathers(self, name: str, mode: str) -> tuple[float, float]:
        """(GPU µs, host µs) of this candidate's modelled all-gathers (0, 0 when measured or none).

        In a CUDA graph (``mode`` ``graph``) a gather adds no host time of its own.
        """
        if not self.modelled or self.ctx.tp == 1 or name == "replicated":
            return 0.0, 0.0
        model = self.ctx.spec.kernel.gather_model
        widths = [(self.ctx.spec.projection.output_size, self.ctx.dtype.itemsize)]
        if name == "split-all":
            if self.kind.compressor_output_size:
                widths.append((self.kind.compressor_output_size, 4))  # fp32 output
            if self.kind.indexer_heads:
                widths.append((self.kind.indexer_heads, self.ctx.dtype.itemsize))
        gpu = sum(model.gather_us(self.plan.padded_tokens, n, b, self.ctx.tp) for n, b in widths)
        return gpu, (model.host_us * len(widths) if mode == "eager" else 0.0)


def _times(span: list[float], host: list[float], gather: tuple[float, float]) -> StageTimes:
    g_gpu, g_host = gather
    span = [s + g_gpu for s in span]
    host = [h + g_host for h in host]
    return StageTimes(
        gpu_us=round(statistics.median(span), 3),
        host_us=round(statistics.median(host), 3) if host else None,
        modelled_gather_us=round(g_gpu, 3),
        modelled_gather_host_us=round(g_host, 3),
    )


def measure_stage_row(ctx: BenchContext, kind: LayerKindSpec, tokens: int, stage: StageSpec) -> StageRow | None:
    """Time the three candidates of one layer kind at ``tokens`` (rank 0 gets the row, others ``None``)."""
    layer = _Layer(ctx, kind, tokens, stage)
    mode, _ = point_execution(ctx, tokens)
    timing = bench_time({name: layer.candidate(name) for name in STAGE_CANDIDATES}, timing_protocol(ctx, mode))
    if ctx.rank != 0:
        return None
    return StageRow(
        kind=kind.name, layers=len(kind.layers), tokens=tokens, execution=mode, streams=layer.streams,
        candidates={name: _times(timing.span_us[name], timing.host_us.get(name, []), layer.modelled_gathers(name, mode))
                    for name in STAGE_CANDIDATES},
    )


def run_stage(spec: ExperimentSpec) -> StageResult | None:
    """Time the stage of ``spec.stage`` (V4.1's layer kinds by default) at every token count; rank 0 returns the result.

    Raises:
        ValueError / RuntimeError: as :func:`spx.bench.context.setup`.
    """
    import torch.distributed as dist

    stage = spec.stage or StageSpec()
    tokens = stage.tokens or spec.sweep.tokens
    ctx = setup(spec)
    try:
        warm_up_gpu(ctx)
        rows = [row for t in tokens for kind in stage.layer_kinds
                if (row := measure_stage_row(ctx, kind, t, stage)) is not None]
        if ctx.rank != 0:
            return None
        notes = []
        if ctx.device.type == "cpu":
            notes.append(CPU_NOTE)
        if ctx.gather_source == "modelled" and ctx.tp > 1:
            notes.append(f"every all-gather modelled ({ctx.world_size} rank(s) < TP {ctx.tp}): GPU "
                         f"{spec.kernel.gather_model.describe()}; host {spec.kernel.gather_model.host_us:g} µs each (modelled)")
        return StageResult(gemm_backend=ctx.gemm_backend, gather_source=ctx.gather_source, device=ctx.device_type,
                           timer=ctx.timer, chunk_tokens=stage.chunk_tokens, rows=rows, warnings=notes,
                           host_cpu=host_cpu_model())
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    """``python -m spx.bench.stage SPEC.yaml [--gemm-backend B] [--execution M] [--out stage.json]``: print the table."""
    from spx.analysis.stage import stage_table_lines
    from spx.api import load_experiment

    parser = argparse.ArgumentParser(prog="python -m spx.bench.stage", description=__doc__.split("\n")[0])
    parser.add_argument("spec")
    parser.add_argument("--gemm-backend", choices=GEMM_BACKENDS)
    parser.add_argument("--execution", choices=EXECUTIONS)
    parser.add_argument("--tokens", help="comma-separated token counts (overrides stage.tokens)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    spec = load_experiment(Path(args.spec).read_text()).spec
    kernel = spec.kernel.model_copy(update={k: v for k, v in (("gemm_backend", args.gemm_backend),
                                                                ("execution", args.execution)) if v})
    stage = (spec.stage or StageSpec()).model_copy(
        update={"tokens": [int(t) for t in args.tokens.split(",")]} if args.tokens else {})
    spec = spec.model_copy(update={"kernel": kernel, "stage": stage})
    result = run_stage(spec)
    if result is None:
        return 0
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        from spx.files import write_atomic

        write_atomic(args.out, result.model_dump_json(by_alias=True, indent=1))
    print("\n".join(stage_table_lines(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
