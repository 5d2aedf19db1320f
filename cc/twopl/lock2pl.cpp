// 2PL over a lock table ("Strong consistency is not hard to get", Barthels
// et al., VLDB 2019, section 3), protocol "2pl". Locks live in a lock table
// per node, sharded over the node's workers (LockService: one shard per
// worker, the paper's server agents), not in the tuples:
//
//   fetch    per access a lock request to the shard of its record (S for a
//            read, X for a write), all of an attempt's requests to one
//            shard in one RPC, every shard at once. The reply carries the
//            tuple, copied by the shard under the lock. A request that
//            cannot be granted at once is refused (NoWait), waits if its
//            transaction is older than every holder and waiter (WaitDie,
//            by the attempt's timestamp, kept across retries) or always
//            waits, up to 2pl.wait_ms (Bounded Wait; the paper's 100 ms).
//            A denial aborts the attempt.
//   validate the 2PC vote (the paper's 3.1), for a transaction that wrote at
//            more than one shard: the coordinator reads its vote words (the
//            baseline), sends each of those shards a vote request (a oneway
//            message) and waits until every one has voted with a remote
//            fetch-and-add (+1 low: yes; +1 high: abort; VoteLayout in
//            shard_service.hpp); an abort vote, or no full count within
//            the RPC timeout, aborts the attempt. Before the commit stage:
//            nothing is installed (rows written, inserted or erased) before
//            every participant said yes.
//   commit   the written tuples are written one-sided to their owners (the
//            paper's data layer: the agent writes with one-sided
//            operations, under its X locks), and once they have landed the
//            end-of-transaction message goes to every shard the attempt
//            asked: the shard releases all of the attempt's locks at once
//            (its transaction table) and fences the attempt.
//   release  the same message without writes, after an abort.
//
// Strict 2PL with S and X record locks is serializable (the history check
// certifies it).
//
// Scans and the lock hierarchy (2pl.granularity = partition, the default,
// at serializable): a table with a partition level (TableDef::parent_keys)
// has its partitions as the records' parents. A record's request comes with
// an intention lock on its partition (IS for a read, IX for a write), and
// a scan (Txn::scan) takes one S lock on its partition instead of a lock
// per row; its rows are READ one-sided once the locks are granted (the
// grant cannot carry a partition's rows; the paper's agents READ). A
// partition the attempt asks for in several modes is asked once, in their
// supremum (a scan and a write: SIX); a later round converts it. The
// parents go in the same calls as their children, not a round trip ahead:
// no row is used, and nothing written, before every lock of the call is
// granted, so the order within a call cannot be observed. Repeatable read
// and read committed take no partition locks (a scan locks its rows, held
// to the end or short), and so no intention locks either: nothing would
// take the S lock they guard against.
//
// Timestamp ordering, protocol "to" (the paper's 3.2.2), is the same agent
// with another table at the shards (TsTable): a request is a timestamped
// read or write instead of a lock, taken with a fresh timestamp per attempt
// (an aborted attempt retries later in the order, never with the
// timestamp that came too late). A read holds nothing once served; a write
// stays pending until the end message installs or discards it. The commit
// writes the record one-sided as 2PL's does, but not the tuple's protocol
// words (TO's rts and wts, which the shard keeps), and the end message goes
// only to the shards where something may be left: a pending write, or a
// call that did not come back. A refusal carries the timestamp that was
// too late for, which the worker's clock catches up with (as MVCC does).
#include <atomic>
#include <cstring>
#include <utility>

#include "cc/twopl/shard_service.hpp"
#include "cc/twopl/twopl.hpp"
#include "env/tsc.hpp"
#include "runtime/deadline.hpp"
#include "txn/coordinator.hpp"
#include "txn/item_batch.hpp"
#include "txn/ring_log.hpp"
#include "txn/stages/copy_check.hpp"
#include "txn/stages/toolkit.hpp"

namespace rdtx::cc::twopl {

using namespace rdtx::txn;
using runtime::Task;

namespace {

const AbortReason kDeniedAbort = protocol_reason(0);
const AbortReason kTimedOutAbort = protocol_reason(1);
const AbortReason kFullAbort = protocol_reason(2);
const AbortReason kVoteAbort = protocol_reason(3);
const AbortReason kVoteTimeoutAbort = protocol_reason(4);

// Per access: the shard its lock request went to, and whether it went.
struct AccessState {
  uint32_t shard;
  uint32_t requested;
};

void add_schema_to(config::Schema& s) {
  s.add_int("to.wait_ms", 100, 1, 60'000,
            "TO (protocol to): how long a request may wait for an older transaction's pending write before it "
            "is refused (only a stalled or dead writer makes a wait long)");
}

// A partition the attempt locks (the lock hierarchy): the mode granted so
// far and the mode wanted (asked in the next call when stronger).
struct Parent {
  uint32_t node, shard;
  TableId table;
  uint64_t part;
  LockMode held, want;
  bool requested;  // a call went: the end message goes to its shard
};
// A parent's item id in a lock call (an access's is its index).
constexpr uint32_t kParentItem = 0x80000000u;

void add_schema(config::Schema& s) {
  s.add_enum("2pl.policy", "bounded_wait", {"nowait", "waitdie", "bounded_wait"},
             "2PL (protocol 2pl): what a lock request that cannot be granted at once does: nowait = refused; "
             "waitdie = waits if its transaction is older than every holder and waiter, else refused; "
             "bounded_wait = waits up to 2pl.wait_ms");
  s.add_enum("2pl.granularity", "partition", {"partition", "record"},
             "2PL at serializable: partition = the lock hierarchy, a scan takes one S lock on its partition and "
             "every record request an intention lock (IS, IX) on its partition; record = a scan locks each row "
             "(as repeatable read does; no intention locks)");
  s.add_int("2pl.wait_ms", 100, 1, 60'000,
            "2PL: how long a lock request may wait before it is refused: bounded_wait's limit (the paper's "
            "100 ms), and waitdie's bound");
}

class Lock2pl final : public Protocol {
 public:
  Lock2pl(rpc::HandlerId lock_id, rpc::HandlerId end_id, rpc::HandlerId vote_id, bool to, uint64_t call_timeout_ns,
          LockMode write_mode, Isolation level, bool hierarchy, LockMode scan_mode, uint32_t coroutines)
      : lock_id(lock_id),
        end_id(end_id),
        vote_id(vote_id),
        to(to),
        call_timeout_ns(call_timeout_ns),
        write_mode(write_mode),
        // Repeatable read takes serializable's record locks: S held to the
        // end; serializable adds the partition locks of scans (hierarchy).
        read_mode(static_cast<uint64_t>(LockMode::kS) | (level == Isolation::kReadCommitted ? kShortLock : 0)),
        hierarchy(hierarchy && !to && level == Isolation::kSerializable),
        scan_mode(scan_mode),
        parents(this->hierarchy ? size_t{coroutines} * kMaxParents : 0) {}
  // TO: a fresh timestamp per attempt (a retry with the old one would come
  // too late again).
  void begin(Coordinator& c, Txn& t) override {
    if (to) {
      c.renew_timestamp(t);
      t.set_commit_timestamp(t.timestamp());  // TO serialises in timestamp order
    }
    nparents[c.index()] = 0;
  }
  // The shards' handlers (the same ids on every worker; vote: 2pl only).
  const rpc::HandlerId lock_id, end_id, vote_id;
  const bool to;  // timestamp ordering (TsService) instead of locks (LockService)
  // A lock call's timeout: the longest a shard lets it wait, plus the RPC
  // timeout for the messages themselves.
  const uint64_t call_timeout_ns;
  // X; S in the broken variants (two writers share a row: lost updates).
  const LockMode write_mode;
  // The broken variant 2pl-broken-firstyes: the 2PC decides commit on the
  // first yes vote, not on every participant's.
  bool first_yes = false;
  // S, held to the end (serializable), or a short S (read committed); TO: a
  // read.
  const uint64_t read_mode;
  // The lock hierarchy (see the top): partitions locked, scans' rows READ.
  const bool hierarchy;
  // A scan's partition lock: S; IS in the broken variant (writers' IX
  // locks get past it).
  const LockMode scan_mode;
  // Per coroutine, the partitions its attempt locks (a distinct one per
  // access at most).
  static constexpr uint32_t kMaxParents = Txn::kMaxAccesses;
  std::vector<Parent> parents;
  uint32_t nparents[kMaxCoroutines] = {};
  Parent* parents_of(uint32_t co) { return parents.data() + size_t{co} * kMaxParents; }
  // fetch = mailbox: the slots (nodes == 0: RPC), each coroutine's call
  // number, and one slot's copy (scans do not interleave: one thread).
  MailboxLayout mail;
  uint64_t mail_seq[kMaxCoroutines] = {};
  std::vector<uint64_t> mail_buf;
  // Per coroutine, the state of each call of its batch (in the region,
  // not the coroutine frame: a batch may have ItemBatch::kMaxCalls calls).
  struct MailCall {
    uint64_t seq;   // its call number, once sent
    uint32_t wave;  // the wave being sent: its calls' indices, in order
    bool sent, came;
  };
  std::vector<MailCall> mail_calls;
  // The waits for mailbox replies and for 2PC votes, each kind with its own
  // adaptive timeouts (the engine's; see txn/message_timers.hpp).
  MessageTimers* mail_timers = nullptr;
  MessageTimers* vote_timers = nullptr;
  MailCall* mail_calls_of(uint32_t co) { return mail_calls.data() + size_t{co} * ItemBatch::kMaxCalls; }
};

// Distinct shards the end of an attempt tells at once, and the most a
// 2PC vote may ask (an attempt writing at more shards aborts).
constexpr uint32_t kMaxShardsAtOnce = 32;

// The lock calls of `b` through the mailboxes (region.hpp): each call's
// request WRITten into its shard's slot, then the replies polled until
// every one came or the call timeout passed (then the missing ones failed,
// as RPC calls that timed out). A shard has one slot per coordinator: calls
// to the same shard (a request larger than a message) go in successive
// waves, one call per shard each.
Task<bool> mailbox_call(Lock2pl& p, Coordinator& c, ItemBatch& b) {
  WorkerEngine& e = c.engine();
  const MailboxLayout& L = p.mail;
  const uint32_t workers = e.workers_per_node(), me = e.node(), i = e.ctx().index, co = c.index();
  const uint32_t ncalls = b.calls();
  Lock2pl::MailCall* mc = p.mail_calls_of(co);
  for (uint32_t k = 0; k < ncalls; ++k) mc[k] = {0, 0, false, false};
  uint32_t done = 0;
  bool ok = true;
  while (ok && done < ncalls) {
    // A wave: the first unsent call to each shard.
    uint32_t nwave = 0;
    for (uint32_t k = 0; k < ncalls; ++k) {
      if (mc[k].sent) continue;
      bool busy = false;
      for (uint32_t q = 0; q < nwave && !busy; ++q) busy = b.call_dest(mc[q].wave) == b.call_dest(k);
      if (!busy) mc[nwave++].wave = k;
    }
    OneSidedBatch& w = c.onesided();
    for (uint32_t q = 0; q < nwave; ++q) {
      const uint32_t k = mc[q].wave, dest = b.call_dest(k), m = dest / workers, j = dest % workers;
      const std::span<const std::byte> req = b.request(k);
      const uint32_t bytes = static_cast<uint32_t>(sizeof(ringlog::EntryHead) + req.size() + 8);
      // create() checked that an RPC payload fits a slot; a wave has no
      // more calls than the cluster has shards.
      std::byte* st = e.db().local_region(me, i) + L.request_staging(co, q);
      std::memcpy(st + sizeof(ringlog::EntryHead), req.data(), req.size());
      mc[k].seq = ++p.mail_seq[co];
      ringlog::seal_entry(st, bytes, 1, MailboxLayout::pos(mc[k].seq));
      const txn::RegionDescriptor& rd = e.db().region(m, i);
      w.write({m, rd.addr + L.request(me, co, j), rd.rkey}, st, bytes, 0, e.db().local_region_lkey(me, i));
      mc[k].sent = true;
    }
    ok = co_await w.execute();
    if (!ok) break;
    // The replies land silently in the slots: the worker checks them every
    // pass (poll_until; see vote()).
    // Each wave has the whole call timeout, as each RPC call has (a wave's
    // grant may wait 2pl.wait_ms at its shard), or more if the round trips
    // to its nodes have earned more (txn::MessageTimers: a wait that
    // includes a lock wait is not a sample, but undoes doublings), and time
    // this worker was not running (a descheduled thread) moves the deadline
    // on, as the RPC layer does (runtime::Deadline).
    uint64_t nodes = 0;
    for (uint32_t q = 0; q < nwave; ++q) nodes |= uint64_t{1} << (b.call_dest(mc[q].wave) / workers);
    MessageTimers& timers = *p.mail_timers;
    const uint64_t sent_ns = env::tsc_to_ns(env::tsc());
    uint32_t left = nwave;
    runtime::Deadline deadline(std::max(p.call_timeout_ns, timers.timeout_ns(nodes)));
    co_await runtime::poll_until([&] {
      for (uint32_t q = 0; q < nwave; ++q) {
        const uint32_t k = mc[q].wave;
        if (mc[k].came) continue;
        const uint32_t dest = b.call_dest(k), m = dest / workers, j = dest % workers;
        const std::byte* slot = e.db().local_region(me, j) + L.reply(i, co, m);
        ringlog::EntryHead eh;
        uint64_t advance = 0;
        if (ringlog::scan(slot, MailboxLayout::kSlotBytes, MailboxLayout::pos(mc[k].seq), p.mail_buf.data(), &eh,
                          &advance) != ringlog::Scan::kEntry)
          continue;
        const uint32_t len = eh.bytes - ringlog::kEntryOverhead;
        const std::span<std::byte> rb = b.reply_buffer(k);
        const bool fits = len <= rb.size();
        if (fits) std::memcpy(rb.data(), reinterpret_cast<const std::byte*>(p.mail_buf.data()) + sizeof eh, len);
        b.set_reply(k, fits, len);
        mc[k].came = true;
        ++done;
        --left;
      }
      return left == 0 || deadline.passed();
    });
    ok = left == 0;
    const uint64_t now_ns = env::tsc_to_ns(env::tsc());
    if (ok) {
      timers.answered(nodes, now_ns - sent_ns, false);
    } else {
      uint64_t silent = 0;  // the nodes whose reply did not come
      for (uint32_t q = 0; q < nwave; ++q)
        if (!mc[mc[q].wave].came) silent |= uint64_t{1} << (b.call_dest(mc[q].wave) / workers);
      timers.timed_out(silent, sent_ns, now_ns);
    }
  }
  for (uint32_t k = 0; k < ncalls; ++k)
    if (!mc[k].came) b.set_reply(k, false, 0);
  co_return ok && done == ncalls;
}

AbortReason verdict_of(int32_t status) {
  switch (status) {
    case kLockDenied: return kDeniedAbort;
    case kLockTimedOut: return kTimedOutAbort;
    case kLockFull: return kFullAbort;
    case -ENOENT: return AbortReason::kNotFound;
    default: return AbortReason::kNetwork;  // fenced, malformed: not this attempt's doing
  }
}

// Whether access a is a scanned row the partition's S lock covers (READ
// after the grant, no row lock).
bool under_parent(const Lock2pl& p, Coordinator& c, const Access& a) {
  return p.hierarchy && a.scanned && a.mode == AccessMode::kRead && c.db().def(a.table).parent_keys != 0;
}

// The lock hierarchy: the partitions of accesses [from, t.size()), each
// wanted in the supremum of what its accesses need (IS a read, IX a write,
// the scan mode a scanned row).
void collect_parents(Lock2pl& p, Coordinator& c, Txn& t, uint32_t from) {
  Parent* ps = p.parents_of(c.index());
  uint32_t& np = p.nparents[c.index()];
  const uint32_t workers = c.engine().workers_per_node();
  for (uint32_t i = from; i < t.size(); ++i) {
    const Access& a = t.access(i);
    const uint64_t pk = c.db().def(a.table).parent_keys;
    if (pk == 0 || a.fetched) continue;
    const LockMode need = under_parent(p, c, a)           ? p.scan_mode
                          : a.mode == AccessMode::kWrite ? LockMode::kIX
                                                         : LockMode::kIS;
    const uint64_t part = a.key / pk;
    uint32_t k = 0;
    while (k < np && !(ps[k].part == part && ps[k].table == a.table && ps[k].node == a.node)) ++k;
    if (k == np) {
      // A partition per access at most: kMaxParents suffices.
      ps[np++] = {a.node, shard_of(parent_lock_name(a.table, part), workers), a.table, part, LockMode::kNL, need, false};
    } else {
      ps[k].want = supremum(ps[k].want, need);
    }
  }
}

// A scanned row READ under its partition's S lock: nobody writes it, so
// the copy is accepted as it is (its writer recorded for the history).
Verdict accept_scanned(Coordinator& c, Txn&, Access& a) {
  if (c.db().recording()) a.writer = a.replaced = copy_word(a.copy, c.db().history_word_offset());
  return Verdict::kAccept;
}

Task<bool> fetch(Lock2pl& p, Coordinator& c, Txn& t, uint32_t from) {
  const uint32_t workers = c.engine().workers_per_node();
  const bool rec = c.db().recording();
  const uint32_t hw = c.db().history_word_offset();
  AbortReason verdict = AbortReason::kNone;
  Parent* ps = p.parents_of(c.index());
  uint32_t np = 0;
  bool scanned = false;
  if (p.hierarchy) {
    collect_parents(p, c, t, from);
    np = p.nparents[c.index()];
  }
  uint32_t pi = 0;  // the next partition to ask for
  for (uint32_t i = from; i < t.size() || pi < np;) {
    ItemBatch& b = c.items(p.lock_id);
    bool full = false;
    // The partitions first (the same calls as their rows: see the top).
    for (; pi < np; ++pi) {
      Parent& q = ps[pi];
      if (q.want == q.held) continue;
      const uint64_t mode = static_cast<uint64_t>(q.want) | kParentLock;
      if (!b.add_item(q.node, kParentItem | pi, q.table, q.part, t.id(), t.timestamp(), {}, 0, &mode, q.shard)) {
        full = true;
        break;
      }
      q.requested = true;
    }
    for (; !full && i < t.size(); ++i) {
      Access& a = t.access(i);
      if (a.fetched) continue;
      if (under_parent(p, c, a)) {
        scanned = true;
        continue;
      }
      AccessState& s = t.state<AccessState>(i);
      s.shard = shard_of(lock_name(a.table, a.key), workers);
      const uint64_t mode = a.mode == AccessMode::kWrite ? static_cast<uint64_t>(p.write_mode) : p.read_mode;
      if (!b.add_item(a.node, i, a.table, a.key, t.id(), t.timestamp(), {}, c.db().tuple_bytes(a.table), &mode,
                      s.shard))
        break;
      s.requested = 1;
    }
    if (b.empty()) {
      if (i == t.size() && pi == np) break;
      t.fail(AbortReason::kNetwork);  // cannot happen: create() checks that a tuple fits a reply
      co_return false;
    }
    bool sent = false;
    if (p.mail.nodes != 0) sent = co_await mailbox_call(p, c, b);
    else sent = co_await b.call(p.call_timeout_ns);
    const bool wellformed = b.for_each_reply([&](uint32_t k, const ItemReply& r, std::span<const std::byte> d) {
      if (k & kParentItem) {
        Parent& q = ps[k & ~kParentItem];
        if (r.status == kLockGranted && d.empty()) q.held = q.want;
        else if (verdict == AbortReason::kNone)
          verdict = r.status == kLockGranted ? AbortReason::kNetwork : verdict_of(r.status);
        return;
      }
      Access& a = t.access(k);
      const uint32_t tb = c.db().tuple_bytes(a.table);
      if (r.status != kLockGranted || d.size() != tb) {
        if (verdict == AbortReason::kNone) verdict = r.status == kLockGranted ? AbortReason::kNetwork : verdict_of(r.status);
        // TO: too late for a later transaction's timestamp; catch up with it.
        if (p.to && r.status == kLockDenied) c.engine().observe_timestamp(r.arg);
        // Refused: nothing of this item is left at its shard.
        if (p.to && r.status > 0) t.state<AccessState>(k).requested = 0;
        return;
      }
      std::memcpy(a.copy, d.data(), tb);
      a.fetched = true;
      // Read committed: the shard let the read lock go once it copied the
      // row; TO: a served read holds nothing.
      a.locked = a.mode == AccessMode::kWrite || (!p.to && (p.read_mode & kShortLock) == 0);
      if (p.to && !a.locked) t.state<AccessState>(k).requested = 0;
      a.state = r.state;
      const store::TableDescriptor& desc = c.descriptor(a.node, a.table);
      a.tuple_addr = r.tuple_index < desc.capacity ? desc.tuple_addr(static_cast<uint32_t>(r.tuple_index)) : 0;
      if (a.tuple_addr == 0 && verdict == AbortReason::kNone) verdict = AbortReason::kNetwork;
      if (rec) {
        std::memcpy(&a.writer, a.copy + hw, 8);
        a.replaced = a.writer;
      }
    });
    if ((!sent || !wellformed) && verdict == AbortReason::kNone) verdict = AbortReason::kNetwork;
    if (verdict != AbortReason::kNone) {
      t.fail(verdict);
      co_return false;
    }
  }
  // A scan's rows, under their partitions' S locks: nobody writes them, so
  // a READ cannot tear (a stale location is looked up again; retries that
  // run out cannot happen under the lock, and count as a network abort,
  // which fails a run without faults).
  if (scanned) co_return co_await read_tuples(c, t, Primitive::kOneSided, from, accept_scanned, AbortReason::kNetwork);
  co_return true;
}

// The end-of-transaction message to every shard the attempt asked (one
// item per shard: the shard releases everything the attempt has there;
// TO: every shard where something may be left, see fetch).
Task<bool> end(Lock2pl& p, Coordinator& c, Txn& t, bool commit) {
  if (c.commit_batch_in_flight()) co_await c.settle_commit_batch();
  const uint32_t workers = c.engine().workers_per_node();
  ItemBatch* b = &c.commit_items(p.end_id);
  uint64_t sent_to[kMaxShardsAtOnce];
  uint32_t nsent = 0;
  // The accesses' shards, then the partitions' (the lock hierarchy).
  Parent* ps = p.parents_of(c.index());
  const uint32_t np = p.hierarchy ? std::exchange(p.nparents[c.index()], 0) : 0;
  for (uint32_t k = 0; k < t.size() + np; ++k) {
    uint32_t node, shard, id;
    TableId table;
    Key key;
    if (k < t.size()) {
      Access& a = t.access(k);
      AccessState& s = t.state<AccessState>(k);
      a.locked = false;
      if (!s.requested) continue;
      s.requested = 0;
      node = a.node, shard = s.shard, id = k, table = a.table, key = a.key;
    } else {
      const Parent& q = ps[k - t.size()];
      if (!q.requested) continue;
      node = q.node, shard = q.shard, id = kParentItem | (k - t.size()), table = q.table, key = q.part;
    }
    const uint64_t dest = uint64_t{node} * workers + shard;
    bool dup = false;
    for (uint32_t j = 0; j < nsent && !dup; ++j) dup = sent_to[j] == dest;
    if (dup) continue;
    if (nsent == kMaxShardsAtOnce) {
      // More shards than one round tells: this one is awaited (and re-sent
      // until answered) before the next.
      const bool ok = co_await b->call();
      judge_unlocks(c, *b, true);
      if (!ok) co_await retry_unlocks(c, *b);
      b = &c.commit_items(p.end_id);
      nsent = 0;
    }
    sent_to[nsent++] = dest;
    b->add_item(node, id, table, key, t.id(), commit ? kEndCommit : 0, {}, 0, nullptr, shard);
  }
  if (b->empty()) co_return true;
  if (c.engine().options().passive_ack) {
    b->start(c.engine().options().piggyback_ack);
    // The next attempt asks for locks only after this was answered.
    c.mark_release_in_flight();
    co_return true;
  }
  const bool ok = co_await b->call();
  judge_unlocks(c, *b, true);
  if (!ok) co_await retry_unlocks(c, *b);
  co_return true;
}

Task<bool> commit(Lock2pl& p, Coordinator& c, Txn& t, uint32_t) {
  const bool rec = c.db().recording();
  // Not the protocol's words (TO's rts and wts: the shard's).
  const uint32_t meta = c.db().protocol_meta_bytes();
  // The writes land (under the X locks) before any lock is released.
  OneSidedBatch& batch = c.onesided();
  for (uint32_t i = 0; i < t.size(); ++i) {
    Access& a = t.access(i);
    // A row this attempt erased or moved is done (Access::locked cleared).
    if (!a.locked || a.mode != AccessMode::kWrite) continue;
    if (rec) {
      const uint64_t id = t.id();
      std::memcpy(a.copy + c.db().history_word_offset(), &id, 8);
    }
    const Remote to{a.node, a.tuple_addr + meta, c.descriptor(a.node, a.table).rkey};
    const uint32_t length = c.db().tuple_bytes(a.table) - meta;
    if (batch.write(to, a.copy + meta, length) == nullptr) {  // full: post what it holds first
      if (!co_await batch.execute()) ++c.engine().stats().commit_errors;
      batch.write(to, a.copy + meta, length);
    }
  }
  // Failed WRITEs are commit errors, which fail the run (the transaction
  // committed: its locks were all held).
  if (!batch.empty() && !co_await batch.execute()) ++c.engine().stats().commit_errors;
  co_return co_await end(p, c, t, true);
}

Task<bool> release(Lock2pl& p, Coordinator& c, Txn& t, uint32_t) { return end(p, c, t, false); }

// The 2PC vote among the shards the attempt wrote at, when there are
// several (one shard commits alone: "Transactions that do not modify data
// on more than one server agent do not execute a 2PC protocol").
Task<bool> vote(Lock2pl& p, Coordinator& c, Txn& t, uint32_t) {
  WorkerEngine& e = c.engine();
  const uint32_t workers = e.workers_per_node();
  uint64_t part[kMaxShardsAtOnce];
  uint32_t n = 0;
  for (uint32_t i = 0; i < t.size(); ++i) {
    const Access& a = t.access(i);
    if (a.mode != AccessMode::kWrite || !a.locked) continue;
    const uint64_t dest = uint64_t{a.node} * workers + t.state<AccessState>(i).shard;
    bool dup = false;
    for (uint32_t k = 0; k < n && !dup; ++k) dup = part[k] == dest;
    if (dup) continue;
    if (n == kMaxShardsAtOnce) {
      t.fail(AbortReason::kNetwork);
      co_return false;
    }
    part[n++] = dest;
  }
  if (n <= 1) co_return true;
  if (e.measuring()) ++e.stats().votes;
  // This coordinator's word in each participant worker's region of this
  // node (the region its FAA reaches): its value before any request goes
  // is the baseline the votes add to. Never reset: a store could be lost to
  // a late vote's FAA in flight on a NIC whose atomics are not atomic with
  // respect to the CPU (IBV_ATOMIC_HCA: the FAA reads, the store lands,
  // the FAA writes), and the baseline needs none. FAAs add modulo 2^64, so
  // the difference is exactly the votes since (yes + no << 32).
  const uint32_t me = e.node(), coroutines = e.options().coroutines;
  const uint64_t slot = VoteLayout::offset(e.ctx().index, c.index(), coroutines, t.id());
  uint64_t* words[kMaxWorkersPerNode];
  uint64_t base[kMaxWorkersPerNode];
  bool seen[kMaxWorkersPerNode] = {};
  uint32_t nwords = 0;
  for (uint32_t k = 0; k < n; ++k) {
    const uint32_t j = static_cast<uint32_t>(part[k] % workers);
    if (seen[j]) continue;
    seen[j] = true;
    words[nwords] = reinterpret_cast<uint64_t*>(e.db().local_region(me, j) + slot);
    base[nwords] = std::atomic_ref<uint64_t>(*words[nwords]).load(std::memory_order_acquire);
    ++nwords;
  }
  const uint64_t id = t.id();
  rpc::Batch b(*e.ctx().rpc);
  for (uint32_t k = 0; k < n; ++k)
    if (!b.oneway(static_cast<uint32_t>(part[k]), p.vote_id, std::as_bytes(std::span(&id, 1)))) {
      t.fail(AbortReason::kNetwork);  // no buffer: nobody votes on what was not asked
      co_return false;
    }
  co_await b.send();
  // The attempt's network cost: the requests, and the participants' FAAs
  // done for it; one round trip.
  for (uint32_t k = 0; k < n; ++k) {
    c.count_verb(stats::Verb::kSend, sizeof id);
    c.count_verb(stats::Verb::kFaa, 8);
  }
  c.count_doorbell();
  c.count_round_trip();
  // The votes' wait: as long as the round trips to the participants' nodes
  // have earned (txn::MessageTimers, above the RPC timeout).
  uint64_t nodes = 0;
  for (uint32_t k = 0; k < n; ++k) nodes |= uint64_t{1} << (part[k] / workers);
  MessageTimers& timers = *p.vote_timers;
  const uint64_t sent_ns = env::tsc_to_ns(env::tsc());
  const uint64_t deadline = env::tsc() + env::ns_to_tsc(timers.timeout_ns(nodes));
  uint64_t yes = 0, no = 0;
  // The votes land silently in memory: the worker checks the count every
  // pass (poll_until), so the idle policy gives the CPU away while votes
  // are missing (a busy loop would keep a participant sharing this lcore
  // from running) but not between their landing and this resumption.
  co_await runtime::poll_until([&] {
    yes = no = 0;
    for (uint32_t w = 0; w < nwords; ++w) {
      const uint64_t v = std::atomic_ref<uint64_t>(*words[w]).load(std::memory_order_acquire) - base[w];
      yes += v & 0xffffffffu;
      no += v >> 32;
    }
    return yes + no >= n || (p.first_yes && yes > 0) || env::tsc() > deadline;
  });
  const uint64_t now_ns = env::tsc_to_ns(env::tsc());
  if (yes + no >= n)
    timers.answered(nodes, now_ns - sent_ns, true);
  else if (!(p.first_yes && yes > 0))
    timers.timed_out(nodes, sent_ns, now_ns);
  if (no == 0 && (yes == n || (p.first_yes && yes > 0))) co_return true;
  // An abort vote, a count short of the participants (a lost request or
  // vote) or past them (a late vote of an earlier attempt): no commit.
  t.fail(no > 0 ? kVoteAbort : kVoteTimeoutAbort);
  co_return false;
}

DeadlockPolicy policy_of(const std::string& s) {
  if (s == "nowait") return DeadlockPolicy::kNoWait;
  if (s == "waitdie") return DeadlockPolicy::kWaitDie;
  return DeadlockPolicy::kBoundedWait;
}

Result<std::unique_ptr<Protocol>> make(WorkerEngine& e, LockMode write_mode, bool to,
                                       LockMode scan_mode = LockMode::kS) {
  // Locks live in the shards' tables, not in tuples; the 2PC votes' FAAs
  // land on words the coordinator only loads (vote()).
  e.set_atomic_stages(0);
  // A grant carries its row: every table's tuple must fit one RPC reply.
  const Database& db = e.db();
  bool partitions = false;  // a table has a partition level
  for (TableId t = 0; t < db.tables(); ++t) partitions |= db.has_table(t) && db.def(t).parent_keys != 0;
  const bool hierarchy = partitions && !to && e.options().isolation == Isolation::kSerializable &&
                         e.options().setting_string("2pl.granularity", "partition") == "partition";
  // Rows inserted into a partition would need its IX lock before they
  // appear, which the insert path does not take: refused rather than a
  // phantom a scan could miss.
  if (hierarchy)
    for (TableId t = 0; t < db.tables(); ++t)
      if (db.has_table(t) && db.def(t).parent_keys != 0 && db.def(t).grows)
        return make_error(EINVAL,
                          "2pl: table '%s' has partitions (scans) and takes inserts; inserts take no intention "
                          "lock on their partition (set 2pl.granularity = \"record\", or scan another table)",
                          db.def(t).name.c_str());
  const uint32_t room = e.ctx().rpc->max_payload() - static_cast<uint32_t>(sizeof(ItemReply));
  for (TableId t = 0; t < db.tables(); ++t)
    if (db.has_table(t) && db.tuple_bytes(t) > room)
      return make_error(EINVAL,
                        "a lock grant carries its row, and table '%s' has %u-byte tuples; an RPC "
                        "reply holds %u (a smaller record, or another protocol)",
                        db.def(t).name.c_str(), db.tuple_bytes(t), room);
  std::unique_ptr<Lock2pl> p;
  const uint64_t rpc_ns = e.ctx().rpc_timeout_ns;
  if (to) {
    TsService::Config cfg;
    cfg.wait_ns = static_cast<uint64_t>(e.options().setting_int("to.wait_ms", 100)) * 1'000'000;
    auto svc = TsService::create(e, cfg);
    if (!svc.ok()) return svc.error();
    p = std::make_unique<Lock2pl>((*svc)->lock_handler(), (*svc)->end_handler(), 0, true, cfg.wait_ns + rpc_ns,
                                  write_mode, e.options().isolation, false, scan_mode, e.options().coroutines);
    e.add_service(std::move(*svc));
  } else {
    LockService::Config cfg;
    cfg.policy = policy_of(e.options().setting_string("2pl.policy", "bounded_wait"));
    cfg.wait_ns = static_cast<uint64_t>(e.options().setting_int("2pl.wait_ms", 100)) * 1'000'000;
    cfg.mailbox = e.options().stage(Stage::kFetch) == Primitive::kMailbox;
    // A lock call's request and reply must fit a mailbox slot.
    if (cfg.mailbox && e.ctx().rpc->max_payload() + ringlog::kEntryOverhead > MailboxLayout::kSlotBytes)
      return make_error(EINVAL, "2pl: fetch = mailbox needs RPC payloads of at most %u bytes (a mailbox slot); "
                        "this device's are %u", MailboxLayout::kSlotBytes - ringlog::kEntryOverhead,
                        e.ctx().rpc->max_payload());
    auto svc = LockService::create(e, cfg);
    if (!svc.ok()) return svc.error();
    p = std::make_unique<Lock2pl>((*svc)->lock_handler(), (*svc)->end_handler(), (*svc)->vote_handler(), false,
                                  cfg.wait_ns + rpc_ns, write_mode, e.options().isolation, hierarchy, scan_mode,
                                  e.options().coroutines);
    e.add_service(std::move(*svc));
    p->set_stage(Stage::kValidate, *p, vote);
    p->vote_timers = &e.add_message_timers();
    if (cfg.mailbox) {
      p->mail_timers = &e.add_message_timers();
      p->mail = MailboxLayout::of(e.db().nodes(), e.workers_per_node(), e.options().coroutines);
      p->mail_buf.resize(MailboxLayout::kSlotBytes / 8);
      p->mail_calls.resize(size_t{e.options().coroutines} * ItemBatch::kMaxCalls);
    }
  }
  p->set_stage(Stage::kFetch, *p, fetch);
  p->set_stage(Stage::kCommit, *p, commit);
  p->set_release(*p, release);
  return std::unique_ptr<Protocol>(std::move(p));
}

Result<std::unique_ptr<Protocol>> create(WorkerEngine& e) { return make(e, LockMode::kX, false); }
Result<std::unique_ptr<Protocol>> create_shared_writes(WorkerEngine& e) { return make(e, LockMode::kS, false); }
Result<std::unique_ptr<Protocol>> create_scan_is(WorkerEngine& e) {
  return make(e, LockMode::kX, false, LockMode::kIS);
}
Result<std::unique_ptr<Protocol>> create_first_yes(WorkerEngine& e) {
  auto p = make(e, LockMode::kX, false);
  if (p.ok()) static_cast<Lock2pl&>(**p).first_yes = true;
  return p;
}
Result<std::unique_ptr<Protocol>> create_to(WorkerEngine& e) { return make(e, LockMode::kX, true); }
Result<std::unique_ptr<Protocol>> create_to_writes_as_reads(WorkerEngine& e) { return make(e, LockMode::kS, true); }

bool no_lock_in_tuples(const std::byte*) { return false; }

// 2pl's protocol region: the 2PC vote words (VoteLayout), and the
// mailboxes with fetch = mailbox (MailboxLayout).
Result<uint64_t> region_bytes(const RegionQuery& q) {
  if (q.options != nullptr && q.options->stage(Stage::kFetch) == Primitive::kMailbox)
    return MailboxLayout::of(q.nodes, q.workers_per_node, q.coroutines).region_bytes();
  return VoteLayout::region_bytes(q.workers_per_node, q.coroutines);
}

// The deadlock policies at each isolation level, as the generated suites run
// them (2pl/<policy>[_rc|_rr]).
constexpr ProtocolSetting kNoWait[] = {{"2pl.policy", "nowait"}};
constexpr ProtocolSetting kWaitDie[] = {{"2pl.policy", "waitdie"}};
constexpr ProtocolSetting kBounded[] = {{"2pl.policy", "bounded_wait"}};
constexpr ProtocolSetting kNoWaitRc[] = {{"2pl.policy", "nowait"}, {"txn.isolation", "read_committed"}};
constexpr ProtocolSetting kWaitDieRc[] = {{"2pl.policy", "waitdie"}, {"txn.isolation", "read_committed"}};
constexpr ProtocolSetting kBoundedRc[] = {{"2pl.policy", "bounded_wait"}, {"txn.isolation", "read_committed"}};
constexpr ProtocolSetting kNoWaitRr[] = {{"2pl.policy", "nowait"}, {"txn.isolation", "repeatable_read"}};
constexpr ProtocolSetting kWaitDieRr[] = {{"2pl.policy", "waitdie"}, {"txn.isolation", "repeatable_read"}};
constexpr ProtocolSetting kBoundedRr[] = {{"2pl.policy", "bounded_wait"}, {"txn.isolation", "repeatable_read"}};
constexpr ProtocolVariant kPolicyVariants[] = {
    {"nowait", kNoWait},       {"waitdie", kWaitDie},       {"bounded_wait", kBounded},
    {"nowait_rc", kNoWaitRc},  {"waitdie_rc", kWaitDieRc},  {"bounded_wait_rc", kBoundedRc},
    {"nowait_rr", kNoWaitRr},  {"waitdie_rr", kWaitDieRr},  {"bounded_wait_rr", kBoundedRr}};
constexpr Isolation kWeakerLevels[] = {Isolation::kRepeatableRead, Isolation::kReadCommitted};

constexpr AbortReasonName k2plReasons[] = {{"lock_denied", "lock denied"},
                                           {"lock_wait_timeout", "lock wait timed out"},
                                           {"lock_table_full", "lock table full"},
                                           {"vote_abort", "2PC: a participant voted abort"},
                                           {"vote_timeout", "2PC: the votes did not all come"}};
constexpr AbortReasonName kToReasons[] = {{"too_late", "timestamp order (too late)"},
                                          {"wait_timeout", "wait for a pending write timed out"},
                                          {"table_full", "shard table full"}};

}  // namespace

constexpr ProtocolDef kLock2pl = {
    .name = "2pl",
    .summary = "strict 2PL over a lock table sharded over every worker: S/X record locks, NoWait, WaitDie or "
               "Bounded Wait (Barthels et al., VLDB 2019)",
    .meta_bytes = 0,
    .access_state_bytes = sizeof(AccessState),
    .isolation = Isolation::kSerializable,
    .strict = true,  // doc/txn.md "What each protocol promises"
    .allowed = {.fetch = {Primitive::kRpc, Primitive::kMailbox},
                .validate = {Primitive::kRpc},
                .commit = {Primitive::kOneSided}},
    .abort_reasons = k2plReasons,
    .lock_held = no_lock_in_tuples,
    .create = create,
    .region_bytes = region_bytes,
    .add_schema = add_schema,
    .variants = kPolicyVariants,
    .weaker_levels = kWeakerLevels,
};

// Broken on purpose (tests only): writes take S locks, so two writers of a
// row both hold it and one's update is lost. The history check catches it
// (BrokenProtocol.SharedWriteLocksAreCaught).
constexpr ProtocolDef kLock2plSharedWrites = broken_variant(
    kLock2pl, "2pl-broken-sharedwrites", "2pl with S locks for writes (broken on purpose: tests only)",
    create_shared_writes);

// Broken on purpose (tests only): a scan takes IS on its partition instead
// of S, so a writer's IX gets past it and the scan reads some rows before
// the writer's commit and others after (BrokenProtocol.ScanIntentionLocksAreCaught).
constexpr ProtocolDef kLock2plScanIs =
    broken_variant(kLock2pl, "2pl-broken-scanis",
                   "2pl whose scans take IS on their partition (broken on purpose: tests only)", create_scan_is);

// Broken on purpose (tests only): the 2PC commits on the first yes vote, so
// an attempt commits although another participant voted abort or never
// voted; that participant refuses the commit (kLockVotedNo), a commit error
// (BrokenProtocol.FirstYesVoteCommitIsCaught).
constexpr ProtocolDef kLock2plFirstYes =
    broken_variant(kLock2pl, "2pl-broken-firstyes",
                   "2pl whose 2PC commits on the first yes vote (broken on purpose: tests only)", create_first_yes);

// Timestamp ordering: the item's rts and wts are the tuple's two protocol
// words (zero in a new tuple: a row no one can have read before its
// inserter's guard, txn.hpp). A row that moves would lose them: refused.
constexpr ProtocolDef kTo = {
    .name = "to",
    .summary = "timestamp ordering at the lock-table shards: timestamped reads and writes, late ones abort, "
               "younger ones wait for a pending write (Barthels et al., VLDB 2019, 3.2.2)",
    .meta_bytes = 16,
    .access_state_bytes = sizeof(AccessState),
    .isolation = Isolation::kSerializable,
    .strict = false,  // timestamps from each node's clock: one invoked later may be ordered first (doc/txn.md)
    .timestamp_order = true,
    .allowed = {.fetch = {Primitive::kRpc}, .commit = {Primitive::kOneSided}},
    .abort_reasons = kToReasons,
    .lock_held = no_lock_in_tuples,
    .create = create_to,
    .add_schema = add_schema_to,
    .relocates_rows = false,
};

// Broken on purpose (tests only): writes are asked for as reads, so no
// write is ever pending and two writers of a row overwrite each other
// (BrokenProtocol.UnorderedWritesAreCaught).
constexpr ProtocolDef kToWritesAsReads =
    broken_variant(kTo, "to-broken-writesasreads", "to with writes asked for as reads (broken on purpose: tests only)",
                   create_to_writes_as_reads);

RDTX_REGISTER_PROTOCOL(kLock2pl)
RDTX_REGISTER_PROTOCOL(kLock2plSharedWrites)
RDTX_REGISTER_PROTOCOL(kLock2plScanIs)
RDTX_REGISTER_PROTOCOL(kLock2plFirstYes)
RDTX_REGISTER_PROTOCOL(kTo)
RDTX_REGISTER_PROTOCOL(kToWritesAsReads)

}  // namespace rdtx::cc::twopl
