"""Power of the one-server step A/B: a Monte Carlo through the real analysis code (``spx.analysis.step``).

Each simulated run is a synthetic ``step-result.json`` (:class:`spx.api.step.StepResult`): the default curve
(:func:`spx.analysis.step.default_lengths` for T = 2048, TP 8, max_num_batched_tokens 8192: 8 lengths), every
arm once per length per round in a seeded random order, each request's latency

    base(L) + round drift + arm effect + N(0, noise) [+ interference]

with ``base(L) = 20 ms + 0.01 ms × L``, a drift shared by a round (N(0, 2 ms), which pairing cancels), the
split's effect the same at every length (so the expectation over the batch mix equals it), the A/A's 0 and
the positive control's ``positiveControlMs``; *interference* (a loaded host) adds 10…100 ms (uniform) to a
given share of requests. The runner's loop is replayed: ``stop_reason`` after ``minRounds`` rounds and every
``lookEvery`` rounds, then ``summarize`` on the rounds done. Per scenario it counts:

- **resolved**: the run stopped with the gated interval (the split's expectation from T) clear of
  ±indifferenceMs on the true side (a gain below −δ, a loss above +δ); for a null effect, **false** counts
  runs whose gated interval excludes 0 (a declared gain or loss);
- **point at T**: the split's point at 2048 tokens alone clear of ±δ on the true side (the old single-length view);
- **PC** / **A/A**: the calibration passed (positive control recovered, the A/A reaches 0, each within ±δ);
- **usable**: the step may decide (every check of ``StepStatus.usable``);
- **rounds**: the mean rounds run.

    python benchmarks/step_power.py [--sims 100] [--mean-sims N] [--jobs 2] [--out PATH]

Pure CPU, no GPU: the timings are synthetic by construction; the analysis is the shipped one.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from spx.analysis.step import arms, default_lengths, stop_reason, summarize
from spx.api.step import StepRequest, StepResult, StepServerInfo, StepSpec, StepStatistic, StepSwitch

T, TP, MAX_BATCHED, LAYERS = 2048, 8, 8192, 40


@dataclass(frozen=True)
class Scenario:
    """One row of the table: the split's true effect (ms per step), the noise and the budget."""

    name: str
    effect_ms: float
    noise_ms: float = 1.0
    interference: float = 0.0
    statistic: StepStatistic = "median"
    rounds: int = 200
    min_rounds: int = 40
    look_every: int = 40


def synthetic_result(sc: Scenario, seed: int, *, rounds: int | None = None, spec: StepSpec | None = None,
                     lengths: Sequence[int] | None = None, arm_effects: dict[str, float] | None = None) -> StepResult:
    """A complete synthetic step result of ``rounds`` rounds (default ``sc.rounds``), every request confirmed.

    Latency model: module docstring; ``arm_effects`` overrides an arm's true effect (ms; e.g. a positive
    control that delays more than it was asked to). Deterministic for ``seed``.
    """
    spec = spec or StepSpec(rounds=sc.rounds, min_rounds=sc.min_rounds, look_every=sc.look_every,
                            statistic=sc.statistic, seed=seed, layers=LAYERS, pad_free=False)
    lens = list(lengths or default_lengths(T, TP, MAX_BATCHED))
    arm_list = arms(spec)
    extra = {"replicated": 0.0, "split": sc.effect_ms, "pad-free": sc.effect_ms, "aa": 0.0,
             "positive-control": spec.positive_control_ms, **(arm_effects or {})}
    rng = random.Random(seed)
    reqs: list[StepRequest] = []
    switches: list[StepSwitch] = []
    clock = 1.0e9
    for rnd in range(rounds if rounds is not None else sc.rounds):
        drift = rng.gauss(0.0, 2.0)
        plan = [(a, n) for n in lens for a in arm_list]
        rng.shuffle(plan)
        for order, (arm, n) in enumerate(plan):
            ms = 20.0 + 0.01 * n + drift + extra[arm] + rng.gauss(0.0, sc.noise_ms)
            if sc.interference and rng.random() < sc.interference:
                ms += rng.uniform(10.0, 100.0)
            threshold = n if arm in ("split", "pad-free") else n + 1 if arm == "aa" else 2**31 - 1
            switches.append(StepSwitch(at=clock, arm=arm, threshold=threshold, workers=TP, confirmed=True,
                                       inject_ms=spec.positive_control_ms if arm == "positive-control" else 0.0))
            splits = arm in ("split", "pad-free")
            reqs.append(StepRequest(round=rnd, order=order, arm=arm, length=n, sent_at=clock + 0.001, prompt_tokens=n,
                                    latency_ms=max(ms, 0.1), split_forwards=[1 if splits else 0] * TP,
                                    forward_tokens=[[n]] * TP, confirmed=True))
            clock += 0.5
    done = rounds if rounds is not None else sc.rounds
    return StepResult(step=spec, tensor_parallel_size=TP, max_num_batched_tokens=MAX_BATCHED, gate_threshold_tokens=T,
                      thresholds=[T], lengths=lens, arms=arm_list, device="cuda",
                      server=StepServerInfo(workers=TP, extension_confirmed=True), switches=switches, requests=reqs,
                      rounds_planned=sc.rounds, rounds_done=done, complete=True)


def replay(full: StepResult) -> tuple[StepResult, str]:
    """The runner's loop on ``full``'s rounds: the prefix at which :func:`stop_reason` stops, and why."""
    spec = full.step
    n = spec.min_rounds
    while True:
        n = min(n, spec.rounds)
        part = full.model_copy(update={"requests": [r for r in full.requests if r.round < n],
                                       "switches": full.switches[: sum(1 for r in full.requests if r.round < n)],
                                       "rounds_done": n})
        why = stop_reason(part, elapsed_seconds=float(n))
        if why is not None:
            return part.model_copy(update={"stopped_because": why}), why
        n += spec.look_every


def one_run(args: tuple[Scenario, int]) -> dict[str, float]:
    """One simulated run of a scenario: the counts of the table (module docstring)."""
    sc, seed = args
    part, why = replay(synthetic_result(sc, seed))
    st = summarize(part, allow_cpu_timings=False)
    band = part.step.indifference_ms
    gated = st.expectations[0]
    point = next(p for p in st.points if p.arm == "split" and p.length == T)
    checks = {c.arm: c.passed for c in st.calibration}

    def clear(low: float, high: float) -> bool:
        return high < -band if sc.effect_ms < 0 else low > band if sc.effect_ms > 0 else False

    return {"resolved": float(why.startswith("resolved") and clear(gated.effect_low_ms, gated.effect_high_ms)),
            "false": float(gated.outcome != "indifferent" and (sc.effect_ms == 0 or
                                                               (gated.outcome == "gain") != (sc.effect_ms < 0))),
            "point": float(clear(point.effect_low_ms, point.effect_high_ms)),
            "pc": float(checks.get("positive-control", False)), "aa": float(checks.get("aa", False)),
            "usable": float(st.usable), "rounds": float(part.rounds_done)}


SCENARIOS = [
    Scenario("gain −0.8 ms, 1 ms noise", -0.8),
    Scenario("gain −0.8 ms, 1 ms noise + 30 % interference", -0.8, interference=0.3),
    Scenario("loss +0.8 ms, 1 ms noise + 30 % interference", +0.8, interference=0.3),
    Scenario("null 0 ms, 1 ms noise", 0.0),
    Scenario("null 0 ms, 1 ms noise + 30 % interference", 0.0, interference=0.3),
]


def table(rows: Sequence[tuple[Scenario, dict[str, float]]]) -> str:
    """The markdown table of the scenarios' rates (percent), mean rounds and runs per row."""
    head = ("| scenario | statistic | budget (min/every/max rounds) | resolved | false gain/loss | point at T "
            "resolved | PC recovered | A/A passed | usable | mean rounds | runs |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|\n")
    lines = []
    for sc, r in rows:
        lines.append(f"| {sc.name} | {sc.statistic} | {sc.min_rounds}/{sc.look_every}/{sc.rounds} | "
                     f"{r['resolved']:.0%} | {r['false']:.0%} | {r['point']:.0%} | {r['pc']:.0%} | {r['aa']:.0%} | "
                     f"{r['usable']:.0%} | {r['rounds']:.0f} | {r['n']:.0f} |")
    return head + "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Run every scenario (both statistics) and print / write the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sims", type=int, default=100)
    ap.add_argument("--mean-sims", type=int, default=None, help="runs per row with the mean (default: --sims)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--statistics", default="median,mean")
    ap.add_argument("--mean-rows", default="0,1,4", help="SCENARIOS indices also run with the mean")
    ap.add_argument("--rounds", type=int, default=None, help="override every scenario's budget (most rounds)")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    t0 = time.monotonic()
    rows = []
    mean_rows = {int(i) for i in a.mean_rows.split(",") if i}
    scenarios = [replace(sc, statistic=s, **({"rounds": a.rounds} if a.rounds else {}))  # type: ignore[arg-type]
                 for s in a.statistics.split(",") for i, sc in enumerate(SCENARIOS) if s != "mean" or i in mean_rows]
    with ProcessPoolExecutor(max_workers=a.jobs) as ex:
        for sc in scenarios:
            sims = a.mean_sims if sc.statistic == "mean" and a.mean_sims else a.sims
            runs = list(ex.map(one_run, [(sc, seed) for seed in range(sims)], chunksize=2))
            rows.append((sc, {k: sum(r[k] for r in runs) / len(runs) for k in runs[0]} | {"n": float(len(runs))}))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    out = table(rows) + f"\nCommand: `python benchmarks/step_power.py {' '.join(argv or sys.argv[1:])}` " \
                                 f"({time.monotonic() - t0:.0f} s).\n"
    print(out)
    if a.out is not None:
        a.out.write_text(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
