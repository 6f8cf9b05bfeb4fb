"""Kubernetes name and quantity syntax as the API server checks it (label keys/values, DNS names, quantities)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

#: Kubernetes label value (apimachinery ``IsValidLabelValue``): ≤ 63 chars, alphanumeric ends.
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
#: Qualified name of a label key (``IsQualifiedName``): optional DNS-subdomain prefix + "/" + name.
LABEL_KEY = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
#: DNS-1123 subdomain (object names: PriorityClass, PVC, experiments).
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
#: Kubernetes resource quantity (``resource.Quantity``), e.g. ``32``, ``500m``, ``128Gi``.
QUANTITY = r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$"

#: DNS-1123 label (namespaces): ≤ 63 of lower-case a-z 0-9 -, alphanumeric ends.
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"

LabelValue = Annotated[str, Field(min_length=1, max_length=63, pattern=LABEL_VALUE)]
#: A label or annotation key as the API server checks it (apimachinery ``IsQualifiedName``): an optional
#: DNS-subdomain prefix of ≤ 253 characters, "/", and a name of ≤ 63.
LabelKey = Annotated[str, Field(min_length=1, max_length=253 + 1 + 63, pattern=LABEL_KEY)]
