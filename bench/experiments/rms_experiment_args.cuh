// Kernel arguments and input draws of contiguous bf16 RMSNorm rows for the RMSNorm launch
// experiments (not part of the build).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/row_layout.h"
#include "cuda/common/dtype.cuh"
#include "cuda/rms_norm/rms_norm_args.h"
#include "ropenorm/status.h"
#include "ropenorm/tensor.h"

namespace ropenorm::cuda {

// Kernel arguments of the rows [M, N] (contiguous, dtype dt, bf16 unless given) x -> y with
// weight w (same dtype), eps 1e-6, exact rounding; with a residual r (written back to ro) when r
// is not null.
inline RmsNormKernelArgs make_args(void* x, void* w, void* y, void* r, void* ro, int64_t M,
                                   int64_t N, DType dt = DType::kBFloat16) {
  RmsNormKernelArgs a{};
  a.x = x;
  a.weight = w;
  a.y = y;
  a.rstd = nullptr;
  a.x_rows = core::make_row_layout(TensorRef::contiguous(x, dt, {M, N}, Device::cuda(0)));
  a.y_rows = a.x_rows;
  if (r != nullptr) {
    a.residual = r;
    a.residual_out = ro;
    a.r_rows = a.x_rows;
    a.ro_rows = a.x_rows;
  }
  a.m = M;
  a.n = N;
  a.w_dtype = dt;
  a.y_dtype = dt;
  a.eps = 1e-6f;
  a.w_offset = 0.f;
  a.rounding = Rounding::kExact;
  a.weight_vec = true;
  return a;
}

/// Stops the experiment with the library's message when a call failed.
inline void require_ok(const Status& st) {
  if (!st.ok()) {
    printf("%s\n", st.message().c_str());
    exit(1);
  }
}

/// bf16 bit patterns from an xorshift64 generator (state s, advanced): magnitudes within 256
/// ulps of 0.5 (0x3f00), a random sign when `signs`.
inline void fill_bf16_bits(std::vector<uint16_t>& h, uint64_t& s, bool signs) {
  for (auto& e : h) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    e = static_cast<uint16_t>(0x3f00 + (s >> 40) % 512 - 256 +
                              (signs && ((s >> 20) & 1) ? 0x8000 : 0));
  }
}

}  // namespace ropenorm::cuda
