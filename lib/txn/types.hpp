// Vocabulary of the transaction engine: ids, access modes, abort reasons,
// stages and primitives.
// Thread-safety: plain values.
#pragma once

#include <cstdint>

#include "history/format.hpp"

namespace rdtx::txn {

using TableId = uint32_t;
using Key = uint64_t;

// A transaction attempt's id, unique in the cluster and never 0:
//   bits 63..48 node, 47..38 worker (of the node), 37..32 coroutine,
//   31..0 per-coordinator sequence (wraps; ids of one coordinator are then
//   reused only after 2^32 attempts, far beyond any run's lock lifetime).
// Also the value a 2PL lock word holds while the attempt owns it. The
// layout is the history's (history/format.hpp), made and decoded there
// only.
using history::make_txn_id;
using history::txn_coroutine;
using history::txn_node;
using history::txn_seq;
using history::txn_worker;
inline constexpr uint32_t kMaxWorkersPerNode = 256;

// A lock word with shared read locks (txn.options.read_locks = shared,
// doc/txn.md "Shared read locks"): 0 free, kExclusiveBit | value for an
// exclusive holder, else the count of shared holders. Lock values never
// have the bit: an attempt id's node field is below kMaxNodesTs (64), and a
// timestamp's clock part stays below 2^43 for 60 hours of TSC after its
// epoch (the run's start).
inline constexpr uint64_t kExclusiveBit = uint64_t{1} << 63;
inline constexpr uint32_t kMaxCoroutines = 64;
inline constexpr uint32_t kMaxNodesTs = 64;
// Nodes of a cluster at most (per-node arrays of a worker and a coordinator).
inline constexpr uint32_t kMaxNodes = 64;

// A transaction timestamp: (clock << 20) | node(6) | worker(8) | coroutine(6).
// The clock part is the TSC since `epoch` divided by 64 (25 ns at 2.6 GHz;
// 2^44 units last ~120 hours), raised if needed so that one coordinator's
// timestamps strictly increase. The low 20 bits make timestamps of
// different coordinators distinct, so two are never equal for any cluster
// within the limits (64 nodes, 256 workers per node, 64 coroutines), which
// the configuration enforces.
// `floor`: a timestamp seen elsewhere (0: none); the result's clock part is
// above floor's, so the result is larger than floor. This is how a node's
// clock catches up with the others' (RCC 4.4's clock adjustment: MVCC
// raises its worker's floor to every rts, wts or lock holder it meets).
inline uint64_t next_timestamp(uint64_t now_tsc, uint64_t epoch, uint64_t last, uint32_t node, uint32_t worker,
                               uint32_t coroutine, uint64_t floor = 0) {
  uint64_t clock = (now_tsc - epoch) >> 6;
  uint64_t last_clock = last >> 20;
  if (last != 0 && clock <= last_clock) clock = last_clock + 1;
  if (floor != 0 && clock <= floor >> 20) clock = (floor >> 20) + 1;
  return (clock << 20) | (uint64_t{node & 0x3f} << 14) | (uint64_t{worker & 0xff} << 6) | (coroutine & 0x3f);
}

enum class AccessMode : uint8_t { kRead, kWrite };

// Why an attempt aborted. The engine's own reasons come first; a protocol
// declares its own (ProtocolDef::abort_reasons), which take the values from
// kFirstProtocol on, in the order declared. Names for reports come from
// AbortReasons (protocol.hpp), never from this enum.
enum class AbortReason : uint8_t {
  kNone,
  kNotFound,  // the key does not exist
  kNetwork,   // an RDMA/RPC operation failed or timed out
  kUser,      // the workload gave up (e.g. SmallBank insufficient funds)
  kFirstProtocol,
};
inline constexpr int kEngineAbortReasons = static_cast<int>(AbortReason::kFirstProtocol);
// Engine reasons plus a protocol's: the size of every per-reason counter array.
inline constexpr int kMaxAbortReasons = 16;
// The protocol's reason number k (0-based, as declared).
inline constexpr AbortReason protocol_reason(int k) {
  return static_cast<AbortReason>(kEngineAbortReasons + k);
}

// The isolation level a protocol guarantees; the history check certifies it.
// A protocol runs at one of the first four (txn.isolation); a run whose
// protocol also promises real-time order (ProtocolDef::strict) is
// certified kStrictSerializable when its history records real time.
enum class Isolation : uint8_t { kSerializable, kSnapshot, kReadCommitted, kRepeatableRead, kStrictSerializable };
const char* to_string(Isolation i);

// The stages a protocol is assembled from (DESIGN.md). kSequence is
// CALVIN's (the epoch batches broadcast to the counterparts, RCC 4.6) and
// runs first; its place in the enum means nothing (ProtocolDef names its
// stages: StagePrimitives).
enum class Stage : uint8_t { kFetch, kLock, kValidate, kLog, kCommit, kSequence, kCount_ };
const char* to_string(Stage s);
// A stage's bit in a set of stages (WorkerEngine::set_atomic_stages).
constexpr uint32_t stage_bit(Stage s) { return 1u << static_cast<unsigned>(s); }

// Where an attempt spends its time (the per-stage breakdown): the stages,
// CALVIN's schedule (its wait for the node's lock manager to take the
// epoch: no stage of its own), and releasing what an aborted attempt held.
// Stage values map to the same phase (so kRelease is last).
enum class Phase : uint8_t { kFetch, kLock, kValidate, kLog, kCommit, kSequence, kSchedule, kRelease, kCount_ };
inline constexpr int kPhases = static_cast<int>(Phase::kCount_);
const char* to_string(Phase p);

// How a stage talks to the owner of a tuple. kMailbox: records WRITten into
// a per-sender message log on the owner and processed by its CPU, replies
// through the reverse log (FaRM's messaging); only a protocol that lists it
// in ProtocolDef::allowed accepts it (the stage building blocks of the
// toolkit do not: they treat it as one-sided).
enum class Primitive : uint8_t { kOneSided, kRpc, kHybrid, kOff, kMailbox };
const char* to_string(Primitive p);

}  // namespace rdtx::txn
