"""``spx run``: an experiment's kernel benchmark on this host, then (``--serving``) its vLLM benches.

Order: read and validate the file → refuse what cannot run (``--serving`` without ``spec.serving``) →
lock ``--out`` for the run's lifetime → plan the run (device, ranks, the time/memory estimate that
refuses a run this host cannot hold or a GPU-sized spec on CPU) → run → judge
(:func:`spx.analysis.judge.judge`) → ``status.json``, the report, the plot.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from rich.console import Console
from rich.markup import escape

from spx.analysis.judge import Judgement, judge, local_status
from spx.api import ExperimentSpec, ExperimentStatus, KernelResult, KernelStatus, PointResult, dump_model
from spx.api.base import utc_now
from spx.api.exit_codes import EXIT_FAIL, EXIT_INTERRUPTED, EXIT_OK
from spx.cli import outdir
from spx.cli.common import (
    DEFAULT_OUT_ROOT,
    UsageError,
    apply_overrides,
    err_console,
    make_console,
    parse_tokens,
    read_experiment,
)
from spx.cli.registry import command
from spx.cli.report import draw_plot, gpu_label, table_title
from spx.cli.summary import build_summary, emit_jsonl, write_summary
from spx.vocabulary import GEMM_BACKENDS, one_of

if TYPE_CHECKING:
    from spx.api.accuracy import AccuracyResult, AccuracyStatus
    from spx.api.serving import ServingResult, ServingStatus
    from spx.runner.local import LocalRunOutcome


def _run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="experiment YAML (a ShardedProjectionExperiment)")
    p.add_argument("--out", metavar="DIR", help=f"output directory (default: {DEFAULT_OUT_ROOT}/<metadata.name>)")
    p.add_argument("--nproc", type=int, metavar="N",
                   help="ranks to start (default: visible GPUs, else 2 on CPU; capped at TP; fewer than TP: the gather is modelled)")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"),
                   help="override spec.kernel.device; --device cpu runs a GPU-sized spec on CPU anyway (a smoke run)")
    p.add_argument("--gemm-backend", metavar="B", help=f"override spec.kernel.gemmBackend ({one_of(GEMM_BACKENDS)})")
    p.add_argument("--samples", type=int, metavar="N", help="override spec.kernel.samples")
    p.add_argument("--tokens", metavar="LIST", help="override spec.sweep.tokens, comma-separated (e.g. 6,12,2048)")
    p.add_argument("--summary-file", metavar="PATH",
                   help="also write a compact ResultSummary (≤ 4096 bytes) here, e.g. /dev/termination-log")
    p.add_argument("--jsonl", action="store_true",
                   help='JSON lines on stdout: {"kind":"point","point":{...}} per point, then {"kind":"result","result":{...}}; human output goes to stderr')
    p.add_argument("--overwrite", action="store_true",
                   help="replace the results of an earlier run in --out (default: refuse, so nothing measured is lost)")
    p.add_argument("--serving", action="store_true",
                   help="after a completed kernel bench, run spec.serving / spec.accuracy (the vLLM serving A/B and "
                        "GSM8K; needs vLLM and the GPUs) into OUT/serving; with --jsonl their results follow as "
                        '{"kind":"serving",…} / {"kind":"accuracy",…} lines and the summary gets their gates; '
                        "an error for a spec without spec.serving")
    p.add_argument("--vllm", default="vllm", metavar="CMD", help="with --serving: the vLLM CLI (argv prefix, split on spaces)")


def check_writable(path: str) -> None:
    """Fail before measuring when the summary file can't be written (``/dev/termination-log`` in a pod).

    Raises:
        UsageError: the file can't be opened for writing.
    """
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise UsageError(f"--summary-file {path} is not writable: {exc.strerror or exc}") from None


def is_cpu(result: KernelResult) -> bool:
    """The result comes from a CPU smoke run."""
    return result.device == "cpu" or result.environment.device == "cpu"


def build_status(result: KernelResult, judgement: Judgement) -> ExperimentStatus:
    """``status.json`` of a local run: :func:`spx.analysis.judge.local_status` of ``judgement``."""
    from spx.cli.tables import CPU_NOTE

    summary = f"{len(result.points)} token counts measured"
    if result.wall_seconds is not None:
        summary += f" in {result.wall_seconds:.1f} s"
    return local_status(judgement, now=utc_now(), started_at=result.started_at, finished_at=result.finished_at,
                        environment=result.environment, completed_summary=summary,
                        note=CPU_NOTE if is_cpu(result) else None)


def _write_status(out: Path, status: ExperimentStatus) -> None:
    (out / "status.json").write_text(json.dumps(dump_model(status), indent=1) + "\n", encoding="utf-8")


@command("run", "Run an experiment's kernel benchmark on this host (one process per rank).", _run_args)
def cmd_run(args: argparse.Namespace) -> int:
    exp = read_experiment(args.file)
    tokens = parse_tokens(args.tokens) if args.tokens is not None else None
    spec = apply_overrides(exp.spec, gemm_backend=args.gemm_backend, samples=args.samples, tokens=tokens,
                           device=args.device)
    if args.serving and spec.serving is None:
        raise UsageError(f"--serving: {args.file} has no spec.serving, so there is no vLLM bench to run; "
                         "add a spec.serving section or drop --serving")
    if args.nproc is not None and args.nproc < 1:
        raise UsageError(f"--nproc must be >= 1 (got {args.nproc})")
    name = exp.metadata.name
    out = Path(args.out) if args.out else Path(DEFAULT_OUT_ROOT) / name
    if args.summary_file:
        check_writable(args.summary_file)
    with outdir.locked(out):
        outdir.prepare(out, args.overwrite)
        return _run_locked(args, spec, name, out)


def _run_locked(args: argparse.Namespace, spec: ExperimentSpec, name: str, out: Path) -> int:
    from spx.cli.progress import progress_for
    from spx.cli.tables import CPU_NOTE, print_report
    from spx.runner.local import RunnerError, run_local

    console = make_console(stderr=bool(args.jsonl))
    stdout = sys.stdout
    tp = spec.parallelism.tensor_parallel_size
    if args.nproc is not None and args.nproc > tp:
        console.print(f"note: --nproc {args.nproc} capped at tensorParallelSize {tp}", highlight=False, markup=False)

    on_point: Callable[[PointResult], None] | None = None
    if args.jsonl:
        def on_point(p: PointResult) -> None:
            emit_jsonl(stdout, "point", dump_model(p))

    try:
        outcome = run_local(spec, out, nproc=args.nproc, experiment=name, on_point=on_point,
                            progress=progress_for(console), device_asked=spec.kernel.device == "cpu")
    except RunnerError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:  # the output directory can't be written
        raise UsageError(f"cannot write results under {out}: {exc.strerror or exc}") from None
    result = outcome.result
    cpu = is_cpu(result)
    judgement = judge(result, spec)
    status = build_status(result, judgement)
    _write_status(out, status)

    if args.summary_file:
        _summary(args.summary_file, result)

    notes = [f"{outcome.nproc} rank(s), timer {result.timer}", *[w for w in result.warnings if "CPU smoke run" not in w]]
    print_report(
        console, judgement.kernel or KernelStatus(), verdict=judgement.verdict, reasons=judgement.reasons,
        title=table_title(name, result.environment, result.gemm_backend, result.gather_source, tp, cpu), cpu=cpu,
        gate_threshold_tokens=spec.gate.threshold_tokens, notes=notes,
        partial=(f"{len(result.points)} of {len(spec.sweep.tokens)} token counts" if judgement.partial else None),
    )
    if judgement.kernel is not None and judgement.kernel.points:
        draw_plot(console, judgement.kernel, out / "crossover.png", name=name, gpu=gpu_label(result.environment, cpu),
                  gemm_backend=result.gemm_backend, gather_source=result.gather_source, cpu=cpu,
                  gate_threshold=spec.gate.threshold_tokens)
    if cpu:
        console.print(f"[bold yellow]{CPU_NOTE}[/]", highlight=False)
    console.print(f"results: {out / 'status.json'}, {out / 'result.json'}", highlight=False, markup=False)
    if args.jsonl:
        emit_jsonl(stdout, "result", dump_model(result))

    if status.phase != "Succeeded":
        if args.serving:
            console.print("serving A/B and GSM8K not run: the kernel bench did not complete", highlight=False,
                          markup=False)
        _report_failure(outcome, spec)
        return EXIT_INTERRUPTED if (result.error or "").startswith("interrupted (SIGINT)") else EXIT_FAIL
    if args.serving:
        return _run_vllm_step(args, spec, name, out, result, console, stdout)
    return EXIT_OK


def _summary(path: str, result: KernelResult, serving: ServingStatus | None = None,
             accuracy: AccuracyStatus | None = None) -> None:
    from spx.analysis import points_from_result

    try:
        points = points_from_result(result)
    except ValueError:
        points = []
    try:
        write_summary(path, build_summary(result, points, serving=serving, accuracy=accuracy))
    except OSError as exc:
        err_console().print(f"[yellow]summary not written to {escape(path)}:[/] {escape(str(exc))}")


def _report_failure(outcome: LocalRunOutcome, spec: ExperimentSpec) -> None:
    """On stderr: the error, the log that holds the failing rank's traceback, what was kept."""
    from spx.runner.forensics import traceback_log

    result, err = outcome.result, err_console()
    err.print(f"[bold red]benchmark failed:[/] {escape(result.error or '')}", highlight=False)
    if outcome.failures:
        f = outcome.failures[0]
        path, what = traceback_log(f)
        err.print(f"rank {f.rank} log ({what}): {path}", highlight=False, markup=False)
    err.print(
        f"partial result kept: {outcome.out_dir / 'result.json'} ({len(result.points)} of {len(spec.sweep.tokens)} "
        f"token counts); logs: {outcome.log_dir}",
        highlight=False, markup=False,
    )


def _run_vllm_step(
    args: argparse.Namespace, spec: ExperimentSpec, name: str, out: Path, result: KernelResult,
    console: Console, stdout: TextIO,
) -> int:
    """``spx run --serving`` after a completed kernel bench: the vLLM serving A/B and GSM8K.

    Their result documents follow the kernel's on stdout (``{"kind":"serving"}``, ``{"kind":"accuracy"}``;
    printed after every arm too, the last line wins), their statuses go into the summary file and
    ``status.json``, and the verdict covers their gates (:func:`~spx.analysis.judge.judge` with
    ``require_vllm``). Exit 0 when the benches ran (failed arms or points are in the results and make the
    gate Fail or Inconclusive), 1 when they could not start (an accuracy arm that is not a serving arm, a
    missing GSM8K dataset).
    """
    from spx.analysis.accuracy import summarize as summarize_accuracy
    from spx.analysis.serving import summarize as summarize_serving
    from spx.api.accuracy import AccuracyStatus
    from spx.api.serving import ServingStatus
    from spx.serving.ab import RunnerOptions, run_vllm_benchmarks

    assert spec.serving is not None
    has_points = bool(spec.serving.points)

    def emit(serving_result: ServingResult | None, accuracy_result: AccuracyResult | None) -> None:
        if not args.jsonl:
            return
        if serving_result is not None and has_points:
            emit_jsonl(stdout, "serving", dump_model(serving_result))
        if accuracy_result is not None:
            emit_jsonl(stdout, "accuracy", dump_model(accuracy_result))

    opts = RunnerOptions(vllm_command=args.vllm.split(), experiment=name, on_arm=emit)
    serving: ServingStatus | None = None
    accuracy: AccuracyStatus | None = None
    code = EXIT_OK
    try:
        outcome = run_vllm_benchmarks(spec, out / "serving", opts)
    except (ValueError, OSError) as exc:
        why = f"the vLLM benches did not start: {exc}"
        err_console().print(f"[bold red]{escape(why)}[/]", highlight=False)
        if has_points:
            serving = ServingStatus(failures=[why], reasons=[why])
        if spec.accuracy is not None:
            accuracy = AccuracyStatus(reasons=[f"GSM8K: {why}"], max_drop_points=spec.accuracy.max_drop_points)
        code = EXIT_FAIL
    else:
        emit(outcome.serving, outcome.accuracy)
        serving = summarize_serving(outcome.serving) if outcome.serving is not None else None
        accuracy = summarize_accuracy(outcome.accuracy) if outcome.accuracy is not None else None
    status = build_status(result, judge(result, spec, serving=serving, accuracy=accuracy, require_vllm=True))
    _write_status(out, status)
    if args.summary_file:
        _summary(args.summary_file, result, serving, accuracy)
    for line in vllm_report_lines(serving, accuracy):
        console.print(line, highlight=False, markup=False)
    if status.verdict is not None:
        console.print(f"verdict over every gate: {status.verdict}", highlight=False, markup=False)
    console.print(f"results: {out / 'status.json'}, {out / 'serving'}", highlight=False, markup=False)
    return code


def vllm_report_lines(serving: ServingStatus | None, accuracy: AccuracyStatus | None) -> list[str]:
    """Plain lines on the serving A/B's and GSM8K's outcomes."""
    lines: list[str] = []
    if serving is not None:
        lines.append(f"serving A/B: gate {'passed' if serving.gate_passed else 'FAILED' if serving.gate_passed is False else 'inconclusive'}")
        for p in serving.points:
            change = "—" if p.change_pct is None else f"{p.change_pct:+.2f}%"
            lines.append(f"  {p.name}: {p.metric} main {p.main_mean} split {p.split_mean} {p.unit}, change {change}")
        lines += [f"  failed: {f}" for f in serving.failures]
    if accuracy is not None:
        lines.append("GSM8K: " + ("; ".join(accuracy.reasons) or "no result"))
    return lines
