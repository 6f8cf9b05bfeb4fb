"""The controller's pure object builders: what the operator creates, as plain manifests (dicts).

:mod:`~spx.controller.manifests.job` (the bench Job, over :mod:`~spx.controller.manifests.naming`,
:mod:`~spx.controller.manifests.placement` and :mod:`~spx.controller.manifests.pod_security`) and
:mod:`~spx.controller.manifests.result_configmap`. Deterministic and bounded (names fit Kubernetes' limits),
table-tested in ``tests/unit/controller/manifests/``; no kopf, aiohttp or API client, and no import of the
decision step (:mod:`spx.controller.decide`) or of the controller's effect modules.
"""
