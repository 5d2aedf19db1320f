// Send: messages are appended to the datagram being built for their
// destination (coalescing; lazy passive acks wait there for a ride), and
// flush() posts the datagrams that should go with one doorbell.
//
// Session credits: a datagram with messages consumes one of the peer's
// credits; without one it waits (the datagram being built keeps taking
// messages, full ones wait in the peer's list) and goes when the peer
// returns credits. Every datagram returns the credits this endpoint owes its
// destination; what is owed and has no ride goes back alone (a datagram of
// no messages, which needs no credit) once half the window is owed or after
// passive_delay_ns. Datagram buffers are released in post order when a later
// signaled SEND completes (inline ones at once).
#include <algorithm>
#include <cstddef>
#include <cstring>

#include "env/tsc.hpp"
#include "rpc/endpoint_impl.hpp"

namespace rdtx::rpc {

[[gnu::always_inline]] inline void Endpoint::post(size_t n) {
  Impl& m = *impl_;
  rdma::WorkRequest* bad = nullptr;
  int rc = qp_->post_send(m.wrs.data(), &bad);
  ++stats_.doorbells;
  size_t posted = rc == 0 ? n : static_cast<size_t>(bad - m.wrs.data());
  for (size_t i = 0; i < n; ++i) {
    const uint32_t b = m.wr_buf[i];
    if (i < posted) {
      if (m.wrs[i].flags & rdma::kInline) {
        m.free_bufs.push_back(b);  // copied at post time
      } else {
        size_t tail = (m.inflight_head + m.inflight_size++) % m.inflight.size();
        m.inflight[tail] = {m.wrs[i].wr_id, b};
      }
      continue;
    }
    // Not sent (rare): the messages are lost (their calls end by timeout),
    // the credit it took and the credits it returned are not.
    DatagramHeader dh;
    std::memcpy(&dh, m.send_buf(b), sizeof dh);
    m.free_bufs.push_back(b);
    uint32_t dest = 0;
    while (m.peers[dest].ah.get() != m.wrs[i].ah) ++dest;
    Impl::Peer& p = m.peers[dest];
    if (dh.count > 0) {
      ++p.credits;
      --stats_.datagrams_sent;
    } else {
      --stats_.credit_returns_sent;
    }
    if (dh.credits > 0 && p.owed == 0) {
      p.owed_since_tsc = env::tsc();
      ++m.owed_peers;
    }
    p.owed += dh.credits;
    m.post_failed = true;
  }
  if (posted < n) {
    stats_.send_failures += n - posted;
    RDTX_LOG(rpc_log(), Warning, "endpoint %u: %zu datagram(s) not posted: %s", id_, n - posted, std::strerror(-rc));
  }
}

// Inlined into flush(): the per-datagram path, as it was before credits.
[[gnu::always_inline]] inline size_t Endpoint::stage(size_t n, uint32_t dest, uint32_t buf, bool messages) {
  Impl& m = *impl_;
  if (n == m.wrs.size()) {
    post(n);
    n = 0;
  }
  Impl::Peer& p = m.peers[dest];
  const uint16_t ret = static_cast<uint16_t>(std::min<uint32_t>(p.owed, UINT16_MAX));
  if (ret > 0) {
    p.owed -= ret;
    if (p.owed == 0) m.paid();
  }
  std::byte* base = m.send_buf(buf);
  std::memcpy(base + offsetof(DatagramHeader, credits), &ret, sizeof ret);
  const uint32_t seq = ++p.tx_seq;
  std::memcpy(base + offsetof(DatagramHeader, seq), &seq, sizeof seq);
  const uint32_t config = configuration_ != nullptr ? configuration_->load(std::memory_order_relaxed) : 0;
  std::memcpy(base + offsetof(DatagramHeader, config), &config, sizeof config);
  p.credits -= messages;
  ++(messages ? stats_.datagrams_sent : stats_.credit_returns_sent);
  rdma::WorkRequest& wr = m.wrs[n];
  wr = {};
  wr.opcode = rdma::Opcode::kSend;
  wr.ah = p.ah.get();
  wr.local = base;
  wr.length = m.buf_len[buf];
  wr.lkey = m.mr.lkey;
  wr.wr_id = ++m.post_seq;
  if (wr.length <= m.max_inline) wr.flags |= rdma::kInline;
  if (++m.unsignaled == m.cfg.signal_every) {  // every signal_every-th post
    m.unsignaled = 0;
    wr.flags |= rdma::kSignaled;
  }
  if (n > 0) m.wrs[n - 1].next = &wr;
  m.wr_buf[n] = buf;
  return n + 1;
}

// Called when flush_due(now).
void Endpoint::flush(uint64_t now) {
  Impl& m = *impl_;
  size_t n = 0, keep = 0;
  for (size_t i = 0; i < m.active.size(); ++i) {
    const uint32_t dest = m.active[i];
    Impl::Peer& p = m.peers[dest];
    // Blocked: a datagram is due and no credit lets it go. (Datagrams left
    // waiting count even with no datagram open: when the send buffers all
    // wait for this peer's credits, no message can open one, and a lost
    // credit return must still be noticed and taken back.)
    bool blocked = false;
    if (p.wait_head != kNoBuffer) [[unlikely]] {
      while (p.wait_head != kNoBuffer && p.credits > 0) n = stage(n, dest, m.dequeue(p), true);
      blocked = p.wait_head != kNoBuffer;
    }
    if (p.buf != kNoBuffer && (p.urgent || (p.since_tsc != 0 && aged(p.since_tsc, now, m.passive_delay_tsc)))) {
      if (p.wait_head == kNoBuffer && p.credits > 0) [[likely]] {
        n = stage(n, dest, m.close_open(p), true);
        p.listed = false;  // nothing left for it
        continue;
      }
      blocked = true;
    }
    if (blocked && !p.stalled) {
      p.stalled = true;  // it keeps taking messages until a credit comes
      p.stalled_tsc = now;
      ++stats_.credit_stalls;
    }
    if (p.busy()) {
      m.active[keep++] = dest;
    } else {
      p.listed = false;
    }
  }
  m.active.resize(keep);
  // Owed credits the datagrams above did not carry back, if due.
  if (now >= m.credits_due_tsc) n = return_credits(n, now);
  if (n > 0) post(n);
  if (m.post_failed) {
    // Rare: what a failed post gave back must be found by the next flush.
    m.post_failed = false;
    for (uint32_t d = 0; d < m.peers.size(); ++d) {
      if (m.peers[d].busy()) m.list(d);
      if (m.peers[d].owed > 0 && !m.peers[d].owing_listed) {
        m.peers[d].owing_listed = true;
        m.owing.push_back(d);
      }
    }
    m.credits_due_tsc = m.owed_peers > 0 ? 0 : UINT64_MAX;
  }
}

// The owed credits that had no ride and are due (half the window owed, or
// owed for passive_delay_ns) go back alone, in datagrams of no messages.
size_t Endpoint::return_credits(size_t n, uint64_t now) {
  Impl& m = *impl_;
  uint64_t next_due = UINT64_MAX;
  size_t keep = 0;
  for (size_t i = 0; i < m.owing.size(); ++i) {
    const uint32_t dest = m.owing[i];
    Impl::Peer& p = m.peers[dest];
    if (p.owed > 0 && (p.owed >= m.credit_return_at || aged(p.owed_since_tsc, now, m.passive_delay_tsc)) &&
        !m.free_bufs.empty()) {
      const uint32_t b = m.free_bufs.back();
      m.free_bufs.pop_back();
      DatagramHeader dh = m.header;
      std::memcpy(m.send_buf(b), &dh, sizeof dh);
      m.buf_len[b] = sizeof dh;
      n = stage(n, dest, b, false);
      if (m.owed_peers == 0) {  // the last one: what is left of the list owes nothing
        for (size_t j = i; j < m.owing.size(); ++j) m.peers[m.owing[j]].owing_listed = false;
        m.owing.resize(keep);
        m.credits_due_tsc = UINT64_MAX;
        return n;
      }
    }
    if (p.owed > 0) {
      m.owing[keep++] = dest;
      // No free buffer: try again at the next flush.
      next_due = std::min(next_due, m.free_bufs.empty() ? 0 : p.owed_since_tsc + m.passive_delay_tsc);
    } else {
      p.owing_listed = false;
    }
  }
  m.owing.resize(keep);
  m.credits_due_tsc = next_due;
  return n;
}

void Endpoint::on_send_completion(const rdma::Completion& wc) {
  Impl& m = *impl_;
  // A signaled SEND (or any failed one): everything posted up to it is done.
  if (wc.status != rdma::Status::kSuccess) {
    ++stats_.send_failures;
    RDTX_LOG(rpc_log(), Warning, "endpoint %u: SEND failed: %s", id_, rdma::to_string(wc.status));
    if (wc.status != rdma::Status::kFlushed) (void)qp_->connect(qp_->address());
  }
  while (m.inflight_size > 0 && m.inflight[m.inflight_head].seq <= wc.wr_id) {
    m.free_bufs.push_back(m.inflight[m.inflight_head].buf);
    m.inflight_head = (m.inflight_head + 1) % m.inflight.size();
    --m.inflight_size;
  }
}

bool Endpoint::reply(const Deferred& d, std::span<const std::byte> bytes) {
  if (!d.valid()) return false;
  return append(d.src, Kind::kReply, 0, WireStatus::kOk, d.cookie, bytes, d.kind == Kind::kRequest);
}

}  // namespace rdtx::rpc
