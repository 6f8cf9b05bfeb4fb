"""Serving A/B of the patched vLLM: one fresh ``vllm serve`` per arm, ``vllm bench serve`` per point.

For each arm of ``spec.serving.arms``, in order (default B1 A1 A2 B2), an :class:`ArmRunner`:

1. waits until the port is free, then launches ``vllm serve`` in its own process group with
   ``SPX_SHARD_FUSED_WQA_WKV_MIN_TOKENS`` = ``off`` (main) or the arm's threshold (split), read by
   the spx vLLM plugin (:mod:`spx.vllm_ext.plugin`); its stdout+stderr go to ``server.log``, kept;
2. polls ``GET /health`` until 200 (``startupTimeoutSeconds``), failing early if the server exits;
   notes whether the log shows the plugin's "spx: set …" line (``thresholdConfirmed``);
3. per point, runs ``vllm bench serve`` with the seed's protocol (:mod:`spx.serving.commands`) and
   reads its saved JSON (:func:`spx.serving.point.run_point`);
4. if the arm is one of ``spec.accuracy``'s arms, runs GSM8K against it (:mod:`spx.serving.gsm8k`);
5. stops the server (SIGTERM to its process group, SIGKILL after ``shutdownTimeoutSeconds``) and
   confirms its GPUs free (:mod:`spx.serving.gpus`; without ``nvidia-smi`` the check is ``skipped``).

Failure handling: a server that does not become healthy or dies mid-run fails its arm, and the
failure names the cause read from its log (the last error, bounded), e.g. the plugin refusing a vLLM
without the threshold; the points it did not finish say why; a failed point does not stop the arm;
GPUs still busy after an arm stop the run (the next arm would not measure alone).
``serving-result.json`` (and ``accuracy-result.json``) are rewritten after every measurement, so
whatever finished survives a crash of the runner too.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spx.analysis.accuracy import accuracy_arm_names, max_model_len_arg, max_tokens_error
from spx.analysis.serving import arm_threshold, protocol_deviations
from spx.api.accuracy import AccuracyResult, AccuracyRun
from spx.api.base import utc_now
from spx.api.serving import ServingArmRun, ServingArmSpec, ServingPointRun, ServingResult, ServingSpec
from spx.api.spec import ExperimentSpec, spec_hash
from spx.api.step import StepResult
from spx.files import write_atomic
from spx.serving.commands import ENV_THRESHOLD, PLUGIN_NAME, server_command, server_env, serving_of
from spx.serving.gpus import nvidia_smi_argv, wait_gpus_free
from spx.serving.gsm8k import Gsm8kData, load_gsm8k, run_gsm8k
from spx.serving.point import run_point
from spx.serving.server import ServerError, VllmServer, port_open
from spx.vocabulary import (
    ACCURACY_RESULT_FILE,
    GSM8K_REPLIES_FILE,
    PLUGIN_LOG_MARKER,  # the line the spx plugin logs once it set the threshold
    SERVER_LOG,
    SERVING_RESULT_FILE,
)


def _stderr_log(msg: str) -> None:
    print(f"[spx serving] {msg}", file=sys.stderr, flush=True)


@dataclass
class RunnerOptions:
    """How the runner reaches vLLM and the GPUs (tests point these at a real CPU server or stand-ins).

    ``vllm_command``: argv prefix of the vLLM CLI; ``nvidia_smi``: argv of ``nvidia-smi`` (``None``:
    look it up on ``PATH``; not found → GPU checks ``skipped``); ``env``: base environment of every
    child (default ``os.environ``); ``crash_grace_seconds``: after a failed point, how long to wait
    for the server to show whether it died with it; ``on_arm``: called with the serving and accuracy
    results so far after every arm (``spx run --serving`` prints them as JSON lines, so the arms that
    finished survive a pod killed later); ``on_step``: the same for the step A/B's result, after every block of rounds.
    """

    vllm_command: list[str] = field(default_factory=lambda: ["vllm"])
    nvidia_smi: list[str] | None = None
    env: Mapping[str, str] | None = None
    experiment: str = "local"
    health_poll_seconds: float = 1.0
    gpu_poll_seconds: float = 1.0
    crash_grace_seconds: float = 2.0
    log: Callable[[str], None] = _stderr_log
    on_arm: Callable[[ServingResult, AccuracyResult | None], None] | None = None
    on_step: Callable[[StepResult], None] | None = None


@dataclass
class VllmRunOutcome:
    """What one run of the vLLM benches produced (each ``None`` when its section is not in the spec)."""

    serving: ServingResult | None
    accuracy: AccuracyResult | None
    step: StepResult | None = None


def _write(path: Path, model: Any) -> None:
    write_atomic(path, json.dumps(model.to_wire(), indent=2) + "\n")


@dataclass
class Documents:
    """The result documents of one run and where they are written (after every measurement)."""

    out_dir: Path
    serving: ServingResult
    accuracy: AccuracyResult | None

    def save(self) -> None:
        """Rewrite ``serving-result.json`` (and ``accuracy-result.json``) atomically."""
        _write(self.out_dir / SERVING_RESULT_FILE, self.serving)
        if self.accuracy is not None:
            _write(self.out_dir / ACCURACY_RESULT_FILE, self.accuracy)


@dataclass
class ArmRunner:
    """Runs one arm into ``run`` (its entry of ``docs.serving.arms``): server, points, GSM8K, stop.

    ``gsm8k`` is the data set when this arm is one of the accuracy arms, else ``None``.
    """

    spec: ExperimentSpec
    arm: ServingArmSpec
    run: ServingArmRun
    arm_dir: Path
    opts: RunnerOptions
    base_env: dict[str, str]
    docs: Documents
    gsm8k: Gsm8kData | None = None
    _done: set[str] = field(default_factory=set)

    @property
    def serving(self) -> ServingSpec:
        return serving_of(self.spec)

    @property
    def label(self) -> str:
        return f"arm {self.arm.name} ({self.arm.variant}, {ENV_THRESHOLD}={self.run.threshold})"

    def _fail_rest(self, reason: str) -> None:
        """Mark the points not run, and the arm's GSM8K run, as failed for ``reason``."""
        for p in self.serving.points:
            if p.name not in self._done:
                self.run.points.append(ServingPointRun(point=p.name, metric=p.metric, error=reason))
                self.docs.serving.failures.append(f"{self.arm.name}/{p.name}: {reason}")
        acc = self.docs.accuracy
        if self.gsm8k is not None and acc is not None and not any(r.arm == self.arm.name for r in acc.runs):
            acc.runs.append(AccuracyRun(arm=self.arm.name, variant=self.arm.variant, threshold=self.run.threshold, error=reason))
            acc.failures.append(f"{self.arm.name}: {reason}")

    def __call__(self) -> str | None:
        """Run the arm; returns a reason to abort the remaining arms (GPUs busy, port taken), or ``None``."""
        s, run = self.serving, self.run
        self.arm_dir.mkdir(parents=True, exist_ok=True)
        t_port = time.monotonic()
        while port_open(s.host, s.port) and time.monotonic() - t_port < s.shutdown_timeout_seconds:
            time.sleep(self.opts.health_poll_seconds)
        if port_open(s.host, s.port):
            reason = (f"port {s.host}:{s.port} still in use before starting the server (another server listens "
                      "there: stop it, or set spec.serving.port to a free port)")
            self.opts.log(f"{self.label}: not started: {reason}")
            run.state, run.error = "Failed", reason
            self.docs.serving.failures.append(f"{self.arm.name}: arm failed: {reason}")
            self._fail_rest(f"not run: {reason}")
            self.docs.save()
            return reason
        argv = server_command(self.spec, self.opts.vllm_command)
        server = VllmServer(argv, server_env(self.spec, self.arm, self.base_env), self.arm_dir / SERVER_LOG)
        run.server_command, run.server_log = argv, str(server.log_path)
        self.opts.log(f"{self.label}: starting: {' '.join(argv)}")
        try:
            self._serve(server)
        except ServerError as err:
            run.state, run.error = "Failed", str(err)
            self.docs.serving.failures.append(f"{self.arm.name}: arm failed: {err}")
            self._fail_rest(f"not run: the arm's server failed: {err}")
            self.opts.log(f"{self.label}: FAILED: {err}")
        except KeyboardInterrupt as err:  # SIGINT/SIGTERM (spx.serving.server.interrupts_stop_servers): keep what ran
            why = str(err) or "interrupted (SIGINT)"
            run.state, run.error = "Failed", f"{why}: the server was stopped"
            self.docs.serving.failures.append(f"{self.arm.name}: arm stopped: {why}")
            self._fail_rest(f"not run: {why}")
            raise
        finally:
            run.server_exit_code = server.stop(s.shutdown_timeout_seconds)
            smi = nvidia_smi_argv(self.opts.nvidia_smi, self.opts.env)
            check, detail = wait_gpus_free(smi, self.opts.env, s.gpu_release_timeout_seconds, self.opts.gpu_poll_seconds)
            run.gpu_check = check
            self.opts.log(f"{self.label}: server stopped (exit {run.server_exit_code}); GPUs {check}: {detail}")
            if check == "skipped":
                run.warnings.append(detail)
            self.docs.save()
        if run.gpu_check == "busy":
            reason = f"GPUs still busy after arm {self.arm.name} stopped ({detail}); later arms would not measure alone"
            self.docs.serving.failures.append(f"{self.arm.name}: {reason}")
            self.docs.save()
            return reason
        return None

    def _serve(self, server: VllmServer) -> None:
        """Start the server, wait for health, run the points and GSM8K. Raises ServerError when it dies."""
        s, run = self.serving, self.run
        server.start()
        run.healthy_after_seconds = server.wait_healthy(
            f"http://{s.host}:{s.port}/health", s.startup_timeout_seconds, self.opts.health_poll_seconds
        )
        self.opts.log(f"{self.label}: healthy after {run.healthy_after_seconds:.1f}s")
        run.threshold_confirmed = PLUGIN_LOG_MARKER in server.log_text()
        if not run.threshold_confirmed:
            run.warnings.append(
                f"the server log has no '{PLUGIN_LOG_MARKER}…' line of the spx vLLM plugin: is spx installed in the "
                f"server's environment (entry point {PLUGIN_NAME}) and vLLM logging at INFO?"
            )
        for point in s.points:
            pr = run_point(s, point, self.opts.vllm_command, self.arm_dir, self.base_env)
            if pr.error is not None and server.exited_within(self.opts.crash_grace_seconds):
                pr.error = f"{server.died('during this point')}; {pr.error}"
            run.points.append(pr)
            self._done.add(point.name)
            if pr.error is not None:
                self.docs.serving.failures.append(f"{self.arm.name}/{point.name}: {pr.error}")
                self.opts.log(f"{self.label}: point {point.name} FAILED: {pr.error}")
            else:
                self.opts.log(f"{self.label}: point {point.name}: {point.metric} = {pr.value:.4g}")
            self.docs.save()
            if not server.alive():
                raise server.died(f"during point {point.name}")
        acc = self.docs.accuracy
        if self.gsm8k is not None and acc is not None:
            assert self.spec.accuracy is not None
            acc_run = run_gsm8k(
                f"http://{s.host}:{s.port}", s.api_model_name, self.spec.accuracy, self.gsm8k,
                self.arm_dir / GSM8K_REPLIES_FILE, arm=self.arm.name, variant=self.arm.variant,
                threshold=run.threshold, log=self.opts.log,
            )
            if acc_run.error is None and not server.alive():
                acc_run.error = str(server.died("during GSM8K"))
            acc.runs.append(acc_run)
            if acc_run.error is not None:
                acc.failures.append(f"{self.arm.name}: {acc_run.error}")
            self.docs.save()
            if not server.alive():
                raise server.died("during GSM8K")
        run.state = "Partial" if any(p.error is not None for p in run.points) else "Succeeded"


def _accuracy_setup(spec: ExperimentSpec, experiment: str) -> tuple[list[str], Gsm8kData | None, AccuracyResult | None]:
    """The accuracy arms, the GSM8K data (read and hash-checked before any server starts), the result.

    Raises:
        ValueError: unknown accuracy arms; ``maxTokens`` ≥ the ``--max-model-len`` of ``serving.extraArgs``;
            a GSM8K file that differs from its hash or is malformed.
        OSError: a GSM8K file is missing.
    """
    if spec.accuracy is None:
        return [], None, None
    arms = accuracy_arm_names(serving_of(spec).arms, spec.accuracy)
    too_long = max_tokens_error(
        spec.accuracy.max_tokens, max_model_len_arg(serving_of(spec).extra_args), "--max-model-len in spec.serving.extraArgs"
    )
    if too_long is not None:
        raise ValueError(too_long)
    data = load_gsm8k(spec.accuracy)
    return arms, data, AccuracyResult(experiment=experiment, spec_hash=spec_hash(spec), accuracy=spec.accuracy,
                                      dataset_sha256=data.sha256)


def run_vllm_benchmarks(spec: ExperimentSpec, out_dir: Path, opts: RunnerOptions | None = None) -> VllmRunOutcome:
    """Run the serving A/B and/or GSM8K of ``spec`` into ``out_dir``.

    Raises:
        ValueError: ``spec.serving`` missing, unknown accuracy arm names, a GSM8K file whose SHA-256
            differs from ``spec.accuracy.datasetSha256``, malformed records.
        OSError: a GSM8K file is missing (checked before any server starts).
    """
    opts = opts or RunnerOptions(experiment=os.environ.get("SPX_EXPERIMENT", "local"))
    s = serving_of(spec)
    out_dir.mkdir(parents=True, exist_ok=True)
    base_env = dict(opts.env if opts.env is not None else os.environ)
    acc_arms, dataset, acc_result = _accuracy_setup(spec, opts.experiment)
    result = ServingResult(
        experiment=opts.experiment, spec_hash=spec_hash(spec), serving=s, gate_threshold_tokens=spec.gate.threshold_tokens,
        started_at=utc_now(),
        protocol_deviations=protocol_deviations(s),
        device="cuda" if nvidia_smi_argv(opts.nvidia_smi, opts.env) is not None else "cpu",
    )
    for arm in s.arms:
        result.arms.append(
            ServingArmRun(name=arm.name, variant=arm.variant, threshold=arm_threshold(arm, spec.gate.threshold_tokens))
        )
    docs = Documents(out_dir=out_dir, serving=result, accuracy=acc_result)
    docs.save()
    step = None
    if s.step is not None:  # first, before any serving arm (one load; it may run alone)
        from spx.serving.step import run_step_ab

        step = run_step_ab(spec, out_dir, opts.vllm_command, base_env,
                           nvidia_smi=nvidia_smi_argv(opts.nvidia_smi, opts.env), log=opts.log, on_save=opts.on_step,
                           experiment=opts.experiment)
    abort: str | None = None
    try:
        check, detail = wait_gpus_free(nvidia_smi_argv(opts.nvidia_smi, opts.env), opts.env, 0, opts.gpu_poll_seconds)
        if check == "busy":
            result.warnings.append(f"before the first arm: {detail}")
        for index, (arm, run) in enumerate(zip(s.arms, result.arms, strict=True)):
            if abort is not None:
                run.state, run.error = "Skipped", abort
                result.failures.append(f"{arm.name}: skipped: {abort}")
                docs.save()
                continue
            if not s.points and arm.name not in acc_arms:
                run.state, run.error = "Skipped", "nothing to run on this arm (no serving points, not an accuracy arm)"
                docs.save()
                continue
            runner = ArmRunner(
                spec=spec, arm=arm, run=run, arm_dir=out_dir / "arms" / f"{index + 1:02d}-{arm.name}", opts=opts,
                base_env=base_env, docs=docs, gsm8k=dataset if arm.name in acc_arms else None,
            )
            abort = runner()
            if opts.on_arm is not None:
                try:
                    opts.on_arm(result, acc_result)
                except Exception as err:  # a reporting hook must not stop the measurement
                    opts.log(f"on_arm hook failed: {type(err).__name__}: {err}")
    except BaseException as err:  # the runner itself was interrupted: keep what finished, say so
        result.error = f"runner stopped: {type(err).__name__}: {err}"
        result.failures.append(result.error)
        raise
    finally:
        result.finished_at = utc_now()
        result.complete = not result.failures and result.error is None
        if acc_result is not None:
            acc_result.complete = not acc_result.failures and all(r.error is None for r in acc_result.runs) and bool(acc_result.runs)
        docs.save()
    return VllmRunOutcome(serving=result if s.points else None, accuracy=acc_result, step=step)


