"""One point of one arm: a ``vllm bench serve`` run, its saved JSON read back."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from spx.analysis.serving import metric_value, sampling_of, summary_fields
from spx.api.base import utc_now
from spx.api.serving import ServingPointRun, ServingPointSpec, ServingSpec
from spx.files import claim
from spx.serving.commands import bench_command
from spx.serving.server import log_cause


def run_point(
    s: ServingSpec, point: ServingPointSpec, vllm: Sequence[str], arm_dir: Path, env: Mapping[str, str]
) -> ServingPointRun:
    """One ``vllm bench serve`` into ``arm_dir/points/<point>.json|.log``; never raises for a failed point.

    A non-zero exit, a timeout (``pointTimeoutSeconds``), no readable JSON, or any failed request
    (``completed < numPrompts``) makes ``error`` say which, with the cause read from the bench's log.
    """
    result_dir = arm_dir / "points"
    result_dir.mkdir(parents=True, exist_ok=True)
    result_file = result_dir / f"{point.name}.json"
    log_file = result_dir / f"{point.name}.log"
    result_file.unlink(missing_ok=True)
    argv = bench_command(s, point, vllm, result_dir)
    run = ServingPointRun(point=point.name, metric=point.metric, log_file=str(log_file), command=argv,
                          sampling=sampling_of(s.extra_bench_args))
    t0 = time.monotonic()
    claim(result_file)  # (vllm bench serve writes it)
    with open(claim(log_file), "wb") as log:
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
        run.error = f"vllm bench serve timed out after {s.point_timeout_seconds}s (pointTimeoutSeconds) (log: {log_file})"
        return run
    if code != 0:
        run.error = f"vllm bench serve exited with code {code}: {log_cause(log_file)} (log: {log_file})"
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
        run.error = (
            f"{failed} of {point.num_prompts} requests failed ({completed} completed): {log_cause(log_file)} "
            f"(log: {log_file})"
        )
        return run
    try:
        run.value = metric_value(saved, point.metric)
    except ValueError as err:
        run.error = str(err)
    return run
