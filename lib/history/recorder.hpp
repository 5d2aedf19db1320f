// Recorder: one worker's append-only history of transaction attempts, kept
// in a buffer of fixed size and written to one file at the end of a run.
//
// The engine creates one Recorder per worker when recording is on, gives each
// coordinator coroutine a TxnTrace, and when an attempt's outcome is known
// calls commit() or abort() with its trace. Those calls copy the trace to the
// end of the buffer: no allocation, no system call, no lock. The buffer is
// allocated and touched once in create(), so no page fault lands on the hot
// path either.
//
// Bounded memory: when an attempt does not fit (or its trace overflowed),
// the recorder stops recording for good and marks the history truncated, so
// what it holds is always a prefix of the worker's outcomes; the attempts
// not recorded are only counted. The checker refuses to certify a truncated
// history unless asked to check the prefix. Nothing is ever dropped silently.
//
// Versions: each tuple carries, in recording mode, the id of the transaction
// that wrote it (a hidden writer id; doc/history.md). A read records the
// writer id it saw; a write records the writer id it replaced, read under the
// lock or at commit, and installs its own id.
//
// Thread-safety: owned by its worker's thread. write_file() and append_to()
// may be called from another thread once the worker has stopped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/result.hpp"
#include "history/format.hpp"
#include "history/history.hpp"
#include "history/names.hpp"
#include "history/txn_trace.hpp"

namespace rdtx::history {

struct RecorderOptions {
  uint64_t run_id = 0;  // the same for every recorder of one run
  uint16_t node = 0;
  uint16_t worker = 0;                       // < kMaxWorkers
  uint16_t cluster_nodes = 0;                // nodes in the run; 0 skips the checker's completeness check
  uint16_t node_workers = 0;                 // workers on this node; 0 likewise
  size_t capacity_bytes = size_t{64} << 20;  // a 4-access attempt takes 208 bytes
  bool record_aborted = false;               // also record aborted attempts, with their reason
  NameTables names;                          // every table, type and abort reason id used
};

class Recorder {
 public:
  // Fails (EINVAL) on a worker or node_workers past kMaxWorkers, a worker not
  // below node_workers, a node not below cluster_nodes, names over the
  // limits, or a capacity smaller than one transaction record.
  static Result<Recorder> create(RecorderOptions options);

  // Records a committed attempt. commit_ts is the protocol's logical commit
  // timestamp (0 = unknown). Hot path.
  void commit(const TxnTrace& trace, uint64_t commit_ts = 0) { append(trace, Outcome::kCommitted, 0, commit_ts); }
  // Records an aborted attempt if record_aborted, with an index into the
  // abort reason names. Hot path.
  void abort(const TxnTrace& trace, uint16_t reason) {
    if (options_.record_aborted) append(trace, Outcome::kAborted, reason, 0);
  }

  bool truncated() const { return truncated_; }
  uint64_t txn_count() const { return txns_; }
  uint64_t access_count() const { return accesses_; }
  uint64_t dropped_txns() const { return dropped_; }
  size_t bytes_used() const { return used_; }
  const RecorderOptions& options() const { return options_; }

  // Writes the file (header, names, log) to `path`, through `path`.tmp and a
  // rename so that a reader never sees half a file. Errors name the path.
  Result<void> write_file(const std::string& path) const;
  // Appends the recorded attempts and this worker's Source to `h`, as the
  // reader would load them from the file (for in-process checks and tests).
  // Fails like the reader if h's name tables or run differ.
  Result<void> append_to(History& h) const;
  // "history-n<node>-w<worker>.rdtxh"
  static std::string file_name(uint16_t node, uint16_t worker);

 private:
  explicit Recorder(RecorderOptions options);
  void append(const TxnTrace& trace, Outcome outcome, uint16_t reason, uint64_t commit_ts);
  FileHeader header() const;

  RecorderOptions options_;
  std::unique_ptr<std::byte[]> buf_;
  size_t used_ = 0;
  uint64_t txns_ = 0;
  uint64_t accesses_ = 0;
  uint64_t dropped_ = 0;
  bool truncated_ = false;
};

}  // namespace rdtx::history
