// GPU test plumbing: skip with the reason when no device exists; bitwise comparison of a part
// of a result with the matching elements of another.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "reference/host_tensor.h"
#include "verify/device_buffer.h"

/// Skips the current test, with the reason in the runner's output, when there is no GPU.
#define ROPENORM_REQUIRE_GPU()                              \
  do {                                                      \
    std::string reason_;                                    \
    if (!::ropenorm::verify::gpu_available(&reason_)) {     \
      GTEST_SKIP() << "no usable CUDA device: " << reason_; \
    }                                                       \
  } while (0)

/// Asserts that elements 0 .. count - 1 of `part` have the bits of elements offset ..
/// offset + count - 1 of `whole` (`what` names them in the failure message).
inline void expect_same_bits(const ::ropenorm::ref::HostTensor& part,
                             const ::ropenorm::ref::HostTensor& whole, int64_t offset,
                             int64_t count, const char* what) {
  for (int64_t i = 0; i < count; ++i) {
    ASSERT_EQ(part.bits(i), whole.bits(offset + i)) << what << " element " << i;
  }
}
