// GPU test plumbing: skip with the reason when no device exists.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "verify/device_buffer.h"

/// Skips the current test, with the reason in the runner's output, when there is no GPU.
#define ROPENORM_REQUIRE_GPU()                              \
  do {                                                      \
    std::string reason_;                                    \
    if (!::ropenorm::verify::gpu_available(&reason_)) {     \
      GTEST_SKIP() << "no usable CUDA device: " << reason_; \
    }                                                       \
  } while (0)
