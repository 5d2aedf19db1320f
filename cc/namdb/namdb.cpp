// NAM-DB's snapshot isolation (papers/004_*.txt, sections 3-5), one-sided
// verbs only, composed from the stage toolkit and the protocol's own verbs:
//
//   begin     (fetch, once per attempt) the read timestamp: one READ of the
//             timestamp vector Tr on the oracle node (4.1)
//   fetch     one READ of each tuple's current version (metadata, header,
//             record: read_tuples with fetch_record_slots = 1); a version
//             (i, t) is visible iff t <= Tr[i]. A read whose current version
//             is not visible READs the old-version headers and counter, then
//             the data of the newest visible one (5.1); if it left the
//             buffer, the record's chain in the overflow region. A write
//             needs the current version visible and unlocked (else it would
//             fail the commit's CAS: it aborts at once)
//   lock      commit step 1, for each written record (4.1 Listing 2, 5.1):
//               1 CAS the header (expected: the version read, unlocked;
//                 new: the same, locked) and READ the counter and the
//                 headers of the old-version buffer; any CAS failure aborts
//                 (first committer wins), so does a buffer slot the version
//                 mover has not moved yet
//             (the engine puts inserted rows in here: each starts as a
//             version (i, t + 1) of this commit, Namdb::insert_word)
//   commit    steps 2-4:
//               2 WRITE the current version into the buffer slot of the
//                 next-write counter (data, then its header), and set the
//                 tuple's dirty byte for the version mover
//               3 WRITE the new version in place: record, checksum and
//                 counter + 1, then the header (i, t + 1) unlocked (an
//                 erase: the same version with the deleted bit)
//               4 WRITE Tr[i] = t + 1 (basic vector), or advance the compute
//                 node's slot (compressed vector)
//             each step waits for the last: a reader that sees the new
//             header finds the old version in the buffer, and a snapshot
//             that shows t + 1 finds every version of it installed
//   release   WRITE the header read back (unlocking) on each locked record
//
// Per node (a region per node: ProtocolDef::region_per_node): the vector
// (read on the oracle node), each coordinator's snapshot and overflow-read
// buffers, and the overflow region: a ring of entries the version mover
// (worker 0's service) appends the buffer's oldest versions to, chained per
// record newest first; its garbage collection marks entries older than the
// maximal transaction time deleted and lets the ring reuse them, and it
// removes a row whose current version is an erase once that time passed.
//
// Tuple metadata (kMetaBytes):
//   word 0   header: thread i (29 bits), commit timestamp t (32 bits),
//            moved, deleted, locked bits (5.1)
//   word 1   checksum of (header version, counter, writer id, record)
//   word 2   next-write counter: versions ever copied to the buffer
//   word 3   the record's newest overflow entry (its position + 1; 0: none)
//   words 4.. the old-version header buffer: kBufferSlots entries of
//            {header, copy number, checksum of (header, copy number, writer
//            id, data)}
//   [recording: one writer-id word per record slot]
//   key, state, the current record, then the buffer's data slots (record
//   slots 1..kBufferSlots)
#include "cc/namdb/namdb.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <utility>
#include <vector>

#include "cc/namdb/layout.hpp"
#include "cc/namdb/version_mover.hpp"
#include "env/tsc.hpp"
#include "store/tuple.hpp"
#include "txn/coordinator.hpp"
#include "txn/service.hpp"
#include "txn/stages/copy_check.hpp"
#include "txn/stages/toolkit.hpp"

namespace rdtx::cc::namdb {

using namespace rdtx::txn;
using runtime::Task;

namespace {

// The protocol's abort reasons, in the order of kDef.abort_reasons.
const AbortReason kWriteConflict = protocol_reason(0);
const AbortReason kLockedReason = protocol_reason(1);
const AbortReason kBufferFull = protocol_reason(2);
const AbortReason kVersionGone = protocol_reason(3);
const AbortReason kUnsettled = protocol_reason(4);

// A new tuple's metadata. Its header is zero, version (0, 0): a loaded
// record, visible to every snapshot; or, for a row a transaction inserts,
// the inserter's commit version (the engine writes Namdb::insert_word
// first): invisible until that commit is, with no older version.
void init_tuple(std::byte* t, const store::TupleLayout& l) {
  auto* w = reinterpret_cast<uint64_t*>(t);
  auto put = [w](uint32_t off, uint64_t v) { store::store_word(w + off / 8, v, std::memory_order_relaxed); };
  const uint64_t hdr = store::load_word(w + kHdrOff / 8, std::memory_order_relaxed);
  put(kCountOff, 0);
  put(kOverflowOff, 0);
  for (uint32_t s = 0; s < kBufferSlots; ++s) {
    put(entry_off(s), kEmptyEntry);
    put(entry_off(s) + 8, 0);
    put(entry_off(s) + 16, 0);
  }
  put(kSumOff, current_sum(t, l, hdr, 0));
}

bool lock_held(const std::byte* meta) {
  return (store::load_word(reinterpret_cast<const uint64_t*>(meta), std::memory_order_relaxed) & kLocked) != 0;
}

uint32_t max_record_of(const Database& db) {
  uint32_t m = 0;
  for (TableId t = 0; t < db.tables(); ++t)
    if (db.has_table(t)) m = std::max(m, db.layout(t).record_bytes);
  return m;
}

Result<uint64_t> region_bytes_of(const RegionQuery& q) {
  const Settings s = settings_of(*q.options);
  if (s.oracle_node >= q.nodes)
    return make_error(EINVAL, "namdb.oracle_node = %u, but the cluster has %u nodes", s.oracle_node, q.nodes);
  if (!s.compressed && uint64_t{q.nodes} * q.workers_per_node * q.coroutines > kThreadMask)
    return make_error(EINVAL, "namdb: %u x %u x %u coordinators do not fit the header's 29-bit thread id", q.nodes,
                      q.workers_per_node, q.coroutines);
  return Geometry::make(q.nodes, q.workers_per_node, q.coroutines, q.max_record_bytes,
                        dirty_of(q.tables, q.tuples_per_node), s)
      .total;
}

void add_schema(config::Schema& s) {
  s.add_enum("namdb.oracle", "vector", {"vector", "compressed"},
             "NAM-DB: the timestamp vector, one slot per coordinator (vector) or per compute node (compressed: "
             "advanced with FAA)");
  s.add_int("namdb.oracle_node", 0, 0, 63, "NAM-DB: the node whose memory holds the timestamp vector");
  s.add_int("namdb.overflow_entries", 16384, 16, int64_t{1} << 24,
            "NAM-DB: entries of each node's overflow region (old versions the version mover moved)");
  s.add_int("namdb.max_txn_us", 10000, 1, 60'000'000,
            "NAM-DB: the maximal transaction time E: garbage collection frees overflow entries older than it, "
            "and removes an erased row that long after its erase");
}

// --- the compressed vector's per-node clock ---------------------------------------
// The commit timestamps of a compute node's coordinators come from one local
// counter (the paper's "local compare-and-swap"); the node's slot of Tr
// advances only over timestamps whose versions are all installed (a
// timestamp published early would make a snapshot miss a version installed
// later), by FAA of the number of timestamps passed: FAAs commute, so the
// slot never shows a timestamp beyond what is installed, whatever order
// they land in.
struct NodeClock {
  static constexpr uint64_t kRing = 4096;
  std::atomic<uint64_t> next{0};
  std::atomic<uint64_t> published{0};
  std::atomic<uint64_t> done[kRing] = {};
  uint64_t take() { return next.fetch_add(1, std::memory_order_relaxed) + 1; }
  // Marks `ts` installed (or given up); returns how far this caller moved
  // the published mark (the FAA it owes the remote slot).
  uint64_t finish(uint64_t ts) {
    done[ts % kRing].store(ts, std::memory_order_release);
    uint64_t moved = 0;
    for (;;) {
      uint64_t p = published.load(std::memory_order_acquire);
      if (done[(p + 1) % kRing].load(std::memory_order_acquire) != p + 1) return moved;
      if (published.compare_exchange_weak(p, p + 1, std::memory_order_acq_rel)) ++moved;
    }
  }
};

// --- the protocol on one worker ---------------------------------------------------
struct AccessState {
  uint64_t hdr;      // the version read (unlocked header)
  uint64_t count;    // the next-write counter seen with the current version
  uint64_t state;    // the tuple's state word (incarnation) the fetch saw
  uint8_t need_old;  // reads: the current version is not visible
};

struct Namdb final : public Protocol {
  Namdb(WorkerEngine& e, const Settings& s, const Geometry& g, bool correct)
      : e(e),
        s(s),
        g(g),
        correct(correct),
        snap_ok(e.options().coroutines, 0),
        last(e.options().coroutines, 0),
        taken(e.options().coroutines, 0) {}
  void begin(Coordinator& c, Txn&) override { snap_ok[c.index()] = 0; }  // a new snapshot per attempt
  // An inserted row starts as a version of the attempt's commit: its
  // header names the commit timestamp (taken now, compressed).
  bool insert_word(Coordinator& c, Txn&, store::Table::MetaWord* w) override {
    *w = {kHdrOff, make_header(slot_of(c), commit_ts(c))};
    return true;
  }

  WorkerEngine& e;
  Settings s;
  Geometry g;
  const bool correct;  // false only in the broken variant
  std::vector<uint8_t> snap_ok;
  std::vector<uint64_t> last;                      // basic vector: each coordinator's last commit timestamp
  std::vector<uint64_t> taken;                     // compressed: the attempt's commit timestamp, once taken (0: none)
  NodeClock* clock = nullptr;                      // compressed: the node's
  std::vector<uint64_t> dirty_prefix, dirty_span;  // by table: its first dirty byte, the tuples it starts with
  std::shared_ptr<void> clock_owner;

  uint32_t worker() const { return e.ctx().index; }
  uint64_t slot_of(Coordinator& c) const {
    return s.compressed ? e.node() : (uint64_t{e.node()} * e.workers_per_node() + worker()) * g.coroutines + c.index();
  }
  // The attempt's commit timestamp: this thread's last + 1 (basic vector),
  // or the node's next, taken once per attempt (compressed; the attempt
  // then owes NodeClock::finish, at publication or release).
  uint64_t commit_ts(Coordinator& c) {
    if (!s.compressed) return last[c.index()] + 1;
    uint64_t& t = taken[c.index()];
    if (t == 0) t = clock->take();
    return t;
  }
  const uint64_t* snapshot(Coordinator& c) const {
    return reinterpret_cast<const uint64_t*>(e.db().local_region(e.node(), worker()) +
                                             g.snapshot_off(worker(), c.index()));
  }
  bool visible(Coordinator& c, uint64_t hdr) const {
    const uint64_t th = thread_of(hdr);
    return th < g.slots && ts_of(hdr) <= snapshot(c)[th];
  }
};

uint32_t index_of(Txn& t, const Access& a) { return static_cast<uint32_t>(&a - &t.access(0)); }

// read_tuples' verdict: a copy whose current version does not match its
// checksum was torn by an install and is read again.
Verdict accept_copy(Coordinator& c, Txn& t, Access& a) {
  const auto& l = c.db().layout(a.table);
  const uint64_t hdr = copy_word(a.copy, kHdrOff);
  const uint64_t count = copy_word(a.copy, kCountOff);
  if (copy_word(a.copy, kSumOff) != current_sum(a.copy, l, hdr, count)) return Verdict::kRetry;
  AccessState& st = t.state<AccessState>(index_of(t, a));
  st.hdr = hdr;  // possibly locked: judged by the fetch stage
  st.count = count;
  st.state = copy_word(a.copy, l.state_offset());
  st.need_old = 0;
  if (c.db().recording()) a.writer = a.replaced = copy_word(a.copy, writer_off(0));
  return Verdict::kAccept;
}

// No step adds more than four one-sided requests per access, and a batch
// holds OneSidedBatch::kMaxWrs = 4 x Txn::kMaxAccesses: never full.
static_assert(OneSidedBatch::kMaxWrs >= 4 * Txn::kMaxAccesses);

// The read timestamp: one READ of the vector into this coordinator's snapshot.
Task<bool> take_snapshot(Namdb& p, Coordinator& c, Txn& t) {
  const RegionDescriptor& r = p.e.db().region(p.s.oracle_node, p.worker());
  OneSidedBatch& b = c.onesided();
  b.read({p.s.oracle_node, r.addr, r.rkey},
         p.e.db().local_region(p.e.node(), p.worker()) + p.g.snapshot_off(p.worker(), c.index()), 8 * p.g.slots, 0,
         p.e.db().local_region_lkey(p.e.node(), p.worker()));
  if (!co_await b.execute()) {
    t.fail(AbortReason::kNetwork);
    co_return false;
  }
  p.snap_ok[c.index()] = 1;
  // For the history: the snapshot, and the slot this attempt commits in.
  t.set_snapshot({p.snapshot(c), p.g.slots}, static_cast<uint32_t>(p.slot_of(c)));
  co_return true;
}

// A version found: its data and writer become the record the workload sees.
void settle_old(Coordinator& c, Access& a, const std::byte* data, uint64_t writer) {
  const auto& l = c.db().layout(a.table);
  std::memcpy(a.copy + l.record_offset(), data, record_words(l));
  if (c.db().recording()) a.writer = writer;
}

// Walks the record's overflow chain from its head for copy number `want`
// (or an older one) visible to the snapshot.
Task<bool> read_overflow(Namdb& p, Coordinator& c, Txn& t, uint32_t i, int64_t want) {
  Access& a = t.access(i);
  const auto& l = c.db().layout(a.table);
  const RegionDescriptor& r = p.e.db().region(a.node, p.worker());
  std::byte* buf = p.e.db().local_region(p.e.node(), p.worker()) + p.g.entry_buf_off(p.worker(), c.index());
  const uint32_t lkey = p.e.db().local_region_lkey(p.e.node(), p.worker());
  // The chain's head, read now: a version that left the buffer since the
  // fetch is on it.
  {
    OneSidedBatch& b = c.onesided();
    b.read({a.node, a.tuple_addr + kOverflowOff, c.descriptor(a.node, a.table).rkey}, c.extra(i), 8);
    if (!co_await b.execute()) {
      t.fail(AbortReason::kNetwork);
      co_return false;
    }
  }
  uint64_t next = copy_word(c.extra(i), 0);
  const uint32_t data_bytes = record_words(l);
  for (uint32_t step = 0; step < kMaxChain && next != 0 && want >= 0; ++step) {
    const uint64_t pos = next - 1;
    OneSidedBatch& b = c.onesided();
    b.read({a.node, r.addr + p.g.ring_entry_off(pos), r.rkey}, buf, kOvHeadBytes + data_bytes, 0, lkey);
    if (!co_await b.execute()) {
      t.fail(AbortReason::kNetwork);
      co_return false;
    }
    const uint64_t hdr = copy_word(buf, 8 * kOvHdr);
    // Reused, collected, or torn by reuse: the version is gone.
    if (copy_word(buf, 8 * kOvPos) != pos || copy_word(buf, 8 * kOvTable) != a.table ||
        copy_word(buf, 8 * kOvKey) != a.key || (hdr & kDeleted) != 0 ||
        copy_word(buf, 8 * kOvSum) != overflow_sum(buf, data_bytes))
      break;
    const int64_t copy_no = static_cast<int64_t>(copy_word(buf, 8 * kOvCopy));
    if (copy_no > want) {
      next = copy_word(buf, 8 * kOvPrev);
      continue;
    }
    if (copy_no < want) break;  // the chain skipped it: not there
    if (p.visible(c, hdr)) {
      settle_old(c, a, buf + kOvHeadBytes, copy_word(buf, 8 * kOvWriter));
      co_return true;
    }
    --want;
    next = copy_word(buf, 8 * kOvPrev);
  }
  // Below the first version: the row was inserted after the snapshot.
  t.fail(want < 0 ? AbortReason::kNotFound : kVersionGone);
  co_return false;
}

// Reads whose current version is not visible: READ the counter, the chain
// head and the buffer's headers; then the data of the newest visible entry
// (with its header again: its checksum proves the pair); a version no
// longer in the buffer is looked for in the overflow region.
Task<bool> read_old_versions(Namdb& p, Coordinator& c, Txn& t, uint32_t from) {
  ItemList old;
  for (uint32_t i = from; i < t.size(); ++i)
    if (t.access(i).mode == AccessMode::kRead && t.state<AccessState>(i).need_old) old.idx[old.n++] = i;
  if (old.empty()) co_return true;
  // The tuple's incarnation (AccessState::state) READ again with the
  // buffer: it shows the tuple was not erased and reused meanwhile.
  {
    OneSidedBatch& b = c.onesided();
    for (uint32_t k = 0; k < old.n; ++k) {
      Access& a = t.access(old.idx[k]);
      const auto& l = c.db().layout(a.table);
      const uint32_t rkey = c.descriptor(a.node, a.table).rkey;
      b.read({a.node, a.tuple_addr + kCountOff, rkey}, c.extra(old.idx[k]) + kCountOff, kMetaBytes - kCountOff);
      b.read({a.node, a.tuple_addr + l.state_offset(), rkey}, a.copy + l.state_offset(), 8);
    }
    if (!co_await b.execute()) {
      t.fail(AbortReason::kNetwork);
      co_return false;
    }
  }
  // Per read: the copy number wanted (newest first) and the slot chosen.
  int64_t want[Txn::kMaxAccesses];
  int32_t slot[Txn::kMaxAccesses];
  for (uint32_t k = 0; k < old.n; ++k) {
    const uint32_t i = old.idx[k];
    const std::byte* x = c.extra(i);
    if (copy_word(t.access(i).copy, c.db().layout(t.access(i).table).state_offset()) != t.state<AccessState>(i).state) {
      t.fail(kVersionGone);  // erased since the fetch (its tuple perhaps another row's now)
      co_return false;
    }
    int64_t j = static_cast<int64_t>(t.state<AccessState>(i).count) - 1;
    const int64_t lowest = j - static_cast<int64_t>(kBufferSlots) + 1;
    slot[k] = -1;
    for (; j >= 0 && j >= lowest; --j) {
      const uint32_t s = static_cast<uint32_t>(j % kBufferSlots);
      const uint64_t hdr = copy_word(x, entry_off(s));
      if (hdr == kEmptyEntry || copy_word(x, entry_off(s) + 8) != static_cast<uint64_t>(j)) break;  // reused
      if (p.visible(c, hdr)) {
        slot[k] = static_cast<int32_t>(s);
        break;
      }
    }
    want[k] = j;
    if (j < 0) {
      // Not even the row's first version: inserted after the snapshot (a
      // loaded row's first version, (0, 0), is visible to every snapshot).
      t.fail(AbortReason::kNotFound);
      co_return false;
    }
  }
  {
    OneSidedBatch& b = c.onesided();
    for (uint32_t k = 0; k < old.n; ++k) {
      if (slot[k] < 0) continue;
      const uint32_t i = old.idx[k];
      Access& a = t.access(i);
      const auto& l = c.db().layout(a.table);
      const uint32_t s = static_cast<uint32_t>(slot[k]);
      const uint32_t rkey = c.descriptor(a.node, a.table).rkey;
      b.read({a.node, a.tuple_addr + entry_off(s), rkey}, c.extra(i), kEntryBytes);
      b.read({a.node, a.tuple_addr + l.slot_offset(1 + s), rkey}, a.copy + l.slot_offset(1), record_words(l));
      if (recording(l)) {
        b.read({a.node, a.tuple_addr + writer_off(1 + s), rkey}, c.extra(i) + kEntryBytes, 8);
      }
    }
    if (!b.empty() && !co_await b.execute()) {
      t.fail(AbortReason::kNetwork);
      co_return false;
    }
  }
  for (uint32_t k = 0; k < old.n; ++k) {
    const uint32_t i = old.idx[k];
    Access& a = t.access(i);
    const auto& l = c.db().layout(a.table);
    if (slot[k] >= 0) {
      const std::byte* x = c.extra(i);
      const uint64_t hdr = copy_word(x, 0);
      const uint64_t writer = recording(l) ? copy_word(x, kEntryBytes) : 0;
      const std::byte* data = a.copy + l.slot_offset(1);
      if (copy_word(x, 8) == static_cast<uint64_t>(want[k]) && p.visible(c, hdr) &&
          copy_word(x, 16) == entry_sum(hdr, copy_word(x, 8), writer, a.key, data, record_words(l))) {
        settle_old(c, a, data, writer);
        t.state<AccessState>(i).need_old = 0;
        continue;
      }
      // Overwritten since: it was moved first, so it is on the chain.
    }
    if (!co_await read_overflow(p, c, t, i, want[k])) co_return false;
    t.state<AccessState>(i).need_old = 0;
  }
  co_return true;
}

Task<bool> fetch(Namdb& p, Coordinator& c, Txn& t, uint32_t from) {
  if (!p.snap_ok[c.index()] && !co_await take_snapshot(p, c, t)) co_return false;
  if (!co_await read_tuples(c, t, Primitive::kOneSided, from, accept_copy, kUnsettled)) co_return false;
  bool old = false;
  for (uint32_t i = from; i < t.size(); ++i) {
    Access& a = t.access(i);
    AccessState& st = t.state<AccessState>(i);
    const bool vis = p.visible(c, st.hdr);
    // The snapshot's version says the row is erased: it does not exist.
    if (vis && (st.hdr & kDeleted) != 0) {
      t.fail(AbortReason::kNotFound);
      co_return false;
    }
    if (a.mode == AccessMode::kWrite) {
      // It would fail the commit's CAS: first committer wins.
      if ((st.hdr & kLocked) != 0) {
        t.fail(kLockedReason);
        co_return false;
      }
      if (!vis) {
        t.fail(kWriteConflict);
        co_return false;
      }
      // The version read, kept for the buffer copy at commit (record slot 1
      // of the copy: a fetch READs slot 0 alone).
      const auto& l = c.db().layout(a.table);
      std::memcpy(a.copy + l.slot_offset(1), a.copy + l.record_offset(), record_words(l));
    } else {
      st.hdr &= ~kLocked;
      st.need_old = !vis;
      old |= !vis;
    }
  }
  // (Called only when needed: its frame is larger than the frame pool's.)
  if (!old) co_return true;
  co_return co_await read_old_versions(p, c, t, from);
}

// Runs `build` into a fresh batch until the batch executes (a failed QP is
// reconnected by the batch), or the worker has stopped long enough: a
// commit's later steps must land. False: given up (a commit error).
template <typename Build>
Task<bool> until_done(Coordinator& c, Build build) {
  for (StopBudget budget;;) {
    OneSidedBatch& b = c.onesided();
    build(b);
    if (b.empty()) co_return true;
    if (co_await b.execute()) co_return true;
    if (budget.spent()) co_return false;
    ++c.engine().stats().commit_retries;
    co_await runtime::yield();
  }
}

// Compressed vector: marks the attempt's commit timestamp, if it took one,
// installed or given up, and advances the node's slot by what that passed.
Task<void> finish_ts(Namdb& p, Coordinator& c) {
  const uint64_t ts = std::exchange(p.taken[c.index()], 0);
  if (ts == 0) co_return;
  const uint64_t delta = p.clock->finish(ts);
  if (delta == 0) co_return;
  const uint32_t on = p.s.oracle_node;
  const RegionDescriptor& r = p.e.db().region(on, p.worker());
  if (!co_await until_done(c, [&](OneSidedBatch& b) {
        b.faa({on, r.addr + 8 * p.slot_of(c), r.rkey},
              p.e.db().local_region(p.e.node(), p.worker()) + p.g.faa_off(p.worker(), c.index()), delta, 0,
              p.e.db().local_region_lkey(p.e.node(), p.worker()));
      }))
    ++c.engine().stats().commit_errors;
}

ItemList writes_of(Txn& t) {
  ItemList w;
  for (uint32_t i = 0; i < t.size(); ++i)
    if (t.access(i).mode == AccessMode::kWrite) w.idx[w.n++] = i;
  return w;
}

// Commit step 1, the lock stage: CAS each header (validation and locking at
// once) and READ the counter, chain head, buffer headers and current writer
// under the lock. (A stage of its own so that the engine puts the inserted
// rows in after it: two inserters of one key meet at its guard's CAS.)
Task<bool> lock(Namdb& p, Coordinator& c, Txn& t, uint32_t) {
  const ItemList w = writes_of(t);
  if (w.empty()) co_return true;  // read-only: nothing to validate (SI)
  const bool rec = c.db().recording();
  {
    OneSidedBatch& b = c.onesided();
    for (uint32_t k = 0; k < w.n; ++k) {
      const uint32_t i = w.idx[k];
      Access& a = t.access(i);
      const AccessState& st = t.state<AccessState>(i);
      const uint32_t rkey = c.descriptor(a.node, a.table).rkey;
      b.cas({a.node, a.tuple_addr + kHdrOff, rkey}, c.extra(i), st.hdr, st.hdr | kLocked);
      b.read({a.node, a.tuple_addr + kCountOff, rkey}, c.extra(i) + 8, kMetaBytes - kCountOff + (rec ? 8 : 0));
    }
    if (!co_await b.execute()) {
      // Which CASes took is unknown (a failed QP flushes its requests,
      // executed or not): read the headers back. One that shows the
      // version read, locked, is taken as this attempt's, and the release
      // writes the version back. (A header names no holder: another writer
      // of the same version would lock it to the same value; only a CAS
      // lost this way can mistake it, see doc/txn.md "NAM-DB".)
      t.fail(AbortReason::kNetwork);
      const bool read_back = co_await until_done(c, [&](OneSidedBatch& rb) {
        for (uint32_t k = 0; k < w.n; ++k) {
          Access& a = t.access(w.idx[k]);
          rb.read({a.node, a.tuple_addr + kHdrOff, c.descriptor(a.node, a.table).rkey}, c.extra(w.idx[k]), 8);
        }
      });
      for (uint32_t k = 0; k < w.n; ++k) {
        const uint32_t i = w.idx[k];
        t.access(i).locked = read_back && copy_word(c.extra(i), 0) == (t.state<AccessState>(i).hdr | kLocked);
      }
      if (!read_back) ++c.engine().stats().commit_errors;  // locks possibly left: the run's check counts them
      co_return false;
    }
  }
  AbortReason why = AbortReason::kNone;
  for (uint32_t k = 0; k < w.n; ++k) {
    const uint32_t i = w.idx[k];
    Access& a = t.access(i);
    AccessState& st = t.state<AccessState>(i);
    const std::byte* x = c.extra(i);
    uint64_t found = copy_word(x, 0);
    if (found != st.hdr && !p.correct && (found & kLocked) == 0) {
      // The broken variant: lock whatever version is current.
      OneSidedBatch& b = c.onesided();
      b.cas({a.node, a.tuple_addr + kHdrOff, c.descriptor(a.node, a.table).rkey}, c.extra(i), found, found | kLocked);
      if (co_await b.execute() && copy_word(c.extra(i), 0) == found) {
        st.hdr = found;
        st.count = copy_word(x, 8);  // as read after the first CAS: the version did not move since
      }
      found = copy_word(c.extra(i), 0);
      if (found == st.hdr) set_copy_word(c.extra(i), 0, found);
    }
    if (found != st.hdr) {
      if (why == AbortReason::kNone) why = (found & kLocked) != 0 ? kLockedReason : kWriteConflict;
      continue;
    }
    a.locked = true;
    if (rec) a.replaced = copy_word(x, 8 + (kMetaBytes - kCountOff));
    const uint64_t count = copy_word(x, 8);
    const uint64_t slot_hdr = copy_word(x, 8 + entry_off(static_cast<uint32_t>(count % kBufferSlots)) - kCountOff);
    if (p.correct && count != st.count) {
      if (why == AbortReason::kNone) why = kWriteConflict;  // cannot be: the header did not change
    } else if ((slot_hdr & kMoved) == 0) {
      if (why == AbortReason::kNone) why = kBufferFull;  // the version mover has not moved it yet
    }
    st.count = count;
  }
  if (why != AbortReason::kNone) {
    t.fail(why);
    co_return false;
  }
  co_return true;
}

// Steps 2-4 (the file's head): the old versions into the buffers, the new
// ones in place, the commit timestamp published.
Task<bool> commit(Namdb& p, Coordinator& c, Txn& t, uint32_t) {
  const ItemList w = writes_of(t);
  if (w.empty() && t.inserts() == 0) co_return true;  // read-only: nothing to install
  const bool rec = c.db().recording();
  // The commit timestamp (the one the attempt's inserted rows carry).
  const uint64_t ts = p.commit_ts(c);
  t.set_commit_timestamp(ts);
  const uint64_t new_hdr = make_header(p.slot_of(c), ts);
  // 2: the version read into its buffer slot (data, writer, then its header
  // entry). The counter advances with the install (3), which its checksum
  // covers: a reader meanwhile still sees the current version whole.
  bool ok = co_await until_done(c, [&](OneSidedBatch& b) {
    for (uint32_t k = 0; k < w.n; ++k) {
      const uint32_t i = w.idx[k];
      Access& a = t.access(i);
      const auto& l = c.db().layout(a.table);
      const AccessState& st = t.state<AccessState>(i);
      const uint32_t s = static_cast<uint32_t>(st.count % kBufferSlots);
      const uint32_t rkey = c.descriptor(a.node, a.table).rkey;
      std::byte* x = c.extra(i);
      const uint64_t writer = rec ? copy_word(a.copy, writer_off(0)) : 0;
      set_copy_word(x, 32, st.hdr & kVersionMask);
      set_copy_word(x, 40, st.count);
      set_copy_word(x, 48, entry_sum(st.hdr, st.count, writer, a.key, a.copy + l.slot_offset(1), record_words(l)));
      b.write({a.node, a.tuple_addr + l.slot_offset(1 + s), rkey}, a.copy + l.slot_offset(1), record_words(l));
      if (rec) {
        b.write({a.node, a.tuple_addr + writer_off(1 + s), rkey}, a.copy + writer_off(0), 8);
      }
      b.write({a.node, a.tuple_addr + entry_off(s), rkey}, x + 32, kEntryBytes);
      // The tuple's dirty byte on its node: the version mover's worklist.
      static const uint8_t kDirty = 1;
      const store::TableDescriptor& td = c.descriptor(a.node, a.table);
      const RegionDescriptor& nr = p.e.db().region(a.node, p.worker());
      const uint64_t tuple = (a.tuple_addr - td.heap_addr) / td.tuple_bytes;
      const uint64_t d = p.dirty_prefix[a.table] + tuple % p.dirty_span[a.table];
      b.write({a.node, nr.addr + p.g.dirty_off + d, nr.rkey}, &kDirty, 1, rdma::kInline);
    }
  });
  if (!ok) {
    // Nothing installed: the attempt aborts (the buffer may hold a second
    // copy of the current version, which is harmless), the locks go back
    // and the release finishes the timestamp.
    t.fail(AbortReason::kNetwork);
    co_return false;
  }
  // 3: the new version in place: record, writer, checksum and counter, then
  // the header (i, ts) unlocked; an erase (Txn::erase) is a version with the
  // deleted bit, its record the one it replaces.
  for (uint32_t k = 0; k < w.n; ++k) {
    const uint32_t i = w.idx[k];
    Access& a = t.access(i);
    const auto& l = c.db().layout(a.table);
    const uint64_t count = t.state<AccessState>(i).count + 1;
    if (rec) set_copy_word(a.copy, writer_off(0), t.id());
    if (a.change == RowChange::kErase)
      std::memcpy(a.copy + l.record_offset(), a.copy + l.slot_offset(1), record_words(l));
    set_copy_word(a.copy, kHdrOff, a.change == RowChange::kErase ? new_hdr | kDeleted : new_hdr);
    set_copy_word(a.copy, kCountOff, count);
    set_copy_word(a.copy, kSumOff, current_sum(a.copy, l, new_hdr, count));
  }
  ok = co_await until_done(c, [&](OneSidedBatch& b) {
    for (uint32_t k = 0; k < w.n; ++k) {
      Access& a = t.access(w.idx[k]);
      const auto& l = c.db().layout(a.table);
      const uint32_t rkey = c.descriptor(a.node, a.table).rkey;
      b.write({a.node, a.tuple_addr + l.record_offset(), rkey}, a.copy + l.record_offset(), record_words(l));
      if (rec) {
        b.write({a.node, a.tuple_addr + writer_off(0), rkey}, a.copy + writer_off(0), 8);
      }
      b.write({a.node, a.tuple_addr + kSumOff, rkey}, a.copy + kSumOff, 16);  // checksum, counter
      b.write({a.node, a.tuple_addr + kHdrOff, rkey}, a.copy + kHdrOff, 8);
    }
  });
  for (uint32_t k = 0; k < w.n; ++k) t.access(w.idx[k]).locked = false;
  if (!ok) ++c.engine().stats().commit_errors;
  // 4: the commit timestamp published.
  const uint32_t on = p.s.oracle_node;
  const RegionDescriptor& r = p.e.db().region(on, p.worker());
  if (p.s.compressed) {
    co_await finish_ts(p, c);
  } else {
    if (!co_await until_done(c, [&](OneSidedBatch& b) {
          b.write({on, r.addr + 8 * p.slot_of(c), r.rkey}, &p.last[c.index()], 8, rdma::kInline);
          p.last[c.index()] = ts;  // the inline payload is copied at post time
        }))
      ++c.engine().stats().commit_errors;
  }
  co_return true;
}

// Unlocks by writing back the version header read (the record did not
// change); a commit timestamp taken is finished (compressed: the node's
// slot must pass it, or it would stop there).
Task<bool> release(Namdb& p, Coordinator& c, Txn& t, uint32_t) {
  if (p.s.compressed) co_await finish_ts(p, c);
  const bool ok = co_await until_done(c, [&](OneSidedBatch& b) {
    for (uint32_t i = 0; i < t.size(); ++i) {
      Access& a = t.access(i);
      if (!a.locked) continue;
      b.write({a.node, a.tuple_addr + kHdrOff, c.descriptor(a.node, a.table).rkey}, &t.state<AccessState>(i).hdr, 8,
              rdma::kInline);
    }
  });
  for (uint32_t i = 0; i < t.size(); ++i) t.access(i).locked = false;
  if (!ok) ++c.engine().stats().commit_errors;
  co_return true;
}

Result<std::unique_ptr<Protocol>> make(WorkerEngine& e, bool correct) {
  const Settings s = settings_of(e.options());
  Database& db = e.db();
  // One-sided only: its NIC atomics (header CAS, vector FAA) meet no CPU
  // read-modify-write (the version mover's fetch_or is on buffer entries,
  // which only WRITEs reach).
  e.set_atomic_stages(0);
  if (db.replicas() > 1)
    return make_error(EINVAL, "namdb: cluster.replicas > 1 is not supported (NAM-DB keeps one copy)");
  // Every node's tables have the same capacities: the dirty bytes of
  // table t start at the sum of the tables before it.
  std::vector<uint64_t> prefix(db.tables(), 0), span(db.tables(), 0);
  uint64_t tuples = 0, dirty = 0;
  for (TableId t = 0; t < db.tables(); ++t) {
    prefix[t] = dirty;
    if (db.has_table(t)) span[t] = db.def(t).capacity_per_node;
    tuples += span[t];
    // Each table's first byte 8-aligned: the mover loads eight at once.
    dirty += (span[t] + 7) & ~uint64_t{7};
  }
  const Geometry g = Geometry::make(db.nodes(), e.workers_per_node(), e.options().coroutines, max_record_of(db),
                                    dirty_of(db.tables(), tuples), s);
  if (db.region_bytes() < g.total)
    return make_error(EINVAL, "namdb: the node region has %llu bytes, %llu needed",
                      static_cast<unsigned long long>(db.region_bytes()), static_cast<unsigned long long>(g.total));
  auto p = std::make_unique<Namdb>(e, s, g, correct);
  p->dirty_prefix = prefix;
  p->dirty_span = span;
  if (s.compressed) {
    if (uint64_t{e.workers_per_node()} * e.options().coroutines >= NodeClock::kRing)
      return make_error(EINVAL, "namdb.oracle = compressed: at most %llu coordinators per node",
                        static_cast<unsigned long long>(NodeClock::kRing - 1));
    std::shared_ptr<void>& slot = db.node_state(e.node(), "namdb.clock");
    if (!slot) slot = std::make_shared<NodeClock>();
    p->clock_owner = slot;
    p->clock = static_cast<NodeClock*>(slot.get());
  }
  if (e.ctx().index == 0) e.add_service(make_version_mover(e, g, s, prefix, span));
  p->set_stage(Stage::kFetch, *p, fetch);
  p->set_stage(Stage::kLock, *p, lock);
  p->set_stage(Stage::kCommit, *p, commit);
  p->set_release(*p, release);
  return std::unique_ptr<Protocol>(std::move(p));
}
Result<std::unique_ptr<Protocol>> create(WorkerEngine& e) { return make(e, true); }
Result<std::unique_ptr<Protocol>> create_broken(WorkerEngine& e) { return make(e, false); }

constexpr AbortReasonName kReasons[] = {
    {"write_conflict", "write conflict: the version read is no longer current (first committer wins)"},
    {"locked", "record locked by a committing writer"},
    {"buffer_full", "old-version buffer slot not moved to the overflow region yet"},
    {"version_gone", "the snapshot's version was collected or overwritten"},
    {"unsettled_read", "copy torn by an install on every round"}};

// The default (vector) oracle and the compressed one in the generated
// suites. A variant list replaces the plain name, so the defaults must be
// listed too: "" stands for them (a list of "compressed" alone would leave
// the default oracle out of every generated suite).
constexpr ProtocolSetting kCompressed[] = {{"namdb.oracle", "compressed"}};
constexpr ProtocolVariant kVariants[] = {{"", {}}, {"compressed", kCompressed}};

}  // namespace

constexpr ProtocolDef kDef = {
    .name = "namdb",
    .summary = "NAM-DB: snapshot isolation, one-sided only; timestamp vector oracle, current version in place, old "
               "versions in a per-record buffer and a per-node overflow region (VLDB 2017)",
    .meta_bytes = kMetaBytes,
    .access_state_bytes = sizeof(AccessState),
    .isolation = Isolation::kSnapshot,
    .snapshot_vectors = true,  // the history records each attempt's vector: SI decided exactly
    .allowed = {.fetch = {Primitive::kOneSided}, .lock = {Primitive::kOneSided}, .commit = {Primitive::kOneSided}},
    .abort_reasons = kReasons,
    .lock_held = lock_held,
    .create = create,
    .extra_record_slots = kBufferSlots,
    .init_tuple = init_tuple,
    .region_bytes = region_bytes_of,
    .add_schema = add_schema,
    .replicable = false,
    .relocates_rows = false,  // a moved row would lose its old versions
    .variants = kVariants,
    .region_per_node = true,
    .fetch_record_slots = 1,
    .versions_erases = true,  // an erase is a version with the deleted bit; the mover removes the row E later
};

constexpr ProtocolDef kNoFirstCommitterWinsForTests = broken_variant(
    kDef, "namdb-broken-nofcw", "BROKEN, tests only: NAM-DB whose commit locks whatever version is current",
    create_broken);

RDTX_REGISTER_PROTOCOL(kDef)
RDTX_REGISTER_PROTOCOL(kNoFirstCommitterWinsForTests)

}  // namespace rdtx::cc::namdb
