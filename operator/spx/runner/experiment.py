"""One experiment on this host, as the bench pod runs it: kernel bench → judge → (vLLM benches → judge).

:func:`run_experiment` is the whole pipeline that ``spx run`` (and so the operator's bench pod,
``spx run … --summary-file /dev/termination-log --jsonl``) carries out; the CLI only parses options,
prints and maps the outcome to an exit code. Steps:

1. the kernel benchmark on one process per rank (:func:`spx.runner.local.run_local`; ``result.json``);
2. its judgement (:func:`spx.analysis.judge.judge`) → ``status.json``, and the pod → operator
   summary (:func:`spx.api.wire.build_summary`) into ``summary_file``;
3. ``hooks.on_kernel`` (the CLI prints the report and draws the plot here, before the hours of step 4);
4. with ``options.serving`` and a completed kernel bench: the vLLM serving A/B and GSM8K
   (``spx.serving.ab.run_vllm_benchmarks``) into ``OUT/serving``, then the judgement over every gate
   (``require_vllm``) → ``status.json`` and the summary again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from spx.analysis.bench_docs import RunIdentity
from spx.analysis.judge import BENCHES_PENDING, Judgement, judge, local_status, stop
from spx.api import ExperimentSpec, ExperimentStatus, KernelResult, PointResult, wire
from spx.api.base import utc_now
from spx.api.spec import spec_hash
from spx.files import write_atomic
from spx.rundir import RunDirectory
from spx.runner.local import LocalRunOutcome, RunProgress, run_local
from spx.vocabulary import CPU_NOTE, SERVING_DIR

if TYPE_CHECKING:
    from spx.api.accuracy import AccuracyResult, AccuracyStatus
    from spx.api.serving import ServingResult, ServingStatus
    from spx.api.step import StepResult, StepStatus

#: Start of ``KernelResult.error`` when Ctrl-C stopped the run (:func:`spx.runner.local.run_local`).
INTERRUPTED_PREFIX = "interrupted (SIGINT)"

VllmDocuments = Callable[["ServingResult | None", "AccuracyResult | None"], None]


@dataclass(frozen=True)
class ExperimentOptions:
    """How :func:`run_experiment` runs on this host (``spx run``'s options).

    Attributes:
        nproc: ranks (default: visible GPUs, else 2 on CPU; capped at TP).
        serving: run the vLLM benches after a completed kernel bench (``spec.serving`` must be set).
        vllm_command: the vLLM CLI argv prefix.
        summary_file: where to write the pod → operator summary (e.g. ``/dev/termination-log``).
    """

    nproc: int | None = None
    serving: bool = False
    vllm_command: Sequence[str] = ("vllm",)
    summary_file: str | None = None


@dataclass(frozen=True)
class RunHooks:
    """What the caller of :func:`run_experiment` is told while it runs; each is optional (``None``: not told).

    Attributes:
        on_point: each measured point, as rank 0 finishes it (``--jsonl``).
        progress: told of the ranks' start, each point, the end.
        on_kernel: called once the kernel bench is judged and ``status.json`` written.
        on_vllm_documents: the vLLM benches' result documents, after every arm (the last call wins).
        on_step_document: the step A/B's result document, after every server (the last call wins).
        on_summary_error: a summary that could not be written (``None``: the error propagates).
    """

    on_point: Callable[[PointResult], None] | None = None
    progress: RunProgress | None = None
    on_kernel: Callable[[ExperimentOutcome], None] | None = None
    on_vllm_documents: VllmDocuments | None = None
    on_step_document: Callable[[StepResult], None] | None = None
    on_summary_error: Callable[[str, OSError], None] | None = None


@dataclass
class ExperimentOutcome:
    """What :func:`run_experiment` did.

    Attributes:
        run: the kernel bench's outcome (``run.result`` is always set; partial on failure).
        status: the last ``status.json`` written (the verdict over every gate that ran).
        judgement: the kernel bench's judgement (what the report shows).
        vllm_ran: the vLLM step was attempted (``serving`` asked and the kernel bench completed).
        serving, accuracy: the vLLM benches' statuses (``None`` when not run or not in the spec).
        vllm_error: why the vLLM benches did not start or were stopped (``None`` when they ran or were not asked for).
        stopped: the signal that stopped the vLLM benches (``interrupted (SIGTERM)``), ``None`` when none did.
    """

    run: LocalRunOutcome
    status: ExperimentStatus
    judgement: Judgement
    vllm_ran: bool = False
    serving: ServingStatus | None = None
    accuracy: AccuracyStatus | None = None
    step: StepStatus | None = None
    vllm_error: str | None = None
    stopped: str | None = None

    @property
    def result(self) -> KernelResult:
        """The kernel bench's result document."""
        return self.run.result

    @property
    def kernel_completed(self) -> bool:
        """The kernel bench finished its sweep and was judged (phase ``Succeeded``)."""
        return self.judgement.verdict is not None

    @property
    def interrupted(self) -> bool:
        """Ctrl-C stopped the kernel bench."""
        return (self.result.error or "").startswith(INTERRUPTED_PREFIX)


def is_cpu(result: KernelResult) -> bool:
    """The result comes from a CPU smoke run."""
    return result.device == "cpu" or result.environment.device == "cpu"


def build_status(result: KernelResult, judgement: Judgement) -> ExperimentStatus:
    """``status.json`` of a local run: :func:`spx.analysis.judge.local_status` of ``judgement``."""
    summary = f"{len(result.points)} token count{'' if len(result.points) == 1 else 's'} measured"
    if result.wall_seconds is not None:
        summary += f" in {result.wall_seconds:.1f} s"
    return local_status(judgement, now=utc_now(), started_at=result.started_at, finished_at=result.finished_at,
                        environment=result.environment, completed_summary=summary,
                        note=CPU_NOTE if is_cpu(result) else None)


def write_status(out: Path, status: ExperimentStatus) -> None:
    """``OUT/status.json`` (camelCase, indented), whole or not at all (:func:`spx.files.write_atomic`)."""
    RunDirectory(out).write_status(status)


def write_result_summary(path: str, result: KernelResult, serving: ServingStatus | None = None,
                         accuracy: AccuracyStatus | None = None, step: StepStatus | None = None) -> None:
    """The pod → operator :class:`~spx.api.ResultSummary` of ``result`` into ``path`` (≤ 4096 bytes), with the
    vLLM benches' statuses (:func:`spx.api.wire.build_summary` shrinks them to fit).

    Raises:
        OSError: ``path`` cannot be written.
    """
    from spx.analysis import points_from_result

    try:
        points = points_from_result(result)
    except ValueError:
        points = []
    text = wire.build_summary(result, points, serving=serving, accuracy=accuracy, step=step)
    write_atomic(path, text)  # (/dev/termination-log, not a regular file: written in place, once)


def run_experiment(
    spec: ExperimentSpec,
    out: Path,
    *,
    name: str,
    options: ExperimentOptions = ExperimentOptions(),
    hooks: RunHooks = RunHooks(),
) -> ExperimentOutcome:
    """Run ``spec`` on this host into ``out`` (steps in the module docstring); never raises for a failed rank.

    Args:
        spec: the validated spec (command-line overrides applied).
        out: the output folder, locked and prepared by the caller.
        name: the experiment's name (recorded in the results).
        options: ranks, the vLLM step, the summary file (:class:`ExperimentOptions`).
        hooks: what the caller is told while it runs (:class:`RunHooks`).

    Raises:
        spx.runner.sizing.RunnerError: the run cannot start on this host (before any rank starts).
        OSError: ``out`` cannot be written.
        ValueError: ``options.serving`` without ``spec.serving``.
    """
    if options.serving and spec.serving is None:
        raise ValueError("serving asked for, but the spec has no spec.serving")
    run = run_local(spec, out, nproc=options.nproc, experiment=name, on_point=hooks.on_point, progress=hooks.progress,
                    device_asked=spec.kernel.device == "cpu")
    judgement = judge(run.result, spec)
    outcome = ExperimentOutcome(run=run, status=build_status(run.result, judgement), judgement=judgement)
    if options.serving and judgement.verdict is not None:  # no kernel-only verdict while the benches run (#35)
        write_status(out, build_status(run.result, stop(judgement, [BENCHES_PENDING])))
    else:
        write_status(out, outcome.status)
    _summary(options.summary_file, outcome, hooks.on_summary_error)
    if hooks.on_kernel is not None:
        hooks.on_kernel(outcome)
    if options.serving and outcome.kernel_completed:
        _vllm_step(spec, out, name, options.vllm_command, outcome, hooks)
        write_status(out, outcome.status)
        _summary(options.summary_file, outcome, hooks.on_summary_error)
    return outcome


def _summary(path: str | None, outcome: ExperimentOutcome,
             on_error: Callable[[str, OSError], None] | None) -> None:
    if not path:
        return
    try:
        write_result_summary(path, outcome.result, outcome.serving, outcome.accuracy, outcome.step)
    except OSError as exc:
        if on_error is None:
            raise
        on_error(path, exc)


def _vllm_step(spec: ExperimentSpec, out: Path, name: str, vllm_command: Sequence[str], outcome: ExperimentOutcome,
               hooks: RunHooks) -> None:
    """The vLLM serving A/B and GSM8K after a completed kernel bench; updates ``outcome`` in place.

    Failed arms or points are in the results and make the gate Fail or Inconclusive; benches that could
    not start (an accuracy arm that is not a serving arm, a missing GSM8K dataset) set ``vllm_error``.
    """
    from spx.serving.ab import RunnerOptions, run_vllm_benchmarks

    assert spec.serving is not None
    has_points = bool(spec.serving.points)

    def emit(serving_result: ServingResult | None, accuracy_result: AccuracyResult | None) -> None:
        if hooks.on_vllm_documents is not None:
            hooks.on_vllm_documents(serving_result if has_points else None, accuracy_result)

    outcome.vllm_ran = True
    opts = RunnerOptions(vllm_command=list(vllm_command), experiment=name, on_arm=emit, on_step=hooks.on_step_document)
    stopped: list[str] = []
    docs: tuple[ServingResult | None, AccuracyResult | None, StepResult | None] = (None, None, None)
    try:
        benches = run_vllm_benchmarks(spec, out / SERVING_DIR, opts)
    except (ValueError, OSError, KeyboardInterrupt) as exc:
        if isinstance(exc, KeyboardInterrupt):  # SIGINT/SIGTERM: every server was stopped, what ran is saved
            outcome.stopped = str(exc) or "interrupted (Ctrl-C)"
            why = (f"the vLLM benches were stopped ({outcome.stopped}); every server was stopped and what they "
                   f"measured is in {out / SERVING_DIR}")
        else:
            why = f"the vLLM benches did not start: {exc}"
        outcome.vllm_error = why
        stopped = [why]  # (issue #35: no kernel-only verdict; the status says which stage stopped)
    else:
        emit(benches.serving, benches.accuracy)
        docs = (benches.serving, benches.accuracy, benches.step)
    _judge_benches(spec, out, outcome, docs, stopped)


def _judge_benches(spec: ExperimentSpec, out: Path, outcome: ExperimentOutcome,
                   docs: tuple[ServingResult | None, AccuracyResult | None, StepResult | None],
                   stopped: Sequence[str]) -> None:
    """The one judgement of a ``--serving`` run (kernel result + the benches' documents, :func:`spx.analysis.judge.
    judge`), into ``outcome`` and ``OUT/status.json``; ``stopped``: the stages that stopped early (then no verdict)."""
    judged = judge(outcome.result, spec, serving=docs[0], accuracy=docs[1], step=docs[2], require_vllm=True,
                   identity=RunIdentity(experiment=outcome.result.experiment, spec_hash=spec_hash(spec)),
                   stopped=stopped)
    outcome.serving, outcome.accuracy, outcome.step = judged.serving, judged.accuracy, judged.step
    outcome.status = build_status(outcome.result, judged)
    write_status(out, outcome.status)


@dataclass
class BenchesOutcome:
    """What ``spx serving`` produced: the statuses (``None`` when not in the spec) and ``status.json``'s document.

    ``complete``: every measurement finished (the results are written either way).
    """

    status: ExperimentStatus
    serving: ServingStatus | None
    accuracy: AccuracyStatus | None
    step: StepStatus | None
    complete: bool


def run_vllm_benches(spec: ExperimentSpec, out: Path, *, name: str, vllm_command: Sequence[str] = ("vllm",)) -> BenchesOutcome:
    """Only the vLLM serving A/B, GSM8K and step A/B of ``spec`` into ``out`` (``spx serving``), then their
    verdict (:func:`spx.analysis.judge.judge`, once: a usable step decides; with a kernel sweep already in ``out``,
    judged together with it) into ``OUT/status.json``, which ``spx report`` and ``spx gate`` read.

    Raises:
        ValueError: the benches cannot start (no ``spec.serving``, an accuracy arm that is not a serving arm).
        OSError: a missing GSM8K dataset, ``out`` not writable.
    """
    from spx.serving.ab import RunnerOptions, run_vllm_benchmarks

    if spec.serving is None:
        raise ValueError("the spec has no spec.serving")
    started = utc_now()
    try:
        benches = run_vllm_benchmarks(spec, out, RunnerOptions(vllm_command=list(vllm_command), experiment=name))
    except (ValueError, OSError, KeyboardInterrupt) as exc:  # status.json says why, for spx report and spx gate
        why = (f"the vLLM benches were stopped ({str(exc) or 'interrupted (Ctrl-C)'}): every server was stopped; what "
               "they measured is in this folder" if isinstance(exc, KeyboardInterrupt)
               else f"the vLLM benches did not start: {exc}")
        with contextlib.suppress(OSError):  # (a full disk: the error itself is what the caller reports)
            write_status(out, _failed_benches_status(spec, out, why, started))
        raise
    kernel_run = _kernel_result_in(out)
    # a kernel sweep already in --out (`spx run`, then `spx serving` into the same folder, as the step A/B's next
    # step says) is judged together with the benches, as `spx report` judges the folder, so both commands agree;
    # documents of another experiment or spec are refused there (the kernel run's identity)
    identity = RunIdentity(experiment=kernel_run.experiment if kernel_run else name,
                           spec_hash=spec_hash(kernel_run.spec if kernel_run else spec))
    judged = judge(kernel_run, kernel_run.spec if kernel_run is not None else spec, serving=benches.serving,
                   accuracy=benches.accuracy, step=benches.step, identity=identity, benches_only=kernel_run is None)
    if kernel_run is not None:
        status = build_status(kernel_run, judged)
    else:
        status = local_status(judged, now=utc_now(), started_at=started, completed_summary="vLLM benches completed")
    write_status(out, status)
    complete = all(r is None or r.complete for r in (benches.serving, benches.accuracy, benches.step))
    return BenchesOutcome(status=status, serving=judged.serving, accuracy=judged.accuracy, step=judged.step,
                          complete=complete)


def _failed_benches_status(spec: ExperimentSpec, out: Path, why: str, started: str) -> ExperimentStatus:
    """``status.json`` of ``spx serving`` whose benches did not start or were stopped: the vLLM sections that were
    asked for fail with ``why``; judged with the kernel sweep already in ``out`` when there is one (as
    :func:`run_vllm_benches` judges a completed run), else ``BenchmarkFailed`` with ``why``."""
    kernel_run = _kernel_result_in(out)  # (the one judgement, the stage recorded as stopped: issue #35)
    if kernel_run is not None:
        return build_status(kernel_run, judge(kernel_run, kernel_run.spec, require_vllm=True, stopped=[why]))
    return local_status(judge(None, spec, benches_only=True, stopped=[why]), now=utc_now(), started_at=started)


def _kernel_result_in(out: Path) -> KernelResult | None:
    """The kernel sweep's ``result.json`` in ``out`` (a ``spx run`` there before ``spx serving``), or ``None``:
    absent or unreadable (then the benches are judged alone, as before)."""
    return RunDirectory(out).result_or_none()


__all__ = ["BenchesOutcome", "ExperimentOptions", "ExperimentOutcome", "RunHooks", "build_status", "is_cpu", "run_experiment",
           "run_vllm_benches", "write_result_summary", "write_status"]
