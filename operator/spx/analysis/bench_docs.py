"""The bench documents a run is judged with (serving, accuracy, step), admitted once and summarised once.

Pure. :func:`spx.analysis.judge.judge` takes each bench either as its result document (``serving-result.json``,
``accuracy-result.json``, ``step-result.json``: summarised here by today's rules) or as its status section (a
pod's bounded summary, or what a run recorded). A document that belongs to another experiment, spec or run
(:class:`RunIdentity`: the experiment's name, :func:`spx.api.spec.spec_hash` of its spec, the run id) is refused:
not judged, and named in the warnings (issue #35, requirement 3). The step A/B is summarised against the kernel
sweep's own points (their Δg and Δh: no judgement needed, so a run is judged once).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spx.api.accuracy import AccuracyResult, AccuracyStatus
from spx.api.serving import ServingResult, ServingStatus
from spx.api.spec import ExperimentSpec
from spx.api.status import KernelPoint, KernelStatus
from spx.api.step import StepResult, StepStatus
from spx.vocabulary import ACCURACY_RESULT_FILE, SERVING_RESULT_FILE, STEP_RESULT_FILE

BenchDocument = ServingResult | AccuracyResult | StepResult


@dataclass(frozen=True)
class RunIdentity:
    """Whose bench documents a judgement admits: ``None`` in a field admits any value there (an older document
    without the field is admitted too: it predates the record)."""

    experiment: str | None = None
    spec_hash: str | None = None
    run_id: str | None = None


def refusal(doc: BenchDocument, identity: RunIdentity | None, label: str) -> str | None:
    """Why ``doc`` is not this run's (a warning naming the field, both values and the fix), or ``None``."""
    if identity is None:
        return None
    checks = (("experiment", identity.experiment, doc.experiment), ("specHash", identity.spec_hash, doc.spec_hash),
              ("runId", identity.run_id, doc.run_id))
    for name, want, got in checks:
        if want is not None and got is not None and want != got:
            return (f"{label}: not judged with this run: it belongs to another {name.removesuffix('Hash')} ({name} "
                    f"{str(got)[:60]!r}, this run's {str(want)[:60]!r}); run the bench for this experiment (spx serving "
                    "EXPERIMENT --out DIR into this run's DIR) or judge that document's own folder")
    return None


@dataclass
class Benches:
    """The benches a run is judged with (``None``: not given or refused) and the refusals."""

    serving: ServingStatus | None = None
    accuracy: AccuracyStatus | None = None
    step_result: StepResult | None = None
    step: StepStatus | None = None
    refused: list[str] = field(default_factory=list)

    @property
    def any(self) -> bool:
        """Some bench is there to judge."""
        return any(x is not None for x in (self.serving, self.accuracy, self.step_result, self.step))


def admit(serving: ServingResult | ServingStatus | None, accuracy: AccuracyResult | AccuracyStatus | None,
          step: StepResult | StepStatus | None, spec: ExperimentSpec, identity: RunIdentity | None) -> Benches:
    """The benches of a run: documents of another run refused (:func:`refusal`), the serving and accuracy documents
    summarised (:func:`spx.analysis.serving.summarize` with ``gate.allowCpuTimings``,
    :func:`spx.analysis.accuracy.summarize`); the step document kept for :func:`step_status`."""
    from spx.analysis.accuracy import summarize as summarize_accuracy
    from spx.analysis.serving import summarize as summarize_serving

    out = Benches()
    for doc, label in ((serving, SERVING_RESULT_FILE), (accuracy, ACCURACY_RESULT_FILE), (step, STEP_RESULT_FILE)):
        if isinstance(doc, ServingResult | AccuracyResult | StepResult) and (why := refusal(doc, identity, label)):
            out.refused.append(why)
    refused = {r.split(":", 1)[0] for r in out.refused}
    if isinstance(serving, ServingResult):
        if SERVING_RESULT_FILE not in refused:
            out.serving = summarize_serving(serving, allow_cpu_timings=spec.gate.allow_cpu_timings)
    else:
        out.serving = serving
    if isinstance(accuracy, AccuracyResult):
        if ACCURACY_RESULT_FILE not in refused:
            out.accuracy = summarize_accuracy(accuracy)
    else:
        out.accuracy = accuracy
    if isinstance(step, StepResult):
        out.step_result = step if STEP_RESULT_FILE not in refused else None
    else:
        out.step = step
    return out


def step_status(benches: Benches, points: list[KernelPoint], spec: ExperimentSpec,
                identity: RunIdentity | None) -> StepStatus | None:
    """``status.step``: the step document summarised against the kernel sweep's points (:func:`spx.analysis.step.
    summarize`: their Δg and Δh place each effect's regime), else the step section as given."""
    if benches.step_result is None:
        return benches.step
    from spx.analysis import step as step_analysis

    kernel = KernelStatus(points=points) if points else None
    return step_analysis.summarize(benches.step_result, kernel, allow_cpu_timings=spec.gate.allow_cpu_timings,
                                   experiment=identity.experiment if identity else None,
                                   spec_hash=identity.spec_hash if identity else None)
