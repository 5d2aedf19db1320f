#include "verbs_qp.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <random>

#include "gid.hpp"
#include "verbs_log.hpp"

namespace rdtx::rdma::verbs {

namespace {

// RC transport parameters besides devargs' timeout and retry_cnt.
constexpr uint8_t kRnrRetry = 7;       // infinite; one-sided verbs never meet RNR anyway
constexpr uint8_t kMinRnrTimer = 12;   // 0.64 ms
constexpr uint8_t kHopLimit = 64;      // RoCE v2: IP TTL
constexpr uint32_t kMaxRdAtomic = 16;  // outstanding READs/atomics per QP, capped by the device

bool is_atomic(Opcode op) { return op == Opcode::kCompareSwap || op == Opcode::kFetchAdd; }

ibv_wr_opcode to_ibv(Opcode op) {
  switch (op) {
    case Opcode::kRead:
      return IBV_WR_RDMA_READ;
    case Opcode::kWrite:
      return IBV_WR_RDMA_WRITE;
    case Opcode::kCompareSwap:
      return IBV_WR_ATOMIC_CMP_AND_SWP;
    case Opcode::kFetchAdd:
      return IBV_WR_ATOMIC_FETCH_AND_ADD;
    case Opcode::kSend:
    case Opcode::kRecv:
      break;
  }
  return IBV_WR_SEND;
}

const char* type_name(QpType t) { return t == QpType::kRc ? "RC" : "UD"; }

uint32_t random_psn() {
  std::random_device rd;
  return rd() & 0xffffff;
}

}  // namespace

ibv_ah_attr make_ah_attr(const Context& ctx, const AddressWire& remote) {
  ibv_ah_attr ah{};
  ah.port_num = ctx.port();
  ah.sl = 0;
  ah.src_path_bits = 0;
  ah.static_rate = 0;
  ah.dlid = remote.link == LinkLayer::kIb ? remote.lid : 0;
  if (ctx.link() == LinkLayer::kEthernet || ctx.grh_required()) {
    ah.is_global = 1;
    std::memcpy(ah.grh.dgid.raw, remote.gid, 16);
    ah.grh.sgid_index = static_cast<uint8_t>(ctx.gid_index());
    ah.grh.hop_limit = kHopLimit;
    ah.grh.traffic_class = 0;
    ah.grh.flow_label = 0;
  }
  return ah;
}

Result<void> check_reachable(const Context& ctx, const AddressWire& remote, const char* what) {
  auto layer = [](LinkLayer l) { return l == LinkLayer::kIb ? "InfiniBand" : "RoCE (Ethernet)"; };
  if (remote.link != ctx.link())
    return make_error(EINVAL, "%s: node %u's QP 0x%x is on an %s port, %s is %s", what, remote.node_id, remote.qpn,
                      layer(remote.link), ctx.describe().c_str(), layer(ctx.link()));
  if (remote.link == LinkLayer::kIb && remote.lid == 0)
    return make_error(EINVAL, "%s: node %u's QP 0x%x has LID 0 (its port has no subnet manager)", what, remote.node_id,
                      remote.qpn);
  if ((remote.link == LinkLayer::kEthernet || ctx.grh_required()) && gid_is_zero(remote.gid))
    return make_error(EINVAL, "%s: node %u's QP 0x%x has no GID, which %s needs", what, remote.node_id, remote.qpn,
                      ctx.describe().c_str());
  return {};
}

Result<std::unique_ptr<VerbsQp>> VerbsQp::create(std::shared_ptr<Context> ctx, const QpInit& init,
                                                 std::shared_ptr<CqCore> send_cq, std::shared_ptr<CqCore> recv_cq) {
  const bool ud = init.type == QpType::kUd;
  RDTX_TRY(send_cq->reserve(init.max_send_wr));
  if (ud) {
    auto r = recv_cq->reserve(init.max_recv_wr);
    if (!r.ok()) {
      send_cq->unreserve(init.max_send_wr);
      return r.error();
    }
  }
  // From here on the QP's destructor gives the reservations back.
  auto qp = std::make_unique<VerbsQp>(ctx, init, send_cq, ud ? recv_cq : nullptr);
  ibv_qp_init_attr ia{};
  ia.send_cq = send_cq->cq();
  ia.recv_cq = ud ? recv_cq->cq() : send_cq->cq();  // RC: no receives, but verbs wants a CQ
  ia.qp_type = ud ? IBV_QPT_UD : IBV_QPT_RC;
  ia.sq_sig_all = 0;
  ia.cap.max_send_wr = init.max_send_wr;
  ia.cap.max_recv_wr = ud ? init.max_recv_wr : 0;
  ia.cap.max_send_sge = 1;
  ia.cap.max_recv_sge = ud ? kRecvSges : 1;
  ia.cap.max_inline_data = init.max_inline;
  qp->qp_ = ibv_create_qp(ctx->pd(), &ia);
  if (qp->qp_ == nullptr) {
    int e = errno != 0 ? errno : ENOMEM;
    return make_error(e, "create_qp on %s: ibv_create_qp(%s, max_send_wr %u, max_recv_wr %u, max_inline %u) failed: %s",
                      ctx->describe().c_str(), type_name(init.type), init.max_send_wr, ud ? init.max_recv_wr : 0,
                      init.max_inline, std::strerror(e));
  }
  qp->qpn_ = qp->qp_->qp_num;
  send_cq->add(qp->qpn_, qp.get());
  if (ud) recv_cq->add(qp->qpn_, qp.get());
  if (ud) RDTX_TRY(qp->bring_up_ud());
  return qp;
}

VerbsQp::VerbsQp(std::shared_ptr<Context> ctx, const QpInit& init, std::shared_ptr<CqCore> send_cq,
                 std::shared_ptr<CqCore> recv_cq)
    : signal_period_(std::max<uint32_t>(1, init.max_send_wr / 2)),
      max_send_wr_(init.max_send_wr),
      max_recv_wr_(init.type == QpType::kUd ? init.max_recv_wr : 0),
      max_inline_(init.max_inline),
      mtu_(ctx->mtu_bytes()),
      type_(init.type),
      atomics_(ctx->atomics()),
      psn_(random_psn()),
      ctx_(std::move(ctx)),
      send_cq_(std::move(send_cq)),
      recv_cq_(std::move(recv_cq)) {
  send_mask_ = std::bit_ceil(max_send_wr_) - 1;
  send_ring_ = std::make_unique<SendSlot[]>(send_mask_ + 1);
  for (uint64_t i = 0; i <= send_mask_; ++i) send_ring_[i].seq = UINT64_MAX;
  send_wrs_ = std::make_unique<ibv_send_wr[]>(max_send_wr_);
  send_sges_ = std::make_unique<ibv_sge[]>(max_send_wr_);
  if (max_recv_wr_ > 0) {
    recv_mask_ = std::bit_ceil(max_recv_wr_) - 1;
    recv_ring_ = std::make_unique<RecvSlot[]>(recv_mask_ + 1);
    for (uint64_t i = 0; i <= recv_mask_; ++i) recv_ring_[i].seq = UINT64_MAX;
    recv_wrs_ = std::make_unique<ibv_recv_wr[]>(max_recv_wr_);
    recv_sges_ = std::make_unique<ibv_sge[]>(size_t{max_recv_wr_} * kRecvSges);
  }
}

VerbsQp::~VerbsQp() {
  if (qp_ != nullptr) {
    send_cq_->remove(qpn_);
    if (recv_cq_) recv_cq_->remove(qpn_);
    if (int rc = ibv_destroy_qp(qp_); rc != 0)
      RDTX_LOG(verbs_log(), Error, "%s: ibv_destroy_qp(0x%x) failed: %s", ctx_->name().c_str(), qpn_,
               std::strerror(rc));
  }
  send_cq_->unreserve(max_send_wr_);
  if (recv_cq_) recv_cq_->unreserve(max_recv_wr_);
}

QpAddress VerbsQp::address() const {
  AddressWire w;
  w.type = type_;
  w.link = ctx_->link();
  w.mtu = ctx_->mtu();
  w.lid = ctx_->lid();
  w.qpn = qpn_;
  w.psn = psn_;
  w.qkey = ctx_->qkey();
  w.node_id = ctx_->node_id();
  std::memcpy(w.gid, ctx_->gid(), 16);
  return w.encode();
}

std::string VerbsQp::describe_remote(const AddressWire& w) const {
  char buf[160];
  if (w.link == LinkLayer::kIb && !ctx_->grh_required())
    std::snprintf(buf, sizeof buf, "node %u QP 0x%x, LID %u, MTU %u", w.node_id, w.qpn, w.lid, 128u << w.mtu);
  else
    std::snprintf(buf, sizeof buf, "node %u QP 0x%x, GID %s, MTU %u", w.node_id, w.qpn, format_gid(w.gid).c_str(),
                  128u << w.mtu);
  return buf;
}

Result<void> VerbsQp::modify(ibv_qp_attr& attr, int mask, int from, int to, const char* detail) {
  int rc = ibv_modify_qp(qp_, &attr, mask);
  if (rc < 0) rc = errno;  // some providers return -1 and set errno
  if (rc == 0) return {};
  ready_ = false;
  return make_error(rc, "%s QP 0x%x on %s: %s->%s failed: %s (errno %d)%s%s", type_name(type_), qpn_,
                    ctx_->describe().c_str(), qp_state_name(from), qp_state_name(to), std::strerror(rc), rc,
                    *detail != '\0' ? "; " : "", detail);
}

Result<void> VerbsQp::reset() {
  ibv_qp_attr cur{};
  ibv_qp_init_attr init{};
  int from = IBV_QPS_ERR;
  if (ibv_query_qp(qp_, &cur, IBV_QP_STATE, &init) == 0) from = cur.qp_state;
  ready_ = false;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RESET;
  RDTX_TRY(modify(a, IBV_QP_STATE, from, IBV_QPS_RESET, ""));
  // Whatever was outstanding is gone with the reset (providers drop its
  // completions from the CQ, or complete_* drops them as stale). The PSN
  // stays: peers keep the address they were given once.
  retired_ = posted_;
  recv_done_ = recv_posted_;
  unsignaled_run_ = 0;
  left_reset_ = false;
  return {};
}

Result<void> VerbsQp::bring_up_ud() {
  left_reset_ = true;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = ctx_->port();
  a.qkey = ctx_->qkey();
  RDTX_TRY(modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY, IBV_QPS_RESET, IBV_QPS_INIT, ""));
  a = {};
  a.qp_state = IBV_QPS_RTR;
  RDTX_TRY(modify(a, IBV_QP_STATE, IBV_QPS_INIT, IBV_QPS_RTR, ""));
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = psn_;
  RDTX_TRY(modify(a, IBV_QP_STATE | IBV_QP_SQ_PSN, IBV_QPS_RTR, IBV_QPS_RTS, ""));
  ready_ = true;
  return {};
}

Result<void> VerbsQp::bring_up_rc(const AddressWire& remote) {
  const std::string peer = "remote " + describe_remote(remote);
  const ibv_device_attr& dev = ctx_->attr();
  left_reset_ = true;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = ctx_->port();
  a.qp_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | (atomics_ ? IBV_ACCESS_REMOTE_ATOMIC : 0);
  RDTX_TRY(
      modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, IBV_QPS_RESET, IBV_QPS_INIT, ""));
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = static_cast<ibv_mtu>(std::min(ctx_->mtu(), remote.mtu));
  a.dest_qp_num = remote.qpn;
  a.rq_psn = remote.psn;
  a.max_dest_rd_atomic = static_cast<uint8_t>(std::min<uint32_t>(dev.max_qp_rd_atom, kMaxRdAtomic));
  a.min_rnr_timer = kMinRnrTimer;
  a.ah_attr = make_ah_attr(*ctx_, remote);
  RDTX_TRY(modify(a,
                  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                  IBV_QPS_INIT, IBV_QPS_RTR, peer.c_str()));
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = psn_;
  a.timeout = ctx_->config().timeout;
  a.retry_cnt = ctx_->config().retry_cnt;
  a.rnr_retry = kRnrRetry;
  a.max_rd_atomic = static_cast<uint8_t>(std::min<uint32_t>(dev.max_qp_init_rd_atom, kMaxRdAtomic));
  RDTX_TRY(modify(
      a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC,
      IBV_QPS_RTR, IBV_QPS_RTS, peer.c_str()));
  ready_ = true;
  return {};
}

Result<void> VerbsQp::connect(const QpAddress& remote) {
  AddressWire w;
  if (!AddressWire::decode(remote, &w))
    return make_error(EINVAL, "%s QP 0x%x: connect to an address that is not a verbs QP address", type_name(type_),
                      qpn_);
  if (w.type != type_)
    return make_error(EINVAL, "%s QP 0x%x: connect to %s QP 0x%x of node %u: the types differ", type_name(type_), qpn_,
                      type_name(w.type), w.qpn, w.node_id);
  if (type_ == QpType::kRc) {
    char what[64];
    std::snprintf(what, sizeof what, "RC QP 0x%x: connect", qpn_);
    RDTX_TRY(check_reachable(*ctx_, w, what));
  }
  if (left_reset_) RDTX_TRY(reset());
  return type_ == QpType::kRc ? bring_up_rc(w) : bring_up_ud();
}

Result<void> VerbsQp::disconnect() {
  if (type_ != QpType::kRc)
    return make_error(EINVAL, "%s QP 0x%x: only an RC QP can be disconnected", type_name(type_), qpn_);
  // ERR: posted requests complete flushed; requests that arrive are dropped,
  // so the peer's retries run out (IBV_WC_RETRY_EXC_ERR there).
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  if (int rc = ibv_modify_qp(qp_, &a, IBV_QP_STATE); rc != 0)
    return make_error(rc, "RC QP 0x%x on %s: cannot move it to the error state: %s", qpn_, ctx_->name().c_str(),
                      std::strerror(rc));
  left_reset_ = true;
  return {};
}

bool VerbsQp::check_stall(uint64_t now_ns, uint64_t bound_ns) {
  // Waiting: a signaled request is posted and not yet retired (a request
  // the provider refused at post is not posted).
  const bool waiting = ready_ && type_ == QpType::kRc && std::min(signaled_end_, posted_) > retired_;
  const uint64_t waited = watch_.look(now_ns, bound_ns, waiting, retired_);
  if (waited == 0) return false;
  RDTX_LOG(verbs_log(), Warning,
           "RC QP 0x%x on %s: %llu requests outstanding with no completion for %.1f s, longer than the RC transport "
           "takes to complete or fail one (timeout=%u, retry_cnt=%u): the device stalled; the QP is moved to the "
           "error state so that its requests fail (flushed) instead of waiting for ever",
           qpn_, ctx_->name().c_str(), static_cast<unsigned long long>(posted_ - retired_),
           static_cast<double>(waited) / 1e9, ctx_->config().timeout, ctx_->config().retry_cnt);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  if (int rc = ibv_modify_qp(qp_, &a, IBV_QP_STATE); rc != 0)
    RDTX_LOG(verbs_log(), Error, "RC QP 0x%x on %s: cannot move it to the error state: %s", qpn_,
             ctx_->name().c_str(), std::strerror(rc));
  left_reset_ = true;
  return true;
}

void VerbsQp::note_error(const ibv_wc& wc) {
  const bool transport = to_status(wc.status) == Status::kGeneralError;
  if (transport && !warned_) {
    warned_ = true;
    RDTX_LOG(verbs_log(), Warning, "%s QP 0x%x on %s: work request failed: %s (vendor error 0x%x)", type_name(type_),
             qpn_, ctx_->name().c_str(), ibv_wc_status_str(wc.status), wc.vendor_err);
  } else {
    RDTX_LOG(verbs_log(), Debug, "%s QP 0x%x on %s: work request failed: %s (vendor error 0x%x)", type_name(type_),
             qpn_, ctx_->name().c_str(), ibv_wc_status_str(wc.status), wc.vendor_err);
  }
}

bool VerbsQp::well_formed(const WorkRequest& wr) const {
  switch (wr.opcode) {
    case Opcode::kRead:
    case Opcode::kWrite:
      if (type_ != QpType::kRc) return false;
      break;
    case Opcode::kCompareSwap:
    case Opcode::kFetchAdd:
      if (type_ != QpType::kRc || wr.length != 8 || !atomics_) return false;
      break;
    case Opcode::kSend:
      // Longer than the MTU: refused here rather than failing the QP.
      if (type_ != QpType::kUd || wr.ah == nullptr || wr.length > mtu_) return false;
      break;
    default:
      return false;
  }
  if ((wr.flags & kInline) != 0 && (wr.length > max_inline_ || wr.opcode == Opcode::kRead || is_atomic(wr.opcode)))
    return false;
  return true;
}

int VerbsQp::post_send(WorkRequest* list, WorkRequest** bad) {
  if (list == nullptr) return 0;
  if (!ready_) {
    *bad = list;
    return -EINVAL;
  }
  uint32_t n = 0;
  int rc = 0;
  WorkRequest* stop = nullptr;
  for (WorkRequest* wr = list; wr != nullptr; wr = wr->next) {
    if (!well_formed(*wr)) {
      rc = -EINVAL;
      stop = wr;
      break;
    }
    const uint64_t seq = posted_ + n;
    if (seq - retired_ >= max_send_wr_) {
      rc = -ENOMEM;
      stop = wr;
      break;
    }
    SendSlot& slot = send_ring_[seq & send_mask_];
    slot.seq = seq;
    slot.wr_id = wr->wr_id;
    slot.length = wr->length;
    slot.opcode = wr->opcode;
    slot.report = (wr->flags & kSignaled) != 0;

    ibv_sge& sge = send_sges_[n];
    sge.addr = reinterpret_cast<uint64_t>(wr->local);
    sge.length = wr->length;
    sge.lkey = wr->lkey;
    ibv_send_wr& w = send_wrs_[n];
    w.wr_id = seq;
    w.next = &send_wrs_[n + 1];
    w.sg_list = &sge;
    // No SGE for an empty payload: a zero-length SGE means 2 GiB to some NICs.
    w.num_sge = wr->length > 0 ? 1 : 0;
    w.opcode = to_ibv(wr->opcode);
    unsigned flags = 0;
    if (slot.report) {
      flags |= IBV_SEND_SIGNALED;
      unsignaled_run_ = 0;
      signaled_end_ = seq + 1;
    } else if (++unsignaled_run_ >= signal_period_) {
      flags |= IBV_SEND_SIGNALED;  // frees the run's slots when polled
      unsignaled_run_ = 0;
      signaled_end_ = seq + 1;
    }
    if ((wr->flags & kInline) != 0) flags |= IBV_SEND_INLINE;
    if ((wr->flags & kFence) != 0) flags |= IBV_SEND_FENCE;
    w.send_flags = flags;
    if (type_ == QpType::kRc) {
      if (is_atomic(wr->opcode)) {
        w.wr.atomic.remote_addr = wr->remote_addr;
        w.wr.atomic.rkey = wr->rkey;
        w.wr.atomic.compare_add = wr->compare_add;
        w.wr.atomic.swap = wr->swap;
      } else {
        w.wr.rdma.remote_addr = wr->remote_addr;
        w.wr.rdma.rkey = wr->rkey;
      }
    } else {
      const auto* ah = static_cast<const VerbsAh*>(wr->ah);
      w.wr.ud.ah = ah->ah();
      w.wr.ud.remote_qpn = ah->qpn();
      w.wr.ud.remote_qkey = ah->qkey();
    }
    ++n;
  }
  if (n > 0) {
    send_wrs_[n - 1].next = nullptr;
    ibv_send_wr* ibad = nullptr;
    if (int err = ibv_post_send(qp_, send_wrs_.get(), &ibad); err != 0) {
      // The provider refused request k: those before it are posted.
      uint32_t k = ibad != nullptr ? std::min(static_cast<uint32_t>(ibad - send_wrs_.get()), n - 1) : 0;
      posted_ += k;
      unsignaled_run_ = signal_period_ - 1;  // the next request is signaled
      WorkRequest* wr = list;
      for (uint32_t i = 0; i < k && wr->next != nullptr; ++i) wr = wr->next;
      *bad = wr;
      return err > 0 ? -err : err;
    }
    posted_ += n;
  }
  if (rc != 0) *bad = stop;
  return rc;
}

int VerbsQp::post_recv(RecvRequest* list, RecvRequest** bad) {
  if (list == nullptr) return 0;
  if (type_ != QpType::kUd || !ready_) {
    *bad = list;
    return -EINVAL;
  }
  uint32_t n = 0;
  int rc = 0;
  RecvRequest* stop = nullptr;
  const uint64_t grh = ctx_->grh_scratch();
  const uint64_t sink = ctx_->overflow_sink();
  const uint32_t scratch_lkey = ctx_->scratch_lkey();
  for (RecvRequest* r = list; r != nullptr; r = r->next) {
    const uint64_t seq = recv_posted_ + n;
    if (seq - recv_done_ >= max_recv_wr_) {
      rc = -ENOMEM;
      stop = r;
      break;
    }
    RecvSlot& slot = recv_ring_[seq & recv_mask_];
    slot.seq = seq;
    slot.wr_id = r->wr_id;
    slot.length = r->length;
    ibv_sge* sg = &recv_sges_[size_t{n} * kRecvSges];
    int k = 0;
    sg[k++] = ibv_sge{grh, Context::kGrhBytes, scratch_lkey};
    if (r->length > 0) sg[k++] = ibv_sge{reinterpret_cast<uint64_t>(r->addr), r->length, r->lkey};
    if (r->length < mtu_) sg[k++] = ibv_sge{sink, mtu_ - r->length, scratch_lkey};
    ibv_recv_wr& w = recv_wrs_[n];
    w.wr_id = kRecvTag | seq;
    w.next = &recv_wrs_[n + 1];
    w.sg_list = sg;
    w.num_sge = k;
    ++n;
  }
  if (n > 0) {
    recv_wrs_[n - 1].next = nullptr;
    ibv_recv_wr* ibad = nullptr;
    if (int err = ibv_post_recv(qp_, recv_wrs_.get(), &ibad); err != 0) {
      uint32_t k = ibad != nullptr ? std::min(static_cast<uint32_t>(ibad - recv_wrs_.get()), n - 1) : 0;
      recv_posted_ += k;
      RecvRequest* r = list;
      for (uint32_t i = 0; i < k && r->next != nullptr; ++i) r = r->next;
      *bad = r;
      return err > 0 ? -err : err;
    }
    recv_posted_ += n;
  }
  if (rc != 0) *bad = stop;
  return rc;
}

}  // namespace rdtx::rdma::verbs
