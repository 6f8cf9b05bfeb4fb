"""Shared pydantic base: camelCase aliases in YAML/JSON, snake_case in Python, unknown fields rejected."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class CamelModel(BaseModel):
    """Base of every resource model.

    Fields are snake_case in Python and camelCase on the wire (``hidden_size`` ⇄ ``hiddenSize``),
    matching Kubernetes API conventions. Unknown fields are an error (``extra="forbid"``) so a typo
    in an experiment file is reported instead of silently ignored.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_default=True,
    )

    def to_wire(self) -> dict[str, object]:
        """Dump as the camelCase JSON-compatible dict a user or the API server sees (``None`` dropped)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
