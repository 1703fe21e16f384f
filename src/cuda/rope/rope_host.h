// Host-side pieces shared by the launchers of the RoPE-based ops (rope, qk_norm_rope).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/rope_plan.h"
#include "core/rope_validate.h"
#include "cuda/rope/rope_args.h"
#include "ropenorm/status.h"
#include "ropenorm/tensor.h"

namespace ropenorm::cuda {

/// Stride of dim d, or 0 when the dim has a single index (it then never restricts alignment).
int64_t used_stride(const TensorRef& t, int d);

/// Kernel operand of a [T, H, D] or [B, S, H, D] view (3-D: the batch stride is 0).
RopeOperand rope_operand(const TensorRef& t);

/// Checked mode: reads the positions (or sequence offsets) back on stream s, synchronising it,
/// and checks every token's position against the table; errors name `op` and the argument.
Status check_positions_on_host(const char* op, const core::RopeCall& c, const core::RopeGeometry& g,
                               cudaStream_t s);

/// Fills the operands, geometry, positions and cos/sin source of the kernel arguments of a
/// validated call (the fields every RoPE-based kernel reads).
void fill_rope_args(const core::RopeCall& c, const core::RopeGeometry& g, RopeKernelArgs* a);

/// Widest vector (in q's elements) every operand of a validated call allows: q, k and their
/// outputs (bases and strides) and the cos/sin tables (see core::rope_vector_width); 1 is the
/// scalar path.
int rope_access_width(const core::RopeCall& c, const core::RopeGeometry& g,
                      const RopeKernelArgs& a);

/// The facts core::rope_lean (and the lean backward's rule) decide from, for a validated call
/// whose operands allow vector width vec.
core::RopeLeanFacts rope_lean_facts(const core::RopeCall& c, const core::RopeGeometry& g, int vec);

}  // namespace ropenorm::cuda
