"""The plain RMSNorm forward of one implementation at one shape, run three times (an L2 flush
before each), for a profiler that takes one launch (ncu -k regex:KERNEL -s 2 -c 1).

The peers benchmark has Liger-Kernel's forward at M = 4096 N = 4096 (bf16) 1.10x faster than
ropenorm's through torch, where ropenorm's kernel in the C++ harness is the same split
(rms_norm_forward_mid_rows.cu). Profiling one launch of each says where the kernels differ.
Not part of the test suite or the main job:
    PYTHONPATH=python:<liger site> python3 bench/experiments/peer_rms_norm_once.py IMPL [M N]
IMPL: ropenorm (ropenorm.rms_norm) or liger (LigerRMSNormFunction, casting mode llama).
"""

import sys

import torch


def main() -> int:
    impl = sys.argv[1]
    m = int(sys.argv[2]) if len(sys.argv) > 2 else 4096
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 4096
    if impl == "ropenorm":
        import ropenorm

        def call(x, w):
            return ropenorm.rms_norm(x, w, 1e-6)
    else:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction

        def call(x, w):
            return LigerRMSNormFunction.apply(x, w, 1e-6, 0.0, "llama", False)
    flush = torch.empty(256 << 18, device="cuda")
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        for _ in range(3):
            flush.zero_()
            call(x, w)
    torch.cuda.synchronize()
    print(f"{impl} M={m} N={n}: 3 calls")
    return 0


if __name__ == "__main__":
    sys.exit(main())
