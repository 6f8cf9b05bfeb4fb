"""Noise before verdict, failure causes and protocol deviations (spx.analysis.serving), and the seed's
``vllm bench serve`` argv (spx.serving.commands), on the seed's own serving table."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from spx.analysis.serving import error_excerpt, gate_reasons, protocol_deviations, spread_pct, summarize_point
from spx.api.serving import ServingArmValue, ServingGateSpec, ServingPointSpec, ServingSpec, seed_points
from spx.api.spec import ExperimentSpec
from spx.serving.commands import bench_command, server_command

CSV = Path(__file__).resolve().parents[1] / "data" / "h20_tp8_serving.csv"
COLUMNS = [("B1", "split", "split_b1"), ("A1", "main", "main_a1"), ("A2", "main", "main_a2"), ("B2", "split", "split_b2")]


def _row(point: str) -> dict[str, str]:
    with open(CSV, newline="") as f:
        return next(r for r in csv.DictReader(f) if r["point"] == point)


def _values(b1: float | None, a1: float | None, a2: float | None, b2: float | None) -> list[ServingArmValue]:
    return [ServingArmValue(arm=a, variant=v, value=x)  # type: ignore[arg-type]
            for (a, v, _), x in zip(COLUMNS, (b1, a1, a2, b2), strict=True)]


# (point, within-kind spread %, between-kind change %, decided by the gate?) from the seed's table
SEED_TABLE = [
    ("ttft_8k_c1", 0.812, -4.20, True),  # split 1066.5 vs 1075.2
    ("ttft_32k_c1", 0.521, -4.97, True),  # main 4535.6 vs 4559.3
    ("ttft_128k_c1", 0.276, -4.23, True),
    ("8k_in_1k_out_c16", 0.166, 3.24, True),
    ("8k_in_1k_out_c64", 0.070, 4.16, True),
    ("1k_in_1k_out_c64", 0.239, 1.35, True),
    ("1k_in_1k_out_c1", 1.161, 0.25, False),  # B1 338.0 vs B2 334.1: two servers of one kind differ more
]


@pytest.mark.parametrize(("point", "spread", "change", "decided"), SEED_TABLE)
def test_within_kind_spread_before_the_change_on_the_seed_table(
    point: str, spread: float, change: float, decided: bool
) -> None:
    row = _row(point)
    values = _values(*(float(row[c]) for _, _, c in COLUMNS))
    status = summarize_point(point, row["metric"], values, ServingGateSpec())  # type: ignore[arg-type]
    assert status.within_kind_pct == pytest.approx(spread, abs=0.001)
    assert status.change_pct == pytest.approx(change, abs=0.01)
    assert (status.passed is not None) is decided
    if decided:
        assert status.passed is True  # the seed's points pass the default ±1 % gate


def test_the_seed_table_is_inconclusive_because_of_its_1k_c1_row_and_says_both_numbers() -> None:
    with open(CSV, newline="") as f:
        rows = list(csv.DictReader(f))
    points = [summarize_point(r["point"], r["metric"], _values(*(float(r[c]) for _, _, c in COLUMNS)),  # type: ignore[arg-type]
                              ServingGateSpec()) for r in rows]
    passed, reasons = gate_reasons(points, ServingGateSpec())
    assert passed is None
    (noisy,) = [r for r in reasons if "inconclusive" in r]
    assert noisy.startswith("1k_in_1k_out_c1: inconclusive: arms of the same kind differ by 1.16%")
    assert "+0.25% output_throughput change" in noisy


def test_the_noisy_cpu_run_is_inconclusive_not_fail() -> None:
    # issue 17's run on a loaded 2-core machine: one arm read 19.8 tok/s against 135-187 for the others
    values = _values(135.2, 187.0, 151.6, 19.8)
    status = summarize_point("tiny_c2", "output_throughput", values, ServingGateSpec())
    assert status.change_pct == pytest.approx(((135.2 + 19.8) / 2 - (187.0 + 151.6) / 2) / ((187.0 + 151.6) / 2) * 100)
    assert status.change_pct < -50  # the old gate said Fail
    assert status.within_kind_pct == pytest.approx((135.2 - 19.8) / 77.5 * 100)
    assert status.passed is None
    passed, reasons = gate_reasons([status], ServingGateSpec())
    assert passed is None and "inconclusive" in reasons[0] and "148.90%" in reasons[0]


def test_a_real_change_beyond_the_noise_still_fails() -> None:
    status = summarize_point("p", "output_throughput", _values(90.0, 100.0, 100.5, 90.4), ServingGateSpec())
    assert status.within_kind_pct == pytest.approx(0.5 / 100.25 * 100)
    assert gate_reasons([status], ServingGateSpec())[0] is False


@pytest.mark.parametrize(
    ("values", "expected"),
    [([], None), ([5.0], None), ([100.0, 100.0], 0.0), ([338.0, 334.1], 3.9 / 336.05 * 100), ([0.0, 0.0], None)],
)
def test_spread_pct(values: list[float], expected: float | None) -> None:
    got = spread_pct(values)
    assert got == (None if expected is None else pytest.approx(expected))


def test_two_arms_have_no_noise_estimate_and_decide_nothing() -> None:
    values = [ServingArmValue(arm="B1", variant="split", value=101.0), ServingArmValue(arm="A1", variant="main", value=100.0)]
    status = summarize_point("p", "output_throughput", values, ServingGateSpec())
    assert status.within_kind_pct is None and status.passed is None
    passed, reasons = gate_reasons([status], ServingGateSpec())
    assert passed is None and "no noise estimate" in reasons[0]


# --------------------------------------------------------------------------- failures say why

PLUGIN_LOG = """\
# spx: 2026-12-01T22:00:00Z starting: vllm serve /m --host 127.0.0.1 --port 8000
INFO 12-01 22:00:05 [__init__.py:43] Available plugins for group vllm.general_plugins:
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/spx/vllm_ext/plugin.py", line 110, in apply
    module = importlib.import_module(target)
ModuleNotFoundError: No module named 'vllm.models.deepseek_v41'

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/venv/bin/vllm", line 8, in <module>
spx.vllm_ext.plugin.ThresholdPluginError: SPX_SHARD_FUSED_WQA_WKV_MIN_TOKENS=2048 is set but vllm.models.deepseek_v41.attention cannot be imported (ModuleNotFoundError: No module named 'vllm.models.deepseek_v41'); Refusing to start with the threshold unapplied
"""
ENGINE_LOG = """\
(EngineCore_DP0 pid=12) ERROR 12-01 22:00:09 [core.py:708] EngineCore failed to start.
(EngineCore_DP0 pid=12) ValueError: To serve at least one request with the models's max seq len (131072), (16.0 GiB KV cache is needed, which is larger than the available KV cache memory (1.0 GiB).
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""


@pytest.mark.parametrize(
    ("log", "must_contain", "last"),
    [
        (PLUGIN_LOG, ["ModuleNotFoundError", "ThresholdPluginError: SPX_SHARD_FUSED_WQA_WKV_MIN_TOKENS=2048", "Refusing"],
         "Refusing to start with the threshold unapplied"),
        (ENGINE_LOG, ["EngineCore failed to start", "KV cache is needed", "Engine core initialization failed"],
         "Failed core proc(s): {}"),
        ("INFO all good\nINFO still fine\n", None, None),
        ("", None, None),
    ],
)
def test_error_excerpt_finds_the_cause(log: str, must_contain: list[str] | None, last: str | None) -> None:
    got = error_excerpt(log)
    if must_contain is None:
        assert got is None
        return
    assert got is not None and len(got) <= 1000
    for fragment in must_contain:
        assert fragment in got
    assert last is not None and got.endswith(last)


def test_error_excerpt_is_bounded() -> None:
    log = "\n".join(f"RuntimeError: {'x' * 900} {i}" for i in range(10))
    got = error_excerpt(log, limit=300)
    assert got is not None and len(got) == 300 and got.endswith("…")


# --------------------------------------------------------------------------- the seed's protocol


def _exp(**serving: object) -> ExperimentSpec:
    return ExperimentSpec.model_validate({"serving": {"model": "m", **serving}, "timeoutSeconds": 14400})


def test_defaults_are_the_seeds_protocol_and_deviate_in_nothing() -> None:
    spec = _exp()
    assert spec.serving is not None
    assert protocol_deviations(spec.serving) == []
    point = next(p for p in spec.serving.points if p.name == "8k_in_1k_out_c16")
    argv = bench_command(spec.serving, point, ["vllm"], Path("/r"))
    seed = ("vllm bench serve --backend openai --endpoint /v1/completions --host 127.0.0.1 --port 8000 --model m "
            "--dataset-name random --random-input-len 8192 --random-output-len 1024 --random-range-ratio 0 --ignore-eos "
            "--max-concurrency 16 --num-prompts 64 --num-warmups 16 --seed 1")
    assert " ".join(argv).startswith(seed)
    # spx adds only output flags after the seed's
    assert argv[len(seed.split()):] == ["--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
                                        "--disable-tqdm", "--save-result", "--result-dir", "/r",
                                        "--result-filename", "8k_in_1k_out_c16.json"]
    assert "--request-rate" not in argv and "--backend" in argv


@pytest.mark.parametrize(
    ("serving", "fragment"),
    [
        ({"backend": "vllm"}, "backend vllm (the seed's: openai)"),
        ({"endpoint": "/v1/chat/completions"}, "endpoint /v1/chat/completions"),
        ({"seed": 0}, "seed 0 (the seed's: 1)"),
        ({"numWarmups": 0}, "numWarmups 0"),
        ({"extraBenchArgs": ["--request-rate", "4"]}, "extraBenchArgs --request-rate 4"),
        ({"arms": [{"name": "A1", "variant": "main"}, {"name": "B1", "variant": "split"}]}, "arms A1:main B1:split"),
        ({"points": [{"name": "p", "inputLen": 64, "outputLen": 8, "concurrency": 2, "numPrompts": 4,
                      "metric": "output_throughput"}]}, "points p (the seed's: ttft_8k_c1"),
    ],
)
def test_every_deviation_is_named(serving: dict[str, object], fragment: str) -> None:
    spec = _exp(**serving)
    assert spec.serving is not None
    (line,) = protocol_deviations(spec.serving)
    assert fragment in line


def test_explicit_fields_change_the_argv() -> None:
    s = ServingSpec(model="m", backend="vllm", endpoint="/v1/chat/completions", seed=7, num_warmups=0)
    point = ServingPointSpec(name="p", input_len=64, output_len=8, concurrency=2, num_prompts=4, metric="ttft")
    argv = bench_command(s, point, ["vllm"], Path("/r"))
    pairs = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--")}
    assert (pairs["--backend"], pairs["--endpoint"], pairs["--seed"], pairs["--num-warmups"]) == (
        "vllm", "/v1/chat/completions", "7", "0")


def test_seed_points_are_the_v41_examples() -> None:
    from spx.api.loading import load_experiment

    example = Path(__file__).resolve().parents[2] / "examples" / "deepseek-v41-tp8.yaml"
    spec = load_experiment(example.read_text()).spec
    assert spec.serving is not None and spec.accuracy is not None
    assert spec.serving.points == seed_points()
    assert protocol_deviations(spec.serving) == []
    assert [(p.name, p.input_len, p.output_len, p.concurrency) for p in spec.serving.points] == [
        ("ttft_8k_c1", 8192, 1, 1), ("ttft_32k_c1", 32768, 1, 1), ("ttft_128k_c1", 131072, 1, 1),
        ("8k_in_1k_out_c16", 8192, 1024, 16), ("8k_in_1k_out_c64", 8192, 1024, 64),
        ("1k_in_1k_out_c64", 1024, 1024, 64), ("1k_in_1k_out_c1", 1024, 1024, 1),
    ]
    a = spec.accuracy
    assert (a.num_fewshot, a.max_tokens, a.concurrency, a.seed, a.temperature, a.chat_template_kwargs, a.dataset_path) == (
        5, 1024, 32, 123, 0.0, {"thinking": False}, None)
    assert "--seed" in server_command(spec, ["vllm"])
