#!/usr/bin/env python3
"""Liger-Kernel's RMSNorm forward kernel as sm_90 machine code, on a machine without a GPU.

Question: at M = 4096 N = 4096 (bf16) Liger-Kernel's forward kernel issued about 14% fewer warp
instructions than ropenorm's lean kernel under ncu and kept its multiprocessors busier
(docs/performance.md, the forward lead). What does its code do per row? This script takes
`_rms_norm_forward_kernel` from an installed Liger-Kernel wheel's `liger_kernel/ops/rms_norm.py`
(read at run time from the wheel; nothing of it is kept in this repository), compiles it with
Triton for sm_90 as Liger-Kernel's launch at N = 4096 specialises it (BLOCK_SIZE 4096, 8 warps,
the llama casting mode, a weight; pointers, row strides and the column count marked divisible by
16 as Triton's launcher marks such arguments), and prints its registers, instruction count, and
the order of its loads, reduction steps, barriers and stores. No GPU or torch needed: Triton's
compiler and cuobjdump only.

  python3 -m pip install --target /tmp/trsite triton==3.6.0 --no-deps
  PYTHONPATH=/tmp/trsite python3 bench/experiments/liger_forward_sass.py .whl/liger_kernel-0.8.5-py3-none-any.whl

Receipt bench/results/liger-forward-sass-sm90.log (Liger-Kernel 0.8.5, Triton 3.6.0): 38
registers, 259 instructions, the weight's two 16-byte loads issued between the warp butterfly and
the block barrier, the mean and rstd from MUFU.RCP and MUFU.RSQ.
"""

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

SOURCE = "liger_kernel/ops/rms_norm.py"
KERNEL = "_rms_norm_forward_kernel"
HEADER = """import triton
import triton.language as tl
from triton.language.extra.libdevice import rsqrt
_CASTING_MODE_NONE: tl.constexpr = tl.constexpr(-1)
_CASTING_MODE_LLAMA: tl.constexpr = tl.constexpr(0)
_CASTING_MODE_GEMMA: tl.constexpr = tl.constexpr(1)
"""


def kernel_module(wheel, workdir):
    """A module holding the wheel's forward kernel alone (the rest of the file needs torch)."""
    with zipfile.ZipFile(wheel) as z:
        text = z.read(SOURCE).decode()
    start = text.index("@triton.jit\ndef " + KERNEL + "(")
    end = text.index("@triton.jit", start + 1)
    path = os.path.join(workdir, "liger_forward_kernel.py")
    with open(path, "w") as f:
        f.write(HEADER + text[start:end])
    spec = importlib.util.spec_from_file_location("liger_forward_kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compile_cubin(module, path):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature = {
        "Y_ptr": "*bf16", "Y_row_stride": "i32", "X_ptr": "*bf16", "X_row_stride": "i32",
        "W_ptr": "*bf16", "W_row_stride": "i32", "RSTD_ptr": "*fp32", "RSTD_row_stride": "i32",
        "n_cols": "i32", "eps": "fp32", "offset": "fp32", "casting_mode": "constexpr",
        "elementwise_affine": "constexpr", "BLOCK_SIZE": "constexpr",
    }
    names = list(signature)
    divisible = ["Y_ptr", "Y_row_stride", "X_ptr", "X_row_stride", "W_ptr", "RSTD_ptr", "n_cols"]
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in divisible}
    constexprs = {"casting_mode": 0, "elementwise_affine": True, "BLOCK_SIZE": 4096}
    src = ASTSource(fn=getattr(module, KERNEL), signature=signature, constexprs=constexprs,
                    attrs=attrs)
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 8})
    with open(path, "wb") as f:
        f.write(compiled.asm["cubin"])
    return compiled


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: liger_forward_sass.py LIGER_KERNEL_WHEEL")
    cuobjdump = shutil.which("cuobjdump")
    if cuobjdump is None:
        sys.exit("cuobjdump not found on PATH")
    workdir = tempfile.mkdtemp()
    module = kernel_module(sys.argv[1], workdir)
    cubin = os.path.join(workdir, "liger_forward.cubin")
    import triton

    compiled = compile_cubin(module, cubin)
    print(f"{KERNEL} from {os.path.basename(sys.argv[1])}, Triton {triton.__version__}, sm_90, "
          f"{compiled.metadata.num_warps} warps, BLOCK_SIZE 4096, llama casting")
    usage = subprocess.run([cuobjdump, "-res-usage", cubin], capture_output=True, text=True).stdout
    print("resources:", " ".join(re.findall(r"(?:REG|STACK|SHARED):\d+", usage)))
    sass = subprocess.run([cuobjdump, "-sass", cubin], capture_output=True, text=True).stdout
    code = []
    for line in sass.splitlines():
        m = re.match(r"\s+/\*([0-9a-f]{4,6})\*/\s+(.*?)\s*;", line)
        if m and not m.group(2).startswith(("NOP", "BRA 0x")):
            code.append((m.group(1), m.group(2)))
    print(f"instructions (no padding): {len(code)}")
    print("loads, reduction steps, barriers, special functions and stores in program order:")
    keep = re.compile(r"\b(LDG|STG|SHFL|BAR|LDS|STS|MUFU)\b")
    for addr, text in code:
        if keep.search(text):
            print(f"  /*{addr}*/ {text}")


if __name__ == "__main__":
    main()
