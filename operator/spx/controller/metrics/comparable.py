"""What makes two crossovers comparable: the :data:`~spx.controller.metrics.registry.COMPARABLE_LABELS`
values of an experiment, read through the status and spec models (:class:`spx.api.status.ExperimentStatus`,
:class:`spx.api.spec.ExperimentSpec`), never from camelCase keys.

Each label says *what* was measured (hardware, software, backend, gather source, execution mode, device,
TP size, projection shape, requested sweep grid), never how many points it took: two adaptive runs
that refined the same grid to 8 and 12 points are one design, and their crossovers are compared.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from spx.api.spec import ExperimentSpec
from spx.api.status import ExperimentStatus, KernelStatus

logger = logging.getLogger("spx.controller.metrics")


def status_model(status: ExperimentStatus | Mapping[str, Any] | None) -> ExperimentStatus:
    """``status`` as the model; a dict (the wire form) is validated, and one that does not validate
    (written by another operator version) counts as an empty status rather than failing the reconcile."""
    if isinstance(status, ExperimentStatus):
        return status
    try:
        return ExperimentStatus.model_validate(status or {})
    except ValidationError as e:
        logger.warning("metrics: a status that does not validate is exported as empty: %s", str(e)[:300])
        return ExperimentStatus()


def spec_model(spec: ExperimentSpec | Mapping[str, Any] | None) -> ExperimentSpec | None:
    """``spec`` as the model (the wire form is validated); None when absent or invalid."""
    if spec is None or isinstance(spec, ExperimentSpec):
        return spec
    try:
        return ExperimentSpec.model_validate(spec)
    except ValidationError:
        return None


def gather_source(kernel: KernelStatus, spec: ExperimentSpec | None) -> str:
    """``measured``, or for a modelled gather ``modelled/<prior>`` (``modelled/explicit`` with
    ``latencyUs``/``busBandwidthGbps`` set): a modelled crossover is partly the model's output, so
    runs under different gather models are not comparable (89 vs 940 tokens for the same Humming
    samples under the H20-calibrated and the datasheet prior)."""
    source = str(kernel.gather_source or "")
    if source != "modelled" or spec is None:
        return source
    model = spec.kernel.gather_model
    if model.latency_us is not None or model.bus_bandwidth_gbps is not None:
        return "modelled/explicit"
    return f"modelled/{model.prior}"


def execution_mode(kernel: KernelStatus, spec: ExperimentSpec | None = None) -> str:
    """How the sweep was timed: the spec's ``kernel.execution`` (auto, graph, eager) when given, else
    from the points' ``execution`` (``graph``, ``eager``, or ``auto`` when both occur); "" when unknown."""
    if spec is not None:
        return str(spec.kernel.execution)
    modes = {p.execution for p in kernel.points if p.execution}
    return "auto" if len(modes) > 1 else str(next(iter(modes), ""))


def projection_shape(spec: ExperimentSpec | None) -> str:
    """``<hidden>x<out>+<out>…`` of the measured projection (``5120x1280+512`` for V4.1's fused_wqa_wkv);
    "" without a spec. One value per projection a cluster measures: bounded."""
    if spec is None:
        return ""
    p = spec.projection
    return f"{p.hidden_size}x{'+'.join(str(n) for n in p.output_sizes)}"


def sweep_grid(kernel: KernelStatus, spec: ExperimentSpec | None) -> str:
    """``<first>-<last>x<count>`` of the token grid asked for: the spec's ``sweep.tokens``, else the
    status points an adaptive sweep did not add (no ``addedBecause``). Points a refinement added never
    change it. "" when there is none."""
    tokens = list(spec.sweep.tokens) if spec is not None else [p.tokens for p in kernel.points if not p.added_because]
    return f"{min(tokens)}-{max(tokens)}x{len(tokens)}" if tokens else ""


def comparable_values(status: ExperimentStatus | Mapping[str, Any] | None,
                      spec: ExperimentSpec | Mapping[str, Any] | None = None) -> tuple[str, ...]:
    """The ``COMPARABLE_LABELS`` values (gpu, driver, vllm, gemm_backend, gather_source, execution_mode,
    device, tp, projection, sweep) of an experiment; "" where unknown.

    Args:
        status: the experiment's status (the model, or its camelCase wire dict).
        spec: the experiment's spec (model or wire dict): names the gather model, the execution mode,
            the TP size, the projection and the requested grid; without it those come from the status
            where it has them, else "".
    """
    s, sp = status_model(status), spec_model(spec)
    env = s.environment
    kernel = s.kernel or KernelStatus()
    return (
        str((env and env.gpu) or ""), str((env and env.driver) or ""), str((env and env.vllm) or ""),
        str(kernel.gemm_backend or ""), gather_source(kernel, sp), execution_mode(kernel, sp),
        str((env and env.device) or ""), str(sp.parallelism.tensor_parallel_size) if sp is not None else "",
        projection_shape(sp), sweep_grid(kernel, sp),
    )
