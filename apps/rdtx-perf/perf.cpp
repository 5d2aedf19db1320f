#include "rdtx-perf/perf.hpp"

#include <unistd.h>

#include <algorithm>

#include "env/eal.hpp"
#include "env/tsc.hpp"
#include "runtime/shutdown.hpp"

namespace rdtx::perf {

const char* to_string(Verb v) {
  switch (v) {
    case Verb::kRead: return "read";
    case Verb::kWrite: return "write";
    case Verb::kCas: return "cas";
    case Verb::kFaa: return "faa";
    case Verb::kEcho: return "echo";
    case Verb::kRpc: return "rpc";
    case Verb::kOracle: return "oracle";
    case Verb::kOracleFaa: return "oracle-faa";
  }
  return "?";
}

Result<Cluster> open_cluster(const std::string& devargs) {
  Cluster c;
  std::string fabric = "rdtx-perf-" + std::to_string(getpid());
  for (uint32_t n = 0; n < 2; ++n) {
    auto dev = rdma::open_device(devargs, {n, fabric});
    if (!dev.ok()) return dev.error();
    c.node[n] = std::move(dev.value());
  }
  auto mem = c.node[1]->alloc_memory(Cluster::kTargetBytes);
  if (!mem.ok()) return mem.error();
  c.target_mem = std::move(mem.value());
  auto mr = c.node[1]->reg_mr(c.target_mem->data(), c.target_mem->size(), rdma::kAccessAll);
  if (!mr.ok()) return mr.error();
  c.target_mr = *mr;
  return c;
}

Result<RcPair> connect_rc(Cluster& c, uint32_t send_wrs, uint32_t max_inline) {
  RcPair r;
  if (send_wrs > c.node[0]->caps().max_send_wr)
    return make_error(EINVAL, "%u work requests in flight exceed the device's send queue (%u)", send_wrs,
                      c.node[0]->caps().max_send_wr);
  auto cq = c.node[0]->create_cq(send_wrs + 16);
  if (!cq.ok()) return cq.error();
  r.cq = std::move(*cq);
  rdma::QpInit init;
  init.type = rdma::QpType::kRc;
  init.send_cq = r.cq.get();
  init.max_send_wr = send_wrs;
  init.max_inline = std::min<uint32_t>(c.node[0]->caps().max_inline, max_inline);
  r.max_inline = init.max_inline;
  auto qp = c.node[0]->create_qp(init);
  if (!qp.ok()) return qp.error();
  r.qp = std::move(*qp);
  auto tcq = c.node[1]->create_cq(16);
  if (!tcq.ok()) return tcq.error();
  r.tcq = std::move(*tcq);
  rdma::QpInit tinit = init;
  tinit.max_send_wr = 1;
  tinit.send_cq = r.tcq.get();
  auto tqp = c.node[1]->create_qp(tinit);
  if (!tqp.ok()) return tqp.error();
  r.tqp = std::move(*tqp);
  RDTX_TRY(r.qp->connect(r.tqp->address()));
  RDTX_TRY(r.tqp->connect(r.qp->address()));
  return r;
}

std::shared_ptr<void> deregister_on_release(rdma::Device* dev, const rdma::MemoryRegion& mr) {
  return std::shared_ptr<void>(nullptr, [dev, mr](void*) { (void)dev->dereg_mr(mr); });
}

Result<Point> run_point(Cluster& c, const Params& p, Verb verb, uint32_t size, uint32_t batch,
                        uint32_t outstanding) {
  if (verb == Verb::kCas || verb == Verb::kFaa) size = 8;  // atomics are 8 bytes
  // The window is fixed before the coroutines exist; loops start right after.
  uint64_t now = env::tsc();
  Window w{now + env::ns_to_tsc(static_cast<uint64_t>(p.warmup_s * 1e9)),
           now + env::ns_to_tsc(static_cast<uint64_t>((p.warmup_s + p.duration_s) * 1e9))};
  const bool oracle = verb == Verb::kOracle || verb == Verb::kOracleFaa;
  auto b = verb == Verb::kEcho  ? build_echo(c, p, size, batch, outstanding, w)
           : verb == Verb::kRpc ? build_rpc(c, p, size, batch, outstanding, w)
           : oracle             ? build_oracle(c, p, verb == Verb::kOracleFaa, batch, outstanding, w, &size)
                                : build_onesided(c, p, verb, size, batch, outstanding, w);
  if (!b.ok()) return b.error();
  Bench& bench = *b;

  // Lcores in EAL order, main first; placement groups are dealt out
  // round-robin.
  std::vector<unsigned> lcores{env::main_lcore()};
  for (unsigned l : env::worker_lcores()) lcores.push_back(l);
  size_t groups = 1 + *std::max_element(bench.group.begin(), bench.group.end());
  size_t nloops = std::min(lcores.size(), groups);
  runtime::LoopOptions lo;
  lo.idle = runtime::resolve_idle_policy(p.idle, static_cast<unsigned>(nloops), env::lcore_cpu_count());
  std::vector<runtime::Loop> loops(nloops, runtime::Loop(lo));
  for (size_t i = 0; i < bench.workers.size(); ++i) loops[bench.group[i] % nloops].add_worker(bench.workers[i].get());
  for (size_t i = 1; i < nloops; ++i) {
    auto r = env::launch(lcores[i], [&loops, i, &w] {
      loops[i].run(w.end_tsc);
      return 0;
    });
    if (!r.ok()) return r.error();
  }
  loops[0].run(w.end_tsc);
  env::wait_all();

  Point pt{verb, size, batch, outstanding, static_cast<uint32_t>(bench.stats.size()), 0, 0, 0, 0, {}};
  pt.seconds = p.duration_s;
  for (auto& s : bench.stats) {
    pt.ops += s->ops;
    pt.errors += s->errors;
    pt.latency_tsc.merge(s->latency_tsc);
  }
  double busy = 0;
  for (auto& l : loops) busy += l.stats().busy_share();
  pt.busy_share = busy / static_cast<double>(nloops);
  return pt;
}

}  // namespace rdtx::perf
