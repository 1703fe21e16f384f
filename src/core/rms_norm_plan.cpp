// Launch planning for the RMSNorm kernels (see rms_norm_plan.h).
#include "core/rms_norm_plan.h"

#include <algorithm>

namespace ropenorm::core {

const char* rms_norm_path_name(RmsNormPath path) {
  switch (path) {
    case RmsNormPath::kWarpPerRow:
      return "warp_per_row";
    case RmsNormPath::kBlockPerRow:
      return "block_per_row";
    case RmsNormPath::kTwoPass:
      return "two_pass";
    case RmsNormPath::kBlockRing:
      return "block_ring";
  }
  return "unknown-path";
}

namespace {

uintptr_t addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// Row r of t starts at an element index (its address over the element size) congruent modulo
// q = min(v, 16 / t's element size) to that of row r of x, for every r: the bases and each
// dimension's strides congruent. A v-element vector of t at a column where x's vector is
// 16-byte aligned is then aligned to q elements, i.e. to min(16, v * t's element size) bytes.
bool same_element_phase(const AccessFacts& t, const AccessFacts& x, int v) {
  const int q = std::min(v, 16 / t.elem_size);
  if (addr(t.data) % t.elem_size != 0 || addr(x.data) % x.elem_size != 0) return false;
  const auto base = [](const AccessFacts& f) {
    return static_cast<int64_t>(addr(f.data) / static_cast<uintptr_t>(f.elem_size));
  };
  if ((base(t) - base(x)) % q != 0) return false;
  if (t.rows.nd == x.rows.nd) {
    bool congruent = true;
    for (int d = 0; d < t.rows.nd; ++d) {
      congruent = congruent && t.rows.sizes[d] == x.rows.sizes[d] &&
                  (t.rows.strides[d] - x.rows.strides[d]) % q == 0;
    }
    if (congruent) return true;
  }
  for (int d = 0; d < t.rows.nd; ++d) {
    if (t.rows.strides[d] % q != 0) return false;
  }
  for (int d = 0; d < x.rows.nd; ++d) {
    if (x.rows.strides[d] % q != 0) return false;
  }
  return true;
}

// Every row of t starts on a 16-byte boundary (v elements of 16 / v bytes each).
bool rows_aligned(const AccessFacts& t, int v) {
  if (addr(t.data) % 16 != 0) return false;
  for (int d = 0; d < t.rows.nd; ++d) {
    if (t.rows.strides[d] % v != 0) return false;
  }
  return true;
}

int round_up(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b * b); }

// Ring depth and weight staging of a ring plan (p.vpt, p.threads set) for `slices` rows in
// flight per block within the shared-memory budget: the first of `depths` that fits, the weight
// staged when it fits. False when none fits.
bool fit_ring(RmsNormPlan& p, int64_t slices, int64_t n, int x_elem, int r_elem, bool has_weight,
              std::initializer_list<int> depths) {
  for (int stages : depths) {
    for (bool w_smem : {true, false}) {
      if (w_smem && !has_weight) continue;
      const int64_t bytes =
          ring_smem_bytes(n, w_smem, slices, p.vec, p.vpt, stages, p.threads, x_elem, r_elem);
      if (bytes <= kSmemBudget) {
        p.stages = stages;
        p.weight_in_smem = w_smem;
        p.smem_bytes = bytes;
        return true;
      }
    }
  }
  return false;
}

// Block ring plan for nvec vectors of a fused row: vectors per thread doubled (up to max_vpt)
// until kRingThreads threads hold the row, a kBlockRingStages-deep ring. False when the row
// needs more than kRowsMaxThreads threads or kRingMaxVectors vectors, or the ring does not fit.
bool plan_block_ring(int64_t n, int64_t nvec, int vec, int max_vpt, int x_elem, int r_elem,
                     bool has_weight, RmsNormPlan& p) {
  int vpt = 1;
  while (vpt < max_vpt && nvec > int64_t{kRingThreads} * vpt) vpt *= 2;
  const int threads = round_up((nvec + vpt - 1) / vpt, 32);
  if (threads > kRowsMaxThreads || int64_t{threads} * vpt > kRingMaxVectors) return false;
  p.path = RmsNormPath::kBlockRing;
  p.vec = vec;
  p.vpt = vpt;
  p.threads = threads;
  p.rows_per_block = 1;
  p.lean = false;
  return fit_ring(p, 1, n, x_elem, r_elem, has_weight, {kBlockRingStages});
}

}  // namespace

bool rms_norm_aligned_rows(const AccessFacts& x, int64_t n, int vec) {
  return vec > kScalarWidth && n % vec == 0 && rows_aligned(x, vec);
}

bool lean_row_layout(const AccessFacts& x, int64_t n, int vec,
                     std::initializer_list<AccessFacts> others) {
  if (vec <= kScalarWidth || n % vec != 0 || vec * x.elem_size != 16) return false;
  auto lean = [&](const AccessFacts& t) {
    return t.elem_size == x.elem_size && t.rows.nd <= 1 && rows_aligned(t, vec);
  };
  if (!lean(x)) return false;
  for (const AccessFacts& t : others) {
    if (!lean(t)) return false;
  }
  return true;
}

bool rms_norm_lean_rows(const LeanRowFacts& f, int vec) {
  if (!f.exact || !f.same_dtype || f.weight == nullptr || addr(f.weight) % 16 != 0) return false;
  // Without the fused add y stands in for r and ro.
  return lean_row_layout(f.x, f.n, vec, {f.y, f.fused ? f.r : f.y, f.fused ? f.ro : f.y});
}

int rms_norm_vector_width(const AccessFacts& x, std::initializer_list<AccessFacts> others) {
  const int v = max_vector_width(x.elem_size);
  for (const AccessFacts& t : others) {
    if (t.data != nullptr && !same_element_phase(t, x, v)) return kScalarWidth;
  }
  return v;
}

RmsNormPlan plan_rms_norm(int64_t n, int vec, int x_elem, int r_elem, bool has_weight, int64_t rows,
                          int sm_count, bool lean_rows, bool aligned_rows) {
  RmsNormPlan p;
  p.vec = vec;
  const int64_t nvec = (n + vec - 1) / vec;
  if (nvec <= kWarpMaxVectors) {
    p.path = RmsNormPath::kWarpPerRow;
    p.threads = 32;
    p.vpt = nvec <= 32 ? 1 : (nvec <= 64 ? 2 : 4);
    p.rows_per_block = 4;
  } else {
    // Block per row: each thread holds vpt vectors in registers. With many rows the bytes a
    // thread has in flight bound the bandwidth (measured on H200 at N = 4096: 128 x 4 reaches
    // 96% of copy, 256 x 2 70%), so vpt grows to kRowsAimVpt (half that with a residual, whose
    // values double the registers a vector needs) while at least kRowsMinThreads threads
    // remain, and further only when the row does not fit kRowsMaxThreads threads. With few
    // rows per SM a row's latency dominates and wider blocks finish it sooner (H200, N = 4096,
    // bf16, CUDA graphs: M = 1 in 2.01 us at 512 x 1 against 2.84 at 128 x 4; M = 512 in
    // 3.67 us at 256 x 2 against 4.01 at 128 x 4, while M = 4096 takes 25.1 us at 256 x 2 and
    // 21.9 at 128 x 4; docs/performance.md).
    int max_vpt = kMaxRegElems / vec;
    if (max_vpt > kMaxVpt) max_vpt = kMaxVpt;
    auto fits = [&](int vpt, int64_t threads) { return nvec <= threads * vpt; };
    int wide = 1;
    while (wide < max_vpt && !fits(wide, kRowsMaxThreads)) wide *= 2;
    if (!fits(wide, kRowsMaxThreads)) {
      p.path = RmsNormPath::kTwoPass;
      p.vpt = 1;
      p.threads = kTwoPassThreads;
      p.stages = 0;
      p.smem_bytes = 0;
      return p;
    }
    const int aim_vpt = r_elem > 0 ? kRowsAimVpt / 2 : kRowsAimVpt;
    int many = 1;
    while (many < max_vpt && many < aim_vpt && nvec >= 2 * many * int64_t{kRowsMinThreads}) {
      many *= 2;
    }
    if (many < wide) many = wide;
    int mid = wide;
    while (mid < many && !fits(mid, kMidThreads)) mid *= 2;
    const int64_t sms = sm_count > 0 ? sm_count : 1;
    const bool fused = r_elem > 0;
    // Lean rows hold the residual in x's dtype (rms_norm_lean_rows); r_elem == x_elem says so
    // for callers that pass lean_rows themselves.
    const bool fused_lean_rows = fused && lean_rows && r_elem == x_elem;
    // The fused add's lean kernel: the widest split at every row count (kLeanFusedMaxVpt), never
    // the block ring; 16-bit rows past kRowsMaxThreads vectors at one vector per thread on the
    // wide instance (kLeanFusedWideThreads), without the early weight.
    const bool fused_lean = fused_lean_rows && wide <= kLeanFusedMaxVpt;
    const bool fused_wide = fused_lean && x_elem == kLeanFusedWideElem && nvec > kRowsMaxThreads &&
                            nvec <= kLeanFusedWideThreads;
    if (aligned_rows && vec > kScalarWidth && fused && rows > kMidRowsPerSm * sms && !fused_lean) {
      RmsNormPlan ring;
      if (plan_block_ring(n, nvec, vec, max_vpt, x_elem, r_elem, has_weight, ring)) return ring;
    }
    const bool lean = fused ? fused_lean : lean_rows;
    const int64_t few_rows = (lean && wide == 1 ? kLeanFewRowsPerSm : kFewRowsPerSm) * sms;
    const int64_t mid_rows = (lean ? kLeanMidRowsPerSm : kMidRowsPerSm) * sms;
    const bool early =
        lean && !fused_wide && (fused || many <= kLeanMaxVpt) && rows <= kLeanEarlyRowsPerSm * sms;
    const int vpt = fused_wide   ? 1
                    : fused_lean ? wide
                    : early      ? many
                                 : (rows <= few_rows ? wide : (rows <= mid_rows ? mid : many));
    // The direct kernel: registers only, no shared-memory ring, weight read from global memory.
    p.path = RmsNormPath::kBlockPerRow;
    p.vpt = vpt;
    p.lean = lean && vpt <= kLeanMaxVpt;
    p.early_weight = early;
    p.threads = round_up((nvec + vpt - 1) / vpt, 32);
    p.stages = 0;
    p.weight_in_smem = false;
    p.smem_bytes = 0;
    return p;
  }
  // Warp path: ring depth and weight staging within the shared-memory budget, deepest first.
  if (fit_ring(p, p.rows_per_block, n, x_elem, r_elem, has_weight, {4, 2})) return p;
  p.path = RmsNormPath::kTwoPass;
  p.vpt = 1;
  p.threads = kTwoPassThreads;
  p.rows_per_block = 1;
  p.stages = 0;
  p.weight_in_smem = false;
  p.smem_bytes = 0;
  return p;
}

}  // namespace ropenorm::core
