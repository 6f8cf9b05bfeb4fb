"""The crossover series carry the fingerprint the crossover-shift alert compares runs by."""

from prometheus_client.parser import text_string_to_metric_families

from spx.controller import metrics


def test_crossover_and_threshold_carry_gpu_driver_and_vllm():
    metrics.reset()
    status = {
        "phase": "Succeeded",
        "environment": {"gpu": "NVIDIA H200", "driver": "580.159.04", "vllm": "0.33.0"},
        "kernel": {"crossoverTokens": 1629.3, "recommendedThresholdTokens": 2048, "points": []},
    }
    metrics.observe_experiment("ml", "h200-a", status)
    families = {f.name: f for f in text_string_to_metric_families(metrics.exposition().decode())}
    for name, value in (("spx_crossover_tokens", 1629.3), ("spx_recommended_threshold_tokens", 2048.0)):
        (sample,) = families[name].samples
        assert sample.labels == {"namespace": "ml", "experiment": "h200-a", "gpu": "NVIDIA H200",
                                 "driver": "580.159.04", "vllm": "0.33.0"}
        assert sample.value == value
    metrics.forget_experiment("ml", "h200-a")
    families = {f.name: f for f in text_string_to_metric_families(metrics.exposition().decode())}
    assert not families["spx_crossover_tokens"].samples
    metrics.reset()
