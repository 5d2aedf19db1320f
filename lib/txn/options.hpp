// The engine's run-time choices: protocol, per-stage primitive, coroutines
// and optimisations, read from the `[txn]` section of the configuration.
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.hpp"
#include "config/config.hpp"
#include "txn/types.hpp"

namespace rdtx::txn {

struct ProtocolDef;

// txn.options.read_locks: how NOWAIT and WAITDIE lock what they only read.
// kExclusive: one exclusive lock per record, reads and writes alike (what
// RCC measures); kShared: readers share (doc/txn.md "Shared read locks").
enum class ReadLocks : uint8_t { kExclusive, kShared };

struct Options {
  std::string protocol = "occ";
  // txn.isolation: the level the run asks of its protocol (a level it
  // offers: ProtocolDef::isolation or ProtocolDef::weaker_levels); the
  // history check certifies this level.
  Isolation isolation = Isolation::kSerializable;
  ReadLocks read_locks = ReadLocks::kExclusive;
  uint32_t coroutines = 8;
  Primitive pipeline[static_cast<int>(Stage::kCount_)] = {Primitive::kOneSided, Primitive::kOneSided,
                                                          Primitive::kOneSided, Primitive::kOff,
                                                          Primitive::kOneSided, Primitive::kOff};
  bool doorbell_batching = true;     // one doorbell per QP per batch (CAS+READ, WRITE+WRITE)
  bool outstanding_requests = true;  // a stage's requests to all nodes at once, one wait
  bool passive_ack = true;           // commit/release messages not awaited
  // With passive_ack, one-sided commit and release requests are posted
  // unsignaled and confirmed by the completion of a later signaled request
  // on the same QP (DrTM+H's passive ACK), instead of signaling each batch's
  // last request per node (doc/txn.md "Passive acknowledgement").
  bool unsignaled_commit = false;
  // With passive_ack, RPC write-backs and releases ask for lazy replies:
  // the owner's reply rides on its next message to the coordinator (or
  // goes after the RPC passive delay), DrTM+H's piggybacked acknowledgement.
  bool piggyback_ack = false;
  // Scratch banks per coordinator: with 2, consecutive transactions use
  // alternate banks, so a passively acknowledged commit is awaited only
  // before its bank is reused (as DrTM+H does not wait); with 1, before
  // the coordinator's next transaction (measured better on shm: doc/txn.md).
  uint32_t scratch_banks = 1;
  bool location_cache = true;
  uint32_t location_cache_entries = 1 << 16;
  // History recording (doc/history.md): each worker appends its committed
  // (and, with record_aborted, aborted) attempts to a bounded buffer.
  // Per-stage timing and verb accounting (stats.breakdown); stages are timed
  // in one attempt of every breakdown_sample (a power of two).
  bool breakdown = true;
  uint32_t breakdown_sample = 16;
  bool record_history = false;
  bool record_aborted = false;
  uint64_t history_capacity_bytes = uint64_t{2} << 20;  // per worker: the streaming buffer
  uint32_t max_retries = 0;  // 0: retry an aborted transaction until it commits
  // Randomized exponential backoff before a retry: the first wait is
  // uniform in [0, backoff_ns), doubling per attempt up to 64x. Without it,
  // NOWAIT under a hot spot livelocks (every retry meets the locks of the
  // others' retries).
  uint32_t backoff_ns = 2000;
  // Tests only (no configuration key): the log stage leaves out the entry
  // to the first backup of every n-th logged transaction: a broken variant
  // the replica comparison after the run must catch. 0: never.
  uint32_t log_skip_every = 0;
  // Tests only (no configuration key): owner-side read-modify-writes use
  // CPU atomics even where the device's atomics are not coherent with them
  // and NIC atomics hit the same words (stages/owner_atomics.hpp): a broken
  // variant the checks must catch on shm's atomics=hca.
  bool owner_atomics_cpu = false;
  // Replication: bytes of each log ring (one per sender on every worker).
  uint64_t log_ring_bytes = uint64_t{256} << 10;

  // The protocols' own keys (ProtocolDef::add_schema: [calvin] ...) as
  // (path, value) strings; a key absent here (a run built without a
  // configuration, as the tests do) takes the default the protocol gives.
  std::vector<std::pair<std::string, std::string>> protocol_settings;

  // A hash of what a run's generated inputs depend on: `workload` and its
  // keys, cluster.nodes, cluster.workers_per_node, cluster.memory_nodes and
  // txn.coroutines. A recording of inputs (CALVIN's calvin.inputs) carries
  // it, and is replayed only under the same (0: no configuration).
  uint64_t input_fingerprint = 0;

  Primitive stage(Stage s) const { return pipeline[static_cast<int>(s)]; }
  // A protocol setting as an integer, or `def` if absent.
  int64_t setting_int(std::string_view path, int64_t def) const;
  // A protocol setting as a string, or `def` if absent.
  std::string setting_string(std::string_view path, std::string def) const;
};

// Declares the [txn] keys (protocol names come from the registry given to
// the checks).
void add_schema(config::Schema& schema, const std::vector<const ProtocolDef*>& protocols);
// Reads the options; the schema checks have already validated the pipeline.
Options options_from(const config::Config& cfg);
// Options::input_fingerprint of a configuration.
uint64_t input_fingerprint_of(const config::Config& cfg);
// Checks a pipeline against a protocol: each stage it lacks must be left at
// its default, each stage it has must use a primitive it supports. The error
// names the key, where it was set, and the allowed values.
std::string check_pipeline(const config::Config& cfg, const ProtocolDef& def);

}  // namespace rdtx::txn
