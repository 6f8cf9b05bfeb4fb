"""README's "On a cluster" section, run command by command as written, with a real Helm (v4,
``scripts/get-helm.sh``) and the real kubectl against a real API server of its own (so that the release
``spx`` in ``spx-system`` meets no object another chart test created).

What cannot run here is said and stood in for, nothing else: there is no container runtime or GPU, so
the operator's pod never starts and the bench never runs. ``kubectl get -w`` is stopped after it printed
the experiment; before ``kubectl wait`` the test writes the Pass decision the operator would write (built
by the operator's own condition steps, through the /status subresource); ``spx gate`` then reads it from
the API server and exits 0.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from spx.api.status import ExperimentStatus
from spx.controller.decide import conditions as cond
from spx_testing.chart_cluster import Cluster, skip_reason, start
from spx_testing.chartlib import ROOT

NOW = "2026-12-06T00:00:00Z"


def readme_commands() -> list[str]:
    """The commands of the first bash block under "## On a cluster"."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## On a cluster\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "README's On a cluster section has no bash block"
    return [line.strip() for line in block.group(1).splitlines() if line.strip() and not line.startswith("#")]


@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    why = skip_reason()
    if why:
        pytest.skip(why)
    yield from start(tmp_path_factory.mktemp("readme-control-plane"))


def _env(cluster: Cluster) -> dict[str, str]:
    helm = os.environ.get("SPX_HELM") or shutil.which("helm") or str(ROOT / ".venv" / "bin" / "helm")
    if not Path(helm).is_file():
        pytest.skip("no helm binary: run scripts/get-helm.sh (or set SPX_HELM)")
    path = os.pathsep.join([str(Path(helm).parent), str(Path(cluster.kubectl_bin).parent),
                            str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return {**os.environ, "PATH": path, "KUBECONFIG": cluster.kubeconfig}


def _decide_pass(cluster: Cluster, namespace: str, name: str) -> None:
    """Stand-in for the operator (its pod cannot run here): the status it writes on a Pass."""
    obj = cluster.get_json("spx", name, "-n", namespace)
    gen = int(obj["metadata"]["generation"])
    status = cond.new_run(ExperimentStatus(), gen, NOW)
    status = cond.apply_transition(status, cond.decided("Pass", ["split wins at and above 2048 tokens"], "JobSucceeded",
                                                  "done"), NOW, gen)
    body = {"status": {**status.to_wire(), "verdict": "Pass"}}
    cluster.kubectl("patch", "spx", name, "-n", namespace, "--subresource=status", "--type=merge",
                    "-p", yaml.safe_dump(body))


def test_the_readme_cluster_commands_run(own_cluster: Cluster) -> None:
    commands = readme_commands()
    assert [shlex.split(c)[:2] for c in commands] == [
        ["kubectl", "create"], ["helm", "install"], ["kubectl", "apply"], ["kubectl", "get"], ["kubectl", "wait"],
        ["spx", "gate"]], commands
    env = _env(own_cluster)
    done: list[tuple[str, Any]] = []
    for command in commands:
        argv = shlex.split(command)
        if argv[:2] == ["kubectl", "get"] and "-w" in argv:
            proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    start_new_session=True)
            try:
                out, _ = proc.communicate(timeout=8)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGTERM)
                out, _ = proc.communicate(timeout=10)
            assert "deepseek-v41-fused-wqa-wkv-tp8" in out, out
            done.append((command, out))
            continue
        if argv[:2] == ["kubectl", "wait"]:
            _decide_pass(own_cluster, argv[argv.index("-n") + 1], argv[argv.index("-n") + 2].split("/", 1)[1])
        run = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, f"{command}: exit {run.returncode}\n{run.stdout}\n{run.stderr}"
        done.append((command, run.stdout))
    notes = done[1][1]
    assert "kubectl apply -n ml -f examples/deepseek-v41-tp8.yaml" in notes, notes  # NOTES name the namespace
    assert "Pass" in done[-1][1], done[-1][1]
    # the resource explains itself (the CRD's top-level schema description)
    explain = subprocess.run(["kubectl", "explain", "shardedprojectionexperiment"], env=env, capture_output=True,
                             text=True, timeout=60)
    assert explain.returncode == 0, explain.stderr
    text = " ".join(explain.stdout.split())
    assert "measures on the cluster's GPUs whether vLLM should split DeepSeek-V4.1's fused_wqa_wkv projection" in text, text
    assert "<empty>" not in text.split("FIELDS:")[0], text
