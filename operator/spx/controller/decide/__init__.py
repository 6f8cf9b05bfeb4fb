"""The controller's pure decision step: observe → conclude → decide, as kopf keeps ``_core/intents``.

Nothing here awaits, reads a clock, logs or touches the network (the import contract in ``pyproject.toml``
forbids kopf, aiohttp, the API client and the controller's effect modules); every module is table-tested
in ``tests/unit/controller/decide/``. The controller's top level (:mod:`spx.controller.reactor`,
:mod:`spx.controller.reconciler`, :mod:`spx.controller.writes`, ...) carries the decisions out.

- :mod:`~spx.controller.decide.conclusion` — ``conclude(Observed) -> Plan`` (its data in
  :mod:`~spx.controller.decide.decision`, the terminal step in :mod:`~spx.controller.decide.finish`);
- :mod:`~spx.controller.decide.pod_outcome` — a Job and its pods classified, over
  :mod:`~spx.controller.decide.job_status`, :mod:`~spx.controller.decide.pod_startup`,
  :mod:`~spx.controller.decide.pod_disruption`, :mod:`~spx.controller.decide.pod_exit` (types in
  :mod:`~spx.controller.decide.observation`);
- :mod:`~spx.controller.decide.results` (the pod's outputs), :mod:`~spx.controller.decide.conditions`
  (status and conditions), :mod:`~spx.controller.decide.admission` (the concurrency limit),
  :mod:`~spx.controller.decide.retention`, :mod:`~spx.controller.decide.crd_check`;
- :mod:`~spx.controller.decide.objects` (metadata and ownership of Kubernetes objects) and
  :mod:`~spx.controller.decide.store` (the reactor's in-memory mirror: plain data, no I/O).

It imports the object builders (:mod:`spx.controller.manifests`), never the reverse.
"""
