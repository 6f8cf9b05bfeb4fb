"""The crossover series carry the fingerprint the crossover-shift alert compares runs by."""

from prometheus_client.parser import text_string_to_metric_families

from spx.controller import metrics


def test_crossover_and_threshold_carry_gpu_driver_and_vllm():
    """… and what else makes two crossovers comparable: GEMM backend, gather source (with the gather
    model of a modelled one), execution mode, device, TP size, projection shape and the sweep grid."""
    metrics.reset()
    status = {
        "phase": "Succeeded",
        "environment": {"gpu": "NVIDIA H200", "driver": "580.159.04", "vllm": "0.33.0", "device": "cuda"},
        "kernel": {"crossoverTokens": 1629.3, "recommendedThresholdTokens": 2048, "gemmBackend": "torch-bf16",
                   "gatherSource": "modelled", "points": [{"tokens": t, "rowsPerRank": -(-t // 8), "replicatedUs": 10.0, "splitUs": 9.0,
                                               "speedup": 10 / 9} for t in (6, 1024, 16384)]},
    }
    spec = {"kernel": {"gatherModel": {"prior": "datasheet"}}, "sweep": {"tokens": [6, 1024, 16384]}}
    metrics.observe_experiment("ml", "h200-a", status, spec=spec)
    families = {f.name: f for f in text_string_to_metric_families(metrics.exposition().decode())}
    for name, value in (("spx_crossover_tokens", 1629.3), ("spx_recommended_threshold_tokens", 2048.0)):
        (sample,) = families[name].samples
        assert sample.labels == {"namespace": "ml", "experiment": "h200-a", "gpu": "NVIDIA H200",
                                 "driver": "580.159.04", "vllm": "0.33.0", "gemm_backend": "torch-bf16",
                                 "gather_source": "modelled/datasheet", "execution_mode": "auto", "device": "cuda",
                                 "tp": "8", "projection": "5120x1280+512", "sweep": "6-16384x3"}
        assert sample.value == value
    metrics.forget_experiment("ml", "h200-a")
    families = {f.name: f for f in text_string_to_metric_families(metrics.exposition().decode())}
    assert not families["spx_crossover_tokens"].samples
    metrics.reset()
