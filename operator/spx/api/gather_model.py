"""``spec.kernel.gatherModel``: the modelled all-gather (when fewer GPUs than TP are present) and its priors."""

from __future__ import annotations

from typing import Final

from pydantic import Field

from spx.api.base import CamelModel, FiniteFloat
from spx.vocabulary import GatherPrior
from spx.vocabulary import GatherRegime as GatherRegime  # re-exported: the model's type

#: vLLM's custom all-gather handles shards up to 2 MiB; larger shards go to NCCL (``sp_all_gather`` in
#: ``vllm/models/common/ops/sequence_parallel.py``; the seed table's README: custom up to 4096 tokens,
#: NCCL from 6144 at N = 1792 bf16, TP8). At that shape the custom path ends at 4680 tokens (585 rows).
CUSTOM_ALL_GATHER_MAX_SHARD_BYTES: Final = 2 * 1024 * 1024

#: ``prior: datasheet``: one regime, NVLink4 datasheet figures (see :class:`GatherModelSpec`).
DATASHEET_GATHER_LATENCY_US: Final = 10.0
DATASHEET_GATHER_BUS_BANDWIDTH_GBPS: Final = 360.0

#: ``prior: h20-calibrated``: (latency µs, bus bandwidth GB/s) per regime, fitted to the all-gather
#: derived from the seed's 8× H20 table by :func:`spx.analysis.gather_prior.fit_h20_gather_prior`
#: (log-log shard GEMM interpolation; custom: least squares over its 9 points; NCCL: the line through
#: its 2 points). Rounded to 0.1 µs / 1 GB/s; ``tests/unit/test_analysis_gather_prior.py`` checks them
#: against the fit on the shipped table. Method and residuals: docs/kernel-benchmark.md "Gather prior".
H20_GATHER_PRIOR: Final[dict[GatherRegime, tuple[float, float]]] = {
    "custom": (6.1, 372.0),
    "nccl": (38.1, 370.0),
}


class GatherModelSpec(CamelModel):
    """Parameters of the modelled all-gather, used when fewer GPUs than TP are present.

    Per regime ``t_gather(M) = latency + (TP − 1)/TP · bytes(M, N) / bus_bandwidth`` (the nccl-tests
    ``busbw`` convention, NVIDIA/nccl-tests ``doc/PERFORMANCE.md``), ``bytes`` = the gathered output
    ``[M_padded, N]`` in the activation dtype. The regime is the collective vLLM runs: its custom
    all-gather while one shard ``M_padded/TP · N · dtype_bytes`` is at most
    ``custom_all_gather_max_shard_bytes`` (2 MiB; 0 = always NCCL, for a vLLM that runs without its
    custom all-gather), NCCL above.

    ``prior`` picks the parameters:

    - ``h20-calibrated`` (default): fitted per regime to the all-gather contained in the seed's
      8× H20 table (split total − shard GEMM; :mod:`spx.analysis.gather_prior`): custom 6.1 µs +
      372 GB/s, NCCL 38.1 µs + 370 GB/s (:data:`H20_GATHER_PRIOR`). H20, H100 and H200 SXM have the
      same NVLink4 (18 links, 900 GB/s bidirectional) and vLLM runs the same collectives on them.
    - ``datasheet``: one regime, 10 µs + 360 GB/s. NVIDIA's H100/H200 datasheets give 900 GB/s
      bidirectional NVLink per GPU, i.e. 450 GB/s per direction; nccl-tests all-gather on 8×H100 SXM
      typically reaches about 80% of that as bus bandwidth, hence 360 GB/s; 10 µs is the order of an
      8-rank NCCL LL-protocol all-gather of a few KiB over NVLink.

    ``latency_us`` / ``bus_bandwidth_gbps``, when given, replace that parameter in every regime of the
    prior (both given: the single formula of earlier spx versions, whatever the prior). Both priors
    are to be replaced by a fit to a measured gather sweep (``benchmarks/gather_sweep.py``).
    """

    prior: GatherPrior = "h20-calibrated"
    """Parameters when latencyUs/busBandwidthGbps are unset: h20-calibrated (default; vLLM's custom all-gather 6.1 µs + 372 GB/s up to 2 MiB per shard, NCCL 38.1 µs + 370 GB/s, fitted on the seed's 8× H20 table) or datasheet (10 µs + 360 GB/s)."""
    latency_us: FiniteFloat | None = Field(default=None, ge=0.0, le=10_000.0)
    """Fixed latency of one all-gather in µs; when set it replaces the prior's latency in every regime."""
    bus_bandwidth_gbps: FiniteFloat | None = Field(default=None, gt=0.0, le=10_000.0)
    """Bus bandwidth in GB/s (nccl-tests busbw convention); when set it replaces the prior's in every regime."""
    custom_all_gather_max_shard_bytes: int = Field(default=CUSTOM_ALL_GATHER_MAX_SHARD_BYTES, ge=0, le=1 << 40)
    """Largest shard (bytes) vLLM's custom all-gather takes (2 MiB); larger gathers use NCCL. 0: always NCCL."""
    host_us: FiniteFloat = Field(default=15.0, ge=0.0, le=10_000.0)
    """Modelled host time (µs) to issue one all-gather eagerly (only with a modelled gather; labelled modelled). Default 15 µs: the order of a whole small eager NCCL all-gather on 8x H100 (sglang bench_symm: 14-18 µs), so an upper-range guess; measure it on a multi-GPU node."""

    def regime(self, padded_tokens: int, output_size: int, dtype_bytes: int, tensor_parallel_size: int) -> GatherRegime:
        """Which collective vLLM runs for a ``[padded_tokens, output_size]`` gather over TP ranks.

        ``custom`` while one shard (``padded_tokens // TP`` rows × ``output_size`` × ``dtype_bytes``)
        is at most ``custom_all_gather_max_shard_bytes``, else ``nccl``.
        """
        shard_bytes = padded_tokens // max(1, tensor_parallel_size) * output_size * dtype_bytes
        return "custom" if shard_bytes <= self.custom_all_gather_max_shard_bytes else "nccl"

    def parameters(self, regime: GatherRegime) -> tuple[float, float]:
        """``(latency µs, bus bandwidth GB/s)`` used in ``regime``: the prior's, explicit fields overriding."""
        if self.prior == "datasheet":
            latency, bandwidth = DATASHEET_GATHER_LATENCY_US, DATASHEET_GATHER_BUS_BANDWIDTH_GBPS
        else:
            latency, bandwidth = H20_GATHER_PRIOR[regime]
        return (
            latency if self.latency_us is None else self.latency_us,
            bandwidth if self.bus_bandwidth_gbps is None else self.bus_bandwidth_gbps,
        )

    def gather_us(self, padded_tokens: int, output_size: int, dtype_bytes: int, tensor_parallel_size: int) -> float:
        """Modelled all-gather time in µs of a ``[padded_tokens, output_size]`` output over TP ranks.

        ``latency + (TP − 1)/TP · padded_tokens · output_size · dtype_bytes / bus_bandwidth`` with the
        parameters of the regime (:meth:`regime`, :meth:`parameters`); bandwidth in GB/s (10⁹ B/s).
        Zero for TP = 1 (nothing to gather).
        """
        tp = tensor_parallel_size
        if tp <= 1:
            return 0.0
        latency, bandwidth = self.parameters(self.regime(padded_tokens, output_size, dtype_bytes, tp))
        total_bytes = padded_tokens * output_size * dtype_bytes
        return latency + (tp - 1) / tp * total_bytes / (bandwidth * 1e9) * 1e6

    def describe(self) -> str:
        """One line for a result's notes: the prior and each regime's latency and bus bandwidth."""
        (lat_c, bw_c), (lat_n, bw_n) = self.parameters("custom"), self.parameters("nccl")
        source = f"{self.prior} prior"
        if self.latency_us is not None or self.bus_bandwidth_gbps is not None:
            source += " with explicit latencyUs/busBandwidthGbps"
        if (lat_c, bw_c) == (lat_n, bw_n):
            return f"{source}: {lat_n:g} µs + (TP-1)/TP x bytes / {bw_n:g} GB/s"
        return (
            f"{source}: latency + (TP-1)/TP x bytes / busBW; custom all-gather while a shard is <= "
            f"{self.custom_all_gather_max_shard_bytes} B: {lat_c:g} µs, {bw_c:g} GB/s; NCCL above: "
            f"{lat_n:g} µs, {bw_n:g} GB/s"
        )
