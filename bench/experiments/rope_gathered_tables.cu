// RoPE with Hugging Face's gathered cos/sin (H200): the source the transformers integration
// passes (`hf_cos_sin_gathered`, the position_embeddings of a Hugging Face model: [B, S, R] per
// token, or [1, S, R] broadcast over B). The planner served it with the lean kernel up to 64
// tokens (core::rope_lean_max_tokens) and with the general kernel beyond, since the lean run
// took only cos/sin rows indexed by position (core::rope_lean_run); with a cache at positions
// the same call takes the lean run from 4096 tokens (the general kernel ran D = 128 neox at
// T = 65536 in 395.4 us against the lean run's 339.6 in rope-lean-run-91e26df-*).
//
// Question: would the lean run, with the source read at run time (LeanAny, as QK-norm + RoPE's
// LeanLanes already serves these tables), or the lean kernel per token serve the gathered tables
// faster than the general kernel, and from how many tokens?
//
// Cases: bf16 q [B, S, 32, D], k [B, S, 8, D] (D = 128, or --d D); bf16 cos and sin (a bf16 model's
// position_embeddings) gathered on the host from the default f32 cache at random int64 positions
// below T, halves duplicated: [1, T, D] for B = 1; [1, S, D] viewed as [4, S, D] with
// batch stride 0 for B = 4 (as the integration passes a [1, S, R] batch); [4, S, D] per token
// (a model given position_ids per sequence); neox and gptj; T = 256, 1024, 2048, 4096, 16384,
// 65536 (from 65 tokens the general kernel serves these tables up to the lean run's lengths: the
// short runs say whether the lean kernel per token should serve them there, as it does rows by
// position).
// Variants: the library (its pick printed), the lean kernel per token (LeanAny on
// plan_rope_lean's grid), the lean run (LeanAny on plan_rope_lean_run's grid at 2 and 4 x 320
// threads per multiprocessor, the library's lean-run shapes; on flat tokens also the flat walk
// with rows by token, LeanTokensFlat), the library on the same tables read as rows by position
// (kHfCosSin at each token's row: the same bytes and bits through the by-position instances),
// and beside them the library on the
// cache at the same positions (a timing reference: its angles are the cache's f32 values, not
// the tables' bf16 ones, so its outputs are not compared).
// Checks: every variant's outputs (poisoned before each run) bit for bit against the general
// kernel's (cuda::run_rope with the lean kernels disallowed).
// Cold-L2 CUDA-event medians. Arguments (optional): [--d D] run lengths. Not part of the build:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 -Iinclude -Isrc -Ibench/experiments \
//        bench/experiments/rope_gathered_tables.cu build/libropenorm.a -o rope_gathered_tables
#include <cuda_runtime.h>

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
#include "cuda/common/launch.h"
#include "cuda/rope/rope_host.h"
#include "cuda/rope/rope_lean_run.cuh"
#include "cuda/rope/rope_run.h"
#include "decode_inputs.cuh"
#include "experiment_timing.cuh"
#include "reference/host_float.h"
#include "ropenorm/rope.h"

using namespace ropenorm;
using namespace ropenorm::cuda;

namespace {

constexpr int kHq = 32, kHk = 8;

const char* plan_name(const core::RopePlan& p) {
  return p.lean_run ? "lean run" : (p.lean ? "lean" : "general");
}

/// bf16 cos and sin tables [rows, d] for `pos` (one row per entry), halves duplicated, from
/// the f32 cache [P, d] (c_0 .. c_{h-1}, then s_0 .. s_{h-1} per row, h = d / 2).
void gathered_tables(const std::vector<float>& cache, const std::vector<int64_t>& pos, int64_t d,
                     std::vector<uint16_t>* cos, std::vector<uint16_t>* sin) {
  const int64_t h = d / 2;
  cos->resize(pos.size() * d);
  sin->resize(pos.size() * d);
  for (size_t t = 0; t < pos.size(); ++t) {
    const float* row = cache.data() + pos[t] * d;
    for (int64_t i = 0; i < h; ++i) {
      const uint16_t c = ref::double_to_bf16_bits(row[i]);
      const uint16_t s = ref::double_to_bf16_bits(row[h + i]);
      (*cos)[t * d + i] = (*cos)[t * d + h + i] = c;
      (*sin)[t * d + i] = (*sin)[t * d + h + i] = s;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device\n");
    return 1;
  }
  int64_t d = 128;
  int first = 1;
  if (argc > 2 && std::string(argv[1]) == "--d") {
    d = std::atoll(argv[2]);
    first = 3;
  }
  if (d < 16 || d > 256 || d % 16 != 0) {
    std::printf("head_dim: a multiple of 16 in 16 .. 256, got %lld\n", static_cast<long long>(d));
    return 1;
  }
  std::vector<int64_t> runs = {256, 1024, 2048, 4096, 16384, 65536};
  if (argc > first) runs.clear();
  for (int i = first; i < argc; ++i) runs.push_back(std::atoll(argv[i]));
  for (int64_t t : runs) {
    if (t < 4 || t > 65536 || t % 4 != 0) {
      std::printf("run lengths: multiples of 4 in 4 .. 65536, got %lld\n",
                  static_cast<long long>(t));
      return 1;
    }
  }
  const int64_t max_t = 65536;
  std::mt19937_64 rng(20261205);
  const RopeHeads h = rope_heads(rng, max_t, kHq, kHk, d);
  bf16 *q = h.q, *k = h.k, *yq = h.yq, *yk = h.yk, *yq2 = h.yq2, *yk2 = h.yk2;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::printf(
      "registers: lean run LeanAny bf16 tables neox %d, gptj %d; lean LeanAny neox %d\n",
      regs_of(reinterpret_cast<const void*>(rope_lean_run_kernel<bf16, bf16, false, LeanAny>)),
      regs_of(reinterpret_cast<const void*>(rope_lean_run_kernel<bf16, bf16, true, LeanAny>)),
      regs_of(reinterpret_cast<const void*>(rope_lean_kernel<bf16, bf16, false, LeanAny>)));
  std::printf("copy bandwidth %.1f GB/s\n", copy_bandwidth_gbps(size_t{1} << 30));
  const Device d0 = Device::cuda(0);
  std::vector<float> cache_h(max_t * d);
  RopeConfig rc;
  rc.rotary_dim = d;
  check(build_rope_cache(rc, max_t, DType::kFloat32, cache_h.data()), "cache");
  float* cache_d;
  CK(cudaMalloc(&cache_d, cache_h.size() * 4));
  CK(cudaMemcpy(cache_d, cache_h.data(), cache_h.size() * 4, cudaMemcpyHostToDevice));
  int64_t* pos_d;
  CK(cudaMalloc(&pos_d, max_t * 8));
  int64_t* rows_d;  // the tables' row of each token, as positions into them (kHfCosSin)
  CK(cudaMalloc(&rows_d, max_t * 8));
  bf16 *cos_d = device_bf16({}, max_t * d), *sin_d = device_bf16({}, max_t * d);

  // The tables' layouts: one sequence; [1, S, R] broadcast over B = 4; [4, S, R] per token.
  enum class Tables { kOneSequence, kBroadcast, kPerToken };
  for (Tables layout : {Tables::kOneSequence, Tables::kBroadcast, Tables::kPerToken}) {
    const int batch = layout == Tables::kOneSequence ? 1 : 4;
    const bool broadcast = layout == Tables::kBroadcast;
    for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kGptj}) {
      const bool gptj = style == RopeStyle::kGptj;
      for (int64_t t : runs) {
        const int64_t s = t / batch;
        // Positions: per token, or (broadcast) one per sequence index, shared by the batch, so
        // every sequence has the same positions.
        std::vector<int64_t> pos_h(broadcast ? s : t);
        for (auto& v : pos_h) v = static_cast<int64_t>(rng() % static_cast<uint64_t>(t));
        std::vector<int64_t> pos_tokens;
        for (int b = 0; b < (broadcast ? batch : 1); ++b)
          pos_tokens.insert(pos_tokens.end(), pos_h.begin(), pos_h.end());
        CK(cudaMemcpy(pos_d, pos_tokens.data(), t * 8, cudaMemcpyHostToDevice));
        std::vector<int64_t> rows_h(t);
        for (int64_t i = 0; i < t; ++i) rows_h[i] = broadcast ? i % s : i;
        CK(cudaMemcpy(rows_d, rows_h.data(), t * 8, cudaMemcpyHostToDevice));
        std::vector<uint16_t> cos_h, sin_h;
        gathered_tables(cache_h, pos_h, d, &cos_h, &sin_h);
        CK(cudaMemcpy(cos_d, cos_h.data(), cos_h.size() * 2, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(sin_d, sin_h.data(), sin_h.size() * 2, cudaMemcpyHostToDevice));
        auto view = [&](void* p, int64_t heads) {
          return TensorRef::contiguous(p, DType::kBFloat16, {batch, s, heads, d}, d0);
        };
        RopeCosSin gathered;
        gathered.kind = CosSinKind::kHfCosSinGathered;
        const int64_t table_sb = broadcast ? 0 : s * d;
        gathered.cos = TensorRef(cos_d, DType::kBFloat16, {batch, s, d}, {table_sb, d, 1}, d0);
        gathered.sin = TensorRef(sin_d, DType::kBFloat16, {batch, s, d}, {table_sb, d, 1}, d0);
        RopeParams prm;
        prm.style = style;
        const RopePositions none;
        const core::RopeCall call{view(q, kHq), view(k, kHk), view(yq2, kHq), view(yk2, kHk), none,
                                  gathered,     prm};
        const core::RopeCall ref_call{
            view(q, kHq), view(k, kHk), view(yq, kHq), view(yk, kHk), none, gathered, prm};
        core::RopeLeanFacts lf;
        const RopeKernelArgs ra = rope_args_of(call, &lf);
        const core::RopePlan picked = core::plan_rope_call(lf, true, sms);

        std::vector<std::string> names;
        std::vector<std::function<void()>> vs;
        names.push_back(std::string("library (") + plan_name(picked) + ")");
        vs.push_back([&] {
          check(rope(call.q, call.k, call.q_out, call.k_out, none, gathered, prm), "library");
        });
        // The same bf16 tables read as rows by position (kHfCosSin, [T, R] at each token's row):
        // the same bytes and bits, through the by-position instances (LeanRows).
        RopeCosSin by_row;
        by_row.kind = CosSinKind::kHfCosSin;
        by_row.cos = TensorRef::contiguous(cos_d, DType::kBFloat16, {broadcast ? s : t, d}, d0);
        by_row.sin = TensorRef::contiguous(sin_d, DType::kBFloat16, {broadcast ? s : t, d}, d0);
        RopePositions rows_pos;
        rows_pos.positions = TensorRef(rows_d, DType::kInt64, {batch, s}, {s, 1}, d0);
        {
          core::RopeLeanFacts rf;
          rope_args_of(
              core::RopeCall{call.q, call.k, call.q_out, call.k_out, rows_pos, by_row, prm}, &rf);
          names.push_back(std::string("library, tables by row (") +
                          plan_name(core::plan_rope_call(rf, true, sms)) + ")");
        }
        vs.push_back([&] {
          check(rope(call.q, call.k, call.q_out, call.k_out, rows_pos, by_row, prm), "by row");
        });
        const core::RopePlan lean = core::plan_rope_lean(lf, sms);
        names.push_back("lean per token");
        const auto lean_k = gptj ? rope_lean_kernel<bf16, bf16, true, LeanAny>
                                 : rope_lean_kernel<bf16, bf16, false, LeanAny>;
        vs.push_back([&, lean_k, lean] {
          CK(launch_with_pdl(lean_k, rope_launch_grid(lean), rope_launch_block(lean), 0, nullptr,
                             ra));
        });
        for (int per : {2, 4}) {
          const core::RopePlan run =
              core::plan_rope_lean_run(lf, core::kRopeLeanRunThreads, per, sms, 4096);
          const auto run_k = gptj ? rope_lean_run_kernel<bf16, bf16, true, LeanAny>
                                  : rope_lean_run_kernel<bf16, bf16, false, LeanAny>;
          // The blocks that fit per multiprocessor (the label's count needs the registers for it).
          CK(static_cast<cudaError_t>(
              allow_dynamic_smem(reinterpret_cast<const void*>(run_k), run.smem_bytes)));
          int fit = 0;
          CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, run_k, run.bx * run.by,
                                                           static_cast<size_t>(run.smem_bytes)));
          names.push_back("lean run " + std::to_string(per) + "x320/SM (grid " +
                          std::to_string(run.grid) + ", " + std::to_string(fit) + " fit per SM)");
          vs.push_back([&, run_k, run] { CK(launch_lean_layout(run_k, run, nullptr, ra)); });
          if (rope_flat_tokens(ra, 2)) {  // the flat walk, rows by token (LeanTokensFlat)
            const auto flat_k = gptj ? rope_lean_run_kernel<bf16, bf16, true, LeanTokensFlat>
                                     : rope_lean_run_kernel<bf16, bf16, false, LeanTokensFlat>;
            names.push_back("flat lean run " + std::to_string(per) + "x320/SM");
            vs.push_back([&, flat_k, run] { CK(launch_lean_layout(flat_k, run, nullptr, ra)); });
          }
        }

        const size_t nq = t * kHq * d, nk = t * kHk * d;
        CK(cudaMemset(yq, 0xff, h.qn * 2));
        CK(cudaMemset(yk, 0xff, h.kn * 2));
        check(run_rope(ref_call, false, nullptr), "general");
        CK(cudaDeviceSynchronize());
        const std::string label = "B=" + std::to_string(batch) + (broadcast ? " broadcast" : "") +
                                  (gptj ? " gptj" : " neox") + " T=" + std::to_string(t);
        std::printf("\n%s (library: %s)\n", label.c_str(), plan_name(picked));
        check_variants(label.c_str(), names, vs, h, nq, nk, to_host16(yq, nq), to_host16(yk, nk));
        // The cache at the same positions (timing reference).
        RopePositions rp;
        rp.positions = TensorRef(pos_d, DType::kInt64, {batch, s}, {s, 1}, d0);
        RopeCosSin cache;
        cache.kind = CosSinKind::kCache;
        cache.cache = TensorRef::contiguous(cache_d, DType::kFloat32, {max_t, d}, d0);
        const float t_gen = time_med([&] { check(run_rope(ref_call, false, nullptr), "g"); }, true);
        std::printf("  cold: general %.2f us", t_gen);
        for (size_t vi = 0; vi < vs.size(); ++vi) {
          std::printf(" | %s %.2f", names[vi].c_str(), time_med(vs[vi], true));
        }
        std::printf(" | library on the cache at the positions %.2f us\n",
                    time_med(
                        [&] {
                          check(rope(call.q, call.k, call.q_out, call.k_out, rp, cache, prm),
                                "cache");
                        },
                        true));
      }
    }
  }
  return 0;
}
