// NAM-DB's timestamp vector oracle measured alone (Zamanian et al., "The
// End of a Myth: Distributed Transactions Can Scale", VLDB 2017, 4.1
// "Timestamp Vector" and 4.2 "Compression of Tr"). Node 1 holds the vector
// (the oracle's memory server); every worker of node 0 is a compute thread
// and each of its coroutines an execution context that runs one timestamp
// transaction at a time, in a closed loop:
//
//   oracle      one slot per context: READ the whole vector (the read
//               timestamp Tr), take the commit timestamp as its own last
//               one + 1 ("each thread already knows its latest commit
//               timestamp and just needs to increase it by one"), WRITE it
//               into its slot (publish: "no atomic operations are
//               necessary since each transaction thread only executes one
//               transaction at a time");
//   oracle-faa  compressed: one slot per compute server (node 0), READ of
//               it, then a fetch-and-add of 1 on it: the commit timestamp
//               is the value it returned + 1 ("the threads of a compute
//               server use an atomic RDMA fetch-and-add operation").
//
// Two dependent round trips per timestamp transaction; Mops/s counts
// timestamp transactions. With --oracle-fetch (4.2 "Dedicated Fetch
// Thread"), a fetch coroutine per worker READs the vector continuously and
// the contexts take its latest copy as their read timestamp instead of
// READing it: one round trip per transaction, with a staler read timestamp.
// Each context checks what it reads: its own slot holds what it last
// published (its WRITE completed before its next READ was posted; at most
// that with a fetched copy) and no slot moves backwards between its reads;
// the fetch-and-add results it sees increase. A violation counts as an
// error (rdtx-perf exits 1).
#include <algorithm>
#include <atomic>
#include <cstring>

#include "env/tsc.hpp"
#include "rdtx-perf/perf.hpp"
#include "runtime/cq_poller.hpp"
#include "runtime/task.hpp"

namespace rdtx::perf {

namespace {

struct Context {
  rdma::QueuePair* qp;
  rdma::WorkRequest read, publish;  // READ of the vector; WRITE of the slot or FAA
  uint64_t* vec;                    // the READ's destination (slots words)
  uint64_t* seen;                   // per slot, the largest value read so far
  uint64_t* out;                    // the WRITE's source, or the FAA's result
  uint32_t slots, mine;
  bool compressed;
  uint64_t last = 0;                  // the last commit timestamp this context took
  const uint64_t* fetched = nullptr;  // --oracle-fetch: the worker's latest copy
  runtime::WaitGroup wg;
  WorkerStats* stats;
  const Window* window;
};

runtime::Task<bool> post(Context& x, rdma::WorkRequest& wr) {
  x.wg.reset(1);
  rdma::WorkRequest* bad = nullptr;
  if (x.qp->post_send(&wr, &bad) != 0) co_return false;
  co_return co_await x.wg;
}

// --oracle-fetch: a worker's dedicated fetcher, READing the vector into
// `vec` in a closed loop (the contexts of its worker read `vec`).
struct Fetcher {
  rdma::QueuePair* qp;
  rdma::WorkRequest read;
  runtime::WaitGroup wg;
  WorkerStats* stats;
};

runtime::Task<void> run_fetcher(Fetcher& f) {
  runtime::Worker* self = runtime::Worker::current();
  while (!self->stopping()) {
    f.wg.reset(1);
    rdma::WorkRequest* bad = nullptr;
    if (f.qp->post_send(&f.read, &bad) != 0 || !co_await f.wg) {
      ++f.stats->errors;
      co_return;
    }
  }
}

runtime::Task<void> run_context(Context& x) {
  runtime::Worker* self = runtime::Worker::current();
  while (!self->stopping()) {
    const uint64_t t0 = env::tsc();
    // The read timestamp: READ, or the fetcher's latest copy. A READ in
    // flight may be changing the copy: each slot is read as one word, and
    // the fetcher's READs land one after the other, so a slot read holds a
    // value some READ brought, never older than the one read before.
    if (x.fetched != nullptr) {
      for (uint32_t s = 0; s < x.slots; ++s)
        x.vec[s] = std::atomic_ref<const uint64_t>(x.fetched[s]).load(std::memory_order_acquire);
    } else if (!co_await post(x, x.read)) {
      ++x.stats->errors;
      co_return;
    }
    bool sane = true;
    for (uint32_t s = 0; s < x.slots; ++s) {
      sane &= x.vec[s] >= x.seen[s];
      x.seen[s] = std::max(x.seen[s], x.vec[s]);
    }
    if (!x.compressed) sane &= x.fetched != nullptr ? x.vec[x.mine] <= x.last : x.vec[x.mine] == x.last;
    // The commit timestamp, published.
    if (!x.compressed) *x.out = x.last + 1;
    if (!co_await post(x, x.publish)) {
      ++x.stats->errors;
      co_return;
    }
    const uint64_t ts = x.compressed ? *x.out + 1 : x.last + 1;
    sane &= ts > x.last;
    x.last = ts;
    const uint64_t t1 = env::tsc();
    if (!sane) ++x.stats->errors;
    if (x.window->contains(t0, t1)) {
      ++x.stats->ops;
      x.stats->latency_tsc.record(t1 - t0);
    }
  }
}

}  // namespace

Result<Bench> build_oracle(Cluster& c, const Params& p, bool compressed, uint32_t batch, uint32_t outstanding,
                           const Window& w, uint32_t* vector_bytes) {
  if (batch != 1)
    return make_error(EINVAL, "--batch %u: a timestamp transaction is one READ, then one WRITE or FAA (batch 1)",
                      batch);
  const uint32_t slots = compressed ? 1 : p.workers * outstanding;
  const uint32_t bytes = slots * 8;
  if (bytes > Cluster::kTargetBytes)
    return make_error(EINVAL,
                      "oracle: a vector of %u slots (--workers %u x --outstanding %u) exceeds the target's %zu bytes",
                      slots, p.workers, outstanding, Cluster::kTargetBytes);
  *vector_bytes = bytes;
  // The vector starts at zero: every context's last commit timestamp.
  std::memset(c.target_mem->data(), 0, bytes);
  Bench b;
  for (uint32_t wi = 0; wi < p.workers; ++wi) {
    auto worker = std::make_unique<runtime::Worker>("oracle" + std::to_string(wi));
    auto stats = std::make_unique<WorkerStats>();
    // With --oracle-fetch, the fetcher's READ is one more in flight.
    const uint32_t wrs = outstanding + (p.oracle_fetch ? 1 : 0);
    auto rc = connect_rc(c, wrs, 64);
    if (!rc.ok()) return rc.error();
    // Per context: the vector's copy, the slots seen, the published word;
    // then the fetcher's copy.
    const size_t per = (static_cast<size_t>(slots) * 2 + 8) * 8;
    auto local = c.node[0]->alloc_memory(per * outstanding + static_cast<size_t>(bytes));
    if (!local.ok()) return local.error();
    auto lmr = c.node[0]->reg_mr((*local)->data(), (*local)->size(), rdma::kAccessAll);
    if (!lmr.ok()) return lmr.error();
    std::memset((*local)->data(), 0, (*local)->size());

    auto fetcher = std::make_shared<Fetcher>();
    auto* fetched = reinterpret_cast<uint64_t*>(static_cast<char*>((*local)->data()) + per * outstanding);
    fetcher->qp = rc->qp.get();
    fetcher->stats = stats.get();
    fetcher->read.opcode = rdma::Opcode::kRead;
    fetcher->read.local = fetched;
    fetcher->read.length = bytes;
    fetcher->read.lkey = lmr->lkey;
    fetcher->read.remote_addr = c.target_mr.remote_addr(0);
    fetcher->read.rkey = c.target_mr.rkey;
    fetcher->read.flags = rdma::kSignaled;
    fetcher->read.wr_id = runtime::CqPoller::wr_id(&fetcher->wg);
    auto ctxs = std::make_shared<std::vector<Context>>(outstanding);
    for (uint32_t ci = 0; ci < outstanding; ++ci) {
      Context& x = (*ctxs)[ci];
      auto* base = reinterpret_cast<uint64_t*>(static_cast<char*>((*local)->data()) + per * ci);
      x.qp = rc->qp.get();
      x.vec = base;
      x.seen = base + slots;
      x.out = base + 2 * slots;
      x.slots = slots;
      x.mine = compressed ? 0 : wi * outstanding + ci;
      x.compressed = compressed;
      x.fetched = p.oracle_fetch ? fetched : nullptr;
      x.stats = stats.get();
      x.window = &w;
      x.read.opcode = rdma::Opcode::kRead;
      x.read.local = x.vec;
      x.read.length = bytes;
      x.read.lkey = lmr->lkey;
      x.read.remote_addr = c.target_mr.remote_addr(0);
      x.read.rkey = c.target_mr.rkey;
      x.read.flags = rdma::kSignaled;
      x.read.wr_id = runtime::CqPoller::wr_id(&x.wg);
      x.publish.opcode = compressed ? rdma::Opcode::kFetchAdd : rdma::Opcode::kWrite;
      x.publish.local = x.out;
      x.publish.length = 8;
      x.publish.lkey = lmr->lkey;
      x.publish.remote_addr = c.target_mr.remote_addr(static_cast<size_t>(x.mine) * 8);
      x.publish.rkey = c.target_mr.rkey;
      x.publish.compare_add = 1;
      x.publish.flags = rdma::kSignaled | (!compressed && rc->max_inline >= 8 ? uint32_t{rdma::kInline} : 0u);
      x.publish.wr_id = runtime::CqPoller::wr_id(&x.wg);
    }
    auto poller = std::make_shared<runtime::CqPoller>(rc->cq.get());
    worker->add_poller([poller] { return (*poller)(); });
    if (p.oracle_fetch) worker->spawn(run_fetcher(*fetcher));
    for (auto& x : *ctxs) worker->spawn(run_context(x));

    b.keep.push_back(fetcher);
    b.keep.push_back(ctxs);
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
