// Lean kernels with the heads split over grid z (H200): at few tokens one block per token puts
// all 40 head rows (10 warps, some 370 instructions each for QK-norm + RoPE) on one
// multiprocessor's four schedulers; does spreading a token's heads over several blocks, and so
// over several multiprocessors, shorten a decode step?
// bf16 q [T, 32, 128], k [T, 8, 128], neox, f32 cos/sin cache of 4096 rows, random int64
// positions, out of place, rstd saved (QK). The library's lean kernels in the instances its
// launchers pick for this call (QK: LeanDecode<kInt64>, picked up to 1024 tokens and run here at
// every length; RoPE: LeanRows), launched on grid
// (S, B, Z) and block (8, R): thread row y of block z owns head z R + y, rows past the 40 heads
// exit at once (lean_row_past_heads). R = 40 (Z = 1) is one block per token. Every split's
// output and rstd are compared bit for bit with the library call's.
// Graph-replay medians (graphs of 20 launches, as the main job times T = 1) up to T = 256,
// cold-L2 event medians above. Arguments (optional): the run lengths (at most 65536; default
// 1 ... 1024). History: at 2e780af (lean-head-split-{large-t,long}-2e780af-*) blocks of 20 rows
// ran as fast as 40 or faster at every length from 128 to 65536 tokens but RoPE T = 512
// (+0.04 us in one of two passes), so the planner splits blocks of more than
// kRopeLeanSplitMinThreads threads at every run length from the next commit on. Not part of the
// build:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 -Iinclude -Isrc \
//        bench/experiments/lean_head_split.cu build/libropenorm.a -o lean_head_split
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "core/qk_norm_rope_validate.h"
#include "cuda/common/dtype.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/qk_norm_rope/qk_norm_rope_host.h"
#include "cuda/qk_norm_rope/qk_norm_rope_lean_kernel.cuh"
#include "cuda/rope/rope_lean_kernels.cuh"
#include "decode_inputs.cuh"
#include "experiment_timing.cuh"
#include "ropenorm/qk_norm_rope.h"
#include "ropenorm/rope.h"

using namespace ropenorm;
using namespace ropenorm::cuda;

namespace {

constexpr int kD = 128, kLanes = 8, kHq = 32, kHk = 8, kHeads = kHq + kHk;
constexpr float kEps = 1e-6f;
constexpr int kRows[] = {40, 20, 10, 8, 5, 4, 2, 1};

template <typename F>
float time_at(int64_t t, F f) {
  if (t <= 256) return time_graph(f, 20);
  return time_med([&] { f(nullptr); }, true);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t max_t = 65536, table = 4096;
  std::vector<int64_t> runs = {1, 2, 4, 8, 16, 32, 64, 256, 1024};
  if (argc > 1) runs.clear();
  for (int ai = 1; ai < argc; ++ai) runs.push_back(std::min<int64_t>(max_t, std::atoll(argv[ai])));
  const size_t qn = max_t * kHq * kD, kn = max_t * kHk * kD, rn = max_t * kHeads;
  std::mt19937_64 rng(20261203);
  bf16* q = device_bf16(random_bf16(rng, qn));
  bf16* k = device_bf16(random_bf16(rng, kn));
  bf16* w = device_bf16(random_bf16(rng, 2 * kD));
  bf16 *qo = device_bf16({}, qn), *ko = device_bf16({}, kn);
  float* rstd;
  CK(cudaMalloc(&rstd, rn * 4));
  const DeviceCosSin cs = device_cos_sin(rng, table, kD, max_t);
  const Device dev = Device::cuda(0);
  std::printf("copy bandwidth %.1f GB/s\n", copy_bandwidth_gbps(size_t{1} << 30));
  std::vector<uint32_t> ref_rstd;
  for (bool norm : {true, false}) {
    for (int64_t t : runs) {
      core::QkNormRopeCall c = standard_qk_call(q, k, qo, ko, w, cs, t, table, kEps);
      core::RopeCall& r = c.rope;
      const TensorRef rq = TensorRef::contiguous(rstd, DType::kFloat32, {t, kHq}, dev);
      TensorRef rk = TensorRef::contiguous(rstd, DType::kFloat32, {t, kHk}, dev);
      rk.data = rstd + t * kHq;
      auto lib = [&](cudaStream_t st) {
        if (norm) {
          check(qk_norm_rope(r.q, r.k, c.wq, c.wk, r.q_out, r.k_out, rq, rk, r.positions, r.cos_sin,
                             r.params, c.norm, st),
                "qk_norm_rope");
        } else {
          check(rope(r.q, r.k, r.q_out, r.k_out, r.positions, r.cos_sin, r.params, st), "rope");
        }
      };
      c.q_rstd = rq;
      c.k_rstd = rk;
      core::RopeGeometry g;
      check(norm ? core::validate_qk_norm_rope(c, -1, &g) : core::validate_rope(r, -1, &g),
            "validate");
      cuda::QkNormRopeArgs qa{};
      core::QkNormRopeFacts facts;
      cuda::fill_qk_norm_rope_args(c, g, &qa, &facts);
      const size_t nq = t * kHq * kD, nk = t * kHk * kD, nr = t * kHeads;
      // Poisons the outputs, runs run(nullptr), returns q, k and (QK) rstd as bits.
      auto bits_after = [&](auto run) {
        CK(cudaMemset(qo, 0xff, nq * 2));
        CK(cudaMemset(ko, 0xff, nk * 2));
        CK(cudaMemset(rstd, 0xff, nr * 4));
        run(nullptr);
        CK(cudaDeviceSynchronize());
        std::vector<uint16_t> y = to_host16(qo, nq), yk = to_host16(ko, nk);
        y.insert(y.end(), yk.begin(), yk.end());
        const std::vector<uint32_t> rs = to_host32(rstd, nr);
        for (uint32_t v : rs) {
          y.push_back(static_cast<uint16_t>(v));
          if (norm) y.push_back(static_cast<uint16_t>(v >> 16));
        }
        return y;
      };
      const std::vector<uint16_t> want = bits_after(lib);
      std::printf("%-12s T=%5lld %s: library %7.2f us |", norm ? "qk_norm_rope" : "rope",
                  static_cast<long long>(t), t <= 256 ? "graph" : "cold ", time_at(t, lib));
      size_t differ = 0;
      for (int rows : kRows) {
        const unsigned z = static_cast<unsigned>((kHeads + rows - 1) / rows);
        const dim3 grid(static_cast<unsigned>(t), 1, z), block(kLanes, static_cast<unsigned>(rows));
        auto split = [&](cudaStream_t st) {
          if (norm) {
            CK(launch_with_pdl(
                qk_norm_rope_lean_kernel<bf16, float, false, LeanDecode<LeanPositions::kInt64>>,
                grid, block, 0, st, qa));
          } else {
            CK(launch_with_pdl(rope_lean_kernel<bf16, float, false, LeanRows>, grid, block, 0, st,
                               qa.rope));
          }
        };
        const std::vector<uint16_t> got = bits_after(split);
        for (size_t i = 0; i < want.size(); ++i) differ += want[i] != got[i];
        std::printf(" R=%d %7.2f", rows, time_at(t, split));
      }
      std::printf(" | %zu values differ\n", differ);
    }
  }
  return 0;
}
