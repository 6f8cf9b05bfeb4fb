"""spx.controller — the kopf operator that runs ShardedProjectionExperiments as GPU Jobs.

By concern:

- :mod:`~spx.controller.decide.conclusion` (over :mod:`~spx.controller.decide.decision`, :mod:`~spx.controller.decide.finish`) — the pure decision step: (spec, status, observed Job/pods,
  collected results, now) → (new status, events, actions); table-tested.
- :mod:`~spx.controller.reactor` — watch events in, reconcile workers out, re-lists:
  :mod:`~spx.controller.decide.store` (the mirror, corrected by re-lists from the API server),
  :mod:`~spx.controller.workqueue` (new experiments first; follow-up work held back while Jobs are created);
- :mod:`~spx.controller.reconciler` — one experiment's reconcile: observe, decide, answer the
  decision's questions, carry out its effects (backoff on 409, ``StatusRejected`` on 422);
- :mod:`~spx.controller.decide.admission` — the concurrency limit (pure);
- :mod:`~spx.controller.writes` — the API writes (409 backs off with jitter, 422 is terminal); :mod:`~spx.controller.reads` the reads;
- :mod:`~spx.controller.manifests.job` (over :mod:`~spx.controller.manifests.naming`, :mod:`~spx.controller.manifests.placement`),
  :mod:`~spx.controller.manifests.result_configmap` — pure builders;
- :mod:`~spx.controller.decide.pod_outcome` (over :mod:`~spx.controller.decide.job_status`, :mod:`~spx.controller.decide.pod_startup`,
  :mod:`~spx.controller.decide.pod_disruption`, :mod:`~spx.controller.decide.pod_exit`; its types in
  :mod:`~spx.controller.decide.observation`), :mod:`~spx.controller.decide.results`, :mod:`~spx.controller.decide.conditions`
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
