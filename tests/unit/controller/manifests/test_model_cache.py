"""The bench pod sized for the real model (issue #36 req 6): the model cache is a volume the cluster names
(PVC, hostPath) or an emptyDir with a sizeLimit and a matching ephemeral-storage request; memory and
/dev/shm come from the operator's settings (chart: bench.memory, bench.shmSize)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from spx.api import validate_spec
from spx.controller.manifests import job as k8s
from spx.controller.manifests import pod_security
from spx.controller.manifests.model_cache import DEFAULT_SIZE_LIMIT, MOUNT_PATH, ModelCache
from spx.controller.settings import load_settings
from spx.vocabulary import RESERVED_MOUNT_PATHS

SERVING = {"serving": {"model": "deepseek-ai/DeepSeek-V4.1"}, "timeoutSeconds": 14400}


def _pod(spec: dict[str, Any], **options: Any) -> dict[str, Any]:
    job = k8s.build_job("v41", "bench", "uid-1", 1, validate_spec(spec), "registry.example/spx-bench:1",
                        k8s.BenchOptions(**options))
    return job["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def _container(pod: dict[str, Any]) -> dict[str, Any]:
    return pod["containers"][0]  # type: ignore[no-any-return]


def test_the_default_download_goes_to_a_sized_emptydir_with_a_matching_request() -> None:
    """Issue #36: the download went to an emptyDir without sizeLimit and without an ephemeral-storage request
    (the first pod evicted under DiskPressure)."""
    pod = _pod(SERVING)
    (volume,) = [v for v in pod["volumes"] if v["name"] == "model-cache"]
    assert volume == {"name": "model-cache", "emptyDir": {"sizeLimit": DEFAULT_SIZE_LIMIT}}
    c = _container(pod)
    assert c["resources"]["requests"]["ephemeral-storage"] == DEFAULT_SIZE_LIMIT == c["resources"]["limits"]["ephemeral-storage"]
    assert {"name": "HF_HOME", "value": MOUNT_PATH} in c["env"]
    assert {"name": "model-cache", "mountPath": MOUNT_PATH, "readOnly": False} in c["volumeMounts"]
    assert any(MOUNT_PATH.startswith(p + "/") for p in RESERVED_MOUNT_PATHS)  # no user volume can sit there
    assert not pod_security.hardening_problems(pod)


@pytest.mark.parametrize(("cache", "volume"), [
    ({"type": "persistentVolumeClaim", "claimName": "hf-cache"},
     {"name": "model-cache", "persistentVolumeClaim": {"claimName": "hf-cache", "readOnly": True}}),
    ({"type": "hostPath", "path": "/mnt/nvme/hf"},
     {"name": "model-cache", "hostPath": {"path": "/mnt/nvme/hf", "type": "Directory"}}),
], ids=["pvc", "hostPath"])
def test_an_existing_cache_is_mounted_read_only_and_offline(cache: dict[str, str], volume: dict[str, Any]) -> None:
    pod = _pod(SERVING, model_cache=ModelCache.model_validate(cache))
    assert volume in pod["volumes"]
    c = _container(pod)
    assert {"name": "model-cache", "mountPath": MOUNT_PATH, "readOnly": True} in c["volumeMounts"]
    assert {"name": "HF_HUB_OFFLINE", "value": "1"} in c["env"]  # no download, no egress needed
    assert "ephemeral-storage" not in c["resources"]["requests"]
    assert not pod_security.hardening_problems(pod)


def test_no_cache_without_serving_or_with_the_model_pvc() -> None:
    for spec in ({}, {"serving": {"model": "deepseek-ai/DeepSeek-V4.1", "modelPvc": "weights", "modelPath": "/models/v41"},
                      "timeoutSeconds": 14400}):
        pod = _pod(spec)
        assert not [v for v in pod["volumes"] if v["name"] == "model-cache"]
        assert not [e for e in _container(pod)["env"] if e["name"] == "HF_HOME"]


def test_the_experiment_s_own_values_win() -> None:
    spec = {**SERVING, "resources": {"ephemeralStorage": "2Ti", "memory": "512Gi"},
            "pod": {"env": [{"name": "HF_HOME", "value": "/data/hf"}]}}
    c = _container(_pod(spec, memory="300Gi"))
    assert c["resources"]["requests"]["ephemeral-storage"] == "2Ti" and c["resources"]["requests"]["memory"] == "512Gi"
    assert [e["value"] for e in c["env"] if e["name"] == "HF_HOME"] == ["/data/hf"]


def test_memory_and_shm_come_from_the_settings() -> None:
    settings = load_settings({"SPX_BENCH_MEMORY": "400Gi", "SPX_BENCH_SHM_SIZE": "96Gi",
                              "SPX_BENCH_MODEL_CACHE": '{"type": "emptyDir", "sizeLimit": "1Ti"}'})
    pod = _pod(SERVING, memory=settings.bench_memory, shm_size=settings.bench_shm_size,
               model_cache=settings.bench_model_cache)
    c = _container(pod)
    assert c["resources"]["requests"]["memory"] == "400Gi" and c["resources"]["requests"]["ephemeral-storage"] == "1Ti"
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "96Gi"}} in pod["volumes"]


@pytest.mark.parametrize(("value", "words"), [
    ('{"type": "persistentVolumeClaim"}', "modelCache.claimName"),
    ('{"type": "hostPath", "path": "relative/dir"}', "absolute modelCache.path"),
    ('{"type": "emptyDir", "sizeLimit": "lots"}', "modelCache.sizeLimit"),
    ('{"type": "nfs"}', "modelCache.type: Input should be 'emptyDir', 'persistentVolumeClaim' or 'hostPath'"),
])
def test_a_bad_cache_setting_is_refused_naming_the_field(value: str, words: str) -> None:
    with pytest.raises((ValueError, ValidationError), match=words):
        load_settings({"SPX_BENCH_MODEL_CACHE": value})
