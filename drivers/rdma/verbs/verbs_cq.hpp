// Completion queues of the verbs driver.
//
// CqCore owns the ibv_cq and knows the QPs that report to it, by QP number,
// so that each work completion is handed to its QP (verbs_qp.hpp), which
// turns it into a Completion or swallows it (a request the driver signaled
// only to free send-queue slots). A completion of a QP destroyed meanwhile is
// dropped.
//
// Capacity: a verbs CQ that overflows is lost (IBV_EVENT_CQ_ERR), so, as the
// rdma API says, create_qp reserves max_send_wr entries on the send CQ and
// (UD) max_recv_wr on the receive CQ, and refuses a QP that does not fit.
//
// Thread-safety: a CQ and its QPs belong to one thread; QPs are attached and
// detached from it (or while the CQ is not polled). The QPs hold the CqCore
// too, so destroying a CQ before its QPs is harmless.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "base/result.hpp"
#include "rdma/rdma.hpp"
#include "verbs_context.hpp"

namespace rdtx::rdma::verbs {

class VerbsQp;

class CqCore {
 public:
  static Result<std::shared_ptr<CqCore>> create(std::shared_ptr<Context> ctx, uint32_t depth);
  CqCore(std::shared_ptr<Context> ctx, ibv_cq* cq, uint32_t depth) : cq_(cq), depth_(depth), ctx_(std::move(ctx)) {}
  ~CqCore();
  CqCore(const CqCore&) = delete;
  CqCore& operator=(const CqCore&) = delete;

  // Every kWatchPolls calls also runs the stall watchdog over the QPs.
  int poll(Completion* out, int max) {
    if (++polls_ >= kWatchPolls) [[unlikely]]
      watch();
    return drain(out, max);
  }

  // Reserves room for `entries` more completions, or says why not.
  Result<void> reserve(uint32_t entries);
  void unreserve(uint32_t entries) { reserved_ -= entries; }
  // Routes the completions of QP number qpn to qp (idempotent).
  void add(uint32_t qpn, VerbsQp* qp);
  void remove(uint32_t qpn);

  ibv_cq* cq() const { return cq_; }
  const Context* context() const { return ctx_.get(); }

 private:
  static constexpr uint32_t kWatchPolls = 4096;
  VerbsQp* find(uint32_t qpn);
  int drain(Completion* out, int max);
  void watch();

  ibv_cq* cq_;
  uint32_t polls_ = 0;
  uint32_t last_qpn_ = UINT32_MAX;  // one-entry cache: completions come in runs per QP
  VerbsQp* last_qp_ = nullptr;
  std::vector<std::pair<uint32_t, VerbsQp*>> qps_;  // sorted by QP number
  const uint32_t depth_;
  uint64_t reserved_ = 0;
  std::shared_ptr<Context> ctx_;
};

class VerbsCq final : public CompletionQueue {
 public:
  explicit VerbsCq(std::shared_ptr<CqCore> core) : core_(std::move(core)) {}
  int poll(Completion* out, int max) override { return core_->poll(out, max); }
  const std::shared_ptr<CqCore>& core() const { return core_; }

 private:
  std::shared_ptr<CqCore> core_;
};

}  // namespace rdtx::rdma::verbs
