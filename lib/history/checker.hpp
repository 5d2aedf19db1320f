// The history checker: certifies that a recorded history is serializable
// (or snapshot isolated, or read committed), or reports the anomalies that
// show it is not, each in a form a person can follow.
//
// It rebuilds, for every key, the chain of versions from the versions each
// committed write replaced (each found straight at its writer's install),
// then the direct serialization graph (ww, wr and rw edges,
// dependency_graph.hpp) -- searching for cycles only inside the segments
// that edges against commit order span -- and checks (Adya's phenomena):
//   G0        a cycle of ww edges (write cycle)
//   G1a       a committed read of a version an aborted attempt wrote
//   G1b       a committed read of a version its writer later overwrote itself
//   G1c       a cycle of ww and wr edges with at least one wr
//   G2-item   a cycle with at least one rw edge; classified "write skew"
//             (two transactions, two rw edges on different keys), "lost
//             update" (one key, one rw edge, the rest ww) or "G-single"
//             (exactly one rw edge)
//   G-SIa/b   snapshot isolation's interference and missed effects
//   real time a cycle through real-time order (T1 committed before T2
//             began, so T1 must come first): the history is serializable
//             only in an order that contradicts real time (strict
//             serializability, checked when the history records real time)
// and properties of the history itself:
//   lost update      a read-modify-write replaced a version other than the
//                    one it read: it overwrote a write it never saw
//   version fork     two committed writes replaced the same version, so the
//                    versions of the key do not form one chain
//   unknown version  a read or write names a version nobody in the history
//                    wrote (never written, or by an unrecorded attempt)
//   inconsistent     the history contradicts itself: a duplicate id, a
//                    version installed twice, a write replacing an aborted or
//                    intermediate version, a write sequence out of order, a
//                    commit timestamp before the start timestamp
// Which of these count depends on the isolation level (forbidden() below,
// doc/history.md): strict serializable forbids what serializable does and
// real-time cycles; serializable (PL-3) forbids all but the G-SI ones, read
// committed (PL-2) only G0, G1 and the history's own defects, repeatable
// read (PL-2.99) what serializable does. PL-3 and PL-2.99 differ in
// predicate anti-dependencies only, and a history records item reads only
// (no workload has a predicate read), so on these histories they coincide. Cycles are counted per strongly connected component, and
// each is shown by a shortest cycle through an edge of the kind that makes
// it an anomaly.
//
// Thread-safety: check() is reentrant; it only reads the History.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"
#include "history/dependency_graph.hpp"
#include "history/format.hpp"
#include "history/history.hpp"

namespace rdtx::history {

enum class Isolation : uint8_t { kSerializable, kSnapshot, kReadCommitted, kRepeatableRead, kStrictSerializable };
// "serializable", "snapshot isolation", "read committed", "repeatable read",
// "strict serializable"
const char* to_string(Isolation i);
// "serializable", "si" or "snapshot", "rc" or "read-committed", "rr" or
// "repeatable-read", "strict" or "strict-serializable".
Result<Isolation> parse_isolation(std::string_view s);

enum class Anomaly : uint8_t {
  kG0,
  kG1a,
  kG1b,
  kG1c,
  kG2Item,
  kGSIa,
  kGSIb,
  kLostUpdate,
  kVersionFork,
  kUnknownVersion,
  kInconsistent,
  kInconclusive,  // snapshot isolation without timestamps: a component too large to search
  // A dependency that goes backward in commit timestamps, or a committed
  // attempt without one, in a history whose protocol promises timestamp
  // order (Source::timestamp_order).
  kTimestampOrder,
  // A cycle through real-time order (strict serializability), or a
  // strict check of a history that records no real time.
  kRealTime,
  kCount_,
};
inline constexpr size_t kAnomalyKinds = static_cast<size_t>(Anomaly::kCount_);
const char* to_string(Anomaly a);  // "G0", ..., "G2-item", "lost update", "version fork", ...
// Whether `level` forbids `a`; the checker looks only for those.
bool forbidden(Isolation level, Anomaly a);

// One edge of a reported cycle, from txns[i] to txns[i + 1] (the last one
// back to txns[0]).
struct CycleEdge {
  EdgeKind kind;
  uint32_t table;
  uint64_t key;
  Version seen;       // ww: the version replaced; wr, rw: the version read
  Version installed;  // ww, rw: the version the edge's target installed; wr: = seen
  // rt: how long before the target began the source committed, in ns
  // (less the clock_skew_ns allowed across hosts).
  uint64_t gap_ns = 0;
};

struct Finding {
  Anomaly kind;
  std::string classification;    // G2-item: "write skew", "lost update", "G-single" or ""
  std::vector<TxnId> txns;       // a cycle in order, else the transactions involved
  std::vector<CycleEdge> cycle;  // empty unless the anomaly is a cycle
  std::string text;              // for a person: one line, or a header and one line per edge
};

struct CheckOptions {
  Isolation isolation = Isolation::kSerializable;
  // Check the recorded prefix of a truncated history instead of refusing.
  bool allow_truncated = false;
  // Findings kept per kind: the first ones found; all are counted. This,
  // and a graph linear in the history's size, bound the checker's memory
  // however many anomalies the history has.
  size_t max_findings = 10;
  // Edge visits each kind of cycle search may spend beyond one search per
  // component (about 0.1 s per 10 million): bounds the time huge cyclic
  // components can take, at the price of a cycle that may not be the
  // shortest (the report says so).
  uint64_t search_budget = 50'000'000;
  // Threads for the parallel phases (reading the accesses, resolving the
  // versions they name, anti-dependencies, edges in segments); 0: every core. The report does not depend on
  // it.
  unsigned threads = 0;
  // Strict serializability across hosts: the most two hosts' wall clocks
  // (CLOCK_REALTIME) may disagree, in ns. Files from one host share its
  // counter and compare exactly; across hosts real-time order is only
  // taken where a commit precedes a begin by more than this bound, and not
  // at all while it is 0 (unknown).
  uint64_t clock_skew_ns = 0;
  // Polled between phases, by every piece of a parallel phase (a 64th of
  // it) and every million edges a cycle search visits: once it returns
  // true, check() gives up with ECANCELED (rdtx-bench's SIGINT/SIGTERM).
  StopFn stop;
};

struct CheckStats {
  uint64_t committed = 0, aborted = 0;
  uint64_t accesses = 0, reads = 0, writes = 0;  // of committed attempts; a read-modify-write counts in both
  uint64_t keys = 0;  // keys whose initial version a committed access read or replaced
  std::array<uint64_t, 3> edges{};  // by EdgeKind
  uint64_t cyclic_components = 0;   // of the widest graph searched
  uint64_t largest_component = 0;
  uint64_t unrecorded_refs = 0;  // references to attempts a truncated worker did not record
  bool timestamps = false;       // every committed attempt has start and commit timestamps
  // Snapshot isolation decided on recorded snapshot vectors (NAM-DB's):
  // slots per vector, 0 if not; and how many snapshots did not hold the
  // snapshots of the writers they held, which the checker closed over them.
  uint32_t snapshot_slots = 0;
  uint64_t snapshots_widened = 0;
  bool real_time = false;        // real-time order checked (strict serializable)
  uint32_t clock_domains = 0;    // hosts (clocks) the history's real time comes from
  double seconds = 0;
};

struct CheckReport {
  Isolation isolation = Isolation::kSerializable;
  uint64_t clock_skew_ns = 0;  // CheckOptions::clock_skew_ns
  bool truncated = false;    // some worker's history is a prefix
  bool prefix_only = false;  // truncated, and checked as a prefix (allow_truncated)
  bool certified = false;
  std::array<uint64_t, kAnomalyKinds> counts{};
  std::vector<Finding> findings;  // by kind, at most max_findings of each
  CheckStats stats;

  uint64_t anomalies() const;
  // One line: "CERTIFIED serializable", "NOT CERTIFIED serializable: 2
  // G2-item, 1 lost update", or "NOT CERTIFIED serializable: history
  // truncated: cannot certify".
  std::string verdict() const;
};

// Checks `h` at options.isolation. Fails (EFBIG) only when the history is
// past History's limits, or (ECANCELED) when options.stop asked to give up.
Result<CheckReport> check(const History& h, const CheckOptions& options = {});

// The report as text: a summary, then the kept findings (at most
// max_findings of each kind), then the verdict.
std::string format_report(const CheckReport& r, size_t max_findings);

}  // namespace rdtx::history
