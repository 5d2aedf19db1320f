#include "verbs_cq.hpp"

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstring>

#include "verbs_log.hpp"
#include "verbs_qp.hpp"

namespace rdtx::rdma::verbs {

namespace {
constexpr int kPollBurst = 32;  // work completions taken from the provider per call
}

Result<std::shared_ptr<CqCore>> CqCore::create(std::shared_ptr<Context> ctx, uint32_t depth) {
  ibv_cq* cq = ibv_create_cq(ctx->ctx(), static_cast<int>(depth), nullptr, nullptr, 0);
  if (cq == nullptr) {
    int e = errno != 0 ? errno : ENOMEM;
    return make_error(e, "create_cq(%u) on %s: ibv_create_cq failed: %s", depth, ctx->name().c_str(), std::strerror(e));
  }
  return std::make_shared<CqCore>(std::move(ctx), cq, depth);
}

CqCore::~CqCore() {
  if (int rc = ibv_destroy_cq(cq_); rc != 0)
    RDTX_LOG(verbs_log(), Error, "%s: ibv_destroy_cq failed: %s", ctx_->name().c_str(), std::strerror(rc));
}

void CqCore::watch() {
  polls_ = 0;
  const uint64_t now = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
  const uint64_t bound = ctx_->stall_ns();
  for (auto& [qpn, qp] : qps_) qp->check_stall(now, bound);
}

int CqCore::drain(Completion* out, int max) {
  int n = 0;
  while (n < max) {
    ibv_wc wc[kPollBurst];
    // Never take more than the caller has room for: a work completion
    // cannot be put back.
    const int want = std::min(max - n, kPollBurst);
    const int got = ibv_poll_cq(cq_, want, wc);
    for (int i = 0; i < got; ++i) {
      VerbsQp* qp = find(wc[i].qp_num);
      if (qp != nullptr) n += qp->complete(wc[i], out + n);
    }
    if (got < want) break;  // drained (or the provider failed: nothing more to take)
  }
  return n;
}

VerbsQp* CqCore::find(uint32_t qpn) {
  if (qpn == last_qpn_) return last_qp_;
  auto it = std::lower_bound(qps_.begin(), qps_.end(), qpn,
                             [](const std::pair<uint32_t, VerbsQp*>& e, uint32_t q) { return e.first < q; });
  if (it == qps_.end() || it->first != qpn) return nullptr;  // a QP destroyed meanwhile
  last_qpn_ = qpn;
  last_qp_ = it->second;
  return last_qp_;
}

Result<void> CqCore::reserve(uint32_t entries) {
  if (reserved_ + entries > depth_)
    return make_error(ENOSPC,
                      "CQ of depth %u is too small: its QPs may have %llu completions outstanding, a QP that needs %u "
                      "more makes %llu",
                      depth_, static_cast<unsigned long long>(reserved_), entries,
                      static_cast<unsigned long long>(reserved_ + entries));
  reserved_ += entries;
  return {};
}

void CqCore::add(uint32_t qpn, VerbsQp* qp) {
  auto it = std::lower_bound(qps_.begin(), qps_.end(), qpn,
                             [](const std::pair<uint32_t, VerbsQp*>& e, uint32_t q) { return e.first < q; });
  if (it != qps_.end() && it->first == qpn) {
    it->second = qp;
  } else {
    qps_.insert(it, {qpn, qp});
  }
  last_qpn_ = UINT32_MAX;
}

void CqCore::remove(uint32_t qpn) {
  std::erase_if(qps_, [qpn](const std::pair<uint32_t, VerbsQp*>& e) { return e.first == qpn; });
  last_qpn_ = UINT32_MAX;
  last_qp_ = nullptr;
}

}  // namespace rdtx::rdma::verbs
