// CheckReport's text: the verdict line and the report a person reads.
#include <algorithm>
#include <cstdio>
#include <string>

#include "history/checker.hpp"

namespace rdtx::history {

namespace {
std::string u(uint64_t v) { return std::to_string(v); }
}  // namespace

std::string CheckReport::verdict() const {
  const std::string level = to_string(isolation);
  if (anomalies() > 0) {
    std::string s = "NOT CERTIFIED " + level + ":";
    const char* sep = " ";
    for (size_t k = 0; k < kAnomalyKinds; ++k)
      if (counts[k] > 0) {
        s += sep + u(counts[k]) + " " + to_string(static_cast<Anomaly>(k));
        sep = ", ";
      }
    if (truncated) s += "; history truncated";
    return s;
  }
  if (truncated && !prefix_only) return "NOT CERTIFIED " + level + ": history truncated: cannot certify";
  return "CERTIFIED " + level + (prefix_only ? " (the recorded prefix only: history truncated)" : "");
}

std::string format_report(const CheckReport& r, size_t max_findings) {
  const CheckStats& s = r.stats;
  std::string out;
  out += "transactions: " + u(s.committed) + " committed, " + u(s.aborted) + " aborted; accesses: " + u(s.accesses) +
         " (" + u(s.reads) + " reads, " + u(s.writes) + " writes); keys: " + u(s.keys) + "\n";
  out += "graph: " + u(s.edges[0]) + " ww, " + u(s.edges[1]) + " wr, " + u(s.edges[2]) + " rw edges; " +
         u(s.cyclic_components) + " cyclic components";
  if (s.cyclic_components > 0) out += " (largest: " + u(s.largest_component) + " transactions)";
  out += "\n";
  if (r.isolation == Isolation::kSnapshot && s.snapshot_slots != 0)
    out += "snapshot isolation: checked against the recorded snapshot vectors (" + u(s.snapshot_slots) +
           " slots; " +
           (s.snapshots_widened == 0 ? std::string("each holds the snapshots of the writers it holds")
                                     : u(s.snapshots_widened) + " closed over the snapshots of the writers they hold") +
           ")\n";
  else if (r.isolation == Isolation::kSnapshot)
    out += s.timestamps ? "snapshot isolation: checked against start and commit timestamps\n"
                        : "snapshot isolation: not every transaction has timestamps; G-SIb searched as cycles with "
                          "one anti-dependency, G-SIa not checked\n";
  if (s.real_time)
    out += "real time: checked (" +
           (s.clock_domains == 1 ? std::string("one clock")
                                 : u(s.clock_domains) + " hosts' clocks, compared " +
                                       std::string(r.clock_skew_ns > 0 ? "beyond the clock skew bound" : "within each host only")) +
           ")\n";
  if (s.unrecorded_refs > 0)
    out += "truncated: " + u(s.unrecorded_refs) + " references to versions of unrecorded transactions ignored\n";
  char rate[128];
  const double per_s = s.seconds > 0 ? static_cast<double>(s.committed + s.aborted) / s.seconds : 0;
  std::snprintf(rate, sizeof rate, "check: %.3f s (%.0f transactions/s)\n", s.seconds, per_s);
  out += rate;

  size_t shown[kAnomalyKinds] = {};
  for (const Finding& f : r.findings) {
    const size_t k = static_cast<size_t>(f.kind);
    if (shown[k] >= max_findings) continue;
    ++shown[k];
    out += "\n" + f.text + "\n";
  }
  for (size_t k = 0; k < kAnomalyKinds; ++k)
    if (r.counts[k] > shown[k])
      out += "\n(" + u(r.counts[k] - shown[k]) + " more " + to_string(static_cast<Anomaly>(k)) + " not shown)\n";
  out += "\n" + r.verdict() + "\n";
  return out;
}

}  // namespace rdtx::history
