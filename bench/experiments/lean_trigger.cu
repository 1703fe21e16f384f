// Early launch trigger on the lean kernels (H200): does letting the next kernel on the stream
// launch right after griddep_wait (griddep_launch_dependents; the kernels' kTrigger) shorten
// what the main job times?
//  1. QK-norm + RoPE decode (bf16 q [T, 32, 128], k [T, 8, 128], neox, f32 cache of T rows,
//     random int64 positions, rstd saved, as the main job's rows; T = 1, 8, 64): the public
//     call, the decode instance (LeanDecode<kInt64>) without and with the trigger, and a kernel
//     running the lean kernel's per-thread work (qk_norm_rope_lean_thread) with the trigger
//     before the wait. Graph replay with 20 launches per graph (the main job's) and 50
//     (decode.cu's).
//  2. Lean runs (T = 32768, 65536, cold L2; the library's plan for the call): RoPE forward alone,
//     and the forward followed by the inverse rotation of its output (the main job's rope
//     forward + backward row), each kernel without or with the trigger; QK-norm + RoPE forward
//     alone and followed by the same inverse RoPE launch.
// Every variant's outputs (and saved rstd) are compared bit for bit with the public call's. Any
// argument: the decode rows only. Logs: bench/results/lean-trigger-*-nvidia-h200.log (the first
// run's decode rows also timed a copy with the full warp mask on the butterfly: slower, 1.71
// against 1.69 us at T = 1; taken out). Not part of the build:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 -Iinclude -Isrc \
//        bench/experiments/lean_trigger.cu build/libropenorm.a -o lean_trigger
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/qk_norm_rope_plan.h"
#include "core/qk_norm_rope_validate.h"
#include "core/rope_plan.h"
#include "core/rope_validate.h"
#include "cuda/common/dtype.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/qk_norm_rope/qk_norm_rope_host.h"
#include "cuda/qk_norm_rope/qk_norm_rope_kernels.cuh"
#include "cuda/qk_norm_rope/qk_norm_rope_lean_kernel.cuh"
#include "cuda/rope/rope_host.h"
#include "cuda/rope/rope_lean_kernels.cuh"
#include "cuda/rope/rope_lean_run.cuh"
#include "decode_inputs.cuh"
#include "experiment_timing.cuh"
#include "ropenorm/qk_norm_rope.h"
#include "ropenorm/rope.h"

using namespace ropenorm;
using namespace ropenorm::cuda;

namespace {

constexpr int kD = 128, kHq = 32, kHk = 8;
using Dec = LeanDecode<LeanPositions::kInt64>;

/// The lean kernel's body in the decode instance with the trigger issued before griddep_wait
/// (the next kernel may launch as soon as this one runs; it still waits for its completion).
__global__ void __launch_bounds__(Dec::kMaxThreads)
    qk_decode_trigger_first(const QkNormRopeArgs args) {
  constexpr int g = Dec::kLanes;
  const int lane = (threadIdx.y * g + threadIdx.x) & 31;
  const unsigned mask = ((1u << g) - 1u) << (lane & ~(g - 1));
  griddep_launch_dependents();
  griddep_wait();
  qk_norm_rope_lean_thread<bf16, float, false, Dec>(args, g, mask);
}

}  // namespace

int main(int argc, char**) {
  const int64_t max_t = 65536;
  const size_t qn = max_t * kHq * kD, kn = max_t * kHk * kD;
  std::mt19937_64 rng(20261203);
  bf16 *q = device_bf16(random_bf16(rng, qn)), *k = device_bf16(random_bf16(rng, kn));
  bf16* w = device_bf16(random_bf16(rng, 2 * kD));
  bf16 *yq = device_bf16({}, qn), *yk = device_bf16({}, kn);
  bf16 *zq = device_bf16({}, qn), *zk = device_bf16({}, kn);
  float *rq, *rk;
  CK(cudaMalloc(&rq, max_t * kHq * 4));
  CK(cudaMalloc(&rk, max_t * kHk * 4));
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const Device dev = Device::cuda(0);
  std::printf("registers: decode instance %d, trigger first %d\n",
              regs_of(reinterpret_cast<const void*>(
                  qk_norm_rope_lean_kernel<bf16, float, false, Dec, false>)),
              regs_of(reinterpret_cast<const void*>(qk_decode_trigger_first)));
  std::vector<int64_t> runs = {1, 8, 64, 32768, 65536};
  if (argc > 1) runs.assign({1, 8, 64});  // any argument: the decode rows only
  for (int64_t t : runs) {
    const DeviceCosSin csd = device_cos_sin(rng, t, kD, t);
    auto view = [&](void* p, int64_t heads) {
      return TensorRef::contiguous(p, DType::kBFloat16, {t, heads, kD}, dev);
    };
    RopePositions rp;
    rp.positions = TensorRef::contiguous(csd.pos, DType::kInt64, {t}, dev);
    RopeCosSin cs;
    cs.kind = CosSinKind::kCache;
    cs.cache = TensorRef::contiguous(csd.cache, DType::kFloat32, {t, kD}, dev);
    RopeParams fwd, inv;
    inv.inverse = true;
    QkNormParams np;
    np.eps = 1e-6f;
    const TensorRef wq = TensorRef::contiguous(w, DType::kBFloat16, {kD}, dev);
    const TensorRef wk = TensorRef::contiguous(w + kD, DType::kBFloat16, {kD}, dev);
    const TensorRef rqv = TensorRef::contiguous(rq, DType::kFloat32, {t, kHq}, dev);
    const TensorRef rkv = TensorRef::contiguous(rk, DType::kFloat32, {t, kHk}, dev);
    const size_t nq = t * kHq * kD, nk = t * kHk * kD;

    // Library arguments of the QK call (q, k -> yq, yk, rstd saved) and the RoPE calls
    // (forward q, k -> yq, yk; inverse yq, yk -> zq, zk).
    const core::QkNormRopeCall qc =
        core::qk_norm_rope_call(view(q, kHq), view(k, kHk), wq, wk, view(yq, kHq), view(yk, kHk),
                                rqv, rkv, rp, cs, fwd, np);
    core::RopeGeometry qg;
    check(core::validate_qk_norm_rope(qc, -1, &qg), "validate qk");
    QkNormRopeArgs qa{};
    core::QkNormRopeFacts qf;
    fill_qk_norm_rope_args(qc, qg, &qa, &qf);
    qf.sm_count = sms;
    const core::QkNormRopePlan qplan = core::plan_qk_norm_rope(qf);
    auto rope_args = [&](const core::RopeCall& c) {
      core::RopeGeometry g;
      check(core::validate_rope(c, -1, &g), "validate rope");
      RopeKernelArgs ra{};
      fill_rope_args(c, g, &ra);
      const core::RopePlan p =
          core::plan_rope_call(rope_lean_facts(c, g, rope_access_width(c, g, ra)), true, sms);
      return std::make_pair(ra, p);
    };
    const core::RopeCall fc{view(q, kHq), view(k, kHk), view(yq, kHq), view(yk, kHk), rp, cs, fwd};
    const core::RopeCall ic{
        view(yq, kHq), view(yk, kHk), view(zq, kHq), view(zk, kHk), rp, cs, inv};
    const auto fwd_args = rope_args(fc), inv_args = rope_args(ic);
    const RopeKernelArgs &fa = fwd_args.first, &ia = inv_args.first;
    const core::RopePlan &fplan = fwd_args.second, &iplan = inv_args.second;

    // Poisons the outputs, runs f, returns the outputs (and rstd) as bits.
    auto outputs = [&](const std::function<void()>& f, bool rope_pair) {
      CK(cudaMemset(yq, 0xff, nq * 2));
      CK(cudaMemset(yk, 0xff, nk * 2));
      CK(cudaMemset(zq, 0xff, nq * 2));
      CK(cudaMemset(zk, 0xff, nk * 2));
      CK(cudaMemset(rq, 0xff, t * kHq * 4));
      CK(cudaMemset(rk, 0xff, t * kHk * 4));
      f();
      CK(cudaDeviceSynchronize());
      std::vector<uint32_t> bits;
      for (uint16_t v : to_host16(rope_pair ? zq : yq, nq)) bits.push_back(v);
      for (uint16_t v : to_host16(rope_pair ? zk : yk, nk)) bits.push_back(v);
      if (!rope_pair) {
        for (uint32_t v : to_host32(rq, t * kHq)) bits.push_back(v);
        for (uint32_t v : to_host32(rk, t * kHk)) bits.push_back(v);
      }
      return bits;
    };
    auto differ = [](const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
      size_t n = 0;
      for (size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
      return n;
    };
    auto qk_public = [&](cudaStream_t st) {
      check(qk_norm_rope(qc.rope.q, qc.rope.k, wq, wk, qc.rope.q_out, qc.rope.k_out, rqv, rkv, rp,
                         cs, fwd, np, st),
            "qk_norm_rope");
    };

    if (t <= 64) {
      const auto lean = core::plan_rope_lean(qf.rope);
      auto launch = [&](auto kernel) {
        return [&, kernel](cudaStream_t st) { CK(launch_lean_layout(kernel, lean, st, qa)); };
      };
      std::vector<std::string> names = {"public", "instance", "instance+trigger",
                                        "trigger before wait"};
      std::vector<std::function<void(cudaStream_t)>> fs = {
          qk_public, launch(qk_norm_rope_lean_kernel<bf16, float, false, Dec, false>),
          launch(qk_norm_rope_lean_kernel<bf16, float, false, Dec, true>),
          launch(qk_decode_trigger_first)};
      const auto ref = outputs([&] { qk_public(nullptr); }, false);
      size_t diff = 0;
      for (auto& f : fs) diff += differ(ref, outputs([&] { f(nullptr); }, false));
      std::printf("qk decode T=%lld (plan %s, %zu values differ in %zu runs):\n",
                  static_cast<long long>(t),
                  qplan.kernel == core::QkKernel::kLean ? "lean" : "other", diff, fs.size());
      for (int n : {20, 50}) {
        std::printf("  graph of %d:", n);
        for (size_t i = 0; i < fs.size(); ++i) {
          std::printf(" %s %.3f |", names[i].c_str(), time_graph(fs[i], n));
        }
        std::printf(" us\n");
      }
    } else {
      auto rope_fwd = [&](bool trig) {
        const auto kern = trig ? rope_lean_run_kernel<bf16, float, false, LeanRows, false, false,
                                                      core::kRopeLeanRunStages, true>
                               : rope_lean_run_kernel<bf16, float, false, LeanRows>;
        CK(launch_lean_layout(kern, fplan, nullptr, fa));
      };
      auto rope_inv = [&](bool trig) {
        const auto kern = trig ? rope_lean_run_kernel<bf16, float, false, LeanRows, false, false,
                                                      core::kRopeLeanRunStages, true>
                               : rope_lean_run_kernel<bf16, float, false, LeanRows>;
        CK(launch_lean_layout(kern, iplan, nullptr, ia));
      };
      auto qk_fwd = [&](bool trig) {
        const auto kern = trig ? qk_norm_rope_lean_run_kernel<bf16, float, false, LeanRowsI64<8>,
                                                              false, core::kRopeLeanRunStages, true>
                               : qk_norm_rope_lean_run_kernel<bf16, float, false, LeanRowsI64<8>>;
        CK(launch_lean_layout(kern, qplan.rope, nullptr, qa));
      };
      if (!fplan.lean_run || !iplan.lean_run || qplan.kernel != core::QkKernel::kLeanRun) {
        std::printf("T=%lld: the library does not plan lean runs here\n",
                    static_cast<long long>(t));
        return 1;
      }
      // Bits: RoPE pair against the public calls, QK forward against the public call.
      const auto ref_pair = outputs(
          [&] {
            check(rope(fc.q, fc.k, fc.q_out, fc.k_out, rp, cs, fwd), "rope");
            check(rope(ic.q, ic.k, ic.q_out, ic.k_out, rp, cs, inv), "rope inverse");
          },
          true);
      const auto ref_qk = outputs([&] { qk_public(nullptr); }, false);
      size_t diff = 0;
      for (bool tr : {false, true}) {
        diff += differ(ref_pair, outputs(
                                     [&] {
                                       rope_fwd(tr);
                                       rope_inv(tr);
                                     },
                                     true));
        diff += differ(ref_qk, outputs([&] { qk_fwd(tr); }, false));
      }
      std::printf("lean runs T=%lld cold (%zu values differ in 4 runs):\n",
                  static_cast<long long>(t), diff);
      for (int rep = 0; rep < 2; ++rep) {
        std::printf(
            "  rope fwd %.2f / +trigger %.2f | fwd+inv %.2f / fwd+trigger, inv %.2f / both "
            "+trigger %.2f | qk fwd %.2f / +trigger %.2f | qk fwd+rope inv %.2f / qk+trigger "
            "%.2f us\n",
            time_med([&] { rope_fwd(false); }, true), time_med([&] { rope_fwd(true); }, true),
            time_med(
                [&] {
                  rope_fwd(false);
                  rope_inv(false);
                },
                true),
            time_med(
                [&] {
                  rope_fwd(true);
                  rope_inv(false);
                },
                true),
            time_med(
                [&] {
                  rope_fwd(true);
                  rope_inv(true);
                },
                true),
            time_med([&] { qk_fwd(false); }, true), time_med([&] { qk_fwd(true); }, true),
            time_med(
                [&] {
                  qk_fwd(false);
                  rope_inv(false);
                },
                true),
            time_med(
                [&] {
                  qk_fwd(true);
                  rope_inv(false);
                },
                true));
      }
    }
    CK(cudaFree(csd.cache));
    CK(cudaFree(csd.pos));
  }
  return 0;
}
