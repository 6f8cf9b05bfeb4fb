"""Shared pydantic base: camelCase aliases in YAML/JSON, snake_case in Python, unknown fields rejected."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

#: A float that must be finite: ``.inf``, ``-.inf`` and ``.nan`` (YAML) or ``Infinity``/``NaN`` are refused at
#: validation, as the API server's JSON cannot carry them (pydantic would write them as ``null`` and the
#: bench's ranks would then reject their own spec). Used by every float field of a spec.
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]


class CamelModel(BaseModel):
    """Base of every resource model.

    Fields are snake_case in Python and camelCase on the wire (``hidden_size`` ⇄ ``hiddenSize``),
    matching Kubernetes API conventions; :mod:`spx.api.loading` accepts only the camelCase spelling
    from files. Unknown fields are an error (``extra="forbid"``) so a typo in an experiment file is
    reported instead of silently ignored, and types are strict (``"10"`` is not a sample count) as
    they are for the API server.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_default=True,
        strict=True,  # as the API server: "10" is not an integer, true is not 1
        use_attribute_docstrings=True,  # a docstring under a field is its description (kubectl explain)
    )

    def to_wire(self) -> dict[str, object]:
        """Dump as the camelCase JSON-compatible dict a user or the API server sees (``None`` dropped)."""
        return dump_model(self)


def dump_model(model: BaseModel) -> dict[str, Any]:
    """camelCase, JSON-compatible dict of any spx model, ``None`` fields dropped.

    ``model.model_dump(mode="json", by_alias=True, exclude_none=True)``: the wire form the API server
    and ``status.json`` / ``result.json`` readers see.
    """
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def utc_now(now: dt.datetime | None = None) -> str:
    """``now`` (default: the current time) in UTC as RFC 3339 with second precision (``2026-01-02T03:04:05Z``).

    The form of every timestamp in spx's documents (``startedAt``, ``finishedAt``, condition
    ``lastTransitionTime``), as Kubernetes writes times.
    """
    now = now or dt.datetime.now(dt.UTC)
    return now.astimezone(dt.UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
