// NOWAIT and WAITDIE (RCC sections 4.2 and 4.3).
//
// Tuple metadata: word 0 is the lock: 0 when free, else the holder's lock
// value — its transaction id (NOWAIT) or its timestamp (WAITDIE, so that a
// requester can compare priorities with the holder it finds there).
//
// fetch    one-sided: CAS(lock, 0 -> value) and READ of the tuple in one
//          doorbell per node (the READ is ignored if the CAS failed);
//          RPC: the owner's handler CASes locally and replies with the tuple.
//          On a conflict NOWAIT aborts; WAITDIE waits if it is older than the
//          holder (one-sided: retries CAS+READ after yielding; RPC: the
//          handler parks the request and a poller retries it, never blocking
//          the loop) and dies otherwise.
// commit   write-back of written records and unlock: WRITE record, WRITE
//          lock = 0 in order on each QP (one-sided), or one message per node
//          (RPC). With passive ACK nobody waits for it.
// abort    unlock everything held.
#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include "cc/twopl/twopl.hpp"
#include "env/tsc.hpp"
#include "store/tuple.hpp"
#include "txn/engine.hpp"
#include "txn/item_batch.hpp"
#include "txn/locate.hpp"

namespace rdtx::cc::twopl {

using namespace rdtx::txn;
using runtime::Task;

namespace {

constexpr uint32_t kLockOff = 0;
constexpr int kRelocateAttempts = 4;

enum class Policy { kNoWait, kWaitDie };
enum Handler : rpc::HandlerId { kLockReadRpc = 20, kCommitRpc, kReleaseRpc };
enum ItemStatus : int32_t { kOk = 0, kConflict = 1, kDie = 2, kNotAttempted = 3, kNotHeld = 4 };

uint64_t word(const std::byte* p, uint32_t off) {
  uint64_t v;
  std::memcpy(&v, p + off, 8);
  return v;
}
void set_word(std::byte* p, uint32_t off, uint64_t v) { std::memcpy(p + off, &v, 8); }
std::atomic_ref<uint64_t> lock_word(std::byte* tuple) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(tuple + kLockOff));
}

class TwoPl;

// WAITDIE's parked RPC lock requests on the owner: the request's remaining
// items are retried by a poller until granted, or until the holder found is
// older than the requester (die). Fixed capacity, no allocation after start.
class ParkingLot {
 public:
  // A request waits at most max_wait_ns, then dies: its caller must hear
  // back before its RPC timeout, or a lock granted after it gave up would
  // never be released.
  ParkingLot(TwoPl& p, uint32_t capacity, uint32_t max_payload, uint64_t max_wait_ns);
  // Parks a request whose items [next, ...) are still to be granted, with
  // the reply written so far. False if the lot is full.
  bool park(rpc::Request& r, uint32_t next, std::span<const std::byte> reply_so_far, const std::byte* tuple,
            uint64_t ts);
  bool has_room() const { return used_ < entries_.size(); }
  // True if a request older than `ts` waits for `tuple`: the lock's waiting
  // list comes before a requester that finds the lock free (no barging), so
  // an old transaction is not starved by a stream of younger ones.
  bool older_waiter(const std::byte* tuple, uint64_t ts) const;
  int poll();

 private:
  struct Entry {
    bool used = false;
    rpc::Deferred token;
    std::vector<std::byte> req;
    uint32_t req_len = 0;
    uint32_t next = 0;
    std::vector<std::byte> reply;
    uint32_t reply_len = 0;
    const std::byte* tuple = nullptr;  // what item `next` waits for
    uint64_t ts = 0;                   // the requester's timestamp
    uint64_t parked_at = 0;            // TSC
  };
  TwoPl& p_;
  std::vector<Entry> entries_;
  uint32_t used_ = 0;
  uint64_t max_wait_tsc_ = 0;
};

class TwoPl final : public Protocol {
 public:
  TwoPl(WorkerEngine& e, Policy policy);

  Task<bool> fetch(Coordinator& c, Txn& t, uint32_t from) override;
  Task<bool> commit(Coordinator& c, Txn& t) override;
  Task<void> abort(Coordinator& c, Txn& t) override {
    const uint64_t t0 = c.phase_clock();
    co_await release(c, t, false);
    c.add_phase(Phase::kRelease, t0);
  }

  // Owner side: processes items [first, ...) of a lock+read request into
  // `out`; returns the index of an item that must wait (WAITDIE), or -1 when
  // every item got an answer.
  // `can_wait`: false turns a wait into a die. *wait_tuple: the tuple of
  // the item that waits.
  int serve_lock_read(std::span<const std::byte> payload, uint32_t first, std::span<std::byte> out, uint32_t* out_len,
                      bool can_wait, const std::byte** wait_tuple);
  rpc::Endpoint& endpoint() { return *e_.ctx().rpc; }

 private:
  uint64_t lock_value(const Txn& t) const { return policy_ == Policy::kWaitDie ? t.timestamp() : t.id(); }
  // What a requester with `mine` does about a holder with `holder`.
  ItemStatus on_conflict(uint64_t mine, uint64_t holder) const {
    if (policy_ == Policy::kNoWait) return kConflict;
    return mine < holder ? kOk /* older: wait */ : kDie;
  }
  Task<bool> fetch_onesided(Coordinator& c, Txn& t, uint32_t from);
  Task<bool> fetch_rpc(Coordinator& c, Txn& t, uint32_t from);
  Task<void> release(Coordinator& c, Txn& t, bool write_back);
  void register_handlers();

  WorkerEngine& e_;
  const Options& o_;
  Policy policy_;
  std::unique_ptr<ParkingLot> lot_;
};

TwoPl::TwoPl(WorkerEngine& e, Policy policy) : e_(e), o_(e.options()), policy_(policy) {
  register_handlers();
  if (policy_ == Policy::kWaitDie) {
    lot_ = std::make_unique<ParkingLot>(*this, 256, e.ctx().rpc->max_payload(), e.ctx().rpc_timeout_ns / 4);
    ParkingLot* lot = lot_.get();
    e.ctx().worker->add_poller([lot] { return lot->poll(); });
  }
}

Task<bool> TwoPl::fetch(Coordinator& c, Txn& t, uint32_t from) {
  // One await per statement: GCC 12 leaks the frame of a co_await operand
  // inside ?: or ||.
  bool ok;
  if (o_.stage(Stage::kFetch) == Primitive::kRpc) {
    ok = co_await fetch_rpc(c, t, from);
  } else {
    ok = co_await fetch_onesided(c, t, from);
  }
  if (!ok) {
    const uint64_t t0 = c.phase_clock();
    co_await release(c, t, false);
    c.add_phase(Phase::kRelease, t0);
  }
  co_return ok;
}

Task<bool> TwoPl::fetch_onesided(Coordinator& c, Txn& t, uint32_t from) {
  const uint32_t to = t.size();
  const uint64_t mine = lock_value(t);
  for (int relocations = 0; relocations < kRelocateAttempts;) {
    if (!co_await locate_onesided(c, t, from, to)) co_return false;
    OneSidedBatch& batch = c.onesided();
    for (uint32_t i = from; i < to; ++i) {
      Access& a = t.access(i);
      if (a.fetched) continue;
      const auto& d = c.descriptor(a.node, a.table);
      set_word(c.extra(i), 0, UINT64_MAX);  // stays if the CAS never executed
      rdma::WorkRequest* cas = batch.add(a.node);
      cas->opcode = rdma::Opcode::kCompareSwap;
      cas->local = c.extra(i);
      cas->length = 8;
      cas->remote_addr = a.tuple_addr + kLockOff;
      cas->rkey = d.rkey;
      cas->compare_add = 0;
      cas->swap = mine;
      rdma::WorkRequest* rd = batch.add(a.node);
      rd->opcode = rdma::Opcode::kRead;
      rd->local = a.copy;
      rd->length = c.db().tuple_bytes(a.table);
      rd->remote_addr = a.tuple_addr;
      rd->rkey = d.rkey;
    }
    bool posted = co_await batch.execute();
    bool waiting = false, relocate = false;
    ItemStatus verdict = kOk;
    for (uint32_t i = from; i < to; ++i) {
      Access& a = t.access(i);
      if (a.fetched) continue;
      uint64_t old = word(c.extra(i), 0);
      if (old == 0) a.locked = true;
      if (!posted) continue;
      if (!check_fetched(c, a)) {
        relocate = true;  // a stale location: unlock if we locked it, look up again
        if (a.locked) {
          OneSidedBatch& un = c.onesided();
          un.add_unlock(a);
          co_await un.execute();
          a.locked = false;
        }
        continue;
      }
      if (old == 0) {
        if (c.db().recording()) a.writer = a.replaced = word(a.copy, c.db().history_word_offset());
        a.fetched = true;
        continue;
      }
      ItemStatus s = on_conflict(mine, old);
      if (s == kOk) waiting = true;
      else if (verdict == kOk) verdict = s;
    }
    if (!posted) {
      t.fail(AbortReason::kNetwork);
      co_return false;
    }
    if (verdict != kOk) {
      t.fail(verdict == kDie ? AbortReason::kWaitDie : AbortReason::kLockConflict);
      co_return false;
    }
    if (relocate) ++relocations;
    if (!waiting && !relocate) co_return true;
    // Older than every holder we met: let them finish, then try again.
    if (waiting) co_await runtime::yield();
  }
  t.fail(AbortReason::kNotFound);
  co_return false;
}

Task<bool> TwoPl::fetch_rpc(Coordinator& c, Txn& t, uint32_t from) {
  ItemBatch& batch = c.items(kLockReadRpc);
  for (uint32_t i = from; i < t.size(); ++i) {
    Access& a = t.access(i);
    if (!batch.add(i, lock_value(t), 0, {}, c.db().tuple_bytes(a.table))) {
      t.fail(AbortReason::kNetwork);
      co_return false;
    }
  }
  bool ok = co_await batch.call();
  AbortReason why = AbortReason::kNone;
  bool wellformed = batch.for_each_reply([&](uint32_t i, const ItemReply& r, std::span<const std::byte> data) {
    Access& a = t.access(i);
    if (r.status == kOk && data.size() == c.db().tuple_bytes(a.table)) {
      a.locked = true;
      std::memcpy(a.copy, data.data(), data.size());
      remember_location(c, a, r.tuple_index, r.state);
      if (c.db().recording()) a.writer = a.replaced = word(a.copy, c.db().history_word_offset());
      a.fetched = true;
      return;
    }
    if (why != AbortReason::kNone) return;
    if (r.status == kConflict) why = AbortReason::kLockConflict;
    else if (r.status == kDie) why = AbortReason::kWaitDie;
    else if (r.status == -ENOENT) why = AbortReason::kNotFound;
    else if (r.status != kNotAttempted) why = AbortReason::kNetwork;
  });
  if (!ok || !wellformed) why = why == AbortReason::kNone ? AbortReason::kNetwork : why;
  if (why != AbortReason::kNone) {
    t.fail(why);
    co_return false;
  }
  co_return true;
}

Task<bool> TwoPl::commit(Coordinator& c, Txn& t) {
  const bool rec = c.db().recording();
  for (uint32_t i = 0; i < t.size(); ++i) {
    Access& a = t.access(i);
    if (a.mode == AccessMode::kWrite && rec) set_word(a.copy, c.db().history_word_offset(), t.id());
  }
  const uint64_t t0 = c.phase_clock();
  co_await release(c, t, true);
  c.add_phase(Phase::kCommit, t0);
  co_return true;  // all locks were held: the transaction is serialized
}

// Unlocks everything held, writing back written records first when
// `write_back` (commit); abort releases only.
Task<void> TwoPl::release(Coordinator& c, Txn& t, bool write_back) {
  bool any = false;
  for (uint32_t i = 0; i < t.size(); ++i) any |= t.access(i).locked;
  if (!any) co_return;
  const uint64_t mine = lock_value(t);
  if (o_.stage(Stage::kCommit) == Primitive::kRpc) {
    ItemBatch& batch = c.items(write_back ? kCommitRpc : kReleaseRpc);
    for (uint32_t i = 0; i < t.size(); ++i) {
      Access& a = t.access(i);
      if (!a.locked) continue;
      std::span<const std::byte> data;
      if (write_back && a.mode == AccessMode::kWrite)
        data = std::span<const std::byte>(a.copy + 8, c.db().tuple_bytes(a.table) - 8);
      batch.add(i, mine, 0, data, 0);
    }
    if (o_.passive_ack) {
      if (!batch.send_passive(false)) ++e_.stats().commit_errors;
    } else {
      bool ok = co_await batch.call();
      batch.for_each_reply([&](uint32_t, const ItemReply& r, std::span<const std::byte>) { ok &= r.status == kOk; });
      if (!ok) ++e_.stats().commit_errors;
    }
  } else {
    OneSidedBatch& batch = c.onesided();
    for (uint32_t i = 0; i < t.size(); ++i) {
      Access& a = t.access(i);
      if (!a.locked) continue;
      uint32_t rkey = c.descriptor(a.node, a.table).rkey;
      if (write_back && a.mode == AccessMode::kWrite) {
        rdma::WorkRequest* wr = batch.add(a.node);
        wr->opcode = rdma::Opcode::kWrite;
        wr->local = a.copy + 8;
        wr->length = c.db().tuple_bytes(a.table) - 8;
        wr->remote_addr = a.tuple_addr + 8;
        wr->rkey = rkey;
      }
      batch.add_unlock(a);
    }
    if (o_.passive_ack) {
      if (!batch.post_only(c.pending_commit())) ++e_.stats().commit_errors;
    } else if (!co_await batch.execute()) {
      ++e_.stats().commit_errors;
    }
  }
  for (uint32_t i = 0; i < t.size(); ++i) t.access(i).locked = false;
}

int TwoPl::serve_lock_read(std::span<const std::byte> payload, uint32_t first, std::span<std::byte> out,
                           uint32_t* out_len, bool can_wait, const std::byte** wait_tuple) {
  Database& db = e_.db();
  store::Store& st = db.store(e_.node());
  ItemReader in(payload);
  ItemHeader h;
  std::span<const std::byte> data;
  uint32_t len = *out_len;
  auto put = [&](const ItemReply& rep, const store::Table* tab, const store::TupleRef* ref) {
    uint32_t n = tab ? tab->tuple_bytes() : 0;
    if (out.size() < len + sizeof rep + pad8(n)) return false;
    ItemReply r = rep;
    r.len = n;
    std::memcpy(out.data() + len, &r, sizeof r);
    if (tab) {
      // The tuple is ours (locked): a plain word copy is consistent.
      store::load_words(reinterpret_cast<uint64_t*>(out.data() + len + sizeof r),
                        reinterpret_cast<const uint64_t*>(ref->tuple), n / 8);
    }
    len += sizeof r + pad8(n);
    return true;
  };
  bool stopped = false;
  for (uint32_t k = 0; in.next(&h, &data); ++k) {
    if (k < first) continue;
    if (stopped) {
      put({kNotAttempted, 0, 0, 0, 0}, nullptr, nullptr);
      continue;
    }
    store::Table* tab = st.table(h.table);
    store::TupleRef ref;
    int rc = tab ? tab->lookup(h.key, &ref) : -EINVAL;
    if (rc != 0) {
      put({rc, 0, 0, 0, 0}, nullptr, nullptr);
      stopped = true;
      continue;
    }
    uint64_t holder = 0;
    const bool queued = policy_ == Policy::kWaitDie && lot_->older_waiter(ref.tuple, h.arg0);
    if (!queued && lock_word(ref.tuple).compare_exchange_strong(holder, h.arg0, std::memory_order_acquire)) {
      put({kOk, 0, ref.index, ref.state, 0}, tab, &ref);
      continue;
    }
    // Behind an older waiter, a requester is younger than someone waiting: it dies.
    ItemStatus s = queued ? kDie : on_conflict(h.arg0, holder);
    if (s == kOk && !can_wait) s = kDie;
    if (s == kOk) {  // older than the holder: wait here
      *out_len = len;
      *wait_tuple = ref.tuple;
      return static_cast<int>(k);
    }
    put({s, 0, 0, 0, holder}, nullptr, nullptr);
    stopped = true;
  }
  *out_len = len;
  return -1;
}

ParkingLot::ParkingLot(TwoPl& p, uint32_t capacity, uint32_t max_payload, uint64_t max_wait_ns)
    : p_(p), entries_(capacity), max_wait_tsc_(env::ns_to_tsc(max_wait_ns)) {
  for (auto& e : entries_) {
    e.req.resize(max_payload);
    e.reply.resize(max_payload);
  }
}

bool ParkingLot::older_waiter(const std::byte* tuple, uint64_t ts) const {
  if (used_ == 0) return false;
  for (const auto& e : entries_)
    if (e.used && e.tuple == tuple && e.ts < ts) return true;
  return false;
}

bool ParkingLot::park(rpc::Request& r, uint32_t next, std::span<const std::byte> reply_so_far, const std::byte* tuple,
                      uint64_t ts) {
  if (used_ == entries_.size() || r.payload().size() > entries_[0].req.size()) return false;
  for (auto& e : entries_) {
    if (e.used) continue;
    e.used = true;
    std::memcpy(e.req.data(), r.payload().data(), r.payload().size());
    e.req_len = static_cast<uint32_t>(r.payload().size());
    std::memcpy(e.reply.data(), reply_so_far.data(), reply_so_far.size());
    e.reply_len = static_cast<uint32_t>(reply_so_far.size());
    e.next = next;
    e.tuple = tuple;
    e.ts = ts;
    e.parked_at = env::tsc();
    e.token = r.defer();
    ++used_;
    return true;
  }
  return false;
}

int ParkingLot::poll() {
  if (used_ == 0) return 0;
  int work = 0;
  const uint64_t now = env::tsc();
  for (auto& e : entries_) {
    if (!e.used) continue;
    const std::byte* tuple = nullptr;
    const bool may_wait = now - e.parked_at < max_wait_tsc_;
    // Retrying, this entry must not see itself as an older waiter.
    e.used = false;
    int wait = p_.serve_lock_read(std::span<const std::byte>(e.req.data(), e.req_len), e.next, e.reply, &e.reply_len,
                                  may_wait, &tuple);
    e.used = true;
    if (wait >= 0) {
      if (static_cast<uint32_t>(wait) != e.next) ++work;
      e.next = static_cast<uint32_t>(wait);
      e.tuple = tuple;
      continue;
    }
    p_.endpoint().reply(e.token, std::span<const std::byte>(e.reply.data(), e.reply_len));
    e.used = false;
    --used_;
    ++work;
  }
  return work;
}

void TwoPl::register_handlers() {
  rpc::Endpoint& ep = *e_.ctx().rpc;
  Database& db = e_.db();
  const uint32_t node = e_.node();
  (void)ep.register_handler(kLockReadRpc, policy_ == Policy::kNoWait ? "nowait.lock_read" : "waitdie.lock_read",
                            [this](rpc::Request& r) {
                              uint32_t len = 0;
                              // With no room left to park, an older requester dies
                              // rather than block the loop.
                              bool can_wait = lot_ && lot_->has_room();
                              const std::byte* tuple = nullptr;
                              int wait = serve_lock_read(r.payload(), 0, r.reply_buffer(), &len, can_wait, &tuple);
                              if (wait >= 0) {
                                ItemReader in(r.payload());
                                ItemHeader h{};
                                std::span<const std::byte> d;
                                in.next(&h, &d);  // every item carries the requester's lock value
                                lot_->park(r, static_cast<uint32_t>(wait),
                                           std::span<const std::byte>(r.reply_buffer().data(), len), tuple, h.arg0);
                                return;
                              }
                              r.set_reply_len(len);
                            });
  const store::Store& st = db.store(node);
  auto unlock_items = [&st](rpc::Request& r, bool write_back) {
    serve_items(r, st, [write_back](const ItemHeader& h, std::span<const std::byte> data, int rc, store::Table* tab,
                                    const store::TupleRef& ref, ItemWriter& out) {
      if (rc != 0 || lock_word(ref.tuple).load(std::memory_order_acquire) != h.arg0 ||
          (write_back && !data.empty() && (data.size() != tab->tuple_bytes() - 8 || data.size() % 8 != 0))) {
        out.add({kNotHeld, 0, 0, 0, 0});
        return;
      }
      if (write_back && !data.empty())
        store::store_words(reinterpret_cast<uint64_t*>(ref.tuple + 8), reinterpret_cast<const uint64_t*>(data.data()),
                           data.size() / 8);
      lock_word(ref.tuple).store(0, std::memory_order_release);  // publishes the record
      out.add({kOk, 0, 0, 0, 0});
    });
  };
  (void)ep.register_handler(kCommitRpc, policy_ == Policy::kNoWait ? "nowait.commit" : "waitdie.commit",
                            [unlock_items](rpc::Request& r) { unlock_items(r, true); });
  (void)ep.register_handler(kReleaseRpc, policy_ == Policy::kNoWait ? "nowait.release" : "waitdie.release",
                            [unlock_items](rpc::Request& r) { unlock_items(r, false); });
}

std::unique_ptr<Protocol> create_nowait(WorkerEngine& e) { return std::make_unique<TwoPl>(e, Policy::kNoWait); }
std::unique_ptr<Protocol> create_waitdie(WorkerEngine& e) { return std::make_unique<TwoPl>(e, Policy::kWaitDie); }

}  // namespace

const ProtocolDef kNoWait = {
    "nowait",
    "2PL, exclusive locks at fetch, abort on any conflict (RCC 4.2)",
    8,
    {{Primitive::kOneSided, Primitive::kRpc}, {}, {}, {}, {Primitive::kOneSided, Primitive::kRpc}},
    create_nowait,
};

const ProtocolDef kWaitDie = {
    "waitdie",
    "2PL, exclusive locks at fetch, older waits for younger, younger dies (RCC 4.3)",
    8,
    {{Primitive::kOneSided, Primitive::kRpc}, {}, {}, {}, {Primitive::kOneSided, Primitive::kRpc}},
    create_waitdie,
};

}  // namespace rdtx::cc::twopl
