"""Facts behind the ``torch-fp8`` backend's design, measured on the GPU at hand (prints a table).

1. Which M ``torch._scaled_mm`` blockwise (1×128 activations × 128×128 weights) accepts, and its
   relative error against an fp32 reference of the dequantised operands.
2. The fused Triton activation quantisation equals the eager reference bit for bit (fp8 bytes and
   UE8M0 scales), pad rows included.
3. Cost at 8192 tokens (``triton.testing.do_bench``, median): eager vs fused quantisation, and the
   whole projection with each.

    python benchmarks/fp8_paths_probe.py
"""

from __future__ import annotations


def main() -> int:
    import torch
    import triton

    from spx.bench.gemm.fp8_quant import quantize_activation_1x128_fused
    from spx.bench.weights import quantize_activation_1x128, random_block_fp8_weight

    dev = torch.device("cuda", 0)
    w = random_block_fp8_weight(1792, 5120, 128, dev, torch.Generator(device=dev).manual_seed(0))
    ref_w = w.dequantize(torch.float32)
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    print("\n1. torch._scaled_mm blockwise, K=5120, N=1792")
    print(f"{'M':>6} {'accepted':>8} {'rel err':>9}  note")
    for m in (1, 6, 8, 12, 16, 48, 2048):
        x = torch.randn(m, 5120, device=dev, dtype=torch.bfloat16)
        xq, sa = quantize_activation_1x128(x)
        try:
            y = torch._scaled_mm(xq, w.weight.t(), sa, w.scale.t(), out_dtype=torch.bfloat16)
            ref = xq.float().reshape(m, 40, 128).mul(sa[:, :, None]).reshape(m, 5120) @ ref_w.t()
            print(f"{m:6d} {'yes':>8} {((y.float() - ref).norm() / ref.norm()).item():9.2e}")
        except RuntimeError as exc:
            print(f"{m:6d} {'NO':>8} {'-':>9}  {str(exc).splitlines()[0][:60]}")

    print("\n2. fused quantisation == eager reference")
    for m in (1, 6, 17, 8192):
        x = torch.randn(m, 5120, device=dev, dtype=torch.bfloat16) * 3
        x[0, :128] = 0
        q1, s1 = quantize_activation_1x128(x)
        q2, s2 = quantize_activation_1x128_fused(x)
        same = torch.equal(q1.view(torch.uint8), q2[:m].view(torch.uint8)) and torch.equal(s1, s2[:m])
        pads_zero = bool((q2[m:].float() == 0).all())
        print(f"M={m:5d}: identical={same} pad rows zero={pads_zero} scale stride={tuple(s2.stride())}")

    print("\n3. µs at 8192 tokens (do_bench median, includes launch overhead)")
    x = torch.randn(8192, 5120, device=dev, dtype=torch.bfloat16)
    wt, sb = w.weight.t(), w.scale.t()

    def bench(fn):  # type: ignore[no-untyped-def]
        return triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median") * 1e3

    lin_w = ref_w.to(torch.bfloat16)

    def eager_projection() -> torch.Tensor:
        q, sa = quantize_activation_1x128(x)
        return torch._scaled_mm(q, wt, sa, sb, out_dtype=torch.bfloat16)

    def fused_projection() -> torch.Tensor:
        q, sa = quantize_activation_1x128_fused(x)
        return torch._scaled_mm(q, wt, sa, sb, out_dtype=torch.bfloat16)

    rows = [
        ("eager quantisation", lambda: quantize_activation_1x128(x)),
        ("fused quantisation", lambda: quantize_activation_1x128_fused(x)),
        ("eager quant + scaled_mm", eager_projection),
        ("fused quant + scaled_mm", fused_projection),
        ("bf16 F.linear (dequantised W)", lambda: torch.nn.functional.linear(x, lin_w)),
    ]
    for name, fn in rows:
        print(f"{name:32} {bench(fn):9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
