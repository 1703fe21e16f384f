// RMSNorm kernel instantiations for bf16 inputs: plain, and fused add with a bf16 or f32 residual.
#include "cuda/rms_norm/rms_norm_typed.cuh"

namespace ropenorm::cuda {

ROPENORM_INSTANTIATE_RMS_NORM(bf16, NoResidual)
ROPENORM_INSTANTIATE_RMS_NORM(bf16, bf16)
ROPENORM_INSTANTIATE_RMS_NORM(bf16, float)

}  // namespace ropenorm::cuda
