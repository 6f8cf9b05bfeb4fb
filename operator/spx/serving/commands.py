"""The argv and environment of ``vllm serve`` and ``vllm bench serve`` for one arm / point. Pure.

The seed PR's protocol (the H20 serving table, ``tests/data/h20_tp8_serving.csv``), one
``vllm bench serve`` per point::

    vllm bench serve --backend openai --endpoint /v1/completions --dataset-name random
      --random-input-len ISL --random-output-len OSL --random-range-ratio 0 --ignore-eos
      --max-concurrency C --num-prompts N --num-warmups C --seed 1

Every deviation comes from an explicit ``spec.serving`` field (``backend``, ``endpoint``, ``seed``,
``numWarmups``, ``extraBenchArgs``) and is listed in the result's ``protocolDeviations``
(:func:`spx.analysis.serving.protocol_deviations`). spx adds only flags that change what is written,
not what is measured: ``--percentile-metrics``, ``--metric-percentiles``, ``--disable-tqdm`` and
``--save-result --result-dir … --result-filename <point>.json``. The flag names are those of
``vllm/benchmarks/serve.py`` (checked against the real parser in ``tests/real_vllm/test_cli_args.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from spx import vocabulary
from spx.analysis.serving import arm_threshold
from spx.api.serving import ServingArmSpec, ServingPointSpec, ServingSpec
from spx.api.spec import ExperimentSpec

#: Read by the spx vLLM plugin (``spx.vllm_ext.plugin``) in every server process.
ENV_THRESHOLD = vocabulary.PLUGIN_ENV_THRESHOLD
#: The arm's name, for the server's own logs.
ENV_ARM = vocabulary.ARM_ENV
#: The plugin's entry-point name (``[project.entry-points."vllm.general_plugins"]`` in pyproject.toml).
PLUGIN_NAME = vocabulary.PLUGIN_ENTRY_POINT_NAME
_TP_FLAGS = ("--tensor-parallel-size", "-tp")


def has_flag(args: Sequence[str], flags: Sequence[str]) -> bool:
    """Whether ``args`` holds one of ``flags``, as ``--flag value`` or ``--flag=value``."""
    return any(a in flags or any(a.startswith(f + "=") for f in flags) for a in args)


def serving_of(spec: ExperimentSpec) -> ServingSpec:
    """``spec.serving``.

    Raises:
        ValueError: it is not set.
    """
    if spec.serving is None:
        raise ValueError("spec.serving is not set: the serving runner needs the model and server settings")
    return spec.serving


def server_command(spec: ExperimentSpec, vllm: Sequence[str]) -> list[str]:
    """``vllm serve`` argv of an arm (identical for every arm: only the environment differs).

    ``vllm``: the argv prefix of the vLLM CLI (e.g. ``["vllm"]``).
    """
    s = serving_of(spec)
    argv = [*vllm, "serve", s.model_path or s.model, "--host", s.host, "--port", str(s.port), "--seed", str(s.seed)]
    if not has_flag(s.extra_args, _TP_FLAGS):
        argv += ["--tensor-parallel-size", str(spec.parallelism.tensor_parallel_size)]
    if s.model_path is not None or s.served_model_name is not None:
        argv += ["--served-model-name", s.api_model_name]
    if s.revision is not None and s.model_path is None:
        argv += ["--revision", s.revision]
    return argv + list(s.extra_args)


def warmups(s: ServingSpec, point: ServingPointSpec) -> int:
    """``--num-warmups`` of a point: ``spec.serving.numWarmups``, else the point's concurrency (the seed's)."""
    return point.concurrency if s.num_warmups is None else s.num_warmups


def bench_command(s: ServingSpec, point: ServingPointSpec, vllm: Sequence[str], result_dir: Path) -> list[str]:
    """``vllm bench serve`` argv of one point: the seed's protocol, then ``--save-result`` into ``result_dir``."""
    argv = [
        *vllm, "bench", "serve",
        "--backend", s.backend, "--endpoint", s.endpoint,
        "--host", s.host, "--port", str(s.port), "--model", s.api_model_name,
    ]
    if s.model_path is not None:
        argv += ["--tokenizer", s.model_path]
    argv += [
        "--dataset-name", "random",
        "--random-input-len", str(point.input_len),
        "--random-output-len", str(point.output_len),
        "--random-range-ratio", "0",
        "--ignore-eos",
        "--max-concurrency", str(point.concurrency),
        "--num-prompts", str(point.num_prompts),
        "--num-warmups", str(warmups(s, point)),
        "--seed", str(s.seed),
        "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,99",
        "--disable-tqdm",
        "--save-result",
        "--result-dir", str(result_dir),
        "--result-filename", f"{point.name}.json",
    ]
    return argv + list(s.extra_bench_args)


def server_env(spec: ExperimentSpec, arm: ServingArmSpec, base: Mapping[str, str]) -> dict[str, str]:
    """The arm's server environment: ``base`` + ``serving.env`` + the threshold and the arm's name.

    If ``VLLM_PLUGINS`` restricts vLLM's plugins, the spx plugin is added to it (otherwise the
    threshold would silently not apply).
    """
    s = serving_of(spec)
    env = dict(base)
    env.update(s.env)
    env[ENV_THRESHOLD] = arm_threshold(arm, spec.gate.threshold_tokens)
    env[ENV_ARM] = arm.name
    plugins = env.get("VLLM_PLUGINS")
    if plugins is not None and PLUGIN_NAME not in [p.strip() for p in plugins.split(",")]:
        env["VLLM_PLUGINS"] = ",".join([p for p in plugins.split(",") if p.strip()] + [PLUGIN_NAME])
    return env
