"""``spx report DIR``: re-judge a finished (or partial) run with the vLLM results its folder holds
(:mod:`spx.cli.report_vllm`: the verdict ``spx gate DIR`` reads), print the decision first
(:mod:`spx.cli.decision`) and its table, draw its plot (DIR/crossover.png when the run has none, or
``--plot PATH``; a run's own plot is never replaced unless ``--plot`` names it)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from spx.analysis.bench_docs import RunIdentity
from spx.analysis.judge import judge
from spx.api import (
    Environment,
    ExperimentStatus,
    KernelResult,
    KernelStatus,
    dump_model,
    validate_spec,
)
from spx.api.exit_codes import EXIT_OK
from spx.api.spec import spec_hash
from spx.cli.common import (
    UsageError,
    add_output_option,
    emit,
    err_console,
    make_console,
    read_experiment,
    warn,
    with_error_document,
)
from spx.cli.documents import ReportDocument
from spx.cli.registry import command
from spx.cli.report_load import (
    VLLM_SECTIONS,
    LoadedRun,
    load_run,
    relabel_warnings,
)
from spx.rundir import RunDirectory, kind_of, read_json, validated
from spx.vocabulary import PLOT_FILE


def draw_plot(
    console: Console, kernel: KernelStatus, path: Path, *, name: str, gpu: str | None, gemm_backend: str | None,
    gather_source: str | None, cpu: bool, gate_threshold: int | None, tp: int | None = None,
    partial: str | None = None, asked: bool = False, step: Any = None,
) -> None:
    """Draw the crossover plot to ``path``; a failure is printed, never raised (a plot is a convenience),
    unless the user ``asked`` for this path (``spx report --plot PATH``).

    Raises:
        UsageError: ``asked`` and the plot cannot be written (names ``--plot`` and why).
    """
    from spx.cli.plot import plot_crossover, plot_title

    try:
        plot_crossover(
            kernel, path,
            title=plot_title(name=name, gpu=gpu, gemm_backend=gemm_backend, gather_source=gather_source, cpu=cpu,
                             tp=tp, partial=partial),
            gate_threshold_tokens=gate_threshold, cpu=cpu, step=step,
        )
        console.print(f"plot: {path}", highlight=False, markup=False)
    except Exception as exc:  # a plot is a convenience: never fail a run over it
        if asked:
            raise UsageError(f"--plot {path}: cannot write the plot: {plot_problem(exc)}") from None
        console.print(f"[yellow]plot not drawn ({escape(str(path))}):[/] {escape(plot_problem(exc))}", highlight=False)


def plot_problem(exc: BaseException) -> str:
    """Why a plot was not written, in words: an ``OSError``'s reason and file, else the message."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    return str(exc)[:300] or "matplotlib could not draw it"


def check_plot_path(path: Path) -> None:
    """Refuse, before anything is analysed, a ``--plot PATH`` that cannot be a file: a directory, or
    under a file.

    Raises:
        UsageError: names ``--plot`` and what is in the way.
    """
    from spx.cli.plot import plot_format

    if path.is_dir():
        raise UsageError(f"--plot {path}: is a directory; give the PNG file to write, e.g. {path / PLOT_FILE}")
    try:
        plot_format(path)
    except ValueError as exc:
        raise UsageError(f"--plot {path}: {exc}") from None
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise UsageError(f"--plot {path}: {parent} is a file, not a directory; give a path in a directory")
            return


def gpu_label(env: Environment, cpu: bool) -> str | None:
    """``8× NVIDIA H200``, ``CPU``, or ``None`` when unknown."""
    if cpu:
        return "CPU"
    if env.gpu and env.gpu_count:
        return f"{env.gpu_count}× {env.gpu}"
    return env.gpu


def table_title(name: str, env: Environment, gemm: str | None, gather: str | None, tp: int, cpu: bool) -> str:
    """The report table's title: experiment, TP, where, GEMM backend, gather source."""
    from spx.cli.plot import backend_label

    where = gpu_label(env, cpu) or "unknown GPU"
    return f"{name}: TP{tp} on {where} · {backend_label(gemm)} · gather {gather or '?'}"


def _report_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", metavar="DIR", help="a run's output directory (result.json and/or status.json), or one of those files")
    p.add_argument("--experiment", metavar="FILE",
                   help="judge against the gate of this experiment file instead of the recorded one (the "
                        "measurement's TP and shapes are kept; a file that differs in them is warned about)")
    p.add_argument("--threshold-tokens", type=int, metavar="N", help="override spec.gate.thresholdTokens")
    p.add_argument("--plot", metavar="PATH",
                   help="draw the plot to PATH in the format its extension names (.png, .svg, .pdf, .eps, .ps; another is refused), "
                        "with any -o (exit 3 when it cannot be written); default: DIR/crossover.png, only "
                        "when DIR has none (a run's own plot is never replaced unless --plot names it); with -o json|yaml "
                        "the plot line goes to stderr")
    p.add_argument("--no-plot", action="store_true", help="do not draw a plot (not with --plot)")
    add_output_option(p, "report.schema.json")


@command("report", "Re-judge a finished run (with the serving, GSM8K and step A/B results its folder holds, as spx "
         "gate reads it): the decision first, then its table; draw its plot when the run has none, or to --plot "
         "PATH.", _report_args)
def cmd_report(args: argparse.Namespace) -> int:
    """The report; with ``-o json|yaml`` an input error is a document with ``problems`` (exit 3), as ``spx validate``."""
    return with_error_document(args.output, lambda: _report(args),
                               lambda problems: ReportDocument(source=args.dir, problems=problems))


def apply_overrides(run: LoadedRun, experiment: str | None, threshold_tokens: int | None) -> None:
    """``--experiment FILE`` (its gate; the measurement keeps its TP and shapes, warned about) and
    ``--threshold-tokens N`` applied to ``run.spec`` in place.

    Raises:
        UsageError / SpecError: the file cannot be read, or the gate with N does not validate.
    """
    if experiment is not None:
        override = read_experiment(experiment)
        if isinstance(run.result, KernelResult):
            run.warnings += relabel_warnings(run.spec, override.spec, experiment)
        run.spec = run.spec.model_copy(update={"gate": override.spec.gate})
        if override.metadata.name != run.name:  # the measurement keeps its own name; the gate says whose it is
            run.name = f"{run.name} (gate of {override.metadata.name})"
    if threshold_tokens is not None:
        raw = dump_model(run.spec)
        raw["gate"]["thresholdTokens"] = threshold_tokens
        run.spec = validate_spec(raw, source="gate with --threshold-tokens")


def _report_benches(status: ExperimentStatus, path: Path, output: str) -> int:
    """The report of a run of the vLLM benches alone (``spx serving OUT``): its verdict and sections, as printed
    by ``spx serving`` (:mod:`spx.cli.serving_lines`); text only (the report document describes a kernel run)."""
    from spx.cli.serving_lines import bench_lines

    if output != "text":
        raise UsageError(f"{path} is a run of the vLLM benches alone (spx serving): -o {output} describes a kernel "
                         f"run; read {path} itself, or spx gate {path.parent} -o {output}")
    for line in bench_lines(status):
        print(line)
    return EXIT_OK


def benches_only(target: Path) -> tuple[ExperimentStatus, Path] | None:
    """``(status, its path)`` when ``target`` is a run of the vLLM benches alone (``spx serving OUT``): a status.json
    without kernel points but with a serving, accuracy or step section, a judgement or a message (benches that did
    not start), and no result.json beside it."""
    run_dir = RunDirectory(target if target.is_dir() else target.parent)
    path = target if target.is_file() else run_dir.status_path
    if not path.is_file() or run_dir.result_path.is_file() or path.name == run_dir.result_path.name:
        return None
    data = read_json(path, "a run's status.json")
    if kind_of(data) != "status" or (data.get("kernel") or {}).get("points"):
        return None
    if not any(data.get(k) for k in (*VLLM_SECTIONS, "judgement", "message")):
        return None  # (a benches run that failed before any bench still has its message: spx gate reads it too)
    return validated(ExperimentStatus, path, data), path


def run_identity(result: KernelResult | Any) -> RunIdentity | None:
    """Whose bench documents a run's folder may hold: the kernel result's experiment and spec hash
    (:class:`spx.analysis.bench_docs.RunIdentity`); ``None`` for a result without its spec (a rebuilt one)."""
    if not isinstance(result, KernelResult):
        return None
    return RunIdentity(experiment=result.experiment, spec_hash=spec_hash(result.spec))


def _report(args: argparse.Namespace) -> int:
    """``spx report``: load, re-judge with the folder's vLLM results (:mod:`spx.cli.report_vllm`), print or emit."""
    from spx.cli.decision import print_report
    from spx.cli.report_vllm import read_vllm_sections
    from spx.cli.tables import partial_extent

    if args.plot and args.no_plot:
        raise UsageError(f"--plot {args.plot} and --no-plot contradict each other: give one of them")
    if args.plot:
        check_plot_path(Path(args.plot))
    if benches := benches_only(Path(args.dir)):
        return _report_benches(benches[0], benches[1], args.output)
    override = read_experiment(args.experiment).spec if args.experiment else None
    run = load_run(Path(args.dir), override)
    apply_overrides(run, args.experiment, args.threshold_tokens)
    vllm = read_vllm_sections(run.directory, run.status)
    result, spec, env = run.result, run.spec, run.env
    j = judge(result, spec, serving=vllm.serving, accuracy=vllm.accuracy, step=vllm.step, identity=run_identity(result),
              stopped=run.status.judgement.stopped if run.status is not None and run.status.judgement else ())
    run.warnings += [*vllm.warnings, *j.warnings]
    used = vllm.judged_with(j.warnings)  # (a refused document is warned about, never listed as judged with)
    for w in run.warnings:
        warn(w)
    cpu = (result.device if isinstance(result, KernelResult) else None) == "cpu" or env.device == "cpu"
    tp = spec.parallelism.tensor_parallel_size
    kernel = j.kernel or KernelStatus()
    listed = set(spec.sweep.tokens)  # (an adaptive sweep adds counts of its own)
    partial = partial_extent(len(listed & {p.tokens for p in result.points}), len(listed)) if j.partial else None
    plot_args = dict(name=run.name, gpu=gpu_label(env, cpu), gemm_backend=result.gemm_backend,
                     gather_source=result.gather_source, cpu=cpu, gate_threshold=spec.gate.threshold_tokens, tp=tp,
                     partial=partial, step=j.step)
    if args.output != "text":  # the plot first (on stderr), so that a --plot that cannot be written is a problem
        _plot(args, err_console(), kernel, run.directory, plot_args)
        emit(ReportDocument(
            experiment=run.name, source=str(run.source), partial=j.partial, verdict=j.verdict,
            measured_verdict=j.measured_verdict, decided_reason=j.reason, reasons=j.reasons, kernel=j.kernel,
            serving=j.serving, accuracy=j.accuracy, step=j.step, judged_with=used, environment=env,
            cpu=cpu, warnings=run.warnings, judgement=j.summary,
        ), args.output)
        return EXIT_OK
    console = make_console()
    print_report(
        console, kernel, verdict=j.verdict, reasons=j.reasons,
        title=table_title(run.name, env, result.gemm_backend, result.gather_source, tp, cpu), cpu=cpu,
        gate_threshold_tokens=spec.gate.threshold_tokens, partial=partial, judgement=j.summary,
        notes=[f"judged with {', '.join(used)}"] if used else (),
    )
    _print_pad_free(console, result)
    _plot(args, console, kernel, run.directory, plot_args)
    return EXIT_OK


def _print_pad_free(console: Console, result: KernelResult | Any) -> None:
    """The pad-free shard's lines (:func:`spx.analysis.pad_free.describe_pad_free`) after the decision, for a
    result.json whose points measured it (a proposal for vLLM: it never enters the verdict)."""
    from spx.analysis.pad_free import describe_pad_free, pad_free_summary

    summary = pad_free_summary(result) if isinstance(result, KernelResult) else None
    for line in describe_pad_free(summary) if summary is not None else []:
        console.print(line, highlight=False, markup=False)


def _plot(args: argparse.Namespace, console: Console, kernel: KernelStatus, directory: Path,
          plot_args: dict[str, Any]) -> None:
    """Draw the report's plot as ``--plot``/``--no-plot`` ask (the same in every output mode).

    Raises:
        UsageError: ``--plot PATH`` cannot be written.
    """
    plot = Path(args.plot) if args.plot else directory / PLOT_FILE
    if not args.plot and not args.no_plot and plot.exists():
        console.print(f"plot: {plot} (the run's own, kept; --plot PATH draws this report's)", highlight=False,
                      markup=False)
    elif not args.no_plot and kernel.points:
        draw_plot(console, kernel, plot, asked=bool(args.plot), **plot_args)
