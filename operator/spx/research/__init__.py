"""Research code apart from the runtime, as :mod:`spx.tools` stands apart: what the committed
measurements of ``benchmarks/`` run and no runtime layer imports (import-linter contract in pyproject.toml).

- :mod:`spx.research.queue`: an eager step as a queue of host issue and in-order GPU execution (pure);
- :mod:`spx.research.step_queue`: the step effect per layer from paired step samples, and which
  per-op difference (Δg or Δh) it matches (pure);
- :mod:`spx.research.eager_step`: an eager multi-layer step on one GPU, its arms switched between steps
  (``benchmarks/eager_step.py``).
"""
