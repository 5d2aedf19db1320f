// Leases between the configuration manager (CM) and every member, renewed
// over the fabric with one-sided WRITEs, not through ZooKeeper, as FaRM's
// (doc/membership.md "Leases").
//
// Each node's LeaseAgent has a device context of its own (so that no worker's
// QP, CQ or doorbell is shared), one completion queue, an RC QP to every
// other node and one registered region of 64-byte slots:
//
//   slot 0          grant: the CM's newest answer to this node, {seq, config};
//                   then its beat (its agent's tick count)
//   slot 1 + n      renewal of member n (read by the CM): {seq, acknowledged config};
//                   word 4: where this node's READs of node n's beat land
//
// A member WRITEs renewal k into the CM's slot 1 + self every tick and
// remembers when it sent it; the CM's agent polls its renewal slots every
// tick and answers each new one with a grant {k, announced configuration}
// WRITTEN into the member's slot 0. A member's lease runs until
// sent(k) + lease for the newest granted k; once the lease has lapsed the
// member is fenced, for good (fenced() turns true). The CM suspects member n
// once lease + guard has passed since it granted n's newest renewal, and
// never grants n again. A grant follows the sending of the renewal it
// answers, so a member's lease lapses before its CM may suspect it: a member
// that its CM removes has fenced itself by then (given clocks whose rates
// agree within the guard). The member fences itself when its next tick
// would come too late (a tick and a quarter before its lease ends), so that
// it has stopped serving when the lease lapses if its thread wakes within a
// quarter tick of its timer.
//
// A fenced member READs every node's beat every tick: cm_silent_ns() says
// how long its CM's has not moved (a CM that died, or one stopped), which
// is when a member may try to become the CM through the store
// (switch_cm()), and live_nodes() how many nodes' beats move.
//
// The CM tells members a new configuration by its number in the grants
// (announce()); a member acknowledges a number in its renewals
// (acknowledge()) once it has acted on it; the CM reads the acknowledgements
// (acknowledged()). What a configuration holds lives in the store
// (ConfigStore), not here.
//
// Thread-safety: create() on the control thread, collectively on every node
// (its all_gather exchanges the addresses). start() and stop() on that
// thread; the agent's own thread does the verbs. Every other call may come
// from any thread at any time: they read or write atomics, or take the
// agent's mutex, never in a hot path.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/result.hpp"
#include "rdma/rdma.hpp"

namespace rdtx::membership {

// The agents' clock (CLOCK_MONOTONIC, ns): every time the agent reports.
uint64_t lease_clock_ns();

struct LeaseOptions {
  uint64_t lease_ns = 250'000'000;  // cluster.lease_ms
  // The agent's period: renewals sent, renewals polled, grants sent. 0:
  // lease_ns / 8.
  uint64_t tick_ns = 0;
  // The CM suspects a member this long after the lease it granted would
  // have lapsed: slack for clocks whose rates differ. 0: one tick.
  uint64_t guard_ns = 0;
  // The first lease: until its first grant a member's lease runs from
  // start(), and the CM waits this long from its own start() before it
  // suspects a member that never renewed (the agents of a run start within
  // this of each other, after a barrier). 0: 4 leases.
  uint64_t first_grant_ns = 0;
  // Run the agent's thread at real-time priority (SCHED_FIFO 1), as FaRM
  // runs its lease manager, when the process may (root or CAP_SYS_NICE);
  // else at normal priority. realtime() says which.
  bool realtime = true;
  // Called once on the agent's thread when this member fences itself, before
  // anything else it does (it must return quickly: runtime::request_halt).
  std::function<void()> on_fence;
};

// Every node's blob, by node id (cluster::Bootstrap::all_gather).
using LeaseAllGather =
    std::function<Result<std::vector<std::vector<std::byte>>>(std::span<const std::byte> mine, std::string_view what)>;

// A member the CM suspects.
struct Suspicion {
  uint32_t node = 0;
  uint64_t at_ns = 0;           // monotonic time the CM suspected it
  uint64_t since_grant_ns = 0;  // time since the CM's last grant to it (or its start)
  uint64_t renewals = 0;        // renewals of it the CM had seen
};

// Per member, as the CM saw its renewals.
struct RenewalStats {
  uint64_t renewals = 0;    // new renewals seen
  uint64_t late = 0;        // seen more than half a lease after the one before
  uint64_t max_gap_ns = 0;  // longest time between two of them (from the start for the first)
};

class LeaseAgent {
 public:
  // Collective: every node calls it with the same nodes, cm and options.
  // `device` is the node's device (the agent opens a context of its own on
  // it). Errors name the step (context, region, QP, the exchange).
  static Result<std::unique_ptr<LeaseAgent>> create(rdma::Device& device, uint32_t self, uint32_t nodes, uint32_t cm,
                                                    const LeaseOptions& options, const LeaseAllGather& all_gather);
  ~LeaseAgent();
  LeaseAgent(const LeaseAgent&) = delete;
  LeaseAgent& operator=(const LeaseAgent&) = delete;

  // Starts the agent's thread: the first leases run from now.
  void start();
  // Stops it (no more renewals or grants); idempotent. Leases are not
  // honoured after stop(): call it at the end of the run.
  void stop();

  uint32_t self() const { return self_; }
  uint32_t cm() const { return cm_.load(std::memory_order_acquire); }
  bool is_cm() const { return self_ == cm(); }
  // A new CM (the store's configuration named it): from the agent's next
  // tick, this node renews with `n`, or, if it is `n`, grants every member
  // that renews (each gets first_grant_ns to renew before a suspicion). A
  // fenced member is no longer fenced (its lease starts again: whether it
  // serves again is its caller's decision). Any thread.
  void switch_cm(uint32_t n) { switch_to_.store(n, std::memory_order_release); }
  // Member, once fenced: how long its CM's beat has not moved (0 before
  // it fenced itself).
  uint64_t cm_silent_ns() const;
  // Member, once fenced: the nodes whose beat moved within the last
  // `within_ns`, itself included (a would-be CM takes over only with a
  // majority of its configuration's members, as FaRM's CM probes).
  uint32_t live_nodes(uint64_t within_ns) const;
  const LeaseOptions& options() const { return o_; }
  bool realtime() const { return realtime_.load(std::memory_order_relaxed); }

  // Member (not the CM): its lease lapsed; why, and when (monotonic ns).
  bool fenced() const { return fenced_.load(std::memory_order_acquire); }
  std::string fence_reason() const;
  uint64_t fenced_at_ns() const { return fenced_at_.load(std::memory_order_acquire); }
  // Member: the newest configuration number its CM announced (0: none yet).
  uint64_t announced() const;
  // Member: tells the CM, in the next renewals, that it has acted on
  // configuration `number`.
  void acknowledge(uint64_t number) { acked_.store(number, std::memory_order_release); }

  // CM: suspicions not taken yet (each member at most once).
  std::vector<Suspicion> take_suspicions();
  // CM: announces configuration `number` in every grant from now on.
  void announce(uint64_t number) { announced_out_.store(number, std::memory_order_release); }
  // CM: the newest configuration number member n acknowledged (the CM's own
  // number for itself).
  uint64_t acknowledged(uint32_t n) const;
  // CM: stops granting member n (it will fence itself); a suspicion does it.
  void revoke(uint32_t n);
  // CM: node n is no member any more (a configuration left it out): no
  // grant, no suspicion. Any thread.
  void forget(uint32_t n);
  // CM: what it saw of member n's renewals so far.
  RenewalStats renewal_stats(uint32_t n) const;
  // Member: renewals sent, and the longest time between two (its thread's
  // scheduling delays show there).
  uint64_t renewals_sent() const { return sent_.load(std::memory_order_relaxed); }
  uint64_t max_send_gap_ns() const { return max_send_gap_.load(std::memory_order_relaxed); }
  // Work requests that completed with an error (a peer gone, a QP failed).
  uint64_t verb_errors() const { return verb_errors_.load(std::memory_order_relaxed); }
  // Member: the end of its lease as it stood when it fenced itself (0 before).
  uint64_t lease_end_ns() const { return lease_end_.load(std::memory_order_acquire); }

  // The agent's thread sleeps `ns` at its next tick, renewing, granting and
  // checking nothing, as in a stopped process (tests, chaos).
  void freeze(uint64_t ns) { freeze_ns_.store(ns, std::memory_order_release); }

 private:
  struct Peer;
  LeaseAgent() = default;
  void run();
  void tick(uint64_t now);
  void member_tick(uint64_t now);
  void cm_tick(uint64_t now);
  void post_write(uint32_t to, size_t slot, uint64_t w0, uint64_t w1);
  void reap();
  uint64_t word(size_t slot, int i) const;
  void fence(uint64_t now, std::string why);
  void apply_switch(uint64_t now, uint32_t n);
  void probe(uint64_t now);

  LeaseOptions o_;
  uint32_t self_ = 0, nodes_ = 0;
  std::atomic<uint32_t> cm_{0};
  static constexpr uint32_t kNoSwitch = UINT32_MAX;
  std::atomic<uint32_t> switch_to_{kNoSwitch};
  uint64_t beat_ = 0;                      // its ticks, published in slot 0 word 2
  std::atomic<uint64_t> probing_since_{0};  // member, fenced: when it began to READ the beats (0: not)
  std::unique_ptr<rdma::Device> ctx_;
  std::unique_ptr<rdma::DeviceMemory> mem_;
  rdma::MemoryRegion mr_;
  std::unique_ptr<rdma::CompletionQueue> cq_;
  std::vector<Peer> peers_;  // by node id (self's entry has no QP)

  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> realtime_{false};
  uint64_t started_ns_ = 0;

  // Member side.
  static constexpr size_t kRing = 64;
  uint64_t seq_ = 0;                 // newest renewal sent
  uint64_t sent_at_[kRing] = {};     // when renewal seq was sent, by seq % kRing
  uint64_t granted_ = 0;             // newest granted seq seen
  uint64_t valid_until_ = 0;         // the lease's end
  uint64_t last_send_ = 0;
  std::atomic<uint64_t> acked_{0};
  std::atomic<uint64_t> sent_{0}, max_send_gap_{0}, verb_errors_{0};
  std::atomic<bool> fenced_{false};
  std::atomic<uint64_t> fenced_at_{0}, lease_end_{0}, freeze_ns_{0};
  std::string last_error_;  // the agent's thread only, until fenced

  // CM side.
  std::atomic<uint64_t> announced_out_{0};
  mutable std::mutex mu_;  // guards fence_reason_, suspicions_, stats_
  std::string fence_reason_;
  std::vector<Suspicion> suspicions_;
  std::vector<RenewalStats> stats_;
};

}  // namespace rdtx::membership
