// Deterministic column sums of fp32 partials: the second stage of every weight-gradient
// reduction (RMSNorm dw, QK-norm + RoPE dwq / dwk).
//
// Ownership: a block owns 32 consecutive columns; its thread (slice j, lane l) owns column
// 32 * blockIdx.x + l and the partial rows j, j + 8, j + 16, ... of it, which it adds in that
// order in fp32; slice 0 then adds the 8 slice sums in the order j = 0 .. 7 and writes one
// rounded value. The order depends only on `parts`, never on timing, and there are no atomics, so
// the result is bitwise the same from run to run for the same partials.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "ropenorm/status.h"
#include "ropenorm/tensor.h"

namespace ropenorm::cuda {

/// out[c] = round_to(out_dtype, sum_{p = 0}^{parts - 1} partials[p * cols + c]), summed in fp32 in
/// the fixed order of the file comment. `partials` is [parts, cols] contiguous fp32 on the device; `out` is
/// [cols] contiguous f32, f16 or bf16. Launches on `stream`; `op` names the calling op in errors
/// (an unsupported out_dtype, a failed launch).
Status launch_column_sum(const char* op, const float* partials, int64_t parts, int64_t cols,
                         DType out_dtype, void* out, cudaStream_t stream);

}  // namespace ropenorm::cuda
