// RoPE kernel instantiations for bf16 q/k (every vector width, every cos/sin source and dtype).
#include "cuda/rope/rope_typed.cuh"

namespace ropenorm::cuda {

ROPENORM_INSTANTIATE_ROPE(bf16)

}  // namespace ropenorm::cuda
