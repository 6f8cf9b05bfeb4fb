"""The step A/B's analysis: requests → per-round differences → difference in differences → effect,
interval, regime and outcome (:class:`spx.api.step.StepEffect`). Pure.
"""

from __future__ import annotations
