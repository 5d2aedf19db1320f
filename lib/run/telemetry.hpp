// The run's telemetry commands (doc/telemetry.md), bound while a run goes
// on: /rdtx/stats (the cluster's figures) and /rdtx/workers (each worker's).
// Libraries register their own commands (lib/rpc: /rdtx/rpc/endpoints,
// lib/store: /rdtx/store/location_cache); the harness registers only these.
// Internal to lib/run.
// Thread-safety: the handlers run on DPDK's telemetry threads and read only
// what the workers publish (stats::Published).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "env/telemetry.hpp"
#include "txn/engine.hpp"

namespace rdtx::run {

// Registers both commands over `engines` (the run started at TSC t0 and
// measures from measure_at; `names` are the abort reasons). Nothing when
// this process serves no telemetry. The handles unbind the commands: drop
// them before the engines go.
std::vector<env::TelemetryCommand> register_run_telemetry(
    const std::vector<std::unique_ptr<txn::WorkerEngine>>& engines, uint64_t t0, uint64_t measure_at,
    const std::vector<txn::AbortReasonName>& names);

// The "counters" entry of /rdtx/stats: every kWorkerCounters key with its
// value (raw bits as LiveStats::counters holds them).
void add_worker_counters(env::TelemetryDict& out, const uint64_t (&counters)[txn::kWorkerCounterCount]);

}  // namespace rdtx::run
