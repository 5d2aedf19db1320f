// One-sided verbs: each of `outstanding` coroutines per worker posts a
// doorbell batch of `batch` READs/WRITEs/CASes/FAAs (only the last signaled)
// and waits for its completion, in a closed loop.
#include <algorithm>

#include "env/tsc.hpp"
#include "rdtx-perf/perf.hpp"
#include "runtime/cq_poller.hpp"
#include "runtime/task.hpp"

namespace rdtx::perf {

namespace {

struct Slot {
  rdma::QueuePair* qp;
  std::vector<rdma::WorkRequest> wrs;
  runtime::WaitGroup wg;
  WorkerStats* stats;
  const Window* window;
};

runtime::Task<void> run_slot(Slot& s) {
  runtime::Worker* self = runtime::Worker::current();
  const auto batch = static_cast<uint32_t>(s.wrs.size());
  while (!self->stopping()) {
    s.wg.reset(1);
    uint64_t t0 = env::tsc();
    rdma::WorkRequest* bad = nullptr;
    if (s.qp->post_send(s.wrs.data(), &bad) != 0) {
      ++s.stats->errors;
      co_return;
    }
    bool ok = co_await s.wg;
    uint64_t t1 = env::tsc();
    if (!ok) {
      ++s.stats->errors;
      co_return;
    }
    if (s.window->contains(t0, t1)) {
      s.stats->ops += batch;
      s.stats->latency_tsc.record(t1 - t0);
    }
  }
}

rdma::Opcode opcode_of(Verb v) {
  switch (v) {
    case Verb::kRead: return rdma::Opcode::kRead;
    case Verb::kWrite: return rdma::Opcode::kWrite;
    case Verb::kCas: return rdma::Opcode::kCompareSwap;
    case Verb::kFaa: return rdma::Opcode::kFetchAdd;
    case Verb::kEcho:
    case Verb::kRpc:
    case Verb::kOracle:
    case Verb::kOracleFaa: break;
  }
  return rdma::Opcode::kSend;
}

}  // namespace

Result<Bench> build_onesided(Cluster& c, const Params& p, Verb verb, uint32_t size, uint32_t batch,
                             uint32_t outstanding, const Window& w) {
  const bool atomic = verb == Verb::kCas || verb == Verb::kFaa;
  if (atomic) size = 8;
  const auto& caps = c.node[0]->caps();
  uint32_t sq = batch * outstanding;
  if (sq > caps.max_send_wr)
    return make_error(EINVAL, "--batch %u x --outstanding %u = %u work requests exceeds the device's send queue (%u)",
                      batch, outstanding, sq, caps.max_send_wr);
  // Each WR gets its own remote slot, a cache line apart at least, spread over
  // the target region; the pattern wraps around if the region is too small.
  const size_t stride = std::max<size_t>(64, (size + 63) / 64 * 64);
  const size_t slots_in_target = Cluster::kTargetBytes / stride;

  Bench b;
  size_t next_remote = 0;
  for (uint32_t wi = 0; wi < p.workers; ++wi) {
    auto worker = std::make_unique<runtime::Worker>("perf" + std::to_string(wi));
    auto stats = std::make_unique<WorkerStats>();
    auto rc = connect_rc(c, sq, 256);
    if (!rc.ok()) return rc.error();

    auto local = c.node[0]->alloc_memory(static_cast<size_t>(stride) * sq);
    if (!local.ok()) return local.error();
    auto lmr = c.node[0]->reg_mr((*local)->data(), (*local)->size(), rdma::kAccessAll);
    if (!lmr.ok()) return lmr.error();

    auto slots = std::make_shared<std::vector<Slot>>(outstanding);
    for (uint32_t si = 0; si < outstanding; ++si) {
      Slot& s = (*slots)[si];
      s.qp = rc->qp.get();
      s.stats = stats.get();
      s.window = &w;
      s.wrs.resize(batch);
      for (uint32_t i = 0; i < batch; ++i) {
        rdma::WorkRequest& wr = s.wrs[i];
        size_t local_off = static_cast<size_t>(si * batch + i) * stride;
        size_t remote_off = (next_remote++ % slots_in_target) * stride;
        wr.opcode = opcode_of(verb);
        wr.local = static_cast<char*>((*local)->data()) + local_off;
        wr.length = size;
        wr.lkey = lmr->lkey;
        wr.remote_addr = c.target_mr.remote_addr(remote_off);
        wr.rkey = c.target_mr.rkey;
        wr.compare_add = verb == Verb::kFaa ? 1 : 0;
        wr.swap = 0;
        wr.flags = (verb == Verb::kWrite && p.use_inline && size <= rc->max_inline) ? uint32_t{rdma::kInline} : 0u;
        wr.next = i + 1 < batch ? &s.wrs[i + 1] : nullptr;
      }
      s.wrs.back().flags |= rdma::kSignaled;
      s.wrs.back().wr_id = runtime::CqPoller::wr_id(&s.wg);
    }
    auto poller = std::make_shared<runtime::CqPoller>(rc->cq.get());
    worker->add_poller([poller] { return (*poller)(); });
    for (auto& s : *slots) worker->spawn(run_slot(s));

    // Released in this order: coroutine state, QPs, CQs, registration, memory.
    b.keep.push_back(slots);
    b.keep.push_back(poller);
    rc->keep_in(b);
    b.keep.push_back(deregister_on_release(c.node[0].get(), *lmr));
    b.keep.push_back(std::shared_ptr<rdma::DeviceMemory>(std::move(*local)));
    b.workers.push_back(std::move(worker));
    b.group.push_back(wi);
    b.stats.push_back(std::move(stats));
  }
  return b;
}

}  // namespace rdtx::perf
