// Queue pairs of the verbs driver: an ibv_qp (RC for one-sided READ, WRITE,
// CAS, FAA; UD for SEND/RECV) plus the bookkeeping that gives the rdma API's
// semantics on top of it.
//
// Send-queue slots, as in shm: a request holds its slot until a completion
// of it or of a later request of the same QP has been polled; post_send
// returns -ENOMEM at the first request that does not fit, so the verbs send
// queue never overflows. Each posted request has a sequence number, carried
// as the verbs wr_id; a ring indexed by it keeps the caller's wr_id, opcode,
// length and whether the caller asked for a completion. Besides the
// caller's signaled requests, the driver signals every (max_send_wr / 2)th
// request of an unsignaled run itself and swallows its completion, so a
// caller that posts only unsignaled requests and keeps polling never stalls.
// Errors and flushes are always reported, signaled or not.
//
// Stalls: an RC request completes or fails within what the transport's
// retries take (timeout and retry_cnt); a device that lets a signaled
// request wait twice that, at least 1 s (DeviceCaps::stall_ns), with no
// completion on its QP has stalled (Soft-RoCE of Debian 12's kernel loses a
// retransmitted request now and then and never completes it). The CQ's
// watchdog then moves the QP to the error state: its requests are flushed,
// their owners see the failure and nothing waits for ever.
//
// UD receives: a message lands after the 40-byte GRH verbs puts first, so
// each receive is posted as [GRH scratch][caller's buffer][overflow sink]:
// the caller's buffer gets the payload at offset 0, and a message longer
// than the buffer spills into the sink and completes with kLocalLengthError
// instead of failing the QP (which verbs would do on many devices).
//
// The fast path (post_send, post_recv, completions) allocates nothing, takes
// no lock and makes no system call besides the provider's own.
//
// Thread-safety: a QP belongs to one thread, the one that polls its CQs.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>

#include "address_wire.hpp"
#include "base/result.hpp"
#include "rdma/rdma.hpp"
#include "stall_watch.hpp"
#include "verbs_context.hpp"
#include "verbs_cq.hpp"
#include "verbs_status.hpp"

namespace rdtx::rdma::verbs {

class VerbsQp final : public QueuePair {
 public:
  // The verbs wr_id of a receive: this bit | its sequence number.
  static constexpr uint64_t kRecvTag = 1ull << 63;

  // Checks `init` against the device and the CQs' capacity, creates the
  // ibv_qp, and brings a UD QP to RTS (UD needs no connection).
  static Result<std::unique_ptr<VerbsQp>> create(std::shared_ptr<Context> ctx, const QpInit& init,
                                                 std::shared_ptr<CqCore> send_cq, std::shared_ptr<CqCore> recv_cq);
  VerbsQp(std::shared_ptr<Context> ctx, const QpInit& init, std::shared_ptr<CqCore> send_cq,
          std::shared_ptr<CqCore> recv_cq);
  ~VerbsQp() override;
  VerbsQp(const VerbsQp&) = delete;
  VerbsQp& operator=(const VerbsQp&) = delete;

  QpType type() const override { return type_; }
  QpAddress address() const override;
  uint32_t qp_num() const override { return qpn_; }
  Result<void> connect(const QpAddress& remote) override;
  Result<void> disconnect() override;
  int post_send(WorkRequest* list, WorkRequest** bad) override;
  int post_recv(RecvRequest* list, RecvRequest** bad) override;

  // For CqCore::poll: one work completion of this QP. Returns 1 with *out
  // filled, or 0 if the caller is not to see it.
  int complete(const ibv_wc& wc, Completion* out) {
    return (wc.wr_id & kRecvTag) != 0 ? complete_recv(wc, out) : complete_send(wc, out);
  }

  // The stall watchdog (CqCore::poll calls it now and then): true if a
  // signaled request of this RC QP has waited `bound_ns` with no completion
  // of the QP at all; then the QP has been moved to the error state, so the
  // provider flushes its requests and their owners see kFlushed.
  bool check_stall(uint64_t now_ns, uint64_t bound_ns);

 private:
  struct SendSlot {
    uint64_t seq;
    uint64_t wr_id;
    uint32_t length;
    Opcode opcode;
    bool report;  // the caller signaled it
  };
  struct RecvSlot {
    uint64_t seq;
    uint64_t wr_id;
    uint32_t length;
  };
  static constexpr int kRecvSges = 3;  // GRH, caller's buffer, overflow sink

  int complete_send(const ibv_wc& wc, Completion* out) {
    const uint64_t seq = wc.wr_id;
    const SendSlot& s = send_ring_[seq & send_mask_];
    // Not ours, or from before a reset: its slot was freed already.
    if (s.seq != seq || seq < retired_) return 0;
    retired_ = seq + 1;  // a send queue completes in order
    if (wc.status == IBV_WC_SUCCESS && !s.report) return 0;
    out->wr_id = s.wr_id;
    out->byte_len = s.length;
    out->src_qp = 0;
    out->opcode = s.opcode;
    out->status = to_status(wc.status);
    if (wc.status != IBV_WC_SUCCESS) note_error(wc);
    return 1;
  }

  int complete_recv(const ibv_wc& wc, Completion* out) {
    const uint64_t seq = wc.wr_id & ~kRecvTag;
    const RecvSlot& r = recv_ring_[seq & recv_mask_];
    if (r.seq != seq || seq < recv_done_) return 0;
    recv_done_ = seq + 1;
    out->wr_id = r.wr_id;
    out->opcode = Opcode::kRecv;
    if (wc.status == IBV_WC_SUCCESS) {
      const uint32_t len = wc.byte_len > Context::kGrhBytes ? wc.byte_len - Context::kGrhBytes : 0;
      out->byte_len = len;
      out->src_qp = wc.src_qp;
      out->status = len > r.length ? Status::kLocalLengthError : Status::kSuccess;
    } else {
      out->byte_len = 0;
      out->src_qp = 0;
      out->status = to_status(wc.status);
      note_error(wc);
    }
    return 1;
  }

  bool well_formed(const WorkRequest& wr) const;
  // Logs an error completion: the first transport failure of the QP at
  // warning level (it names what verbs said), the rest at debug.
  void note_error(const ibv_wc& wc);
  Result<void> modify(ibv_qp_attr& attr, int mask, int from, int to, const char* detail);
  Result<void> reset();
  Result<void> bring_up_ud();
  Result<void> bring_up_rc(const AddressWire& remote);
  std::string describe_remote(const AddressWire& w) const;

  // Fast-path state first.
  ibv_qp* qp_ = nullptr;
  std::unique_ptr<SendSlot[]> send_ring_;
  std::unique_ptr<RecvSlot[]> recv_ring_;
  std::unique_ptr<ibv_send_wr[]> send_wrs_;  // one doorbell's worth: max_send_wr
  std::unique_ptr<ibv_sge[]> send_sges_;
  std::unique_ptr<ibv_recv_wr[]> recv_wrs_;
  std::unique_ptr<ibv_sge[]> recv_sges_;
  uint64_t posted_ = 0;   // send requests posted
  uint64_t retired_ = 0;  // send requests whose slots are free again
  uint64_t recv_posted_ = 0;
  uint64_t recv_done_ = 0;
  uint64_t send_mask_ = 0;
  uint64_t recv_mask_ = 0;
  uint32_t unsignaled_run_ = 0;  // unsignaled requests since the last signaled one
  uint64_t signaled_end_ = 0;    // 1 + the sequence number of the last signaled request
  StallWatch watch_;
  const uint32_t signal_period_;
  const uint32_t max_send_wr_;
  const uint32_t max_recv_wr_;
  const uint32_t max_inline_;
  const uint32_t mtu_;
  uint32_t qpn_ = 0;
  const QpType type_;
  bool ready_ = false;       // RTS: posting allowed
  bool left_reset_ = false;  // connect() must reset the QP first
  bool warned_ = false;
  const bool atomics_;
  uint32_t psn_ = 0;

  std::shared_ptr<Context> ctx_;
  std::shared_ptr<CqCore> send_cq_;
  std::shared_ptr<CqCore> recv_cq_;  // UD
};

// A UD destination: an ibv_ah plus the remote QP number and Q_Key.
class VerbsAh final : public AddressHandle {
 public:
  VerbsAh(std::shared_ptr<Context> ctx, ibv_ah* ah, uint32_t qpn, uint32_t qkey)
      : ah_(ah), qpn_(qpn), qkey_(qkey), ctx_(std::move(ctx)) {}
  ~VerbsAh() override { ibv_destroy_ah(ah_); }
  VerbsAh(const VerbsAh&) = delete;
  VerbsAh& operator=(const VerbsAh&) = delete;

  ibv_ah* ah() const { return ah_; }
  uint32_t qpn() const { return qpn_; }
  uint32_t qkey() const { return qkey_; }

 private:
  ibv_ah* ah_;
  uint32_t qpn_;
  uint32_t qkey_;
  std::shared_ptr<Context> ctx_;
};

// The address vector to reach `remote` from ctx's port: LID on InfiniBand,
// GRH with the remote GID on RoCE (or where the port requires a GRH).
ibv_ah_attr make_ah_attr(const Context& ctx, const AddressWire& remote);
// Whether `remote` can be reached from ctx at all; the reason if not.
Result<void> check_reachable(const Context& ctx, const AddressWire& remote, const char* what);

}  // namespace rdtx::rdma::verbs
