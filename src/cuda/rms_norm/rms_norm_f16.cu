// RMSNorm kernel instantiations for f16 inputs: plain, and fused add with a f16 or f32 residual.
#include "cuda/rms_norm/rms_norm_typed.cuh"

namespace ropenorm::cuda {

ROPENORM_INSTANTIATE_RMS_NORM(f16, NoResidual)
ROPENORM_INSTANTIATE_RMS_NORM(f16, f16)
ROPENORM_INSTANTIATE_RMS_NORM(f16, float)

}  // namespace ropenorm::cuda
