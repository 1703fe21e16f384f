// Splitting row loops of host-side verification across the machine's cores.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace ropenorm::verify {

/// Calls fn(r0, r1) on disjoint row ranges covering [0, m), on up to hardware_concurrency
/// threads (one thread for small m). fn must only touch its own rows.
template <typename Fn>
void parallel_rows(int64_t m, Fn&& fn) {
  const int64_t hw = std::max<int64_t>(1, std::thread::hardware_concurrency());
  const int64_t nt = std::min<int64_t>(hw, std::max<int64_t>(1, m / 64));
  if (nt <= 1) {
    fn(int64_t{0}, m);
    return;
  }
  std::vector<std::thread> threads;
  const int64_t chunk = (m + nt - 1) / nt;
  for (int64_t t = 0; t < nt; ++t) {
    const int64_t r0 = t * chunk, r1 = std::min(m, r0 + chunk);
    if (r0 < r1) threads.emplace_back([&fn, r0, r1] { fn(r0, r1); });
  }
  for (auto& th : threads) th.join();
}

}  // namespace ropenorm::verify
