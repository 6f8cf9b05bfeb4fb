"""spx.controller — the kopf operator that runs ShardedProjectionExperiments as GPU Jobs.

Importing the package registers the kopf handlers (``kopf run -m spx.controller``); ``spx operator``
does the same with the options below. The pure parts — :mod:`~spx.controller.conditions`,
:mod:`~spx.controller.pod_outcome`, :mod:`~spx.controller.results` — can be imported on their own.
"""

from spx.controller import handlers  # noqa: F401  (registers the handlers)
from spx.controller.run import main, run_operator

__all__ = ["main", "run_operator"]
