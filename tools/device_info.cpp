// What the benchmark records about the machine (see device_info.h).
#include "device_info.h"

#include <cuda_runtime_api.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>

namespace ropenorm::bench {

namespace {

std::string run_command(const char* cmd) {
  std::string out;
  FILE* p = popen(cmd, "r");
  if (p == nullptr) return out;
  std::array<char, 256> buf;
  while (fgets(buf.data(), static_cast<int>(buf.size()), p) != nullptr) out += buf.data();
  pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

std::string version_str(int v) {
  std::ostringstream os;
  os << v / 1000 << "." << (v % 1000) / 10;
  return os.str();
}

}  // namespace

DeviceInfo query_device() {
  DeviceInfo d;
  int rt = 0;
  cudaRuntimeGetVersion(&rt);
  d.cuda = version_str(rt);
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    cudaGetLastError();
    d.reason = e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device";
    return d;
  }
  int dev = 0;
  cudaGetDevice(&dev);
  cudaDeviceProp p{};
  cudaGetDeviceProperties(&p, dev);
  d.available = true;
  d.name = p.name;
  d.sm_count = p.multiProcessorCount;
  d.l2_bytes = p.l2CacheSize;
  d.cc_major = p.major;
  d.cc_minor = p.minor;
  std::ifstream f("/proc/driver/nvidia/version");
  std::string line;
  if (f && std::getline(f, line)) {
    // "NVRM version: NVIDIA UNIX ... Kernel Module ...  580.159.04  <date>": the first token
    // made of digits and dots with at least one dot.
    std::istringstream is(line);
    std::string tok;
    while (is >> tok) {
      if (tok.find('.') != std::string::npos &&
          tok.find_first_not_of("0123456789.") == std::string::npos) {
        d.driver = tok;
        break;
      }
    }
  }
  if (d.driver.empty()) {
    int dv = 0;
    cudaDriverGetVersion(&dv);
    d.driver = "cuda-driver-api " + version_str(dv);
  }
  return d;
}

std::string source_commit() {
  if (const char* c = std::getenv("ROPENORM_COMMIT"); c != nullptr && *c) return c;
  const std::string head = run_command("git rev-parse --verify -q HEAD 2>/dev/null");
  if (head.size() != 40 || head.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return "unknown";
  }
  const std::string dirty = run_command("git status --porcelain --untracked-files=no 2>/dev/null");
  return dirty.empty() ? head : head + "-dirty";
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace ropenorm::bench
