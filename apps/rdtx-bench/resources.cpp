#include "rdtx-bench/resources.hpp"

#include <sys/statvfs.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <tuple>

#include "rpc/endpoint.hpp"
#include "store/hash_index.hpp"
#include "store/tuple.hpp"

namespace rdtx::bench {

namespace {

// Bytes of a location cache of `entries` (store::LocationCache: 4-way sets
// of 128 bytes plus one byte of replacement state per set).
uint64_t cache_bytes(uint64_t entries) {
  const uint64_t sets = std::max<uint64_t>(entries / 4, 1);
  return sets * 129;
}

// A cgroup memory limit minus what the group uses now; 0 if none is set.
uint64_t cgroup_room(std::string* source) {
  std::ifstream cg("/proc/self/cgroup");
  std::string line, v1_path, v2_path;
  while (std::getline(cg, line)) {
    if (line.rfind("0::", 0) == 0) v2_path = line.substr(3);
    const size_t c1 = line.find(':'), c2 = line.find(':', c1 + 1);
    if (c1 != std::string::npos && c2 != std::string::npos) {
      const std::string ctrl = line.substr(c1 + 1, c2 - c1 - 1);
      if (ctrl == "memory" || ctrl.find("memory,") == 0 || ctrl.find(",memory") != std::string::npos)
        v1_path = line.substr(c2 + 1);
    }
  }
  auto read_u64 = [](const std::string& path, uint64_t* v) {
    std::ifstream f(path);
    std::string s;
    if (!(f >> s) || s == "max") return false;
    *v = std::strtoull(s.c_str(), nullptr, 10);
    return true;
  };
  // The group's own directory if it is mounted there, else the mount root
  // (a container sees its own group at the root).
  for (const auto& [base, limit, usage, path] :
       {std::tuple<std::string, std::string, std::string, std::string>{"/sys/fs/cgroup", "memory.max", "memory.current",
                                                                       v2_path},
        {"/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes", v1_path}}) {
    for (const std::string& dir : {base + path, base}) {
      uint64_t max = 0, used = 0;
      if (!read_u64(dir + "/" + limit, &max) || max >= (uint64_t{1} << 60)) continue;
      read_u64(dir + "/" + usage, &used);
      *source = "the cgroup limit (" + dir + "/" + limit + ")";
      return max > used ? max - used : 1;
    }
  }
  return 0;
}

}  // namespace

std::string human_bytes(uint64_t bytes) {
  static const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[48];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

Footprint footprint(const run::RunConfig& run, const rdma::DeviceCaps& caps, uint32_t local_nodes) {
  Footprint fp;
  const cluster::ClusterConfig cc = run::sized_cluster(run);
  fp.nodes = local_nodes;
  fp.workers = local_nodes * cc.workers_per_node;
  const txn::TupleShape shape = txn::tuple_shape(*run.protocol);
  // Per node that holds data, and per compute node (split layout: the
  // replicated tables alone). Of the nodes here, at most all the memory
  // nodes hold data.
  uint64_t per_node = 0, per_compute_node = 0;
  for (const txn::TableDef& t : run.workload->tables(cc.data_nodes())) {
    const uint64_t cap = t.capacity_per_node;
    const uint64_t buckets = (cap + 3) / 4;  // store::TableSpec defaults
    const uint64_t overflow = buckets / 8 + 16;
    const uint64_t index = (buckets + overflow) * store::kBucketBytes + cap * 4;  // + the free list
    const uint64_t primary =
        cap * txn::tuple_layout(shape, run.options.record_history, t.record_bytes, cc.replicas).tuple_bytes() + index;
    per_node += primary;
    if (t.replicated) per_compute_node += primary;
    // Backup copies (replication): replicas - 1 more partitions per node.
    per_node += uint64_t{cc.replicas - 1} * (cap * txn::backup_layout(t.record_bytes).tuple_bytes() + index);
  }
  const uint32_t data_here = std::min(local_nodes, cc.data_nodes());
  fp.tables = per_node * data_here + per_compute_node * (local_nodes - data_here);
  fp.scratch = uint64_t{cc.scratch_bytes} * fp.workers;
  const uint64_t mtu = caps.max_msg_size ? caps.max_msg_size : 4096;
  // Each endpoint posts at least two credits' worth of buffers for every
  // endpoint of the cluster (rpc::Endpoint::create): at 16 x 24 workers
  // that is 6,160 buffers, not the configured 1,000.
  const uint64_t recv = std::max<uint64_t>(
      cc.rpc.recv_buffers, rpc::Endpoint::recv_buffers_needed(cc.rpc, cc.nodes * cc.workers_per_node));
  fp.rpc = (recv + cc.rpc.send_buffers) * mtu * fp.workers;
  fp.cq_depth = run::worker_cq_depth(cc);
  fp.cqs = (fp.cq_depth + 2ull * cc.rpc.send_buffers + recv) * sizeof(rdma::Completion) * fp.workers;
  if (run.options.location_cache) fp.caches = cache_bytes(run.options.location_cache_entries) * fp.workers;
  if (run.options.record_history) fp.history = run.options.history_capacity_bytes * fp.workers;
  // Replication: each worker's rings, one per node (whose worker of the
  // same index sends to it), and, one-sided, each coroutine's staging: a
  // bound of one entry per backup node; see replication.cpp.
  if (cc.replicas > 1) {
    const uint64_t senders = cc.nodes;
    fp.log = (senders * run.options.log_ring_bytes + senders * 8 + 64) * fp.workers;
    if (run.options.stage(txn::Stage::kLog) == txn::Primitive::kOneSided) {
      uint32_t max_record = 0;
      for (const txn::TableDef& t : run.workload->tables(cc.data_nodes()))
        max_record = std::max(max_record, t.record_bytes);
      fp.log += (uint64_t{txn::Txn::kMaxAccesses} * (cc.replicas - 1) * (32 + ((max_record + 7) & ~7u)) +
                 uint64_t{cc.nodes} * 64) *
                run.options.coroutines * fp.workers;
    }
  }
  // The same figure the runner allocates (txn::region_bytes); an error there
  // is reported by the run itself.
  auto region = txn::region_bytes(*run.protocol, run.options, cc, run.workload->tables(cc.data_nodes()),
                                  txn::max_declared(*run.workload));
  // A region per node: one per local node, not per worker.
  if (region.ok()) fp.regions = *region * (run.protocol->region_per_node ? fp.workers / cc.workers_per_node : fp.workers);
  // The shm driver keeps registered memory (alloc_memory) in /dev/shm files.
  if (caps.driver == "shm") fp.shm_bytes = fp.tables + fp.scratch + fp.rpc + fp.log + fp.regions;
  return fp;
}

HostLimits host_limits() {
  HostLimits h;
  std::ifstream mi("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (mi >> key >> kib) {
    std::getline(mi, unit);
    if (key == "MemAvailable:") {
      h.memory = kib * 1024;
      h.memory_source = "MemAvailable (/proc/meminfo)";
      break;
    }
  }
  std::string cg_source;
  if (const uint64_t room = cgroup_room(&cg_source); room != 0 && (h.memory == 0 || room < h.memory)) {
    h.memory = room;
    h.memory_source = cg_source;
  }
  struct statvfs st {};
  if (statvfs(h.shm_path.c_str(), &st) == 0) h.shm_free = uint64_t{st.f_bavail} * st.f_frsize;
  return h;
}

Result<void> check_resources(const config::Config& cfg, const run::RunConfig& run, const rdma::DeviceCaps& caps,
                             const Footprint& fp, const HostLimits& limits) {
  const cluster::ClusterConfig cc = run::sized_cluster(run);
  const auto flat = cfg.flat();
  auto key = [&flat](const char* k) {
    for (const auto& [name, value] : flat)
      if (name == k) return name + " = " + value;
    return std::string(k);
  };
  // Queue depths first: they fail without allocating anything big.
  if (caps.max_cqe != 0 && fp.cq_depth > caps.max_cqe)
    return make_error(EINVAL,
                      "each worker's completion queue would need %llu entries (%s x %s x %u one-sided requests in "
                      "flight per QP, from %s), more than the device's %u: lower txn.coroutines or cluster.nodes",
                      static_cast<unsigned long long>(fp.cq_depth), key("cluster.nodes").c_str(),
                      key("cluster.qps_per_node").c_str(), cc.max_outstanding, key("txn.coroutines").c_str(),
                      caps.max_cqe);
  if (caps.max_send_wr != 0 && cc.max_outstanding > caps.max_send_wr)
    return make_error(EINVAL,
                      "each RC QP would need %u send requests in flight (from %s), more than the device's %u: lower "
                      "txn.coroutines",
                      cc.max_outstanding, key("txn.coroutines").c_str(), caps.max_send_wr);
  std::string wl_keys;
  const std::string wl = cfg.get_string("workload");
  for (const auto& [k, v] : flat)
    if (k.rfind(wl + ".", 0) == 0 && (k.find("_per_node") != std::string::npos || k.find("bytes") != std::string::npos))
      wl_keys += ", " + k + " = " + v;
  auto breakdown = [&] {
    std::string s = "tables " + human_bytes(fp.tables) + " (" + std::to_string(fp.nodes) + " node(s) x " +
                    human_bytes(fp.nodes ? fp.tables / fp.nodes : 0) + ": " + key("cluster.nodes") + wl_keys + ")";
    s += ", scratch " + human_bytes(fp.scratch) + ", RPC buffers " + human_bytes(fp.rpc) + ", CQs " +
         human_bytes(fp.cqs);
    if (fp.caches) s += ", location caches " + human_bytes(fp.caches) + " (" + key("txn.options.location_cache_entries") + ")";
    if (fp.history) s += ", history buffers " + human_bytes(fp.history) + " (" + key("history.capacity_mb") + ")";
    if (fp.log) s += ", log rings " + human_bytes(fp.log) + " (" + key("cluster.replicas") + ", " + key("txn.log_ring_kb") + ")";
    if (fp.regions) s += ", protocol regions " + human_bytes(fp.regions);
    s += "; " + std::to_string(fp.workers) + " worker(s) (" + key("cluster.workers_per_node") + ")";
    return s;
  };
  if (limits.memory != 0 && fp.total() > limits.memory)
    return make_error(ENOMEM, "the run would allocate %s, more than the %s available (%s): %s",
                      human_bytes(fp.total()).c_str(), human_bytes(limits.memory).c_str(),
                      limits.memory_source.c_str(), breakdown().c_str());
  if (limits.shm_free != 0 && fp.shm_bytes > limits.shm_free)
    return make_error(ENOSPC,
                      "the shm driver would place %s in %s, which has %s free (raise its size: mount -o "
                      "remount,size=... %s): %s",
                      human_bytes(fp.shm_bytes).c_str(), limits.shm_path.c_str(), human_bytes(limits.shm_free).c_str(),
                      limits.shm_path.c_str(), breakdown().c_str());
  return {};
}

}  // namespace rdtx::bench
