// CALVIN's executor, Figure 14 (calvin.cpp describes the protocol): per
// transaction of the planned epoch, once its locks here are granted, its
// local records read (read_local()) and forwarded to the active members
// (forward(); the values RPC handler, handle_forward(), takes them in);
// the values of the other nodes awaited (values_missing(), wait_values());
// the workload's execute() run on them (run(), through the fetch and
// commit modules) and the locks released (release_locks()).
// execute_epoch() runs the epoch's transactions each as soon as it can;
// execute() one after the other (the broken variant's).
#include <algorithm>
#include <bit>
#include <cstring>

#include "cc/calvin/calvin_impl.hpp"
#include "env/tsc.hpp"

namespace rdtx::cc::calvin::detail {

namespace {

// The writer id forwarded for a declared key its owner does not hold.
constexpr uint64_t kMissing = UINT64_MAX;

}  // namespace

// F14 a3 (RPC): a chunk of forwarded values into the CFB slot, at its
// offset, with the ready word and the checksum of the whole (ForwardMsg).
// A chunk of an epoch older than the slot's is stale and dropped; one of
// the slot's epoch is another chunk (or a resend of one: the same bytes).
void Calvin::handle_forward(rpc::Request& r) {
  const std::span<const std::byte> p = r.payload();
  ForwardMsg m;
  if (p.size() < sizeof m) return;
  std::memcpy(&m, p.data(), sizeof m);
  const uint64_t len = m.ready & 0xffffffffu;
  const uint64_t chunk = p.size() - sizeof m;
  if (m.co >= g_.coroutines || m.src >= nodes_ || m.k >= nodes_ * g_.epoch_size || len > g_.slot_payload ||
      m.offset > len || chunk > len - m.offset || (chunk == 0 && len != 0) || (m.ready >> 32) == 0)
    return;
  std::byte* slot = at(g_.cfb(m.co, m.k, m.src));
  const uint64_t held = word_at(slot).load(std::memory_order_acquire);
  if ((held >> 32) > (m.ready >> 32)) return;
  std::memcpy(slot + 16 + m.offset, p.data() + sizeof m, chunk);
  std::memcpy(slot + 8, &m.checksum, 8);
  word_at(slot).store(m.ready, std::memory_order_release);
}

uint32_t Calvin::forward_offset(SetView d, uint32_t j) const {
  const Database& db = e_.db();
  const uint32_t owner = db.owner(d.e[j].table, d.e[j].key);
  uint32_t off = 0;
  for (uint32_t i = 0; i < j; ++i)
    if (db.owner(d.e[i].table, d.e[i].key) == owner) off += 8 + pad8(db.layout(d.e[i].table).record_bytes);
  return off;
}

uint32_t Calvin::forward_len(SetView d, uint32_t node) const {
  const Database& db = e_.db();
  uint32_t len = 0;
  for (uint32_t i = 0; i < d.n; ++i)
    if (db.owner(d.e[i].table, d.e[i].key) == node) len += 8 + pad8(db.layout(d.e[i].table).record_bytes);
  return len;
}

// F14 a2/b2, forwarding: one-sided, the two WRITEs of F14 b3 (values, then
// the ready word); RPC, calls whose handler does F14 a3. The values in the staging
// area (after a ForwardMsg header) to every node of `targets`.
Task<bool> Calvin::forward(Coordinator& c, uint32_t k, uint32_t len, uint64_t targets) {
  const uint32_t co = c.index();
  const uint64_t epoch = co_[co].epoch;
  std::byte* st = at(g_.staging(co));
  ForwardMsg m{co, k, me_, 0, (epoch << 32) | len, 0};
  m.checksum = checksum_words(checksum_start(m.ready), st + sizeof m, 0, len);
  std::memcpy(st, &m, sizeof m);
  const uint64_t since = env::tsc();
  if (o_.stage(Stage::kFetch) != Primitive::kRpc) {
    for (;;) {
      OneSidedBatch& b = c.onesided();
      for (uint32_t d = 0; d < nodes_; ++d) {
        if (!(targets >> d & 1)) continue;
        const RegionDescriptor& rd = e_.db().region(d, e_.ctx().index);
        const uint64_t remote = rd.addr + g_.cfb(co, k, me_);
        b.write({d, remote + 8, rd.rkey}, st + 24, 8 + len, 0, lkey_);  // checksum, then the values
        b.write({d, remote, rd.rkey}, st + 16, 8, 0, lkey_);  // the ready word
      }
      if (co_await b.execute()) co_return true;
      if (stalled(c, since, "the completion of a values WRITE", me_)) co_return false;
      co_await runtime::poll_wait();
    }
  }
  // RPC: a call per node and chunk (F14 a3 in the handler).
  co_return co_await call_in_chunks(c, forward_handler_, st, m, len, forward_chunk_, targets,
                                    co_[co].forward_replies.data(), since, "an answer to forwarded values");
}

// F14 b3 (and the pick-up of F14 a3): the nodes among `missing` whose
// values of transaction k are not (all, checksum matching) in its CFB slots yet.
// Callers keep what it returns (Plan::waiting), so a node's values are
// checksummed once, not on every poll while another node's are awaited.
uint64_t Calvin::values_missing(Coordinator& c, uint32_t k, uint64_t missing) {
  const CoState& cs = co_[c.index()];
  for (uint64_t m = missing; m != 0; m &= m - 1) {
    const uint32_t src = static_cast<uint32_t>(std::countr_zero(m));
    std::byte* slot = at(g_.cfb(c.index(), k, src));
    const uint64_t word = word_at(slot).load(std::memory_order_acquire);
    if (word >> 32 != (cs.epoch & 0xffffffffu)) continue;  // not this epoch's yet: no need to size it
    const uint64_t want = (cs.epoch << 32) | forward_len(cs.set(k), src);
    if (word != want) continue;
    uint64_t sum;
    std::memcpy(&sum, slot + 8, 8);
    if (checksum_words(checksum_start(want), slot + 16, 0, static_cast<uint32_t>(want & 0xffffffffu)) == sum)
      missing &= ~(uint64_t{1} << src);
  }
  return missing;
}

// Polls the CFB slots of transaction k until the values of every other node
// holding its records are there.
Task<bool> Calvin::wait_values(Coordinator& c, uint32_t k) {
  const uint64_t since = env::tsc();
  uint64_t& missing = co_[c.index()].plans[k].waiting;
  while ((missing = values_missing(c, k, missing)) != 0) {
    if (stalled(c, since, "forwarded values", static_cast<uint32_t>(std::countr_zero(missing)))) co_return false;
    co_await runtime::poll_wait();
  }
  co_return true;
}

// Whether every lock manager shard holding transaction k's records here has
// granted them.
bool Calvin::granted_all(Coordinator& c, uint32_t k) const {
  const CoState& cs = co_[c.index()];
  for (uint64_t m = cs.plans[k].shards; m != 0; m &= m - 1) {
    const uint32_t s = static_cast<uint32_t>(std::countr_zero(m));
    if (!lms_->shard[s]->granted(group(c), cs.epoch, cs.requests[size_t{k} * shards_ + s])) return false;
  }
  return true;
}

// Polls transaction k's grants by the node's lock manager shards, yielding.
Task<bool> Calvin::wait_grant(Coordinator& c, uint32_t k) {
  const uint64_t since = env::tsc();
  while (!granted_all(c, k)) {
    if (stalled(c, since, "a lock grant (the lock manager)", me_)) co_return false;
    co_await runtime::poll_wait();
  }
  co_return true;
}

// Local reads of transaction k (under its locks: stable), with their writer
// ids, into the staging area after the RPC header: what every active
// counterpart needs. Returns their length.
uint32_t Calvin::read_local(Coordinator& c, uint32_t k) {
  const CoState& cs = co_[c.index()];
  const SetView d = cs.set(k);
  std::byte* out = at(g_.staging(c.index())) + sizeof(ForwardMsg);
  const std::byte* const* tuples = cs.tuples_of(k);
  const Database& db = e_.db();
  uint32_t len = 0;
  for (uint32_t j = 0; j < d.n; ++j) {
    if (db.owner(d.e[j].table, d.e[j].key) != me_) continue;
    const store::TupleLayout& l = db.layout(d.e[j].table);
    const uint32_t rb = pad8(l.record_bytes);
    if (tuples[j] == nullptr) {
      set_copy_word(out + len, 0, kMissing);
      std::memset(out + len + 8, 0, rb);
    } else {
      set_copy_word(out + len, 0, db.recording() ? copy_word(tuples[j], db.history_word_offset()) : 0);
      std::memset(out + len + 8, 0, rb);
      std::memcpy(out + len + 8, tuples[j] + l.record_offset(), l.record_bytes);
    }
    len += 8 + rb;
  }
  return len;
}

// F14 a4/b4 for transaction k, whose values are all here: the workload's
// execute() on them, the local writes installed (commit module), the locks
// released; the reporter counts the outcome. `t` is the transaction's
// attempt.
Task<bool> Calvin::run(Coordinator& c, uint32_t k, Txn& t) {
  CoState& cs = co_[c.index()];
  const Plan& p = cs.plans[k];
  cs.current = k;
  int64_t delta = 0;
  const bool ok = co_await e_.workload().execute(t, p.cr->in, &delta);
  release_locks(c, k);
  if (failed_) co_return false;
  if (!ok && t.abort_reason() != AbortReason::kUser && t.abort_reason() != AbortReason::kNotFound) {
    fail(c, "transaction %llx aborted (reason %d): a CALVIN transaction never aborts for a conflict",
         static_cast<unsigned long long>(t.id()), static_cast<int>(t.abort_reason()));
    co_return false;
  }
  // Latency from its generation at home; a reporter on another node (calvin.active = writers) takes the
  // start of its own sequencing of the epoch, which the members begin together (lockstep).
  // Its history's begin is its generation, known at home only.
  if (p.reporter == me_) {
    const bool home = p.cr->in.home_node == me_;
    // Its place in the order every lock manager grants in: the history's
    // timestamp order (epochs past 2^32 - 1 are not told apart).
    t.set_commit_order(static_cast<uint32_t>(std::min<uint64_t>(cs.epoch, UINT32_MAX)), p.cr->ts);
    c.account(p.cr->in, ok, ok ? delta : 0, home ? cs.gen_tsc[p.index] : cs.epoch_tsc, true, home);
  }
  co_return true;
}

// Charges the epoch's sequencing to the first transaction this member
// reports (its attempt just begun).
void Calvin::charge_sequence(Coordinator& c) {
  CoState& cs = co_[c.index()];
  if (!cs.sequence_pending) return;
  c.add_counts(cs.sequence_net);
  c.add_phase_tsc(Phase::kSequence, cs.sequence_tsc);
  cs.sequence_pending = false;
}

// Figure 14 for the epoch's n transactions on this member, each as soon as
// it can go rather than one after the other. A transaction whose locks here
// are granted is read and forwarded at once (a member that is not active
// then releases); one whose values are all here is executed at once. So a
// transaction early in the order whose locks wait for another group's
// earlier transaction holds up none of this group's later ones whose locks
// are free: with one order for every group (lock_manager.hpp) a group that
// ran its epoch strictly in order left the locks it was granted for later
// transactions held while it waited, and the groups of a node ran almost
// one after the other (RCC's Figure 15 settings: 2.7 M txn/s at 20 a batch,
// 0.85 M at 64). Deadlock freedom is unchanged: every wait is still for an
// earlier transaction's locks or for this transaction's values, and every
// member keeps visiting every unfinished transaction of the epoch.
Task<bool> Calvin::execute_epoch(Coordinator& c, uint32_t n) {
  CoState& cs = co_[c.index()];
  enum : uint8_t { kNew, kValues, kDone };
  for (uint32_t k = 0; k < n; ++k) cs.step[k] = kNew;
  uint32_t first = 0;  // every transaction before it is done
  uint64_t since = env::tsc();  // the last progress
  uint64_t seen_grants = 0;
  bool first_visit = true;
  for (;;) {
    bool progress = false;
    // The grants here are looked at only when the manager made one to this
    // group since the last visit (read before the tags: lock_manager.hpp's
    // GrantBoard), not per transaction on every poll.
    const uint64_t grants = lms_->board.grants(group(c));
    const bool new_grants = first_visit || grants != seen_grants;
    seen_grants = grants;
    first_visit = false;
    for (uint32_t k = first; k < n; ++k) {
      uint8_t& step = cs.step[k];
      // Done; or waiting for a grant (every transaction that needs none
      // left kNew on the first visit) with no grant to this group since.
      if (step == kDone || (step == kNew && !new_grants)) continue;
      Plan& p = cs.plans[k];
      const bool reporter = p.reporter == me_;
      const bool active = (p.active >> me_ & 1) != 0;
      if (step == kNew) {
        if (p.nlocal == 0 && !active) {  // nothing of it here
          step = kDone;
          continue;
        }
        // F14 a1/b1: the locks here granted, in (epoch, timestamp) order.
        if (!granted_all(c, k)) continue;
        cs.ready_tsc[k] = env::tsc();
        if (p.nlocal > 0) {
          // Counted on an attempt of its own, carried over to the one that
          // executes it (the reporter's counts are those reported).
          c.begin_attempt(p.cr->id, p.cr->ts);
          const uint32_t len = read_local(c, k);
          const uint64_t targets = p.active & ~(uint64_t{1} << me_);
          if (targets != 0 && !co_await forward(c, k, len, targets)) co_return false;
          if (reporter) cs.forward_net[k] = c.attempt_counts();
          if (!active) {
            release_locks(c, k);
            step = kDone;
            progress = true;
            continue;
          }
        } else if (reporter) {
          cs.forward_net[k] = {};
        }
        step = kValues;
        progress = true;
      }
      // F14 b3: the values of every other node holding its records.
      if ((p.waiting = values_missing(c, k, p.waiting)) != 0) continue;
      Txn& t = c.begin_attempt(p.cr->id, p.cr->ts);
      if (reporter) {
        charge_sequence(c);
        c.add_counts(cs.forward_net[k]);
      }
      // Schedule: from the epoch's requests published here until the
      // lock manager shards holding its records merged the epoch (every
      // group of the node published it). Lock: from then to its grant
      // here (the earlier transactions of the grant order holding or
      // wanting its records). Both 0 without local records. Fetch: from
      // its grant here (or its first visit without local records) to its
      // values all here, which includes the other nodes' waits.
      if (c.phase_clock() != 0) {
        if (p.nlocal > 0) {
          // Another worker's clock in virtual time: kept within the wait.
          uint64_t merged = cs.publish_tsc;
          for (uint64_t m = p.shards; m != 0; m &= m - 1)
            merged = std::max(merged, lms_->shard[static_cast<uint32_t>(std::countr_zero(m))]->merged_tsc(cs.epoch));
          merged = std::min(merged, cs.ready_tsc[k]);
          c.add_phase_tsc(Phase::kSchedule, merged - cs.publish_tsc);
          c.add_phase_tsc(Phase::kLock, cs.ready_tsc[k] - merged);
        }
        c.add_phase_tsc(Phase::kFetch, env::tsc() - cs.ready_tsc[k]);
      }
      if (!co_await run(c, k, t)) co_return false;
      step = kDone;
      progress = true;
      // One execution a resume: the epoch's executions here (22 of 60 us on
      // RCC's YCSB setting when nothing waits) would otherwise run back to
      // back in one pass, holding the worker's pollers (its RPC handlers)
      // and, in virtual time, its clock that far ahead of the others'
      // (runtime/worker.cpp, kMaxVirtualPassNs).
      runtime::note_work();
      co_await runtime::yield();
    }
    while (first < n && cs.step[first] == kDone) ++first;
    if (first == n) co_return true;
    if (progress) {
      since = env::tsc();
      runtime::note_work();  // resumed by poll_wait(), which counts none
    } else if (cs.step[first] == kNew ? stalled(c, since, "a lock grant (the lock manager)", me_)
                                      : stalled(c, since, "forwarded values",
                                                static_cast<uint32_t>(std::countr_zero(cs.plans[first].waiting)))) {
      co_return false;
    }
    co_await runtime::poll_wait();
  }
}

// Clears transaction k's lock words, in every shard holding them.
void Calvin::release_locks(Coordinator& c, uint32_t k) {
  const CoState& cs = co_[c.index()];
  for (uint64_t m = cs.plans[k].shards; m != 0; m &= m - 1) {
    const uint32_t s = static_cast<uint32_t>(std::countr_zero(m));
    lms_->shard[s]->release(group(c), cs.epoch, cs.requests[size_t{k} * shards_ + s]);
  }
}

// Figure 14 for transaction k of the epoch on this member, one after the
// other: the broken variant's (tests only), which reads its records before
// their grant and then waits for it.
Task<bool> Calvin::execute(Coordinator& c, uint32_t k) {
  CoState& cs = co_[c.index()];
  const Plan& p = cs.plans[k];
  const bool active = (p.active >> me_ & 1) != 0;
  if (p.nlocal == 0 && !active) co_return true;  // nothing of it here
  Txn& t = c.begin_attempt(p.cr->id, p.cr->ts);
  if (p.reporter == me_) charge_sequence(c);
  const uint64_t t0 = c.phase_clock();
  if (p.nlocal > 0) {
    const uint32_t len = read_local(c, k);
    const uint64_t targets = p.active & ~(uint64_t{1} << me_);
    if (targets != 0 && !co_await forward(c, k, len, targets)) co_return false;
    if (!co_await wait_grant(c, k)) co_return false;
    if (!active) {
      release_locks(c, k);
      c.add_phase(Phase::kFetch, t0);
      co_return true;
    }
  }
  if (!co_await wait_values(c, k)) co_return false;
  c.add_phase(Phase::kFetch, t0);
  co_return co_await run(c, k, t);
}

// The fetch module: each access execute() declares is served from this
// node's locked record or from the values its owner forwarded.
Task<bool> Calvin::fetch(Calvin& p, Coordinator& c, Txn& t, uint32_t from) {
  CoState& cs = p.co_[c.index()];
  const uint32_t k = cs.current;
  const SetView d = cs.set(k);
  const Database& db = p.e_.db();
  std::byte* const* tuples = cs.tuples_of(k);
  for (uint32_t i = from; i < t.size(); ++i) {
    Access& a = t.access(i);
    uint32_t j = 0;
    while (j < d.n && !(d.e[j].table == a.table && d.e[j].key == a.key && d.e[j].mode == a.mode)) ++j;
    if (j == d.n) {
      p.fail(c, "workload '%s': execute() of transaction type %u accesses table %u key %llu (%s), which "
             "declare() did not declare",
             p.e_.workload().name(), cs.plans[k].cr->in.type, a.table, static_cast<unsigned long long>(a.key),
             a.mode == AccessMode::kWrite ? "write" : "read");
      t.fail(AbortReason::kUser);
      co_return false;
    }
    t.state<uint64_t>(i) = j;
    const store::TupleLayout& l = db.layout(a.table);
    uint64_t writer;
    if (a.node == p.me_ && p.broken_) {
      // The broken variant: the value read before the grant (staging).
      const std::byte* v = p.at(p.g_.staging(c.index())) + sizeof(ForwardMsg) + p.forward_offset(d, j);
      writer = copy_word(v, 0);
      if (writer == kMissing) {
        t.fail(AbortReason::kNotFound);
        co_return false;
      }
      std::memcpy(a.copy + l.record_offset(), v + 8, l.record_bytes);
    } else if (a.node == p.me_) {
      if (tuples[j] == nullptr) {
        t.fail(AbortReason::kNotFound);
        co_return false;
      }
      writer = db.recording() ? copy_word(tuples[j], db.history_word_offset()) : 0;
      std::memcpy(a.copy + l.record_offset(), tuples[j] + l.record_offset(), l.record_bytes);
    } else {
      const std::byte* v = p.at(p.g_.cfb(c.index(), k, a.node)) + 16 + p.forward_offset(d, j);
      writer = copy_word(v, 0);
      if (writer == kMissing) {
        t.fail(AbortReason::kNotFound);
        co_return false;
      }
      std::memcpy(a.copy + l.record_offset(), v + 8, l.record_bytes);
    }
    // Read under the lock: the version read is the one a write replaces.
    a.writer = a.replaced = writer;
    a.located = a.fetched = true;
  }
  co_return true;
}

// The commit module (F14 a4/b4): only this node's writes, installed in place under the
// lock the lock manager granted (history word = the writer's id).
Task<bool> Calvin::commit(Calvin& p, Coordinator& c, Txn& t, uint32_t) {
  CoState& cs = p.co_[c.index()];
  std::byte* const* tuples = cs.tuples_of(cs.current);
  const Database& db = p.e_.db();
  // Inserted rows went in before this stage, by the reporter alone
  // (inserts_here: the pipeline's apply_inserts). Erases and relocations
  // change rows other transactions may have declared: not supported, a
  // failed run (no workload that CALVIN accepts makes them).
  if (t.row_changes() != 0 && p.e_.stats().insert_errors++ == 0)
    RDTX_LOG(calvin_log(), Error, "transaction %llu erases or relocates rows, which CALVIN does not do",
             static_cast<unsigned long long>(t.id()));
  for (uint32_t i = 0; i < t.size(); ++i) {
    const Access& a = t.access(i);
    if (a.mode != AccessMode::kWrite || a.node != p.me_) continue;
    std::byte* tuple = tuples[t.state<uint64_t>(i)];
    const store::TupleLayout& l = db.layout(a.table);
    std::memcpy(tuple + l.record_offset(), a.copy + l.record_offset(), l.record_bytes);
    if (db.recording()) set_copy_word(tuple, db.history_word_offset(), t.id());
  }
  co_return true;
}

// Nothing to release per attempt: the locks are the lock manager's, freed
// by the member once the transaction is done (execute()).
Task<bool> Calvin::release(Calvin&, Coordinator&, Txn&, uint32_t) { co_return true; }

}  // namespace rdtx::cc::calvin::detail
