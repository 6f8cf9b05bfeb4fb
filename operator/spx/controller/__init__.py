"""spx.controller — the kopf operator that runs ShardedProjectionExperiments as GPU Jobs.

``kopf run -m spx.controller`` (and ``spx operator``, see :mod:`spx.controller.run`) load the kopf
handlers of :mod:`spx.controller.handlers`. The pure parts — :mod:`~spx.controller.conditions`,
:mod:`~spx.controller.pod_outcome`, :mod:`~spx.controller.results` — import without kopf.
"""

import sys

# Loaded by kopf (`kopf run -m spx.controller`): register the handlers. Imported by anything else
# (the `spx` CLI building its parser, unit tests), stay light: no kopf, no aiohttp.
if "kopf" in sys.modules:
    from spx.controller import handlers  # noqa: F401
