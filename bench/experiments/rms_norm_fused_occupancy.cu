// RMSNorm fused add on wide rows (H200): how many rows per multiprocessor does the lean kernel
// need in flight? At e9ef477 (peers-add_rms_norm-e9ef477-*) Liger-Kernel's fused add ran
// N = 5120 ... 8192 at 99-101% of copy (M = 32768) where ropenorm's plan (the block ring from
// more than kMidRowsPerSm rows per multiprocessor, the lean kernel at 2 vectors per thread
// below) ran at 91-92%. Liger-Kernel's row is the lean kernel's early-weight form at 16 warps (two
// 16-byte vectors of x and of the residual per thread at 8192 columns); its register count is
// Triton's. The lean kernel at 512 x 2 takes 50 registers (44 in rms-fused-lean-87f1391-*'s copy):
// two blocks, two rows, per multiprocessor. This experiment runs the library's rms_norm_lean_kernel
// (kFused) with its register bound set by __launch_bounds__'s minimum blocks (kMinBlocks) and at
// 1024 threads (one vector per thread up to 8192 columns), against the public add_rms_norm call,
// which it must match bit for bit (y, s and the rstd: the same chunk_sum chunks at every split).
// bf16 (N = 4096 ... 8192) and f32 (N = 2560 ... 4096: the same 16-byte vectors per row) x,
// residual, weight, y and s, contiguous [M, N], out of place, rstd saved, eps 1e-6;
// CUDA-graph replay up to 512 rows, cold-L2 event medians above; the copy bandwidth of the same
// run. Per variant: registers, local memory (spills) and resident blocks per multiprocessor.
// Ownership as the lean kernel (rms_norm_kernels.cuh). Not part of the build:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 -Iinclude -Isrc -Ibench/experiments \
//        bench/experiments/rms_norm_fused_occupancy.cu build/libropenorm.a \
//        -o rms_norm_fused_occupancy
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda/common/dtype.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/rms_norm/rms_norm_kernels.cuh"
#include "experiment_timing.cuh"
#include "rms_experiment_args.cuh"
#include "ropenorm/rms_norm.h"
using namespace ropenorm;
using namespace ropenorm::cuda;

namespace {

using Kernel = void (*)(const RmsNormKernelArgs);

struct Variant {
  int vpt, max_threads, min_blocks;
  bool early;
  Kernel kernel;
};

template <typename T, int VPT, int kMaxT, int kMinB>
void add(std::vector<Variant>& out) {
  constexpr int V = 16 / sizeof(T);
  out.push_back(
      {VPT, kMaxT, kMinB, false, rms_norm_lean_kernel<T, V, VPT, false, true, kMaxT, kMinB>});
  out.push_back(
      {VPT, kMaxT, kMinB, true, rms_norm_lean_kernel<T, V, VPT, true, true, kMaxT, kMinB>});
}

template <typename T>
std::vector<Variant> variants() {
  std::vector<Variant> v;
  add<T, 1, 512, 0>(v);
  add<T, 1, 512, 3>(v);
  add<T, 1, 512, 4>(v);
  add<T, 1, 1024, 0>(v);
  add<T, 1, 1024, 1>(v);
  add<T, 1, 1024, 2>(v);
  add<T, 2, 512, 0>(v);
  add<T, 2, 512, 3>(v);
  add<T, 2, 512, 4>(v);
  return v;
}

struct Buffers {
  void *x, *r, *y, *s, *w;
  float* rstd;
};

// Every variant of element type T against the library on rows of the widths ns (dtype dt);
// returns the number of values differing from the library.
template <typename T>
size_t run(const Buffers& b, DType dt, std::initializer_list<int64_t> ns, double copy) {
  const char* dname = sizeof(T) == 2 ? "bf16" : "f32";
  const std::vector<Variant> vars = variants<T>();
  for (const Variant& v : vars) {
    cudaFuncAttributes fa;
    CK(cudaFuncGetAttributes(&fa, v.kernel));
    printf("variant %s vpt=%d bound=%4d min_blocks=%d early=%d regs=%2d local=%zu\n", dname, v.vpt,
           v.max_threads, v.min_blocks, v.early, fa.numRegs, fa.localSizeBytes);
  }
  constexpr int V = 16 / sizeof(T);
  constexpr size_t E = sizeof(T);
  size_t bad = 0;
  for (int64_t N : ns) {
    for (int64_t M : {1, 32, 512, 4096, 32768}) {
      RmsNormKernelArgs a = make_args(b.x, b.w, b.y, b.r, b.s, M, N, dt);
      a.rstd = b.rstd;
      const double bytes = 4.0 * M * N * E + M * 4.0;
      const bool graph = M <= 512;
      const size_t count = static_cast<size_t>(M * N) * E / 2;  // 16-bit words
      std::vector<uint16_t> ref_y(count), ref_s(count), out_y(count), out_s(count);
      std::vector<float> ref_r(M), out_r(M);
      auto time = [&](auto launch) {
        CK(cudaMemset(b.y, 0xff, count * 2));
        CK(cudaMemset(b.s, 0xff, count * 2));
        CK(cudaMemset(b.rstd, 0xff, M * 4));
        const float us = graph ? time_graph(launch) : time_med([&] { launch(0); }, true, 21);
        CK(cudaMemcpy(out_y.data(), b.y, count * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(out_s.data(), b.s, count * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(out_r.data(), b.rstd, M * 4, cudaMemcpyDeviceToHost));
        return us;
      };
      auto view = [&](void* p) { return TensorRef::contiguous(p, dt, {M, N}, Device::cuda(0)); };
      const TensorRef wt = TensorRef::contiguous(b.w, dt, {N}, Device::cuda(0));
      const TensorRef rt = TensorRef::contiguous(b.rstd, DType::kFloat32, {M}, Device::cuda(0));
      const float lib_us = time([&](cudaStream_t st) {
        require_ok(
            add_rms_norm(view(b.x), view(b.r), wt, view(b.y), view(b.s), rt, RmsNormParams{}, st));
      });
      ref_y = out_y;
      ref_s = out_s;
      ref_r = out_r;
      printf("%-24s %-4s M=%6ld N=%5ld %-10s %8.2f us %5.1f%% copy\n", "library", dname, (long)M,
             (long)N, graph ? "cuda_graph" : "cold_l2", lib_us, 100 * bytes / lib_us / 1e3 / copy);
      const int nvec = static_cast<int>(N / V);
      for (const Variant& v : vars) {
        const int threads = nvec / v.vpt;
        if (threads > v.max_threads || threads < 64 || nvec % v.vpt != 0 || threads % 32 != 0)
          continue;
        int per_sm = 0;
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, v.kernel, threads, 0));
        const unsigned grid = static_cast<unsigned>(M);
        const float us = time([&](cudaStream_t st) {
          CK(launch_with_pdl(v.kernel, dim3(grid), dim3(threads), 0, st, a));
        });
        size_t ndiff = 0;
        for (size_t i = 0; i < count; ++i) ndiff += (out_y[i] != ref_y[i]) + (out_s[i] != ref_s[i]);
        for (int64_t i = 0; i < M; ++i) ndiff += out_r[i] != ref_r[i];
        bad += ndiff;
        char name[64];
        snprintf(name, sizeof name, "lean%s b%d/%d", v.early ? " early" : "", v.max_threads,
                 v.min_blocks);
        printf(
            "%-24s %-4s M=%6ld N=%5ld %4dx%d %d/SM %8.2f us %5.1f%% copy %6.3fx lib  %zu differ\n",
            name, dname, (long)M, (long)N, threads, v.vpt, per_sm, us,
            100 * bytes / us / 1e3 / copy, lib_us / us, ndiff);
      }
    }
  }
  return bad;
}

}  // namespace

int main() {
  const size_t bytes = size_t{32768} * 8192 * 2;
  Buffers b;
  for (void** p : {&b.x, &b.r, &b.y, &b.s}) CK(cudaMalloc(p, bytes));
  CK(cudaMalloc(&b.w, 8192 * 4));
  CK(cudaMalloc(&b.rstd, 32768 * 4));
  const double copy = copy_bandwidth_gbps(size_t{1} << 30);
  printf("copy %.0f GB/s\n", copy);
  std::vector<uint16_t> hx(bytes / 2), hr(bytes / 2);
  uint64_t st = 88172645463325252ull;
  fill_bf16_bits(hx, st, true);
  fill_bf16_bits(hr, st, true);
  auto upload = [&](const std::vector<uint16_t>& xs, const std::vector<uint16_t>& rs, bool f32) {
    if (!f32) {
      CK(cudaMemcpy(b.x, xs.data(), bytes, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(b.r, rs.data(), bytes, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(b.w, xs.data() + 12345, 8192 * 2, cudaMemcpyHostToDevice));
      return;
    }
    // f32: the bf16 draws widened (bits << 16), the first half of them.
    std::vector<uint32_t> w32(bytes / 4);
    for (const auto& [dst, src] : {std::pair{b.x, &xs}, std::pair{b.r, &rs}}) {
      for (size_t i = 0; i < w32.size(); ++i) w32[i] = uint32_t{(*src)[i]} << 16;
      CK(cudaMemcpy(dst, w32.data(), bytes, cudaMemcpyHostToDevice));
    }
    for (size_t i = 0; i < 8192; ++i) w32[i] = uint32_t{xs[12345 + i]} << 16;
    CK(cudaMemcpy(b.w, w32.data(), 8192 * 4, cudaMemcpyHostToDevice));
  };
  upload(hx, hr, false);
  size_t bad = run<bf16>(b, DType::kBFloat16, {4096, 5120, 6144, 7168, 8192}, copy);
  upload(hx, hr, true);
  bad += run<float>(b, DType::kFloat32, {2560, 3072, 3584, 4096}, copy);
  printf("done: %zu values differing from the library\n", bad);
  return bad == 0 ? 0 : 1;
}
