"""The step A/B runner (``spec.serving.step``; design in :mod:`spx.api.step`).

Servers, one after the other, each a fresh ``vllm serve`` (:class:`spx.serving.server.VllmServer`) with the
experiment's serve argv plus ``--no-enable-prefix-caching`` (a repeated prefix would skip its prefill):

1. ``control``: the split off (``SPX_SHARD_FUSED_WQA_WKV_MIN_TOKENS=off``), measuring the lengths of every T;
2. one ``treated`` server per threshold T (``gate.thresholdTokens``, then ``step.thresholds``), split at T;
3. with ``step.positiveControl``: a server that never splits, with ``--max-num-batched-tokens T`` (T the
   gate's): T + 1 tokens take a second prefill step there, an effect the design must detect.

On each: warm-up rounds (discarded), then ``step.rounds`` rounds; a round sends one request of each length
(T − TP, T, T + 1) in a seeded shuffled order, one at a time (concurrency 1), each a list of token IDs to
``/v1/completions`` with ``max_tokens`` 1 and temperature 0; the latency is the wall time from sending to the
whole answer; ``usage.prompt_tokens`` is recorded (the analysis refuses a request whose count differs). Token
IDs are drawn from the server's own ``/tokenize`` of a fixed text (ordinary, non-special IDs of its
tokenizer). ``step-result.json`` is rewritten after every server; servers are stopped by process group.
"""

from __future__ import annotations

import http.client
import json
import random
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spx.analysis.serving import OFF
from spx.analysis.step import lengths
from spx.api.base import utc_now
from spx.api.serving import ServingArmSpec
from spx.api.serving import server_tp as api_server_tp
from spx.api.spec import ExperimentSpec
from spx.api.step import StepLengthRole, StepRequest, StepResult, StepServerRole, StepServerRun, StepSpec
from spx.files import write_atomic
from spx.serving.commands import server_command, server_env, serving_of
from spx.serving.gpus import wait_gpus_free
from spx.serving.server import ServerError, VllmServer, port_open
from spx.vocabulary import PLUGIN_LOG_MARKER, SERVER_LOG, STEP_RESULT_FILE

NO_PREFIX_CACHING = "--no-enable-prefix-caching"
#: After a failed request, how long to wait for the server to show whether it died with it.
CRASH_GRACE_SECONDS = 2.0
#: Text whose token IDs the prompts are drawn from (any ordinary text the tokenizer splits into many IDs).
ID_SOURCE_TEXT = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May? Weng earns 12 dollars an hour for "
    "babysitting. Yesterday, she just did 50 minutes of babysitting. How much did she earn?"
)


Log = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(f"[spx serving] {msg}", file=sys.stderr, flush=True)


class StepRequestError(RuntimeError):
    """One request of the step A/B failed (HTTP error, malformed answer)."""


@dataclass(frozen=True)
class PlannedServer:
    """One server of the step A/B: its name, role, threshold env value, T and extra serve args."""

    name: str
    role: StepServerRole
    threshold: str
    threshold_tokens: int
    measures: tuple[int, ...]
    extra_args: tuple[str, ...] = ()


def thresholds_of(spec: ExperimentSpec) -> list[int]:
    """``gate.thresholdTokens`` then ``serving.step.thresholds``, without repeats."""
    step = _step(spec)
    out: list[int] = []
    for t in [spec.gate.threshold_tokens, *step.thresholds]:
        if t not in out:
            out.append(t)
    return out


def _step(spec: ExperimentSpec) -> StepSpec:
    step = serving_of(spec).step
    if step is None:
        raise ValueError("spec.serving.step is not set")
    return step


def server_tp(spec: ExperimentSpec) -> int:
    """The servers' TP size: ``--tensor-parallel-size``/``-tp`` of ``serving.extraArgs`` when given (it wins on the
    serve command line), else ``spec.parallelism.tensorParallelSize``. The base length is T − this."""
    return api_server_tp(serving_of(spec).extra_args, spec.parallelism.tensor_parallel_size)


def plan(spec: ExperimentSpec) -> list[PlannedServer]:
    """The servers of the step A/B, in run order (module docstring).

    Raises:
        ValueError: no ``spec.serving.step``; a threshold ≤ TP (no base length below it).
    """
    step, tp, ts = _step(spec), server_tp(spec), thresholds_of(spec)
    for t in ts:
        lengths(t, tp, step.pad)  # raises for T ≤ TP
    gate_t = spec.gate.threshold_tokens
    servers = [PlannedServer("control", "control", OFF, gate_t, tuple(ts))]
    servers += [PlannedServer(f"treated-T{t}", "treated", str(t), t, (t,)) for t in ts]
    if step.positive_control:
        servers.append(PlannedServer(f"positive-control-T{gate_t}", "positive-control", OFF, gate_t, (gate_t,),
                                     ("--max-num-batched-tokens", str(gate_t))))
    return servers


class Client:
    """A keep-alive HTTP connection to one server's OpenAI API."""

    def __init__(self, host: str, port: int, model: str, timeout: float) -> None:
        self.conn = http.client.HTTPConnection(host, port, timeout=timeout)
        self.model = model

    def post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST JSON, return the JSON answer. Raises StepRequestError for a non-200 or malformed answer."""
        payload = json.dumps(body).encode()
        try:
            self.conn.request("POST", path, body=payload, headers={"Content-Type": "application/json"})
            resp = self.conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException) as err:
            self.conn.close()
            raise StepRequestError(f"POST {path}: {type(err).__name__}: {err}") from err
        if resp.status != 200:
            raise StepRequestError(f"POST {path}: HTTP {resp.status}: {data[:300].decode(errors='replace')}")
        try:
            out = json.loads(data)
        except ValueError as err:
            raise StepRequestError(f"POST {path}: not JSON: {data[:200]!r}") from err
        if not isinstance(out, dict):
            raise StepRequestError(f"POST {path}: expected a JSON object, got {data[:200]!r}")
        return out

    def token_ids(self) -> list[int]:
        """Distinct ordinary token IDs of :data:`ID_SOURCE_TEXT` (``/tokenize``, no special tokens)."""
        out = self.post("/tokenize", {"model": self.model, "prompt": ID_SOURCE_TEXT, "add_special_tokens": False})
        ids = sorted({int(i) for i in out.get("tokens", [])})
        if len(ids) < 8:
            raise StepRequestError(f"/tokenize gave {len(ids)} distinct token IDs for the source text; need ≥ 8")
        return ids

    def prefill(self, ids: list[int]) -> tuple[float, int | None]:
        """One ``max_tokens`` 1 completion of a token-ID prompt: (latency ms, usage.prompt_tokens)."""
        body = {"model": self.model, "prompt": ids, "max_tokens": 1, "temperature": 0.0}
        t0 = time.perf_counter()
        out = self.post("/v1/completions", body)
        ms = (time.perf_counter() - t0) * 1000.0
        usage = out.get("usage")
        tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        return ms, tokens if isinstance(tokens, int) else None

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()


def run_rounds(client: Client, run: StepServerRun, planned: PlannedServer, step: StepSpec, tp: int) -> None:
    """Warm-up rounds (discarded), then ``step.rounds`` rounds per T this server measures, into ``run.requests``."""
    vocab = client.token_ids()
    rng = random.Random(f"{step.seed}:{planned.name}")
    t0 = time.monotonic()
    for r in range(-step.warmup_rounds, step.rounds):
        for t in planned.measures:
            roles: list[tuple[StepLengthRole, int]] = list(lengths(t, tp, step.pad).items())
            rng.shuffle(roles)
            for order, (role, n) in enumerate(roles):
                ids = rng.choices(vocab, k=n)
                req = StepRequest(threshold_tokens=t, round=max(r, 0), order=order, role=role, length=n)
                try:
                    req.latency_ms, req.prompt_tokens = client.prefill(ids)
                except StepRequestError as err:
                    req.error = str(err)[:1024]
                if r >= 0:
                    run.requests.append(req)
    run.wall_seconds = time.monotonic() - t0


@dataclass
class StepRunner:
    """Runs the step A/B of ``spec`` into ``out_dir`` (``step-result.json``, ``step/NN-<server>/server.log``)."""

    spec: ExperimentSpec
    out_dir: Path
    vllm_command: list[str]
    env: Mapping[str, str]
    health_poll_seconds: float = 1.0
    device: str | None = None
    nvidia_smi: list[str] | None = None
    on_save: Callable[[StepResult], None] | None = None
    """Told the result after every rewrite (``spx run --serving`` prints it as a ``{"kind": "step"}`` line, so
    the servers that finished survive a pod killed later); a hook that raises is logged, never stops the run."""

    def save(self, result: StepResult, log: Log = _stderr) -> None:
        """Rewrite ``step-result.json`` atomically, then tell :attr:`on_save`."""
        write_atomic(self.out_dir / STEP_RESULT_FILE, json.dumps(result.to_wire(), indent=1) + "\n")
        if self.on_save is not None:
            try:
                self.on_save(result)
            except Exception as err:  # a reporting hook must not stop the measurement
                log(f"step A/B: on_save hook failed: {type(err).__name__}: {err}")

    def __call__(self, log: Log = _stderr) -> StepResult:
        """Run every planned server; never raises for a failed server (its error is in the result)."""
        step = _step(self.spec)
        result = StepResult(step=step, tensor_parallel_size=server_tp(self.spec),
                            thresholds=thresholds_of(self.spec), device=self.device, started_at=utc_now())
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.save(result, log)
        try:
            for index, planned in enumerate(plan(self.spec)):
                run = StepServerRun(name=planned.name, role=planned.role,
                                    threshold=planned.threshold, threshold_tokens=planned.threshold_tokens)
                result.servers.append(run)
                self._serve(planned, run, self.out_dir / "step" / f"{index + 1:02d}-{planned.name}", log)
                if run.error is not None:
                    result.failures.append(f"{run.name}: {run.error}")
                self.save(result, log)
                log(f"step A/B: {planned.name} done ({len(run.requests)} requests)"
                    + (f": FAILED: {run.error}" if run.error else ""))
        except BaseException as err:
            result.failures.append(f"runner stopped: {type(err).__name__}: {err}")
            raise
        finally:
            result.finished_at = utc_now()
            result.complete = not result.failures and all(r.error is None for s_ in result.servers for r in s_.requests)
            self.save(result, log)
        return result

    def _serve(self, planned: PlannedServer, run: StepServerRun, server_dir: Path, log: Log) -> None:
        s = serving_of(self.spec)
        t_port = time.monotonic()
        while port_open(s.host, s.port) and time.monotonic() - t_port < s.shutdown_timeout_seconds:
            time.sleep(self.health_poll_seconds)
        argv = [*server_command(self.spec, self.vllm_command), NO_PREFIX_CACHING, *planned.extra_args]
        arm = (ServingArmSpec(name=planned.name, variant="main") if planned.threshold == OFF else
               ServingArmSpec(name=planned.name, variant="split", threshold_tokens=planned.threshold_tokens))
        server = VllmServer(argv, server_env(self.spec, arm, self.env), server_dir / SERVER_LOG)
        run.server_command, run.server_log = argv, str(server.log_path)
        log(f"step A/B: {planned.name} ({planned.role}, threshold {planned.threshold}): starting: {' '.join(argv)}")
        client = Client(s.host, s.port, s.api_model_name, _step(self.spec).request_timeout_seconds)
        try:
            server.start()
            run.healthy_after_seconds = server.wait_healthy(
                f"http://{s.host}:{s.port}/health", s.startup_timeout_seconds, self.health_poll_seconds)
            run.threshold_confirmed = PLUGIN_LOG_MARKER in server.log_text()
            run_rounds(client, run, planned, _step(self.spec), server_tp(self.spec))
            failed = [r for r in run.requests if r.error is not None]
            if failed and server.exited_within(CRASH_GRACE_SECONDS) or not server.alive():
                raise server.died("during the step rounds")
            if failed:
                run.error = f"{len(failed)} of {len(run.requests)} requests failed; the first: {failed[0].error}"
        except (ServerError, StepRequestError) as err:
            run.error = str(err)[:2000]
        finally:
            client.close()
            run.server_exit_code = server.stop(s.shutdown_timeout_seconds)
            check, detail = wait_gpus_free(self.nvidia_smi, self.env, s.gpu_release_timeout_seconds,
                                           self.health_poll_seconds)
            if check == "busy" and run.error is None:
                run.error = f"GPUs still busy after the server stopped: {detail}"


def run_step_ab(spec: ExperimentSpec, out_dir: Path, vllm_command: list[str], env: Mapping[str, str], *,
                nvidia_smi: list[str] | None = None, log: Log = _stderr,
                on_save: Callable[[StepResult], None] | None = None) -> StepResult:
    """Run the step A/B of ``spec`` into ``out_dir`` and return its result (also in ``step-result.json``).

    ``nvidia_smi``: its argv (``None``: none found, so the servers ran on CPU: ``device`` ``cpu``, the GPU
    release check skipped). ``on_save``: told the result after every server (:attr:`StepRunner.on_save`).

    Raises:
        ValueError: no ``spec.serving.step``, a threshold ≤ TP.
    """
    plan(spec)  # refuse a bad plan before any server starts
    device = "cuda" if nvidia_smi is not None else "cpu"
    return StepRunner(spec, out_dir, list(vllm_command), env, device=device, nvidia_smi=nvidia_smi,
                      on_save=on_save)(log)
