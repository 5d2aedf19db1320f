// Service: a per-node service, work a worker does besides its coordinators
// (WAITDIE's lock wait list today; a sequencer, a timestamp oracle, a version
// mover or a log applier for the protocols to come). A protocol creates its
// services in its ProtocolDef::create and hands them to
// WorkerEngine::add_service; the engine runs their lifecycle:
//
//   start()  once, after the protocol is created and before any coordinator
//            runs; an error fails the run with the service's name
//   poll()   by a named poller of the worker (SPDK's
//            spdk_poller_register_named), every period_ns (0: every pass);
//            returns the work it did (0: idle)
//   drain()  once the worker is stopping: polled (with poll()) until it
//            returns true, and the worker's loop keeps running until then.
//            Finish or refuse what is pending, so that no caller of another
//            node waits for an answer that will not come
//   settle() after the run, before its checks (runner's thread)
//   stop()   when the engine goes, after its poller was unregistered
//   locks_left()  after the run: locks still held (a lock table's)
//   freeze_senders(), senders_frozen()  recovery's, from its own thread
//
// Thread-safety: every call on the worker's thread, but the two of
// recovery's (from its thread: a service that freezes makes them safe).
#pragma once

#include <cstdint>
#include <string>

#include "base/result.hpp"

namespace rdtx::txn {

// One-sided requests a worker's services may have in flight on each of its
// QPs at once, besides its coordinators' (2PL's shard: 16 2PC-vote FAAs and
// 16 mailbox reply WRITEs); the runner sizes the QPs and the CQ for them.
inline constexpr uint32_t kServiceVerbsPerQp = 32;

class Service {
 public:
  explicit Service(std::string name, uint64_t period_ns = 0) : name_(std::move(name)), period_ns_(period_ns) {}
  virtual ~Service() = default;
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  const std::string& name() const { return name_; }
  uint64_t period_ns() const { return period_ns_; }

  virtual Result<void> start() { return {}; }
  virtual int poll() = 0;
  virtual bool drain() { return true; }
  virtual void stop() {}
  // After the run, on the runner's thread, once the workers have stopped
  // and no message can arrive any more: finish what is left (the log
  // appliers apply the entries still in their rings) before the checks.
  virtual void settle() {}
  // Locks the service still holds for transactions once the run is over
  // (a lock table's): counted with the tuples' locks left, which fail the run.
  virtual uint64_t locks_left() const { return 0; }
  // Recovery (recovery.hpp), from the recovery thread while the worker
  // runs: take no more work from the removed senders (bit n: node n) once
  // what they sent so far is processed, and keep nothing waiting for them
  // (a drain does not wait for them); senders_frozen() says when that is
  // done. For a service that takes work from other nodes (the log
  // appliers, FaRM's messenger); the default has nothing to freeze.
  virtual void freeze_senders(uint64_t senders) { (void)senders; }
  virtual bool senders_frozen(uint64_t senders) const {
    (void)senders;
    return true;
  }

 private:
  std::string name_;
  uint64_t period_ns_;
};

}  // namespace rdtx::txn
