"""The step A/B's rounds: which requests are usable, and the per-round paired differences against ``replicated``. Pure.

A request is usable when it answered (no error, a latency), the server counted exactly ``length`` prompt
tokens (``usage.prompt_tokens``), its forward did what its arm asked on every worker (``confirmed``), and the
switch in force when it was sent (the last one at or before ``sent_at``) was confirmed by every worker and set
this arm with a threshold that splits exactly when the arm should (``split``/``pad-free``: threshold ≤ length;
the others: threshold > length). Anything else is a measurement error: the round is unusable *for that
length* (every arm's difference at that length needs the round's ``replicated`` request; an arm's own bad
request drops only its own difference), named in the reasons, never silently used.

``requests`` holds the measured rounds only (the runner discards its warm-up rounds).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

from spx.api.step import StepArm, StepRequest, StepResult, StepSwitch

#: Named lines of unusable requests kept (the rest are counted).
MAX_NAMED = 12


@dataclass
class Problems:
    """What made requests unusable: counts per kind and the first :data:`MAX_NAMED` named lines."""

    failed: int = 0
    unconfirmed_forward: int = 0
    unconfirmed_switch: int = 0
    token_mismatch: int = 0
    named: list[str] = field(default_factory=list)
    more: int = 0

    def add(self, kind: str, line: str) -> None:
        """Count one problem of ``kind`` (an attribute name) and name it while fewer than MAX_NAMED are."""
        setattr(self, kind, getattr(self, kind) + 1)
        if len(self.named) < MAX_NAMED:
            self.named.append(line)
        else:
            self.more += 1

    def lines(self) -> list[str]:
        """The named lines, then how many more were not named."""
        return self.named + ([f"… and {self.more} more unusable requests"] if self.more else [])


def _splits(arm: StepArm) -> bool:
    return arm in ("split", "pad-free")


def _switch_in_force(switches: Sequence[StepSwitch], times: Sequence[float], sent_at: float | None) -> StepSwitch | None:
    if sent_at is None or not switches:
        return None
    i = bisect.bisect_right(times, sent_at)
    return switches[i - 1] if i else None


def _problem(req: StepRequest, switch: StepSwitch | None) -> tuple[str, str] | None:
    """``(kind, why)`` when ``req`` is unusable, else None."""
    if req.error is not None or req.latency_ms is None:
        return "failed", f"request failed: {(req.error or 'no latency')[:200]}"
    if req.prompt_tokens != req.length:
        return "token_mismatch", (f"the server counted {req.prompt_tokens} prompt tokens, not {req.length}: "
                                  "measurement error")
    if req.confirmed is not True:
        what = "did not report" if req.confirmed is None else "contradicted its arm"
        return "unconfirmed_forward", (f"the forward {what} (split forwards per worker {req.split_forwards[:8]}, "
                                       f"tokens {[t[:4] for t in req.forward_tokens[:8]]})")
    if switch is not None:
        splits = switch.threshold <= req.length
        if not switch.confirmed or switch.arm != req.arm or splits != _splits(req.arm):
            return "unconfirmed_switch", (f"the switch in force ({switch.arm}, threshold {switch.threshold}, "
                                          f"confirmed {switch.confirmed}) does not confirm this arm")
    return None


@dataclass(frozen=True)
class PairedRounds:
    """Per arm and length: round → ``latency(arm) − latency(replicated)`` in ms, usable rounds only."""

    diffs: dict[StepArm, dict[int, dict[int, float]]]
    rounds: list[int]
    """Every round number with at least one usable difference, ascending (the bootstrap's unit)."""
    problems: Problems
    above_max: list[int] = field(default_factory=list)
    """Lengths above max_num_batched_tokens that were sent anyway: never used (the deployment forms no such batch)."""


def usable_latencies(result: StepResult) -> tuple[dict[tuple[int, StepArm, int], float], Problems]:
    """``{(round, arm, length): latency_ms}`` of the usable requests, and what made the others unusable."""
    switches = sorted(result.switches, key=lambda s: s.at)
    times = [s.at for s in switches]
    good: dict[tuple[int, StepArm, int], float] = {}
    problems = Problems()
    for req in result.requests:
        bad = _problem(req, _switch_in_force(switches, times, req.sent_at))
        if bad is None:
            assert req.latency_ms is not None
            good[(req.round, req.arm, req.length)] = req.latency_ms
        else:
            problems.add(bad[0], f"{req.arm} at {req.length} tokens, round {req.round}: {bad[1]}: round not used "
                                 "for this length")
    return good, problems


def paired_rounds(result: StepResult) -> PairedRounds:
    """The per-round paired differences of every arm against ``replicated`` (module docstring); lengths above
    ``result.max_num_batched_tokens`` are left out (:attr:`PairedRounds.above_max`)."""
    good, problems = usable_latencies(result)
    diffs: dict[StepArm, dict[int, dict[int, float]]] = {}
    above = sorted({length for (_, _, length) in good if length > result.max_num_batched_tokens})
    for (rnd, arm, length), ms in good.items():
        if arm == "replicated" or length > result.max_num_batched_tokens:
            continue
        ref = good.get((rnd, "replicated", length))
        if ref is not None:
            diffs.setdefault(arm, {}).setdefault(length, {})[rnd] = ms - ref
    rounds = sorted({r for by_len in diffs.values() for by_round in by_len.values() for r in by_round})
    return PairedRounds(diffs, rounds, problems, above)
