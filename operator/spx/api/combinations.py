"""Field combinations that no machine can run, refused everywhere with one message.

Each :class:`Combination` is a set of conditions on ``spec`` fields that, together, can only fail inside
the bench pod (the bench's own checks: ``spx.bench.kernel`` ``_resolve_timer``/``_resolve_gather`` and
``spx.bench.gemm.choose_gemm_backend``, which stay as the last line of defence). From the one table
:data:`COMBINATIONS`:

- :func:`combination_problems` lists every refused combination of a spec at once (``spx validate``,
  ``spx run`` and the operator's admission check, through :class:`~spx.api.spec.ExperimentSpec`'s
  validator and :func:`spx.api.loading.validate_spec`);
- :func:`cel_rules` gives the API server the same rules as CRD ``x-kubernetes-validations`` on
  ``spec`` (:mod:`spx.api.crd`), with the same messages. The CRD carries no defaults, so each rule
  reads a field behind ``has()`` and spells the model's default out.

Only machine-independent facts are here: what a CPU device cannot run (CUDA timers, NCCL or vLLM's
all-gather, the MXFP8/FP8 GPU kernels), what a CUDA device should not be timed with (the host
timer), and which GEMM backend takes which weight format. Whether a GPU, vLLM or Humming is present
is the runner's check on the machine itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from spx.vocabulary import (
    CUDA_GATHER_BACKENDS,
    CUDA_GEMM_BACKENDS,
    CUDA_TIMERS,
    FP8_BLOCK128,
    MXFP8,
    MXFP8_GEMM_BACKENDS,
)


def _and(values: tuple[str, ...]) -> str:
    """``("a", "b", "c")`` → ``"a, b and c"`` (a message's list of a vocabulary's values)."""
    return values[0] if len(values) == 1 else f"{', '.join(values[:-1])} and {values[-1]}"


@dataclass(frozen=True)
class FieldPredicate:
    """``spec.<path>`` is (``negate=False``) or is not (``negate=True``) one of ``values``.

    ``path`` is camelCase below ``spec``, e.g. ``kernel.device``.
    """

    path: str
    values: tuple[str | int, ...]
    negate: bool = False


@dataclass(frozen=True)
class Combination:
    """A combination of field values refused before any pod exists: all ``when`` conditions hold.

    ``message`` starts with the field to change and names the fix; it is the whole problem line of
    ``spx validate`` and the API server's CEL message.
    """

    when: tuple[FieldPredicate, ...]
    message: str


_CPU = FieldPredicate("kernel.device", ("cpu",))

#: Every refused combination (order: the order problems are listed in). The values that need CUDA are the
#: vocabulary's (:data:`~spx.vocabulary.CUDA_TIMERS`, :data:`~spx.vocabulary.CUDA_GATHER_BACKENDS`,
#: :data:`~spx.vocabulary.CUDA_GEMM_BACKENDS`), which ``spx.bench.context`` and ``spx.bench.gemm`` check at run time.
COMBINATIONS: tuple[Combination, ...] = (
    Combination((_CPU, FieldPredicate("kernel.timer", CUDA_TIMERS)),
                f"spec.kernel.timer: {_and(CUDA_TIMERS)} time CUDA kernels, but spec.kernel.device is cpu: "
                "use timer host or auto"),
    # vLLM's sp_all_gather runs over gloo on CPU (tests/real_vllm/test_run_vllm_backend.py): only NCCL needs CUDA
    Combination((_CPU, FieldPredicate("kernel.gather", CUDA_GATHER_BACKENDS),
                 FieldPredicate("parallelism.tensorParallelSize", (1,), negate=True)),
                f"spec.kernel.gather: {_and(CUDA_GATHER_BACKENDS)} gathers between CUDA GPUs, but spec.kernel.device "
                "is cpu: use gather gloo, vllm, modelled or auto"),
    Combination((_CPU, FieldPredicate("kernel.gemmBackend", CUDA_GEMM_BACKENDS)),
                f"spec.kernel.gemmBackend: {_and(CUDA_GEMM_BACKENDS)} are CUDA kernels, but spec.kernel.device "
                "is cpu: use gemmBackend torch-bf16 or auto"),
    Combination((FieldPredicate("kernel.device", ("cuda",)), FieldPredicate("kernel.timer", ("host",))),
                f"spec.kernel.timer: host is for CPU smoke runs, but spec.kernel.device is cuda: use timer "
                f"{', '.join(CUDA_TIMERS)} or auto"),
    Combination((FieldPredicate("kernel.gemmBackend", MXFP8_GEMM_BACKENDS),
                 FieldPredicate("projection.weightFormat", (MXFP8,), negate=True)),
                f"spec.kernel.gemmBackend: {_and(MXFP8_GEMM_BACKENDS)} run vLLM's MXFP8 path (32×32 blocks, e8m0 "
                f"scales), but spec.projection.weightFormat is not {MXFP8}: use weightFormat {MXFP8}, or gemmBackend "
                "torch-bf16 or auto"),
    Combination((FieldPredicate("kernel.gemmBackend", ("torch-fp8",)),
                 FieldPredicate("projection.weightFormat", (FP8_BLOCK128,), negate=True)),
                f"spec.kernel.gemmBackend: torch-fp8 (cuBLASLt blockwise W8A8) takes 128×128 blocks only, but "
                f"spec.projection.weightFormat is not {FP8_BLOCK128}: use gemmBackend humming, marlin, torch-bf16 "
                "or auto"),
)


def _field_path(path: str, model: type[BaseModel]) -> tuple[list[str], Any]:
    """``kernel.device`` of ``model`` (the spec model) → (python attribute names, the model's default)."""
    attrs: list[str] = []
    default: Any = None
    parts = path.split(".")
    for i, alias in enumerate(parts):
        name, info = next((n, f) for n, f in model.model_fields.items() if (f.alias or n) == alias)
        attrs.append(name)
        if i < len(parts) - 1:
            annotation = info.annotation
            assert isinstance(annotation, type) and issubclass(annotation, BaseModel), path
            model = annotation
        else:
            default = info.default
    return attrs, default


def _value(spec: BaseModel, path: str) -> Any:
    obj: Any = spec
    for attr in _field_path(path, type(spec))[0]:
        obj = getattr(obj, attr)
    return obj


def refused(combination: Combination, spec: BaseModel) -> bool:
    """True when every condition of ``combination`` holds for ``spec`` (an :class:`~spx.api.spec.ExperimentSpec`;
    typed as its base so this module, which the spec's validator imports, imports nothing back)."""
    return all((_value(spec, c.path) in c.values) != c.negate for c in combination.when)


def combination_problems(spec: BaseModel) -> list[str]:
    """The message of every :data:`COMBINATIONS` entry ``spec`` (an :class:`~spx.api.spec.ExperimentSpec`) falls
    into (empty: none), all at once."""
    return [c.message for c in COMBINATIONS if refused(c, spec)]


def _cel_literal(value: str | int) -> str:
    return f"'{value}'" if isinstance(value, str) else str(value)


def _cel_value(path: str, model: type[BaseModel]) -> str:
    """The CEL expression of ``self.<path>`` on ``spec``, the model's default where a part is absent."""
    parts = path.split(".")
    guards = " && ".join(f"has(self.{'.'.join(parts[: i + 1])})" for i in range(len(parts)))
    return f"(({guards}) ? self.{path} : {_cel_literal(_field_path(path, model)[1])})"


def cel_rule(combination: Combination, model: type[BaseModel]) -> dict[str, str]:
    """``{"rule", "message"}`` of ``combination`` for ``x-kubernetes-validations`` on ``spec`` (true: allowed);
    ``model`` is the spec model (:class:`~spx.api.spec.ExperimentSpec`), whose defaults stand for absent fields."""
    terms = []
    for c in combination.when:
        member = f"{_cel_value(c.path, model)} in [{', '.join(_cel_literal(v) for v in c.values)}]"
        terms.append(f"!({member})" if c.negate else member)
    return {"rule": "!(" + " && ".join(terms) + ")", "message": combination.message}


def cel_rules(model: type[BaseModel]) -> list[dict[str, str]]:
    """:func:`cel_rule` of every :data:`COMBINATIONS` entry on ``model`` (the spec model), in order."""
    return [cel_rule(c, model) for c in COMBINATIONS]


class CombinationError(ValueError):
    """Raised by :class:`~spx.api.spec.ExperimentSpec`'s validator; ``problems`` holds every message.

    :func:`spx.api.problems.describe_validation_error` lists them as separate problems.
    """

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


__all__ = ["COMBINATIONS", "Combination", "CombinationError", "FieldPredicate", "cel_rule", "cel_rules",
           "combination_problems", "refused"]
