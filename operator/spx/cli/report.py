"""``spx report DIR``: re-judge a finished (or partial) run with the vLLM results its folder holds
(:mod:`spx.cli.report_vllm`: the verdict ``spx gate DIR`` reads), print the decision first
(:mod:`spx.cli.decision`) and its table, draw its plot (DIR/crossover.png when the run has none, or
``--plot PATH``; a run's own plot is never replaced unless ``--plot`` names it)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

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
from spx.vocabulary import PLOT_FILE, POINTS_FILE, RESULT_FILE, STATUS_FILE, ResolvedDevice

M = TypeVar("M", KernelResult, ExperimentStatus)


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
    # what ran is not recorded with the points: the spec's requests (auto), and the device the timed kernels' names
    # show (a CPU run's are "cpu:…", or none; a GPU run's are CUDA kernels), so a CPU run keeps its CPU note
    kernels = [k for p in points for k in p.replicated.kernels]
    cpu = spec.kernel.device == "cpu" or any(k.startswith("cpu:") for k in kernels) or (
        spec.kernel.device != "cuda" and not kernels)
    device: ResolvedDevice = "cpu" if cpu else "cuda"
    result = KernelResult(experiment=path.parent.name, spec=spec, world_size=spec.parallelism.tensor_parallel_size,
                          gemm_backend=spec.kernel.gemm_backend, gather_backend="auto",
                          gather_source=points[-1].gather_source, timer="auto", device=device, cuda_graphs=False,
                          points=points, complete=False, error="result.json was not written")
    skipped = f" ({bad} line(s) that are not a point skipped)" if bad else ""
    return result, (f"{path.parent / RESULT_FILE} was not written (the run ended first: a full disk, SIGKILL, the "
                    f"OOM killer): reporting the {len(points)} point(s) it kept in {path.name}{skipped}, as a partial "
                    f"run; assumed {assumed}; device {device} ({'GPU kernels recorded' if device == 'cuda' else 'no GPU kernel recorded'})")


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


@command("report", "Re-judge a finished run (with the serving, GSM8K and step A/B results its folder holds, as spx "
         "gate reads it): the decision first, then its table; draw its plot when the run has none, or to --plot "
         "PATH.", _report_args)
def cmd_report(args: argparse.Namespace) -> int:
    """The report; with ``-o json|yaml`` an input error is a document with ``problems`` (exit 3), as ``spx validate``."""
    return with_error_document(args.output, lambda: _report(args),
                               lambda problems: ReportDocument(source=args.dir, problems=problems))


@dataclass
class LoadedRun:
    """What ``spx report`` read from a run's folder: the kernel result (or a status's points), its spec,
    environment and name, the file it came from, the folder's ``status.json`` (when there is one; beside a
    result.json only its vLLM sections, :data:`VLLM_SECTIONS`) and the
    warnings about what had to be assumed."""

    result: KernelResult | ResultSummary
    source: Path
    spec: ExperimentSpec
    env: Environment
    name: str
    directory: Path
    status: ExperimentStatus | None = None
    warnings: list[str] = field(default_factory=list)


def _validated(model: type[M], path: Path) -> M:
    """``path``'s JSON as ``model``.

    Raises:
        UsageError: unreadable or not JSON. SpecError: not that document (names the fields).
    """
    from pydantic import ValidationError

    from spx.api import describe_validation_error

    try:
        return model.model_validate(load_json(path))
    except ValidationError as err:
        raise SpecError(describe_validation_error(err), str(path)) from None


def load_run(target: Path, override: ExperimentSpec | None = None) -> LoadedRun:
    """The run at ``target`` (a run's folder, its result.json or its status.json): its result.json when there is
    one, else the status's points, else the points a killed run streamed to ``points.partial.jsonl`` (a partial
    run, on ``override``'s spec when ``--experiment`` gave one: :func:`result_from_partial_points`); the
    assumptions are said in ``warnings``.

    Raises:
        UsageError: nothing to report (names what is missing, a run in progress, killed partial points).
        SpecError: a document that does not validate, or a token count measured twice.
    """
    if not target.exists():
        raise UsageError(f"{target} does not exist: give a run's --out directory, its result.json or status.json")
    directory = target if target.is_dir() else target.parent
    is_status = target.is_file() and (target.name == STATUS_FILE or is_status_document(load_json(target)))
    result_path = target if target.is_file() and not is_status else directory / RESULT_FILE
    status_path = target if is_status else directory / STATUS_FILE
    if result_path.is_file():
        result = _validated(KernelResult, result_path)
        status = _vllm_part(status_path) if status_path.is_file() else None
        run = LoadedRun(result, result_path, result.spec, result.environment, result.experiment, directory, status)
    elif status_path.is_file():
        run = _run_of_status(_validated(ExperimentStatus, status_path), status_path, directory)
    else:
        _refuse_empty(directory)
        source = directory / POINTS_FILE
        result, why = result_from_partial_points(source, override)
        run = LoadedRun(result, source, result.spec, result.environment, directory.name, directory, None, [why])
    if not run.result.points:
        raise UsageError(f"{run.source} has no points to report")
    if repeated := repeated_tokens(run.result.points):
        raise SpecError(repeated, str(run.source))
    return run


#: The sections of a status.json that ``spx report`` judges a result.json with (the rest it re-derives).
VLLM_SECTIONS = ("serving", "accuracy", "step")


def _vllm_part(status_path: Path) -> ExperimentStatus:
    """Only the vLLM sections of ``status_path`` (:data:`VLLM_SECTIONS`): its kernel section is re-derived from
    result.json, so one written by an older spx (another schema) does not stop the report.

    Raises:
        UsageError / SpecError: not JSON, or a vLLM section that does not validate.
    """
    from pydantic import ValidationError

    from spx.api import describe_validation_error

    data = load_json(status_path)
    part = {k: data[k] for k in VLLM_SECTIONS if isinstance(data, dict) and data.get(k) is not None}
    try:
        return ExperimentStatus.model_validate(part)
    except ValidationError as err:
        raise SpecError(describe_validation_error(err), str(status_path)) from None


def _run_of_status(status: ExperimentStatus, status_path: Path, directory: Path) -> LoadedRun:
    """A run known only by its status.json: its points, TP from their rows per rank, the default gate."""
    if status.kernel is None or not status.kernel.points:
        raise UsageError(f"{status_path} has no kernel points to report")
    env, name = status.environment or Environment(), directory.name
    tp, how = status_tp(status.kernel.points, env.gpu_count)
    spec = validate_spec({"parallelism": {"tensorParallelSize": tp}}, source=str(status_path))
    warning = (f"{status_path} without its result.json records neither the experiment's name nor its spec: assumed "
               f"name {name!r} (the directory), TP{tp} ({how}), and the default shapes and gate (thresholdTokens "
               f"{spec.gate.threshold_tokens}); give the run's result.json, or --experiment FILE for its gate")
    result = ResultSummary(points=status.kernel.points, environment=env, world_size=tp,
                           gemm_backend=status.kernel.gemm_backend or "auto",
                           gather_source=status.kernel.gather_source or "measured",
                           timer=status.kernel.timer or "auto", complete=status.phase != "Failed")
    spec = spec.model_copy(update={"sweep": spec.sweep.model_copy(
        update={"tokens": [p.tokens for p in status.kernel.points]})})
    return LoadedRun(result, status_path, spec, env, name, directory, status, [warning])


def _refuse_empty(directory: Path) -> None:
    """Refuse a folder without result.json and status.json, unless a killed run left its streamed points.

    Raises:
        UsageError: a run in progress, or nothing to report (no ``points.partial.jsonl`` either).
    """
    from spx.cli.outdir import killed_run, partial_points, run_in_progress

    if holder := run_in_progress(directory):
        raise UsageError(f"a run is in progress in {directory} ({holder}): its result.json and status.json are "
                         f"written when it ends; report it then (spx gate {directory} --wait SECONDS waits for it)")
    if not partial_points(directory):
        killed = killed_run(directory)
        raise UsageError(f"no result.json or status.json in {directory}" + (f": {killed}" if killed else ""))


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
    without kernel points but with a serving, accuracy or step section, and no result.json beside it."""
    directory = target if target.is_dir() else target.parent
    path = target if target.is_file() else directory / STATUS_FILE
    if not path.is_file() or (directory / RESULT_FILE).is_file() or path.name == RESULT_FILE:
        return None
    data = load_json(path)
    if not is_status_document(data) or (data.get("kernel") or {}).get("points"):
        return None
    if not any(data.get(k) for k in VLLM_SECTIONS):
        return None
    return _validated(ExperimentStatus, path), path


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
    vllm = read_vllm_sections(run.directory, run.status, allow_cpu_timings=run.spec.gate.allow_cpu_timings,
                              kernel=lambda: judge(run.result, run.spec).kernel)
    run.warnings += vllm.warnings
    for w in run.warnings:
        warn(w)
    result, spec, env = run.result, run.spec, run.env
    j = judge(result, spec, serving=vllm.serving, accuracy=vllm.accuracy, step=vllm.step)
    cpu = (result.device if isinstance(result, KernelResult) else None) == "cpu" or env.device == "cpu"
    tp = spec.parallelism.tensor_parallel_size
    kernel = j.kernel or KernelStatus()
    listed = set(spec.sweep.tokens)  # (an adaptive sweep adds counts of its own)
    partial = partial_extent(len(listed & {p.tokens for p in result.points}), len(listed)) if j.partial else None
    plot_args = dict(name=run.name, gpu=gpu_label(env, cpu), gemm_backend=result.gemm_backend,
                     gather_source=result.gather_source, cpu=cpu, gate_threshold=spec.gate.threshold_tokens, tp=tp,
                     partial=partial)
    if args.output != "text":  # the plot first (on stderr), so that a --plot that cannot be written is a problem
        _plot(args, err_console(), kernel, run.directory, plot_args)
        emit(ReportDocument(
            experiment=run.name, source=str(run.source), partial=j.partial, verdict=j.verdict,
            measured_verdict=j.measured_verdict, decided_reason=j.reason, reasons=j.reasons, kernel=j.kernel,
            serving=j.serving, accuracy=j.accuracy, step=vllm.step, judged_with=vllm.sources, environment=env,
            cpu=cpu, warnings=run.warnings,
        ), args.output)
        return EXIT_OK
    console = make_console()
    print_report(
        console, kernel, verdict=j.verdict, reasons=j.reasons,
        title=table_title(run.name, env, result.gemm_backend, result.gather_source, tp, cpu), cpu=cpu,
        gate_threshold_tokens=spec.gate.threshold_tokens, partial=partial, step=vllm.step,
        notes=[f"judged with {', '.join(vllm.sources)}"] if vllm.sources else (),
    )
    _plot(args, console, kernel, run.directory, plot_args)
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
