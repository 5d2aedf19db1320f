// The Endpoint's private state, shared by the files that each handle one
// concern of it (as eRPC splits rpc_rx.cc / rpc_tx.cc / rpc_pkt_loss.cc):
//
//   endpoint.cpp          set-up, the call table, poll(), Batch
//   endpoint_rx.cpp       receive: validate a datagram, dispatch its messages
//   endpoint_tx.cpp       send: build datagrams per peer, flush them with one
//                         doorbell, passive acks, send completions
//   endpoint_timeout.cpp  expiry of calls and passive requests
//
// Not a public header: only lib/rpc includes it.
// Thread-safety: as Endpoint (owned by one worker thread).
#pragma once

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "env/log.hpp"
#include "env/tsc.hpp"
#include "rpc/endpoint.hpp"
#include "rpc/round_trip_timer.hpp"

namespace rdtx::rpc {

inline const env::LogType& rpc_log() {
  static const env::LogType type("rdtx.rpc");
  return type;
}

inline constexpr int kBurst = 32;
// Receive buffers are reposted in batches of this many (one post_recv call
// for all, as eRPC's RECV slack): the receive ring holds this many beyond
// what the credits need, so the credits owed for buffers not yet reposted
// are safe to return at once.
inline constexpr int kRepostBatch = 16;
inline constexpr uint32_t kNoBuffer = UINT32_MAX;

enum class CallState : uint8_t { kFree, kWaiting, kPassive };

// Whether `d` ticks have passed since `since`. poll() reads the clock once
// per pass, and a handler run in that pass may stamp a later time: that
// one has not aged (a plain now - since would wrap).
inline bool aged(uint64_t since, uint64_t now, uint64_t d) { return now >= since && now - since >= d; }

// A call's cookie names its slot in the call table and the slot's
// generation, which changes every time the slot is released: a reply is
// matched to a call only if both agree, so a late reply to a call that timed
// out never completes the newer call that reuses its slot. Generation 0 is
// skipped, so no valid cookie is 0.
inline uint64_t make_cookie(uint32_t slot, uint32_t gen) { return (static_cast<uint64_t>(gen) << 32) | slot; }
inline uint32_t cookie_slot(uint64_t cookie) { return static_cast<uint32_t>(cookie); }
inline uint32_t cookie_gen(uint64_t cookie) { return static_cast<uint32_t>(cookie >> 32); }

struct Endpoint::Impl {
  EndpointConfig cfg;
  std::unique_ptr<rdma::CompletionQueue> cq;
  std::unique_ptr<rdma::DeviceMemory> mem;
  rdma::MemoryRegion mr;
  uint32_t max_inline = 0;

  // Receive side: buffer i at recv_base + i * mtu, wr_id = i. The burst's
  // completions live here, not on the stack: an array of them there is
  // value-initialised on every poll.
  std::array<rdma::Completion, kBurst> wc{};
  std::byte* recv_base = nullptr;
  std::array<rdma::RecvRequest, kRepostBatch> repost{};
  int unposted = 0;  // consumed buffers in `repost`, not posted yet

  // Send side: datagram buffers, free stack, and those in flight in post
  // order (released when a later signaled SEND completes).
  std::byte* send_base = nullptr;
  std::vector<uint32_t> free_bufs;
  struct InFlight {
    uint64_t seq;
    uint32_t buf;
  };
  std::vector<InFlight> inflight;  // ring of send_buffers entries
  size_t inflight_head = 0, inflight_size = 0;
  uint64_t post_seq = 0;
  uint32_t unsignaled = 0;  // posts since the last signaled one

  // Per peer: its address handle, the datagram being built for it, the full
  // ones waiting for a credit, and the credits both ways.
  struct Peer {
    std::unique_ptr<rdma::AddressHandle> ah;
    uint32_t buf = kNoBuffer;  // the datagram being built, or kNoBuffer
    uint32_t len = 0;
    uint8_t count = 0;
    bool urgent = false;
    bool listed = false;     // in `active`
    uint64_t since_tsc = 0;  // first lazy (passive ack) message, 0 if none
    // Full datagrams waiting for a credit, oldest first, linked by buf_next.
    uint32_t wait_head = kNoBuffer, wait_tail = kNoBuffer;
    uint32_t credits = 0;         // datagrams with messages we may still send it
    uint64_t credit_tsc = 0;      // its last credit return
    uint32_t owed = 0;            // its datagrams we received and not yet said so
    uint64_t owed_since_tsc = 0;  // when owed became non-zero
    bool stalled = false;         // has something to send and no credit
    uint64_t stalled_tsc = 0;     // since when
    bool owing_listed = false;    // in `owing`
    // Duplicate suppression (an anti-replay window, as IPsec's): the next
    // datagram number we send it; the highest we received from it and a
    // bit per each of the 64 numbers below that one already received.
    uint32_t tx_seq = 0;
    uint32_t rx_high = 0;
    uint64_t rx_seen = 0;
    // The adaptive timeout (RFC 6298; round_trip_timer.hpp).
    RoundTripTimer rtt;
    // True (and recorded) if datagram `seq` from this peer is new; false for
    // a copy already received, or one older than the window (treated as lost).
    bool accept(uint32_t seq) {
      const int32_t ahead = static_cast<int32_t>(seq - rx_high);
      if (ahead > 0) {
        rx_seen = ahead >= 64 ? 0 : (rx_seen << ahead) | (uint64_t{1} << (ahead - 1));
        rx_high = seq;
        return true;
      }
      const uint32_t behind = static_cast<uint32_t>(-ahead);  // 0: rx_high itself
      if (behind == 0 || behind > 64 || (rx_seen >> (behind - 1) & 1)) return false;
      rx_seen |= uint64_t{1} << (behind - 1);
      return true;
    }
    bool busy() const { return buf != kNoBuffer || wait_head != kNoBuffer; }
  };
  std::vector<Peer> peers;
  std::vector<uint32_t> active;  // peers that are busy(): the only ones flush() visits
  // Peers we may owe credits (pruned lazily: a piggybacked return leaves
  // them here until the next walk), and when the first of those credits is
  // due to go back alone (0: now; UINT64_MAX: none owed).
  std::vector<uint32_t> owing;
  uint64_t credits_due_tsc = UINT64_MAX;
  uint32_t owed_peers = 0;  // peers with owed > 0
  // Per send buffer: its length and next in a peer's waiting list.
  std::vector<uint32_t> buf_len, buf_next;
  // One flush's work requests.
  std::vector<rdma::WorkRequest> wrs;
  std::vector<uint32_t> wr_buf;  // the buffer of wrs[i]
  uint32_t credit_return_at = 1;  // owed credits that go back alone at once
  DatagramHeader header{};        // this endpoint's: count and credits 0
  bool post_failed = false;       // a flush must re-list the peers it restored

  struct Call {
    uint32_t gen = 1;
    CallState state = CallState::kFree;
    uint32_t dest = 0;
    Reply* reply = nullptr;
    runtime::WaitGroup* wg = nullptr;
    uint64_t deadline = 0;
    uint64_t sent = 0;    // when it started
    bool sample = false;  // its reply times the round trip (the endpoint's timeout)
  };
  std::vector<Call> calls;
  // Free call slots, a stack: the lowest slots are reused first, so the
  // calls in flight stay among the first few slots.
  std::vector<uint32_t> free_calls;
  // Slots [calls_high, calls.size()) are free: the timeout scan looks at
  // the slots below only. Starting a call costs one compare; ending one
  // nothing (no list of calls in flight to keep).
  uint32_t calls_high = 0;
  uint64_t timeout_tsc = 0, passive_delay_tsc = 0, scan_interval_tsc = 0, next_scan_tsc = 0;
  uint64_t max_timeout_tsc = 0;

  // A call's timeout to `p` now (RoundTripTimer::timeout).
  uint64_t timeout_for(const Peer& p) const { return p.rtt.timeout(timeout_tsc, max_timeout_tsc); }
  uint64_t last_poll_tsc = 0;  // the previous poll pass (unpolled time is not counted)

  std::array<Handler, kMaxHandlers> handlers;
  std::array<std::string, kMaxHandlers> handler_names;
  std::vector<std::byte> scratch;  // a handler's reply is written here

  uint64_t last_malformed_log = 0;
  uint64_t malformed_since_log = 0;

  [[gnu::always_inline]] void list(uint32_t dest) {
    if (!peers[dest].listed) {
      peers[dest].listed = true;
      active.push_back(dest);
    }
  }

  // Ends the datagram being built for `p`: writes its header (credits are
  // filled in when it is posted) and returns its buffer.
  uint32_t close_open(Peer& p) {
    DatagramHeader dh = header;
    dh.count = p.count;
    std::memcpy(send_buf(p.buf), &dh, sizeof dh);
    const uint32_t b = p.buf;
    buf_len[b] = p.len;
    p.buf = kNoBuffer;
    return b;
  }
  // Puts a full datagram in p's waiting list (it goes at the next flush
  // that finds a credit).
  void enqueue(Peer& p, uint32_t b) {
    buf_next[b] = kNoBuffer;
    if (p.wait_tail == kNoBuffer) {
      p.wait_head = b;
    } else {
      buf_next[p.wait_tail] = b;
    }
    p.wait_tail = b;
  }
  uint32_t dequeue(Peer& p) {
    const uint32_t b = p.wait_head;
    p.wait_head = buf_next[b];
    if (p.wait_head == kNoBuffer) p.wait_tail = kNoBuffer;
    return b;
  }

  // Whether flush() has anything to do: a datagram open or waiting, or
  // owed credits due to go back alone.
  // (credits_due_tsc is UINT64_MAX while nothing is owed.)
  bool flush_due(uint64_t now) const { return !active.empty() || now >= credits_due_tsc; }

  // We received one more datagram from `src` (its buffer is reposted, or
  // among the kRepostBatch the ring holds beyond the credits).
  void owe(uint32_t src, uint64_t now) {
    Peer& p = peers[src];
    if (p.owed++ == 0) {
      ++owed_peers;
      p.owed_since_tsc = now;
      credits_due_tsc = std::min(credits_due_tsc, now + passive_delay_tsc);
    }
    if (p.owed >= credit_return_at) credits_due_tsc = 0;
    if (!p.owing_listed) {
      p.owing_listed = true;
      owing.push_back(src);
    }
  }

  // A peer's owed credits all went back with a datagram. It stays in
  // `owing` (once, owing_listed) until return_credits() walks the list.
  void paid() {
    if (--owed_peers == 0) credits_due_tsc = UINT64_MAX;
  }

  std::byte* send_buf(uint32_t i) const { return send_base + static_cast<size_t>(i) * mr_stride; }
  std::byte* recv_buf(uint64_t i) const { return recv_base + static_cast<size_t>(i) * mr_stride; }
  uint32_t mr_stride = 0;  // == mtu

  // The live call that `cookie` names and that went to `src`, or nullptr
  // (a stale or forged reply).
  Call* match_reply(uint64_t cookie, uint32_t src) {
    const uint32_t idx = cookie_slot(cookie);
    if (idx >= calls.size()) return nullptr;
    Call& c = calls[idx];
    if (c.gen != cookie_gen(cookie) || c.state == CallState::kFree || c.dest != src) return nullptr;
    return &c;
  }

  // Ends a call: bumps the generation so a late reply is recognised as stale.
  void release_call(uint32_t idx) {
    Call& c = calls[idx];
    c.state = CallState::kFree;
    c.reply = nullptr;
    c.wg = nullptr;
    if (++c.gen == 0) c.gen = 1;  // cookie 0 is never valid
    free_calls.push_back(idx);
  }
};

// Appends a message to the datagram being built for `dest` (inlined at its
// few call sites: on the path of every call and reply).
[[gnu::always_inline]] inline bool Endpoint::append(uint32_t dest, Kind kind, HandlerId h, WireStatus st, uint64_t cookie,
                                                      std::span<const std::byte> payload, bool urgent) {
  Impl& m = *impl_;
  if (dest >= m.peers.size() || !m.peers[dest].ah) return false;
  if (payload.size() > max_payload()) return false;
  const uint32_t need = sizeof(MsgHeader) + pad8(static_cast<uint32_t>(payload.size()));
  Impl::Peer& p = m.peers[dest];
  if (p.buf != kNoBuffer && (p.len + need > mtu_ || p.count == UINT8_MAX)) {
    // Full: it waits for the next flush, and a credit.
    m.enqueue(p, m.close_open(p));
  }
  if (p.buf == kNoBuffer) {
    // The last free buffer is kept for credit returns: two endpoints whose
    // buffers all wait for the other's credits can still return them.
    if (m.free_bufs.size() <= 1) {
      ++stats_.send_failures;
      return false;
    }
    p.buf = m.free_bufs.back();
    m.free_bufs.pop_back();
    p.len = sizeof(DatagramHeader);
    p.count = 0;
    p.urgent = false;
    p.since_tsc = 0;
    m.list(dest);
  }
  std::byte* base = m.send_buf(p.buf);
  MsgHeader mh{kind, h, st, 0, static_cast<uint32_t>(payload.size()), cookie};
  std::memcpy(base + p.len, &mh, sizeof mh);
  if (!payload.empty()) std::memcpy(base + p.len + sizeof mh, payload.data(), payload.size());
  p.len += need;
  ++p.count;
  if (urgent) {
    p.urgent = true;
  } else if (p.since_tsc == 0) {
    p.since_tsc = env::tsc();
  }
  return true;
}

}  // namespace rdtx::rpc
