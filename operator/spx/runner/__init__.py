"""spx.runner — executors that turn an experiment into a run.

``spx.runner.local`` runs it on this host, one process per rank through torch's elastic launcher
(:func:`spx.runner.local.run_local`). Importing this package does not import torch.
"""

from spx.runner.local import LocalRunOutcome, RankFailure, RunnerError, default_nproc, run_local

__all__ = ["LocalRunOutcome", "RankFailure", "RunnerError", "default_nproc", "run_local"]
