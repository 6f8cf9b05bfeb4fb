"""The one-server step A/B runner (``spec.serving.step``; design in :mod:`spx.api.step`, issue #34).

One ``vllm serve`` (:class:`spx.serving.server.VllmServer`) with the experiment's serve argv plus
(:func:`spx.serving.step_plan.step_server_args`) ``--host 127.0.0.1``, ``--no-enable-prefix-caching``, spx's worker
extension (``--worker-extension-cls spx.vllm_ext.worker.SplitSwitch``) and ``--enforce-eager``, and
``VLLM_SERVER_DEV_MODE=1`` in its environment (``POST /collective_rpc``). It listens on the loopback only because
the dev mode exposes other endpoints too (cache resets, sleep, any worker method): only the runner, in the same
pod, reaches it. It runs first, before any serving arm, and can run alone.

1. load once; ask every worker its state (``spx_state``): the extension is loaded and found the split target;
   a compiled or CUDA-graph-captured forward refuses its lengths (:func:`spx.serving.step_plan.refusals`);
2. warm-up rounds (discarded), then rounds: every arm once at every length, in a seeded random order, one request
   at a time (concurrency 1). Before each request, outside its timed window, the arm is switched in every worker
   (``spx_switch``: confirmed by every worker); after it, the forwards are read (``spx_counts``: per worker, the
   token counts and whether each took the split branch), so each request is confirmed by its own forward;
3. after every block of ``step.lookEvery`` rounds (from ``step.minRounds`` on), ``step-result.json`` is rewritten
   (atomically) and the stopping rule (:func:`spx.analysis.step.stop_reason`) says whether to go on.

Every switch and request carries its Unix time. A server that dies, or a request that fails, ends the rounds; what
was measured is kept, with the failure. Stopped by process group (:meth:`VllmServer.stop`).
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from spx.analysis.decide import max_num_batched_tokens
from spx.analysis.step import arms as step_arms
from spx.analysis.step import default_lengths, stop_reason
from spx.api.base import utc_now
from spx.api.serving import server_tp as api_server_tp
from spx.api.spec import ExperimentSpec, spec_hash
from spx.api.step import StepArm, StepRequest, StepResult, StepServerInfo, StepSpec, StepSwitch
from spx.api.step_checks import lengths_above
from spx.files import write_atomic
from spx.serving.commands import server_command, serving_of
from spx.serving.gpus import wait_gpus_free
from spx.serving.server import ServerError, VllmServer, port_open
from spx.serving.step_client import Client, StepRequestError
from spx.serving.step_plan import (
    LOOPBACK,
    Switch,
    forward_accounting,
    forward_confirmed,
    refusals,
    round_order,
    step_server_args,
    switch_confirmed,
    switch_of,
)
from spx.vocabulary import ARM_ENV, PLUGIN_ENV_THRESHOLD, SERVER_LOG, STEP_RESULT_FILE

#: The environment variable that exposes ``POST /collective_rpc`` (``vllm/envs.py``).
DEV_MODE_ENV = "VLLM_SERVER_DEV_MODE"
#: After a failed request, how long to wait for the server to show whether it died with it.
CRASH_GRACE_SECONDS = 2.0

Log = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(f"[spx serving] {msg}", file=sys.stderr, flush=True)


def _step(spec: ExperimentSpec) -> StepSpec:
    step = serving_of(spec).step
    if step is None:
        raise ValueError("spec.serving.step is not set")
    return step


def server_tp(spec: ExperimentSpec) -> int:
    """The server's TP size: ``--tensor-parallel-size``/``-tp`` of ``serving.extraArgs`` when given, else
    ``spec.parallelism.tensorParallelSize``."""
    return api_server_tp(serving_of(spec).extra_args, spec.parallelism.tensor_parallel_size)


def thresholds_of(spec: ExperimentSpec) -> list[int]:
    """``gate.thresholdTokens`` then ``serving.step.thresholds``, without repeats."""
    out: list[int] = []
    for t in [spec.gate.threshold_tokens, *_step(spec).thresholds]:
        if t not in out:
            out.append(t)
    return out


def planned_result(spec: ExperimentSpec, *, experiment: str, run_id: str, device: str | None) -> StepResult:
    """The result document before the server starts: the lengths (``step.lengths`` or the default curve, never above
    ``max_num_batched_tokens``) and the arms.

    Raises:
        ValueError: no ``spec.serving.step``; a bad ``--max-num-batched-tokens``; no length to measure.
    """
    step, tp, most = _step(spec), server_tp(spec), max_num_batched_tokens(spec)
    ts = thresholds_of(spec)
    lengths = sorted(step.lengths) if step.lengths else default_lengths(ts[0], tp, most, ts[1:])
    if (above := lengths_above(lengths, most)) is not None:  # (the rule spx validate applies: spx.api.step_checks)
        raise ValueError(above)
    if not lengths:
        raise ValueError(f"no step A/B length between 1 and max_num_batched_tokens {most}: set spec.serving.step.lengths")
    return StepResult(experiment=experiment, spec_hash=spec_hash(spec), run_id=run_id, step=step,
                      tensor_parallel_size=tp, max_num_batched_tokens=most, gate_threshold_tokens=ts[0],
                      thresholds=ts, lengths=lengths, arms=list(step_arms(step)), device=device,
                      rounds_planned=step.rounds, started_at=utc_now())


@dataclass
class OneServer:
    """The step A/B's one server and its client, for the rounds (:class:`StepRunner`)."""

    client: Client
    workers: int
    vocab: list[int] = field(default_factory=list)
    timeout: float = 600.0

    def switch(self, arm: StepArm, sw: Switch) -> StepSwitch:
        """Switch every worker to ``sw`` (timestamped; the RPC's wall time kept)."""
        record = StepSwitch(at=time.time(), arm=arm, threshold=sw.threshold, inject_ms=sw.inject_ms)
        t0 = time.perf_counter()
        try:
            states = self.client.rpc("spx_switch", json.dumps(sw.wire()), timeout=self.timeout)
        except StepRequestError as err:
            record.error = str(err)[:1024]
            return record
        record.rpc_ms = (time.perf_counter() - t0) * 1000.0
        record.workers = len(states)
        record.confirmed = switch_confirmed(sw, [s for s in states if isinstance(s, dict)], self.workers)
        return record

    def request(self, req: StepRequest, sw: Switch, rng: random.Random) -> None:
        """Send ``req`` (timed), then read its forwards from every worker (untimed) into ``req``."""
        ids = rng.choices(self.vocab, k=req.length)
        req.sent_at = time.time()
        req.latency_ms, req.prompt_tokens = self.client.prefill(ids)
        counts = [c for c in self.client.rpc("spx_counts", timeout=self.timeout) if isinstance(c, dict)]
        req.split_forwards, req.forward_tokens = forward_accounting(counts)
        req.confirmed = forward_confirmed(sw, req.length, counts, self.workers) and req.prompt_tokens == req.length


def run_round(one: OneServer, result: StepResult, round_index: int, *, keep: bool) -> None:
    """One round (every arm at every length, seeded order); recorded when ``keep`` (warm-up rounds are not).

    Raises:
        StepRequestError: a request or an RPC failed (the request's error is recorded first).
    """
    step = result.step
    rng = random.Random(f"{step.seed}:ids:{round_index}")
    for order, (arm, length) in enumerate(round_order(result.arms, result.lengths, step.seed, round_index)):
        sw = switch_of(arm, length, step)
        switch = one.switch(arm, sw)
        req = StepRequest(round=max(round_index, 0), order=order, arm=arm, length=length)
        if keep:
            result.switches.append(switch)
            result.requests.append(req)
        if not switch.confirmed:
            req.error = f"switch to {arm} at {length} not confirmed by every worker: {switch.error or switch}"[:1024]
            raise StepRequestError(req.error)
        try:
            one.request(req, sw, rng)
        except StepRequestError as err:
            req.error = str(err)[:1024]
            raise


@dataclass
class StepRunner:
    """Runs the step A/B of ``spec`` into ``out_dir`` (``step-result.json``, ``step/server.log``)."""

    spec: ExperimentSpec
    out_dir: Path
    vllm_command: list[str]
    env: Mapping[str, str]
    result: StepResult
    health_poll_seconds: float = 1.0
    nvidia_smi: list[str] | None = None
    on_save: Callable[[StepResult], None] | None = None
    """Told the result after every rewrite (``spx run --serving`` prints it as a ``{"kind": "step"}`` line, so the
    blocks that finished survive a pod killed later); a hook that raises is logged, never stops the run."""

    def save(self, log: Log = _stderr) -> None:
        """Rewrite ``step-result.json`` atomically, then tell :attr:`on_save`."""
        write_atomic(self.out_dir / STEP_RESULT_FILE, json.dumps(self.result.to_wire(), indent=1) + "\n")
        if self.on_save is not None:
            try:
                self.on_save(self.result)
            except Exception as err:  # a reporting hook must not stop the measurement
                log(f"step A/B: on_save hook failed: {type(err).__name__}: {err}")

    def server(self) -> VllmServer:
        """The one server: the step flags (:func:`step_server_args`), dev mode on, no startup threshold."""
        argv = step_server_args(server_command(self.spec, self.vllm_command))
        env = dict(self.env)
        env.update(serving_of(self.spec).env)
        env[DEV_MODE_ENV] = "1"
        env.pop(PLUGIN_ENV_THRESHOLD, None)  # the extension sets the threshold per request
        env[ARM_ENV] = "step"  # the server's own logs name it
        self.result.server.server_command = argv
        return VllmServer(argv, env, self.out_dir / "step" / SERVER_LOG)

    def __call__(self, log: Log = _stderr) -> StepResult:
        """Load, check, measure, stop; never raises for a failed server or request (the failure is in the result)."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.save(log)
        s = serving_of(self.spec)
        server = self.server()
        self.result.server.server_log = str(server.log_path)
        client = Client(LOOPBACK, s.port, s.api_model_name, self.result.step.request_timeout_seconds)
        try:
            t_port = time.monotonic()
            while port_open(LOOPBACK, s.port) and time.monotonic() - t_port < s.shutdown_timeout_seconds:
                time.sleep(self.health_poll_seconds)
            log(f"step A/B: starting one server: {' '.join(server.argv)}")
            server.start()
            self.result.server.healthy_after_seconds = server.wait_healthy(
                f"http://{LOOPBACK}:{s.port}/health", s.startup_timeout_seconds, self.health_poll_seconds)
            one = self._check(client, log)
            if one is not None:
                self._rounds(one, server, log)
        except (ServerError, StepRequestError) as err:
            self.result.failures.append(str(err)[:2000])
        except BaseException as err:
            self.result.failures.append(f"runner stopped: {type(err).__name__}: {err}"[:2000])
            raise
        finally:
            client.close()
            self.result.server.server_exit_code = server.stop(s.shutdown_timeout_seconds)
            self._release(s.gpu_release_timeout_seconds)
            self.result.finished_at = utc_now()
            self.result.complete = not self.result.failures and self.result.stopped_because is not None
            self.save(log)
        return self.result

    def _check(self, client: Client, log: Log) -> OneServer | None:
        """Every worker's state: the extension found the target; refuse what a compiled/captured forward hides."""
        states = [s for s in client.rpc("spx_state") if isinstance(s, dict)]
        info: StepServerInfo = self.result.server
        info.workers = len(states)
        info.extension_confirmed = bool(states) and all(s.get("threshold") is not None for s in states)
        info.compiled = any(bool(s.get("compiled")) for s in states)
        info.capture_limit_tokens = max((max(s.get("captureSizes") or [0]) for s in states), default=0)
        kept, refused = refusals(self.result.lengths, states)
        self.result.lengths, self.result.refused = kept, refused
        log(f"step A/B: {len(states)} worker(s) answered; lengths {kept}" + (f"; refused {len(refused)}" if refused else ""))
        if not kept:
            self.result.failures.append(f"every length refused: {refused[0].reason if refused else 'none planned'}")
            return None
        one = OneServer(client, len(states), timeout=float(self.result.step.request_timeout_seconds))
        one.vocab = client.token_ids()
        return one

    def _rounds(self, one: OneServer, server: VllmServer, log: Log) -> None:
        """Warm-up, then blocks of ``lookEvery`` rounds until the stopping rule stops them."""
        step = self.result.step
        try:
            for r in range(-step.warmup_rounds, 0):
                run_round(one, self.result, r, keep=False)
            t0 = time.monotonic()
            while self.result.stopped_because is None:
                for _ in range(step.look_every):
                    run_round(one, self.result, self.result.rounds_done, keep=True)
                    self.result.rounds_done += 1
                    if self.result.rounds_done >= step.rounds:
                        break
                if self.result.rounds_done >= min(step.min_rounds, step.rounds):
                    self.result.stopped_because = stop_reason(self.result, time.monotonic() - t0)
                if self.result.stopped_because is None and self.result.rounds_done >= step.rounds:
                    self.result.stopped_because = f"rounds: {self.result.rounds_done} (step.rounds, the budget)"
                self.save(log)
                log(f"step A/B: {self.result.rounds_done} rounds" +
                    (f"; stopped: {self.result.stopped_because}" if self.result.stopped_because else ""))
        except StepRequestError as err:
            if server.exited_within(CRASH_GRACE_SECONDS) or not server.alive():
                raise server.died(f"in round {self.result.rounds_done} ({err})") from err
            raise

    def _release(self, timeout: float) -> None:
        check, detail = wait_gpus_free(self.nvidia_smi, self.env, timeout, self.health_poll_seconds)
        if check == "busy":
            self.result.failures.append(f"GPUs still busy after the server stopped: {detail}")


def run_step_ab(spec: ExperimentSpec, out_dir: Path, vllm_command: list[str], env: Mapping[str, str], *,
                nvidia_smi: list[str] | None = None, log: Log = _stderr,
                on_save: Callable[[StepResult], None] | None = None, experiment: str | None = None,
                run_id: str | None = None) -> StepResult:
    """Run the step A/B of ``spec`` into ``out_dir`` and return its result (also in ``step-result.json``).

    ``nvidia_smi``: its argv (``None``: none found, so the server ran on CPU: ``device`` ``cpu``, the GPU release
    check skipped). ``experiment``: metadata.name (default ``SPX_EXPERIMENT`` or ``local``); ``run_id``: the run's
    id (default ``SPX_RUN_ID``, else a fresh one). ``on_save``: :attr:`StepRunner.on_save`.

    Raises:
        ValueError: no ``spec.serving.step``; lengths above max_num_batched_tokens (before any server starts).
    """
    name = experiment or os.environ.get("SPX_EXPERIMENT", "local")
    rid = run_id or os.environ.get("SPX_RUN_ID") or uuid.uuid4().hex[:12]
    device = "cuda" if nvidia_smi is not None else "cpu"
    result = planned_result(spec, experiment=name, run_id=rid, device=device)
    return StepRunner(spec, out_dir, list(vllm_command), env, result, nvidia_smi=nvidia_smi, on_save=on_save)(log)
