// Timing on the device (see bench_timing.h).
#include <algorithm>
#include <string>
#include <vector>

#include "bench_timing.h"
#include "core/checks.h"
#include "cuda/common/pdl.cuh"

namespace ropenorm::bench {

namespace {

Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return Status(StatusCode::kDeviceError, std::string(what) + ": " + cudaGetErrorString(e));
}

#define BENCH_CUDA(expr) ROPENORM_TRY(cuda_status((expr), #expr))

TimingStats summarize(std::vector<double> us) {
  TimingStats t;
  if (us.empty()) return t;
  std::sort(us.begin(), us.end());
  t.samples = static_cast<int>(us.size());
  t.min_us = us.front();
  t.max_us = us.back();
  const size_t n = us.size();
  t.median_us = n % 2 ? us[n / 2] : 0.5 * (us[n / 2 - 1] + us[n / 2]);
  return t;
}

struct Events {
  cudaEvent_t a = nullptr, b = nullptr;
  Events() {
    cudaEventCreate(&a);
    cudaEventCreate(&b);
  }
  ~Events() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
};

}  // namespace

double measure_copy_gbps(size_t bytes, int reps, cudaStream_t stream) {
  void *src = nullptr, *dst = nullptr;
  if (cudaMalloc(&src, bytes) != cudaSuccess || cudaMalloc(&dst, bytes) != cudaSuccess) {
    cudaFree(src);
    cudaGetLastError();
    return 0.0;
  }
  cudaMemsetAsync(src, 0x5A, bytes, stream);
  Events ev;
  std::vector<double> us;
  for (int i = 0; i < reps + 2; ++i) {
    cudaEventRecord(ev.a, stream);
    cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream);
    cudaEventRecord(ev.b, stream);
    cudaEventSynchronize(ev.b);
    float ms = 0;
    cudaEventElapsedTime(&ms, ev.a, ev.b);
    if (i >= 2) us.push_back(ms * 1e3);
  }
  cudaFree(src);
  cudaFree(dst);
  const TimingStats t = summarize(us);
  return t.median_us > 0 ? 2.0 * static_cast<double>(bytes) / (t.median_us * 1e3) : 0.0;
}

Status time_cold_l2(const Launch& launch, int reps, cudaStream_t stream, TimingStats* out) {
  int dev = 0, l2 = 0;
  BENCH_CUDA(cudaGetDevice(&dev));
  BENCH_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  const size_t flush_bytes = static_cast<size_t>(std::max(l2, 1 << 20)) * 2;
  void* flush = nullptr;
  BENCH_CUDA(cudaMalloc(&flush, flush_bytes));
  BENCH_CUDA(cudaMemsetAsync(flush, 0, flush_bytes, stream));
  Events ev;
  std::vector<double> us;
  Status st;
  for (int i = 0; i < reps + 3 && st.ok(); ++i) {
    ROPENORM_TRY(flush_l2(flush, flush_bytes, stream));
    cudaEventRecord(ev.a, stream);
    st = launch(stream);
    cudaEventRecord(ev.b, stream);
    cudaEventSynchronize(ev.b);
    float ms = 0;
    cudaEventElapsedTime(&ms, ev.a, ev.b);
    if (i >= 3) us.push_back(ms * 1e3);  // three warm-up runs
  }
  cudaFree(flush);
  ROPENORM_TRY(st);
  BENCH_CUDA(cudaGetLastError());
  *out = summarize(us);
  return Status::Ok();
}

Status time_graph(const Launch& launch, int per_graph, int reps, cudaStream_t stream,
                  TimingStats* out) {
  for (int i = 0; i < 3; ++i) ROPENORM_TRY(launch(stream));  // warm-up outside capture
  BENCH_CUDA(cudaStreamSynchronize(stream));
  cudaGraph_t graph = nullptr;
  BENCH_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  Status st;
  for (int i = 0; i < per_graph && st.ok(); ++i) st = launch(stream);
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  ROPENORM_TRY(st);
  BENCH_CUDA(end);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  BENCH_CUDA(inst);
  Events ev;
  std::vector<double> us;
  for (int i = 0; i < reps + 3; ++i) {
    cudaEventRecord(ev.a, stream);
    cudaGraphLaunch(exec, stream);
    cudaEventRecord(ev.b, stream);
    cudaEventSynchronize(ev.b);
    float ms = 0;
    cudaEventElapsedTime(&ms, ev.a, ev.b);
    if (i >= 3) us.push_back(ms * 1e3 / per_graph);
  }
  cudaGraphExecDestroy(exec);
  BENCH_CUDA(cudaGetLastError());
  *out = summarize(us);
  return Status::Ok();
}

}  // namespace ropenorm::bench

namespace ropenorm::bench {

namespace {

// Thread i reads 16-byte chunks i, i + stride, ...; the sum is stored only if it matches a value
// no data here produces, so the reads cannot be optimised away and nothing is written.
__global__ void read_all_kernel(const uint4* buf, size_t chunks, unsigned* sink) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < chunks;
       i += size_t{gridDim.x} * blockDim.x) {
    const uint4 v = buf[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9E3779B9u && sink != nullptr) *sink = acc;
}

// The launch floor's kernel: one warp waits for the previous kernel, lane 0 copies 16 bytes.
__global__ void floor_kernel(const uint4* src, uint4* dst) {
  cuda::griddep_wait();
  if (threadIdx.x == 0) *dst = *src;
}

}  // namespace

Status flush_l2(const void* buf, size_t bytes, cudaStream_t stream) {
  read_all_kernel<<<1024, 512, 0, stream>>>(static_cast<const uint4*>(buf), bytes / 16, nullptr);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    return Status(StatusCode::kDeviceError, std::string("flush_l2: ") + cudaGetErrorString(e));
  }
  return Status::Ok();
}

Status measure_launch_floor_us(int per_graph, int reps, cudaStream_t stream, double* us) {
  uint4* buf = nullptr;
  BENCH_CUDA(cudaMalloc(&buf, 2 * sizeof(uint4)));
  Status st = cuda_status(cudaMemsetAsync(buf, 0, 2 * sizeof(uint4), stream), "cudaMemsetAsync");
  TimingStats t;
  if (st.ok()) {
    st = time_graph(
        [&](cudaStream_t s) -> Status {
          return cuda_status(cuda::launch_with_pdl(floor_kernel, dim3(1), dim3(32), 0, s,
                                                   static_cast<const uint4*>(buf), buf + 1),
                             "floor_kernel");
        },
        per_graph, reps, stream, &t);
  }
  cudaFree(buf);
  ROPENORM_TRY(st);
  *us = t.median_us;
  return Status::Ok();
}

}  // namespace ropenorm::bench
