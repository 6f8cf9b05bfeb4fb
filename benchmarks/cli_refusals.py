"""How fast `spx validate` refuses hostile or oversized experiment files (issue 11, item 12).

    python benchmarks/cli_refusals.py            # 5 runs each, median wall time

Cases: an alias bomb (12 levels of 10 aliases: 10^12 nodes if expanded), 100,000 token counts
(689 KB, over the 256 KiB document limit), 30,000 token counts (under the limit: pydantic validates
and the message is bounded), and a valid file for the interpreter's start-up cost. Each row: the
case, file size, exit code, median wall s (process start → exit), bytes of stderr.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAD = "apiVersion: bench.spx.dev/v1alpha1\nkind: ShardedProjectionExperiment\n"


def bomb() -> str:
    text = HEAD + "metadata: {name: bomb}\nspec:\n  a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
    for i in range(1, 12):
        text += f"  a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]\n"
    return text


def tokens(n: int) -> str:
    return HEAD + f"metadata: {{name: many}}\nspec:\n  sweep:\n    tokens: [{', '.join(str(i) for i in range(1, n + 1))}]\n"


def main() -> int:
    spx = Path(sys.executable).with_name("spx")
    cases = {"alias bomb": bomb(), "100,000 token counts": tokens(100_000), "30,000 token counts": tokens(30_000),
             "valid (quickstart)": (ROOT / "examples" / "quickstart.yaml").read_text()}
    print(f"{'case':<24} {'bytes':>9} {'exit':>4} {'median s':>9} {'stderr B':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in cases.items():
            path = Path(tmp) / "exp.yaml"
            path.write_text(text)
            walls, proc = [], None
            for _ in range(5):
                t0 = time.monotonic()
                proc = subprocess.run([str(spx), "validate", str(path)], capture_output=True, text=True, timeout=300)
                walls.append(time.monotonic() - t0)
            assert proc is not None
            print(f"{name:<24} {len(text.encode()):>9,} {proc.returncode:>4} {statistics.median(walls):>9.2f} "
                  f"{len(proc.stderr.encode()):>9,}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
