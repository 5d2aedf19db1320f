// The history recording format: transaction ids, versions, and the fixed-size
// records a Recorder appends in memory and streams to a file as is, and that
// the reader loads for the checker. doc/history.md documents every byte.
//
// A history file is
//   FileHeader (128 bytes)
//   names section (names_bytes, a multiple of 8; see names.hpp)
//   log: txn_count TxnRecords, each followed by its access_count AccessRecords
//        and its snapshot_words snapshot vector words (kFileSnapshotVectors)
// All integers are little-endian; every record is 8-byte aligned. Two
// CRC32Cs (checksum.hpp) cover every byte: header_crc the header (with
// header_crc itself taken as 0), body_crc the names section and the log.
//
// Thread-safety: plain value types.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace rdtx::history {

static_assert(std::endian::native == std::endian::little,
              "history files are little-endian and written from memory as is");

// A transaction attempt's id, unique in the cluster and never 0:
//   bits 63..48 node, 47..38 worker (of the node), 37..32 coroutine,
//   31..0 per-coordinator sequence.
// This is the layout lib/txn uses for its ids and lock words; the checker
// relies on it to name coordinators and to check that every id in a file
// belongs to the file's (node, worker). Each attempt, including a retry of an
// aborted one, has its own id: an aborted attempt's writes may have been seen.
using TxnId = uint64_t;

inline constexpr TxnId kInitialTxn = 0;         // the "writer" of initially loaded data
inline constexpr uint32_t kMaxWorkers = 1024;   // per node
inline constexpr uint32_t kMaxCoroutines = 64;  // per worker

inline constexpr TxnId make_txn_id(uint16_t node, uint32_t worker, uint32_t coroutine, uint32_t seq) {
  return (uint64_t{node} << 48) | (uint64_t{worker & (kMaxWorkers - 1)} << 38) |
         (uint64_t{coroutine & (kMaxCoroutines - 1)} << 32) | seq;
}
inline constexpr uint16_t txn_node(TxnId id) { return static_cast<uint16_t>(id >> 48); }
inline constexpr uint32_t txn_worker(TxnId id) { return static_cast<uint32_t>(id >> 38) & (kMaxWorkers - 1); }
inline constexpr uint32_t txn_coroutine(TxnId id) { return static_cast<uint32_t>(id >> 32) & (kMaxCoroutines - 1); }
inline constexpr uint32_t txn_seq(TxnId id) { return static_cast<uint32_t>(id); }

// A version of one key: the transaction that wrote it and that transaction's
// write sequence number for the key (0 for its first write of the key, 1 for
// the second, ...). An engine that installs only final versions always uses
// seq 0; a higher seq lets an intermediate version be told from the final one
// (G1b). The initially loaded data, and a key that never existed, is
// kInitialVersion.
struct Version {
  TxnId txn = kInitialTxn;
  uint16_t seq = 0;
  friend bool operator==(const Version&, const Version&) = default;
};
inline constexpr Version kInitialVersion{};

enum class Op : uint8_t { kRead = 1, kWrite = 2, kInsert = 3, kDelete = 4 };
const char* to_string(Op op);  // "read", "write", "insert", "delete"

enum class Outcome : uint8_t { kCommitted = 1, kAborted = 2 };

// AccessRecord::flags
inline constexpr uint8_t kAccessReads = 1;  // read_txn/read_seq hold the version read
inline constexpr uint8_t kAccessKnownFlags = kAccessReads;

// One access of a transaction. A read names the version it saw. A write
// (write, insert, delete) names the version it replaced -- the one current
// when it was installed, seen under the lock or at commit -- and its own
// write seq; the version it created is (its transaction's id, write_seq).
// A read-modify-write is one write record that also has kAccessReads.
struct AccessRecord {
  uint64_t key;
  TxnId read_txn;      // version read, if flags & kAccessReads
  TxnId replaced_txn;  // version replaced, for writes
  uint32_t table;
  uint16_t read_seq;
  uint16_t replaced_seq;
  uint16_t write_seq;
  uint8_t op;         // Op
  uint8_t flags;      // kAccess*
  uint32_t reserved;  // 0

  bool reads() const { return (flags & kAccessReads) != 0; }
  bool writes() const { return op != static_cast<uint8_t>(Op::kRead); }
  Version read_version() const { return {read_txn, read_seq}; }
  Version replaced_version() const { return {replaced_txn, replaced_seq}; }
};
static_assert(sizeof(AccessRecord) == 40);

// One transaction attempt, followed in the log by its accesses.
struct TxnRecord {
  TxnId id;
  uint64_t start_ts;    // logical start (snapshot) timestamp, 0 = unknown
  uint64_t commit_ts;   // logical commit timestamp, 0 = unknown
  // Real time, in ticks of the file's clock (FileHeader::tsc_hz, clock_*):
  // when the transaction was invoked -- its first attempt began, before any
  // access; a retry keeps its transaction's begin -- (0 = unknown), and when
  // its outcome was known to its coordinator (recorded). With
  // kFileRealTime, a committed attempt whose commit_tsc is below another's
  // begin_tsc precedes it in real time (strict serializability).
  uint64_t begin_tsc;
  uint64_t commit_tsc;
  uint32_t access_count;
  uint16_t type;          // workload-defined, an index into the type names
  uint16_t abort_reason;  // aborted: an index into the abort reason names; else 0
  uint8_t outcome;        // Outcome
  uint8_t reserved;       // 0
  // Vector snapshots (kFileSnapshotVectors; else 0): the words of the
  // attempt's snapshot vector that follow its accesses -- entry j the
  // newest commit of slot j it sees -- and the slot its commit_ts counts
  // in: a committed writer (slot, commit_ts) is in a snapshot S iff
  // commit_ts <= S[slot]. A committed attempt that wrote nothing has
  // commit_ts 0 (it is in no snapshot). With kFileTimestampOrder instead,
  // commit_slot is the epoch of the commit order (epoch, commit_ts) --
  // CALVIN's -- or 0 where the order is commit_ts alone.
  uint16_t snapshot_words;
  uint32_t commit_slot;

  bool committed() const { return outcome == static_cast<uint8_t>(Outcome::kCommitted); }
};
static_assert(sizeof(TxnRecord) == 56);

// FileHeader::flags
inline constexpr uint32_t kFileTruncated = 1;       // the recorder ran out of room: a prefix
inline constexpr uint32_t kFileAbortsRecorded = 2;  // aborted attempts are in the log
// The protocol promises timestamp order: every committed attempt has a
// commit_ts, and every dependency goes forward in (commit_slot: the epoch,
// commit_ts) (ww and rw strictly, wr not backward: a reader may share its
// writer's timestamp, as SUNDIAL's do). The checker verifies every edge.
// Not with kFileSnapshotVectors (commit_slot is a slot there).
inline constexpr uint32_t kFileTimestampOrder = 4;
// Real time is recorded: each attempt's begin_tsc, and the header's clock
// (clock_domain, tsc_hz, clock_tsc, clock_unix_ns), so that the checker
// can add real-time order to the dependency graph (strict serializability).
inline constexpr uint32_t kFileRealTime = 8;
// Vector snapshots (NAM-DB's timestamp vector): every committed attempt
// carries its snapshot vector, all of one length, and its commit's slot
// and timestamp in it, so that the checker decides snapshot isolation
// exactly (which writers each snapshot holds).
inline constexpr uint32_t kFileSnapshotVectors = 16;
inline constexpr uint32_t kFileKnownFlags =
    kFileTruncated | kFileAbortsRecorded | kFileTimestampOrder | kFileRealTime | kFileSnapshotVectors;
// The longest snapshot vector a record carries.
inline constexpr uint32_t kMaxSnapshotWords = 65535;

inline constexpr char kFileMagic[8] = {'R', 'D', 'T', 'X', 'H', 'I', 'S', 'T'};
// Version 2 added the checksums, version 3 real time (TxnRecord::begin_tsc,
// the header's clock), version 4 vector snapshots (TxnRecord's
// snapshot_words and commit_slot); older files are refused.
inline constexpr uint32_t kFormatVersion = 4;
inline constexpr const char* kFileExtension = ".rdtxh";

struct FileHeader {
  char magic[8];            // kFileMagic
  uint32_t format_version;  // kFormatVersion
  uint32_t header_bytes;    // sizeof(FileHeader)
  uint64_t run_id;          // the same in every file of one run
  uint16_t node;
  uint16_t worker;
  uint16_t cluster_nodes;  // nodes in the run (0: unknown, no completeness check)
  uint16_t node_workers;   // workers of this node (0: unknown)
  uint32_t flags;          // kFile*
  uint32_t reserved0;      // 0
  uint64_t txn_count;
  uint64_t access_count;
  uint64_t names_bytes;
  uint64_t log_bytes;     // txn_count * 56 + access_count * 40 + 8 * snapshot words
  uint64_t dropped_txns;    // outcomes not recorded once truncated; 0 unless kFileTruncated
  uint64_t capacity_bytes;  // the recorder's in-memory buffer (both halves)
  uint32_t header_crc;      // CRC32C of these 128 bytes with header_crc = 0
  uint32_t body_crc;        // CRC32C of the names section and the log
  // The clock of begin_tsc and commit_tsc (with kFileRealTime, else 0):
  // files with the same nonzero clock_domain read one counter (one host's
  // TSC: a hash of its boot id), so their ticks compare exactly; across
  // domains they compare through the wall clock (CLOCK_REALTIME) read at
  // clock_tsc, which only a bound on the hosts' clock disagreement makes
  // usable (the checker's clock_skew_ns).
  uint64_t clock_domain;
  uint64_t tsc_hz;         // ticks per second
  uint64_t clock_tsc;      // a tick of the clock ...
  uint64_t clock_unix_ns;  // ... and the wall clock at that tick, ns since 1970
};
static_assert(sizeof(FileHeader) == 128);

// The header's CRC32C, with header_crc taken as 0.
uint32_t header_checksum(FileHeader h);

}  // namespace rdtx::history
