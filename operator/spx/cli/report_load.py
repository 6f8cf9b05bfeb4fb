"""What ``spx report DIR`` reads: a run's ``result.json``, its ``status.json`` (and the vLLM sections it
holds), a lone ``status.json``, or the ``points.partial.jsonl`` of a run whose result could not be written,
turned into one :class:`LoadedRun` (:func:`load_run`). Reading only: :mod:`spx.cli.report` judges and prints."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from spx.api import (
    Environment,
    ExperimentSpec,
    ExperimentStatus,
    KernelPoint,
    KernelResult,
    PointResult,
    ResultSummary,
    SpecError,
    validate_spec,
)
from spx.api.result import repeated_tokens, rows_per_rank
from spx.cli.common import UsageError
from spx.rundir import RunDirectory, RunDirectoryError, kind_of, parse_points, read_json, validated
from spx.vocabulary import (
    GEMM_BACKENDS,
    RESULT_FILE,
    STATUS_FILE,
    TIMERS,
    ResolvedDevice,
)


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
    try:
        points, bad = parse_points(path.read_bytes())  # (the last line of a killed run may be cut short)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not points:
        raise UsageError(f"{path} holds no valid point ({bad} line(s) that are not one)")
    tp, how = status_tp(points, None)
    assumed = "the experiment given with --experiment"
    if spec is None:  # the sweep the run planned (its manifest), so a killed run's counts are "4 of 6"
        planned = RunDirectory(path.parent).planned_tokens() or []
        tokens = sorted({*planned, *(p.tokens for p in points)})
        spec = validate_spec({"parallelism": {"tensorParallelSize": tp}, "sweep": {"tokens": tokens}},
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
    run_dir = RunDirectory(target if target.is_dir() else target.parent)
    directory = run_dir.path
    is_status = target.is_file() and (target.name == STATUS_FILE or kind_of(read_json(target)) == "status")
    result_path = target if target.is_file() and not is_status else run_dir.result_path
    status_path = target if is_status else run_dir.status_path
    result, unreadable = _result_or_why(result_path, fall_back=target.is_dir() and status_path.is_file())
    if result is not None:
        status, why = _status_or_why(status_path) if status_path.is_file() else (None, None)
        run = LoadedRun(result, result_path, result.spec, result.environment, result.experiment, directory, status)
        if why is not None:  # as spx gate reads the folder: its result.json, judged (issue #35)
            run.warnings.insert(0, f"{status_path} cannot be read ({why}): judging {result_path} alone, as spx gate "
                                   "does")
    elif unreadable is not None:  # as spx gate reads the folder: its status.json, and say why
        run = _run_of_status(validated(ExperimentStatus, status_path), status_path, directory)
        run.warnings.insert(0, f"{result_path} cannot be read ({unreadable}): reporting {status_path}'s points "
                               "and verdict instead, as spx gate does")
    elif status_path.is_file():
        run = _run_of_status(validated(ExperimentStatus, status_path), status_path, directory)
    else:
        _refuse_empty(directory)
        source = run_dir.points_path
        result, why = result_from_partial_points(source, override)
        run = LoadedRun(result, source, result.spec, result.environment, directory.name, directory, None, [why])
    if not run.result.points:
        raise UsageError(f"{run.source} has no points to report")
    if repeated := repeated_tokens(run.result.points):
        raise SpecError(repeated, str(run.source))
    return run


def _result_or_why(result_path: Path, *, fall_back: bool) -> tuple[KernelResult | None, str | None]:
    """``(the folder's result.json, None)``; ``(None, None)`` without one; ``(None, why)`` when it cannot be read
    (truncated, not JSON, not a result) and ``fall_back`` (a folder whose ``status.json`` is there to report).

    Raises:
        UsageError, SpecError: an unreadable result.json and no ``fall_back``.
    """
    if not result_path.is_file():
        return None, None
    try:
        return validated(KernelResult, result_path), None
    except (RunDirectoryError, SpecError) as err:
        if not fall_back:
            raise
        return None, str(err).splitlines()[0][:200]


#: The sections of a status.json that ``spx report`` judges a result.json with (the rest it re-derives).
VLLM_SECTIONS = ("serving", "accuracy", "step")


def _status_or_why(status_path: Path) -> tuple[ExperimentStatus | None, str | None]:
    """``(the vLLM part of status.json, None)``, or ``(None, why)`` when it cannot be read (empty, not JSON, not a
    mapping): then the result.json is judged alone, as ``spx gate`` does.

    Raises:
        UsageError: a status whose verdict is not exactly Pass, Fail or Inconclusive (a wrong type or case): a
            corrupted decision, refused as ``spx gate`` refuses it (exit 3).
        SpecError: a vLLM section that does not validate.
    """
    from spx.vocabulary import VERDICTS

    try:
        data = read_json(status_path, "a run's status.json")
    except RunDirectoryError as err:
        return None, str(err)[:200]
    if not isinstance(data, dict) or not data:
        return None, "not an experiment status: empty or not a JSON object"
    verdict = data.get("verdict")
    if verdict is not None and verdict not in VERDICTS:
        raise UsageError(f"{status_path}: verdict {str(verdict)[:40]!r} is not a verdict: the status is unreadable; "
                         "a verdict is exactly one of Pass, Fail, Inconclusive")
    return _vllm_part(status_path), None


def _vllm_part(status_path: Path) -> ExperimentStatus:
    """Only the vLLM sections of ``status_path`` (:data:`VLLM_SECTIONS`): its kernel section is re-derived from
    result.json, so one written by an older spx (another schema) does not stop the report.

    Raises:
        UsageError / SpecError: not JSON, or a vLLM section that does not validate.
    """
    from pydantic import ValidationError

    from spx.api import describe_validation_error

    data = read_json(status_path, "a run's status.json")
    part = {k: data[k] for k in (*VLLM_SECTIONS, "judgement") if isinstance(data, dict) and data.get(k) is not None}
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
    # the status records them as plain strings: one outside its vocabulary (or none) is "auto", not resolved
    gemm = status.kernel.gemm_backend if status.kernel.gemm_backend in GEMM_BACKENDS else "auto"
    timer = status.kernel.timer if status.kernel.timer in TIMERS else "auto"
    result = ResultSummary(points=status.kernel.points, environment=env, world_size=tp,
                           gemm_backend=gemm,
                           gather_source=status.kernel.gather_source or "measured",
                           timer=timer, complete=status.phase != "Failed")
    spec = spec.model_copy(update={"sweep": spec.sweep.model_copy(
        update={"tokens": [p.tokens for p in status.kernel.points]})})
    return LoadedRun(result, status_path, spec, env, name, directory, status, [warning])


def _refuse_empty(directory: Path) -> None:
    """Refuse a folder without result.json and status.json, unless a killed run left its streamed points.

    Raises:
        UsageError: a run in progress, or nothing to report (no ``points.partial.jsonl`` either).
    """
    run_dir = RunDirectory(directory)
    if holder := run_dir.in_progress():
        raise UsageError(f"a run is in progress in {directory} ({holder}): its result.json and status.json are "
                         f"written when it ends; report it then (spx gate {directory} --wait SECONDS waits for it)")
    if not any(run_dir.partial_points()):  # (lines that are not points: result_from_partial_points says so)
        killed = run_dir.killed()
        raise UsageError(f"no result.json or status.json in {directory}" + (f": {killed}" if killed else ""))
