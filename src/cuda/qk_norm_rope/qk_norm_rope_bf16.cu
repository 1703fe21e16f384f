// Fused QK-norm + RoPE kernel instantiations for bf16 q/k (slots per lane 1, 2, 4, 8; every weight
// dtype and cos/sin source through run-time switches).
#include "cuda/qk_norm_rope/qk_norm_rope_typed.cuh"

namespace ropenorm::cuda {

ROPENORM_INSTANTIATE_QK_NORM_ROPE(bf16)

}  // namespace ropenorm::cuda
