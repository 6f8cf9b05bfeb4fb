"""``spx predict``: the seed's H20 → H100/H200 what-if from an H20 kernel table."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from spx.api.exit_codes import EXIT_OK
from spx.cli.common import (
    MAX_TABLE_BYTES,
    UsageError,
    add_output_option,
    emit,
    make_console,
    read_text,
    with_error_document,
)
from spx.cli.documents import PredictDocument
from spx.cli.registry import command
from spx.vocabulary import INTERPOLATIONS, PREDICT_GATHERS, THRESHOLD_ROUNDINGS

if TYPE_CHECKING:
    from spx.analysis.crossover import Interpolation
    from spx.analysis.predict import Prediction
    from spx.api.result import KernelResult

H20_TABLE = "h20_tp8_fused_wqa_wkv.csv"


def _predict_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("csv", metavar="CSV", nargs="?",
                   help="kernel table (tokens,rows_per_rank,replicated_us,split_allgather_us,speedup); "
                   "default: the seed's 8× H20 table shipped with spx")
    p.add_argument("--tp", type=int, default=8, help="TP size the table was measured at (default 8)")
    p.add_argument("--interpolation", choices=sorted(INTERPOLATIONS, key=lambda i: i != "linear"), default="linear",
                   help="interpolation of the shard GEMM time and the break-even (default linear, "
                   "which reproduces the seed author's ~1450 tokens; log-log gives ~1270)")
    p.add_argument("--rounding", choices=THRESHOLD_ROUNDINGS,
                   help="threshold rounding rule (default next-power-of-two; with --measured and a --gather prior, "
                   "the run's spec.gate.thresholdRounding, as spx report)")
    p.add_argument("--gather", choices=PREDICT_GATHERS, default="h20-derived",
                   help="all-gather of the prediction: the one derived from the table (default, the seed "
                   "author's method), or GatherModelSpec's h20-calibrated or datasheet prior")
    p.add_argument("--measured", metavar="RESULT",
                   help="a one-GPU run's result.json or its directory (e.g. examples/results/h200-1gpu/humming): "
                   "predict with its measured GEMM times instead of the seed author's scaling factors; the "
                   "gather stays the table's (--gather h20-derived), or is that prior's (h20-calibrated, "
                   "datasheet: the same points, intervals and band as spx report of the run re-modelled)")
    add_output_option(p, "predict.schema.json")


def _default_table() -> str:
    from importlib.resources import files

    return (files("spx") / "data" / H20_TABLE).read_text(encoding="utf-8")


@command("predict", "The seed's H20 → H100/H200 what-if: predicted crossover and threshold from an H20 table.", _predict_args)
def cmd_predict(args: argparse.Namespace) -> int:
    """The what-if; with ``-o json|yaml`` an input error is a document with ``problems`` (exit 3), as ``spx validate``."""
    source = args.csv or args.measured or f"{H20_TABLE} (shipped with spx)"
    return with_error_document(args.output, lambda: _predict(args),
                               lambda problems: PredictDocument(source=source, problems=problems))


def _predictions(args: argparse.Namespace) -> tuple[Prediction, Prediction | None, Interpolation, str]:
    """The prediction under ``--interpolation``, the other interpolation's (None when it cannot be made), that
    other interpolation's name, and what the prediction was made from.

    Raises:
        UsageError: a bad ``--tp``, or a table / measured run the prediction cannot use (exit 3).
    """
    from spx.analysis.predict import predict_from_table, predict_remodelled, predict_with_measured
    from spx.api.gather_model import GatherModelSpec
    from spx.vocabulary import ThresholdRounding

    if args.csv:
        text, source = _read_table(args.csv), args.csv
    else:
        text, source = _default_table(), f"{H20_TABLE} (shipped with spx)"
    if args.tp < 1:
        raise UsageError(f"--tp must be >= 1 (got {args.tp})")
    interpolation: Interpolation = "linear" if args.interpolation == "linear" else "log-log"
    measured = _read_measured(args.measured) if args.measured else None
    gather_model = None if args.gather == "h20-derived" else GatherModelSpec(prior=args.gather)
    rounding: ThresholdRounding = args.rounding or "next-power-of-two"

    def predict(how: Interpolation) -> Prediction:
        if measured is not None and gather_model is not None:  # the run's gate (rule, rounding), as spx report
            return predict_remodelled(measured, gather_model, rounding=args.rounding)
        if measured is not None:
            return predict_with_measured(text, measured, tp=args.tp, rounding=rounding, interpolation=how)
        return predict_from_table(text, tp=args.tp, rounding=rounding, interpolation=how, gather_model=gather_model)

    try:
        pred = predict(interpolation)
    except ValueError as exc:
        raise UsageError(f"{args.measured or source}: {exc}") from None
    other: Interpolation = "log-log" if interpolation == "linear" else "linear"
    try:
        alt: Prediction | None = predict(other)
    except ValueError:
        alt = None
    if measured is not None:
        source = f"the GEMMs of {args.measured} ({measured.gemm_backend})" + (
            f", gather {args.gather}" if gather_model is not None else f" and the gather of {source}")
    return pred, alt, other, source


def _predict(args: argparse.Namespace) -> int:
    pred, alt, other, source = _predictions(args)
    if args.output != "text":
        emit(PredictDocument(source=source, prediction=pred, alternative_interpolation=other,
                             alternative_break_even_tokens=alt.break_even_tokens if alt else None), args.output)
        return EXIT_OK
    _print_prediction(pred, alt, other, source, args)
    return EXIT_OK


def _print_prediction(pred: Prediction, alt: Prediction | None, other: Interpolation, source: str,
                      args: argparse.Namespace) -> None:
    """The prediction's table, break-even, first win, recommended threshold, uncertainty and method, as text."""
    from spx.api import KernelStatus
    from spx.cli.tables import crossover_lines, kernel_table, prediction_table, terminal_width, uncertainty_lines

    console = make_console()
    kernel = KernelStatus(points=pred.points, crossover_tokens=pred.break_even_tokens,
                          first_winning_tokens=pred.first_winning_tokens, crossover_confidence=pred.crossover_confidence,
                          recommended_threshold_tokens=pred.recommended_threshold_tokens,
                          threshold_rounding=pred.threshold_rounding, uncertainty=pred.uncertainty)
    if pred.rows:
        console.print(prediction_table(pred.rows, title=f"H100/H200 what-if from {source}, TP{args.tp}",
                                       width=terminal_width(console)))
    else:
        console.print(kernel_table(kernel, title=f"{source}, TP{pred.tensor_parallel_size}", width=terminal_width(console)))
    be = pred.break_even_tokens
    alt_text = ""
    if alt is not None and alt.break_even_tokens is not None:
        alt_text = f" ({other} interpolation: ≈ {alt.break_even_tokens:,.0f})"
    lines = [f"break-even: ≈ {be:,.0f} tokens, {args.interpolation} interpolation{alt_text}" if be is not None
             else "break-even: none (the split never wins from some count on)"]
    if pred.first_winning_tokens is not None:
        lines.append(f"split wins from {pred.first_winning_tokens:,} tokens on (the first win after the last loss; "
                     "single wins below it do not count)")
    if pred.recommended_threshold_tokens is not None:
        lines.append(f"recommended threshold: {pred.recommended_threshold_tokens:,} tokens ({pred.threshold_rounding})")
    lines += uncertainty_lines(kernel)
    if not pred.rows:
        lines += crossover_lines(kernel)
    lines.append(f"method: {pred.method}")
    for line in lines:
        console.print(line, highlight=False, markup=False)


def _read_table(path: str) -> str:
    """The CSV kernel table at ``path``; a run directory or a result.json is refused, pointing at ``--measured``.

    Raises:
        UsageError: unreadable, not UTF-8, a directory, or JSON instead of CSV.
    """
    import json
    import os.path

    from spx.api.loading import kind_of

    if os.path.isdir(path):
        raise UsageError(f"{path} is a directory, not a CSV kernel table: a run directory goes to --measured {path} "
                         "(with the default H20 table, or a CSV after it)")
    text = read_text(path, "a CSV table", MAX_TABLE_BYTES, "")
    if text.lstrip().startswith(("{", "[")):
        try:
            doc = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            return text  # not JSON after all (or nested past any document): the CSV reader says what is wrong
        kind = str(doc.get("schemaVersion") or "") if isinstance(doc, dict) else ""
        if kind_of(doc) == "result":  # (any version of a run's result.json)
            raise UsageError(f"{path} is a run's result (JSON), not a CSV kernel table: pass it as --measured {path} "
                             "to predict with its measured GEMM times")
        raise UsageError(f"{path} is JSON{f' ({kind[:60]})' if kind else ''}, not a CSV kernel table (columns "
                         "tokens,rows_per_rank,replicated_us,split_allgather_us,speedup; one row per token count)")
    return text


def _read_measured(path: str) -> KernelResult:
    """The result document at ``path`` (a run's result.json, or the run directory holding it); raises
    :class:`UsageError` naming what is wrong with it."""
    import os.path

    from pydantic import ValidationError

    from spx.api import describe_validation_error
    from spx.api.result import KernelResult
    from spx.rundir import RunDirectory, RunDirectoryError, loads_json

    if os.path.isdir(path):
        result = RunDirectory(path).result_path
        if not result.is_file():
            raise UsageError(f"--measured {path}: the directory has no result.json; give a run's --out directory "
                             "or its result.json")
        path = str(result)
    try:
        return KernelResult.model_validate(loads_json(read_text(path, "a result.json", MAX_TABLE_BYTES, ""), path,
                                                      "a run's result.json"))
    except RunDirectoryError as err:
        raise UsageError(f"--measured {err}") from None
    except ValidationError as err:
        problems = describe_validation_error(err)
        more = f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
        raise UsageError(f"--measured {path} is not a spx result document (a run's result.json): "
                         f"{'; '.join(problems[:5])}{more}") from None
