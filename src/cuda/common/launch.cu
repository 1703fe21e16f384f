// Launch helpers (see launch.h): small caches behind a mutex.
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <tuple>

#include "cuda/common/launch.h"

namespace ropenorm::cuda {

namespace {
std::mutex g_mu;
}  // namespace

namespace {

// One attribute of the current device, read once per device.
int cached_attribute(cudaDeviceAttr attr, int fallback) {
  static std::map<std::pair<int, int>, int> cache;
  int dev = 0;
  cudaGetDevice(&dev);
  std::lock_guard<std::mutex> lock(g_mu);
  const auto key = std::make_pair(dev, static_cast<int>(attr));
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  int value = 0;
  if (cudaDeviceGetAttribute(&value, attr, dev) != cudaSuccess) {
    cudaGetLastError();
    value = fallback;
  }
  cache[key] = value;
  return value;
}

}  // namespace

int device_sm_count() {
  const int sms = cached_attribute(cudaDevAttrMultiProcessorCount, 1);
  return sms < 1 ? 1 : sms;
}

int device_cc_major() { return cached_attribute(cudaDevAttrComputeCapabilityMajor, 0); }

int device_smem_per_sm() {
  return cached_attribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0);
}

int device_smem_reserved_per_block() {
  return cached_attribute(cudaDevAttrReservedSharedMemoryPerBlock, 0);
}

int blocks_per_sm(const void* func, int threads, size_t dynamic_smem) {
  static std::map<std::tuple<int, const void*, int, size_t>, int> cache;
  int dev = 0;
  cudaGetDevice(&dev);
  const auto key = std::make_tuple(dev, func, threads, dynamic_smem);
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  int nb = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, func, threads, dynamic_smem) !=
          cudaSuccess ||
      nb < 1) {
    cudaGetLastError();
    nb = 1;
  }
  cache[key] = nb;
  return nb;
}

int allow_dynamic_smem(const void* func, size_t bytes) {
  static std::map<std::pair<int, const void*>, size_t> raised;
  int dev = 0;
  cudaGetDevice(&dev);
  std::lock_guard<std::mutex> lock(g_mu);
  auto& have = raised[std::make_pair(dev, func)];
  if (have >= bytes) return cudaSuccess;
  const cudaError_t e = cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(bytes));
  if (e == cudaSuccess) have = bytes;
  return static_cast<int>(e);
}

}  // namespace ropenorm::cuda
