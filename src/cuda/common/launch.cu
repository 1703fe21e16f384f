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

int device_sm_count() {
  static std::map<int, int> cache;
  int dev = 0;
  cudaGetDevice(&dev);
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = cache.find(dev);
  if (it != cache.end()) return it->second;
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms < 1) {
    cudaGetLastError();
    sms = 1;
  }
  cache[dev] = sms;
  return sms;
}

int device_cc_major() {
  static std::map<int, int> cache;
  int dev = 0;
  cudaGetDevice(&dev);
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = cache.find(dev);
  if (it != cache.end()) return it->second;
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
    cudaGetLastError();
    major = 0;
  }
  cache[dev] = major;
  return major;
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
