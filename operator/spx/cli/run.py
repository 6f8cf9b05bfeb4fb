"""``spx run``: an experiment's kernel benchmark on this host, then (``--serving``) its vLLM benches.

A thin layer over :func:`spx.runner.experiment.run_experiment` (the pipeline the bench pod runs):
read and validate the file → refuse what cannot run (``--serving`` without ``spec.serving``) → lock
``--out`` for the run's lifetime → run the experiment (it plans, runs, judges and writes
``status.json``) → print the report and draw the plot → map the outcome to an exit code.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from rich.console import Console
from rich.markup import escape

from spx.api import ExperimentSpec, KernelStatus, PointResult, dump_model, wire
from spx.api.exit_codes import EXIT_FAIL, EXIT_INTERRUPTED, EXIT_OK
from spx.cli.common import (
    DEFAULT_OUT_ROOT,
    STDIN,
    UsageError,
    apply_overrides,
    err_console,
    make_console,
    parse_tokens,
    read_experiment,
)
from spx.cli.registry import command
from spx.cli.report import draw_plot, gpu_label, table_title
from spx.vocabulary import CPU_NOTE, DEVICES, GEMM_BACKENDS, PLOT_FILE, RESULT_FILE, SERVING_DIR, STATUS_FILE, one_of

if TYPE_CHECKING:
    from spx.api.accuracy import AccuracyResult, AccuracyStatus
    from spx.api.serving import ServingResult, ServingStatus
    from spx.api.step import StepResult
    from spx.runner.experiment import ExperimentOutcome


def _run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="experiment YAML (a ShardedProjectionExperiment); - reads standard input")
    p.add_argument("--out", metavar="DIR", help=f"output directory (default: {DEFAULT_OUT_ROOT}/<metadata.name>)")
    p.add_argument("--nproc", type=int, metavar="N",
                   help="ranks to start (default: visible GPUs, else 2 on CPU; capped at TP); fewer than TP: gather auto "
                        "models the all-gather, an explicit nccl/gloo/vllm is refused")
    p.add_argument("--device", choices=DEVICES,
                   help="override spec.kernel.device; --device cpu runs a GPU-sized spec on CPU anyway (a smoke run)")
    p.add_argument("--gemm-backend", metavar="B", help=f"override spec.kernel.gemmBackend ({one_of(GEMM_BACKENDS)})")
    p.add_argument("--samples", type=int, metavar="N", help="override spec.kernel.samples")
    p.add_argument("--tokens", metavar="LIST", help="override spec.sweep.tokens, comma-separated (e.g. 6,12,2048)")
    p.add_argument("--summary-file", metavar="PATH",
                   help="also write a compact ResultSummary (≤ 4096 bytes) here, e.g. /dev/termination-log")
    p.add_argument("--jsonl", action="store_true",
                   help='JSON lines on stdout: {"kind":"point","point":{...}} per point, then {"kind":"result","result":{...}}; human output goes to stderr')
    p.add_argument("--overwrite", action="store_true",
                   help="replace the results of an earlier run in --out (default: refuse, so nothing measured is lost); "
                        "a run refused before it starts or interrupted before its first point keeps them")
    p.add_argument("--serving", action="store_true",
                   help="after a completed kernel bench, run spec.serving / spec.accuracy (the vLLM serving A/B, "
                        "GSM8K and the step A/B of spec.serving.step; needs vLLM and the GPUs) into OUT/serving; with "
                        '--jsonl their results follow as {"kind":"serving",…} / {"kind":"accuracy",…} / '
                        '{"kind":"step",…} lines and the summary gets their statuses; '
                        "an error for a spec without spec.serving")
    p.add_argument("--vllm", metavar="CMD",
                   help="with --serving (an error without it): the vLLM CLI (argv prefix, split on spaces; default vllm)")


def check_writable(path: str, experiment_file: str | None = None) -> None:
    """Fail before measuring when the summary file can't be written (``/dev/termination-log`` in a pod), or
    would destroy something: the experiment file itself, or a file with content that is not an earlier
    ResultSummary (a run's ``result.json``/``status.json``, anything else). Empty files and devices are fine.

    Raises:
        UsageError: the file can't be opened for writing, or it holds something else.
    """
    import json
    import os

    from spx.api.result import SUMMARY_SCHEMA_VERSION

    if experiment_file and experiment_file != STDIN and os.path.exists(path) and os.path.exists(experiment_file) \
            and os.path.samefile(path, experiment_file):
        raise UsageError(f"--summary-file {path} is the experiment file itself: writing the summary there would "
                         "replace the experiment; choose another path (in a pod: /dev/termination-log)")
    if os.path.isfile(path) and os.path.getsize(path) > 0:
        try:
            with open(path, "rb") as f:
                kind = json.loads(f.read(8192)).get("schemaVersion")
        except (OSError, ValueError, AttributeError, RecursionError):
            kind = None
        if kind != SUMMARY_SCHEMA_VERSION:
            raise UsageError(f"--summary-file {path} already holds something other than an spx summary (e.g. an "
                             "experiment or a run's result/status); it is not overwritten: choose another path, or "
                             "remove the file first")
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise UsageError(f"--summary-file {path} is not writable: {exc.strerror or exc}") from None


@command("run", "Run an experiment's kernel benchmark on this host (one process per rank).", _run_args,
         outlives_stdout=True)
def cmd_run(args: argparse.Namespace) -> int:
    if args.vllm is not None and not args.serving:
        raise UsageError(f"--vllm {args.vllm[:80]!r} is used only with --serving (the vLLM benches): add --serving, "
                         "or drop --vllm")
    exp = read_experiment(args.file)
    tokens = parse_tokens(args.tokens) if args.tokens is not None else None
    spec = apply_overrides(exp.spec, gemm_backend=args.gemm_backend, samples=args.samples, tokens=tokens,
                           device=args.device)
    if args.serving and spec.serving is None:
        raise UsageError(f"--serving: {args.file} has no spec.serving, so there is no vLLM bench to run; "
                         "add a spec.serving section or drop --serving")
    if args.nproc is not None and args.nproc < 1:
        raise UsageError(f"--nproc must be >= 1 (got {args.nproc})")
    if args.serving:  # before the kernel sweep (hours on a TP8 node): the vLLM command, modelPath, the port
        from spx.serving.preflight import serving_problems

        if problems := serving_problems(spec, (args.vllm or "vllm").split()):
            raise UsageError("--serving: the vLLM benches would not start after the kernel sweep (nothing was measured): "
                             + "; ".join(problems))
    elif spec.serving is not None:
        err_console().print(f"note: {args.file} has a spec.serving section: add --serving to run its vLLM benches "
                            "after the kernel sweep (or run them alone: spx serving FILE)", highlight=False,
                            markup=False, soft_wrap=True)
    name = exp.metadata.name
    if args.out is not None and not args.out.strip():
        raise UsageError(f"--out {args.out!r} is empty: give a directory (or leave --out out for "
                         f"{DEFAULT_OUT_ROOT}/{name})")
    out = Path(args.out) if args.out is not None else Path(DEFAULT_OUT_ROOT) / name
    if args.summary_file:
        check_writable(args.summary_file, args.file)
    from spx.rundir import RunDirectory
    from spx.serving.server import interrupts_stop_servers

    with RunDirectory(out).locked() as run_dir:
        aside = run_dir.prepare(args.overwrite)
        code: int | None = None
        try:
            run_dir.begin(planned_tokens=spec.sweep.tokens)
            with interrupts_stop_servers():  # SIGTERM as Ctrl-C: ranks and vLLM servers stopped, what ran is kept
                code = _run_locked(args, spec, name, out)
            return code
        finally:
            # refused before it started (an exception) or Ctrl-C before the first point: keep the earlier run
            keep_new = run_dir.measured_points() > 0 or code not in (None, EXIT_INTERRUPTED)
            run_dir.stop()
            run_dir.settle(aside, keep_new=keep_new)
            if keep_new or aside is None:
                with contextlib.suppress(OSError):  # (a full disk: the run's own error says so)
                    run_dir.finish()
            if aside is not None and not keep_new:
                err_console().print(f"nothing was measured: the earlier run in {out} is kept (this run's empty "
                                    "result and logs are dropped)", highlight=False, markup=False, soft_wrap=True)


def _run_locked(args: argparse.Namespace, spec: ExperimentSpec, name: str, out: Path) -> int:
    from spx.cli.progress import progress_for
    from spx.runner.experiment import ExperimentOptions, RunHooks, run_experiment
    from spx.runner.local import RunnerError

    console = make_console(stderr=bool(args.jsonl))
    stdout = sys.stdout
    tp = spec.parallelism.tensor_parallel_size
    if args.nproc is not None and args.nproc > tp:
        err_console().print(f"note: --nproc {args.nproc} capped at tensorParallelSize {tp}", highlight=False, markup=False)

    on_point, on_documents, on_step = _jsonl_hooks(stdout) if args.jsonl else (None, None, None)

    def summary_error(path: str, exc: OSError) -> None:
        err_console().print(f"[yellow]summary not written to {escape(path)}:[/] {escape(str(exc))}")

    import logging

    logging.raiseExceptions = False  # a full disk fails the run once below, not once per launcher log record
    try:
        outcome = run_experiment(
            spec, out, name=name,
            options=ExperimentOptions(nproc=args.nproc, serving=args.serving,
                                      vllm_command=(args.vllm or "vllm").split(), summary_file=args.summary_file),
            hooks=RunHooks(on_point=on_point, progress=progress_for(console),
                           on_kernel=lambda o: _kernel_report(o, spec, name, out, console, stdout, jsonl=args.jsonl),
                           on_vllm_documents=on_documents, on_step_document=on_step, on_summary_error=summary_error),
        )
    except RunnerError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:  # the output directory can't be written any more (a full disk): the run failed
        err_console().print(f"error: the run failed: cannot write results under {out}: {exc.strerror or exc}; "
                            "free space there (or choose another --out) and run again", highlight=False,
                            markup=False, soft_wrap=True)
        return EXIT_FAIL

    if not outcome.kernel_completed:
        if args.serving:
            console.print("serving A/B and GSM8K not run: the kernel bench did not complete", highlight=False,
                          markup=False)
        _report_failure(outcome, spec)
        return EXIT_INTERRUPTED if outcome.interrupted else EXIT_FAIL
    return _vllm_report(outcome, out, console) if outcome.vllm_ran else EXIT_OK


def _jsonl_hooks(stdout: TextIO) -> tuple[Callable[[PointResult], None],
                                          Callable[[ServingResult | None, AccuracyResult | None], None],
                                          Callable[[StepResult], None]]:
    """``--jsonl``'s hooks: each point, serving/accuracy document and step document as one line on ``stdout``."""

    def on_point(p: PointResult) -> None:
        wire.write_line(stdout, "point", dump_model(p))

    def on_documents(serving: ServingResult | None, accuracy: AccuracyResult | None) -> None:
        if serving is not None:
            wire.write_line(stdout, "serving", dump_model(serving))
        if accuracy is not None:
            wire.write_line(stdout, "accuracy", dump_model(accuracy))

    def on_step(step: StepResult) -> None:
        wire.write_line(stdout, "step", dump_model(step))

    return on_point, on_documents, on_step


def _vllm_report(outcome: ExperimentOutcome, out: Path, console: Console) -> int:
    """What the vLLM benches of a completed kernel run said (serving, accuracy, step, the verdict over every
    gate) and the exit code: interrupted, failed (a vLLM bench error) or ok."""
    if outcome.vllm_error:
        err_console().print(f"[bold red]{escape(outcome.vllm_error)}[/]", highlight=False)
    for line in vllm_report_lines(outcome.serving, outcome.accuracy):
        console.print(line, highlight=False, markup=False)
    if outcome.step is not None:
        from spx.cli.serving_lines import step_lines

        for line in step_lines(outcome.step):
            console.print(line, highlight=False, markup=False)
    if outcome.status.verdict is not None:
        console.print(f"verdict over every gate: {outcome.status.verdict}", highlight=False, markup=False)
    console.print(f"results: {out / STATUS_FILE}, {out / SERVING_DIR}", highlight=False, markup=False)
    if outcome.stopped:
        return EXIT_INTERRUPTED
    return EXIT_FAIL if outcome.vllm_error else EXIT_OK


def _kernel_report(outcome: ExperimentOutcome, spec: ExperimentSpec, name: str, out: Path, console: Console,
                   stdout: TextIO, *, jsonl: bool) -> None:
    """The kernel bench's report and plot, printed before the vLLM step starts."""
    from spx.cli.decision import print_report
    from spx.cli.tables import partial_extent
    from spx.runner.experiment import is_cpu

    result, judgement, tp = outcome.result, outcome.judgement, spec.parallelism.tensor_parallel_size
    cpu = is_cpu(result)
    notes = [f"{outcome.run.nproc} rank(s), timer {result.timer}",
             *[w for w in result.warnings if w != CPU_NOTE]]
    listed = set(spec.sweep.tokens)  # (an adaptive sweep adds counts of its own)
    partial = partial_extent(len(listed & {p.tokens for p in result.points}), len(listed)) if judgement.partial else None
    print_report(
        console, judgement.kernel or KernelStatus(), verdict=judgement.verdict, reasons=judgement.reasons,
        title=table_title(name, result.environment, result.gemm_backend, result.gather_source, tp, cpu), cpu=cpu,
        gate_threshold_tokens=spec.gate.threshold_tokens, notes=notes, partial=partial,
    )
    if judgement.kernel is not None and judgement.kernel.points:
        draw_plot(console, judgement.kernel, out / PLOT_FILE, name=name, gpu=gpu_label(result.environment, cpu),
                  gemm_backend=result.gemm_backend, gather_source=result.gather_source, cpu=cpu,
                  gate_threshold=spec.gate.threshold_tokens, tp=tp, partial=partial)
    console.print(f"results: {out / STATUS_FILE}, {out / RESULT_FILE}", highlight=False, markup=False)
    if jsonl:
        wire.write_line(stdout, "result", dump_model(result))


def _report_failure(outcome: ExperimentOutcome, spec: ExperimentSpec) -> None:
    """On stderr: the error, the log that holds the failing rank's traceback, what was kept."""
    from spx.runner.forensics import traceback_log

    run, err = outcome.run, err_console()
    result = run.result
    err.print(f"[bold red]benchmark failed:[/] {escape(result.error or '')}", highlight=False)
    if run.failures:
        f = run.failures[0]
        path, what = traceback_log(f)
        err.print(f"rank {f.rank} log ({what}): {path}", highlight=False, markup=False)
    if result.points:
        kept = (f"partial result kept: {run.out_dir / RESULT_FILE} ({len(result.points)} of {len(spec.sweep.tokens)} "
                f"token counts); logs: {run.log_dir}")
    else:
        kept = (f"no token count was measured, so no result was kept ({run.out_dir / RESULT_FILE} records only the "
                f"error); logs: {run.log_dir}")
    err.print(kept, highlight=False, markup=False)


def vllm_report_lines(serving: ServingStatus | None, accuracy: AccuracyStatus | None) -> list[str]:
    """Plain lines on the serving A/B's and GSM8K's outcomes."""
    lines: list[str] = []
    if serving is not None:
        lines.append(f"serving A/B: gate {'passed' if serving.gate_passed else 'FAILED' if serving.gate_passed is False else 'inconclusive'}")
        for p in serving.points:
            change = "—" if p.change_pct is None else f"{p.change_pct:+.2f}%"
            lines.append(f"  {p.name}: {p.metric} main {_figure(p.main_mean)} split {_figure(p.split_mean)} {p.unit}, "
                         f"change {change}")
        lines += [f"  failed: {f}" for f in serving.failures]
    if accuracy is not None:  # (its reasons may already start with "GSM8K: ")
        reasons = [r.removeprefix("GSM8K: ") for r in accuracy.reasons]
        lines.append("GSM8K: " + ("; ".join(reasons) or "no result"))
    return lines


def _figure(value: float | None) -> str:
    """A measured mean as a report shows it: 4 significant figures (``22.35``), ``—`` when absent."""
    return "—" if value is None else f"{value:.4g}"
