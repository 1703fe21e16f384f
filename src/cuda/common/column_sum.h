// Deterministic column sums of fp32 partials: the second stage of every weight-gradient
// reduction (RMSNorm dw, QK-norm + RoPE dwq / dwk).
//
// Ownership: a block of 512 threads (of grid row blockIdx.y: one target) owns 8 column groups
// of CV consecutive columns (CV = 4, read as one 16-byte vector per partial row, when the column
// count is a multiple of 4 and the partials are 16-byte aligned; else 1). Thread t belongs to
// group t % 8 and slice t / 8 (64 slices) and adds the partial rows s, s + 64, s + 128, ... of
// its group's columns in that order in fp32. The 4 slices of a warp are then added by a fixed
// butterfly (lane bits 3 and 4), the warps' sums go through shared memory, and one thread per
// column adds the 16 warp sums in warp order and writes the rounded value. A column's order
// depends only on `parts` (not on CV, so not on the partials' alignment, nor on timing), and
// there are no atomics, so the result is bitwise the same from run to run for the same partials.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ropenorm/status.h"
#include "ropenorm/tensor.h"

namespace ropenorm::cuda {

/// out[c] = round_to(out_dtype, sum_{p = 0}^{parts - 1} partials[p * cols + c]), summed in fp32 in
/// the fixed order of the file comment. `partials` is [parts, cols] contiguous fp32 on the device;
/// `out` is [cols] contiguous f32, f16 or bf16. Launched on `stream` with programmatic dependent
/// launch where the device has it (it waits for the preceding kernel before reading the partials);
/// `op` names the calling op in errors (an unsupported out_dtype, a failed launch). parts = 0
/// writes zeros.
Status launch_column_sum(const char* op, const float* partials, int64_t parts, int64_t cols,
                         DType out_dtype, void* out, cudaStream_t stream);

/// launch_column_sum for count (1 or 2) targets of the same shape and output dtype in one launch
/// (grid y picks the target): out[i][c] from partials[i], each summed exactly as alone.
Status launch_column_sums(const char* op, const float* const* partials, void* const* out, int count,
                          int64_t parts, int64_t cols, DType out_dtype, cudaStream_t stream);

}  // namespace ropenorm::cuda
