// Queue pairs of the shm driver.
//
// RC: READ, WRITE, CAS and FAA are executed by the posting thread directly on
// the target node's registered memory (PeerNode::translate), in posting
// order; the target's CPU is never involved. UD: SEND claims a posted receive
// buffer of the destination QP, copies the payload into it and publishes the
// receive completion (recv_queue.hpp); RECV buffers are posted into this QP's
// own shared receive queue.
//
// Untimed (no latency model, pause window or ud_delay: Node::timed()) a
// request is executed inside post_send(), and only its completion (if
// signaled, or failed) is queued on the send CQ: no clock reads, no
// allocation, no locks, no syscalls. Timed, post_send() stamps
// each request with its effect and completion times (latency_model.hpp) into
// a fixed ring of max_send_wr entries, and the send CQ's poll() (and the next
// post_send()) executes and completes them when their time comes. A SEND is
// still copied at post time (unless a pause defers it), stamped so the
// receiver sees it only after the one-way delay. With the RNIC model
// (nic_model.hpp) post_send() also burns the doorbell's cost once per call,
// and each request's times come from nic_schedule(): the node's shared
// message rate, link and atomic unit, and the target's.
//
// Adversarial modes (devargs, doc/drivers.md): READ and WRITE move words in
// read_order/write_order (word_copy.hpp); a SEND may be dropped, duplicated
// or held back for ud_delay_ns (ud_drop/ud_dup/ud_delay), each choice drawn
// from this QP's Rng; a held-back datagram waits in a fixed ring of
// kMaxHeld copies and goes out from progress(), behind later ones. A node
// with a pause window runs timed: what it posts while paused takes effect
// as if posted when the window ends, its receive buffers posted while
// paused are published then, and its CQs report nothing during the window
// (shm_cq.hpp). With atomics=hca a CAS or FAA goes through the target
// node's atomic unit (hca_atomics.hpp): atomic with respect to other remote
// atomics, not to CPU atomics. With every mode off, each costs one
// predictable branch.
//
// Send-queue slots follow verbs: a request holds its slot until a completion
// of it or of a later request of the same QP has been polled. After an error
// completion the QP is in the error state: later requests complete with
// kFlushed (always with a completion) until connect() is called again.
//
// Thread-safety: a QP belongs to one thread, the one that polls its CQs.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "base/result.hpp"
#include "latency_model.hpp"
#include "node.hpp"
#include "peer_node.hpp"
#include "rdma/rdma.hpp"
#include "recv_queue.hpp"
#include "region_table.hpp"
#include "rng.hpp"
#include "shm_ah.hpp"
#include "shm_cq.hpp"

namespace rdtx::rdma::shm {

class ShmQp final : public QueuePair {
 public:
  // Checks `init` against the device limits and the CQs' capacity.
  // `pd`: the protection domain of the device context that makes it.
  static Result<std::unique_ptr<ShmQp>> create(std::shared_ptr<Node> node, uint32_t pd, const QpInit& init,
                                               std::shared_ptr<CqCore> send_cq, std::shared_ptr<CqCore> recv_cq);
  // Use create(): it also attaches the QP to its CQs.
  ShmQp(std::shared_ptr<Node> node, uint32_t pd, const QpInit& init, uint32_t qpn, CqCore* send_cq,
        std::unique_ptr<RecvQueue> rq);
  ~ShmQp() override;

  QpType type() const override { return type_; }
  QpAddress address() const override;
  uint32_t qp_num() const override { return qpn_; }
  Result<void> connect(const QpAddress& remote) override;
  Result<void> disconnect() override;
  int post_send(WorkRequest* list, WorkRequest** bad) override;
  int post_recv(RecvRequest* list, RecvRequest** bad) override;

  // For CqCore.
  void retire(uint64_t seq) { retired_ = seq + 1; }
  void progress(uint64_t now);
  int harvest(Completion* out, int max) { return rq_->harvest(out, max); }

  const RecvQueue* recv_queue() const { return rq_.get(); }  // UD

 private:
  enum class State : uint8_t { kReset, kReady, kError };

  // A request waiting for its time under the latency model.
  struct Timed {
    WorkRequest wr;
    uint64_t seq;
    uint64_t effect_tsc;
    uint64_t visible_tsc;
    uint64_t arrival_tsc;  // SEND: when the receiver may see it
    Status status;
  };
  // A datagram held back by ud_delay: its destination, a copy of its
  // payload (held_payload_) and when it goes out.
  struct Held {
    std::optional<ShmAh> ah;
    uint64_t due_tsc;
    uint32_t length;
  };
  static constexpr uint32_t kMaxHeld = 256;

  bool well_formed(const WorkRequest& wr) const;
  Status execute(const WorkRequest& wr, uint64_t visible_tsc);
  Status read(const WorkRequest& wr);
  Status write(const WorkRequest& wr);
  Status atomic(const WorkRequest& wr);
  Status send(const WorkRequest& wr, uint64_t visible_tsc);
  void deliver(const ShmAh& ah, const uint8_t* src, uint32_t length, uint64_t visible_tsc);
  void send_faulty(const ShmAh& ah, const uint8_t* src, uint32_t length, uint64_t visible_tsc);
  bool hold(const ShmAh& ah, const uint8_t* src, uint32_t length, uint64_t due_tsc);
  void release_held(uint64_t now);
  uint8_t* local(const WorkRequest& wr, uint32_t need) const;
  void finish(const WorkRequest& wr, uint64_t seq, Status st);
  int post_timed(WorkRequest* list, WorkRequest** bad);
  void flush_timed();

  // Fast-path state first.
  const PeerNode* peer_ = nullptr;  // RC: the connected node
  uint32_t peer_pd_ = 0;            // RC: the connected QP's protection domain
  // RC: the word and bit of the connected QP in its node's refused-QP
  // bitmap (set when that node disconnected it: requests then fail).
  const uint64_t* peer_refused_word_ = nullptr;
  uint64_t peer_refused_bit_ = 0;
  bool peer_refuses() const { return (__atomic_load_n(peer_refused_word_, __ATOMIC_ACQUIRE) & peer_refused_bit_) != 0; }
  CqCore* send_cq_;
  RegionTable local_regions_;
  const uint32_t pd_;
  uint64_t posted_ = 0;   // requests posted
  uint64_t retired_ = 0;  // requests whose slots are free again
  const uint32_t max_send_wr_;
  const uint32_t max_inline_;
  const uint32_t mtu_;
  const uint32_t qpn_;
  const QpType type_;
  State state_;
  const bool timed_;
  const bool pausable_;  // this node has a pause window
  const bool faults_;    // UD with ud_drop, ud_dup or ud_delay
  const WordOrder read_order_;
  const WordOrder write_order_;
  const bool hca_;  // atomics=hca
  uint64_t hca_window_ticks_ = 0;
  Rng rng_;

  std::shared_ptr<Node> node_;
  std::shared_ptr<PeerNode> peer_ref_;
  std::shared_ptr<CqCore> send_cq_ref_;
  std::shared_ptr<CqCore> recv_cq_ref_;  // UD
  std::unique_ptr<RecvQueue> rq_;        // UD

  // Latency model: ring of max_send_wr requests; [head, exec) executed,
  // [exec, tail) waiting to take effect. Inline payloads are copied into
  // inline_ at post time.
  LatencyModel latency_;
  NicModel nic_;
  NicShared* local_nic_ = nullptr;
  std::unique_ptr<Timed[]> timed_ring_;
  std::unique_ptr<uint8_t[]> inline_;
  uint64_t timed_mask_ = 0;
  uint64_t timed_head_ = 0;
  uint64_t timed_exec_ = 0;
  uint64_t timed_tail_ = 0;
  uint64_t wire_free_ = 0;  // when this QP's wire is free for the next request

  // UD faults: thresholds for Rng::chance() and the held-back datagrams,
  // [held_head_, held_tail_) in due order (a fixed delay keeps it so).
  uint64_t drop_threshold_ = 0;
  uint64_t dup_threshold_ = 0;
  uint64_t delay_threshold_ = 0;
  uint64_t delay_ticks_ = 0;
  // rc_stall: the draw's threshold, and the watchdog's bound in ticks.
  uint64_t stall_threshold_ = 0;
  uint64_t stall_ticks_ = 0;
  std::unique_ptr<Held[]> held_;
  std::unique_ptr<uint8_t[]> held_payload_;
  uint64_t held_head_ = 0;
  uint64_t held_tail_ = 0;
};

}  // namespace rdtx::rdma::shm
