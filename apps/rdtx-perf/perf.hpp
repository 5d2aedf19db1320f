// rdtx-perf: verb micro-benchmarks for every RDMA driver, in the manner of
// perftest's ib_read_bw/ib_read_lat. An embedded two-node cluster (node 0
// initiates, node 1 is the target) runs in this process; each measured point
// is one verb x payload size x doorbell batch x outstanding batches x workers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "rdma/rdma.hpp"
#include "runtime/loop.hpp"
#include "runtime/worker.hpp"
#include "stats/histogram.hpp"

namespace rdtx::perf {

// kOracle, kOracleFaa: NAM-DB's timestamp vector oracle (oracle.cpp), one
// timestamp transaction per op.
enum class Verb { kRead, kWrite, kCas, kFaa, kEcho, kRpc, kOracle, kOracleFaa };
const char* to_string(Verb v);

struct Params {
  std::string devargs = "shm";
  std::vector<Verb> verbs = {Verb::kRead};
  std::vector<uint32_t> sizes = {64};
  std::vector<uint32_t> batches = {1};
  std::vector<uint32_t> outstanding = {1};
  uint32_t workers = 1;                       // of the point being run
  std::vector<uint32_t> worker_counts = {1};  // --workers: one point per value
  double duration_s = 1.0;
  double warmup_s = 0.2;
  bool use_inline = true;  // WRITE/SEND payloads up to max_inline go inline
  bool oracle_fetch = false;  // oracle verbs: a dedicated fetcher READs the vector (NAM-DB 4.2)
  runtime::IdlePolicy idle = runtime::IdlePolicy::kAuto;
  std::string json_path;
};

// One measured point.
struct Point {
  Verb verb;
  uint32_t size, batch, outstanding, workers;
  uint64_t ops = 0;     // verbs (echo: round trips) completed in the window
  double seconds = 0;   // the measurement window
  uint64_t errors = 0;  // error completions and failed posts
  double busy_share = 0;
  stats::Histogram latency_tsc;  // per doorbell batch: post -> completion seen
  double mops() const { return seconds > 0 ? static_cast<double>(ops) / seconds / 1e6 : 0; }
  double gbps() const { return seconds > 0 ? static_cast<double>(ops) * size * 8 / seconds / 1e9 : 0; }
};

// The two nodes and the memory every point uses.
struct Cluster {
  std::unique_ptr<rdma::Device> node[2];
  std::unique_ptr<rdma::DeviceMemory> target_mem;  // on node 1
  rdma::MemoryRegion target_mr;
  static constexpr size_t kTargetBytes = 16 << 20;
};
Result<Cluster> open_cluster(const std::string& devargs);

// The measurement window shared read-only by every coroutine of a point.
struct Window {
  uint64_t start_tsc;  // end of warm-up
  uint64_t end_tsc;    // deadline
  bool contains(uint64_t t0, uint64_t t1) const { return t0 >= start_tsc && t1 <= end_tsc; }
};

// Per-worker results, merged into a Point after the run.
struct WorkerStats {
  uint64_t ops = 0;
  uint64_t errors = 0;
  stats::Histogram latency_tsc;
};

// A benchmark builds its workers (QPs, pollers, coroutines) for one point;
// run_point() spreads them over the lcores, runs and merges the results.
struct Bench {
  std::vector<std::unique_ptr<runtime::Worker>> workers;
  std::vector<unsigned> group;  // per worker: workers of one group share an lcore
  std::vector<std::unique_ptr<WorkerStats>> stats;  // one per measuring worker
  std::vector<std::shared_ptr<void>> keep;          // QPs, CQs, buffers alive for the run
  Bench() = default;
  Bench(Bench&&) = default;
  Bench& operator=(Bench&&) = default;
  // Coroutines (and the pollers that reference QPs) go before the QPs.
  ~Bench() { workers.clear(); }
};
// A worker's RC QP on node 0 with `send_wrs` send entries and its CQ,
// connected to a QP of node 1 that only exists to be connected to (it posts
// nothing). keep_in() hands them to the bench in the order they must go:
// QPs, then CQs (after the coroutine state and pollers pushed before).
struct RcPair {
  std::shared_ptr<rdma::CompletionQueue> cq, tcq;
  std::shared_ptr<rdma::QueuePair> qp, tqp;
  uint32_t max_inline = 0;  // what the QP was created with
  void keep_in(Bench& b) const {
    b.keep.push_back(qp);
    b.keep.push_back(tqp);
    b.keep.push_back(cq);
    b.keep.push_back(tcq);
  }
};
Result<RcPair> connect_rc(Cluster& c, uint32_t send_wrs, uint32_t max_inline);

// A keep-alive entry that deregisters `mr` when the bench is released.
std::shared_ptr<void> deregister_on_release(rdma::Device* dev, const rdma::MemoryRegion& mr);

Result<Bench> build_onesided(Cluster& c, const Params& p, Verb verb, uint32_t size, uint32_t batch,
                             uint32_t outstanding, const Window& w);
Result<Bench> build_echo(Cluster& c, const Params& p, uint32_t size, uint32_t batch, uint32_t outstanding,
                         const Window& w);

// `vector_bytes`: set to the vector's size (the point's size column).
Result<Bench> build_oracle(Cluster& c, const Params& p, bool compressed, uint32_t batch, uint32_t outstanding,
                           const Window& w, uint32_t* vector_bytes);

Result<Bench> build_rpc(Cluster& c, const Params& p, uint32_t size, uint32_t batch, uint32_t outstanding,
                        const Window& w);

Result<Point> run_point(Cluster& c, const Params& p, Verb verb, uint32_t size, uint32_t batch,
                        uint32_t outstanding);

}  // namespace rdtx::perf
