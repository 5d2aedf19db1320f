// The matrix suite: every registered workload x protocol x primitive
// combination, and each protocol under the optimisation sets (awaited
// commits, all RPC, piggybacked acknowledgements, several QPs and workers,
// two scratch banks, unsignaled commits, 3-way replication logged
// one-sided and by RPC), each under high contention with the history
// certified (contended_check.hpp). About 1,500 runs of 0.6 s: meson runs it
// as several shards (test/txn/meson.build), .ci/run and
// scripts/check-all.sh run every shard. The fast suite's `protocols` test
// keeps one contended run for every protocol x primitive combination.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test/txn/contended_check.hpp"

using namespace rdtx;
using namespace rdtx::txn;
using namespace rdtx::testing_contention;

namespace {

std::vector<Combo> matrix_combos() {
  using P = Primitive;
  std::vector<Combo> v = primitive_combos();
  for (const std::string& w : workload_names())
    for (const std::string& p : protocol_names()) {
      // A weaker level (2pl/..._rc, ..._rr) changes only what a shard does
      // with a read lock (repeatable read: nothing, on these workloads),
      // nothing the optimisation sets touch: it runs every primitive
      // combination (above) and the stress and chaos suites, not these (CI
      // time).
      if (p.size() > 3 && (p.compare(p.size() - 3, 3, "_rc") == 0 || p.compare(p.size() - 3, 3, "_rr") == 0)) continue;
      // Shared read locks (nowait/shared, waitdie/shared) change how a read
      // takes and gives back its lock, which every primitive combination
      // (above), the stress and the chaos suites exercise; the optimisation
      // sets change nothing of it (CI time).
      if (shared_read_locks(p)) continue;
      // Optimisations off: commits and releases awaited, one doorbell per
      // request; once all one-sided, once all RPC.
      Combo sync{w, p};
      sync.passive_ack = false;
      sync.doorbell = false;
      v.push_back(sync);
      const bool all_rpc = accepts_everywhere(*protocol_of(p), P::kRpc);
      Combo sync_rpc{w, p, P::kRpc, P::kRpc, P::kRpc, P::kRpc, P::kRpc};
      sync_rpc.passive_ack = false;
      if (all_rpc) v.push_back(sync_rpc);
      // All RPC with piggybacked write-back and release replies (DrTM+H).
      Combo piggy{w, p, P::kRpc, P::kRpc, P::kRpc, P::kRpc, P::kRpc};
      piggy.piggyback = true;
      if (all_rpc) v.push_back(piggy);
      // Coroutines spread over several RC QPs per node (cluster.qps_per_node):
      // requests of different coroutines to one node are no longer ordered.
      // Two workers per node, each with its own device context: each must use
      // the rkeys of the context its QPs reach.
      Combo spread{w, p};
      spread.qps_per_node = 3;
      spread.workers_per_node = 2;
      v.push_back(spread);
      // Two scratch banks: a transaction starts while the previous one's
      // commit WRITEs may still read the other bank (shm reads a WRITE's
      // source when it takes effect, 1 us later here).
      Combo banks{w, p};
      banks.scratch_banks = 2;
      v.push_back(banks);
      // Unsignaled commits (DrTM+H's passive ACK), one bank: the next
      // transaction reuses the scratch its commit WRITEs read from once a
      // later signaled request on the QP has completed, or a probe READ.
      Combo unsignaled{w, p};
      unsignaled.unsignaled = true;
      v.push_back(unsignaled);
      // 3-way replication: the log stage and the backups' appliers, the
      // replicas compared after the run; once with the protocol's one-sided
      // stages, once all RPC, and with two workers per node (appliers of
      // both write the node's backup copies), logging one-sided and by RPC.
      if (!protocol_of(p)->replicable) continue;
      Combo repl{w, p};
      repl.replicas = 3;
      repl.log = P::kOneSided;
      v.push_back(repl);
      repl.log = P::kRpc;
      v.push_back(repl);
      Combo repl_rpc{w, p, P::kRpc, P::kRpc, P::kRpc, P::kRpc};
      repl_rpc.replicas = 3;
      if (all_rpc) v.push_back(repl_rpc);
      Combo repl_spread = spread;
      repl_spread.replicas = 3;
      repl_spread.log = P::kOneSided;
      v.push_back(repl_spread);
      repl_spread.log = P::kRpc;  // log.append from the paired worker of each node
      v.push_back(repl_spread);
    }
  std::erase_if(v, refused);  // checked by Refusals.NameWhatIsRefused
  return v;
}

class MatrixTest : public testing::TestWithParam<Combo> {};

}  // namespace

TEST_P(MatrixTest, UnderContentionKeepsInvariantsAndIsSerializable) { expect_contended_run_ok(GetParam()); }

INSTANTIATE_TEST_SUITE_P(All, MatrixTest, testing::ValuesIn(matrix_combos()),
                         [](const testing::TestParamInfo<Combo>& i) { return name_of(i.param); });
