"""``python -m spx.serving EXPERIMENT.yaml --out DIR [--vllm "vllm"]`` (also ``spx serving``).

Exit 0 when every measurement finished, 1 when some failed (the results are written either way),
2 on invalid input (a bad experiment file, a missing GSM8K file, a GSM8K file whose hash differs).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv``, run :func:`spx.serving.ab.run_vllm_benchmarks`; exit 0 when every measurement
    finished, 1 when some failed (the results are written either way), 3 on invalid input (spx.api.exit_codes)."""
    from spx.api.exit_codes import EXIT_FAIL, EXIT_OK, EXIT_USAGE
    from spx.api.loading import SpecError, load_experiment
    from spx.serving.ab import RunnerOptions, run_vllm_benchmarks

    parser = argparse.ArgumentParser(prog="python -m spx.serving", description="Run the vLLM serving A/B and GSM8K of an experiment.")
    parser.add_argument("experiment", type=Path)
    parser.add_argument("--out", type=Path, default=Path("spx-out"))
    parser.add_argument("--vllm", default="vllm", help="the vLLM CLI (argv prefix, split on spaces)")
    args = parser.parse_args(argv)
    try:
        exp = load_experiment(args.experiment.read_text(), str(args.experiment))
        outcome = run_vllm_benchmarks(
            exp.spec, args.out, RunnerOptions(vllm_command=args.vllm.split(), experiment=exp.metadata.name)
        )
    except (SpecError, ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    ok = all(r is None or r.complete for r in (outcome.serving, outcome.accuracy, outcome.step))
    return EXIT_OK if ok else EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())
