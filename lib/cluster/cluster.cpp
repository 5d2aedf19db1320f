#include "cluster/cluster.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "env/eal.hpp"
#include "env/log.hpp"
#include "env/tsc.hpp"
#include "runtime/shutdown.hpp"

namespace rdtx::cluster {

namespace {

// What a peer process needs to reach one worker: its RPC endpoint, then the
// RC QPs it keeps to each node ([node * qps_per_node + lane]).
size_t wire_bytes(uint32_t qps) { return sizeof(rdma::QpAddress) * (1 + qps); }

}  // namespace

Result<void> Cluster::build_local(const ClusterConfig& cfg, uint32_t first, uint32_t count) {
  if (cfg.replicas == 0 || cfg.replicas > cfg.nodes)
    return make_error(EINVAL, "cluster: replicas (%u) must be between 1 and the number of nodes (%u)", cfg.replicas,
                      cfg.nodes);
  if (cfg.nodes == 0 || cfg.workers_per_node == 0 || cfg.qps_per_node == 0)
    return make_error(EINVAL, "cluster: nodes (%u), workers_per_node (%u) and qps_per_node (%u) must be at least 1",
                      cfg.nodes, cfg.workers_per_node, cfg.qps_per_node);
  cfg_ = cfg;
  first_node_ = first;
  nodes_.resize(cfg.nodes);
  for (uint32_t n = 0; n < cfg.nodes; ++n) nodes_[n].id = n;
  for (uint32_t n = first; n < first + count; ++n) {
    auto dev = rdma::open_device(cfg.devargs, {n, cfg_.fabric});
    if (!dev.ok()) return dev.error();
    nodes_[n].device = std::move(*dev);
  }
  const uint32_t total = cfg.nodes * cfg.workers_per_node;
  // Every endpoint may hear from every other: its receive buffers grow with
  // the cluster and the credits. Refused here, naming the keys, rather than
  // by the first endpoint.
  if (auto ok = rpc::Endpoint::check_config(nodes_[first].device->caps(), cfg.rpc, total); !ok.ok())
    return make_error(ok.error().code,
                      "cluster: cluster.nodes (%u) x cluster.workers_per_node (%u) = %u RPC endpoints with "
                      "rpc.credits = %u: %s; lower rpc.credits or the number of workers",
                      cfg.nodes, cfg.workers_per_node, total, cfg.rpc.credits, ok.error().message.c_str());
  for (uint32_t id = first * cfg.workers_per_node; id < (first + count) * cfg.workers_per_node; ++id) {
    auto w = std::make_unique<WorkerContext>();
    w->node = id / cfg.workers_per_node;
    w->index = id % cfg.workers_per_node;
    w->id = id;
    if (cfg.context_per_worker) {
      auto own = nodes_[w->node].device->open_context();
      if (!own.ok())
        return make_error(own.error().code, "cluster: worker %u of node %u cannot open its device context: %s",
                          w->index, w->node, own.error().message.c_str());
      w->own_device = std::move(*own);
      w->device = w->own_device.get();
    } else {
      w->device = nodes_[w->node].device.get();
    }
    rdma::Device& dev = *w->device;
    w->worker = std::make_unique<runtime::Worker>("n" + std::to_string(w->node) + ".w" + std::to_string(w->index));
    const uint32_t qps = cfg.nodes * cfg.qps_per_node;
    auto cq = dev.create_cq(static_cast<uint32_t>(
        std::min<uint64_t>(uint64_t{cfg.max_outstanding} * qps + 16, UINT32_MAX)));
    if (!cq.ok()) return cq.error();
    w->cq = std::move(*cq);
    w->qps_per_node = cfg.qps_per_node;
    for (uint32_t q = 0; q < qps; ++q) {
      rdma::QpInit init;
      init.type = rdma::QpType::kRc;
      init.send_cq = w->cq.get();
      init.max_send_wr = cfg.max_outstanding;
      auto qp = dev.create_qp(init);
      if (!qp.ok()) return qp.error();
      w->qps.push_back(std::move(*qp));
    }
    rpc::EndpointConfig ecfg = cfg.rpc;
    ecfg.configuration = &configuration_;
    auto ep = rpc::Endpoint::create(dev, id, total, ecfg);
    if (!ep.ok()) return ep.error();
    w->rpc = std::move(*ep);
    w->rpc_timeout_ns = cfg.rpc.timeout_ns;
    w->rpc_max_timeout_ns = std::max(cfg.rpc.timeout_ns, cfg.rpc.max_timeout_ns);
    auto mem = dev.alloc_memory(cfg.scratch_bytes);
    if (!mem.ok()) return mem.error();
    w->scratch = std::move(*mem);
    auto mr = dev.reg_mr(w->scratch->data(), w->scratch->size(), rdma::kAccessAll);
    if (!mr.ok()) return mr.error();
    w->scratch_mr = *mr;
    w->cq_poller = std::make_unique<runtime::CqPoller>(w->cq.get());
    runtime::CqPoller* poller = w->cq_poller.get();
    rpc::Endpoint* endpoint = w->rpc.get();
    w->worker->add_poller([poller] { return (*poller)(); });
    w->worker->add_poller([endpoint] { return endpoint->poll(); });
    workers_.push_back(std::move(w));
  }
  return {};
}

Result<std::unique_ptr<Cluster>> Cluster::create_embedded(const ClusterConfig& cfg) {
  std::unique_ptr<Cluster> c(new Cluster());
  // A fabric name unique to this process and cluster, so that several
  // clusters (tests) never collide.
  static std::atomic<unsigned> seq{0};
  ClusterConfig cc = cfg;
  if (cc.fabric.empty()) cc.fabric = "rdtx-" + std::to_string(getpid()) + "-" + std::to_string(seq.fetch_add(1));
  RDTX_TRY(c->build_local(cc, 0, cfg.nodes));
  // Pair worker i of node a with worker i of node b (a == b: loopback).
  for (auto& w : c->workers_) {
    for (uint32_t q = 0; q < w->qps.size(); ++q) {
      const uint32_t n = q / cfg.qps_per_node, lane = q % cfg.qps_per_node;
      WorkerContext& peer = c->worker(n, w->index);
      w->peer_qps.push_back(peer.qps[w->qp_index(w->node, lane)]->address());
      RDTX_TRY(w->qps[q]->connect(w->peer_qps.back()));
    }
    for (auto& p : c->workers_) RDTX_TRY(w->rpc->connect(p->id, p->rpc->address()));
  }
  return c;
}

Result<std::unique_ptr<Cluster>> Cluster::create_node(const ClusterConfig& cfg, uint32_t self,
                                                      const AllGather& all_gather) {
  if (self >= cfg.nodes) return make_error(EINVAL, "cluster: node %u is not below cluster.nodes = %u", self, cfg.nodes);
  if (cfg.fabric.empty()) return make_error(EINVAL, "cluster: a multi-process cluster needs a fabric name");
  std::unique_ptr<Cluster> c(new Cluster());
  RDTX_TRY(c->build_local(cfg, self, 1));
  // Every node's worker addresses, then the pairing as in one process.
  const size_t per_worker = wire_bytes(cfg.nodes * cfg.qps_per_node);
  std::vector<std::byte> mine(per_worker * cfg.workers_per_node);
  for (auto& w : c->workers_) {
    std::byte* p = mine.data() + w->index * per_worker;
    rdma::QpAddress a = w->rpc->address();
    std::memcpy(p, &a, sizeof a);
    for (uint32_t q = 0; q < w->qps.size(); ++q) {
      a = w->qps[q]->address();
      std::memcpy(p + sizeof a * (1 + q), &a, sizeof a);
    }
  }
  auto all = all_gather(mine, "qp addresses");
  if (!all.ok()) return all.error();
  if (all->size() != cfg.nodes) return make_error(EPROTO, "cluster: addresses of %zu nodes, expected %u", all->size(), cfg.nodes);
  for (uint32_t n = 0; n < cfg.nodes; ++n)
    if ((*all)[n].size() != mine.size())
      return make_error(EPROTO, "cluster: node %u sent %zu bytes of QP addresses, expected %zu (cluster.nodes or "
                        "cluster.workers_per_node or cluster.qps_per_node differ?)", n, (*all)[n].size(), mine.size());
  auto addr_of = [&](uint32_t node, uint32_t worker, int slot) {
    rdma::QpAddress a;
    std::memcpy(&a, (*all)[node].data() + worker * per_worker + sizeof a * slot, sizeof a);
    return a;
  };
  for (auto& w : c->workers_) {
    for (uint32_t q = 0; q < w->qps.size(); ++q) {
      const uint32_t n = q / cfg.qps_per_node, lane = q % cfg.qps_per_node;
      w->peer_qps.push_back(addr_of(n, w->index, 1 + static_cast<int>(w->qp_index(self, lane))));
      auto r = w->qps[q]->connect(w->peer_qps.back());
      if (!r.ok())
        return make_error(r.error().code, "cluster: worker %u cannot connect its QP %u to node %u: %s", w->index,
                          lane, n, r.error().message.c_str());
    }
    for (uint32_t n = 0; n < cfg.nodes; ++n)
      for (uint32_t j = 0; j < cfg.workers_per_node; ++j)
        RDTX_TRY(w->rpc->connect(n * cfg.workers_per_node + j, addr_of(n, j, 0)));
  }
  return c;
}

Cluster::~Cluster() {
  // Coroutines go first (they hold references into everything else), then
  // endpoints and QPs, then CQs and memory (members of WorkerContext are
  // destroyed in reverse declaration order after that).
  for (auto& w : workers_) w->worker.reset();
  for (auto& w : workers_) {
    if (w->scratch) (void)w->device->dereg_mr(w->scratch_mr);
    w->rpc.reset();
    w->qps.clear();
  }
  workers_.clear();
}

std::vector<rdma::Device*> Cluster::contexts(uint32_t n) const {
  std::vector<rdma::Device*> out;
  for (const auto& w : workers_)
    if (w->node == n) out.push_back(w->device);
  return out;
}

namespace {
const env::LogType& cluster_log() {
  static const env::LogType type("rdtx.cluster");
  return type;
}
}  // namespace

Result<void> WorkerContext::reconnect(uint32_t n, uint32_t user) {
  const uint32_t i = qp_index(n, user);
  if (device->caps().one_ended_reconnect) return qps[i]->connect(peer_qps[i]);
  if (!failed_logged) {
    failed_logged = true;
    RDTX_LOG(cluster_log(), Warning,
             "worker %u of node %u: its RC QP to node %u failed; on %s a link is restored only by resetting both "
             "ends, which rdtx does not do yet: the QP stays failed for the rest of the run (its requests fail and "
             "are reported)",
             index, node, n, device->caps().name.c_str());
  }
  return make_error(EOPNOTSUPP, "RC QP of worker %u of node %u to node %u failed and cannot be reconnected from one end",
                    index, node, n);
}

void Cluster::watch_removals() {
  for (auto& wp : workers_) {
    WorkerContext* w = wp.get();
    w->worker->add_poller([this, w] {
      const uint32_t gen = removal_gen_.load(std::memory_order_acquire);
      if (gen == w->removal_seen.load(std::memory_order_relaxed)) return 0;
      const uint64_t gone = removed_.load(std::memory_order_acquire) & ~w->disconnected;
      for (uint32_t n = 0; n < nodes_.size() && n < 64; ++n) {
        if ((gone >> n & 1) == 0) continue;
        for (uint32_t lane = 0; lane < w->qps_per_node; ++lane)
          if (auto r = w->qps[w->qp_index(n, lane)]->disconnect(); !r.ok())
            RDTX_LOG(cluster_log(), Warning, "worker %u of node %u: its RC QP %u to removed node %u: %s", w->index,
                     w->node, lane, n, r.error().message.c_str());
        w->disconnected |= uint64_t{1} << n;
      }
      w->removal_seen.store(gen, std::memory_order_release);
      return 1;
    });
  }
}

uint32_t Cluster::remove_nodes(const std::vector<uint32_t>& gone, uint64_t wait_ns) {
  uint64_t mask = 0;
  for (uint32_t n : gone)
    if (n < 64) mask |= uint64_t{1} << n;
  removed_.fetch_or(mask, std::memory_order_acq_rel);
  removal_gen_.fetch_add(1, std::memory_order_acq_rel);
  const uint64_t end = env::monotonic_ns() + wait_ns;
  for (;;) {
    const uint32_t behind = removal_pending();
    if (behind == 0 || env::monotonic_ns() >= end) return behind;
    usleep(200);
  }
}

uint32_t Cluster::removal_pending() const {
  const uint32_t gen = removal_gen_.load(std::memory_order_acquire);
  uint32_t behind = 0;
  for (const auto& w : workers_) behind += w->removal_seen.load(std::memory_order_acquire) != gen;
  return behind;
}

int Cluster::poll_all() {
  int work = 0;
  for (auto& w : workers_) work += w->worker->poll_once();
  return work;
}

Result<Cluster::RunStats> Cluster::run(uint64_t deadline_tsc, runtime::IdlePolicy idle, bool stop_when_idle,
                                       HostShare share) {
  std::vector<unsigned> lcores{env::eal_initialized() ? env::main_lcore() : 0};
  if (env::eal_initialized())
    for (unsigned l : env::worker_lcores()) lcores.push_back(l);
  size_t nloops = std::min(lcores.size(), workers_.size());
  runtime::LoopOptions lo;
  // The drain outlasts a stalled request: the driver fails it after
  // stall_ns, and its coordinator then returns.
  for (auto& w : workers_) lo.drain_ns = std::max<uint64_t>(lo.drain_ns, w->device->caps().stall_ns + 1'000'000'000);
  lo.idle = runtime::resolve_idle_policy(idle, static_cast<unsigned>(nloops),
                                         env::eal_initialized() ? env::lcore_cpu_count() : 1,
                                         share.other_processes * static_cast<unsigned>(nloops), share.host_cpus);
  std::vector<runtime::Loop> loops(nloops, runtime::Loop(lo));
  for (size_t i = 0; i < workers_.size(); ++i) loops[i % nloops].add_worker(workers_[i]->worker.get());
  RunStats rs;
  rs.idle = lo.idle;
  std::vector<runtime::StopReason> reasons(nloops);
  // A loop whose coordinators have stopped keeps serving its nodes (RPC
  // handlers, CQs) until every loop's have: the others still call into them.
  runtime::DrainGroup group(static_cast<unsigned>(nloops));
  for (size_t i = 1; i < nloops; ++i) {
    auto launched = env::launch(lcores[i], [&loops, &reasons, &group, i, deadline_tsc, stop_when_idle] {
      reasons[i] = loops[i].run(deadline_tsc, stop_when_idle, &group);
      return 0;
    });
    if (!launched.ok()) {
      // The loops already running wait for the group: stop them first.
      runtime::request_shutdown();
      env::wait_all();
      return launched.error();
    }
  }
  reasons[0] = loops[0].run(deadline_tsc, stop_when_idle, &group);
  if (nloops > 1) env::wait_all();
  rs.reason = reasons[0];
  for (auto& l : loops) rs.loops.push_back(l.stats());
  return rs;
}

}  // namespace rdtx::cluster
