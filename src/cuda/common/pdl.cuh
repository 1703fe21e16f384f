// Programmatic dependent launch (sm_90+): a kernel launched with the PDL attribute may start
// while the previous kernel on the stream is still running; it must wait (griddep_wait) before
// touching global memory that kernel may write. Everything before the wait (index math, shared
// memory setup) overlaps the previous kernel's tail. On older targets both calls are no-ops and
// launches carry no attribute.
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/launch.h"

namespace ropenorm::cuda {

/// Waits until the preceding kernel in the stream has completed and its writes are visible.
__device__ __forceinline__ void griddep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

/// Lets the next kernel in the stream begin launching (it still waits for this one's completion
/// in its own griddep_wait).
__device__ __forceinline__ void griddep_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

/// Launches kernel<<<grid, block, smem, stream>>>(args...) with programmatic stream
/// serialisation on devices of compute capability 9.0 or newer; the kernel must call
/// griddep_wait() before its first global memory access.
template <typename... Params, typename... Args>
cudaError_t launch_with_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                            cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = device_cc_major() >= 9 ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

}  // namespace ropenorm::cuda
