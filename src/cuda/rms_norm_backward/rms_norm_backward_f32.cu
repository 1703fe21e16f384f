// RMSNorm backward kernel instantiations for f32 inputs (x or s, and ds), with dy in each dtype.
#include "cuda/rms_norm_backward/rms_norm_backward_typed.cuh"

namespace ropenorm::cuda {

ROPENORM_INSTANTIATE_RMS_NORM_BACKWARD(float, float)
ROPENORM_INSTANTIATE_RMS_NORM_BACKWARD(float, f16)
ROPENORM_INSTANTIATE_RMS_NORM_BACKWARD(float, bf16)

}  // namespace ropenorm::cuda
