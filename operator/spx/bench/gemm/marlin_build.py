"""Build vLLM 0.33.0's MXFP8 Marlin GEMM (W8A16) from vLLM's own sources, for machines without vLLM.

The ``marlin`` GEMM backend (:mod:`spx.bench.gemm.marlin`) runs ``torch.ops._C.marlin_gemm`` and
``torch.ops._C.gptq_marlin_repack``. Where vLLM is installed (the bench image) those ops come from
vLLM's ``_C_stable_libtorch`` extension. Where it is not (a bare GPU box with torch and nvcc), this
module compiles the same two ops from vLLM 0.33.0's source distribution, unmodified, into a small
stable-ABI torch extension — trimmed to the one kernel family V4.1's MXFP8 linears use:

- activations and output bf16, weights ``float8_e4m3fn``, scales ``float8_e8m0fnu`` in groups of
  32 along K (``group_blocks = 2``), all thread-tile and M-block instances vLLM's generator emits for
  that type tuple (15 template instances) — vLLM's own ``generate_kernels.py`` is run, then only
  those entries of its ``kernel_selector.h`` are kept;
- ``marlin.cu`` (host dispatch, unmodified) and ``gptq_marlin_repack.cu`` (weight repack);
- compiled with vLLM's flags for this library (``TORCH_TARGET_VERSION=0x020B000000000000ULL``, i.e.
  the torch 2.11 stable ABI, ``USE_CUDA``; CMakeLists.txt of vLLM 0.33.0) for ``sm_90`` by default;
- the op schemas are vLLM's (``csrc/torch_bindings.cpp``), registered under the same ``_C``
  namespace, so the Python side calls exactly what vLLM calls.

Nothing of vLLM is copied into this repository: the sources are read from the sdist a user downloads
(``pip download --no-deps --no-binary :all: vllm==0.33.0`` fetches ``vllm-0.33.0.tar.gz``; pip's
metadata build afterwards may fail — the tarball is what is needed).

Usage::

    python -m spx.bench.gemm.marlin_build --vllm-src vllm-0.33.0.tar.gz --out build/marlin
    export SPX_MARLIN_LIB=build/marlin/spx_marlin.so

Needs torch with CUDA, nvcc, ninja and jinja2 (vLLM's generator uses it). On 16 cores the build takes
a few minutes (18 translation units).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

VLLM_VERSION = "0.33.0"
LIB_NAME = "spx_marlin"
#: The one type tuple of vLLM's generator this build keeps: MXFP8 W8A16 with bf16 activations.
KEEP_TYPES = ("vllm::kBFloat16.id()", "vllm::kFE4M3fn.id()", "vllm::kBFloat16.id()", "vllm::kFE8M0fnu.id()")
KEEP_CONDITION = ("a_type == vllm::kBFloat16", "b_type == vllm::kFE4M3fn", "c_type == vllm::kBFloat16",
                  "s_type == vllm::kFE8M0fnu")
MARLIN_DIR = "csrc/quantization/marlin"
SOURCES = ("marlin.cu", "gptq_marlin_repack.cu", "kernel.h", "marlin.cuh", "marlin_dtypes.cuh", "marlin_mma.h",
           "marlin_template.h", "dequant.h", "generate_kernels.py")
CSRC_FILES = ("csrc/torch_utils.h", "csrc/core/scalar_type.hpp")

#: The schemas of vLLM 0.33.0's csrc/torch_bindings.cpp for the two ops (same text, same namespace).
BINDINGS = r"""
#include <torch/csrc/stable/library.h>

STABLE_TORCH_LIBRARY_FRAGMENT(_C, ops) {
  ops.def(
      "marlin_gemm(Tensor a, Tensor? c_or_none, Tensor b_q_weight, "
      "Tensor? b_bias_or_none,Tensor b_scales, "
      "Tensor? a_scales, Tensor? global_scale, Tensor? b_zeros_or_none, "
      "Tensor workspace, int b_type_id, "
      "SymInt size_m, SymInt size_n, SymInt size_k, "
      "bool use_atomic_add, bool use_fp32_reduce, bool is_zp_float) -> Tensor");
  ops.def(
      "gptq_marlin_repack(Tensor b_q_weight, "
      "SymInt size_k, SymInt size_n, int num_bits, bool is_a_8bit) -> Tensor");
}
"""

_INSTANCE = re.compile(r"^template __global__ void Marlin<(.*?)>\( MARLIN_KERNEL_PARAMS \);$", re.M)


def find_source_root(vllm_src: Path, workdir: Path) -> Path:
    """The folder holding ``csrc/`` of vLLM 0.33.0: ``vllm_src`` itself, or the sdist tarball unpacked.

    Raises:
        FileNotFoundError: neither a folder with ``csrc/quantization/marlin`` nor a ``.tar.gz`` sdist.
    """
    if vllm_src.is_dir():
        for root in (vllm_src, *sorted(vllm_src.glob("vllm-*"))):
            if (root / MARLIN_DIR / "marlin.cu").exists():
                return root
    elif vllm_src.name.endswith(".tar.gz") and vllm_src.exists():
        dest = workdir / "sdist"
        if not dest.exists():
            with tarfile.open(vllm_src) as tar:
                members = [m for m in tar.getmembers() if "/csrc/" in m.name or "/cmake/patches/" in m.name]
                tar.extractall(dest, members=members, filter="data")
        return find_source_root(dest, workdir)
    raise FileNotFoundError(
        f"--vllm-src {str(vllm_src)[:200]!r}: expected vLLM {VLLM_VERSION}'s sdist (vllm-{VLLM_VERSION}.tar.gz) or "
        f"a folder with {MARLIN_DIR}/marlin.cu; get it with "
        f"`pip download --no-deps --no-binary :all: vllm=={VLLM_VERSION}`"
    )


def trim_selector(selector: str) -> tuple[str, int]:
    """Keep only the MXFP8 bf16 entries of vLLM's generated ``kernel_selector.h``.

    The generator writes ``if (cond)\\n  kernel = Marlin<...>;`` then ``else if (...)`` pairs; the
    kept pairs are re-chained (first one ``if``). Returns ``(text, kept entries)``.

    Raises:
        ValueError: no entry for the MXFP8 type tuple (a different vLLM version's generator).
    """
    lines = selector.splitlines()
    header = [ln for ln in lines if ln.startswith("//")]
    kept: list[tuple[str, str]] = []
    for i, line in enumerate(lines):
        m = re.match(r"^(?:else )?if \((.*)\)$", line)
        if m and all(c in m.group(1) for c in KEEP_CONDITION) and i + 1 < len(lines):
            kept.append((m.group(1), lines[i + 1]))
    if not kept:
        raise ValueError("kernel_selector.h has no MXFP8 (bf16 × e4m3, e8m0 scales) entry: not vLLM 0.33's generator")
    out = header + [f"{'if' if j == 0 else 'else if'} ({cond})\n{body}" for j, (cond, body) in enumerate(kept)]
    return "\n".join(out) + "\n", len(kept)


def split_instances(kernel_file: str) -> tuple[str, list[str]]:
    """``(file head, [template instance lines])`` of a generated ``sm80_kernel_*.cu``, MXFP8 ones only."""
    head = kernel_file.split("template __global__", 1)[0]
    keep = [m.group(0) for m in _INSTANCE.finditer(kernel_file) if all(t in m.group(1) for t in KEEP_TYPES)]
    return head, keep


def stage(root: Path, build: Path, arch: str) -> list[Path]:
    """Copy the sources into ``build``, run vLLM's generator, trim it; return the .cu/.cpp files to compile.

    Raises:
        RuntimeError: vLLM's generator failed (its output is in the message).
        ValueError: the generated files lack the MXFP8 instances.
    """
    src = build / "src"
    marlin = src / MARLIN_DIR
    marlin.mkdir(parents=True, exist_ok=True)
    for name in SOURCES:
        shutil.copy2(root / MARLIN_DIR / name, marlin / name)
    for rel in CSRC_FILES:
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, src / rel)
    gen = build / "generated"
    shutil.rmtree(gen, ignore_errors=True)
    gen.mkdir(parents=True)
    proc = subprocess.run([sys.executable, str(marlin / "generate_kernels.py"), arch, str(gen)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"vLLM's generate_kernels.py failed:\n{(proc.stdout + proc.stderr)[-2000:]}")
    selector, _ = trim_selector((gen / "kernel_selector.h").read_text())
    (marlin / "kernel_selector.h").write_text(selector)
    sources = [marlin / "marlin.cu", marlin / "gptq_marlin_repack.cu"]
    for old in marlin.glob("spx_kernel_*.cu"):
        old.unlink()
    for generated in sorted(gen.glob("sm80_kernel_bfloat16_fe4m3fn_bfloat16.cu")):
        head, instances = split_instances(generated.read_text())
        if not instances:
            raise ValueError(f"{generated.name} has no MXFP8 instance")
        for j, inst in enumerate(instances):  # one instance per file: the build parallelises over them
            path = marlin / f"spx_kernel_mxfp8_{j:02d}.cu"
            path.write_text(head + inst + "\n\n}\n")
            sources.append(path)
    shim = build / "shim"
    _write_shims(root, shim)
    bindings = src / "spx_marlin_bindings.cpp"
    bindings.write_text(BINDINGS)
    sources.append(bindings)
    return sources


def _write_shims(root: Path, shim: Path) -> None:
    """Headers the build may lack, as vLLM's CMake provides them.

    - torch 2.13.x: vLLM's CMakeLists shadows ``torch/csrc/stable/stableivalue_conversions.h`` with
      ``cmake/patches/pytorch_stable_string.patch`` applied (pytorch/pytorch#190493); done the same here.
    - ``cublas_v2.h``: ``torch_utils.h`` includes it for a helper Marlin never calls; a CUDA toolkit
      without cuBLAS headers gets a one-typedef stand-in (only ``cublasHandle_t`` is named there).
    """
    import torch
    import torch.utils.cpp_extension as ext

    shutil.rmtree(shim, ignore_errors=True)
    shim.mkdir(parents=True)
    if torch.__version__.startswith("2.13"):
        rel = "torch/csrc/stable/stableivalue_conversions.h"
        header = Path(ext.include_paths()[0]) / rel
        if "auto strptr = new std::string" in header.read_text():
            (shim / rel).parent.mkdir(parents=True)
            shutil.copy2(header, shim / rel)
            subprocess.run(["patch", "--batch", "--forward", "-p1", "-i",
                            str(root / "cmake/patches/pytorch_stable_string.patch")], cwd=shim, check=True,
                           capture_output=True)
    cuda_home = Path(ext.CUDA_HOME or "/usr/local/cuda")
    if not any((d / "cublas_v2.h").exists() for d in (cuda_home / "include", *_pip_cublas_includes())):
        (shim / "cublas_v2.h").write_text("#pragma once\ntypedef struct cublasContext* cublasHandle_t;\n")


def _pip_cublas_includes() -> list[Path]:
    try:
        import nvidia.cublas  # type: ignore[import-not-found]
    except ImportError:
        return []
    return [Path(p) / "include" for p in nvidia.cublas.__path__]


def build(vllm_src: Path, out: Path, arch: str = "9.0", verbose: bool = False) -> Path:
    """Compile the trimmed MXFP8 Marlin library into ``out``; return the path of ``spx_marlin.so``.

    ``arch`` is a compute capability (``9.0`` → ``sm_90``). The library registers
    ``torch.ops._C.marlin_gemm`` and ``torch.ops._C.gptq_marlin_repack`` when loaded
    (``torch.ops.load_library``).

    Raises:
        FileNotFoundError: ``vllm_src`` is not vLLM 0.33.0's sdist or source folder.
        RuntimeError: no CUDA toolkit (nvcc) or the build failed.
    """
    import torch.utils.cpp_extension as ext

    if ext.CUDA_HOME is None:
        raise RuntimeError("no CUDA toolkit found (CUDA_HOME / nvcc): the Marlin build needs nvcc")
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    root = find_source_root(vllm_src.resolve(), out)
    sources = stage(root, out, arch)
    sm = arch.replace(".", "")
    flags = ["-O3", "-std=c++17", "--expt-relaxed-constexpr", "-DUSE_CUDA", "-DTORCH_TARGET_VERSION=0x020B000000000000ULL",
             f"-gencode=arch=compute_{sm},code=sm_{sm}", "-static-global-template-stub=false"]
    os.environ.setdefault("MAX_JOBS", str(os.cpu_count() or 4))
    ext.load(
        name=LIB_NAME,
        sources=[str(s) for s in sources],
        extra_include_paths=[str(out / "shim"), str(out / "src" / "csrc"), str(out / "src" / MARLIN_DIR),
                             *map(str, _pip_cublas_includes())],
        extra_cflags=["-O3", "-std=c++17", "-DUSE_CUDA", "-DTORCH_TARGET_VERSION=0x020B000000000000ULL"],
        extra_cuda_cflags=flags,
        build_directory=str(out),
        is_python_module=False,
        verbose=verbose,
    )
    lib = out / f"{LIB_NAME}.so"
    if not lib.exists():
        raise RuntimeError(f"the build finished without {lib}")
    return lib


def main(argv: list[str] | None = None) -> int:
    """CLI: ``python -m spx.bench.gemm.marlin_build --vllm-src SDIST --out DIR [--arch 9.0]``; prints the .so path."""
    p = argparse.ArgumentParser(prog="python -m spx.bench.gemm.marlin_build", description=__doc__.split("\n")[0])
    p.add_argument("--vllm-src", type=Path, required=True, help=f"vllm-{VLLM_VERSION}.tar.gz or its unpacked folder")
    p.add_argument("--out", type=Path, default=Path("build/marlin"), help="build folder (default build/marlin)")
    p.add_argument("--arch", default="9.0", help="compute capability to build for (default 9.0: H100/H200)")
    p.add_argument("--verbose", action="store_true", help="show the compiler's command lines")
    args = p.parse_args(argv)
    try:
        lib = build(args.vllm_src, args.out, args.arch, args.verbose)
    except (FileNotFoundError, RuntimeError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(lib)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
