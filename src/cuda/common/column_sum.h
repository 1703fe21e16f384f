// Deterministic column sums of fp32 partials: the second stage of every weight-gradient
// reduction (RMSNorm dw, QK-norm + RoPE dwq / dwk).
//
// Ownership: thread c of the launch owns column c; it adds the partial rows 0, 1, ..., parts-1 of
// that column in this fixed order in fp32 and writes one rounded value. No atomics, so the result
// is bitwise the same from run to run for the same partials.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "ropenorm/status.h"
#include "ropenorm/tensor.h"

namespace ropenorm::cuda {

/// out[c] = round_to(out_dtype, sum_{p = 0}^{parts - 1} partials[p * cols + c]), summed in fp32 in
/// the order p = 0, 1, ... . `partials` is [parts, cols] contiguous fp32 on the device; `out` is
/// [cols] contiguous f32, f16 or bf16. Launches on `stream`; `op` names the calling op in errors
/// (an unsupported out_dtype, a failed launch).
Status launch_column_sum(const char* op, const float* partials, int64_t parts, int64_t cols,
                         DType out_dtype, void* out, cudaStream_t stream);

}  // namespace ropenorm::cuda
