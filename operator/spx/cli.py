"""``spx`` — the command line: run an experiment on this host, validate it, print the CRD, report, predict.

Exit codes: 0 the command did its job (for ``run``: the benchmark completed, whatever the verdict),
1 the benchmark failed (a rank crashed or timed out), 130 interrupted (SIGINT), 2 invalid input (an invalid
experiment file, a bad option, an impossible ``--nproc``).

Adding a command: write ``_NAME_args(parser)`` (its options) and ``cmd_NAME(args) -> int`` and
register them with ``@command("NAME", "help", _NAME_args)``; :func:`build_parser` builds every
registered command's subparser in one place.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import Console
from rich.markup import escape

from spx.api import (
    SUMMARY_MAX_BYTES,
    Condition,
    Environment,
    Experiment,
    ExperimentSpec,
    ExperimentStatus,
    KernelPoint,
    KernelResult,
    KernelStatus,
    PointResult,
    ResultSummary,
    SpecError,
    dump_model,
    load_experiment,
    validate_spec,
    wire,
)
from spx.api.accuracy import AccuracyStatus
from spx.api.base import utc_now
from spx.api.serving import ServingStatus

if TYPE_CHECKING:
    from spx.analysis import Evaluation
    from spx.api.accuracy import AccuracyResult
    from spx.api.serving import ServingResult
    from spx.api.status import ConditionStatus, Phase, Verdict

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130  # 128 + SIGINT, the shell's convention
EXIT_INVALID = 2

DEFAULT_OUT_ROOT = "spx-runs"
H20_TABLE = "h20_tp8_fused_wqa_wkv.csv"


class UsageError(Exception):
    """Invalid input found by a command (exit code 2); the message is shown as is."""


# --------------------------------------------------------------------------------------------
# Command registry


Handler = Callable[[argparse.Namespace], int]
Configure = Callable[[argparse.ArgumentParser], None]


@dataclass(frozen=True)
class Command:
    """One ``spx`` subcommand: its name, ``--help`` line, option builder and handler (returns the exit code)."""

    name: str
    help: str
    configure: Configure
    handler: Handler


#: Every ``spx`` subcommand, in the order ``spx --help`` lists them.
COMMANDS: dict[str, Command] = {}


def command(name: str, help: str, configure: Configure | None = None) -> Callable[[Handler], Handler]:
    """Register ``handler`` as ``spx NAME``; ``configure`` adds its options to its subparser."""

    def register(handler: Handler) -> Handler:
        if name in COMMANDS:
            raise ValueError(f"spx command {name!r} registered twice")
        COMMANDS[name] = Command(name, help, configure or (lambda p: None), handler)
        return handler

    return register


def build_parser() -> argparse.ArgumentParser:
    """The ``spx`` argument parser: one subparser per :data:`COMMANDS` entry, its handler in ``handler``."""
    from spx import __version__

    parser = argparse.ArgumentParser(
        prog="spx",
        description="Measure when splitting a TP projection by token (+ all-gather) beats computing it replicated.",
    )
    parser.add_argument("--version", action="version", version=f"spx {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for cmd in COMMANDS.values():
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        cmd.configure(p)
        p.set_defaults(handler=cmd.handler)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``spx`` console script; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help → 0, bad usage → 2
        return int(exc.code) if isinstance(exc.code, int) else EXIT_INVALID
    try:
        return int(args.handler(args))
    except UsageError as exc:
        _err_console().print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        return EXIT_INVALID
    except SpecError as exc:
        _err_console().print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        return EXIT_INVALID
    except BrokenPipeError:  # `spx crd | head`
        return EXIT_OK


# --------------------------------------------------------------------------------------------
# Shared helpers


#: Width used when output is not a terminal (pipes, logs, tests): wide enough for every table.
PIPE_WIDTH = 160


def make_console(stderr: bool = False) -> Console:
    """A rich console on stdout or stderr; :data:`PIPE_WIDTH` columns when not a terminal."""
    console = Console(stderr=stderr)
    if not console.is_terminal:
        console = Console(stderr=stderr, width=PIPE_WIDTH)
    return console


def _err_console() -> Console:
    return make_console(stderr=True)


def read_experiment(path: str) -> Experiment:
    """Load and validate an experiment file.

    Raises:
        UsageError: the file can't be read. SpecError: it is not a valid experiment.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not a UTF-8 text file: give an experiment YAML") from None
    return load_experiment(text, source=path)


def parse_tokens(text: str) -> list[int]:
    """``"6,12,24"`` → ``[6, 12, 24]``.

    Raises:
        UsageError: a value that is not a whole number.
    """
    out = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        try:
            out.append(int(part))
        except ValueError:
            raise UsageError(f"--tokens: {part!r} is not a whole number (use e.g. --tokens 6,12,2048)") from None
    if not out:
        raise UsageError("--tokens: no token counts given")
    return out


def apply_overrides(
    spec: ExperimentSpec,
    *,
    gemm_backend: str | None = None,
    samples: int | None = None,
    tokens: list[int] | None = None,
) -> ExperimentSpec:
    """The spec with command-line overrides applied and re-validated.

    Raises:
        SpecError: an override makes the spec invalid (the message names the ``spec.…`` field).
    """
    raw = dump_model(spec)
    if gemm_backend is not None:
        raw["kernel"]["gemmBackend"] = gemm_backend
    if samples is not None:
        raw["kernel"]["samples"] = samples
    if tokens is not None:
        raw["sweep"]["tokens"] = tokens
    return validate_spec(raw, source="experiment with command-line overrides")


def analyse(
    points: list[KernelPoint],
    spec: ExperimentSpec,
    gather_source: Any,
    gemm_backend: str | None,
    timer: str | None,
    cpu: bool = False,
) -> Evaluation:
    """:func:`spx.analysis.evaluate` of ``points`` under ``spec``'s gate and TP size.

    ``gather_source`` is ``measured`` or ``modelled``; ``cpu`` marks a CPU smoke run (its speed verdict
    is then reported as Inconclusive, see :func:`~spx.analysis.evaluate`). Raises ``ValueError`` on a repeated token count.
    """
    from spx.analysis import evaluate

    return evaluate(
        points,
        spec.gate,
        gather_source,
        spec.parallelism.tensor_parallel_size,
        gemm_backend=gemm_backend,
        timer=timer,
        device="cpu" if cpu else None,
    )


def _is_cpu(result: KernelResult) -> bool:
    return result.device == "cpu" or result.environment.device == "cpu"


def _condition(type_: str, status: ConditionStatus, reason: str, message: str, now: str) -> Condition:
    return Condition(type=type_, status=status, reason=reason, message=message[:4000], last_transition_time=now)


def build_status(result: KernelResult, ev: Evaluation | None) -> ExperimentStatus:
    """``status.json`` of a local run: phase, conditions (Completed, Decided), environment, kernel, verdict."""
    from spx.report import CPU_NOTE

    now = utc_now()
    cpu = _is_cpu(result)
    prefix = f"{CPU_NOTE}. " if cpu else ""
    kernel = ev.kernel if ev is not None else None
    if result.complete and result.error is None and ev is not None:
        summary = f"{len(result.points)} token counts measured"
        if result.wall_seconds is not None:
            summary += f" in {result.wall_seconds:.1f} s"
        verdict_msg = ev.reasons[0] if ev.reasons else ev.verdict
        phase: Phase = "Succeeded"
        message = f"{ev.verdict}: {verdict_msg}"
        completed = _condition("Completed", "True", "BenchmarkCompleted", summary, now)
        decided = _condition("Decided", "True", ev.verdict, verdict_msg, now)
        verdict: Verdict | None = ev.verdict
        reasons = list(ev.reasons)
    else:
        error = result.error or "the benchmark did not complete"
        phase, message = "Failed", f"benchmark failed: {error}"
        completed = _condition("Completed", "False", "BenchmarkFailed", error, now)
        decided = _condition("Decided", "True", "BenchmarkFailed", error, now)
        verdict, reasons = None, []
    return ExperimentStatus(
        phase=phase,
        start_time=result.started_at,
        completion_time=result.finished_at or now,
        message=f"{prefix}{message}",
        conditions=[completed, decided],
        environment=result.environment,
        kernel=kernel,
        verdict=verdict,
        verdict_reasons=reasons,
    )


# ResultSummary: ≤ SUMMARY_MAX_BYTES; environment detail goes first, the points never.
_ENV_KEEP_STEPS: tuple[tuple[str, ...] | None, ...] = (
    None,  # everything but kernel names
    ("gpu", "gpu_count", "compute_capability", "driver", "cuda", "torch", "nccl", "vllm", "device"),
    ("gpu", "gpu_count", "vllm", "device"),
    ("gpu",),
    (),
)


def _round_sig(x: float, digits: int) -> float:
    if x == 0 or not math.isfinite(x):
        return x
    return round(x, digits - 1 - math.floor(math.log10(abs(x))))


def _round_point(p: KernelPoint, digits: int) -> KernelPoint:
    return p.model_copy(update={k: _round_sig(v, digits) for k, v in p.__dict__.items() if isinstance(v, float)})


def _compact(model: Any) -> str:
    return wire.dumps(dump_model(model))


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def vllm_summary_levels(
    serving: ServingStatus | None, accuracy: AccuracyStatus | None
) -> list[tuple[ServingStatus | None, AccuracyStatus | None]]:
    """The serving/accuracy sections of a :class:`ResultSummary`, richest first, each smaller.

    1. everything, with at most 5 failures and 6 reasons of ≤ 200 characters;
    2. reasons dropped, at most 3 failures of ≤ 120 characters;
    3. per-arm values and arm messages dropped (means, change and check per point kept);
    4. points reduced to name, metric, change and check; arms and accuracy runs dropped; failures counted;
    5. only the gate outcomes (``gatePassed``, ``complete``, the accuracy means and drop).
    """
    levels: list[tuple[ServingStatus | None, AccuracyStatus | None]] = []
    s, a = serving, accuracy

    def each(fn_s: Any, fn_a: Any) -> None:
        levels.append((fn_s(s) if s is not None else None, fn_a(a) if a is not None else None))

    each(lambda x: x.model_copy(update={"failures": [_clip(f, 200) for f in x.failures[:5]],
                                        "reasons": [_clip(r, 200) for r in x.reasons[:6]]}),
         lambda x: x.model_copy(update={"reasons": [_clip(r, 200) for r in x.reasons[:6]]}))
    each(lambda x: x.model_copy(update={"failures": [_clip(f, 120) for f in x.failures[:3]], "reasons": []}),
         lambda x: x.model_copy(update={"reasons": []}))
    each(lambda x: x.model_copy(update={
        "failures": [_clip(f, 120) for f in x.failures[:3]], "reasons": [],
        "points": [p.model_copy(update={"values": []}) for p in x.points],
        "arms": [arm.model_copy(update={"message": None}) for arm in x.arms]}),
        lambda x: x.model_copy(update={"reasons": [], "runs": [r.model_copy(update={"error": None}) for r in x.runs]}))
    each(lambda x: x.model_copy(update={
        "failures": [f"{len(x.failures)} failure(s)"] if x.failures else [], "reasons": [], "arms": [],
        "points": [p.model_copy(update={"values": [], "main_mean": None, "split_mean": None, "improvement_pct": None})
                   for p in x.points]}),
        lambda x: x.model_copy(update={"reasons": [], "runs": []}))
    each(lambda x: ServingStatus(complete=x.complete, gate_passed=x.gate_passed,
                                 failures=[f"{len(x.failures)} failure(s)"] if x.failures else []),
         lambda x: AccuracyStatus(main_pct=x.main_pct, split_pct=x.split_pct, drop_points=x.drop_points,
                                  max_drop_points=x.max_drop_points, gate_passed=x.gate_passed))
    return levels


def build_summary(
    result: KernelResult,
    points: list[KernelPoint],
    max_bytes: int = SUMMARY_MAX_BYTES,
    serving: ServingStatus | None = None,
    accuracy: AccuracyStatus | None = None,
) -> str:
    """Compact JSON of a :class:`ResultSummary` of ``result`` in at most ``max_bytes`` bytes (UTF-8).

    Times are rounded to 6 significant digits. Shrinks in this order until it fits: the serving and
    accuracy sections (:func:`vllm_summary_levels`), environment detail (kernel names are never
    included), the error text, then the points' precision (5, 4, 3 significant digits) — the points
    themselves are always kept. Returns the smallest form when even that does not fit.
    """
    env_full = result.environment.model_copy(update={"kernels": []})
    error = result.error[:511] + "…" if result.error and len(result.error) > 512 else result.error
    points = [_round_point(p, 6) for p in points]
    candidates: list[ResultSummary] = []
    for keep in _ENV_KEEP_STEPS:
        env = env_full if keep is None else Environment(**{k: getattr(env_full, k) for k in keep})
        candidates.append(
            ResultSummary(
                points=points, environment=env, world_size=result.world_size, gemm_backend=result.gemm_backend,
                gather_source=result.gather_source, timer=result.timer, complete=result.complete, error=error,
            )
        )
    last = candidates[-1]
    for err_len in (200, 80):
        if error and len(error) > err_len:
            candidates.append(last.model_copy(update={"error": error[: err_len - 1] + "…"}))
    last = candidates[-1]
    for digits in (5, 4, 3):
        rounded = [_round_point(p, digits) for p in points]
        candidates.append(last.model_copy(update={"points": rounded}))
    levels = vllm_summary_levels(serving, accuracy) if serving is not None or accuracy is not None else [(None, None)]
    text = ""
    for cand in candidates:
        for sv, acc in levels:
            text = _compact(cand.model_copy(update={"serving": sv, "accuracy": acc}))
            if len(text.encode()) <= max_bytes:
                return text
    return text


def write_summary(path: str, text: str) -> None:
    """Write ``text`` to ``path`` (UTF-8, truncating), e.g. the pod's ``/dev/termination-log``."""
    with open(path, "w", encoding="utf-8") as f:  # also /dev/termination-log
        f.write(text)


def _emit_jsonl(stream: TextIO, kind: str, payload: Any) -> None:
    wire.write_line(stream, kind, payload)


def _draw_plot(
    console: Console, kernel: KernelStatus, path: Path, *, name: str, gpu: str | None, gemm_backend: str | None,
    gather_source: str | None, cpu: bool, gate_threshold: int | None,
) -> None:
    from spx.plot import plot_crossover, plot_title

    try:
        plot_crossover(
            kernel, path,
            title=plot_title(name=name, gpu=gpu, gemm_backend=gemm_backend, gather_source=gather_source, cpu=cpu),
            gate_threshold_tokens=gate_threshold,
        )
        console.print(f"plot: {path}", highlight=False, markup=False)
    except Exception as exc:  # a plot is a convenience: never fail a run over it
        console.print(f"[yellow]plot not drawn:[/] {type(exc).__name__}: {escape(str(exc))}", highlight=False)


def _gpu_label(env: Environment, cpu: bool) -> str | None:
    if cpu:
        return "CPU"
    if env.gpu and env.gpu_count:
        return f"{env.gpu_count}× {env.gpu}"
    return env.gpu


def _table_title(name: str, result_or_env: Environment, gemm: str | None, gather: str | None, tp: int, cpu: bool) -> str:
    where = _gpu_label(result_or_env, cpu) or "unknown GPU"
    return f"{name}: TP{tp} on {where} · gemm {gemm or '?'} · gather {gather or '?'}"


# --------------------------------------------------------------------------------------------
# spx run


def _run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="experiment YAML (a ShardedProjectionExperiment)")
    p.add_argument("--out", metavar="DIR", help=f"output directory (default: {DEFAULT_OUT_ROOT}/<metadata.name>)")
    p.add_argument("--nproc", type=int, metavar="N",
                   help="ranks to start (default: visible GPUs, else 2 on CPU; capped at TP; fewer than TP: the gather is modelled)")
    p.add_argument("--gemm-backend", metavar="B", help="override spec.kernel.gemmBackend (auto, torch-bf16, torch-fp8, vllm)")
    p.add_argument("--samples", type=int, metavar="N", help="override spec.kernel.samples")
    p.add_argument("--tokens", metavar="LIST", help="override spec.sweep.tokens, comma-separated (e.g. 6,12,2048)")
    p.add_argument("--summary-file", metavar="PATH",
                   help="also write a compact ResultSummary (≤ 4096 bytes) here, e.g. /dev/termination-log")
    p.add_argument("--jsonl", action="store_true",
                   help='JSON lines on stdout: {"kind":"point","point":{...}} per point, then {"kind":"result","result":{...}}; human output goes to stderr')
    p.add_argument("--overwrite", action="store_true",
                   help="replace the results of an earlier run in --out (default: refuse, so nothing measured is lost)")
    p.add_argument("--serving", action="store_true",
                   help="after a completed kernel bench, run spec.serving / spec.accuracy (the vLLM serving A/B and "
                        "GSM8K; needs vLLM and the GPUs) into OUT/serving; with --jsonl their results follow as "
                        '{"kind":"serving",…} / {"kind":"accuracy",…} lines and the summary gets their gates')
    p.add_argument("--vllm", default="vllm", metavar="CMD", help="with --serving: the vLLM CLI (argv prefix, split on spaces)")


#: Files a run writes into --out; an earlier run's are cleared by --overwrite (never others).
RUN_OUTPUTS = ("result.json", "status.json", "crossover.png", "points.partial.jsonl", "serving")


def prepare_out_dir(out: Path, overwrite: bool) -> None:
    """Refuse to mix two runs in one directory; with ``overwrite``, clear the earlier run's files.

    Raises:
        UsageError: ``out`` is a file, or holds an earlier run and ``overwrite`` is false.
    """
    import shutil

    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; give a directory")
    earlier = [name for name in RUN_OUTPUTS if (out / name).exists()]
    if not earlier:
        return
    if not overwrite:
        raise UsageError(
            f"--out {out} already holds a run ({', '.join(earlier)}); pass --overwrite to replace it, "
            "or choose another --out"
        )
    for name in earlier:
        if (out / name).is_dir():
            shutil.rmtree(out / name)
        else:
            (out / name).unlink()
    shutil.rmtree(out / "logs", ignore_errors=True)


def check_writable(path: str) -> None:
    """Fail before measuring when the summary file can't be written (``/dev/termination-log`` in a pod).

    Raises:
        UsageError: the file can't be opened for writing.
    """
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise UsageError(f"--summary-file {path} is not writable: {exc.strerror or exc}") from None


@command("run", "Run an experiment's kernel benchmark on this host (one process per rank).", _run_args)
def cmd_run(args: argparse.Namespace) -> int:
    from spx.analysis import points_from_result
    from spx.report import CPU_NOTE, print_report
    from spx.runner.local import RunnerError, run_local

    exp = read_experiment(args.file)
    tokens = parse_tokens(args.tokens) if args.tokens is not None else None
    spec = apply_overrides(exp.spec, gemm_backend=args.gemm_backend, samples=args.samples, tokens=tokens)
    name = exp.metadata.name
    out = Path(args.out) if args.out else Path(DEFAULT_OUT_ROOT) / name
    console = make_console(stderr=bool(args.jsonl))
    stdout = sys.stdout
    prepare_out_dir(out, args.overwrite)
    if args.summary_file:
        check_writable(args.summary_file)
    tp = spec.parallelism.tensor_parallel_size
    if args.nproc is not None and args.nproc > tp:
        console.print(f"note: --nproc {args.nproc} capped at tensorParallelSize {tp}", highlight=False, markup=False)

    on_point: Callable[[PointResult], None] | None = None
    if args.jsonl:
        def on_point(p: PointResult) -> None:
            _emit_jsonl(stdout, "point", dump_model(p))

    try:
        outcome = run_local(spec, out, nproc=args.nproc, experiment=name, on_point=on_point, progress=console)
    except RunnerError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:  # the output directory can't be created or written
        raise UsageError(f"cannot write results under {out}: {exc.strerror or exc}") from None
    result = outcome.result
    cpu = _is_cpu(result)

    ev = None
    analysis_error = None
    points: list[KernelPoint] = []
    if result.points:
        try:
            points = points_from_result(result)
            ev = analyse(points, spec, result.gather_source, result.gemm_backend, result.timer, cpu=cpu)
        except ValueError as exc:
            analysis_error = f"analysis failed: {exc}"
    if analysis_error and result.complete:
        result = result.model_copy(update={"complete": False, "error": analysis_error})
        (out / "result.json").write_text(result.model_dump_json(by_alias=True, indent=1) + "\n", encoding="utf-8")
    status = build_status(result, ev)
    (out / "status.json").write_text(json.dumps(dump_model(status), indent=1) + "\n", encoding="utf-8")

    if args.summary_file:
        try:
            write_summary(args.summary_file, build_summary(result, points))
        except OSError as exc:
            _err_console().print(f"[yellow]summary not written to {escape(args.summary_file)}:[/] {escape(str(exc))}")

    title = _table_title(name, result.environment, result.gemm_backend, result.gather_source, tp, cpu)
    notes = [f"{outcome.nproc} rank(s), timer {result.timer}", *[w for w in result.warnings if "CPU smoke run" not in w]]
    print_report(
        console,
        ev.kernel if ev else KernelStatus(),
        verdict=status.verdict,
        reasons=status.verdict_reasons,
        title=title,
        cpu=cpu,
        gate_threshold_tokens=spec.gate.threshold_tokens,
        notes=notes,
    )
    if ev is not None:
        _draw_plot(console, ev.kernel, out / "crossover.png", name=name, gpu=_gpu_label(result.environment, cpu),
                   gemm_backend=result.gemm_backend, gather_source=result.gather_source, cpu=cpu,
                   gate_threshold=spec.gate.threshold_tokens)
    if cpu:
        console.print(f"[bold yellow]{CPU_NOTE}[/]", highlight=False)
    console.print(f"results: {out / 'status.json'}, {out / 'result.json'}", highlight=False, markup=False)

    if args.jsonl:
        _emit_jsonl(stdout, "result", dump_model(result))

    if args.serving and spec.serving is not None:
        if status.phase != "Succeeded":
            console.print("serving A/B and GSM8K not run: the kernel bench did not complete", highlight=False, markup=False)
        else:
            return _run_vllm_step(args, spec, name, out, result, points, status, console, stdout)

    if status.phase != "Succeeded":  # errors always go to stderr
        err = _err_console()
        err.print(f"[bold red]benchmark failed:[/] {escape(result.error or '')}", highlight=False)
        if outcome.failures:
            f = outcome.failures[0]
            err.print(f"rank {f.rank} log: {f.stderr_log}", highlight=False, markup=False)
        err.print(
            f"partial result kept: {out / 'result.json'} ({len(result.points)} of {len(spec.sweep.tokens)} "
            f"token counts); logs: {outcome.log_dir}",
            highlight=False,
            markup=False,
        )
        if (result.error or "").startswith("interrupted (SIGINT)"):
            return EXIT_INTERRUPTED
        return EXIT_FAILED
    return EXIT_OK


def with_vllm_gates(status: ExperimentStatus, serving: ServingStatus | None, accuracy: AccuracyStatus | None) -> ExperimentStatus:
    """A decided local status with the serving/accuracy sections and the verdict over every gate."""
    from spx.analysis import combine_verdict

    update: dict[str, Any] = {"serving": serving, "accuracy": accuracy}
    if status.verdict is not None:
        verdict, reasons = combine_verdict(status.verdict, status.verdict_reasons, serving, accuracy)
        first = reasons[0] if reasons else verdict
        now = utc_now()
        conditions = [c for c in status.conditions if c.type != "Decided"]
        conditions.append(_condition("Decided", "True", verdict, first, now))
        update.update(verdict=verdict, verdict_reasons=reasons, conditions=conditions,
                      message=f"{verdict}: {first}")
    return status.model_copy(update=update)


def _run_vllm_step(
    args: argparse.Namespace, spec: ExperimentSpec, name: str, out: Path, result: KernelResult,
    points: list[KernelPoint], status: ExperimentStatus, console: Console, stdout: TextIO,
) -> int:
    """``spx run --serving`` after a completed kernel bench: the vLLM serving A/B and GSM8K.

    Their result documents follow the kernel's on stdout (``{"kind":"serving"}``, ``{"kind":"accuracy"}``;
    printed after every arm too, the last line wins), their statuses go into the summary file and
    ``status.json``, and the verdict covers their gates. Exit 0 when the benches ran (failed arms or
    points are in the results and make the gate Fail or Inconclusive), 1 when they could not start
    (an accuracy arm that is not a serving arm, a missing GSM8K dataset).
    """
    from spx.analysis.accuracy import summarize as summarize_accuracy
    from spx.analysis.serving import summarize as summarize_serving
    from spx.bench.serving import RunnerOptions, run_vllm_benchmarks

    assert spec.serving is not None
    has_points = bool(spec.serving.points)

    def emit(serving_result: ServingResult | None, accuracy_result: AccuracyResult | None) -> None:
        if not args.jsonl:
            return
        if serving_result is not None and has_points:
            _emit_jsonl(stdout, "serving", dump_model(serving_result))
        if accuracy_result is not None:
            _emit_jsonl(stdout, "accuracy", dump_model(accuracy_result))

    opts = RunnerOptions(vllm_command=args.vllm.split(), experiment=name, on_arm=emit)
    serving: ServingStatus | None = None
    accuracy: AccuracyStatus | None = None
    code = EXIT_OK
    try:
        outcome = run_vllm_benchmarks(spec, out / "serving", opts)
    except (ValueError, OSError) as exc:
        why = f"the vLLM benches did not start: {exc}"
        _err_console().print(f"[bold red]{escape(why)}[/]", highlight=False)
        if has_points:
            serving = ServingStatus(failures=[why], reasons=[why])
        if spec.accuracy is not None:
            accuracy = AccuracyStatus(reasons=[f"GSM8K: {why}"], max_drop_points=spec.accuracy.max_drop_points)
        code = EXIT_FAILED
    else:
        emit(outcome.serving, outcome.accuracy)
        serving = summarize_serving(outcome.serving) if outcome.serving is not None else None
        accuracy = summarize_accuracy(outcome.accuracy) if outcome.accuracy is not None else None
    if code == EXIT_OK:
        status = with_vllm_gates(status, serving, accuracy)
    else:
        status = status.model_copy(update={"serving": serving, "accuracy": accuracy})
    (out / "status.json").write_text(json.dumps(dump_model(status), indent=1) + "\n", encoding="utf-8")
    if args.summary_file:
        try:
            write_summary(args.summary_file, build_summary(result, points, serving=serving, accuracy=accuracy))
        except OSError as exc:
            _err_console().print(f"[yellow]summary not written to {escape(args.summary_file)}:[/] {escape(str(exc))}")
    for line in _vllm_report_lines(serving, accuracy):
        console.print(line, highlight=False, markup=False)
    if status.verdict is not None:
        console.print(f"verdict over every gate: {status.verdict}", highlight=False, markup=False)
    console.print(f"results: {out / 'status.json'}, {out / 'serving'}", highlight=False, markup=False)
    return code


def _vllm_report_lines(serving: ServingStatus | None, accuracy: AccuracyStatus | None) -> list[str]:
    lines: list[str] = []
    if serving is not None:
        lines.append(f"serving A/B: gate {'passed' if serving.gate_passed else 'FAILED' if serving.gate_passed is False else 'inconclusive'}")
        for p in serving.points:
            change = "—" if p.change_pct is None else f"{p.change_pct:+.2f}%"
            lines.append(f"  {p.name}: {p.metric} main {p.main_mean} split {p.split_mean} {p.unit}, change {change}")
        lines += [f"  failed: {f}" for f in serving.failures]
    if accuracy is not None:
        lines.append("GSM8K: " + ("; ".join(accuracy.reasons) or "no result"))
    return lines


# --------------------------------------------------------------------------------------------
# spx validate / crd


def _validate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="experiment YAML")


@command("validate", "Validate an experiment file and print it normalised (defaults filled in).", _validate_args)
def cmd_validate(args: argparse.Namespace) -> int:
    import yaml

    exp = read_experiment(args.file)
    sys.stdout.write(yaml.safe_dump(dump_model(exp), sort_keys=False, allow_unicode=True))
    _err_console().print(f"{args.file}: valid", highlight=False, markup=False)
    return EXIT_OK


@command("crd", "Print the ShardedProjectionExperiment CustomResourceDefinition (YAML).")
def cmd_crd(args: argparse.Namespace) -> int:
    from spx.api.crd import crd_yaml

    sys.stdout.write(crd_yaml())
    return EXIT_OK


# --------------------------------------------------------------------------------------------
# spx report


def _report_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", metavar="DIR", help="a run's output directory (result.json and/or status.json), or one of those files")
    p.add_argument("--experiment", metavar="FILE",
                   help="take the gate (and TP) from this experiment file instead of the recorded spec")
    p.add_argument("--threshold-tokens", type=int, metavar="N", help="override spec.gate.thresholdTokens")
    p.add_argument("--plot", metavar="PATH", help="where to draw the plot (default: DIR/crossover.png)")
    p.add_argument("--no-plot", action="store_true", help="do not draw the plot")


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not a UTF-8 text file") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path} is not JSON: {exc}") from None


@command("report", "Re-print the table and re-draw the plot of a finished run, re-running the analysis.", _report_args)
def cmd_report(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from spx.analysis import points_from_result
    from spx.api import describe_validation_error
    from spx.report import print_report

    target = Path(args.dir)
    if not target.exists():
        raise UsageError(f"{target} does not exist: give a run's --out directory, its result.json or status.json")
    directory = target if target.is_dir() else target.parent
    result_path = target if target.is_file() and target.name != "status.json" else directory / "result.json"
    status_path = target if target.is_file() and target.name == "status.json" else directory / "status.json"
    override = read_experiment(args.experiment) if args.experiment else None

    result: KernelResult | None = None
    gemm: str | None
    timer: str | None
    env = Environment()
    name = override.metadata.name if override else directory.name
    if result_path.is_file():
        try:
            result = KernelResult.model_validate(_load_json(result_path))
        except ValidationError as err:
            raise SpecError(describe_validation_error(err), str(result_path)) from None
        spec, env, name = result.spec, result.environment, result.experiment if not override else name
        points = points_from_result(result)
        gather_source: Any = result.gather_source
        gemm, timer, cpu = result.gemm_backend, result.timer, _is_cpu(result)
    elif status_path.is_file():
        try:
            status = ExperimentStatus.model_validate(_load_json(status_path))
        except ValidationError as err:
            raise SpecError(describe_validation_error(err), str(status_path)) from None
        if status.kernel is None or not status.kernel.points:
            raise UsageError(f"{status_path} has no kernel points to report")
        spec = ExperimentSpec()
        env = status.environment or Environment()
        points = status.kernel.points
        gather_source = status.kernel.gather_source or "measured"
        gemm, timer, cpu = status.kernel.gemm_backend, status.kernel.timer, env.device == "cpu"
    else:
        raise UsageError(f"no result.json or status.json in {directory}")
    if override is not None:
        spec = spec.model_copy(update={"gate": override.spec.gate, "parallelism": override.spec.parallelism})
    if args.threshold_tokens is not None:
        raw = dump_model(spec)
        raw["gate"]["thresholdTokens"] = args.threshold_tokens
        spec = validate_spec(raw, source="gate with --threshold-tokens")
    if not points:
        raise UsageError(f"{result_path} has no points to report")

    ev = analyse(points, spec, gather_source, gemm, timer, cpu=cpu)
    verdict, reasons = ev.verdict, list(ev.reasons)
    if result is not None and not result.complete:
        reasons.append(f"the run did not complete ({result.error or 'no error recorded'}): {len(points)} points")
        verdict = "Inconclusive" if verdict == "Pass" else verdict
    console = make_console()
    tp = spec.parallelism.tensor_parallel_size
    print_report(
        console, ev.kernel, verdict=verdict, reasons=reasons,
        title=_table_title(name, env, gemm, gather_source, tp, cpu), cpu=cpu,
        gate_threshold_tokens=spec.gate.threshold_tokens,
    )
    if not args.no_plot:
        _draw_plot(console, ev.kernel, Path(args.plot) if args.plot else directory / "crossover.png", name=name,
                   gpu=_gpu_label(env, cpu), gemm_backend=gemm, gather_source=gather_source, cpu=cpu,
                   gate_threshold=spec.gate.threshold_tokens)
    return EXIT_OK


# --------------------------------------------------------------------------------------------
# spx predict


def _predict_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("csv", metavar="CSV", nargs="?",
                   help="kernel table (tokens,rows_per_rank,replicated_us,split_allgather_us,speedup); "
                   "default: the seed's 8× H20 table shipped with spx")
    p.add_argument("--tp", type=int, default=8, help="TP size the table was measured at (default 8)")
    p.add_argument("--interpolation", choices=("linear", "log-log"), default="linear",
                   help="interpolation of the shard GEMM time and the break-even (default linear, "
                   "which reproduces the seed author's ~1450 tokens; log-log gives ~1270)")
    p.add_argument("--rounding", choices=("next-power-of-two", "next-multiple-of-tp", "none"),
                   default="next-power-of-two", help="threshold rounding rule")


def _default_table() -> str:
    from importlib.resources import files

    return (files("spx") / "data" / H20_TABLE).read_text(encoding="utf-8")


@command("predict", "The seed's H20 → H100/H200 what-if: predicted crossover and threshold from an H20 table.", _predict_args)
def cmd_predict(args: argparse.Namespace) -> int:
    from spx.analysis.crossover import Interpolation
    from spx.analysis.predict import predict_from_table
    from spx.report import prediction_table

    if args.csv:
        try:
            text = Path(args.csv).read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot read {args.csv}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise UsageError(f"{args.csv} is not a UTF-8 text file: give a CSV table") from None
        source = args.csv
    else:
        text, source = _default_table(), f"{H20_TABLE} (shipped with spx)"
    if args.tp < 1:
        raise UsageError(f"--tp must be >= 1 (got {args.tp})")
    interpolation: Interpolation = "linear" if args.interpolation == "linear" else "log-log"
    try:
        pred = predict_from_table(text, tp=args.tp, rounding=args.rounding, interpolation=interpolation)
    except ValueError as exc:
        raise UsageError(f"{source}: {exc}") from None
    other: Interpolation = "log-log" if interpolation == "linear" else "linear"
    try:
        alt = predict_from_table(text, tp=args.tp, rounding=args.rounding, interpolation=other)
    except ValueError:
        alt = None
    console = make_console()
    console.print(prediction_table(pred.rows, title=f"H100/H200 what-if from {source}, TP{args.tp}"))
    be = pred.break_even_tokens
    alt_text = ""
    if alt is not None and alt.break_even_tokens is not None:
        alt_text = f" ({other} interpolation: ≈ {alt.break_even_tokens:,.0f})"
    console.print(
        f"break-even: ≈ {be:,.0f} tokens, {args.interpolation} interpolation{alt_text}" if be is not None
        else "break-even: none (the split never wins from some count on)",
        highlight=False,
        markup=False,
    )
    if pred.first_winning_tokens is not None:
        console.print(f"first winning count: {pred.first_winning_tokens:,} tokens", highlight=False, markup=False)
    if pred.recommended_threshold_tokens is not None:
        console.print(f"recommended threshold: {pred.recommended_threshold_tokens:,} tokens ({pred.threshold_rounding})",
                      highlight=False, markup=False)
    console.print(f"method: {pred.method}", highlight=False, markup=False)
    return EXIT_OK


# --------------------------------------------------------------------------------------------
# spx gate (spx.gate: 0 Pass, 1 Fail, 2 Inconclusive / not decided / unreadable)


def _gate_args(p: argparse.ArgumentParser) -> None:
    from spx.gate import add_arguments

    add_arguments(p)


@command("gate", "Exit 0 if an experiment decided Pass, 1 if Fail, 2 if Inconclusive or undecided (NAME or status.json).",
         _gate_args)
def cmd_gate(args: argparse.Namespace) -> int:
    from spx.gate import run

    return run(args)



def _serving_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", type=Path, help="experiment YAML with spec.serving and/or spec.accuracy")
    p.add_argument("--out", type=Path, default=Path("spx-out"), help="output directory")
    p.add_argument("--vllm", default="vllm", help="the vLLM CLI (argv prefix, split on spaces)")


@command("serving", "Run the vLLM serving A/B and GSM8K benches of an experiment (needs vLLM and GPUs).", _serving_args)
def cmd_serving(args: argparse.Namespace) -> int:
    from spx.bench.serving import main as serving_main

    return serving_main([str(args.file), "--out", str(args.out), "--vllm", args.vllm])


def _operator_args(p: argparse.ArgumentParser) -> None:
    from spx.controller.run import add_arguments

    add_arguments(p)


@command("operator", "Run the Kubernetes operator (kopf) that runs ShardedProjectionExperiments as GPU Jobs.", _operator_args)
def cmd_operator(args: argparse.Namespace) -> int:
    from spx.controller.run import run_operator

    return run_operator(args)


if __name__ == "__main__":
    sys.exit(main())
