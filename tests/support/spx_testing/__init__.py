"""spx_testing — what the tests (and the operator benchmarks) share, importable by name because
pytest puts ``tests/support`` on ``sys.path`` (``pythonpath`` in pyproject.toml; the benchmarks add it
themselves). ``tests/`` itself is never on the path, so nothing under it can shadow an installed
package such as ``vllm``.

- :mod:`~spx_testing.factories` — kernel points, candidate statistics and results of made-up sweeps;
- :mod:`~spx_testing.controlplane`, :mod:`~spx_testing.kubeapi` — a real etcd + kube-apiserver +
  kube-controller-manager and a small client for it;
- :mod:`~spx_testing.cluster`, :mod:`~spx_testing.nodeagent`, :mod:`~spx_testing.containers`,
  :mod:`~spx_testing.faultproxy`, :mod:`~spx_testing.specs` — the operator under test, a node agent
  that runs its pods as local processes, a fault-injecting proxy, the one small CPU spec;
- :mod:`~spx_testing.chartlib`, :mod:`~spx_testing.chart_cluster` — the Helm chart rendered and installed;
- :mod:`~spx_testing.obslib` — the metrics, rules and dashboard files of the observability tests.
"""
