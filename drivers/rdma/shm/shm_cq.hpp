// Completion queues of the shm driver.
//
// CqCore holds the send-side completions of the QPs attached to it in a
// private ring (no shared memory: only the QP's own thread produces them) and
// lists the UD QPs whose receive completions it harvests, straight from their
// shared receive queues. With a latency model (or any timed mode,
// Node::timed()), poll() first lets each attached QP execute the requests
// whose time has come; during its node's pause window it then returns 0.
//
// Capacity: as with verbs, the CQ must be deep enough for every send request
// its QPs can have outstanding; create_qp() enforces that (the sum of
// max_send_wr of the QPs using it as send CQ is at most its depth), so a push
// never overflows. Receive completions need no room: they stay in the QP's
// receive queue until polled.
//
// Thread-safety: a CQ and the QPs attached to it belong to one thread; QPs
// may be attached and detached only from that thread (or while the CQ is
// not polled). ShmCq holds CqCore through a shared_ptr that the QPs share,
// so destroying a CQ before its QPs is harmless.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/result.hpp"
#include "rdma/rdma.hpp"

namespace rdtx::rdma::shm {

class Node;
class ShmQp;

class CqCore {
 public:
  CqCore(const Node* node, uint32_t pd, uint32_t depth, bool timed);

  int poll(Completion* out, int max);

  // A send-side completion of request `seq` of `qp`.
  void push(const Completion& c, ShmQp* qp, uint64_t seq) {
    Entry& e = ring_[tail_++ & mask_];
    e.c = c;
    e.qp = qp;
    e.seq = seq;
  }

  // Attaches `qp` as a sender (reserving `send_entries` entries) and/or as a
  // receiver; detach() undoes both and drops the QP's unpolled completions.
  Result<void> attach(ShmQp* qp, uint32_t send_entries, bool recv);
  void detach(ShmQp* qp, uint32_t send_entries, bool recv);

  const Node* node() const { return node_; }
  uint32_t pd() const { return pd_; }  // the device context that made it

 private:
  struct Entry {
    Completion c;
    ShmQp* qp;
    uint64_t seq;
  };

  const Node* node_;
  const uint32_t pd_;
  const uint32_t depth_;
  const bool timed_;
  uint64_t mask_;
  std::unique_ptr<Entry[]> ring_;
  uint64_t head_ = 0;
  uint64_t tail_ = 0;
  uint64_t reserved_ = 0;
  std::vector<ShmQp*> send_qps_;  // polled for progress with a latency model
  std::vector<ShmQp*> recv_qps_;
};

class ShmCq final : public CompletionQueue {
 public:
  explicit ShmCq(std::shared_ptr<CqCore> core) : core_(std::move(core)) {}
  int poll(Completion* out, int max) override { return core_->poll(out, max); }
  const std::shared_ptr<CqCore>& core() const { return core_; }

 private:
  std::shared_ptr<CqCore> core_;
};

}  // namespace rdtx::rdma::shm
