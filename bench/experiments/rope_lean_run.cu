// RoPE on the lean run (H200): the library's lean-run kernel (cuda/rope/rope_lean_run.cuh: a
// persistent grid, each block's tokens interleaved over the grid, each thread's next token's
// data and cos/sin in flight in its own shared-memory ring) against the lean kernel (one block
// per token, LeanRows) and the general kernel, on long and mid-length runs.
// bf16 q [T, 32, D], k [T, 8, D], f32 cache of T rows (the main job's table size), random
// int64 positions; D 128 neox, gptj and the inverse rotation, D 64 neox, D 256 (two head
// groups) neox and gptj, T = 1024 ... 65536.
// Ownership: the library's kernels on the library's arguments (cuda::fill_rope_args): the public
// call (the planner's pick, printed), the lean kernel on plan_rope_lean's grid (blocks of up to
// 1024 threads), and the lean-run kernel on plan_rope_lean_run's grid filling 2, 3 and 4 x 320
// threads per multiprocessor (gptj: with the row swizzle, the library's form, and at 2 x 320
// also without it, each lane fetching its own chunks through L1), and at 2 x 320 with a ring of
// 3 stages instead of the library's 2, and on blocks of at most 160 threads, 4 per
// multiprocessor (D 128: two head groups, each block round half a token, as D 256's are). Every
// output is compared bit for bit with the general kernel's (cuda::run_rope with the lean kernels
// disallowed). History: at 7cac74a (bench/results/rope-lean-run-7cac74a-nvidia-h200.log), with
// contiguous runs of tokens per block and the experiment's own copy of the kernel, the lean run was
// no faster than the lean kernel for neox D 128 (361.8 against 360.0 us at T = 65536), slower for
// D 64 (195.6 against 172.3) and, its data then through L2 only, far slower for gptj (489.1
// against 374.5). At 5b97eb9 (rope-lean-run-stages-5b97eb9-nvidia-h200.log) the 3-stage ring
// was no faster than the library's 2 (D 128 neox T = 65536 340.13 against 338.72 us, D 256
// 676.16 against 660.51). From the flat walk's commit on, the lean run with the flat walk
// (LeanRowsFlatI64: 62-71 registers against 86-96) at 2, 3 and 4 x 320 threads per
// multiprocessor joins; the library's call takes it for these calls. Added after 1ae3ff4, not
// yet run: the flat run at 2 x 320 also on the largest grid that divides T (256 blocks at
// T = 32768 and 65536 instead of 264, 4 multiprocessors idle): 264 blocks leave a last round
// that only 32 (T = 32768) or 64 (T = 65536) of them run; is that ragged round worth the 4
// multiprocessors? (It is: ragged-round-2e780af-*.) At 87cc491 (rope-lean-run-short-87cc491-*,
// 1024 .. 4096 tokens): at D 256, whose 640-thread lean block leaves 65 .. 4095 tokens to the
// general kernel, the flat run took 13.47 against 15.49 us at 1024 and 23.17 against 29.25 at
// 2048, so the lean run serves those blocks from 1024 tokens from 00f71de on; elsewhere the lean
// kernel stays below 4096 (the flat run gains little for D 128 neox, 9.50 against 9.82 at 1024 and
// 14.14 against 14.24 at 2048, and for gptj at 1024, 9.82 against 9.95, but loses for gptj at
// 2048, 15.39 against 14.98, and for D 64 at every length).
// Cold-L2 CUDA-event medians. Arguments (optional): config names, "--", run lengths
// (e.g. `rope_lean_run "D128 neox" "D256 neox" -- 16384 65536`). Not part of the build:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 -Iinclude -Isrc \
//        bench/experiments/rope_lean_run.cu build/libropenorm.a -o rope_lean_run
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/rope_plan.h"
#include "core/rope_validate.h"
#include "cuda/common/dtype.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/rope/rope_host.h"
#include "cuda/rope/rope_lean_run.cuh"
#include "cuda/rope/rope_run.h"
#include "decode_inputs.cuh"
#include "experiment_timing.cuh"
#include "ropenorm/rope.h"

using namespace ropenorm;
using namespace ropenorm::cuda;

namespace {

constexpr int kHq = 32, kHk = 8;

const char* plan_name(const core::RopePlan& p) {
  return p.lean_run ? "lean run" : (p.lean ? "lean" : "general");
}

template <bool kGptj>
const void* lean_run_fn() {
  return reinterpret_cast<const void*>(rope_lean_run_kernel<bf16, float, kGptj, LeanRows>);
}

}  // namespace

int main(int argc, char** argv) {
  std::mt19937_64 rng(20261203);
  const RopeHeads h = rope_heads(rng, 65536, kHq, kHk, 256);
  bf16 *q = h.q, *k = h.k, *yq = h.yq, *yk = h.yk, *yq2 = h.yq2, *yk2 = h.yk2;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::printf(
      "registers: lean run neox %d, gptj %d; lean neox %d\n", regs_of(lean_run_fn<false>()),
      regs_of(lean_run_fn<true>()),
      regs_of(reinterpret_cast<const void*>(rope_lean_kernel<bf16, float, false, LeanRows>)));
  std::printf("copy bandwidth %.1f GB/s\n", copy_bandwidth_gbps(size_t{1} << 30));
  const Device d0 = Device::cuda(0);
  struct Config {
    const char* name;
    int d;
    RopeStyle style;
    bool inverse;
  };
  const Config configs[] = {
      {"D128 neox", 128, RopeStyle::kNeox, false},   {"D128 gptj", 128, RopeStyle::kGptj, false},
      {"D128 inverse", 128, RopeStyle::kNeox, true}, {"D64 neox", 64, RopeStyle::kNeox, false},
      {"D256 neox", 256, RopeStyle::kNeox, false},   {"D256 gptj", 256, RopeStyle::kGptj, false}};
  // Optional arguments: the configs to run (names as printed, e.g. "D128 neox"), then "--", then
  // the run lengths; default every config at T = 1024 ... 65536.
  std::vector<std::string> only;
  std::vector<int64_t> runs = {1024, 2048, 4096, 16384, 65536};
  int ai = 1;
  for (; ai < argc && std::string(argv[ai]) != "--"; ++ai) only.push_back(argv[ai]);
  if (ai + 1 < argc) runs.clear();
  for (++ai; ai < argc; ++ai) runs.push_back(std::atoll(argv[ai]));
  for (const Config& cf : configs) {
    if (!only.empty() && std::find(only.begin(), only.end(), cf.name) == only.end()) continue;
    for (int64_t t : runs) {
      const DeviceCosSin csd = device_cos_sin(rng, t, cf.d, t);
      auto view = [&](void* p, int64_t heads) {
        return TensorRef::contiguous(p, DType::kBFloat16, {t, heads, cf.d}, d0);
      };
      RopePositions rp;
      rp.positions = TensorRef::contiguous(csd.pos, DType::kInt64, {t}, d0);
      RopeCosSin cs;
      cs.kind = CosSinKind::kCache;
      cs.cache = TensorRef::contiguous(csd.cache, DType::kFloat32, {t, cf.d}, d0);
      RopeParams prm;
      prm.style = cf.style;
      prm.inverse = cf.inverse;
      const core::RopeCall call{view(q, kHq), view(k, kHk), view(yq2, kHq), view(yk2, kHk), rp,
                                cs,           prm};
      const core::RopeCall ref_call{view(q, kHq), view(k, kHk), view(yq, kHq), view(yk, kHk), rp,
                                    cs,           prm};
      core::RopeLeanFacts lf;
      const RopeKernelArgs ra = rope_args_of(call, &lf);
      const core::RopePlan picked = core::plan_rope_call(lf, true, sms);
      const bool gptj = cf.style == RopeStyle::kGptj;
      std::vector<std::string> names;
      std::vector<std::function<void()>> vs;
      names.push_back(std::string("library (") + plan_name(picked) + ")");
      vs.push_back(
          [&] { check(rope(call.q, call.k, call.q_out, call.k_out, rp, cs, prm), "lib"); });
      const core::RopePlan lean = core::plan_rope_lean(lf, sms);
      if (int64_t{lean.bx} * lean.by <= core::kRopeLeanMaxThreads) {
        names.push_back("lean per token");
        const auto kernel = gptj ? rope_lean_kernel<bf16, float, true, LeanRows>
                                 : rope_lean_kernel<bf16, float, false, LeanRows>;
        vs.push_back([&, kernel, lean] {
          CK(launch_with_pdl(kernel, rope_launch_grid(lean), rope_launch_block(lean), 0, nullptr,
                             ra));
        });
      }
      for (int per : {2, 3, 4}) {
        const core::RopePlan run =
            core::plan_rope_lean_run(lf, core::kRopeLeanRunThreads, per, sms, 4096);
        names.push_back("run " + std::to_string(per) + "x320/SM");
        const auto kernel = gptj ? rope_lean_run_kernel<bf16, float, true, LeanRows>
                                 : rope_lean_run_kernel<bf16, float, false, LeanRows>;
        vs.push_back([&, kernel, run] { CK(launch_lean_layout(kernel, run, nullptr, ra)); });
        names.push_back("flat run " + std::to_string(per) + "x320/SM");
        const auto flat = gptj ? rope_lean_run_kernel<bf16, float, true, LeanRowsFlatI64>
                               : rope_lean_run_kernel<bf16, float, false, LeanRowsFlatI64>;
        vs.push_back([&, flat, run] { CK(launch_lean_layout(flat, run, nullptr, ra)); });
        if (per == 2) {  // the same blocks on the largest grid that divides T: no ragged round
          core::RopePlan even = run;
          even.grid = dividing_grid(t, run.grid);
          names.push_back("flat run, grid " + std::to_string(even.grid) + " dividing T");
          vs.push_back([&, flat, even] { CK(launch_lean_layout(flat, even, nullptr, ra)); });
        }
        if (per == 2) {  // blocks of at most 160 threads, 4 per SM: half a D 128 token per block
          const core::RopePlan half = core::plan_rope_lean_run(lf, 160, 4, sms, 4096);
          names.push_back("run 4x160/SM (" + std::to_string(half.head_groups) + " head groups)");
          const auto kernel = gptj ? rope_lean_run_kernel<bf16, float, true, LeanRows>
                                   : rope_lean_run_kernel<bf16, float, false, LeanRows>;
          vs.push_back([&, kernel, half] { CK(launch_lean_layout(kernel, half, nullptr, ra)); });
        }
        if (per == 2) {  // the same grid with 3 stages in each thread's ring
          core::RopePlan deep = run;
          deep.smem_bytes = run.smem_bytes / core::kRopeLeanRunStages * 3;
          names.push_back("run 2x320/SM 3 stages");
          const auto k3 = gptj
                              ? rope_lean_run_kernel<bf16, float, true, LeanRows, true, false, 3>
                              : rope_lean_run_kernel<bf16, float, false, LeanRows, false, false, 3>;
          vs.push_back([&, k3, deep] { CK(launch_lean_layout(k3, deep, nullptr, ra)); });
        }
        if (gptj && per == 2) {  // gptj without the row swizzle: each lane's own chunks, via L1
          names.push_back("run 2x320/SM unswizzled via L1");
          const auto direct = rope_lean_run_kernel<bf16, float, true, LeanRows, false>;
          vs.push_back([&, direct, run] { CK(launch_lean_layout(direct, run, nullptr, ra)); });
        }
      }
      const size_t nq = t * kHq * cf.d, nk = t * kHk * cf.d;
      CK(cudaMemset(yq, 0xff, h.qn * 2));
      CK(cudaMemset(yk, 0xff, h.kn * 2));
      check(run_rope(ref_call, false, nullptr), "general");
      CK(cudaDeviceSynchronize());
      const std::string label = std::string(cf.name) + " T=" + std::to_string(t);
      check_variants(label.c_str(), names, vs, h, nq, nk, to_host16(yq, nq), to_host16(yk, nk));
      const double bytes = 2.0 * static_cast<double>(nq + nk) * 2 + static_cast<double>(t) * 8;
      const float t_gen = time_med([&] { check(run_rope(ref_call, false, nullptr), "g"); }, true);
      std::printf("%-12s T=%5lld cold: general %8.2f us (%6.0f GB/s)", cf.name,
                  static_cast<long long>(t), t_gen, bytes / t_gen / 1e3);
      for (size_t vi = 0; vi < vs.size(); ++vi) {
        std::printf(" | %s %.2f", names[vi].c_str(), time_med(vs[vi], true));
      }
      std::printf(" us\n");
      CK(cudaFree(csd.cache));
      CK(cudaFree(csd.pos));
    }
  }
  return 0;
}
