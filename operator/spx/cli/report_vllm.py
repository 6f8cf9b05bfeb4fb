"""The vLLM results of a run's folder that ``spx report`` judges with, so that it reaches the verdict ``spx gate``
reads from the same folder's ``status.json``.

A run with ``--serving`` (``spx run``, the operator's bench pod) judges its kernel sweep together with the
serving A/B, GSM8K and the step A/B (:func:`spx.analysis.judge.judge`) and writes that verdict to
``status.json``; ``spx gate`` reads it. ``spx report`` re-judges the folder, so it must see the same
sections. Each is read from its result document when the folder holds one (``serving-result.json``,
``accuracy-result.json``, ``step-result.json``, in the folder or its ``serving/`` subfolder: summarised once by
:func:`spx.analysis.judge.judge` by today's rules, as the run summarised them), else from ``status.json``'s
section (what the run judged: e.g. why the benches did not start).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from spx.api.accuracy import AccuracyResult, AccuracyStatus
from spx.api.serving import ServingResult, ServingStatus
from spx.api.status import ExperimentStatus
from spx.api.step import StepResult, StepStatus
from spx.vocabulary import ACCURACY_RESULT_FILE, SERVING_RESULT_FILE, STEP_RESULT_FILE

D = TypeVar("D", ServingResult, AccuracyResult, StepResult)


@dataclass
class VllmSections:
    """The serving, accuracy and step benches the run is judged with (``None``: not in the folder), each as its
    result document (judged by :func:`spx.analysis.judge.judge`, which summarises it once) or, without one,
    ``status.json``'s section; where each came from (``sources``, e.g. ``serving (serving/serving-result.json)``)
    and what could not be read (``warnings``: that section is then taken from ``status.json``, or left out)."""

    serving: ServingResult | ServingStatus | None = None
    accuracy: AccuracyResult | AccuracyStatus | None = None
    step: StepResult | StepStatus | None = None
    sources: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def judged_with(self, refused: list[str]) -> list[str]:
        """:attr:`sources` less the documents the judgement refused (``refused``: lines starting with the file name,
        ``step-result.json: not judged with this run …``, :func:`spx.analysis.bench_docs.refusal`): only what was
        used."""
        gone = {r.split(":", 1)[0] for r in refused}
        return [s for s in self.sources if not any(s.endswith(f"{name})") for name in gone)]


def read_vllm_sections(directory: Path, status: ExperimentStatus | None) -> VllmSections:
    """The vLLM benches of the run in ``directory`` (module docstring); ``status``: its parsed status.json.

    Never raises for a result document that cannot be read: the warning names it, and the status's section
    (if any) is used instead. Nothing is summarised or judged here (:func:`spx.analysis.judge.judge` does, once).
    """
    out = VllmSections()
    if serving := _read(directory, SERVING_RESULT_FILE, ServingResult, out):
        out.serving = serving[0]
        out.sources.append(f"serving ({serving[1]})")
    if accuracy := _read(directory, ACCURACY_RESULT_FILE, AccuracyResult, out):
        out.accuracy = accuracy[0]
        out.sources.append(f"accuracy ({accuracy[1]})")
    if step := _read(directory, STEP_RESULT_FILE, StepResult, out):
        out.step = step[0]
        out.sources.append(f"step A/B ({step[1]})")
    if status is not None:
        for name in ("serving", "accuracy", "step"):
            if getattr(out, name) is None and getattr(status, name) is not None:
                setattr(out, name, getattr(status, name))
                out.sources.append(f"{'step A/B' if name == 'step' else name} (status.json)")
    return out


def _read(directory: Path, name: str, model: type[D], out: VllmSections) -> tuple[D, str] | None:
    """``(document, path relative to directory)`` of result document ``name`` (in the folder or its ``serving/``:
    :meth:`spx.rundir.RunDirectory.bench_path`), or ``None`` (absent, or not readable: a warning in ``out``)."""
    from spx.api.problems import SpecError, clip
    from spx.rundir import RunDirectory, RunDirectoryError

    run_dir = RunDirectory(directory)
    path = run_dir.bench_path(name)
    if path is None:
        return None
    try:
        document = run_dir.bench_document(path.relative_to(directory).as_posix(), model)
    except (RunDirectoryError, SpecError) as err:
        problems = err.problems if isinstance(err, SpecError) else [str(err)]
        more = f"; … and {len(problems) - 3} more" if len(problems) > 3 else ""
        why = clip("; ".join(problems[:3]) + more, 400)
        out.warnings.append(f"{path}: not judged with it, it cannot be read as {name} ({why}); "
                            "status.json's section is used where there is one")
        return None
    assert document is not None
    return document, str(path.relative_to(directory))
