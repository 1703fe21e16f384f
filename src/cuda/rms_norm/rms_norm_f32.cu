// RMSNorm kernel instantiations for f32 inputs: plain, and fused add with a f32 or f32 residual.
#include "cuda/rms_norm/rms_norm_typed.cuh"

namespace ropenorm::cuda {

ROPENORM_INSTANTIATE_RMS_NORM(float, NoResidual)
ROPENORM_INSTANTIATE_RMS_NORM(float, float)

}  // namespace ropenorm::cuda
