// Receive: one burst of completions. Every datagram is validated whole
// before any of its messages is acted on; then replies complete their calls
// and requests run their handlers. Send completions are handed to the send
// side (endpoint_tx.cpp): the CQ is shared.
#include <algorithm>
#include <cstring>
#include <optional>

#include "env/tsc.hpp"
#include "rpc/endpoint_impl.hpp"

namespace rdtx::rpc {

namespace {

// First pass over a datagram: every header and length checked before any
// message is acted on, so a bad datagram is dropped whole.
// `known(src)` says whether src is a connected peer.
template <typename Known>
std::optional<Malformed> validate(const std::byte* d, uint32_t len, size_t npeers, const Known& known) {
  if (len < sizeof(DatagramHeader)) return Malformed::kShort;
  DatagramHeader dh;
  std::memcpy(&dh, d, sizeof dh);
  if (dh.magic != kMagic || dh.version != kVersion) return Malformed::kMagic;
  if (dh.src >= npeers || !known(dh.src)) return Malformed::kSource;
  if (dh.count == 0) return dh.credits != 0 ? std::nullopt : std::optional(Malformed::kCount);  // a credit return
  if (len < sizeof(DatagramHeader) + sizeof(MsgHeader)) return Malformed::kShort;
  uint32_t off = sizeof dh;
  for (unsigned i = 0; i < dh.count; ++i) {
    if (len - off < sizeof(MsgHeader)) return Malformed::kCount;
    MsgHeader mh;
    std::memcpy(&mh, d + off, sizeof mh);
    if (mh.len > len - off - sizeof(MsgHeader)) return Malformed::kLength;
    switch (mh.kind) {
      case Kind::kRequest:
      case Kind::kLazyRequest:
      case Kind::kOneway:
      case Kind::kPassive:
        if (mh.handler >= kMaxHandlers) return Malformed::kHandler;
        break;
      case Kind::kReply:
        break;
      default:
        return Malformed::kKind;
    }
    uint32_t step = sizeof(MsgHeader) + pad8(mh.len);
    off = step > len - off ? len : off + step;
  }
  return std::nullopt;
}

}  // namespace

void Endpoint::count_malformed(Malformed why) {
  Impl& m = *impl_;
  ++stats_.malformed[static_cast<unsigned>(why)];
  ++m.malformed_since_log;
  uint64_t now = env::tsc();
  if (now - m.last_malformed_log >= env::tsc_hz()) {
    RDTX_LOG(rpc_log(), Warning, "endpoint %u: dropped %llu malformed datagram(s), latest: %s", id_,
             static_cast<unsigned long long>(m.malformed_since_log), to_string(why));
    m.last_malformed_log = now;
    m.malformed_since_log = 0;
  }
}

[[gnu::always_inline]] inline void Endpoint::dispatch(const std::byte* d, uint64_t now) {
  DatagramHeader dh;
  std::memcpy(&dh, d, sizeof dh);
  uint32_t off = sizeof dh;
  for (unsigned k = 0; k < dh.count; ++k) {
    MsgHeader mh;
    std::memcpy(&mh, d + off, sizeof mh);
    std::span<const std::byte> payload(d + off + sizeof mh, mh.len);
    off += sizeof mh + pad8(mh.len);
    if (mh.kind == Kind::kReply) {
      complete_call(dh.src, mh, payload, now);
    } else {
      handle_request(dh.src, mh, payload);
    }
  }
}

[[gnu::always_inline]] inline void Endpoint::complete_call(uint32_t src, const MsgHeader& mh, std::span<const std::byte> payload,
                                                             uint64_t now) {
  Impl& m = *impl_;
  ++stats_.replies_received;
  Impl::Call* cp = m.match_reply(mh.cookie, src);
  if (cp == nullptr) {
    ++stats_.stale_replies;
    return;
  }
  Impl::Call& c = *cp;
  // The peer is alive: its timeout drops back from any doubling, and a
  // call that timed the round trip updates it.
  Impl::Peer& peer = m.peers[src];
  peer.rtt.answered();
  if (c.sample && now > c.sent) {
    const uint64_t rtt = now - c.sent;
    peer.rtt.sample(rtt, m.timeout_tsc, m.max_timeout_tsc);
    const uint64_t rtt_ns = env::tsc_to_ns(rtt), rto_ns = env::tsc_to_ns(peer.rtt.rto);
    if (rtt_ns > stats_.longest_reply_ns) stats_.longest_reply_ns = rtt_ns;
    if (rto_ns > stats_.timeout_max_ns) stats_.timeout_max_ns = rto_ns;
  }
  if (c.state == CallState::kPassive) {
    --passive_outstanding_;
    if (mh.status != WireStatus::kOk) ++stats_.passive_failures;
  } else {
    Reply* r = c.reply;
    bool ok = mh.status == WireStatus::kOk && mh.len <= r->capacity;
    r->status = mh.status != WireStatus::kOk ? CallStatus::kNoHandler
                : ok                         ? CallStatus::kOk
                                             : CallStatus::kTooLarge;
    r->len = ok ? mh.len : 0;
    if (ok && mh.len > 0) std::memcpy(r->buf, payload.data(), mh.len);
    --calls_in_flight_;
    c.wg->done(ok);
  }
  m.release_call(cookie_slot(mh.cookie));
}

[[gnu::always_inline]] inline void Endpoint::handle_request(uint32_t src, const MsgHeader& mh, std::span<const std::byte> payload) {
  Impl& m = *impl_;
  ++stats_.requests_handled;
  const Handler& h = m.handlers[mh.handler];
  if (!h) {
    if (mh.kind != Kind::kOneway)
      append(src, Kind::kReply, mh.handler, WireStatus::kNoHandler, mh.cookie, {}, mh.kind == Kind::kRequest);
    return;
  }
  Request req;
  req.src_ = src;
  req.handler_ = mh.handler;
  req.kind_ = mh.kind;
  req.cookie_ = mh.cookie;
  req.payload_ = payload;
  req.reply_ = std::span<std::byte>(m.scratch);
  h(req);
  if (mh.kind == Kind::kOneway || req.deferred_) return;
  uint32_t rlen = std::min<uint32_t>(req.reply_len_, static_cast<uint32_t>(m.scratch.size()));
  append(src, Kind::kReply, mh.handler, WireStatus::kOk, mh.cookie, std::span<const std::byte>(m.scratch.data(), rlen),
         mh.kind == Kind::kRequest);
}

// One received datagram: validated whole, then (unless a copy of one
// already received) its credits taken, a credit owed for it, its messages
// dispatched.
[[gnu::always_inline]] inline void Endpoint::accept_datagram(const std::byte* d, uint32_t byte_len, uint64_t now) {
  Impl& m = *impl_;
  const uint32_t len = std::min(byte_len, mtu_);
  if (auto bad = validate(d, len, m.peers.size(), [&m](uint32_t src) { return m.peers[src].ah != nullptr; })) {
    ++stats_.datagrams_received;
    count_malformed(*bad);
    return;
  }
  DatagramHeader dh;
  std::memcpy(&dh, d, sizeof dh);
  // From an older configuration (a removed node, or one that has not
  // learned the newest yet): refused whole, credits and all.
  if (configuration_ != nullptr && dh.config < configuration_->load(std::memory_order_relaxed)) [[unlikely]] {
    ++stats_.stale_configuration;
    return;
  }
  // A duplicate (the network delivered it twice) must not run its
  // handlers again nor return its credits twice; it is not owed either.
  if (!m.peers[dh.src].accept(dh.seq)) {
    ++stats_.duplicates;
    return;
  }
  if (dh.credits != 0) take_credits(dh.src, dh.credits, now);
  if (dh.count == 0) {
    ++stats_.credit_returns_received;
    return;
  }
  ++stats_.datagrams_received;
  // Owed at once: the ring's kRepostBatch spare buffers cover the ones
  // not reposted yet.
  m.owe(dh.src, now);
  dispatch(d, now);
}

// Posts the consumed receive buffers again, with one call.
void Endpoint::repost() {
  Impl& m = *impl_;
  rdma::RecvRequest* bad = nullptr;
  if (qp_->post_recv(m.repost.data(), &bad) != 0)
    RDTX_LOG(rpc_log(), Error, "endpoint %u: cannot repost receive buffers", id_);
  m.unposted = 0;
}

int Endpoint::receive(uint64_t now) {
  Impl& m = *impl_;
  rdma::Completion* wc = m.wc.data();
  int n = m.cq->poll(wc, kBurst);
  if (n <= 0) return 0;
  for (int i = 0; i < n; ++i) {
    if (wc[i].opcode != rdma::Opcode::kRecv) {
      on_send_completion(wc[i]);
      continue;
    }
    if (wc[i].wr_id >= m.cfg.recv_buffers) continue;  // not ours: never repost it
    std::byte* buf = m.recv_buf(wc[i].wr_id);
    const int k = m.unposted++;
    rdma::RecvRequest& rr = m.repost[k];
    rr = {wc[i].wr_id, nullptr, buf, mtu_, m.mr.lkey};
    if (k > 0) m.repost[k - 1].next = &rr;
    if (wc[i].status == rdma::Status::kSuccess) accept_datagram(buf, wc[i].byte_len, now);
    // After the datagram's handlers ran: its buffer may be refilled now.
    if (m.unposted == kRepostBatch) repost();
  }
  return n;
}

inline void Endpoint::take_credits(uint32_t src, uint32_t returned, uint64_t now) {
  Impl& m = *impl_;
  Impl::Peer& p = m.peers[src];
  // More than we have outstanding only after we took them back on a timeout
  // (endpoint_timeout.cpp) and the late return arrived: never above the window.
  p.credits = std::min(m.cfg.credits, p.credits + returned);
  p.credit_tsc = now;
  p.stalled = false;  // the next flush sends, or counts a new stall
}

}  // namespace rdtx::rpc
