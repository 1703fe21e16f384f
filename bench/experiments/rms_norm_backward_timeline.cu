// RMSNorm backward timeline experiment (H200): where the plain call's per-launch time goes, and
// what summing the partial rows inside the row kernel would save.
//
// Question: at M = 4096 N = 4096 (bf16, saved rstd) the public call takes about 35 us against
// 25 for a copy of its bytes; about 5 us of it was put down to the ring's start and drain and
// about 3 us to the column sum (docs/performance.md), without a measurement that splits them.
//
// 1. Timeline. The library's plain ring instance (its plan, its grid) is built a second time
//    with a probe (the kernel's Probe parameter; the library's BwdNoProbe compiles to nothing)
//    whose thread 0 of each block records %globaltimer at the kernel's BwdPoints: entry, after
//    the wait for the previous kernel, after the weight staging's barrier, after the first row,
//    after the last row, after the partial row's store (and clock64 beside each, for spans
//    within an SM free of the global timer's tick); and the block's SM. Launched with
//    programmatic dependent launch after the L2 flush, as the library launches it. Per run the
//    times are taken from the first block released by its wait; the medians over the runs of
//    each statistic are printed, and the SMs most often among a run's ten latest to finish (a
//    slow SM that stays slow from run to run would show there). Within each SM: the spread
//    between its blocks' last rows, and how often its earliest block is its lowest-numbered one
//    (whether the SM favours its lowest-numbered block); for the last row count given,
//    the last run's blocks per SM with their last rows.
// 2. In-kernel column sum. The same instance with a probe whose after_partials waits at a grid
//    barrier (cooperative launch: the persistent grid is resident by construction; the probe
//    records when each block leaves the barrier) and then sums
//    the partial rows into dw in the same kernel: a block takes 8-column chunks (2 lanes per 32
//    byte sector), its threads' slices of the partial rows are loaded before they are added, then
//    a warp butterfly and the block's warps in order: a fixed order, so dw is the same run to
//    run (its grouping differs from the column sum kernel's, so its bits may differ from the
//    library's in a few columns).
//
// 3. A pattern kernel: the row kernel's traffic in its row order with no arithmetic (dx = dy ^ x,
//    checked against the host), on the library's grid and on one block per row, timed and
//    recorded the same way: whether a kernel that does nothing but move the rows spreads its
//    blocks' finish times as the row kernel does.
//
// 4. Splits by wave (WaveSplitProbe): an SM's lower-numbered blocks were seen to finish their
//    rows first, and most SMs (116 of 132 on an H200 and an H100) hold one block of each wave
//    (blockIdx / SMs). Each SM slot's rows are cut into one run per wave by shares: even, and
//    larger for the earlier waves. Checked (dx bit for bit against the public call's; dw against
//    it, which sums other groupings of rows, and against a second run) and timed with the column
//    sum beside the library's split, with their timelines.
//
// Timed (cold-L2 CUDA-event medians): the public call; the library's instance alone and with the
// library's column sum (both launched with PDL), and with the column sum over only one partial
// row per SM (timing only: what the sum would cost if an SM's blocks handed in one row); the
// timeline instance alone (the probe's cost); the cooperative instance with its in-kernel sum.
// Checked on poisoned outputs: every variant's dx bit for bit against the public call's, the
// cooperative dw against the public call's (values differing, largest difference over max |dw|) and
// against its own second run (bit for bit).
//
// Not part of the build:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 -Iinclude -Isrc -Ibench/experiments \
//        bench/experiments/rms_norm_backward_timeline.cu build/libropenorm.a \
//        -o rms_norm_backward_timeline
// Arguments: row counts (default 1024 4096 32768), N = 4096. At 4 rows per SM or fewer the
// public call takes the lean kernel instead (core::kBwdLeanMaxRowsPerSm): the program says so.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "backward_experiment.cuh"
#include "core/rms_norm_backward_plan.h"
#include "cuda/common/column_sum.h"
#include "cuda/common/launch.h"
#include "cuda/common/pdl.cuh"
#include "cuda/rms_norm_backward/rms_norm_backward_kernels.cuh"
#include "experiment_compare.cuh"
#include "experiment_timing.cuh"
#include "reference/host_float.h"

using namespace ropenorm;
namespace kern = ropenorm::cuda;  // ::cuda is libcu++'s (through cooperative_groups.h)
using kern::BwdPoint;

namespace {

// Per block: the BwdPoints, then (in-kernel sum) after the grid barrier and after the sum.
constexpr int kPoints = static_cast<int>(BwdPoint::kCount);
constexpr int kBarrier = kPoints;
constexpr int kSummed = kPoints + 1;
constexpr int kMarks = kPoints + 2;
constexpr int64_t kN = 4096;

__device__ unsigned long long* g_marks;   // [grid][kMarks], %globaltimer ns
__device__ unsigned long long* g_clocks;  // [grid][kMarks], the SM's clock64
__device__ unsigned* g_smid;              // [grid]
__device__ __nv_bfloat16* g_dw;           // the in-kernel sum's output

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ void record(int slot) {
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * kMarks + slot;
    g_clocks[i] = clock64();
    g_marks[i] = global_ns();
    if (slot == 0) {
      unsigned sm;
      asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
      g_smid[blockIdx.x] = sm;
    }
  }
}

struct TimelineProbe : kern::BwdNoProbe {
  __device__ __forceinline__ static void mark(BwdPoint p) { record(static_cast<int>(p)); }
};

__device__ int g_waves;           // the wave split's waves (blocks per SM)
__device__ float g_share_cut[4];  // wave w takes the share from g_share_cut[w] to [w + 1]

/// Rows split by wave: the grid is g_waves waves of units / g_waves slots (a wave: unit / slots,
/// mostly one block on each SM); slot s's rows s, s + slots, ... are cut into
/// g_waves runs, wave w taking those from index n * g_share_cut[w] (rounded down) to the next
/// wave's start (n of them in all). Even shares balance the blocks' row counts as the library's
/// split does; larger shares for the earlier waves hand their blocks more rows.
struct WaveSplitProbe : TimelineProbe {
  static constexpr bool kSplitsRows = true;
  __device__ __forceinline__ static kern::BwdRowSpan rows(const kern::RmsNormBwdKernelArgs& a,
                                                          int64_t unit, int64_t units) {
    // 32-bit arithmetic (the experiment's rows and grids are far below 2^31): with int64
    // divisions the blocks reached their staged weights 2.5-3.4 k cycles later (H100).
    const int waves = g_waves;
    const int slots = static_cast<int>(units) / waves;
    const int u = static_cast<int>(unit), m = static_cast<int>(a.m);
    const int w = u / slots;
    const int s = u - w * slots;
    const int n = s < m ? (m - s + slots - 1) / slots : 0;
    const float fn = static_cast<float>(n);
    const int lo = static_cast<int>(fn * g_share_cut[w]);
    const int hi = w + 1 == waves ? n : static_cast<int>(fn * g_share_cut[w + 1]);
    return {s + int64_t{lo} * slots, slots, s + int64_t{hi} * slots};
  }
};

/// dw[c] = sum over the grid's partial rows, after a grid barrier (see the file comment).
/// Needs n % 8 == 0, 16-byte aligned partial rows and a block of whole warps (blockDim.y 1).
__device__ void in_kernel_column_sum(const kern::RmsNormBwdKernelArgs& a) {
  cooperative_groups::this_grid().sync();
  record(kBarrier);
  // The warps' sums in the kernel's dynamic shared memory (the ring is drained by now), so the
  // instance keeps the library's shared memory and residency.
  extern __shared__ __align__(16) unsigned char smem[];
  float(*warp_sums)[8] = reinterpret_cast<float(*)[8]>(smem);
  const int t = threadIdx.x;
  const int lane = t % 32, warp = t / 32, warps = blockDim.x / 32;
  const int half = lane & 1;  // which 4 columns of the chunk
  const int slice = t >> 1;   // partial rows slice, slice + slices, ...
  const int slices = blockDim.x >> 1;
  const int64_t parts = gridDim.x;
  for (int64_t chunk = blockIdx.x; chunk * 8 < a.n; chunk += gridDim.x) {
    const int64_t col = chunk * 8 + half * 4;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    constexpr int kBatch = 8;
    for (int64_t p = slice; p < parts; p += int64_t{kBatch} * slices) {
      float4 v[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        if (p + u * slices < parts) {
          v[u] = __ldcg(reinterpret_cast<const float4*>(a.partials + (p + u * slices) * a.n + col));
        }
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        if (p + u * slices < parts) {
          acc[0] += v[u].x;
          acc[1] += v[u].y;
          acc[2] += v[u].z;
          acc[3] += v[u].w;
        }
      }
    }
#pragma unroll
    for (int m = 2; m < 32; m *= 2) {
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], m);
    }
    if (lane < 2) {
#pragma unroll
      for (int i = 0; i < 4; ++i) warp_sums[warp][lane * 4 + i] = acc[i];
    }
    __syncthreads();
    if (t < 8) {
      float total = warp_sums[0][t];
      for (int w = 1; w < warps; ++w) total += warp_sums[w][t];
      g_dw[chunk * 8 + t] = __float2bfloat16_rn(total);
    }
    __syncthreads();
  }
  record(kSummed);
}

/// The timeline's marks, and the partial rows summed in the kernel after them.
struct CoopSumProbe : TimelineProbe {
  __device__ __forceinline__ static void after_partials(const kern::RmsNormBwdKernelArgs& a) {
    in_kernel_column_sum(a);
  }
};

/// The row kernel's traffic in its row order with no arithmetic: block b takes rows b, b + grid,
/// ... of dy and x (thread t their 16-byte vectors t, t + T, ...: the ring instance's columns)
/// and writes dx = dy ^ x, the next row's loads issued before the current row's stores (two rows
/// in flight per block, in registers). On the library's grid it shows whether the blocks' finish
/// times spread as the row kernel's do; on a grid of one block per row the hardware hands out the
/// rows. Records the timeline's points (no staging: kStaged at the release).
template <int K>
__global__ void __launch_bounds__(128) rows_pattern_kernel(const kern::RmsNormBwdKernelArgs a) {
  using P = TimelineProbe;
  P::mark(BwdPoint::kEntry);
  kern::griddep_wait();
  P::mark(BwdPoint::kWaited);
  kern::griddep_launch_dependents();
  P::mark(BwdPoint::kStaged);
  const int64_t vecs = a.n / 8;
  const uint4* dy = static_cast<const uint4*>(a.dy);
  const uint4* x = static_cast<const uint4*>(a.x);
  uint4* dx = static_cast<uint4*>(a.dx);
  uint4 cy[K], cx[K], ny[K], nx[K];
  int64_t row = blockIdx.x;
  auto load = [&](int64_t r, uint4(&ly)[K], uint4(&lx)[K]) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      ly[k] = dy[r * vecs + threadIdx.x + k * blockDim.x];
      lx[k] = x[r * vecs + threadIdx.x + k * blockDim.x];
    }
  };
  if (row < a.m) load(row, cy, cx);
  for (int it = 0; row < a.m; ++it) {
    const int64_t next = row + gridDim.x;
    if (next < a.m) load(next, ny, nx);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      dx[row * vecs + threadIdx.x + k * blockDim.x] =
          make_uint4(cy[k].x ^ cx[k].x, cy[k].y ^ cx[k].y, cy[k].z ^ cx[k].z, cy[k].w ^ cx[k].w);
      cy[k] = ny[k];
      cx[k] = nx[k];
    }
    if (it == 0) P::mark(BwdPoint::kFirstRow);
    row = next;
  }
  P::mark(BwdPoint::kRowsDone);
  P::mark(BwdPoint::kStored);
}

/// The largest |v| of bf16 values (v) and the largest |a - b| of two sets of them.
double max_abs_bf16(const std::vector<uint16_t>& v) {
  double m = 0.0;
  for (uint16_t x : v) m = std::max(m, std::fabs(ref::bf16_bits_to_double(x)));
  return m;
}
double max_abs_diff_bf16(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    m = std::max(m, std::fabs(ref::bf16_bits_to_double(a[i]) - ref::bf16_bits_to_double(b[i])));
  }
  return m;
}

using Kernel = void (*)(kern::RmsNormBwdKernelArgs);
using kern::bf16;
constexpr int kVpt = core::kBwdPlainDeepVpt;
constexpr int kStages = core::kBwdPlainDeepStages;
const Kernel kLibrary =
    kern::rms_norm_bwd_rows_kernel<bf16, bf16, 8, kVpt, kStages, false, false, true>;
const Kernel kTimeline = kern::rms_norm_bwd_rows_kernel<bf16, bf16, 8, kVpt, kStages, false, false,
                                                        true, false, TimelineProbe>;
const Kernel kPattern = rows_pattern_kernel<4>;
const Kernel kCoop = kern::rms_norm_bwd_rows_kernel<bf16, bf16, 8, kVpt, kStages, false, false,
                                                    true, false, CoopSumProbe>;
const Kernel kWaveSplit = kern::rms_norm_bwd_rows_kernel<bf16, bf16, 8, kVpt, kStages, false, false,
                                                         true, false, WaveSplitProbe>;

/// Shares of the three waves tried by the wave split (even first).
const float kWaveShares[][3] = {{1.0f / 3, 1.0f / 3, 1.0f / 3},
                                {0.340f, 1.0f / 3, 0.327f},
                                {0.347f, 1.0f / 3, 0.320f},
                                {0.354f, 1.0f / 3, 0.313f},
                                {0.361f, 1.0f / 3, 0.306f}};

void set_wave_shares(const float (&share)[3]) {
  const int waves = 3;
  const float cut[4] = {0.0f, share[0], share[0] + share[1], 1.0f};
  CK(cudaMemcpyToSymbol(g_waves, &waves, sizeof(waves)));
  CK(cudaMemcpyToSymbol(g_share_cut, cut, sizeof(cut)));
}

/// The library's plan for the plain bf16 call on rows of kN (the ring the instances above are).
core::RmsNormBwdPlan library_plan() {
  core::RmsNormBwdPlan p = core::plan_rms_norm_backward_ds(kN, 8, true, true, 4, 0, false, true);
  p = core::bwd_plain_plan(p, 2, kern::device_smem_per_sm(),
                           kern::device_smem_reserved_per_block());
  if (p.path != core::RmsNormBwdPath::kBlockPerRow || p.vpt != kVpt || p.stages != kStages) {
    std::printf("the library's plain plan is not the instance built here (vpt %d, stages %d)\n",
                p.vpt, p.stages);
    std::exit(1);
  }
  return p;
}

int resident(Kernel k, const core::RmsNormBwdPlan& p) {
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          static_cast<int>(p.smem_bytes)));
  int r = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&r, k, p.threads, p.smem_bytes));
  return r;
}

/// How a variant is launched: with PDL (as the library), cooperative (the grid barrier of the
/// in-kernel sum), or cooperative with PDL.
enum class Launch { kPdl, kCoop, kCoopPdl };

/// Launches k on `grid` blocks of the plan's shape; returns the launch's error.
cudaError_t try_launch(Kernel k, const kern::RmsNormBwdKernelArgs& a, const core::RmsNormBwdPlan& p,
                       int64_t grid, Launch how) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(grid));
  cfg.blockDim = dim3(p.threads);
  cfg.dynamicSmemBytes = static_cast<size_t>(p.smem_bytes);
  cudaLaunchAttribute attr[2];
  int n = 0;
  if (how != Launch::kPdl) {
    attr[n].id = cudaLaunchAttributeCooperative;
    attr[n++].val.cooperative = 1;
  }
  if (how != Launch::kCoop) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  cfg.attrs = attr;
  cfg.numAttrs = n;
  return cudaLaunchKernelEx(&cfg, k, a);
}

void launch(Kernel k, const kern::RmsNormBwdKernelArgs& a, const core::RmsNormBwdPlan& p,
            int64_t grid, Launch how) {
  CK(try_launch(k, a, p, grid, how));
}

/// One run's timeline statistics, in print order: us from the first block released by its wait
/// (globaltimer), in-SM spans in thousands of clock64 cycles (kcyc).
using Timeline = std::vector<std::pair<std::string, double>>;

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

/// Per SM: its blocks (blockIdx, us of the last row), in blockIdx order.
using SmBlocks = std::map<unsigned, std::vector<std::pair<int64_t, double>>>;

/// The run's statistics; `late` receives the SMs of the 10 latest-finishing (kStored) SMs, and
/// `per_sm_detail` (where given) each SM's blocks and their last rows.
Timeline summarise(const std::vector<unsigned long long>& marks,
                   const std::vector<unsigned long long>& clocks, const std::vector<unsigned>& sm,
                   int64_t grid, bool summed, std::vector<unsigned>* late,
                   SmBlocks* per_sm_detail) {
  auto at = [&](int64_t b, int slot) { return static_cast<double>(marks[b * kMarks + slot]); };
  auto cyc = [&](int64_t b, int from, int to) {
    return static_cast<double>(clocks[b * kMarks + to] - clocks[b * kMarks + from]) / 1e3;
  };
  constexpr int kW = static_cast<int>(BwdPoint::kWaited), kS = static_cast<int>(BwdPoint::kStaged);
  constexpr int kF = static_cast<int>(BwdPoint::kFirstRow);
  constexpr int kR = static_cast<int>(BwdPoint::kRowsDone);
  constexpr int kP = static_cast<int>(BwdPoint::kStored);
  double t0 = at(0, kW);
  for (int64_t b = 0; b < grid; ++b) t0 = std::min(t0, at(b, kW));
  auto rel = [&](int64_t b, int slot) { return (at(b, slot) - t0) / 1e3; };
  std::vector<double> entry, waited, staged, first, done, stored, barrier, sum_end;
  std::vector<double> c_staging, c_first, c_rows, c_store;
  std::map<unsigned, double> sm_done;
  double resolution = 1e30;
  for (int64_t b = 0; b < grid; ++b) {
    entry.push_back(rel(b, 0));
    waited.push_back(rel(b, kW));
    staged.push_back(rel(b, kS));
    first.push_back(rel(b, kF));
    done.push_back(rel(b, kR));
    stored.push_back(rel(b, kP));
    c_staging.push_back(cyc(b, kW, kS));
    c_first.push_back(cyc(b, kS, kF));
    c_rows.push_back(cyc(b, kF, kR));
    c_store.push_back(cyc(b, kR, kP));
    if (summed) {
      barrier.push_back(rel(b, kBarrier));
      sum_end.push_back(rel(b, kSummed));
    }
    sm_done[sm[b]] = std::max(sm_done[sm[b]], rel(b, kP));
    for (int s = 1; s <= kP; ++s) {
      const double d = at(b, s) - at(b, s - 1);
      if (d > 0) resolution = std::min(resolution, d);
    }
  }
  std::vector<std::pair<double, unsigned>> by_done;
  std::vector<double> per_sm;
  for (const auto& kv : sm_done) {
    per_sm.push_back(kv.second);
    by_done.push_back({kv.second, kv.first});
  }
  // Within each SM: its blocks' last rows (in blockIdx order), the spread between its earliest
  // and latest, and whether its earliest is its lowest-numbered block (the SM favouring it).
  std::map<unsigned, std::vector<std::pair<int64_t, double>>> sm_blocks;
  for (int64_t b = 0; b < grid; ++b) sm_blocks[sm[b]].push_back({b, rel(b, kR)});
  std::vector<double> sm_spread, sm_first, sm_last;
  int lowest_first = 0, multi = 0;
  for (const auto& kv : sm_blocks) {
    const auto& v = kv.second;
    if (v.size() < 2) continue;
    ++multi;
    auto early = std::min_element(v.begin(), v.end(),
                                  [](const auto& l, const auto& r) { return l.second < r.second; });
    auto late_b = std::max_element(
        v.begin(), v.end(), [](const auto& l, const auto& r) { return l.second < r.second; });
    sm_spread.push_back(late_b->second - early->second);
    sm_first.push_back(early->second);
    sm_last.push_back(late_b->second);
    if (early == v.begin()) ++lowest_first;
  }
  if (per_sm_detail != nullptr) *per_sm_detail = sm_blocks;
  std::sort(by_done.rbegin(), by_done.rend());
  late->clear();
  for (size_t i = 0; i < by_done.size() && i < 10; ++i) late->push_back(by_done[i].second);
  Timeline t = {
      {"entry min", quantile(entry, 0)},
      {"entry max", quantile(entry, 1)},
      {"released max", quantile(waited, 1)},
      {"staged med", quantile(staged, 0.5)},
      {"staged max", quantile(staged, 1)},
      {"first row med", quantile(first, 0.5)},
      {"first row max", quantile(first, 1)},
      {"last row min", quantile(done, 0)},
      {"last row p10", quantile(done, 0.1)},
      {"last row med", quantile(done, 0.5)},
      {"last row p90", quantile(done, 0.9)},
      {"last row max", quantile(done, 1)},
      {"stored max", quantile(stored, 1)},
      {"SM done min", quantile(per_sm, 0)},
      {"SM done med", quantile(per_sm, 0.5)},
      {"SM done max", quantile(per_sm, 1)},
      {"staging kcyc med", quantile(c_staging, 0.5)},
      {"first row kcyc med", quantile(c_first, 0.5)},
      {"rows kcyc med", quantile(c_rows, 0.5)},
      {"rows kcyc max", quantile(c_rows, 1)},
      {"store kcyc med", quantile(c_store, 0.5)},
      {"resolution ns", resolution},
  };
  if (multi > 0) {
    t.push_back({"in-SM spread med", quantile(sm_spread, 0.5)});
    t.push_back({"in-SM spread max", quantile(sm_spread, 1)});
    t.push_back({"SM earliest block med", quantile(sm_first, 0.5)});
    t.push_back({"SM latest block med", quantile(sm_last, 0.5)});
    t.push_back({"SMs whose lowest block is earliest %", 100.0 * lowest_first / multi});
  }
  if (summed) {
    t.push_back({"barrier min", quantile(barrier, 0)});
    t.push_back({"barrier max", quantile(barrier, 1)});
    t.push_back({"summed max", quantile(sum_end, 1)});
  }
  return t;
}

void print_timelines(const char* name, const std::vector<Timeline>& runs,
                     const std::map<unsigned, int>& late_count) {
  std::printf(
      "  %s, median of %zu cold runs (us from the first block's release; kcyc: "
      "thousands of the SM's cycles):\n   ",
      name, runs.size());
  for (size_t i = 0; i < runs[0].size(); ++i) {
    std::vector<double> v;
    for (const auto& r : runs) v.push_back(r[i].second);
    std::printf(" %s %.3f;", runs[0][i].first.c_str(), quantile(v, 0.5));
    if (i % 6 == 5) std::printf("\n   ");
  }
  std::vector<std::pair<int, unsigned>> counts;
  for (const auto& kv : late_count) counts.push_back({kv.second, kv.first});
  std::sort(counts.rbegin(), counts.rend());
  std::printf("\n    SMs most often among a run's 10 latest to finish (SM: runs):");
  for (size_t i = 0; i < counts.size() && i < 8; ++i) {
    std::printf(" %u: %d", counts[i].second, counts[i].first);
  }
  std::printf("\n");
}

/// Prints the timelines of `runs` cold launches of k launched `how` after the flush.
void timelines(const char* name, Kernel k, const kern::RmsNormBwdKernelArgs& a,
               const core::RmsNormBwdPlan& p, int64_t grid, Launch how,
               unsigned long long* marks_dev, unsigned long long* clocks_dev, unsigned* sm_dev,
               int runs, bool detail = false) {
  std::vector<Timeline> out;
  std::map<unsigned, int> late_count;
  std::vector<unsigned long long> marks(static_cast<size_t>(grid) * kMarks), clocks(marks.size());
  std::vector<unsigned> sm(static_cast<size_t>(grid)), late;
  SmBlocks blocks;
  for (int i = 0; i < runs + 2; ++i) {
    CK(cudaMemset(marks_dev, 0, marks.size() * sizeof(marks[0])));
    flush();
    launch(k, a, p, grid, how);
    CK(cudaDeviceSynchronize());
    if (i < 2) continue;
    CK(cudaMemcpy(marks.data(), marks_dev, marks.size() * 8, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(clocks.data(), clocks_dev, clocks.size() * 8, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(sm.data(), sm_dev, sm.size() * sizeof(unsigned), cudaMemcpyDeviceToHost));
    const bool last = i == runs + 1;
    out.push_back(
        summarise(marks, clocks, sm, grid, how != Launch::kPdl, &late, last ? &blocks : nullptr));
    for (unsigned s : late) ++late_count[s];
  }
  print_timelines(name, out, late_count);
  if (detail) {
    std::printf("    the last run per SM (block: us of its last row):\n");
    for (const auto& kv : blocks) {
      std::printf("     SM %3u:", kv.first);
      for (const auto& bt : kv.second) {
        std::printf(" %lld: %.1f", static_cast<long long>(bt.first), bt.second);
      }
      std::printf("\n");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> ms;
  for (int i = 1; i < argc; ++i) ms.push_back(std::atoll(argv[i]));
  if (ms.empty()) ms = {1024, 4096, 32768};
  for (int64_t m : ms) {
    if (m < 1 || m > 32768) {
      std::printf("row counts 1 .. 32768, got %lld\n", static_cast<long long>(m));
      return 1;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device\n");
    return 1;
  }
  const core::RmsNormBwdPlan p = library_plan();
  const int sms = kern::device_sm_count();
  const int r_lib = resident(kLibrary, p), r_tl = resident(kTimeline, p), r_co = resident(kCoop, p);
  const int r_pat = resident(kPattern, p);  // the ring's shared memory: as many blocks per SM
  const int r_split = resident(kWaveSplit, p);
  if (p.threads * 4 * 8 != kN) {
    std::printf("the pattern kernel's 4 vectors per thread do not cover a row\n");
    return 1;
  }
  std::printf(
      "plain bf16 ring, N = %lld: %d x %d, %d stages, %lld B shared; resident blocks per "
      "SM: library %d, timeline %d, in-kernel sum %d, pattern %d, wave split %d; %d SMs\n",
      static_cast<long long>(kN), p.threads, p.vpt, p.stages, static_cast<long long>(p.smem_bytes),
      r_lib, r_tl, r_co, r_pat, r_split, sms);
  const BwdBuffers b = alloc_bwd_buffers(32768, kN);
  unsigned long long *marks_dev, *clocks_dev;
  unsigned* sm_dev;
  // The marks of the largest grid: the pattern kernel's one block per row at 32768 rows.
  const int64_t max_grid = std::max<int64_t>(int64_t{r_lib} * sms, 32768);
  CK(cudaMalloc(&marks_dev, static_cast<size_t>(max_grid) * kMarks * 8));
  CK(cudaMalloc(&clocks_dev, static_cast<size_t>(max_grid) * kMarks * 8));
  CK(cudaMalloc(&sm_dev, static_cast<size_t>(max_grid) * 4));
  void* coop_dw;
  CK(cudaMalloc(&coop_dw, kN * 2));
  CK(cudaMemcpyToSymbol(g_marks, &marks_dev, sizeof(marks_dev)));
  CK(cudaMemcpyToSymbol(g_clocks, &clocks_dev, sizeof(clocks_dev)));
  CK(cudaMemcpyToSymbol(g_smid, &sm_dev, sizeof(sm_dev)));
  CK(cudaMemcpyToSymbol(g_dw, &coop_dw, sizeof(coop_dw)));
  RmsNormBackwardParams bp;
  bp.eps = 1e-6f;

  for (int64_t m : ms) {
    const BwdShape sh = bwd_shape(b.x, b.w, b.rstd, b.dx, b.ws, b.ws_bytes, b.dw, m, kN);
    const size_t count = static_cast<size_t>(m) * kN;
    const kern::RmsNormBwdKernelArgs a =
        bwd_args(b.dy, b.x, nullptr, b.w, b.rstd, b.dx, nullptr, b.ws, m, kN);
    const int64_t grid = core::bwd_grid(m, kN, p, r_lib, sms);
    if (m <= core::kBwdLeanMaxRowsPerSm * int64_t{sms}) {
      std::printf(
          "\nM = %lld: the public call takes the lean kernel at this row count, not the "
          "ring instance timed beside it\n",
          static_cast<long long>(m));
    }
    auto pub = [&] {
      check(rms_norm_backward(rows(b.dy, DType::kBFloat16, m, kN), sh.x, sh.w, sh.rstd,
                              rows(b.dx, DType::kBFloat16, m, kN), sh.dw, sh.ws, bp),
            "backward");
    };
    auto with_sum = [&](Kernel k, int64_t parts) {
      launch(k, a, p, grid, Launch::kPdl);
      check(kern::launch_column_sum("timeline", a.partials, parts, kN, DType::kBFloat16, b.dw,
                                    nullptr),
            "column sum");
    };
    // Outputs: the public call's dx and dw, then each variant's dx (and the in-kernel dw) on
    // poisoned buffers.
    CK(cudaMemset(b.dx, 0xff, count * 2));
    CK(cudaMemset(b.dw, 0xff, kN * 2));
    pub();
    CK(cudaDeviceSynchronize());
    const std::vector<uint16_t> dx_ref = device_values(b.dx, count);
    const std::vector<uint16_t> dw_ref = device_values(b.dw, kN);
    auto dx_of_vs = [&](const std::vector<uint16_t>& ref, auto&& run) {
      CK(cudaMemset(b.dx, 0xff, count * 2));
      run();
      CK(cudaDeviceSynchronize());
      return differing(ref, device_values(b.dx, count));
    };
    auto dx_of = [&](auto&& run) { return dx_of_vs(dx_ref, run); };
    CK(cudaMemset(b.dw, 0xff, kN * 2));  // so the library instance's dw is its own
    const size_t d_lib = dx_of([&] { with_sum(kLibrary, grid); });
    const std::vector<uint16_t> dw_lib = device_values(b.dw, kN);
    const size_t d_tl = dx_of([&] { launch(kTimeline, a, p, grid, Launch::kPdl); });
    const bool coop_fits = r_co * int64_t{sms} >= grid && kN % 8 == 0;
    size_t d_co = 0, dw_co_differ = 0, dw_co_rerun = 0;
    const double dw_max = max_abs_bf16(dw_ref);
    double dw_co_err = 0.0;
    if (coop_fits) {
      CK(cudaMemset(coop_dw, 0xff, kN * 2));
      d_co = dx_of([&] { launch(kCoop, a, p, grid, Launch::kCoop); });
      const std::vector<uint16_t> dw_co = device_values(coop_dw, kN);
      CK(cudaMemset(coop_dw, 0xff, kN * 2));
      launch(kCoop, a, p, grid, Launch::kCoop);
      CK(cudaDeviceSynchronize());
      dw_co_rerun = differing(dw_co, device_values(coop_dw, kN));
      dw_co_differ = differing(dw_ref, dw_co);
      dw_co_err = max_abs_diff_bf16(dw_ref, dw_co);
    }
    std::printf(
        "\nM = %lld (grid %lld): dx values differing from the public call's: library "
        "instance %zu, timeline %zu, in-kernel sum %s%zu; dw: library instance %zu "
        "differing",
        static_cast<long long>(m), static_cast<long long>(grid), d_lib, d_tl,
        coop_fits ? "" : "(not run) ", d_co, differing(dw_ref, dw_lib));
    if (coop_fits) {
      std::printf(
          ", in-kernel sum %zu differing (largest %.3g of max |dw| %.3g), %zu differing "
          "between two of its runs",
          dw_co_differ, dw_co_err / dw_max, dw_max, dw_co_rerun);
    }
    std::printf("\n");
    // The pattern kernel's dx against dy ^ x on the host, on the library's grid and on one block
    // per row.
    const std::vector<uint16_t> dy_h = device_values(b.dy, count), x_h = device_values(b.x, count);
    std::vector<uint16_t> want(count);
    for (size_t i = 0; i < count; ++i) want[i] = static_cast<uint16_t>(dy_h[i] ^ x_h[i]);
    const size_t d_pat = dx_of_vs(want, [&] { launch(kPattern, a, p, grid, Launch::kPdl); });
    const size_t d_pat_rows = dx_of_vs(want, [&] { launch(kPattern, a, p, m, Launch::kPdl); });
    std::printf(
        "  pattern kernel: %zu dx values differing from dy ^ x on the library's grid, %zu "
        "on one block per row\n",
        d_pat, d_pat_rows);
    const float t_pub = time_med(pub, true);
    const float t_lib = time_med([&] { launch(kLibrary, a, p, grid, Launch::kPdl); }, true);
    const float t_sum = time_med([&] { with_sum(kLibrary, grid); }, true);
    // The column sum over one partial row per SM (timing only: dw is not the call's): what the
    // sum would cost if an SM's blocks handed in one partial row between them.
    const float t_sum_sm = time_med([&] { with_sum(kLibrary, sms); }, true);
    const float t_tl = time_med([&] { launch(kTimeline, a, p, grid, Launch::kPdl); }, true);
    const float t_co =
        coop_fits ? time_med([&] { launch(kCoop, a, p, grid, Launch::kCoop); }, true) : 0.f;
    // Cooperative with PDL: timed where the runtime takes the pair of attributes.
    float t_cp = 0.f;
    cudaError_t cp_err = cudaErrorNotSupported;
    if (coop_fits) {
      cp_err = try_launch(kCoop, a, p, grid, Launch::kCoopPdl);
      cudaGetLastError();
      CK(cudaDeviceSynchronize());
      if (cp_err == cudaSuccess) {
        t_cp = time_med([&] { launch(kCoop, a, p, grid, Launch::kCoopPdl); }, true);
      }
    }
    std::printf(
        "  cold-L2 medians: public %.2f us; library instance alone %.2f, with the column "
        "sum %.2f (over one partial row per SM: %.2f); timeline instance %.2f; in-kernel sum "
        "%.2f (cooperative), ",
        t_pub, t_lib, t_sum, t_sum_sm, t_tl, t_co);
    if (cp_err == cudaSuccess) {
      std::printf("%.2f (cooperative + PDL)\n", t_cp);
    } else {
      std::printf("cooperative + PDL not launched: %s\n", cudaGetErrorString(cp_err));
    }
    const float t_pat = time_med([&] { launch(kPattern, a, p, grid, Launch::kPdl); }, true);
    const float t_pat_rows = time_med([&] { launch(kPattern, a, p, m, Launch::kPdl); }, true);
    std::printf("  pattern kernel: %.2f us on the library's grid, %.2f on one block per row\n",
                t_pat, t_pat_rows);
    timelines("timeline instance (PDL after the flush)", kTimeline, a, p, grid, Launch::kPdl,
              marks_dev, clocks_dev, sm_dev, 15, m == ms.back());
    if (coop_fits) {
      timelines("in-kernel sum (cooperative)", kCoop, a, p, grid, Launch::kCoop, marks_dev,
                clocks_dev, sm_dev, 15);
    }
    timelines("pattern kernel on the library's grid", kPattern, a, p, grid, Launch::kPdl, marks_dev,
              clocks_dev, sm_dev, 15);
    timelines("pattern kernel, one block per row", kPattern, a, p, m, Launch::kPdl, marks_dev,
              clocks_dev, sm_dev, 15);

    // 4. Splits by wave: each share set's dx against the public call's, its dw against the
    // public call's and against its own second run, its time with the column sum (two rounds,
    // each beside the library's instance with the column sum), and its timeline.
    if (grid != int64_t{3} * sms) {
      std::printf("  wave splits not run: the grid is not 3 blocks per SM\n");
      continue;
    }
    constexpr size_t kSplits = sizeof(kWaveShares) / sizeof(kWaveShares[0]);
    for (size_t i = 0; i < kSplits; ++i) {
      set_wave_shares(kWaveShares[i]);
      CK(cudaMemset(b.dw, 0xff, kN * 2));
      const size_t d_dx = dx_of([&] { with_sum(kWaveSplit, grid); });
      const std::vector<uint16_t> dw_s = device_values(b.dw, kN);
      CK(cudaMemset(b.dw, 0xff, kN * 2));
      with_sum(kWaveSplit, grid);
      CK(cudaDeviceSynchronize());
      const size_t d_rerun = differing(dw_s, device_values(b.dw, kN));
      const double err = max_abs_diff_bf16(dw_ref, dw_s);
      std::printf(
          "  wave split %.3f / %.3f / %.3f: dx values differing from the public call's %zu; dw "
          "%zu differing (largest %.3g of max |dw| %.3g), %zu differing between two of its "
          "runs\n",
          kWaveShares[i][0], kWaveShares[i][1], kWaveShares[i][2], d_dx, differing(dw_ref, dw_s),
          err / dw_max, dw_max, d_rerun);
    }
    std::vector<std::vector<float>> t_split(kSplits);
    std::vector<float> t_base;
    for (int round = 0; round < 2; ++round) {
      t_base.push_back(time_med([&] { with_sum(kLibrary, grid); }, true, 31));
      for (size_t i = 0; i < kSplits; ++i) {
        set_wave_shares(kWaveShares[i]);
        t_split[i].push_back(time_med([&] { with_sum(kWaveSplit, grid); }, true, 31));
      }
    }
    std::printf("  cold-L2 medians with the column sum, two rounds: library split %.2f / %.2f us",
                t_base[0], t_base[1]);
    for (size_t i = 0; i < kSplits; ++i) {
      std::printf("; wave split %.3f / %.3f / %.3f %.2f / %.2f", kWaveShares[i][0],
                  kWaveShares[i][1], kWaveShares[i][2], t_split[i][0], t_split[i][1]);
    }
    std::printf("\n");
    for (size_t i = 0; i < kSplits; ++i) {
      set_wave_shares(kWaveShares[i]);
      char name[96];
      std::snprintf(name, sizeof(name), "wave split %.3f / %.3f / %.3f", kWaveShares[i][0],
                    kWaveShares[i][1], kWaveShares[i][2]);
      timelines(name, kWaveSplit, a, p, grid, Launch::kPdl, marks_dev, clocks_dev, sm_dev, 15);
    }
  }
  return 0;
}
