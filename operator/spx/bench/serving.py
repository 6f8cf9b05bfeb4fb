"""Serving A/B of the patched vLLM: one fresh ``vllm serve`` per arm, ``vllm bench serve`` per point.

For each arm of ``spec.serving.arms``, in order (default B1 A1 A2 B2):

1. wait until the port is free, then launch ``vllm serve`` in its own process group with
   ``SPX_SHARD_FUSED_WQA_WKV_MIN_TOKENS`` = ``off`` (main) or the arm's threshold (split), read by
   the spx vLLM plugin (:mod:`spx.vllm_plugin`); its stdout+stderr go to ``server.log``, kept;
2. poll ``GET /health`` until 200 (``startupTimeoutSeconds``), failing early if the server exits;
   note whether the log shows the plugin's "spx: set …" line (``thresholdConfirmed``);
3. per point, run ``vllm bench serve`` with the seed's flags (``--backend vllm --dataset-name random
   --random-input-len ISL --random-output-len OSL --random-range-ratio 0 --ignore-eos --num-prompts
   P --max-concurrency C --request-rate inf --seed S``) and ``--save-result --result-dir …
   --result-filename <point>.json``; parse the JSON; a point with failed requests, a non-zero exit,
   a timeout or no JSON is a failed point;
4. if the arm is one of ``spec.accuracy``'s arms, run GSM8K against it (:mod:`spx.bench.accuracy`);
5. stop the server (SIGTERM to its process group, SIGKILL after ``shutdownTimeoutSeconds``) and
   confirm its GPUs free (``nvidia-smi --query-compute-apps`` lists no process within
   ``gpuReleaseTimeoutSeconds``; without ``nvidia-smi`` the check is recorded as ``skipped``).

Failure handling: a server that does not become healthy or dies mid-run fails its arm (the points
it did not finish say why); a failed point does not stop the arm; GPUs still busy after an arm stop
the run (the next arm would not measure alone). ``serving-result.json`` (and
``accuracy-result.json``) are rewritten after every measurement, so whatever finished survives a
crash of the runner too, and ``failures`` names every ``arm/point`` that failed.

Run in the bench pod as ``python -m spx.bench.serving EXPERIMENT.yaml --out DIR``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from spx.analysis.serving import arm_threshold, metric_value, summary_fields
from spx.api.accuracy import AccuracyResult, AccuracyRun, AccuracySpec
from spx.api.base import utc_now
from spx.api.serving import (
    GpuCheck,
    ServingArmRun,
    ServingArmSpec,
    ServingPointRun,
    ServingPointSpec,
    ServingResult,
    ServingSpec,
)
from spx.api.spec import ExperimentSpec

ENV_THRESHOLD = "SPX_SHARD_FUSED_WQA_WKV_MIN_TOKENS"
ENV_ARM = "SPX_ARM"
PLUGIN_NAME = "spx_shard_threshold"
PLUGIN_LOG_MARKER = "spx: set "
SERVING_RESULT_FILE = "serving-result.json"
ACCURACY_RESULT_FILE = "accuracy-result.json"
_TP_FLAGS = ("--tensor-parallel-size", "-tp")


def _stderr_log(msg: str) -> None:
    print(f"[spx serving] {msg}", file=sys.stderr, flush=True)


@dataclass
class RunnerOptions:
    """How the runner reaches vLLM and the GPUs (tests point these at stand-ins).

    ``vllm_command``: argv prefix of the vLLM CLI; ``nvidia_smi``: argv of ``nvidia-smi`` (``None``:
    look it up on ``PATH``; not found → GPU checks ``skipped``); ``env``: base environment of every
    child (default ``os.environ``); ``crash_grace_seconds``: after a failed point, how long to wait
    for the server to show whether it died with it; ``on_arm``: called with the serving and accuracy
    results so far after every arm (``spx run --serving`` prints them as JSON lines, so the arms that
    finished survive a pod killed later).
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


# --------------------------------------------------------------------------- commands


def _has_flag(args: Sequence[str], flags: Sequence[str]) -> bool:
    return any(a in flags or any(a.startswith(f + "=") for f in flags) for a in args)


def server_command(spec: ExperimentSpec, vllm: Sequence[str]) -> list[str]:
    """``vllm serve`` argv of an arm (identical for every arm: only the environment differs)."""
    s = _serving(spec)
    argv = [*vllm, "serve", s.model_path or s.model, "--host", s.host, "--port", str(s.port), "--seed", str(s.seed)]
    if not _has_flag(s.extra_args, _TP_FLAGS):
        argv += ["--tensor-parallel-size", str(spec.parallelism.tensor_parallel_size)]
    if s.model_path is not None or s.served_model_name is not None:
        argv += ["--served-model-name", s.api_model_name]
    if s.revision is not None and s.model_path is None:
        argv += ["--revision", s.revision]
    return argv + list(s.extra_args)


def bench_command(s: ServingSpec, point: ServingPointSpec, vllm: Sequence[str], result_dir: Path) -> list[str]:
    """``vllm bench serve`` argv of one point, with the seed's flags and ``--save-result``."""
    argv = [*vllm, "bench", "serve", "--backend", "vllm", "--host", s.host, "--port", str(s.port), "--model", s.api_model_name]
    if s.model_path is not None:
        argv += ["--tokenizer", s.model_path]
    argv += [
        "--dataset-name", "random",
        "--random-input-len", str(point.input_len),
        "--random-output-len", str(point.output_len),
        "--random-range-ratio", "0",
        "--ignore-eos",
        "--num-prompts", str(point.num_prompts),
        "--max-concurrency", str(point.concurrency),
        "--request-rate", "inf",
        "--seed", str(s.seed),
        "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,99",
        "--disable-tqdm",
        "--save-result",
        "--result-dir", str(result_dir),
        "--result-filename", f"{point.name}.json",
    ]
    return argv + list(s.extra_bench_args)


def server_env(spec: ExperimentSpec, arm: ServingArmSpec, base: Mapping[str, str]) -> dict[str, str]:
    """The arm's server environment: base + ``serving.env`` + the threshold and the arm's name.

    If ``VLLM_PLUGINS`` restricts vLLM's plugins, the spx plugin is added to it (otherwise the
    threshold would silently not apply).
    """
    s = _serving(spec)
    env = dict(base)
    env.update(s.env)
    env[ENV_THRESHOLD] = arm_threshold(arm, spec.gate.threshold_tokens)
    env[ENV_ARM] = arm.name
    plugins = env.get("VLLM_PLUGINS")
    if plugins is not None and PLUGIN_NAME not in [p.strip() for p in plugins.split(",")]:
        env["VLLM_PLUGINS"] = ",".join([p for p in plugins.split(",") if p.strip()] + [PLUGIN_NAME])
    return env


def _serving(spec: ExperimentSpec) -> ServingSpec:
    if spec.serving is None:
        raise ValueError("spec.serving is not set: the serving runner needs the model and server settings")
    return spec.serving


# --------------------------------------------------------------------------- server lifecycle


class ServerError(RuntimeError):
    """The server did not start, or died."""


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class VllmServer:
    """One ``vllm serve`` process (group), its log kept in ``log_path``."""

    def __init__(self, argv: list[str], env: Mapping[str, str], log_path: Path) -> None:
        self.argv = argv
        self.env = dict(env)
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        self._log.write(f"# spx: {utc_now()} starting: {' '.join(self.argv)}\n".encode())
        self._log.flush()
        self.proc = subprocess.Popen(
            self.argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=self.env, start_new_session=True,
        )

    @property
    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exited_within(self, seconds: float) -> bool:
        """Whether the server exits within ``seconds`` (``True`` at once if it already has)."""
        if self.proc is None:
            return True
        try:
            self.proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return False
        return True

    def wait_healthy(self, url: str, timeout: float, poll: float) -> float:
        """Seconds until ``GET url`` answered 200.

        Raises:
            ServerError: the process exited first, or ``timeout`` passed.
        """
        t0 = time.monotonic()
        while True:
            code = self.exit_code
            if code is not None:
                raise ServerError(
                    f"server exited with code {code} before becoming healthy; last lines of {self.log_path}:\n"
                    f"{_tail(self.log_path)}"
                )
            try:
                with urllib.request.urlopen(url, timeout=max(poll, 2.0)) as resp:
                    if resp.status == 200:
                        return time.monotonic() - t0
            except (urllib.error.URLError, OSError, ValueError):
                pass
            if time.monotonic() - t0 > timeout:
                raise ServerError(
                    f"server not healthy at {url} within {timeout:.0f}s (startupTimeoutSeconds); last lines of "
                    f"{self.log_path}:\n{_tail(self.log_path)}"
                )
            time.sleep(poll)

    def stop(self, timeout: float) -> int | None:
        """SIGTERM the process group, SIGKILL after ``timeout`` s; kill stragglers of the group too."""
        if self.proc is None:
            return None
        pgid = self.proc.pid
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                if self._log is not None:
                    self._log.write(f"# spx: {utc_now()} no exit {timeout:.0f}s after SIGTERM: SIGKILL\n".encode())
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)  # workers left behind by the leader
        if self._log is not None:
            self._log.write(f"# spx: {utc_now()} server exited with code {self.proc.returncode}\n".encode())
            self._log.close()
            self._log = None
        return self.proc.returncode


def nvidia_smi_argv(opts: RunnerOptions) -> list[str] | None:
    """The ``nvidia-smi`` argv to use, ``None`` when there is none."""
    if opts.nvidia_smi is not None:
        return list(opts.nvidia_smi) or None
    path_var = (opts.env or os.environ).get("PATH")
    found = shutil.which("nvidia-smi", path=path_var)
    return [found] if found else None


def gpu_processes(smi: Sequence[str], env: Mapping[str, str] | None = None) -> list[str]:
    """Compute processes ``nvidia-smi`` lists (``pid, used_memory`` lines).

    Raises:
        RuntimeError: ``nvidia-smi`` failed.
    """
    out = subprocess.run(
        [*smi, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, timeout=60, check=False, env=None if env is None else dict(env),
    )
    if out.returncode != 0:
        raise RuntimeError(f"nvidia-smi exited with {out.returncode}: {out.stderr.strip()[:300]}")
    return [line.strip() for line in out.stdout.splitlines() if line.strip() and "No running" not in line]


def wait_gpus_free(opts: RunnerOptions, timeout: float) -> tuple[GpuCheck, str]:
    """``(freed|busy|skipped, detail)`` after polling ``nvidia-smi`` for up to ``timeout`` s."""
    smi = nvidia_smi_argv(opts)
    if smi is None:
        return "skipped", "nvidia-smi not found: GPU release not checked"
    t0 = time.monotonic()
    while True:
        try:
            procs = gpu_processes(smi, opts.env)
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as err:
            return "skipped", f"nvidia-smi failed: {err}"
        if not procs:
            return "freed", f"no GPU compute process after {time.monotonic() - t0:.1f}s"
        if time.monotonic() - t0 >= timeout:
            return "busy", f"GPU compute processes still listed after {timeout:.0f}s: {procs[:8]}"
        time.sleep(opts.gpu_poll_seconds)


# --------------------------------------------------------------------------- points


def run_point(
    s: ServingSpec, point: ServingPointSpec, opts: RunnerOptions, arm_dir: Path, env: Mapping[str, str]
) -> ServingPointRun:
    """One ``vllm bench serve``; never raises for a failed point (the run says why)."""
    result_dir = arm_dir / "points"
    result_dir.mkdir(parents=True, exist_ok=True)
    result_file = result_dir / f"{point.name}.json"
    log_file = result_dir / f"{point.name}.log"
    result_file.unlink(missing_ok=True)
    run = ServingPointRun(point=point.name, metric=point.metric, log_file=str(log_file))
    argv = bench_command(s, point, opts.vllm_command, result_dir)
    t0 = time.monotonic()
    with open(log_file, "wb") as log:
        log.write(f"# spx: {utc_now()} {' '.join(argv)}\n".encode())
        log.flush()
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=dict(env), start_new_session=True)
        try:
            code = proc.wait(timeout=s.point_timeout_seconds)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            code = None
    run.wall_seconds = time.monotonic() - t0
    if code is None:
        run.error = f"vllm bench serve timed out after {s.point_timeout_seconds}s (pointTimeoutSeconds)"
        return run
    if code != 0:
        last = next((ln.strip() for ln in reversed(_tail(log_file, 20).splitlines()) if ln.strip()), "")
        run.error = f"vllm bench serve exited with code {code}: {last[:300]} (log: {log_file})"
        return run
    try:
        saved: dict[str, Any] = json.loads(result_file.read_text())
    except (OSError, ValueError) as err:
        run.error = f"no readable --save-result JSON at {result_file}: {err}"
        return run
    run.result_file = str(result_file)
    run.summary = summary_fields(saved)
    failed = int(run.summary.get("failed", 0))
    completed = int(run.summary.get("completed", 0))
    if failed or completed < point.num_prompts:
        run.error = f"{failed} of {point.num_prompts} requests failed ({completed} completed)"
        return run
    try:
        run.value = metric_value(saved, point.metric)
    except ValueError as err:
        run.error = str(err)
    return run


# --------------------------------------------------------------------------- the A/B


@dataclass
class VllmRunOutcome:
    """What one run of the vLLM benches produced (each ``None`` when its section is not in the spec)."""

    serving: ServingResult | None
    accuracy: AccuracyResult | None


def _write(path: Path, model: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(model.to_wire(), indent=2) + "\n")
    tmp.replace(path)


def run_vllm_benchmarks(spec: ExperimentSpec, out_dir: Path, opts: RunnerOptions | None = None) -> VllmRunOutcome:
    """Run the serving A/B and/or GSM8K of ``spec`` into ``out_dir``.

    Raises:
        ValueError: ``spec.serving`` missing, unknown accuracy arm names.
        OSError / ValueError: the GSM8K dataset is missing or malformed (checked before any server
            starts).
    """
    opts = opts or RunnerOptions(experiment=os.environ.get("SPX_EXPERIMENT", "local"))
    s = _serving(spec)
    out_dir.mkdir(parents=True, exist_ok=True)
    base_env = dict(opts.env if opts.env is not None else os.environ)
    acc_arms: list[str] = []
    acc_result: AccuracyResult | None = None
    dataset: Any = None
    if spec.accuracy is not None:
        from spx.analysis.accuracy import accuracy_arm_names
        from spx.bench.accuracy import load_gsm8k

        acc_arms = accuracy_arm_names(s.arms, spec.accuracy)
        dataset = load_gsm8k(spec.accuracy)
        acc_result = AccuracyResult(experiment=opts.experiment, accuracy=spec.accuracy, dataset_sha256=dataset.sha256)
    result = ServingResult(
        experiment=opts.experiment, serving=s, gate_threshold_tokens=spec.gate.threshold_tokens, started_at=utc_now()
    )
    for arm in s.arms:
        result.arms.append(
            ServingArmRun(name=arm.name, variant=arm.variant, threshold=arm_threshold(arm, spec.gate.threshold_tokens))
        )

    def save() -> None:
        _write(out_dir / SERVING_RESULT_FILE, result)
        if acc_result is not None:
            _write(out_dir / ACCURACY_RESULT_FILE, acc_result)

    save()
    abort: str | None = None
    try:
        check, detail = wait_gpus_free(opts, 0)
        if check == "busy":
            result.warnings.append(f"before the first arm: {detail}")
        for index, (arm, run) in enumerate(zip(s.arms, result.arms, strict=True)):
            if abort is not None:
                run.state, run.error = "Skipped", abort
                result.failures.append(f"{arm.name}: skipped: {abort}")
                save()
                continue
            if not s.points and arm.name not in acc_arms:
                run.state, run.error = "Skipped", "nothing to run on this arm (no serving points, not an accuracy arm)"
                save()
                continue
            acc_spec = spec.accuracy if arm.name in acc_arms else None
            abort = _run_arm(spec, arm, run, index, out_dir, opts, base_env, acc_spec, dataset, acc_result, result, save)
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
        save()
    return VllmRunOutcome(serving=result if s.points else None, accuracy=acc_result)


def _run_arm(
    spec: ExperimentSpec,
    arm: ServingArmSpec,
    run: ServingArmRun,
    index: int,
    out_dir: Path,
    opts: RunnerOptions,
    base_env: dict[str, str],
    acc_spec: AccuracySpec | None,
    dataset: Any,
    acc_result: AccuracyResult | None,
    result: ServingResult,
    save: Callable[[], None],
) -> str | None:
    """Run one arm into ``run``; returns a reason to abort the remaining arms, or ``None``."""
    s = _serving(spec)
    arm_dir = out_dir / "arms" / f"{index + 1:02d}-{arm.name}"
    arm_dir.mkdir(parents=True, exist_ok=True)
    env = server_env(spec, arm, base_env)
    argv = server_command(spec, opts.vllm_command)
    server = VllmServer(argv, env, arm_dir / "server.log")
    run.server_command, run.server_log = argv, str(server.log_path)
    label = f"arm {arm.name} ({arm.variant}, {ENV_THRESHOLD}={run.threshold})"

    def fail_rest(reason: str, done: set[str]) -> None:
        for p in s.points:
            if p.name not in done:
                run.points.append(ServingPointRun(point=p.name, metric=p.metric, error=reason))
                result.failures.append(f"{arm.name}/{p.name}: {reason}")
        if acc_spec is not None and acc_result is not None and not any(r.arm == arm.name for r in acc_result.runs):
            acc_result.runs.append(AccuracyRun(arm=arm.name, variant=arm.variant, threshold=run.threshold, error=reason))
            acc_result.failures.append(f"{arm.name}: {reason}")

    done: set[str] = set()
    t_port = time.monotonic()
    while port_open(s.host, s.port) and time.monotonic() - t_port < s.shutdown_timeout_seconds:
        time.sleep(opts.health_poll_seconds)
    if port_open(s.host, s.port):
        reason = f"port {s.host}:{s.port} still in use before starting the server"
        run.state, run.error = "Failed", reason
        fail_rest(reason, done)
        save()
        return reason
    opts.log(f"{label}: starting: {' '.join(argv)}")
    try:
        server.start()
        run.healthy_after_seconds = server.wait_healthy(
            f"http://{s.host}:{s.port}/health", s.startup_timeout_seconds, opts.health_poll_seconds
        )
        opts.log(f"{label}: healthy after {run.healthy_after_seconds:.1f}s")
        log_text = server.log_path.read_text(errors="replace")
        run.threshold_confirmed = PLUGIN_LOG_MARKER in log_text
        if not run.threshold_confirmed:
            run.warnings.append(
                f"the server log has no '{PLUGIN_LOG_MARKER}…' line of the spx vLLM plugin: is spx installed in the "
                f"server's environment (entry point {PLUGIN_NAME}) and vLLM logging at INFO?"
            )
        for point in s.points:
            pr = run_point(s, point, opts, arm_dir, base_env)
            if pr.error is not None and server.exited_within(opts.crash_grace_seconds):
                pr.error = f"server exited with code {server.exit_code} during this point; {pr.error}"
            run.points.append(pr)
            done.add(point.name)
            if pr.error is not None:
                result.failures.append(f"{arm.name}/{point.name}: {pr.error}")
                opts.log(f"{label}: point {point.name} FAILED: {pr.error}")
            else:
                opts.log(f"{label}: point {point.name}: {point.metric} = {pr.value:.4g}")
            save()
            if not server.alive():
                raise ServerError(f"server exited with code {server.exit_code} during point {point.name}")
        if acc_spec is not None and acc_result is not None:
            from spx.bench.accuracy import run_gsm8k

            acc_run = run_gsm8k(
                f"http://{s.host}:{s.port}", s.api_model_name, acc_spec, dataset,
                arm_dir / "gsm8k-replies.jsonl", arm=arm.name, variant=arm.variant, threshold=run.threshold,
                log=opts.log,
            )
            if acc_run.error is None and not server.alive():
                acc_run.error = f"server exited with code {server.exit_code} during GSM8K"
            acc_result.runs.append(acc_run)
            if acc_run.error is not None:
                acc_result.failures.append(f"{arm.name}: {acc_run.error}")
            save()
            if not server.alive():
                raise ServerError(f"server exited with code {server.exit_code} during GSM8K")
        failed_points = [p for p in run.points if p.error is not None]
        run.state = "Partial" if failed_points else "Succeeded"
    except ServerError as err:
        run.state, run.error = "Failed", str(err)
        first_line = str(err).splitlines()[0]
        result.failures.append(f"{arm.name}: arm failed: {first_line}")
        fail_rest(f"not run: {first_line}", done)
        opts.log(f"{label}: FAILED: {first_line}")
    finally:
        run.server_exit_code = server.stop(s.shutdown_timeout_seconds)
        check, detail = wait_gpus_free(opts, s.gpu_release_timeout_seconds)
        run.gpu_check = check
        opts.log(f"{label}: server stopped (exit {run.server_exit_code}); GPUs {check}: {detail}")
        if check == "skipped":
            run.warnings.append(detail)
        save()
    if run.gpu_check == "busy":
        reason = f"GPUs still busy after arm {arm.name} stopped ({detail}); later arms would not measure alone"
        result.failures.append(f"{arm.name}: {reason}")
        save()
        return reason
    return None


# --------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m spx.bench.serving EXPERIMENT.yaml --out DIR``: exit 0 when every measurement
    finished, 1 when some failed (the results are written either way), 3 on invalid input (spx.exit_codes)."""
    from spx.api.loading import SpecError, load_experiment
    from spx.exit_codes import EXIT_FAIL, EXIT_OK, EXIT_USAGE

    parser = argparse.ArgumentParser(prog="python -m spx.bench.serving", description=__doc__.splitlines()[0])
    parser.add_argument("experiment", type=Path)
    parser.add_argument("--out", type=Path, default=Path("spx-out"))
    parser.add_argument("--vllm", default="vllm", help="the vLLM CLI (argv prefix, split on spaces)")
    args = parser.parse_args(argv)
    try:
        exp = load_experiment(args.experiment.read_text(), str(args.experiment))
        outcome = run_vllm_benchmarks(
            exp.spec, args.out, RunnerOptions(vllm_command=args.vllm.split(), experiment=exp.metadata.name)
        )
    except (SpecError, ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    ok = all(r is None or r.complete for r in (outcome.serving, outcome.accuracy))
    return EXIT_OK if ok else EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())
