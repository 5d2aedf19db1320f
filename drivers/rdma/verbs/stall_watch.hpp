// The stall watchdog's clock for one RC QP (VerbsQp::check_stall): whether a
// QP with a signaled request outstanding has gone a bound without any
// completion. Pure, so that its rules are tested without a device
// (test/rdma/verbs_test.cpp).
//
// A watch starts at its first look, not at 0: the clock is steady_clock,
// whose epoch is the host's boot, so a QP first looked at while a request is
// outstanding has not waited since then (a bug that failed healthy QPs whose
// round trips spanned a watchdog pass: two Soft-RoCE guests).
//
// Thread-safety: one per QP, used by the thread that polls its CQ.
#pragma once

#include <cstdint>

namespace rdtx::rdma::verbs {

class StallWatch {
 public:
  // `waiting`: a signaled request is posted and not retired; `retired`:
  // the requests retired so far. Returns how long the QP has waited (ns)
  // when that reaches `bound_ns` with no completion, else 0; once per
  // stall: the wait then starts again.
  uint64_t look(uint64_t now_ns, uint64_t bound_ns, bool waiting, uint64_t retired) {
    if (!started_ || !waiting || retired != retired_) {
      started_ = true;
      retired_ = retired;
      since_ns_ = now_ns;
      return 0;
    }
    const uint64_t waited = now_ns - since_ns_;
    if (waited < bound_ns) return 0;
    since_ns_ = now_ns;
    return waited;
  }

 private:
  bool started_ = false;
  uint64_t retired_ = 0;   // the last view of the QP's retired requests
  uint64_t since_ns_ = 0;  // since then no completion (while waiting)
};

}  // namespace rdtx::rdma::verbs
