// Timing helpers shared by the launch-shape experiments (not part of the build): error check,
// L2 eviction by reading a 256 MiB buffer, CUDA-event medians (cold or warm L2), CUDA-graph
// replay medians, and the device-to-device copy bandwidth measured the same way.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                      \
  do {                                                             \
    cudaError_t e = (x);                                           \
    if (e != cudaSuccess) {                                        \
      printf("ERR %s line %d\n", cudaGetErrorString(e), __LINE__); \
      exit(1);                                                     \
    }                                                              \
  } while (0)

__global__ void flush_kernel(const float4* p, size_t n, float* out) {
  float acc = 0;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    acc += p[i].x;
  }
  if (acc == 12345.f) *out = acc;
}

/// The buffer whose read evicts the L2 (allocated on first use, which must not be inside a
/// stream capture), read on `stream`.
struct L2Flush {
  float4* buf = nullptr;
  size_t n = (size_t{256} << 20) / 16;
  float* dummy = nullptr;
  void operator()(cudaStream_t stream = nullptr) {
    if (buf == nullptr) {
      CK(cudaMalloc(&buf, n * 16));
      CK(cudaMemset(buf, 0, n * 16));
      CK(cudaMalloc(&dummy, 4));
    }
    flush_kernel<<<1024, 256, 0, stream>>>(buf, n, dummy);
  }
};
inline L2Flush flush;

/// Median of iters timings of f() (after 3 warm-up runs), in us; cold: the L2 is evicted
/// before every run.
template <class F>
float time_med(F f, bool cold, int iters = 15) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<float> v;
  for (int i = 0; i < iters + 3; ++i) {
    if (cold) flush();
    cudaEventRecord(e0);
    f();
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    if (i >= 3) v.push_back(ms * 1000.f);
  }
  CK(cudaGetLastError());
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Median over 10 replays of a graph of n calls f(stream), per call, in us.
template <class F>
float time_graph(F f, int n = 50) {
  cudaStream_t s;
  cudaStreamCreate(&s);
  cudaGraph_t g;
  cudaGraphExec_t ge;
  const int N = n;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
  for (int i = 0; i < N; ++i) f(s);
  cudaStreamEndCapture(s, &g);
  CK(cudaGraphInstantiate(&ge, g, 0));
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<float> v;
  for (int i = 0; i < 13; ++i) {
    cudaEventRecord(e0, s);
    cudaGraphLaunch(ge, s);
    cudaEventRecord(e1, s);
    cudaEventSynchronize(e1);
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    if (i >= 3) v.push_back(ms * 1000.f / N);
  }
  CK(cudaGetLastError());
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Device-to-device copy bandwidth (read + write) of a bytes-sized cudaMemcpy, cold L2, GB/s.
inline double copy_bandwidth_gbps(size_t bytes) {
  void *c0, *c1;
  CK(cudaMalloc(&c0, bytes));
  CK(cudaMalloc(&c1, bytes));
  const float us =
      time_med([&] { cudaMemcpyAsync(c1, c0, bytes, cudaMemcpyDeviceToDevice); }, true, 9);
  CK(cudaFree(c0));
  CK(cudaFree(c1));
  return 2.0 * static_cast<double>(bytes) / us / 1e3;
}
