"""spx.controller.manifests.result_configmap: the result ConfigMap keeps a run's outputs within 1 MiB and is owned."""

from __future__ import annotations

import json

from spx.api import KernelResult, validate_spec
from spx.controller.manifests import result_configmap as rcm

UID = "0b7e3c1e-5f0a-4c4e-9a55-1d2f3e4a5b6c"


def _result(samples: int = 5, tokens: tuple[int, ...] = (8, 128)) -> dict:
    def cand(v: float) -> dict:
        return {"samplesUs": [v] * samples, "medianUs": v, "q1Us": v, "q3Us": v, "iqrPct": 0.0}

    doc = {
        "spec": validate_spec({"sweep": {"tokens": list(tokens)}, "parallelism": {"tensorParallelSize": 2}}).to_wire(),
        "worldSize": 2, "gemmBackend": "torch-bf16",
        "gatherBackend": "gloo", "gatherSource": "measured", "timer": "host", "device": "cpu", "cudaGraphs": False,
        "points": [{"tokens": t, "paddedTokens": t, "rowsPerRank": t // 2, "replicated": cand(10.0), "split": cand(8.0),
                    "gatherSource": "measured", "maxAbsError": 0.0} for t in tokens],
    }
    return KernelResult.model_validate(doc).to_wire()


def test_configmap_keeps_everything_and_is_owned() -> None:
    result = _result()
    cm = rcm.build_result_configmap("exp", "ns", UID, 2, result=result, termination_message='{"x":1}',
                                    log="line 1\nline 2\n", problems=["termination message: bad"], pod_name="exp-g2-abcde")
    assert cm["metadata"]["name"] == "exp-g2-result"
    assert cm["metadata"]["ownerReferences"][0]["uid"] == UID
    assert json.loads(cm["data"]["result.json"]) == result
    assert cm["data"]["summary.json"] == '{"x":1}'
    assert cm["data"]["pod.log"] == "line 1\nline 2\n"
    assert cm["data"]["problems.txt"] == "termination message: bad\n"
    assert rcm.read_result_configmap(cm) == result


def test_configmap_compresses_then_slims_big_results_and_cuts_logs() -> None:
    big = _result(samples=10_000, tokens=tuple(range(8, 8 * 41, 8)))
    cm = rcm.build_result_configmap("exp", "ns", UID, 1, result=big, log="x" * 3_000_000)
    size = sum(len(v.encode()) for v in cm["data"].values()) + sum(len(v) for v in cm.get("binaryData", {}).values())
    assert size <= 1_000_000
    stored = rcm.read_result_configmap(cm)
    assert stored is not None and [p["tokens"] for p in stored["points"]] == [p["tokens"] for p in big["points"]]
    if stored["points"][0]["replicated"]["samplesUs"] == []:  # did not fit even compressed
        assert "samplesUs" in cm["data"]["problems.txt"]
    else:
        assert "result.json.gz" in cm["binaryData"]
    assert "bytes of the log left out" in cm["data"]["pod.log"]


def test_configmap_without_a_result_keeps_the_raw_outputs() -> None:
    cm = rcm.build_result_configmap("exp", "ns", UID, 1, termination_message="Traceback…", log="boom\n",
                                    problems=["pod log: no result line"])
    assert rcm.read_result_configmap(cm) is None
    assert cm["data"]["summary.json"] == "Traceback…" and cm["data"]["pod.log"] == "boom\n"


def _size(cm: dict) -> int:
    return sum(len(v.encode()) for v in cm["data"].values()) + sum(len(v) for v in (cm.get("binaryData") or {}).values())


def test_configmap_bounds_its_problems_so_the_log_is_kept_and_it_fits() -> None:
    """One problem per broken line of a long log: problems.txt is bounded (whole lines, then how many were
    left out), the log comes first, and the whole stays within the budget whatever the count."""
    log = "x" * 300_000 + "\n"
    for n in (1, 200, 20_000):
        problems = [f"pod log: a {{\"kind\": \"point\"}} line is not standard JSON: NaN; starts '{i:05d}…'" for i in range(n)]
        cm = rcm.build_result_configmap("exp", "ns", UID, 1, result=_result(), log=log, problems=problems)
        text = cm["data"]["problems.txt"]
        assert _size(cm) <= rcm.CONFIGMAP_BUDGET_BYTES and len(text.encode()) <= rcm.PROBLEMS_MAX_BYTES
        assert cm["data"]["pod.log"] == log and text.startswith(problems[0])
        kept = text.splitlines()
        if n == 20_000:
            assert kept[-1] == f"… {n - (len(kept) - 1)} more problem line(s) left out to fit the ConfigMap"
            assert kept[:-1] == problems[: len(kept) - 1]
        else:
            assert kept == problems
