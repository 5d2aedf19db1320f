// Endpoint: two-sided RPC between workers over a datagram (UD) QP.
//
// Each worker owns one Endpoint with a dense id in its cluster. Handlers are
// registered per endpoint by the components that own them (an id each).
// A coroutine issues requests through a Batch: requests to several peers are
// accumulated, requests (and any pending replies or acks) bound for one peer
// are coalesced into one datagram, all datagrams go out with one doorbell,
// and the coroutine waits once for every reply (outstanding requests).
// The endpoint's poll() (a worker poller) receives datagrams, validates them,
// runs handlers for requests and completes the waiting calls for replies.
//
// Semantics:
// - call: the reply is awaited; a call not answered within `timeout_ns`
//   fails with kTimeout (a datagram may be lost, or the peer gone). A late
//   reply is matched by slot and generation (the cookie) and counted as
//   stale: it never completes a newer call that reuses the slot. A lazy
//   call's reply is sent like a passive ack (below): it rides on the
//   server's next datagram to the caller, or goes after `passive_delay_ns`;
//   the caller still awaits it (later) and sees its status and data.
// - oneway: no reply at all.
// - passive (passive ACK): the handler's reply is an ack that is not on the
//   caller's critical path: send() does not wait for it, the server does not
//   send it on its own but lets it ride on the next datagram to that peer
//   (piggyback), or sends it after `passive_delay_ns` at the latest. The
//   caller sees acks only as counters (passive_outstanding(), failures).
// - deferred reply: a handler may call Request::defer() and answer later with
//   Endpoint::reply() from any poller of the same worker (e.g. a lock that
//   must wait); nothing blocks the loop meanwhile.
// - flow control (session credits, as FaSST and eRPC): at most `credits`
//   datagrams with messages are outstanding to one peer; more wait in that
//   peer's datagram (still coalescing) and go when it returns credits, so
//   no receive buffer is overrun (recv_buffers_needed()). A coroutine
//   waiting on a Batch just waits longer.
// - Every arriving datagram is validated (header, source, lengths, kinds,
//   handler ids, reply cookies) before use; a malformed one is counted per
//   reason and dropped with a rate-limited log line.
// - Telemetry: every endpoint is listed in /rdtx/rpc/endpoints (lib/rpc
//   registers the command when the first endpoint is created) with the
//   counters its owner last published (publish_stats(), now and then).
//
// Thread-safety: an Endpoint and its Batches belong to the worker's thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "rdma/rdma.hpp"
#include "rpc/wire.hpp"
#include "runtime/worker.hpp"
#include "stats/published.hpp"

namespace rdtx::rpc {

inline constexpr unsigned kMaxHandlers = 64;
using HandlerId = uint8_t;

inline constexpr uint32_t kMaxCredits = 1024;
// A sane cap on receive buffers per endpoint (64 MiB of 4 KiB datagrams),
// whatever the device allows.
inline constexpr uint32_t kMaxRecvBuffers = 1u << 14;

struct EndpointConfig {
  // Session credits: datagrams with messages this endpoint may have
  // outstanding to one peer (1..kMaxCredits); the same on every endpoint of
  // a cluster. 8, as eRPC's default: a datagram coalesces a whole batch to
  // the peer, so 8 covers a worker's coroutines each waiting on one peer at
  // the default txn.coroutines, and the receive buffers it implies (below)
  // stay small as the cluster grows.
  uint32_t credits = 8;
  // Posted receive buffers of mtu bytes: at least recv_buffers_needed()
  // (0 = exactly that), so that no datagram a peer may send is dropped.
  uint32_t recv_buffers = 0;
  uint32_t send_buffers = 1024;   // datagram buffers; also the send queue depth
  uint32_t max_calls = 4096;      // calls and passive requests in flight
  // A call's timeout adapts to the round trips it measures to each peer,
  // as TCP's retransmission timeout does (RFC 6298): smoothed round trip
  // plus four times its variation (at least plus the round trip again),
  // never below timeout_ns (the floor) nor
  // above max_timeout_ns; each call to a peer that timed out doubles the
  // peer's timeout until one is answered. A slow but live peer (a
  // software RNIC, a loaded host) then never times a call out, while a
  // silent one still does (endpoint_timeout.cpp).
  uint64_t timeout_ns = 100'000'000;
  uint64_t max_timeout_ns = 5'000'000'000;
  uint64_t passive_delay_ns = 20'000;  // longest wait of an ack (or owed credits) for a ride
  uint32_t signal_every = 16;     // one signaled SEND per this many
  // The node's configuration number (doc/membership.md), read when a
  // datagram is posted (it carries it) and when one arrives: a datagram of
  // an older configuration than this node's is dropped. nullptr: none (0).
  const std::atomic<uint32_t>* configuration = nullptr;
};

// Where a reply lands: owned by the caller, valid until the call completes.
enum class CallStatus : uint8_t { kPending, kOk, kTimeout, kNoHandler, kTooLarge, kSendFailed };
const char* to_string(CallStatus s);
struct Reply {
  std::byte* buf = nullptr;
  uint32_t capacity = 0;
  uint32_t len = 0;
  CallStatus status = CallStatus::kPending;
};

// A token for answering a request later.
struct Deferred {
  uint32_t src = 0;
  uint64_t cookie = 0;
  Kind kind = Kind::kRequest;
  bool valid() const { return kind != Kind::kOneway; }
};

class Endpoint;

// What a handler sees. The payload is valid until the handler returns.
class Request {
 public:
  uint32_t src() const { return src_; }
  HandlerId handler() const { return handler_; }
  std::span<const std::byte> payload() const { return payload_; }
  bool wants_reply() const { return kind_ != Kind::kOneway; }
  // The reply: write up to reply_buffer().size() bytes, then set_reply_len.
  // A request that wants a reply and sets nothing gets an empty reply.
  std::span<std::byte> reply_buffer() const { return reply_; }
  void set_reply_len(uint32_t n) { reply_len_ = n; }
  // Answer later with Endpoint::reply(token, ...). No reply is sent now.
  Deferred defer() {
    deferred_ = true;
    return {src_, cookie_, kind_};
  }

 private:
  friend class Endpoint;
  uint32_t src_ = 0;
  HandlerId handler_ = 0;
  Kind kind_ = Kind::kRequest;
  uint64_t cookie_ = 0;
  std::span<const std::byte> payload_;
  std::span<std::byte> reply_;
  uint32_t reply_len_ = 0;
  bool deferred_ = false;
};

using Handler = std::function<void(Request&)>;

struct EndpointStats {
  uint64_t calls = 0, oneways = 0, passives = 0;
  uint64_t requests_handled = 0, replies_received = 0;
  uint64_t datagrams_sent = 0, datagrams_received = 0, doorbells = 0;
  uint64_t timeouts = 0, passive_timeouts = 0, passive_failures = 0;
  uint64_t stale_replies = 0;   // replies to calls that already ended
  uint64_t stale_configuration = 0;  // datagrams of an older configuration, dropped
  // The adaptive timeout (EndpointConfig::timeout_ns): the largest any peer's
  // has been, and the longest a call waited for its reply.
  uint64_t timeout_max_ns = 0, longest_reply_ns = 0;
  uint64_t duplicates = 0;      // datagrams received twice (or older than the window), dropped
  uint64_t send_failures = 0;   // no send buffer, or the driver refused
  // Flow control: datagrams of no messages that return credits (not in
  // datagrams_sent/received), times a peer had something to send and no
  // credit, and times a peer's credits were taken back after a timeout
  // (a datagram or its credit return was lost).
  uint64_t credit_returns_sent = 0, credit_returns_received = 0;
  uint64_t credit_stalls = 0, credit_resets = 0;
  uint64_t malformed[static_cast<unsigned>(Malformed::kCount_)] = {};
  uint64_t malformed_total() const;
};

class Batch;

class Endpoint {
 public:
  // A UD QP on `dev` with its own CQ, receive and send buffers.
  static Result<std::unique_ptr<Endpoint>> create(rdma::Device& dev, uint32_t id, uint32_t max_peers,
                                                  const EndpointConfig& cfg = {});
  // Receive buffers an endpoint with `max_peers` peers needs so that no
  // datagram is dropped: every peer may have `credits` datagrams with
  // messages and `credits` credit returns on their way to it.
  static uint64_t recv_buffers_needed(const EndpointConfig& cfg, uint32_t max_peers);
  // Whether create() would accept these sizes on a device with `caps`; the
  // error names the field and the computed number.
  static Result<void> check_config(const rdma::DeviceCaps& caps, const EndpointConfig& cfg, uint32_t max_peers);
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  uint32_t id() const { return id_; }
  rdma::QpAddress address() const { return qp_->address(); }
  // Makes peer `id` (< max_peers) reachable and accepted as a source.
  Result<void> connect(uint32_t peer, const rdma::QpAddress& addr);

  Result<void> register_handler(HandlerId id, std::string name, Handler h);

  // The poller: receives and dispatches a burst, flushes replies, expires
  // timed-out calls, sends aged passive acks. Returns the work done.
  int poll();

  // Answers a deferred request (from any code running on this worker).
  // Returns false if the reply does not fit a datagram.
  bool reply(const Deferred& d, std::span<const std::byte> bytes);

  uint32_t max_payload() const { return mtu_ - kDatagramOverhead; }
  uint32_t passive_outstanding() const { return passive_outstanding_; }
  uint32_t calls_in_flight() const { return calls_in_flight_; }
  // Credits left to `peer` (datagrams it may still be sent now).
  uint32_t credits(uint32_t peer) const;
  // The timeout a call to each peer would get now without doublings: the
  // largest over the peers (EndpointConfig::timeout_ns, adaptive), in ns.
  uint64_t settled_timeout_ns() const;
  uint32_t recv_buffers() const;  // posted receive buffers
  const rdma::QueuePair& queue_pair() const { return *qp_; }
  const EndpointStats& stats() const { return stats_; }
  // Copies stats() for /rdtx/rpc/endpoints (control path: a copy of a few
  // hundred bytes; the run harness calls it every 50 ms).
  void publish_stats() { published_->publish(stats_); }

 private:
  friend class Batch;
  struct Impl;  // endpoint_impl.hpp
  Endpoint() = default;

  // Receive (endpoint_rx.cpp): polls one burst of completions, dispatches
  // the valid datagrams, reposts the receive buffers. Returns completions.
  int receive(uint64_t now);
  void count_malformed(Malformed why);
  void accept_datagram(const std::byte* d, uint32_t byte_len, uint64_t now);
  void repost();
  void dispatch(const std::byte* datagram, uint64_t now);  // a validated datagram's messages
  void complete_call(uint32_t src, const MsgHeader& mh, std::span<const std::byte> payload, uint64_t now);
  void handle_request(uint32_t src, const MsgHeader& mh, std::span<const std::byte> payload);
  void take_credits(uint32_t src, uint32_t returned, uint64_t now);
  // Send (endpoint_tx.cpp).
  void on_send_completion(const rdma::Completion& wc);
  // Adds a datagram (buffer `buf`) for `dest` as work request n of the
  // flush; returns n + 1. Posts the requests first if they fill a doorbell.
  size_t stage(size_t n, uint32_t dest, uint32_t buf, bool messages);
  void post(size_t n);  // the first n staged requests, one doorbell
  size_t return_credits(size_t n, uint64_t now);  // stages the credit returns due

  // Appends a message to the datagram being built for `dest`; if it does
  // not fit, that datagram is closed and waits for the next flush (and a
  // credit). False if no buffer is free.
  bool append(uint32_t dest, Kind kind, HandlerId h, WireStatus st, uint64_t cookie,
              std::span<const std::byte> payload, bool urgent);
  // Posts, with one doorbell, every datagram that should go and has a
  // credit (urgent ones, aged acks, full ones waiting) and the credit
  // returns that are due. Callers skip it when Impl::flush_due() is false.
  void flush(uint64_t now);
  // Registers a call; returns its cookie, or 0 if the table is full.
  // `timeout_tsc`: the call's own timeout (0: the endpoint's adaptive one
  // to `dest`; never shorter than that).
  uint64_t start_call(uint32_t dest, Reply* reply, runtime::WaitGroup* wg, uint64_t timeout_tsc = 0);
  // Timeouts (endpoint_timeout.cpp): ends the calls past their deadline,
  // takes back credits a peer has not returned within the timeout. Returns
  // how many calls ended.
  int expire_calls(uint64_t now);
  void recover_credits(uint64_t now);
  // Time this endpoint was not polled (its thread descheduled, say) is
  // not a peer's silence: deadlines and credit ages move on by the gap.
  void not_polled(uint64_t gap_tsc);

  std::unique_ptr<Impl> impl_;
  rdma::Device* device_ = nullptr;  // makes the peers' address handles
  std::unique_ptr<rdma::QueuePair> qp_;
  uint32_t id_ = 0;
  uint32_t mtu_ = 0;
  const std::atomic<uint32_t>* configuration_ = nullptr;  // EndpointConfig::configuration
  uint32_t passive_outstanding_ = 0;
  uint32_t calls_in_flight_ = 0;
  EndpointStats stats_;
  // This endpoint in /rdtx/rpc/endpoints, as "ep<id>".
  std::optional<stats::PublishedList<EndpointStats>::Entry> published_;
};

// The endpoints of this process, for /rdtx/rpc/endpoints
// (endpoint_telemetry.cpp): registers the command on first use.
stats::PublishedList<EndpointStats>& endpoint_list();

// A coroutine's set of outstanding requests. Use once: add, then
// `co_await batch.send()`, which yields true if every call got an OK reply.
class Batch {
 public:
  explicit Batch(Endpoint& ep) : ep_(ep) {}
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  // Each returns false (and the request is not sent) if it cannot be queued:
  // payload larger than max_payload(), no send buffer, call table full, or
  // unknown destination. A failed call() has reply->status kSendFailed.
  // `lazy`: the server's reply may wait for a ride on its next message to
  // this endpoint, or passive_delay_ns at the latest (DrTM+H's piggybacked
  // acknowledgement, for a reply the caller needs only later); otherwise it
  // goes with the server's next flush.
  bool call(uint32_t dest, HandlerId h, std::span<const std::byte> req, Reply* reply, bool lazy = false);
  // The calls added from now on time out after `ns` instead of the
  // endpoint's timeout_ns (0: the endpoint's): for a request the server may
  // answer late on purpose (a lock request that waits in a queue).
  void set_timeout_ns(uint64_t ns);
  bool oneway(uint32_t dest, HandlerId h, std::span<const std::byte> req);
  bool passive(uint32_t dest, HandlerId h, std::span<const std::byte> req);

  // Sends everything with one doorbell; `co_await` the result to wait for
  // the calls' replies (true if all were OK).
  runtime::WaitGroup::Ref send();

 private:
  Endpoint& ep_;
  runtime::WaitGroup wg_;
  uint64_t timeout_tsc_ = 0;
  bool failed_ = false;
};

}  // namespace rdtx::rpc
