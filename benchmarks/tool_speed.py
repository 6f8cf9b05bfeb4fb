"""Speed of the tool itself: how long `spx run` takes and how tight its measurements are.

Targets (issue "spx run"): the full DeepSeek-V4.1 TP8 sweep at 50 samples finishes in < 90 s of wall
time on one H200 after process start; IQR/median ≤ 3 % at every point of ≥ 1024 tokens; the CPU
quickstart finishes in < 60 s on a 2-core machine.

    python benchmarks/tool_speed.py                 # every row this machine can run
    python benchmarks/tool_speed.py --gpu-only [--backends humming torch-bf16]   # on the GPU box

The first Humming run includes its NVRTC kernel builds (~10 s for the first shape, cached on disk
afterwards). Prints one table row per run: experiment, backend, wall s (process start → exit), points, the worst
IQR % at ≥ 1024 tokens, and whether each target is met.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(example: str, backend: str | None, out: Path) -> tuple[float, dict, int]:
    cmd = [sys.executable, "-m", "spx", "run", str(ROOT / "examples" / example), "--out", str(out), "--overwrite"]
    if backend:
        cmd += ["--gemm-backend", backend]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
    result = json.loads((out / "result.json").read_text()) if (out / "result.json").exists() else {}
    return wall, result, proc.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu-only", action="store_true")
    ap.add_argument("--cpu-only", action="store_true")
    ap.add_argument("--out", type=Path, default=None, help="keep outputs here (default: a temp dir)")
    ap.add_argument("--backends", nargs="+", default=["humming", "torch-bf16"],
                    help="GPU rows: gemm backends of the V4.1 sweep (default: humming torch-bf16)")
    args = ap.parse_args()
    try:
        import torch

        gpu = torch.cuda.is_available()
    except ImportError:
        gpu = False
    rows = []
    if gpu and not args.cpu_only:
        rows += [("deepseek-v41-tp8.yaml", backend, 90.0) for backend in args.backends]
    if not args.gpu_only:
        rows.append(("quickstart.yaml", None, 60.0))
    base = args.out or Path(tempfile.mkdtemp(prefix="spx-speed-"))
    table = []
    for example, backend, target in rows:
        out = base / f"{Path(example).stem}-{backend or 'default'}"
        wall, result, rc = run(example, backend, out)
        points = result.get("points", [])
        big = [max(p["replicated"]["iqrPct"], p["split"]["iqrPct"]) for p in points if p["tokens"] >= 1024]
        worst = max(big) if big else float("nan")
        spread_ok = (worst <= 3.0) if big and result.get("device") == "cuda" else None
        table.append((example, backend or result.get("gemmBackend", "?"), result.get("device", "?"), rc, wall,
                      target, len(points), worst, spread_ok))
    hdr = f"{'experiment':24} {'backend':11} {'device':6} {'rc':>2} {'wall s':>7} {'target':>7} {'met':>4} {'points':>6} {'worst IQR% ≥1024':>17} {'≤3%':>5}"
    print(hdr)
    print("-" * len(hdr))
    ok = True
    for ex, be, dev, rc, wall, target, n, worst, spread_ok in table:
        met = rc == 0 and wall < target
        ok &= met and spread_ok is not False
        sp = "n/a" if spread_ok is None else ("yes" if spread_ok else "NO")
        print(f"{ex:24} {be:11} {dev:6} {rc:>2} {wall:7.1f} {target:7.0f} {'yes' if met else 'NO':>4} {n:6d} {worst:17.2f} {sp:>5}")
    print(f"\noutputs under {base}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
