#include "run/verdict.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "runtime/shutdown.hpp"
#include "txn/types.hpp"

namespace rdtx::run {

std::vector<Check> verdict(const RunResult& r, const VerdictOptions& o) {
  const bool interrupted = o.interrupted;
  std::vector<Check> c;
  // Cut short by a lost peer (process mode): the figures are this node's,
  // up to then; the cluster's checks could not be made.
  if (!r.cut_short.empty()) c.push_back({"cluster", "cluster", 0, false, r.cut_short});
  if (!r.cut_short.empty())
    c.push_back({"invariants", "invariants", 0, false, r.invariants.ok() ? "" : r.invariants.error().message, true});
  else if (!r.invariants.ok() && r.invariants.error().code == ECANCELED)
    c.push_back({"invariants", "invariants", 0, false, std::string("stopped by ") + runtime::shutdown_cause(), true});
  // A node removed during the run took the deltas of the transactions it
  // committed with it (run::exchange_results): a sum that does not match
  // the survivors' deltas proves nothing either way.
  else if (!r.invariants.ok() && r.invariants.error().code == ENODATA && !r.removed.empty())
    c.push_back({"invariants", "invariants", 0, false, r.invariants.error().message, true});
  else
    c.push_back({"invariants", "invariants", 0, r.invariants.ok(),
                 r.invariants.ok() ? r.invariants_note : r.invariants.error().message});
  c.push_back({"locks_left", "locks left", r.locks_left, r.locks_left == 0, ""});
  // A drain that gave up (a stalled peer, messages lost for longer than it
  // waits) leaves coroutines running, and usually locks held.
  c.push_back({"tasks_left", "tasks left running", r.tasks_left, r.tasks_left == 0 || interrupted,
               r.tasks_left == 0 ? "" : "coroutines still running when the drain gave up: the run did not end cleanly"});
  if (r.replicas > 1) {
    c.push_back({"replicas", "replicas equal", 0, r.replicas_equal.ok() && r.cut_short.empty(),
                 r.replicas_equal.ok() ? "" : r.replicas_equal.error().message});
    c.push_back({"log_errors", "log errors", r.total.log_errors, r.total.log_errors == 0, ""});
  }
  c.push_back({"rpc_malformed", "RPC malformed", r.rpc_malformed, r.rpc_malformed == 0, ""});
  // A call that timed out (a lost datagram, a stalled or slow peer) failed
  // its attempt, which was retried, or was re-sent (write-backs, releases):
  // nothing was lost unless a check above or below says so. Noted with the
  // timeout the endpoints settled on (rpc::EndpointConfig::timeout_ns:
  // adaptive, above a floor), not failed.
  auto ms = [](uint64_t ns) { return static_cast<double>(ns) / 1e6; };
  char timeouts_note[256] = "";
  if (r.rpc_timeouts != 0 || r.rpc_timeout_settled_ns != 0)
    std::snprintf(timeouts_note, sizeof timeouts_note,
                  "%s%stimeout settled at %.1f ms (%.1f ms at most after doublings), longest reply %.1f ms",
                  r.rpc_timeouts == 0 ? "" : "retried, or their attempts aborted: the other checks decide;",
                  r.rpc_timeouts == 0 ? "" : " ",
                  ms(r.rpc_timeout_settled_ns), ms(r.rpc_timeout_max_ns), ms(r.rpc_longest_reply_ns));
  c.push_back({"rpc_timeouts", "RPC timeouts", r.rpc_timeouts, o.timeouts_allowed || r.rpc_timeouts == 0,
               timeouts_note});
  // A passive request (a passive COMMIT, say) tells its caller nothing:
  // an ack that timed out or reported an error is a write that may be lost.
  c.push_back({"rpc_passive_timeouts", "passive timeouts", r.rpc_passive_timeouts, r.rpc_passive_timeouts == 0,
               r.rpc_passive_timeouts == 0 ? "" : "passive requests whose ack never came (writes may be lost)"});
  c.push_back({"rpc_passive_failures", "passive failures", r.rpc_passive_failures, r.rpc_passive_failures == 0,
               r.rpc_passive_failures == 0 ? "" : "passive requests acked with an error (writes may be lost)"});
  c.push_back({"commit_errors", "commit errors", r.total.commit_errors, r.total.commit_errors == 0, ""});
  c.push_back({"cancel_failures", "cancels unanswered", r.total.cancel_failures, r.total.cancel_failures == 0, ""});
  c.push_back({"insert_errors", "insert errors", r.total.insert_errors, r.total.insert_errors == 0,
               r.total.insert_errors == 0 ? "" : "rows the transactions could not insert (the log names the table)"});
  // The RNIC model serves a request it cannot place in its calendars at
  // once (doc/drivers.md "RNIC model"). Queued past them, the figures are
  // not the model's; stamped before them, in virtual time it takes a
  // backlog as long, and in real time a poster that lost its CPU that long
  // (an overloaded machine: noted, not failed).
  if (r.nic_model) {
    const uint64_t bad = r.nic_overflow + (r.virtual_time.on ? r.nic_stale : 0);
    std::string why;
    if (bad != 0)
      why = "requests the RNIC model served without accounting for them (queued past its calendars, or in virtual "
            "time stamped before them): the figures are not the model's";
    else if (r.nic_stale != 0)
      why = std::to_string(r.nic_stale) +
            " request(s) stamped before the calendars: their posters lost the CPU for longer than the calendars "
            "hold (an overloaded machine)";
    c.push_back({"nic_unaccounted", "NIC model unaccounted", bad, bad == 0, why});
  }
  const uint64_t net = r.total.aborts[static_cast<int>(txn::AbortReason::kNetwork)];
  // An attempt that a timed-out call aborted is noted (above); one aborted
  // for another failure of a verb or a call fails the run: more network
  // aborts than timed-out calls means some were not timeouts.
  const bool net_ok = o.timeouts_allowed ? net <= r.rpc_timeouts : net == 0;
  c.push_back({"network_aborts", "network aborts", net, net_ok,
               net == 0 ? ""
               : net_ok ? "attempts aborted by timed-out calls, retried"
                        : "attempts aborted by failed verbs or calls other than timeouts"});
  // A run that committed nothing measured nothing (a livelock, say), unless
  // a signal cut it short, or the result is a memory node's (split layout,
  // process mode: it runs no coordinator).
  const bool commits_ok = r.total.commits > 0 || interrupted || !r.coordinates;
  c.push_back({"commits", "commits", r.total.commits, commits_ok,
               commits_ok ? "" : "no transaction committed in the measured window"});
  // Figures measured over a window of a few transaction latencies are not
  // a steady state: a CALVIN epoch of RCC's YCSB setting takes ~30 ms of
  // virtual time, and a 50 ms window held part of two of them (the figure
  // moved by 9% with a 0.5 s window). The window must hold ten median
  // latencies, the warm-up two.
  if (o.steady_state && !interrupted && r.total.commits > 0 && r.tsc_hz != 0) {
    const double p50 = static_cast<double>(r.total.latency_tsc.percentile(0.5)) / static_cast<double>(r.tsc_hz);
    const bool window_ok = r.seconds >= 10 * p50, warmup_ok = o.warmup_s <= 0 || o.warmup_s >= 2 * p50;
    char why[256] = "";
    if (!window_ok || !warmup_ok)
      std::snprintf(why, sizeof why,
                    "the median latency (%.3g ms) is %s: not a steady state; lengthen %s", p50 * 1e3,
                    !window_ok ? "more than a tenth of the measured window" : "more than half the warm-up",
                    !window_ok ? "run.duration_s" : "run.warmup_s");
    c.push_back({"steady_state", "window / median latency", static_cast<uint64_t>(r.seconds / std::max(p50, 1e-12)),
                 window_ok && warmup_ok, why});
  }
  if (const HistoryVerdict* h = o.history) {
    c.push_back({"history", "history", h->anomalies, h->certified, h->message, h->stopped});
    // Every commit the run counted is in the history (none dropped).
    if (h->committed != ~uint64_t{0} && h->certified)
      c.push_back({"history_complete", "history complete", h->committed, h->committed >= r.total.commits,
                   h->committed >= r.total.commits ? "" : "the history holds fewer commits than the run counted"});
  }
  // The proof that every suite decides by this list: with the variable set,
  // one more check, which always fails, as a newly added one would on a
  // broken run; test/run/verdict_everywhere.py runs a case of every suite
  // with it and expects each to fail naming it.
  if (std::getenv("RDTX_TEST_EXTRA_CHECK") != nullptr)
    c.push_back({"test_extra_check", "test extra check", 0, false,
                 "RDTX_TEST_EXTRA_CHECK is set: a check added to run::verdict() is checked here"});
  return c;
}

bool passed(const std::vector<Check>& checks) {
  for (const Check& k : checks)
    if (!k.ok) return false;
  return true;
}

std::string failures(const std::vector<Check>& checks) {
  std::string s;
  for (const Check& k : checks) {
    if (k.ok) continue;
    s += std::string(k.label) + ": " + std::to_string(k.value);
    if (!k.message.empty()) s += " (" + k.message + ")";
    s += "\n";
  }
  return s;
}


}  // namespace rdtx::run
