"""The real all-gather launch where the gather is modelled: the 1-rank group, the host pass, the point's fields."""

import pytest

torch = pytest.importorskip("torch")

from spx.api import ExperimentSpec  # noqa: E402
from spx.bench.kernel import run_kernel_bench  # noqa: E402
from spx.bench.timing import TimingProtocol, bench_time  # noqa: E402


def small_spec(**kernel):
    return ExperimentSpec.model_validate({
        "projection": {"hiddenSize": 256, "outputSizes": [128, 128]},
        "parallelism": {"tensorParallelSize": 4},
        "sweep": {"tokens": [8, 37]},
        "kernel": {"device": "cpu", "samples": 5, "warmup": 1, **kernel},
    })


def test_a_single_cpu_rank_issues_a_real_gloo_launch_in_the_split_host_samples():
    result = run_kernel_bench(small_spec())
    assert result is not None and result.gather_source == "modelled"
    assert any("real all-gather launch of the shard through a 1-rank gloo group" in w for w in result.warnings)
    assert not any("gatherModel.hostUs" in w for w in result.warnings)
    for p in result.points:
        assert p.gather_source == "modelled"  # its GPU time: still the model
        assert p.gather_host_source == "measured" and p.gather_host_us is not None and p.gather_host_us > 0
        assert p.gather_host_us != small_spec().kernel.gather_model.host_us
        assert len(p.split.host_samples_us) == 5
        assert p.split.host_median_us >= p.gather_host_us  # the launch is inside each split host sample
    assert not torch.distributed.is_initialized()  # the 1-rank group is torn down with the run


def test_host_launches_replace_a_candidate_in_the_host_pass_only():
    calls = {"span": 0, "host": 0}

    def spanned():
        calls["span"] += 1
        return torch.ones(2)

    def hosted():
        calls["host"] += 1
        return torch.ones(2)

    protocol = TimingProtocol(mode="host", timer="host", samples=7, warmup=2)
    timing = bench_time({"split": spanned}, protocol, host_launches={"split": hosted})
    assert len(timing.span_us["split"]) == 7 and len(timing.host_us["split"]) == 7
    assert calls == {"span": 1 + 2 + 7, "host": 2 + 7}  # correctness run + warm-up + samples; warm-up + samples
    assert timing.host_us["split"] is not timing.span_us["split"]


def _two_ranks(rank: int, store: str) -> None:
    import torch.distributed as dist

    from spx.bench.gather_launch import build_gather_launch, one_rank_group

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        group = one_rank_group(torch.device("cpu"), rank, 2)
        assert dist.get_world_size(group) == 1 and dist.get_rank(group) == 0
        launch = build_gather_launch(group, 3, 4, torch.bfloat16, torch.device("cpu"))
        shard = torch.full((3, 4), float(rank + 1), dtype=torch.bfloat16)
        assert torch.equal(launch(shard), shard)  # its own shard only: no peer in the group
        assert len(launch.walls_us) == 1 and launch.walls_us[0] > 0
    finally:
        dist.destroy_process_group()


def test_each_of_two_gloo_ranks_gets_a_group_of_its_own(tmp_path):
    torch.multiprocessing.spawn(_two_ranks, args=(str(tmp_path / "store"),), nprocs=2, join=True)


def test_one_rank_group_refuses_several_ranks_without_a_process_group():
    from spx.bench.gather_launch import one_rank_group

    with pytest.raises(RuntimeError, match="2 ranks but no process group"):
        one_rank_group(torch.device("cpu"), 0, 2)
