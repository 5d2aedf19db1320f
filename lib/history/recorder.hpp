// Recorder: one worker's append-only history of transaction attempts,
// streamed to a file while the run goes, through an in-memory buffer of
// fixed size, so that a run of any length is recorded whole in bounded
// memory.
//
// The engine creates one Recorder per worker when recording is on, gives each
// coordinator coroutine a TxnTrace, and when an attempt's outcome is known
// calls commit() or abort() with its trace. Those calls copy the trace to the
// end of the buffer: no allocation, no lock, and no system call but one
// write per half buffer (below). The buffer is allocated and touched once in
// create(), so no page fault lands on the hot path either.
//
// Streaming (double buffering): the buffer (capacity_bytes) is two halves.
// Records fill one half; when the next record does not fit, that half is
// handed over to be written and the other half fills. With
// stream_in_background() (the engine's way) a control thread of the
// recorder's own (env::ControlThread, off the worker lcores) writes it with
// one pwrite and extends the checksum, and the worker's poller collects the
// result (flush_pending(), no system call): the worker makes no system call
// for the history but one futex wake per half handed over. Without it, the
// worker writes the half itself from flush_pending(). If the other half
// fills before the handed-over one is written, the commit() that finds both
// halves full waits for (or does) that write. Memory stays at
// capacity_bytes however long the run. The file is
// created in spill_dir and unlinked at once (nothing is left behind if the
// process dies); write_file() copies it, with its header, to the history
// file at the end, and append_to() reads it back for an in-process check.
//
// What still truncates: an attempt larger than half the buffer (or than
// its trace), and a write error (disk full). The recorder then stops
// recording for good and marks the history truncated, so what it holds is
// always a prefix of the worker's outcomes; the attempts not recorded are
// only counted. The checker refuses to certify a truncated history unless
// asked to check the prefix. Nothing is ever dropped silently.
//
// Versions: each tuple carries, in recording mode, the id of the transaction
// that wrote it (a hidden writer id; doc/history.md). A read records the
// writer id it saw; a write records the writer id it replaced, read under the
// lock or at commit, and installs its own id.
//
// Thread-safety: owned by its worker's thread (the background writer only
// touches the half handed over, through Writer). end_streaming(), then
// write_file() and append_to(), may be called from another thread once the
// worker has stopped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "base/result.hpp"
#include "history/format.hpp"
#include "history/history.hpp"
#include "history/names.hpp"
#include "history/txn_trace.hpp"

namespace rdtx::history {

struct RecorderOptions {
  uint64_t run_id = 0;  // the same for every recorder of one run
  uint16_t node = 0;
  uint16_t worker = 0;          // < kMaxWorkers
  uint16_t cluster_nodes = 0;   // nodes in the run; 0 skips the checker's completeness check
  uint16_t node_workers = 0;    // workers on this node; 0 likewise
  // The in-memory buffer (history.capacity_mb), both halves together: it
  // bounds the recorder's memory and how much is written at once, not the
  // history's length. Half of it must hold the largest attempt (a 4-access
  // attempt takes 216 bytes, a 64-access one 2616).
  size_t capacity_bytes = size_t{2} << 20;
  bool record_aborted = false;  // also record aborted attempts, with their reason
  // The protocol promises timestamp order (kFileTimestampOrder): each
  // commit() passes the attempt's commit timestamp.
  bool timestamp_order = false;
  // Vector snapshots (kFileSnapshotVectors): each committed attempt's
  // trace carries its snapshot vector (TxnTrace::set_snapshot), all of one
  // length, at most kMaxSnapshotWords; commit() passes its commit
  // timestamp in that vector's slot (0: it wrote nothing).
  bool snapshot_vectors = false;
  // Real time (kFileRealTime): the clock env::tsc() reads, in which the
  // engine gives each attempt's begin (TxnTrace::begin) and the recorder
  // stamps its outcome; host_clock() for a run on the hardware counter.
  // Unrecorded (tsc_hz 0): begin_tsc is written as 0 and the checker cannot
  // check real-time order.
  Clock clock;
  NameTables names;             // every table, type and abort reason id used
  // Where the history streams during the run: an unnamed file in this
  // directory, which must have room for the whole history. "": $TMPDIR, or
  // /tmp without it. (Best on the file system of the history directory.)
  std::string spill_dir;
};

// This host's hardware counter as a history clock: its domain is a hash of
// the kernel's boot id (processes of one host share their TSC), its rate
// env::hw_tsc_hz(), sampled with CLOCK_REALTIME. Not for virtual time,
// whose env::tsc() is each worker's own clock.
Clock host_clock();

class Recorder {
 public:
  // The largest buffer: past a few MiB a larger one only delays writes.
  static constexpr size_t kMaxCapacityBytes = size_t{1} << 30;

  // Fails (EINVAL) on a worker or node_workers past kMaxWorkers, a worker not
  // below node_workers, a node not below cluster_nodes, names over the
  // limits, or a capacity that holds no transaction record per half or is
  // over kMaxCapacityBytes or the machine's memory -- checked before
  // anything is allocated; the message names history.capacity_mb. ENOMEM if
  // the buffer cannot be allocated; an errno and the path if the stream file
  // cannot be created.
  static Result<Recorder> create(RecorderOptions options);
  ~Recorder();  // stops the background writer, if any
  Recorder(Recorder&&) noexcept;
  Recorder& operator=(Recorder&&) noexcept;


  // Records a committed attempt. commit_ts is the protocol's logical commit
  // timestamp (0 = unknown). Hot path.
  void commit(const TxnTrace& trace, uint64_t commit_ts = 0) { append(trace, Outcome::kCommitted, 0, commit_ts); }
  // Records an aborted attempt if record_aborted, with an index into the
  // abort reason names. Hot path.
  void abort(const TxnTrace& trace, uint16_t reason) {
    if (options_.record_aborted) append(trace, Outcome::kAborted, reason, 0);
  }
  // Hands the writing of full halves to a background control thread
  // (see above). Fails if the thread cannot be started.
  Result<void> stream_in_background();
  // Without a background writer: writes the half buffer waiting to be
  // written, if any (one pwrite). With one: takes its result if it is done
  // (no waiting, no system call). Meant for a poller of the worker, between
  // transactions; returns whether a half was settled. Safe to call at any
  // time from the owning thread.
  bool flush_pending();
  // Waits for the background writer's last half and stops it; needed before
  // write_file(), append_to() or moving the recorder to another owner.
  void end_streaming();
  bool write_pending() const { return pending_ != 0; }

  bool truncated() const { return truncated_; }
  uint64_t txn_count() const { return txns_; }
  uint64_t access_count() const { return accesses_; }
  uint64_t dropped_txns() const { return dropped_; }
  // Log bytes recorded: streamed to the file plus still in memory.
  uint64_t bytes_used() const { return streamed_ + pending_ + used_; }
  // Log bytes already in the stream file.
  uint64_t bytes_streamed() const { return streamed_; }
  // Why streaming stopped (a write error), or "".
  const std::string& stream_error() const { return stream_error_; }
  const RecorderOptions& options() const { return options_; }

  // Writes the history file (header, names, log) to `path`, through
  // `path`.tmp and a rename so that a reader never sees half a file: the
  // stream file is copied (copy_file_range) and what is still in memory
  // appended. Fails, naming the stream file, if streaming failed. Errors
  // name the path; ECANCELED when `stop` asked to give up (polled every 64
  // MiB copied), leaving no file.
  Result<void> write_file(const std::string& path, const StopFn& stop = {}) const;
  // Appends the recorded attempts and this worker's Source to `h`, as the
  // reader would load them from the file (for in-process checks and tests),
  // reading the stream file back. Fails like the reader if h's name tables
  // or run differ; ECANCELED when `stop` asked to give up (polled every 8
  // MiB read).
  Result<void> append_to(History& h, const StopFn& stop = {}) const;
  // "history-n<node>-w<worker>.rdtxh"
  static std::string file_name(uint16_t node, uint16_t worker);

 private:
  Recorder(RecorderOptions options, std::unique_ptr<std::byte[]> buf, int fd, std::string spill_path);
  void append(const TxnTrace& trace, Outcome outcome, uint16_t reason, uint64_t commit_ts);
  void drop() {
    truncated_ = true;
    ++dropped_;
  }
  void stream_failed(int err);
  // A half handed over to the background writer: its result taken.
  void collect_written();
  struct Writer;
  std::byte* half(int i) const { return buf_.get() + static_cast<size_t>(i) * half_bytes_; }
  FileHeader header() const;

  RecorderOptions options_;
  std::unique_ptr<std::byte[]> buf_;
  size_t half_bytes_ = 0;
  int active_ = 0;      // the half being filled
  size_t used_ = 0;     // bytes in the active half
  size_t pending_ = 0;  // bytes in the other half, waiting to be written (0: none)
  uint64_t half_txns_[2] = {}, half_accesses_[2] = {};
  // A file descriptor closed with its owner.
  class Fd {
   public:
    explicit Fd(int fd = -1) : fd_(fd) {}
    Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
    Fd& operator=(Fd&& o) noexcept {
      std::swap(fd_, o.fd_);
      return *this;
    }
    ~Fd();
    int get() const { return fd_; }

   private:
    int fd_;
  };

  Fd fd_;                    // the stream file: header space, names, then the log
  std::string spill_path_;   // its name while it had one, for messages
  uint64_t names_bytes_ = 0;
  uint64_t streamed_ = 0;    // log bytes written to the file
  uint32_t body_crc_ = 0;    // CRC32C of the names and the streamed log
  uint64_t txns_ = 0;
  uint64_t accesses_ = 0;
  uint64_t dropped_ = 0;
  bool truncated_ = false;
  std::string stream_error_;
  std::unique_ptr<Writer> writer_;  // the background writer, if any (heap: survives a move)
};

}  // namespace rdtx::history
