// The adaptive timeout of calls to one peer (RFC 6298, as TCP's
// retransmission timeout): the smoothed round trip and its variation,
// the timeout they give above a configured floor, and the doublings after
// calls that timed out (reset by any reply). The RPC endpoint keeps one
// per peer; so do the protocols whose calls travel outside it (FaRM's
// LOCK records and 2PL's mailboxes, txn::MessageTimers), so that every
// wait for another node settles on what that node's round trips measure.
// All times in one unit, the caller's (the endpoint: TSC ticks; the
// message timers: ns). Thread-safety: none; one worker's.
#pragma once

#include <algorithm>
#include <cstdint>

namespace rdtx::rpc {

struct RoundTripTimer {
  uint64_t srtt = 0, rttvar = 0;  // 0 before the first sample
  uint64_t rto = 0;               // what they give, in [floor, max]
  uint8_t backoff = 0;            // doublings since the last reply
  uint64_t backoff_at = 0;        // when the last doubling was

  // The timeout a call gets now: the adaptive one, doubled once per call
  // that timed out since the last reply, at most max.
  uint64_t timeout(uint64_t floor, uint64_t max) const {
    const uint64_t base = std::max(rto, floor);
    return backoff >= 63 || (base << backoff) >> backoff != base ? max : std::min(max, base << backoff);
  }
  // A reply after `rtt` ticks to a call that timed the round trip
  // (section 2, with alpha 1/8 and beta 1/4). The margin over the smoothed
  // round trip is 4 x its variation but at least the round trip itself:
  // steady round trips drive the variation to 0, and a timeout of one round
  // trip would then expire on any jitter.
  void sample(uint64_t rtt, uint64_t floor, uint64_t max) {
    if (srtt == 0) {
      srtt = std::max<uint64_t>(rtt, 1);
      rttvar = rtt / 2;
    } else {
      const uint64_t diff = srtt > rtt ? srtt - rtt : rtt - srtt;
      rttvar = (3 * rttvar + diff) / 4;
      srtt = std::max<uint64_t>((7 * srtt + rtt) / 8, 1);
    }
    rto = std::min(max, std::max(floor, srtt + std::max(4 * rttvar, srtt)));
  }
  // The peer answered: any doubling is undone.
  void answered() { backoff = 0; }
  // A call sent at `sent` timed out at `now`: the timeout doubles, once
  // for the calls of one burst (those sent before the last doubling).
  void timed_out(uint64_t sent, uint64_t now) {
    if (sent >= backoff_at && backoff < 63) {
      ++backoff;
      backoff_at = now;
    }
  }
};

}  // namespace rdtx::rpc
