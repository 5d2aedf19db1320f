// Timeouts of the calls a worker makes outside the RPC endpoint: FaRM's
// LOCK records and their replies (one-sided writes into message logs) and
// 2PL's mailbox waves and vote counts. As the endpoint's calls, each waits
// as long as the round trips to the node it waits for have measured
// (rpc::RoundTripTimer: RFC 6298 above the configured RPC timeout, doubled
// after a timeout until that node answers, at most rpc.max_timeout_ms), so
// that a slow but live node does not fail attempts again and again while a
// silent one is still given up on. A wait that timed out is counted with
// the RPC endpoint's timed-out calls (the run's "RPC timeouts": noted, and
// the attempts it aborted are the network aborts the verdict allows).
// Times in ns (a worker in virtual time counts ticks at another rate).
// Thread-safety: none; one worker's.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "rpc/round_trip_timer.hpp"
#include "txn/types.hpp"

namespace rdtx::txn {

struct MessageTimerStats {
  uint64_t timeouts = 0;          // waits that gave up
  uint64_t longest_reply_ns = 0;  // longest timed round trip
  uint64_t timeout_max_ns = 0;    // largest timeout a wait got
};

class MessageTimers {
 public:
  MessageTimers(uint64_t floor_ns, uint64_t max_ns) : floor_(floor_ns), max_(std::max(floor_ns, max_ns)) {}

  // How long a wait for every node of `mask` (bit n: node n) may take now:
  // the largest of their timeouts.
  uint64_t timeout_ns(uint64_t mask) const {
    uint64_t t = floor_;
    for (uint64_t m = mask; m != 0; m &= m - 1) t = std::max(t, timers_[__builtin_ctzll(m)].timeout(floor_, max_));
    stats_.timeout_max_ns = std::max(stats_.timeout_max_ns, t);
    return t;
  }
  // Every node of `mask` answered a wait that took `rtt_ns`. With `timed`,
  // the round trip is a sample of each (of the slowest, an upper bound of
  // the others: their timeouts err long). Untimed: the wait included
  // something else (a lock wait at the owner), and it only undoes doublings.
  void answered(uint64_t mask, uint64_t rtt_ns, bool timed) {
    for (uint64_t m = mask; m != 0; m &= m - 1) {
      rpc::RoundTripTimer& r = timers_[__builtin_ctzll(m)];
      r.answered();
      if (timed) r.sample(rtt_ns, floor_, max_);
    }
    if (timed) stats_.longest_reply_ns = std::max(stats_.longest_reply_ns, rtt_ns);
  }
  // A wait for the nodes of `mask`, started at `sent_ns`, gave up at
  // `now_ns` (some of them did not answer; which is not always known).
  void timed_out(uint64_t mask, uint64_t sent_ns, uint64_t now_ns) {
    ++stats_.timeouts;
    for (uint64_t m = mask; m != 0; m &= m - 1) timers_[__builtin_ctzll(m)].timed_out(sent_ns, now_ns);
  }
  // The timeout a wait for node n would get without doublings, the largest
  // over the nodes (the run's "timeout settled at").
  uint64_t settled_ns() const {
    uint64_t t = floor_;
    for (const rpc::RoundTripTimer& r : timers_) t = std::max(t, r.rto);
    return t;
  }
  const MessageTimerStats& stats() const { return stats_; }

 private:
  uint64_t floor_, max_;
  std::array<rpc::RoundTripTimer, kMaxNodes> timers_{};
  mutable MessageTimerStats stats_;
};

}  // namespace rdtx::txn
