// CALVIN's sequencer (calvin.cpp describes the protocol): per epoch, a
// member's batch, generated or replayed (next_batch(), with the ids it
// mints), broadcast to every counterpart (broadcast(): one-sided WRITEs, or
// RPC calls by call_in_chunks()), taken in by the batch RPC handler
// (handle_batch()), awaited from every node (wait_batches()), and ordered
// into the epoch's plan, whose lock requests go to the node's lock manager
// shards (plan_epoch()).
#include <algorithm>
#include <bit>
#include <cstring>

#include "cc/calvin/calvin_impl.hpp"
#include "env/tsc.hpp"
#include "runtime/shutdown.hpp"

namespace rdtx::cc::calvin::detail {

namespace {

// The active member that counts a transaction: its home if active, else
// the first.
uint32_t reporter_in(uint64_t active, uint32_t home) {
  return (active >> home & 1) != 0 ? home : static_cast<uint32_t>(std::countr_zero(active));
}

// The node an id names.
uint32_t txn_node_of(uint64_t id) { return txn::txn_node(id); }

uint64_t batch_checksum(uint64_t received, const std::byte* crs, uint64_t bytes) {
  return checksum_words(checksum_start(received), crs, 0, static_cast<uint32_t>(bytes));
}

}  // namespace

bool Calvin::next_batch(Coordinator& c, uint32_t* count, bool* final) {
  CoState& cs = co_[c.index()];
  std::byte* crs = at(g_.staging(c.index())) + sizeof(BatchMsg);
  const Workload& wl = e_.workload();
  if (!cs.replay.empty()) {
    // Replay: the recorded batch as it was (timestamps and ids included),
    // whether or not the worker is stopping (its run.duration_s is not the
    // recording's), so that every member runs the same epochs; past the
    // recording, or once SIGINT or SIGTERM asked the process to stop, an
    // empty final batch (a replay is as interruptible as a run: the members
    // end with the epochs they have, as when generated inputs stop).
    *count = 0;
    *final = true;
    if (cs.replay_at + 8 <= cs.replay.size() && !runtime::shutdown_requested()) {
      uint64_t w;
      std::memcpy(&w, cs.replay.data() + cs.replay_at, 8);
      const uint64_t n = w & kCountMask;
      if (n > s_.epoch_size || cs.replay_at + 8 + n * g_.cr_bytes > cs.replay.size()) {
        fail(c, "calvin.replay: a batch of %llu inputs at byte %zu (calvin.epoch_size %u, file of %zu bytes)",
             static_cast<unsigned long long>(n), cs.replay_at, s_.epoch_size, cs.replay.size());
        return false;
      }
      std::memcpy(crs, cs.replay.data() + cs.replay_at + 8, n * g_.cr_bytes);
      cs.replay_at += 8 + n * g_.cr_bytes;
      *count = static_cast<uint32_t>(n);
      *final = (w & kFinal) != 0;
    }
    for (uint32_t i = 0; i < *count; ++i) cs.gen_tsc[i] = env::tsc();
    record_batch(cs, crs, *count, *final);
    return true;
  }
  *final = runtime::Worker::current()->stopping();
  *count = *final ? 0 : s_.epoch_size;
  DeclaredSet check;
  for (uint32_t i = 0; i < *count; ++i) {
    Cr cr{};
    wl.generate(c.rng(), me_, cr.in);
    if (!wl.declare(cr.in, check) || check.n > g_.max_accesses) {
      fail(c, "workload '%s' generated a transaction of type %u with %u accesses; calvin.max_accesses is %u",
           wl.name(), cr.in.type, check.n, g_.max_accesses);
      return false;
    }
    cr.id = mint_id(c, cs, cr.in, check);
    cr.ts = c.take_timestamp();
    cs.gen_tsc[i] = env::tsc();  // latency includes waiting for the epoch
    std::memcpy(crs + i * g_.cr_bytes, &cr, sizeof cr);
  }
  record_batch(cs, crs, *count, *final);
  return true;
}

// The members that execute a transaction that writes on the nodes
// `writers` (Plan::active): those and its home, or (calvin.active =
// writers, RCC's sync_reads) those alone, the home if there are none.
uint64_t Calvin::active_of(uint64_t writers, uint32_t home) const {
  return s_.home_executes || writers == 0 ? writers | uint64_t{1} << home : writers;
}

// The member that reports a transaction (Plan::reporter), from its input
// and declared set at home: as plan_epoch() finds it on every member.
uint32_t Calvin::reporter_of(const TxnInput& in, const DeclaredSet& d) const {
  const Database& db = e_.db();
  uint64_t writers = 0;
  for (uint32_t j = 0; j < d.n; ++j)
    if (d.e[j].mode == AccessMode::kWrite) writers |= uint64_t{1} << db.owner(d.e[j].table, d.e[j].key);
  return reporter_in(active_of(writers, in.home_node), in.home_node);
}

// A transaction's id. The member that reports it records it in its history,
// where every id must be that member's own (node, worker, coroutine): with
// calvin.active = writers the home mints it in its reporter's name, the
// sequence number carrying the home (64 nodes at most, so ids of one name
// are reused after 2^26 per coordinator, not 2^32).
uint64_t Calvin::mint_id(Coordinator& c, CoState& cs, const TxnInput& in, const DeclaredSet& d) {
  if (s_.home_executes) return c.take_txn_id();
  const uint32_t seq = (++cs.minted << 6) | me_;
  return make_txn_id(reporter_of(in, d), e_.ctx().index, c.index(), seq);
}

// Sends this member's batch of `epoch` (already in the staging area after a
// BatchMsg header) to every counterpart, itself included (locally).
Task<bool> Calvin::broadcast(Coordinator& c, uint64_t epoch, uint32_t count, bool final) {
  const uint32_t co = c.index();
  std::byte* st = at(g_.staging(co));
  BatchMsg m{co, me_, 0, 0, (epoch << 32) | (final ? kFinal : 0) | count, 0};
  const uint64_t bytes = count * g_.cr_bytes;
  m.checksum = batch_checksum(m.received, st + sizeof m, bytes);
  std::memcpy(st, &m, sizeof m);
  // Itself: straight into its own CRB.
  std::byte* own = at(g_.crb(co, me_, epoch));
  std::memcpy(own + 16, st + sizeof m, bytes);
  std::memcpy(own + 8, &m.checksum, 8);
  word_at(own).store(m.received, std::memory_order_release);
  if (nodes_ == 1) co_return true;
  const uint64_t since = env::tsc();
  if (o_.stage(Stage::kSequence) != Primitive::kRpc) {
    // b1/b2: one WRITE of checksum + CRs at CR1's offset (the checksum word
    // just before it), then the 8-byte WRITE of the received word; one
    // doorbell per node, one wait for all.
    for (;;) {
      OneSidedBatch& b = c.onesided();
      for (uint32_t d = 0; d < nodes_; ++d) {
        if (d == me_) continue;
        const RegionDescriptor& rd = e_.db().region(d, e_.ctx().index);
        const uint64_t remote = rd.addr + g_.crb(co, me_, epoch);
        b.write({d, remote + 8, rd.rkey}, st + 24, static_cast<uint32_t>(8 + bytes), 0, lkey_);  // the checksum, then the CRs
        b.write({d, remote, rd.rkey}, st + 16, 8, 0, lkey_);  // the received word
      }
      if (co_await b.execute()) co_return true;
      // A failed WRITE (its QP was reconnected): send the whole batch again.
      if (stalled(c, since, "the completion of a batch WRITE", me_)) co_return false;
      co_await runtime::poll_wait();
    }
  }
  // a1-a3: a call per counterpart and chunk, each re-sent until answered
  // (a datagram lost): the group cannot go on without it.
  uint64_t others = 0;
  for (uint32_t d = 0; d < nodes_; ++d)
    if (d != me_) others |= uint64_t{1} << d;
  co_return co_await call_in_chunks(c, batch_handler_, st, m, bytes, batch_chunk_, others,
                                    co_[co].batch_replies.data(), since, "an answer to a batch");
}

// a3 (RPC): a chunk of the batch of `src` into this member's CRB, at its
// offset, with the received word and the checksum of the whole batch.
// Idempotent: a chunk of an epoch older than the one the CRB holds (a late
// copy of an old batch) is ignored, and one of the CRB's epoch is another
// chunk or a resend of one (the same bytes); nothing is granted, so there
// is no fence. The member takes the batch once its checksum matches
// (wait_batches).
void Calvin::handle_batch(rpc::Request& r) {
  const std::span<const std::byte> p = r.payload();
  BatchMsg m;
  if (p.size() < sizeof m) return;
  std::memcpy(&m, p.data(), sizeof m);
  const uint64_t count = m.received & kCountMask;
  const uint64_t bytes = count * g_.cr_bytes;
  const uint64_t chunk = p.size() - sizeof m;
  if (m.co >= g_.coroutines || m.src >= nodes_ || count > g_.epoch_size || m.offset > bytes ||
      chunk > bytes - m.offset || (chunk == 0 && bytes != 0) || (m.received >> 32) == 0)
    return;  // malformed: no answer changes anything, the caller re-sends
  std::byte* crb = at(g_.crb(m.co, m.src, m.received >> 32));
  const uint64_t held = word_at(crb).load(std::memory_order_acquire);
  if ((held >> 32) > (m.received >> 32)) return;
  std::memcpy(crb + 16 + m.offset, p.data() + sizeof m, chunk);
  std::memcpy(crb + 8, &m.checksum, 8);
  // release: the CRs before the word the member polls.
  word_at(crb).store(m.received, std::memory_order_release);
}

// b3: polls the CRBs until every node's batch of `epoch` is complete.
//
// Why two CRBs (epoch parity) per source are enough: a member sends its
// batch of e+1 only after executing e, which needs every member's batch of
// e. So when source S writes its batch of e+2 into the CRB that held e, S
// has received this member's batch of e+1, which this member sent only
// after executing e: it no longer reads the batches of e. But S may write
// e+1 while this member still waits for another node's batch of e: hence
// the second buffer. (The CFB needs no parity: a member forwards values of
// epoch e+1 only after receiving every batch of e+1, including that of the
// receiver, who sends it only after executing e.)
Task<bool> Calvin::wait_batches(Coordinator& c, uint64_t epoch, bool* last) {
  const uint32_t co = c.index();
  const uint64_t since = env::tsc();
  *last = false;
  for (uint32_t src = 0; src < nodes_;) {
    std::byte* crb = at(g_.crb(co, src, epoch));
    // acquire: the CRs of a batch written locally (RPC handler) before it.
    const uint64_t w = word_at(crb).load(std::memory_order_acquire);
    if ((w >> 32) == epoch) {
      uint64_t sum;
      std::memcpy(&sum, crb + 8, 8);
      // The received word may land before the CRs' words: trust the batch
      // only when its checksum matches.
      if (batch_checksum(w, crb + 16, (w & kCountMask) * g_.cr_bytes) == sum) {
        *last |= (w & kFinal) != 0;
        ++src;
        continue;
      }
    }
    if (stalled(c, since, "the batch of an epoch", src)) co_return false;
    co_await runtime::poll_wait();
  }
  runtime::note_work();  // the epoch is planned next, in this pass
  co_return true;
}

// a4/b4: every transaction of the epoch, in timestamp order, planned for
// this member; its requests published to the lock manager.
bool Calvin::plan_epoch(Coordinator& c, uint64_t epoch, bool last) {
  const uint32_t co = c.index();
  CoState& cs = co_[co];
  const Workload& wl = e_.workload();
  Database& db = e_.db();
  uint32_t n = 0;
  for (uint32_t src = 0; src < nodes_; ++src) {
    const std::byte* crb = at(g_.crb(co, src, epoch));
    const uint64_t count = word_at(const_cast<std::byte*>(crb)).load(std::memory_order_relaxed) & kCountMask;
    for (uint32_t i = 0; i < count; ++i) {
      Plan& p = cs.plans[n++];
      p = Plan{};
      p.cr = reinterpret_cast<const Cr*>(crb + 16 + i * g_.cr_bytes);
      p.src = src;
      p.index = i;
    }
  }
  std::sort(cs.plans.begin(), cs.plans.begin() + n, [](const Plan& a, const Plan& b) { return a.cr->ts < b.cr->ts; });
  std::fill(cs.counts.begin(), cs.counts.end(), 0);
  for (uint32_t k = 0; k < n; ++k) {
    Plan& p = cs.plans[k];
    DeclaredSet& declared = cs.declared;
    declared.n = 0;
    if (!wl.declare(p.cr->in, declared) || declared.n > g_.max_accesses) {
      fail(c, "transaction %llx (type %u) declares %u accesses, calvin.max_accesses is %u",
           static_cast<unsigned long long>(p.cr->id), p.cr->in.type, declared.n, g_.max_accesses);
      return false;
    }
    std::copy_n(declared.e, declared.n, cs.entries.begin() + static_cast<std::ptrdiff_t>(size_t{k} * cs.max_accesses));
    cs.declared_n[k] = declared.n;
    const SetView d = cs.set(k);
    p.active = 0;  // the nodes it writes on, first
    std::byte** tuples = cs.tuples_of(k);
    for (uint32_t j = 0; j < d.n; ++j) {
      const uint32_t owner = db.owner(d.e[j].table, d.e[j].key);
      p.readers |= uint64_t{1} << owner;
      if (d.e[j].mode == AccessMode::kWrite) p.active |= uint64_t{1} << owner;
      tuples[j] = nullptr;
      if (owner != me_) continue;
      ++p.nlocal;
      store::TupleRef ref;
      if (db.store(me_).table(d.e[j].table)->lookup(d.e[j].key, &ref) != 0) continue;
      tuples[j] = ref.tuple;
      // Its lock in the record's shard: one request per shard it touches.
      const uint32_t s = shard_of(d.e[j].table, d.e[j].key, shards_);
      uint32_t& q = cs.requests[size_t{k} * shards_ + s];
      LockManager& lm = *lms_->shard[s];
      if (!(p.shards >> s & 1)) {
        p.shards |= uint64_t{1} << s;
        q = cs.counts[s]++;
        LockManager::Request& r = lm.request(group(c), epoch, q);
        r.ts = p.cr->ts;
        r.id = p.cr->id;
      }
      lm.add_record(group(c), epoch, q, ref.tuple);
    }
    p.active = active_of(p.active, p.cr->in.home_node);
    p.reporter = reporter_in(p.active, p.cr->in.home_node);
    // It is recorded under its id, which names the reporter (mint_id()):
    // inputs replayed from a run with another calvin.active do not.
    if (txn_node_of(p.cr->id) != p.reporter) {
      fail(c, "transaction %llx: its id names node %u, its reporter is node %u (calvin.replay of inputs "
           "recorded with another calvin.active?)",
           static_cast<unsigned long long>(p.cr->id), txn_node_of(p.cr->id), p.reporter);
      return false;
    }
    p.waiting = p.readers & ~(uint64_t{1} << me_);
  }
  for (uint32_t s = 0; s < shards_; ++s) lms_->shard[s]->publish(group(c), epoch, cs.counts[s], last);
  cs.publish_tsc = env::tsc();
  cs.epoch = epoch;
  return true;
}

}  // namespace rdtx::cc::calvin::detail
