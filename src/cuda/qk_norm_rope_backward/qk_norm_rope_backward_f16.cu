// Fused QK-norm + RoPE backward kernel instantiations for f16 q/k (every vector width and slots
// per lane a head_dim <= 512 can need; weight dtype, cos/sin source and saved rstd through
// run-time switches).
#include "cuda/qk_norm_rope_backward/qk_norm_rope_backward_typed.cuh"

namespace ropenorm::cuda {

ROPENORM_INSTANTIATE_QK_NORM_ROPE_BACKWARD(f16)

}  // namespace ropenorm::cuda
