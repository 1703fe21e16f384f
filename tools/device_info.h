// What the benchmark records about the machine: device, driver, CUDA runtime, commit.
#pragma once

#include <string>

namespace ropenorm::bench {

struct DeviceInfo {
  bool available = false;
  std::string reason;  ///< why no device is usable (when !available)
  std::string name;    ///< "NVIDIA H200"
  std::string driver;  ///< kernel driver version ("580.159.04"), or the CUDA driver API version
  std::string cuda;    ///< CUDA runtime version the program was built against and runs with
  int sm_count = 0;
  int l2_bytes = 0;
  int cc_major = 0, cc_minor = 0;
};

DeviceInfo query_device();

/// The source revision: $ROPENORM_COMMIT, else `git rev-parse HEAD` (+ "-dirty" when the tree
/// has changes), else "unknown".
std::string source_commit();

/// UTC time as ISO 8601.
std::string utc_now();

}  // namespace ropenorm::bench
