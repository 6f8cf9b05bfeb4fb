"""spx.controller — the kopf operator that runs ShardedProjectionExperiments as GPU Jobs.

By concern:

- :mod:`~spx.controller.conclusion` (over :mod:`~spx.controller.decision`, :mod:`~spx.controller.finish`) — the pure decision step: (spec, status, observed Job/pods,
  collected results, now) → (new status, events, actions); table-tested.
- :mod:`~spx.controller.reactor` — watch events in, reconcile workers out, re-lists:
  :mod:`~spx.controller.store` (the mirror, corrected by re-lists from the API server),
  :mod:`~spx.controller.workqueue` (new experiments first; follow-up work held back while Jobs are created);
- :mod:`~spx.controller.reconciler` — one experiment's reconcile: observe, decide, answer the
  decision's questions, carry out its effects (backoff on 409, ``StatusRejected`` on 422);
- :mod:`~spx.controller.admission` — the concurrency limit (pure);
- :mod:`~spx.controller.writes` — the API writes (409 backs off with jitter, 422 is terminal); :mod:`~spx.controller.reads` the reads;
- :mod:`~spx.controller.manifests` (over :mod:`~spx.controller.naming`, :mod:`~spx.controller.placement`),
  :mod:`~spx.controller.result_configmap` — pure builders;
- :mod:`~spx.controller.pod_outcome` (over :mod:`~spx.controller.job_status`, :mod:`~spx.controller.pod_startup`,
  :mod:`~spx.controller.pod_disruption`, :mod:`~spx.controller.pod_exit`; its types in
  :mod:`~spx.controller.observation`), :mod:`~spx.controller.results`, :mod:`~spx.controller.conditions`
  — pure readings of Jobs, pods, outputs and statuses;
- :mod:`~spx.controller.settings` — every ``SPX_*`` setting (pydantic-settings);
- :mod:`~spx.controller.handlers` — kopf handlers, one line each.

``kopf run -m spx.controller`` (and ``spx operator``, :mod:`spx.controller.run`) load the handlers;
the pure parts import without kopf.
"""

import sys

# Loaded by kopf (`kopf run -m spx.controller`): register the handlers. Imported by anything else
# (the `spx` CLI building its parser, unit tests), stay light: no kopf, no aiohttp.
if "kopf" in sys.modules:
    from spx.controller import handlers  # noqa: F401
