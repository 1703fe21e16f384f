// RoPE kernel instantiations for f16 q/k (every vector width, every cos/sin source and dtype).
#include "cuda/rope/rope_typed.cuh"

namespace ropenorm::cuda {

ROPENORM_INSTANTIATE_ROPE(f16)

}  // namespace ropenorm::cuda
