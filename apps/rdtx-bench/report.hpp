// rdtx-bench's report of one run: the checks that decide whether its figures
// can be trusted, the human-readable table, and the JSON object (fields
// documented in doc/rdtx-bench.md).
// Thread-safety: plain functions over finished results.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "cluster/bootstrap.hpp"
#include "config/config.hpp"
#include "history/checker.hpp"
#include "rdma/rdma.hpp"
#include "run/runner.hpp"
#include "run/verdict.hpp"

namespace rdtx::bench {

// One correctness check of a run (run/verdict.hpp).
using run::Check;

// The recorded history of a run (history.record): where it was written and
// what the checker said.
struct HistoryResult {
  bool recorded = false;
  uint64_t txns = 0, accesses = 0, dropped = 0;
  bool truncated = false;
  std::string dir;    // where the files were written ("" = not written)
  std::string error;  // writing or loading failed
  bool stopped = false;  // a stop request ended the writing or the check (error says which)
  bool checked = false;
  history::CheckReport report;
  std::string text;  // format_report(): the findings, for a person
};

// Writes the files (history.dir) and checks the history (history.check).
// Multi-process (`boot`): every node writes its files to history.dir, then
// node 0 loads all of them and checks. Writing, merging and checking give
// up once a stop request's grace is over (SIGINT, SIGTERM:
// runtime::stop_grace_over()): `stopped`, and `error` says what was not
// done.
HistoryResult handle_history(const config::Config& cfg, const run::RunResult& r, cluster::Bootstrap* boot = nullptr);

// Everything the report says about one run.
// The leases of a run with cluster.coordinator (doc/membership.md
// "Leases"), as this node saw them: the CM the renewals of its members,
// a member its own.
struct LeaseFigures {
  double lease_ms = 0;
  bool cm = false;          // this node was the CM at the end
  bool realtime = false;    // the agent's thread ran at SCHED_FIFO
  uint64_t renewals = 0;    // CM: renewals seen from all members; member: renewals sent
  uint64_t late = 0;        // CM: seen more than half a lease after the one before (member: 0)
  double longest_gap_ms = 0;
};

struct Report {
  const config::Config* cfg = nullptr;
  std::optional<LeaseFigures> leases;  // with cluster.coordinator
  const run::RunConfig* run = nullptr;
  const run::RunResult* result = nullptr;
  rdma::DeviceCaps device;
  std::vector<std::string> type_names;  // the workload's transaction types
  const HistoryResult* history = nullptr;
  bool interrupted = false;             // stopped early by a signal
  std::vector<Check> checks;
  // The measured window (0 if interrupted before it opened).
  double seconds() const;
  bool passed() const;
};

// The checks of a finished run (run::verdict, with timeouts allowed and the
// steady-state check): with a recorded history that was checked, or failed
// to be, also the history's.
std::vector<Check> run_checks(const run::RunResult& r, bool interrupted, const HistoryResult* history = nullptr,
                              double warmup_s = 0);

// One line naming the run, printed before it starts.
void print_header(std::FILE* out, const config::Config& cfg, const run::RunConfig& run, const rdma::DeviceCaps& device);
// The figures and the checks.
void print_report(std::FILE* out, const Report& rep);
// The whole report as one JSON object (the resolved config included).
std::string report_json(const Report& rep);

// Appends the run as one CSV row (the columns of csv_columns(); a header
// line first when the file is new or empty). Refuses a file whose header
// differs, naming the first differing column, a file that is not a regular
// file, and one whose first line is longer than kCsvHeaderMax (not a CSV
// file of rdtx-bench): only that much of the file is read.
Result<void> append_csv(const std::string& path, const Report& rep);

// The most append_csv() reads of an existing file: its header line.
inline constexpr size_t kCsvHeaderMax = 64 << 10;

// --csv FILE before the run: FILE is a regular file (a device or a FIFO
// would never end a read, and cannot hold a CSV table) or does not exist
// in a directory this process may write to. EINVAL naming the file.
Result<void> check_csv_path(const std::string& path);

// The --json file, opened before the EAL starts so that a bad path is
// refused (exit 2) before anything heavy: a regular file (created or
// truncated, and removed again by discard() if the run ends without a
// report), or a pipe, FIFO or character device that can take the report
// now (process substitution, a FIFO a reader holds open, /dev/stdout). A
// FIFO no process reads is refused instead of blocking until one does.
class JsonOutput {
 public:
  JsonOutput() = default;
  JsonOutput(const JsonOutput&) = delete;
  JsonOutput& operator=(const JsonOutput&) = delete;
  ~JsonOutput();
  // EINVAL or the errno naming the file.
  static Result<void> open(const std::string& path, JsonOutput& out);
  bool is_open() const { return fd_ >= 0; }
  // Writes all of `text` and closes; an error names the file.
  Result<void> write_and_close(const std::string& text);
  // No report: a regular file this run truncated is removed.
  void discard();

 private:
  int fd_ = -1;
  bool regular_ = false;
  std::string path_;
};


}  // namespace rdtx::bench
