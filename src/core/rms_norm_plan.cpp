// Launch planning for the RMSNorm kernels (see rms_norm_plan.h).
#include "core/rms_norm_plan.h"

namespace ropenorm::core {

const char* rms_norm_path_name(RmsNormPath path) {
  switch (path) {
    case RmsNormPath::kWarpPerRow:
      return "warp_per_row";
    case RmsNormPath::kBlockPerRow:
      return "block_per_row";
    case RmsNormPath::kTwoPass:
      return "two_pass";
  }
  return "unknown-path";
}

int rms_norm_vector_width(int64_t n, int x_elem_size, std::initializer_list<AccessFacts> tensors) {
  const int v = max_vector_width(x_elem_size);
  if (n % v != 0) return kScalarWidth;
  for (const AccessFacts& t : tensors) {
    if (t.data == nullptr) continue;
    const int64_t bytes = static_cast<int64_t>(v) * t.elem_size;
    const int64_t align = bytes < 16 ? bytes : 16;
    if (reinterpret_cast<uintptr_t>(t.data) % static_cast<uintptr_t>(align) != 0) {
      return kScalarWidth;
    }
    for (int d = 0; d < t.rows.nd; ++d) {
      if (t.rows.strides[d] % v != 0) return kScalarWidth;
    }
  }
  return v;
}

static int round_up(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b * b); }

RmsNormPlan plan_rms_norm(int64_t n, int vec) {
  RmsNormPlan p;
  p.vec = vec;
  const int64_t nvec = (n + vec - 1) / vec;
  if (nvec <= kWarpMaxVectors) {
    p.path = RmsNormPath::kWarpPerRow;
    p.threads = 32;
    p.vpt = nvec <= 32 ? 1 : (nvec <= 64 ? 2 : 4);
    p.rows_per_block = 4;
    return p;
  }
  // Block per row: aim for about 256 threads, each holding vpt vectors in registers.
  int max_vpt = kMaxRegElems / vec;
  if (max_vpt > kMaxVpt) max_vpt = kMaxVpt;
  int vpt = 1;
  while (vpt < max_vpt && nvec > static_cast<int64_t>(256) * vpt) vpt *= 2;
  while (vpt < max_vpt && nvec > static_cast<int64_t>(1024) * vpt) vpt *= 2;
  if (nvec > static_cast<int64_t>(1024) * vpt) {
    p.path = RmsNormPath::kTwoPass;
    p.vpt = 1;
    p.threads = kTwoPassThreads;
    return p;
  }
  p.path = RmsNormPath::kBlockPerRow;
  p.vpt = vpt;
  p.threads = round_up((nvec + vpt - 1) / vpt, 32);
  return p;
}

}  // namespace ropenorm::core
