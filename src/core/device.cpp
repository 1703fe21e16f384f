// The CUDA device a call runs on (the calling thread's current device).
#include <cuda_runtime_api.h>

#include <string>

#include "core/checks.h"

namespace ropenorm::core {

Status current_device(const char* op, int* device) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    cudaGetLastError();
    return Status(StatusCode::kDeviceError,
                  std::string(op) + ": no CUDA device is available (" +
                      (err != cudaSuccess ? cudaGetErrorString(err) : "device count 0") + ")");
  }
  err = cudaGetDevice(device);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Status(StatusCode::kDeviceError,
                  std::string(op) + ": cudaGetDevice failed: " + cudaGetErrorString(err));
  }
  return Status::Ok();
}

}  // namespace ropenorm::core
