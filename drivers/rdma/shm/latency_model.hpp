// The shm driver's network model, from devargs latency_ns and bw_gbps, in
// TSC ticks. Each QP is a wire of bw_gbps: a request starts when it is posted
// or when the previous one on the QP has been transmitted, whichever is
// later, and is transmitted in size * 8 / bw_gbps ns. Then:
//   one-sided verb  takes effect at start + transfer + one-way latency,
//                   completes at that time + one-way latency (the response);
//   SEND            is visible to the receiver at start + transfer + latency,
//                   completes at start + transfer (UD has no acknowledgement).
// So effects and completions of one QP are in posting order. A disabled
// model (both 0) executes at post time and never reads the clock.
// Thread-safety: immutable after construction.
#pragma once

#include <cstdint>

#include "env/tsc.hpp"

namespace rdtx::rdma::shm {

class LatencyModel {
 public:
  LatencyModel() = default;
  LatencyModel(uint64_t latency_ns, double bw_gbps)
      : enabled_(latency_ns > 0 || bw_gbps > 0),
        one_way_(enabled_ ? env::ns_to_tsc(latency_ns) : 0),
        // ticks per byte = hz * 8 bits / (gbps * 1e9 bits/s)
        ticks_per_byte_(bw_gbps > 0 ? static_cast<double>(env::tsc_hz()) * 8.0 / (bw_gbps * 1e9) : 0.0) {}

  bool enabled() const { return enabled_; }
  uint64_t one_way() const { return one_way_; }
  uint64_t transfer(uint64_t bytes) const {
    return static_cast<uint64_t>(static_cast<double>(bytes) * ticks_per_byte_);
  }

 private:
  bool enabled_ = false;
  uint64_t one_way_ = 0;
  double ticks_per_byte_ = 0;
};

}  // namespace rdtx::rdma::shm
