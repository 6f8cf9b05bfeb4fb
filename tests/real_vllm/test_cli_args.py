"""spx's ``vllm serve`` and ``vllm bench serve`` argument lists (``spx.serving.commands.server_command`` /
``bench_command``) through vLLM 0.33.0's real CLI parsers (``cli_driver.py``: vLLM's ``main`` up to the
dispatch), so a flag vLLM renamed or dropped fails here, not hours into a GPU run."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from spx.api.serving import ServingPointSpec, ServingSpec
from spx.api.spec import ExperimentSpec
from spx.serving.commands import bench_command, server_command

HERE = Path(__file__).resolve().parent


def _spec(serving: dict[str, Any]) -> ExperimentSpec:
    return ExperimentSpec.model_validate({"parallelism": {"tensorParallelSize": 8}, "timeoutSeconds": 14400, "serving": serving})


HUB = _spec({
    "model": "deepseek-ai/DeepSeek-V4.1", "revision": "main", "port": 8123, "seed": 7,
    "extraArgs": ["--max-model-len", "163840", "--gpu-memory-utilization", "0.92", "--kv-cache-dtype", "fp8"],
})
LOCAL = _spec({"model": "deepseek-ai/DeepSeek-V4.1", "modelPath": "/models/DeepSeek-V4.1", "servedModelName": "v41"})
POINT = ServingPointSpec(name="8k_in_1k_out_c16", input_len=8192, output_len=1024, concurrency=16, num_prompts=64,
                         metric="output_throughput")


def _serving(spec: ExperimentSpec) -> ServingSpec:
    assert spec.serving is not None
    return spec.serving


@pytest.fixture(scope="module")
def parsed(vllm: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """What vLLM's CLI parsed for each argv (one process: vLLM's import dominates the time)."""
    result_dir = tmp_path_factory.mktemp("points")
    argvs = {
        "serve-hub": server_command(HUB, ["vllm"])[1:],
        "serve-local": server_command(LOCAL, ["vllm"])[1:],
        "bench-hub": bench_command(_serving(HUB), POINT, ["vllm"], result_dir)[1:],
        "bench-local": bench_command(_serving(LOCAL), POINT, ["vllm"], result_dir)[1:],
        "serve-bad-flag": [*server_command(HUB, ["vllm"])[1:], "--no-such-flag"],
        "bench-bad-flag": [*bench_command(_serving(HUB), POINT, ["vllm"], result_dir)[1:], "--no-such-flag"],
    }
    argv_file = tmp_path_factory.mktemp("argv") / "argvs.json"
    argv_file.write_text(json.dumps(list(argvs.values())))
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"}
    env.pop("SPX_SHARD_FUSED_WQA_WKV_MIN_TOKENS", None)
    out = subprocess.run([sys.executable, str(HERE / "cli_driver.py"), str(argv_file)], env=env, capture_output=True,
                         text=True, timeout=300, check=False)
    lines = [json.loads(line[len("SPX-CLI "):]) for line in out.stdout.splitlines() if line.startswith("SPX-CLI ")]
    assert len(lines) == len(argvs), out.stdout[-2000:] + out.stderr[-4000:]
    results = dict(zip(argvs, lines, strict=True))
    for name, r in results.items():
        r["stderr"] = out.stderr
        assert r["argv"] == argvs[name]
    return results


def test_serve_argv_from_a_hub_model(parsed: dict[str, dict[str, Any]]) -> None:
    r = parsed["serve-hub"]
    assert r["exit"] == 0, r["error"] or r["stderr"][-3000:]
    a = r["args"]
    assert (a["subparser"], a["model_tag"], a["revision"]) == ("serve", "deepseek-ai/DeepSeek-V4.1", "main")
    assert (a["host"], a["port"], a["seed"], a["tensor_parallel_size"]) == ("127.0.0.1", 8123, 7, 8)
    assert (a["max_model_len"], a["gpu_memory_utilization"], a["kv_cache_dtype"]) == (163840, 0.92, "fp8")
    assert a["served_model_name"] is None


def test_serve_argv_from_a_local_path(parsed: dict[str, dict[str, Any]]) -> None:
    r = parsed["serve-local"]
    assert r["exit"] == 0, r["error"] or r["stderr"][-3000:]
    a = r["args"]
    assert (a["model_tag"], a["served_model_name"], a["revision"]) == ("/models/DeepSeek-V4.1", ["v41"], None)
    assert (a["port"], a["tensor_parallel_size"]) == (8000, 8)


def test_bench_serve_argv_has_the_seed_prs_flags(parsed: dict[str, dict[str, Any]]) -> None:
    r = parsed["bench-hub"]
    assert r["exit"] == 0, r["error"] or r["stderr"][-3000:]
    a = r["args"]
    assert (a["subparser"], a["bench_type"], a["backend"], a["endpoint"]) == ("bench", "serve", "openai", "/v1/completions")
    assert (a["host"], a["port"], a["model"], a["tokenizer"]) == ("127.0.0.1", 8123, "deepseek-ai/DeepSeek-V4.1", None)
    # kept as text by the parser; get_samples parses it later with _parse_range_ratio (float, or JSON)
    assert (a["dataset_name"], a["random_input_len"], a["random_output_len"], a["random_range_ratio"]) == (
        "random", 8192, 1024, "0")
    assert (a["ignore_eos"], a["num_prompts"], a["max_concurrency"], a["seed"]) == (True, 64, 16, 7)
    assert a["num_warmups"] == 16  # the seed's: one warm-up per request in flight
    assert a["request_rate"] == math.inf or a["request_rate"] == "inf"  # vLLM's default; spx no longer passes it
    assert (a["percentile_metrics"], a["metric_percentiles"]) == ("ttft,tpot,itl,e2el", "50,99")
    assert (a["disable_tqdm"], a["save_result"], a["result_filename"]) == (True, True, "8k_in_1k_out_c16.json")
    assert a["result_dir"] is not None


def test_range_ratio_means_fixed_lengths_to_vllm(vllm: ModuleType) -> None:
    from vllm.benchmarks.datasets.datasets import _parse_range_ratio

    assert _parse_range_ratio("0") == 0.0


def test_bench_serve_argv_with_a_local_tokenizer(parsed: dict[str, dict[str, Any]]) -> None:
    r = parsed["bench-local"]
    assert r["exit"] == 0, r["error"] or r["stderr"][-3000:]
    assert (r["args"]["model"], r["args"]["tokenizer"]) == ("v41", "/models/DeepSeek-V4.1")


@pytest.mark.parametrize("name", ["serve-bad-flag", "bench-bad-flag"])
def test_vllms_parsers_reject_a_flag_they_do_not_know(parsed: dict[str, dict[str, Any]], name: str) -> None:
    """The check has teeth: vLLM's parser exits 2 on a flag it does not know."""
    assert parsed[name]["exit"] == 2
