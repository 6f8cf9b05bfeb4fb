"""The vLLM results of a run's folder that ``spx report`` judges with, so that it reaches the verdict ``spx gate``
reads from the same folder's ``status.json``.

A run with ``--serving`` (``spx run``, the operator's bench pod) judges its kernel sweep together with the
serving A/B, GSM8K and the step A/B (:func:`spx.analysis.judge.judge`) and writes that verdict to
``status.json``; ``spx gate`` reads it. ``spx report`` re-judges the folder, so it must see the same
sections. Each is read from its result document when the folder holds one (``serving-result.json``,
``accuracy-result.json``, in the folder or its ``serving/`` subfolder: re-summarised by today's rules), else
from ``status.json``'s section (what the run judged: e.g. why the benches did not start). The step A/B is read
from ``status.json``'s ``step`` section.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from spx.api.accuracy import AccuracyResult, AccuracyStatus
from spx.api.serving import ServingResult, ServingStatus
from spx.api.status import ExperimentStatus
from spx.api.step import StepStatus
from spx.vocabulary import ACCURACY_RESULT_FILE, SERVING_DIR, SERVING_RESULT_FILE

D = TypeVar("D", ServingResult, AccuracyResult)


@dataclass
class VllmSections:
    """The serving, accuracy and step sections judged with the kernel sweep (``None``: not in the folder),
    where each came from (``sources``, e.g. ``serving (serving/serving-result.json)``) and what could not be
    read (``warnings``: that section is then taken from ``status.json``, or left out)."""

    serving: ServingStatus | None = None
    accuracy: AccuracyStatus | None = None
    step: StepStatus | None = None
    sources: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _document(directory: Path, name: str) -> Path | None:
    """``directory/name`` or ``directory/serving/name`` (where ``spx run --serving`` writes it), if a file."""
    for path in (directory / name, directory / SERVING_DIR / name):
        if path.is_file():
            return path
    return None


def read_vllm_sections(directory: Path, status: ExperimentStatus | None) -> VllmSections:
    """The vLLM sections of the run in ``directory`` (module docstring); ``status``: its parsed status.json.

    Never raises for a result document that cannot be read: the warning names it, and the status's section
    (if any) is used instead.
    """
    from spx.analysis.accuracy import summarize as summarize_accuracy
    from spx.analysis.serving import summarize as summarize_serving

    out = VllmSections()
    serving = _read(directory, SERVING_RESULT_FILE, ServingResult, out)
    out.serving = summarize_serving(serving[0]) if serving else None
    accuracy = _read(directory, ACCURACY_RESULT_FILE, AccuracyResult, out)
    out.accuracy = summarize_accuracy(accuracy[0]) if accuracy else None
    for section, doc in (("serving", serving), ("accuracy", accuracy)):
        if doc:
            out.sources.append(f"{section} ({doc[1]})")
    if status is not None:
        if out.serving is None and status.serving is not None:
            out.serving = status.serving
            out.sources.append("serving (status.json)")
        if out.accuracy is None and status.accuracy is not None:
            out.accuracy = status.accuracy
            out.sources.append("accuracy (status.json)")
        if status.step is not None:
            out.step = status.step
            out.sources.append("step A/B (status.json)")
    return out


def _read(directory: Path, name: str, model: type[D], out: VllmSections) -> tuple[D, str] | None:
    """``(document, path relative to directory)`` of result document ``name``, or ``None`` (absent, or not
    readable: a warning in ``out``)."""
    import json

    from pydantic import ValidationError

    path = _document(directory, name)
    if path is None:
        return None
    try:
        return model.model_validate(json.loads(path.read_text(encoding="utf-8"))), str(path.relative_to(directory))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError, ValidationError) as err:
        out.warnings.append(f"{path}: not judged with it, it cannot be read as a {name} ({str(err)[:200]}); "
                            "status.json's section is used where there is one")
        return None
