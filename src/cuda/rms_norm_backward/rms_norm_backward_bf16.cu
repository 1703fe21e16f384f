// RMSNorm backward kernel instantiations for bf16 inputs (x or s, and ds), with dy in each dtype.
#include "cuda/rms_norm_backward/rms_norm_backward_typed.cuh"

namespace ropenorm::cuda {

ROPENORM_INSTANTIATE_RMS_NORM_BACKWARD(bf16, float)
ROPENORM_INSTANTIATE_RMS_NORM_BACKWARD(bf16, f16)
ROPENORM_INSTANTIATE_RMS_NORM_BACKWARD(bf16, bf16)

}  // namespace ropenorm::cuda
