// Uses an installed ropenorm through its public headers only (the consumer's CMakeLists also
// compiles each installed header on its own).
//
//   consumer        host checks: version, a cache builder, a validation error (no device needed)
//   consumer --gpu  one RMSNorm on the device, checked against a float64 formula; exits 77
//                   (CTest: skipped) with the reason when no CUDA device is usable
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ropenorm/rms_norm.h"
#include "ropenorm/rope_cache.h"
#include "ropenorm/status.h"
#include "ropenorm/tensor.h"
#include "ropenorm/version.h"

namespace {

int fail(const std::string& what) {
  std::fprintf(stderr, "FAIL: %s\n", what.c_str());
  return 1;
}

int host_checks() {
  const std::string linked = ropenorm::version();
  if (linked != ROPENORM_EXPECTED_VERSION) {
    return fail("ropenorm::version() " + linked + ", the package says " +
                ROPENORM_EXPECTED_VERSION);
  }
  const std::string header = std::to_string(ROPENORM_VERSION_MAJOR) + "." +
                             std::to_string(ROPENORM_VERSION_MINOR) + "." +
                             std::to_string(ROPENORM_VERSION_PATCH);
  if (header != linked) return fail("headers say " + header + ", the library " + linked);

  ropenorm::RopeConfig cfg;
  cfg.theta = 10000.0;
  cfg.rotary_dim = 128;
  std::vector<double> inv_freq;
  double scaling = 0.0;
  ropenorm::Status st = ropenorm::rope_inv_freq(cfg, &inv_freq, &scaling);
  if (!st.ok()) return fail("rope_inv_freq: " + st.message());
  const double expect = std::pow(10000.0, -2.0 / 128.0);
  if (inv_freq.size() != 64 || inv_freq[0] != 1.0 ||
      std::fabs(inv_freq[1] - expect) > 1e-15 * expect || scaling != 1.0) {
    return fail("rope_inv_freq: unexpected default frequencies");
  }

  // Validation runs on the host before any device work: a weight of the wrong length is an
  // invalid argument, and nothing is written (the views point at host memory no kernel touches).
  std::vector<float> x(4 * 64, 1.0f), w(63, 1.0f), y(4 * 64, -7.0f);
  const ropenorm::Device dev = ropenorm::Device::cuda(0);
  st = ropenorm::rms_norm(
      ropenorm::TensorRef::contiguous(x.data(), ropenorm::DType::kFloat32, {4, 64}, dev),
      ropenorm::TensorRef::contiguous(w.data(), ropenorm::DType::kFloat32, {63}, dev),
      ropenorm::TensorRef::contiguous(y.data(), ropenorm::DType::kFloat32, {4, 64}, dev),
      ropenorm::TensorRef(), ropenorm::RmsNormParams());
  if (st.code() != ropenorm::StatusCode::kInvalidArgument ||
      st.message().find("argument 'weight'") == std::string::npos) {
    return fail(std::string("rms_norm with a [63] weight: ") +
                ropenorm::status_code_name(st.code()) + " '" + st.message() + "'");
  }
  for (float v : y) {
    if (v != -7.0f) return fail("rms_norm wrote its output on a failed call");
  }
  std::printf("host checks passed: ropenorm %s, rope_inv_freq, validation ('%s')\n", linked.c_str(),
              st.message().c_str());
  return 0;
}

/// A device allocation freed when it goes out of scope.
struct DeviceFloats {
  explicit DeviceFloats(size_t count) : bytes(count * sizeof(float)) {
    if (cudaMalloc(&ptr, bytes) != cudaSuccess) ptr = nullptr;
  }
  ~DeviceFloats() { cudaFree(ptr); }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  void* ptr = nullptr;
  size_t bytes;
};

int cuda_fail(const char* what, cudaError_t err) {
  return fail(std::string(what) + ": " + cudaGetErrorString(err));
}

int gpu_check() {
  int count = 0;
  const cudaError_t count_err = cudaGetDeviceCount(&count);
  if (count_err != cudaSuccess || count == 0) {
    std::printf("no usable CUDA device: %s\n",
                count_err != cudaSuccess ? cudaGetErrorString(count_err) : "device count 0");
    return 77;
  }
  constexpr int64_t M = 5, N = 96;
  std::mt19937 gen(20261205);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(M * N), w(N), y(M * N);
  for (float& v : x) v = normal(gen);
  for (float& v : w) v = normal(gen);
  DeviceFloats dx(x.size()), dw(w.size()), dy(y.size());
  if (!dx.ptr || !dw.ptr || !dy.ptr) return fail("cudaMalloc");
  cudaError_t err = cudaMemcpy(dx.ptr, x.data(), dx.bytes, cudaMemcpyHostToDevice);
  if (err == cudaSuccess) err = cudaMemcpy(dw.ptr, w.data(), dw.bytes, cudaMemcpyHostToDevice);
  // NaN everywhere: an element the kernel skips cannot pass.
  if (err == cudaSuccess) err = cudaMemset(dy.ptr, 0xFF, dy.bytes);
  if (err != cudaSuccess) return cuda_fail("copying the inputs", err);
  const ropenorm::Device dev = ropenorm::Device::cuda(0);
  ropenorm::RmsNormParams p;
  p.eps = 1e-6f;
  const ropenorm::Status st = ropenorm::rms_norm(
      ropenorm::TensorRef::contiguous(dx.ptr, ropenorm::DType::kFloat32, {M, N}, dev),
      ropenorm::TensorRef::contiguous(dw.ptr, ropenorm::DType::kFloat32, {N}, dev),
      ropenorm::TensorRef::contiguous(dy.ptr, ropenorm::DType::kFloat32, {M, N}, dev),
      ropenorm::TensorRef(), p);
  if (!st.ok()) return fail("rms_norm: " + st.message());
  err = cudaMemcpy(y.data(), dy.ptr, dy.bytes, cudaMemcpyDeviceToHost);
  if (err != cudaSuccess) return cuda_fail("after rms_norm", err);
  // This checks that the installed library's kernel runs and writes every element (the GPU suite
  // holds every kernel to the oracle's tolerance table): f32's rounding stays far inside 1e-5,
  // a skipped element (NaN) or a misplaced one cannot.
  double worst = 0.0;
  for (int64_t m = 0; m < M; ++m) {
    double ss = 0.0;
    for (int64_t n = 0; n < N; ++n) ss += double(x[m * N + n]) * x[m * N + n];
    const double r = 1.0 / std::sqrt(ss / N + double(p.eps));
    for (int64_t n = 0; n < N; ++n) {
      const double ref = double(x[m * N + n]) * r * w[n];
      const double rel = std::fabs(y[m * N + n] - ref) / (1.0 + std::fabs(ref));
      if (!(rel <= 1e-5)) {
        return fail("rms_norm y[" + std::to_string(m) + ", " + std::to_string(n) + "] = " +
                    std::to_string(y[m * N + n]) + ", float64 formula " + std::to_string(ref));
      }
      if (rel > worst) worst = rel;
    }
  }
  std::printf("device check passed: rms_norm [%lld, %lld] f32, worst relative error %.3g\n",
              static_cast<long long>(M), static_cast<long long>(N), worst);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--gpu") == 0) return gpu_check();
  return host_checks();
}
