"""Print what the pad-free shard saves against vLLM's sp_shard, per point, of a kernel sweep's result.json.

    python benchmarks/pad_free_table.py RESULT.json [--layers 40] [--text]

Markdown by default (per point: the three candidates' medians, what pad-free saves per layer and per
prefill chunk, the speed-ups; then the threshold each allows: :mod:`spx.analysis.pad_free`); ``--text``
prints the plain-text lines a report would show. Exits 3 when the document carries no pad-free candidate.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from spx.analysis.pad_free import describe_pad_free, markdown_pad_free, pad_free_summary
from spx.api import KernelResult


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("result", type=Path)
    parser.add_argument("--layers", type=int, default=40, help="layers a prefill chunk passes (DeepSeek-V4.1: 40)")
    parser.add_argument("--text", action="store_true", help="plain text instead of Markdown")
    args = parser.parse_args(argv)
    summary = pad_free_summary(KernelResult.model_validate_json(args.result.read_text()), args.layers)
    if summary is None:
        print(f"{args.result}: no point carries the pad-free candidate (written before it); re-run the sweep",
              file=sys.stderr)
        return 3
    print("\n".join(describe_pad_free(summary) if args.text else markdown_pad_free(summary)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
