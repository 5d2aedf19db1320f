#include "shm_qp.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>

#include "env/tsc.hpp"
#include "qp_address.hpp"
#include "shm_ah.hpp"
#include "shm_log.hpp"
#include "word_copy.hpp"

namespace rdtx::rdma::shm {

namespace {
bool is_atomic(Opcode op) { return op == Opcode::kCompareSwap || op == Opcode::kFetchAdd; }
}  // namespace

Result<std::unique_ptr<ShmQp>> ShmQp::create(std::shared_ptr<Node> node, uint32_t pd, const QpInit& init,
                                             std::shared_ptr<CqCore> send_cq, std::shared_ptr<CqCore> recv_cq) {
  auto qpn = node->next_qpn();
  if (!qpn.ok()) return qpn.error();
  std::unique_ptr<RecvQueue> rq;
  if (init.type == QpType::kUd) {
    auto q = RecvQueue::create(qp_path(node->fabric(), node->id(), *qpn), *qpn, node->token(), init.max_recv_wr);
    if (!q.ok()) return q.error();
    rq = std::move(*q);
  }
  auto qp = std::make_unique<ShmQp>(node, pd, init, *qpn, send_cq.get(), std::move(rq));
  // Attach last: the destructor detaches from whatever the QP holds.
  RDTX_TRY(send_cq->attach(qp.get(), init.max_send_wr, recv_cq == send_cq && init.type == QpType::kUd));
  qp->send_cq_ref_ = std::move(send_cq);
  if (init.type == QpType::kUd && recv_cq != qp->send_cq_ref_) {
    RDTX_TRY(recv_cq->attach(qp.get(), 0, true));
    qp->recv_cq_ref_ = std::move(recv_cq);
  }
  return qp;
}

ShmQp::ShmQp(std::shared_ptr<Node> node, uint32_t pd, const QpInit& init, uint32_t qpn, CqCore* send_cq,
             std::unique_ptr<RecvQueue> rq)
    : send_cq_(send_cq),
      local_regions_(node->regions()),
      pd_(pd),
      max_send_wr_(init.max_send_wr),
      max_inline_(init.max_inline),
      mtu_(node->config().mtu),
      qpn_(qpn),
      type_(init.type),
      state_(init.type == QpType::kUd ? State::kReady : State::kReset),  // UD needs no connection
      timed_(node->timed()),
      pausable_(node->pauses()),
      faults_(init.type == QpType::kUd && node->config().ud_faults()),
      read_order_(node->config().read_order),
      write_order_(node->config().write_order),
      hca_(node->config().atomics == AtomicsMode::kHca),
      rng_(node->seed(), qpn),
      node_(std::move(node)),
      rq_(std::move(rq)),
      latency_(node_->latency()),
      nic_(node_->nic_model()),
      local_nic_(node_->nic()) {
  if (hca_)
    hca_window_ticks_ = static_cast<uint64_t>(static_cast<double>(HcaAtomicUnit::kWindowNs) *
                                              static_cast<double>(env::hw_tsc_hz()) / 1e9);
  if (timed_) {
    timed_mask_ = std::bit_ceil(max_send_wr_) - 1;
    timed_ring_ = std::make_unique<Timed[]>(timed_mask_ + 1);
    inline_ = std::make_unique<uint8_t[]>((timed_mask_ + 1) * max_inline_);
  }
  if (init.type == QpType::kRc && node_->config().rc_stall > 0) {
    stall_threshold_ = Rng::threshold(node_->config().rc_stall);
    stall_ticks_ = env::ns_to_tsc(node_->config().stall_ms * 1'000'000);
  }
  if (faults_) {
    const ShmConfig& cfg = node_->config();
    drop_threshold_ = Rng::threshold(cfg.ud_drop);
    dup_threshold_ = Rng::threshold(cfg.ud_dup);
    delay_threshold_ = Rng::threshold(cfg.ud_delay);
    if (cfg.ud_delay > 0) {
      delay_ticks_ = env::ns_to_tsc(cfg.ud_delay_ns);
      held_ = std::make_unique<Held[]>(kMaxHeld);
      held_payload_ = std::make_unique<uint8_t[]>(size_t{kMaxHeld} * mtu_);
    }
  }
}

ShmQp::~ShmQp() {
  bool recv_on_send_cq = type_ == QpType::kUd && recv_cq_ref_ == nullptr;
  if (send_cq_ref_) send_cq_ref_->detach(this, max_send_wr_, recv_on_send_cq);
  if (recv_cq_ref_) recv_cq_ref_->detach(this, 0, true);
}

QpAddress ShmQp::address() const {
  AddressWire w;
  w.type = static_cast<uint8_t>(type_);
  w.node_id = node_->id();
  w.qpn = qpn_;
  w.pd = static_cast<uint16_t>(pd_);
  w.fabric_hash = node_->fabric_hash();
  w.node_token = node_->token();
  return w.encode();
}

Result<void> ShmQp::connect(const QpAddress& remote) {
  AddressWire w;
  if (!AddressWire::decode(remote, &w)) return make_error(EINVAL, "qp %u: connect to an address that is not an shm QP address", qpn_);
  if (w.fabric_hash != node_->fabric_hash())
    return make_error(EINVAL, "qp %u: connect to node %u of another fabric (this is fabric %s)", qpn_, w.node_id,
                      node_->fabric().c_str());
  if (type_ == QpType::kRc) {
    if (w.type != uint8_t(QpType::kRc))
      return make_error(EINVAL, "qp %u: an RC QP cannot connect to UD qp %u of node %u", qpn_, w.qpn, w.node_id);
    auto peer = node_->peer(w.node_id, w.node_token);
    if (!peer.ok()) return peer.error();
    peer_ref_ = std::move(*peer);
    peer_ = peer_ref_.get();
    peer_pd_ = w.pd;
    peer_refused_word_ = peer_->refused_word(w.qpn);
    peer_refused_bit_ = uint64_t{1} << ((w.qpn & kQpSeqMask) % 64);
    node_->set_refused(qpn_, false);
  }
  // Like verbs' trip through RESET: whatever was outstanding is flushed.
  if (timed_) flush_timed();
  state_ = State::kReady;
  return {};
}

Result<void> ShmQp::disconnect() {
  if (type_ != QpType::kRc) return make_error(EINVAL, "qp %u: only an RC QP can be disconnected", qpn_);
  // The peer's requests to this QP fail from now on; this QP's own, posted
  // or later, are flushed (the error state).
  node_->set_refused(qpn_, true);
  if (timed_) flush_timed();
  state_ = State::kError;
  return {};
}

bool ShmQp::well_formed(const WorkRequest& wr) const {
  switch (wr.opcode) {
    case Opcode::kRead:
    case Opcode::kWrite:
      if (type_ != QpType::kRc) return false;
      break;
    case Opcode::kCompareSwap:
    case Opcode::kFetchAdd:
      if (type_ != QpType::kRc || wr.length != 8) return false;
      break;
    case Opcode::kSend:
      if (type_ != QpType::kUd || wr.ah == nullptr) return false;
      break;
    default:
      return false;
  }
  if ((wr.flags & kInline) != 0 && (wr.length > max_inline_ || wr.opcode == Opcode::kRead || is_atomic(wr.opcode)))
    return false;
  return true;
}

uint8_t* ShmQp::local(const WorkRequest& wr, uint32_t need) const {
  Region r;
  uint64_t addr = reinterpret_cast<uint64_t>(wr.local);
  if (!local_regions_.lookup(wr.lkey, &r) || r.pd != pd_ || (r.access & need) != need || !r.covers(addr, wr.length))
    return nullptr;
  return static_cast<uint8_t*>(wr.local);
}

Status ShmQp::read(const WorkRequest& wr) {
  if (wr.length == 0) return Status::kSuccess;
  uint8_t* dst = local(wr, kLocalWrite);
  if (dst == nullptr) return Status::kLocalProtectionError;
  if (peer_refuses()) [[unlikely]] return Status::kGeneralError;
  const uint8_t* src = peer_->translate(wr.remote_addr, wr.length, wr.rkey, kRemoteRead, peer_pd_);
  if (src == nullptr) return Status::kRemoteAccessError;
  if (read_order_ == WordOrder::kAscending)
    copy_ascending(dst, src, wr.length);
  else
    copy_words(dst, src, wr.length, read_order_, rng_);
  return Status::kSuccess;
}

Status ShmQp::write(const WorkRequest& wr) {
  if (wr.length == 0) return Status::kSuccess;
  const uint8_t* src = (wr.flags & kInline) != 0 ? static_cast<const uint8_t*>(wr.local) : local(wr, 0);
  if (src == nullptr) return Status::kLocalProtectionError;
  if (peer_refuses()) [[unlikely]] return Status::kGeneralError;
  uint8_t* dst = peer_->translate(wr.remote_addr, wr.length, wr.rkey, kRemoteWrite, peer_pd_);
  if (dst == nullptr) return Status::kRemoteAccessError;
  if (write_order_ == WordOrder::kAscending)
    copy_ascending(dst, src, wr.length);
  else
    copy_words(dst, src, wr.length, write_order_, rng_);
  return Status::kSuccess;
}

Status ShmQp::atomic(const WorkRequest& wr) {
  uint8_t* result = local(wr, kLocalWrite);
  if (result == nullptr) return Status::kLocalProtectionError;
  if ((wr.remote_addr & 7) != 0) return Status::kRemoteInvalidRequest;
  if (peer_refuses()) [[unlikely]] return Status::kGeneralError;
  uint8_t* target = peer_->translate(wr.remote_addr, 8, wr.rkey, kRemoteAtomic, peer_pd_);
  if (target == nullptr) return Status::kRemoteAccessError;
  // The peer's mapping offset comes from shared memory: check it kept the
  // alignment rather than trust it.
  if ((reinterpret_cast<uintptr_t>(target) & 7) != 0) return Status::kRemoteInvalidRequest;
  uint64_t old;
  if (hca_) [[unlikely]] {
    // Atomic among the node's remote atomics only. The peer maps its unit
    // when this node runs atomics=hca (Node::peer), and connect() found the
    // peer with one (PeerNode::open refuses a node without).
    old = peer_->atomic_unit()->execute(wr.remote_addr, reinterpret_cast<uint64_t*>(target),
                                        wr.opcode == Opcode::kCompareSwap, wr.compare_add, wr.swap, hca_window_ticks_);
    std::memcpy(result, &old, sizeof old);
    return Status::kSuccess;
  }
  // seq_cst: an atomic that takes a lock word acquires what the previous
  // holder released, and vice versa, for CPU and remote atomics alike; and
  // its write is visible to every core before the poster's next request (a
  // NIC's write reaches memory before its completion), which protocols
  // that raise one word and then read another rely on (MVCC's rts, then
  // the lock).
  std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t*>(target));
  if (wr.opcode == Opcode::kCompareSwap) {
    old = wr.compare_add;
    word.compare_exchange_strong(old, wr.swap, std::memory_order_seq_cst);
  } else {
    old = word.fetch_add(wr.compare_add, std::memory_order_seq_cst);
  }
  std::memcpy(result, &old, sizeof old);
  return Status::kSuccess;
}

Status ShmQp::send(const WorkRequest& wr, uint64_t visible_tsc) {
  if (wr.length > mtu_) return Status::kLocalLengthError;
  const uint8_t* src = static_cast<const uint8_t*>(wr.local);
  if ((wr.flags & kInline) == 0 && wr.length > 0) {
    src = local(wr, 0);
    if (src == nullptr) return Status::kLocalProtectionError;
  }
  const auto* ah = static_cast<const ShmAh*>(wr.ah);
  if (faults_) [[unlikely]]
    send_faulty(*ah, src, wr.length, visible_tsc);
  else
    deliver(*ah, src, wr.length, visible_tsc);
  // UD: the sender never learns what became of it.
  return Status::kSuccess;
}

[[gnu::always_inline]] inline void ShmQp::deliver(const ShmAh& ah, const uint8_t* src, uint32_t length, uint64_t visible_tsc) {
  const RemoteRecvQueue& rq = ah.recv_queue();
  uint64_t round;
  RecvSlot* slot = rq.claim(&round);
  if (slot == nullptr) {
    // The receiver's queue counts it.
    uint64_t total = rq.count_drop();
    RDTX_LOG(shm_log(), Debug, "qp %u: SEND of %u bytes to qp %u dropped: no receive buffer posted (%llu dropped there)",
             qpn_, length, ah.qpn(), static_cast<unsigned long long>(total));
    return;
  }
  // The descriptor was written by another party: check it like a remote
  // access (region, kLocalWrite, bounds) before writing through it.
  uint64_t addr = slot->addr;
  uint32_t capacity = slot->length;
  uint32_t lkey = slot->lkey;
  Status rx = Status::kSuccess;
  if (length > capacity) {
    rx = Status::kLocalLengthError;
  } else if (length > 0) {
    uint8_t* dst = ah.peer().translate(addr, length, lkey, kLocalWrite, ah.pd());
    if (dst == nullptr)
      rx = Status::kLocalProtectionError;
    else
      std::memmove(dst, src, length);
  }
  slot->visible_tsc = visible_tsc;
  slot->byte_len = length;
  slot->src_qp = qpn_;
  slot->status = static_cast<uint8_t>(rx);
  RemoteRecvQueue::complete(slot, round);
}

// Each SEND draws: lost? else duplicated? then, for each copy, held back?
// A copy that cannot be held (kMaxHeld copies already are) goes out on time
// and is not counted as delayed. Counts go to the destination's queue, where
// the receiver's drop counter lives (shm.hpp).
void ShmQp::send_faulty(const ShmAh& ah, const uint8_t* src, uint32_t length, uint64_t visible_tsc) {
  const RemoteRecvQueue& rq = ah.recv_queue();
  if (rng_.chance(drop_threshold_)) {
    rq.count_injected_drop();
    RDTX_LOG(shm_log(), Debug, "qp %u: SEND of %u bytes to qp %u lost (ud_drop)", qpn_, length, ah.qpn());
    return;
  }
  int copies = 1;
  if (rng_.chance(dup_threshold_)) {
    rq.count_injected_dup();
    copies = 2;
  }
  for (int i = 0; i < copies; ++i) {
    if (rng_.chance(delay_threshold_) && hold(ah, src, length, visible_tsc + delay_ticks_)) {
      rq.count_injected_delay();
      continue;
    }
    deliver(ah, src, length, visible_tsc);
  }
}

bool ShmQp::hold(const ShmAh& ah, const uint8_t* src, uint32_t length, uint64_t due_tsc) {
  if (held_tail_ - held_head_ == kMaxHeld) return false;
  uint64_t index = held_tail_++ % kMaxHeld;
  Held& h = held_[index];
  h.ah.emplace(ah);  // keeps the destination mapped even if the AH goes first
  h.due_tsc = due_tsc;
  h.length = length;
  if (length > 0) std::memcpy(&held_payload_[index * mtu_], src, length);
  return true;
}

void ShmQp::release_held(uint64_t now) {
  while (held_head_ != held_tail_) {
    Held& h = held_[held_head_ % kMaxHeld];
    if (h.due_tsc > now) break;
    deliver(*h.ah, &held_payload_[(held_head_ % kMaxHeld) * mtu_], h.length, h.due_tsc);
    h.ah.reset();
    ++held_head_;
  }
}

Status ShmQp::execute(const WorkRequest& wr, uint64_t visible_tsc) {
  switch (wr.opcode) {
    case Opcode::kRead: return read(wr);
    case Opcode::kWrite: return write(wr);
    case Opcode::kCompareSwap:
    case Opcode::kFetchAdd: return atomic(wr);
    case Opcode::kSend: return send(wr, visible_tsc);
    case Opcode::kRecv: break;  // rejected by well_formed()
  }
  return Status::kGeneralError;
}

void ShmQp::finish(const WorkRequest& wr, uint64_t seq, Status st) {
  if (st != Status::kSuccess) {
    state_ = State::kError;
  } else if ((wr.flags & kSignaled) == 0) {
    return;
  }
  Completion c;
  c.wr_id = wr.wr_id;
  c.byte_len = wr.length;
  c.src_qp = 0;
  c.opcode = wr.opcode;
  c.status = st;
  send_cq_->push(c, this, seq);
}

int ShmQp::post_send(WorkRequest* list, WorkRequest** bad) {
  if (timed_) return post_timed(list, bad);
  for (WorkRequest* wr = list; wr != nullptr; wr = wr->next) {
    if (state_ == State::kReset || !well_formed(*wr)) {
      *bad = wr;
      return -EINVAL;
    }
    if (posted_ - retired_ >= max_send_wr_) {
      *bad = wr;
      return -ENOMEM;
    }
    uint64_t seq = posted_++;
    finish(*wr, seq, state_ == State::kReady ? execute(*wr, 0) : Status::kFlushed);
  }
  return 0;
}

int ShmQp::post_timed(WorkRequest* list, WorkRequest** bad) {
  uint64_t now = env::tsc();
  // The MMIO that rings the doorbell: once per call (a doorbell batch), on
  // the posting CPU (spun, or added to a virtual clock).
  if (nic_.doorbell_ticks() != 0) now = env::spend_ticks(nic_.doorbell_ticks());
  progress(now);
  // A stopped node posts nothing: what it posts during its pause goes out
  // as if posted when the pause ends.
  const uint64_t post_tsc = pausable_ && node_->paused(now) ? node_->pause_end() : now;
  for (WorkRequest* wr = list; wr != nullptr; wr = wr->next) {
    if (state_ == State::kReset || !well_formed(*wr)) {
      *bad = wr;
      return -EINVAL;
    }
    if (posted_ - retired_ >= max_send_wr_) {
      *bad = wr;
      return -ENOMEM;
    }
    // Unretired requests fit in the ring: it has max_send_wr entries or more.
    uint64_t index = timed_tail_ & timed_mask_;
    Timed& t = timed_ring_[index];
    t.wr = *wr;
    t.wr.next = nullptr;
    t.seq = posted_++;
    if ((wr->flags & kInline) != 0 && wr->length > 0) {
      uint8_t* copy = &inline_[index * max_inline_];
      std::memcpy(copy, wr->local, wr->length);
      t.wr.local = copy;
    }
    uint64_t start = std::max(post_tsc, wire_free_);
    wire_free_ = start + latency_.transfer(is_atomic(wr->opcode) ? 8 : wr->length);
    uint64_t arrival = wire_free_ + latency_.one_way();
    NicTimes nt{};
    if (nic_.enabled()) {
      // The node-wide limits (nic_model.hpp); the target's NIC state comes
      // from its PeerNode (a UD SEND's from the address handle's).
      const NicOp op = wr->opcode == Opcode::kRead    ? NicOp::kRead
                       : wr->opcode == Opcode::kWrite ? NicOp::kWrite
                       : wr->opcode == Opcode::kSend  ? NicOp::kSend
                                                      : NicOp::kAtomic;
      NicShared* remote = op == NicOp::kSend ? static_cast<const ShmAh*>(wr->ah)->peer().nic()
                          : peer_ != nullptr ? peer_->nic()
                                             : nullptr;
      if (remote == nullptr) remote = local_nic_;  // not connected: the request is flushed anyway
      nt = nic_schedule(nic_, op, op == NicOp::kAtomic ? 8 : wr->length, start, wire_free_, latency_.one_way(),
                        local_nic_, remote);
      arrival = nt.arrival;
    }
    t.arrival_tsc = arrival;
    bool earlier_pending = timed_exec_ != timed_tail_;
    ++timed_tail_;
    if (wr->opcode == Opcode::kSend) {
      // Delivered now, visible to the receiver on arrival; locally complete
      // once transmitted. A UD QP only SENDs, so unless a pause deferred
      // earlier SENDs, everything before it has been executed already.
      t.visible_tsc = nic_.enabled() ? nt.visible : wire_free_;
      if (post_tsc == now && !earlier_pending) {
        t.effect_tsc = now;
        t.status = state_ == State::kReady ? send(t.wr, arrival) : Status::kFlushed;
        if (t.status != Status::kSuccess) state_ = State::kError;
        ++timed_exec_;
      } else {
        t.effect_tsc = start;  // progress() sends it, in order
      }
    } else if (nic_.enabled()) {
      t.effect_tsc = nt.effect;
      t.visible_tsc = nt.visible;
    } else {
      t.effect_tsc = arrival;
      t.visible_tsc = arrival + latency_.one_way();
    }
    // rc_stall: lost inside the NIC, never to take effect; the QP's later
    // requests wait behind it (progress() runs them in order) until the
    // watchdog fails the QP.
    if (stall_threshold_ != 0 && rng_.chance(stall_threshold_)) {
      t.effect_tsc = UINT64_MAX;
      t.arrival_tsc = post_tsc;
    }
  }
  return 0;
}

void ShmQp::progress(uint64_t now) {
  // Requests posted before a pause of this node still take effect during it
  // (its NIC runs them); their completions wait for the CQ (shm_cq.cpp).
  if (held_head_ != held_tail_) release_held(now);
  while (timed_exec_ != timed_tail_) {
    Timed& t = timed_ring_[timed_exec_ & timed_mask_];
    if (t.effect_tsc == UINT64_MAX && now - t.arrival_tsc >= stall_ticks_) [[unlikely]] {
      // The watchdog (as the verbs driver's): the QP goes to the error
      // state, and everything it holds completes (kFlushed from here on).
      RDTX_LOG(shm_log(), Warning,
               "qp %u: %llu requests outstanding with no completion for %llu ms (rc_stall): moved to the error state",
               qpn_, static_cast<unsigned long long>(timed_tail_ - timed_exec_),
               static_cast<unsigned long long>(node_->config().stall_ms));
      state_ = State::kError;
      flush_timed();
      return;
    }
    if (t.effect_tsc > now) break;
    t.status = state_ == State::kReady ? execute(t.wr, t.arrival_tsc) : Status::kFlushed;
    if (t.status != Status::kSuccess) state_ = State::kError;
    ++timed_exec_;
  }
  while (timed_head_ != timed_exec_) {
    Timed& t = timed_ring_[timed_head_ & timed_mask_];
    if (t.visible_tsc > now) break;
    finish(t.wr, t.seq, t.status);
    ++timed_head_;
  }
}

void ShmQp::flush_timed() {
  for (; timed_head_ != timed_tail_; ++timed_head_) {
    Timed& t = timed_ring_[timed_head_ & timed_mask_];
    finish(t.wr, t.seq, timed_head_ < timed_exec_ ? t.status : Status::kFlushed);
  }
  timed_exec_ = timed_tail_;
  wire_free_ = 0;
}

int ShmQp::post_recv(RecvRequest* list, RecvRequest** bad) {
  if (list == nullptr) return 0;
  if (type_ != QpType::kUd) {
    *bad = list;
    return -EINVAL;
  }
  // A paused node's new buffers are published when it resumes.
  return rq_->post(list, bad, local_regions_, pd_, !(pausable_ && node_->paused(env::tsc())));
}

}  // namespace rdtx::rdma::shm
