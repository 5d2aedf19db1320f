// Timeouts: a call or passive request not answered by its deadline ends
// (a call with kTimeout). UD may drop datagrams; this is what turns a loss
// into a failed call instead of a hang. The deadline adapts to each peer's
// measured round trips (RoundTripTimer::sample, RFC 6298) above the configured
// floor, and doubles for a peer after each call to it that timed out, until
// a reply comes (RoundTripTimer::timeout): a slow or briefly stalled peer sees a
// few timeouts at most, a silent one keeps timing out. A scan runs a few times per timeout
// (not on every poll) over the call slots that may be in use: free slots
// are reused lowest first, so those are the first few (Impl::calls_high),
// and nothing is kept per call in flight.
//
// A lost datagram also loses the credit it took (and a lost credit return
// the credits it carried): a live peer returns credits within
// passive_delay_ns of receiving, so a peer that has returned none for a
// whole timeout while some are outstanding and we have something waiting
// gets its full window back, as eRPC reclaims credits when it retransmits:
// stalled (something to send, no credit) for a timeout, and no return
// for a timeout either.
#include <algorithm>

#include "env/tsc.hpp"
#include "rpc/endpoint_impl.hpp"

namespace rdtx::rpc {

int Endpoint::expire_calls(uint64_t now) {
  Impl& m = *impl_;
  m.next_scan_tsc = now + m.scan_interval_tsc;
  recover_credits(now);
  if (calls_in_flight_ + passive_outstanding_ == 0) {
    m.calls_high = 0;
    return 0;
  }
  int expired = 0;
  uint32_t high = 0;  // 1 + the highest slot still in flight
  for (uint32_t idx = 0; idx < m.calls_high; ++idx) {
    Impl::Call& c = m.calls[idx];
    if (c.state == CallState::kFree) continue;
    if (c.deadline > now) {
      high = idx + 1;
      continue;
    }
    Impl::Peer& peer = m.peers[c.dest];
    peer.rtt.timed_out(c.sent, now);
    if (const uint64_t t = env::tsc_to_ns(m.timeout_for(peer)); t > stats_.timeout_max_ns) stats_.timeout_max_ns = t;
    if (c.state == CallState::kWaiting) {
      ++stats_.timeouts;
      --calls_in_flight_;
      c.reply->status = CallStatus::kTimeout;
      c.wg->done(false);
    } else {
      ++stats_.passive_timeouts;
      --passive_outstanding_;
    }
    m.release_call(idx);
    ++expired;
  }
  m.calls_high = high;
  return expired;
}

void Endpoint::recover_credits(uint64_t now) {
  Impl& m = *impl_;
  for (uint32_t dest : m.active) {
    Impl::Peer& p = m.peers[dest];
    const uint64_t timeout = m.timeout_for(p);
    if (!p.stalled || !aged(p.stalled_tsc, now, timeout) || !aged(p.credit_tsc, now, timeout)) continue;
    // The first reset of an endpoint is a warning, the rest debug: under a
    // lossy network or a stalled peer they come every timeout, and the count
    // (stats().credit_resets) says how many.
    const auto level = stats_.credit_resets == 0 ? env::LogLevel::kWarning : env::LogLevel::kDebug;
    if (rpc_log().enabled(level))
      rpc_log().log(level, "endpoint %u: peer %u returned no credit for %.0f ms (%u of %u outstanding): taken back%s",
                    id_, dest, env::tsc_to_ns(now - std::max(p.stalled_tsc, p.credit_tsc)) / 1e6,
                    m.cfg.credits - p.credits, m.cfg.credits,
                    stats_.credit_resets == 0 ? " (further resets of this endpoint are logged at debug level)" : "");
    p.credits = m.cfg.credits;
    p.credit_tsc = now;
    p.stalled = false;
    ++stats_.credit_resets;
  }
}

void Endpoint::not_polled(uint64_t gap) {
  Impl& m = *impl_;
  for (uint32_t idx = 0; idx < m.calls_high; ++idx)
    if (m.calls[idx].state != CallState::kFree) m.calls[idx].deadline += gap;
  for (uint32_t dest : m.active) {
    Impl::Peer& p = m.peers[dest];
    p.stalled_tsc += gap;
    p.credit_tsc += gap;
  }
}

}  // namespace rdtx::rpc
