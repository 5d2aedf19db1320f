// Timeouts: a call or passive request not answered by its deadline ends
// (a call with kTimeout). UD may drop datagrams; this is what turns a loss
// into a failed call instead of a hang. The table is scanned a few times per
// timeout, not on every poll.
#include "env/tsc.hpp"
#include "rpc/endpoint_impl.hpp"

namespace rdtx::rpc {

int Endpoint::expire_calls() {
  if (calls_in_flight_ + passive_outstanding_ == 0) return 0;
  Impl& m = *impl_;
  uint64_t now = env::tsc();
  if (now < m.next_scan_tsc) return 0;
  m.next_scan_tsc = now + m.scan_interval_tsc;
  int expired = 0;
  for (uint32_t idx = 0; idx < m.calls.size(); ++idx) {
    Impl::Call& c = m.calls[idx];
    if (c.state == CallState::kFree || now < c.deadline) continue;
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
  return expired;
}

}  // namespace rdtx::rpc
