/// @file
/// The stream handle ropenorm launches on: the CUDA runtime's cudaStream_t, declared here without
/// pulling CUDA headers into every user of the public API.
#pragma once

struct CUstream_st;

namespace ropenorm {

/// Same type as cudaStream_t; nullptr is the legacy default stream.
using Stream = CUstream_st*;

}  // namespace ropenorm
