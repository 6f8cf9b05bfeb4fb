"""``spx report DIR``: re-judge a finished (or partial) run, re-print its table, draw its plot (DIR/crossover.png
when the run has none, or ``--plot PATH``; a run's own plot is never replaced unless ``--plot`` names it)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from spx.analysis.judge import judge
from spx.api import (
    Environment,
    ExperimentSpec,
    ExperimentStatus,
    KernelPoint,
    KernelResult,
    KernelStatus,
    PointResult,
    ResultSummary,
    SpecError,
    dump_model,
    validate_spec,
)
from spx.api.exit_codes import EXIT_OK
from spx.api.result import repeated_tokens, rows_per_rank
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
from spx.vocabulary import PLOT_FILE, POINTS_FILE, RESULT_FILE, STATUS_FILE


def draw_plot(
    console: Console, kernel: KernelStatus, path: Path, *, name: str, gpu: str | None, gemm_backend: str | None,
    gather_source: str | None, cpu: bool, gate_threshold: int | None, tp: int | None = None,
    partial: str | None = None, asked: bool = False,
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
            gate_threshold_tokens=gate_threshold,
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


def load_json(path: Path) -> Any:
    """JSON of ``path``.

    Raises:
        UsageError: unreadable, not UTF-8, or not JSON.
    """
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not a UTF-8 text file") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path} is not JSON: {exc}") from None
    except RecursionError:
        raise UsageError(f"{path} nests deeper than any spx result or status: not an spx document") from None


def is_status_document(data: Any) -> bool:
    """Whether JSON ``data`` is an experiment's status (a run's status.json, whatever the file is called): no
    ``schemaVersion`` and no ``points`` (a result's), and a status's ``phase``, ``conditions``, ``kernel`` or ``verdict``."""
    return (isinstance(data, dict) and not data.get("schemaVersion") and "points" not in data
            and bool({"phase", "conditions", "kernel", "verdict"} & data.keys()))


def status_tp(points: Sequence[KernelPoint | PointResult], gpu_count: int | None) -> tuple[int, str]:
    """The TP a status's points were split over, and how it was found: the TPs (1–64) for which every point's
    ``rowsPerRank`` is ceil(tokens / TP), narrowed by the environment's GPU count; 8 (the default) when none fits."""
    fits = [tp for tp in range(1, 65) if all(p.rows_per_rank == rows_per_rank(p.tokens, tp) for p in points)]
    if gpu_count is not None and gpu_count in fits:
        return gpu_count, "the environment's gpuCount, which the points' rowsPerRank agree with"
    if len(fits) == 1:
        return fits[0], "from the points' rowsPerRank"
    if fits:
        return fits[0], f"the smallest that fits the points' rowsPerRank; TP{fits[1]}… fit too"
    default = ExperimentSpec().parallelism.tensor_parallel_size
    return default, "the default: no TP fits the points' rowsPerRank"


def result_from_partial_points(path: Path, spec: ExperimentSpec | None) -> tuple[KernelResult, str]:
    """A ``complete = False`` result of the points a run streamed to ``points.partial.jsonl`` (``path``) when its
    ``result.json`` was never written (a full disk, SIGKILL, the OOM killer), and the warning that says so. The
    spec is ``spec`` (``--experiment``) or the default one at the TP the points' ``rowsPerRank`` fit.

    Raises:
        UsageError: ``path`` cannot be read or holds no valid point.
    """
    points, bad = [], 0
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    for line in filter(bytes.strip, lines):
        try:
            points.append(PointResult.model_validate_json(line))
        except ValueError:
            bad += 1  # (the last line of a killed run may be cut short)
    if not points:
        raise UsageError(f"{path} holds no valid point ({bad} line(s) that are not one)")
    tp, how = status_tp(points, None)
    assumed = "the experiment given with --experiment"
    if spec is None:
        spec = validate_spec({"parallelism": {"tensorParallelSize": tp}, "sweep": {"tokens": [p.tokens for p in points]}},
                             source=str(path))
        assumed = f"TP{tp} ({how}) and the default shapes and gate; --experiment FILE gives the run's own"
    result = KernelResult(experiment=path.parent.name, spec=spec, world_size=spec.parallelism.tensor_parallel_size,
                          gemm_backend="?", gather_backend="?", gather_source=points[-1].gather_source, timer="?",
                          device="?", cuda_graphs=False, points=points, complete=False,
                          error="result.json was not written")
    skipped = f" ({bad} line(s) that are not a point skipped)" if bad else ""
    return result, (f"{path.parent / RESULT_FILE} was not written (the run ended first: a full disk, SIGKILL, the "
                    f"OOM killer): reporting the {len(points)} point(s) it kept in {path.name}{skipped}, as a partial "
                    f"run; assumed {assumed}")


def relabel_warnings(measured: ExperimentSpec, override: ExperimentSpec, source: str) -> list[str]:
    """What ``--experiment`` would relabel: TP, the projection's shapes, the sweep (the measurement stays)."""
    out = []
    tp_m, tp_o = measured.parallelism.tensor_parallel_size, override.parallelism.tensor_parallel_size
    if tp_m != tp_o:
        out.append(f"{source} says tensorParallelSize {tp_o} but the run measured TP{tp_m}: the report keeps TP{tp_m} "
                   "(the points were split over that many ranks); only the gate is taken from the file")
    pm, po = measured.projection, override.projection
    if (pm.hidden_size, pm.output_sizes, pm.weight_format, pm.activation_dtype) != (
            po.hidden_size, po.output_sizes, po.weight_format, po.activation_dtype):
        out.append(f"{source} describes a different projection ({po.hidden_size} → {po.output_sizes}, {po.weight_format}) "
                   f"than the run measured ({pm.hidden_size} → {pm.output_sizes}, {pm.weight_format}): the "
                   "points are still the measured shapes")
    if measured.sweep.tokens != override.sweep.tokens:
        out.append(f"{source} sweeps other token counts than the run measured: the report shows the measured ones")
    return out


@command("report", "Re-print the table of a finished run, re-running the analysis; draw its plot when the run "
         "has none, or to --plot PATH.", _report_args)
def cmd_report(args: argparse.Namespace) -> int:
    """The report; with ``-o json|yaml`` an input error is a document with ``problems`` (exit 3), as ``spx validate``."""
    return with_error_document(args.output, lambda: _report(args),
                               lambda problems: ReportDocument(source=args.dir, problems=problems))


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


def _report(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from spx.api import describe_validation_error
    from spx.cli.tables import partial_extent, print_report

    if args.plot and args.no_plot:
        raise UsageError(f"--plot {args.plot} and --no-plot contradict each other: give one of them")
    if args.plot:
        check_plot_path(Path(args.plot))
    target = Path(args.dir)
    if not target.exists():
        raise UsageError(f"{target} does not exist: give a run's --out directory, its result.json or status.json")
    directory = target if target.is_dir() else target.parent
    is_status = target.is_file() and (target.name == STATUS_FILE or is_status_document(load_json(target)))
    result_path = target if target.is_file() and not is_status else directory / RESULT_FILE
    status_path = target if is_status else directory / STATUS_FILE
    override = read_experiment(args.experiment) if args.experiment else None

    result: KernelResult | ResultSummary
    source: Path
    status_warnings: list[str] = []
    if result_path.is_file():
        source = result_path
        try:
            result = KernelResult.model_validate(load_json(result_path))
        except ValidationError as err:
            raise SpecError(describe_validation_error(err), str(result_path)) from None
        spec, env, name = result.spec, result.environment, result.experiment
    elif status_path.is_file():
        source = status_path
        try:
            status = ExperimentStatus.model_validate(load_json(status_path))
        except ValidationError as err:
            raise SpecError(describe_validation_error(err), str(status_path)) from None
        if (status.kernel is None or not status.kernel.points) and (status.serving or status.step or status.accuracy):
            return _report_benches(status, status_path, args.output)
        if status.kernel is None or not status.kernel.points:
            raise UsageError(f"{status_path} has no kernel points to report")
        env, name = status.environment or Environment(), directory.name
        tp, how = status_tp(status.kernel.points, env.gpu_count)
        spec = validate_spec({"parallelism": {"tensorParallelSize": tp}}, source=str(status_path))
        status_warnings.append(
            f"{status_path} without its result.json records neither the experiment's name nor its spec: assumed name "
            f"{name!r} (the directory), TP{tp} ({how}), and the default shapes and gate (thresholdTokens "
            f"{spec.gate.threshold_tokens}); give the run's result.json, or --experiment FILE for its gate")
        result = ResultSummary(points=status.kernel.points, environment=env, world_size=tp,
                               gemm_backend=status.kernel.gemm_backend or "?",
                               gather_source=status.kernel.gather_source or "measured",
                               timer=status.kernel.timer or "?", complete=status.phase != "Failed")
        spec = spec.model_copy(update={"sweep": spec.sweep.model_copy(
            update={"tokens": [p.tokens for p in status.kernel.points]})})
    else:
        from spx.cli.outdir import partial_points, run_in_progress

        if holder := run_in_progress(Path(directory)):
            raise UsageError(f"a run is in progress in {directory} ({holder}): its result.json and status.json are "
                             f"written when it ends; report it then (spx gate {directory} --wait SECONDS waits for it)")
        if not partial_points(Path(directory)):
            raise UsageError(f"no result.json or status.json in {directory}")
        source = directory / POINTS_FILE
        result, why = result_from_partial_points(source, override.spec if override else None)
        spec, env, name = result.spec, result.environment, directory.name
        status_warnings.append(why)
    if not result.points:
        raise UsageError(f"{source} has no points to report")
    if repeated := repeated_tokens(result.points):
        raise SpecError(repeated, str(source))
    warnings: list[str] = status_warnings
    if override is not None:
        if isinstance(result, KernelResult):
            warnings += relabel_warnings(spec, override.spec, args.experiment)
        spec = spec.model_copy(update={"gate": override.spec.gate})
        if override.metadata.name != name:  # the measurement keeps its own name; the gate says whose it is
            name = f"{name} (gate of {override.metadata.name})"
    if args.threshold_tokens is not None:
        raw = dump_model(spec)
        raw["gate"]["thresholdTokens"] = args.threshold_tokens
        spec = validate_spec(raw, source="gate with --threshold-tokens")
    for w in warnings:
        warn(w)

    j = judge(result, spec)
    cpu = (result.device if isinstance(result, KernelResult) else None) == "cpu" or env.device == "cpu"
    tp = spec.parallelism.tensor_parallel_size
    kernel = j.kernel or KernelStatus()
    listed = set(spec.sweep.tokens)  # (an adaptive sweep adds counts of its own)
    partial = partial_extent(len(listed & {p.tokens for p in result.points}), len(listed)) if j.partial else None
    plot_args = dict(name=name, gpu=gpu_label(env, cpu), gemm_backend=result.gemm_backend,
                     gather_source=result.gather_source, cpu=cpu, gate_threshold=spec.gate.threshold_tokens, tp=tp,
                     partial=partial)
    if args.output != "text":  # the plot first (on stderr), so that a --plot that cannot be written is a problem
        _plot(args, err_console(), kernel, directory, plot_args)
        emit(ReportDocument(
            experiment=name, source=str(source), partial=j.partial, verdict=j.verdict, measured_verdict=j.measured_verdict,
            decided_reason=j.reason, reasons=j.reasons, kernel=j.kernel, environment=env, cpu=cpu, warnings=warnings,
        ), args.output)
        return EXIT_OK
    console = make_console()
    print_report(
        console, kernel, verdict=j.verdict, reasons=j.reasons,
        title=table_title(name, env, result.gemm_backend, result.gather_source, tp, cpu), cpu=cpu,
        gate_threshold_tokens=spec.gate.threshold_tokens, partial=partial,
    )
    _plot(args, console, kernel, directory, plot_args)
    return EXIT_OK


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
