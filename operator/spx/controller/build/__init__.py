"""The controller's pure object builders: what the operator creates, as plain manifests (dicts).

:mod:`~spx.controller.build.manifests` (the bench Job, over :mod:`~spx.controller.build.naming`,
:mod:`~spx.controller.build.placement` and :mod:`~spx.controller.build.pod_security`) and
:mod:`~spx.controller.build.result_configmap`. Deterministic and bounded (names fit Kubernetes' limits),
table-tested in ``tests/unit/controller/build/``; no kopf, aiohttp or API client, and no import of the
decision step (:mod:`spx.controller.decide`) or of the controller's effect modules.
"""
