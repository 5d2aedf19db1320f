// The toolkit's owner side: the RPC handlers a coordinator's stages call
// (read, read_meta, lock_read, write_back, release, cancel), the attempt
// fences, and WAITDIE's waiting list. Every id, length and offset in a
// request is checked before use; a malformed item stops its request.
#include <atomic>
#include <cstring>

#include "env/tsc.hpp"
#include "store/tuple.hpp"
#include "txn/coordinator.hpp"
#include "txn/item_batch.hpp"
#include "txn/stages/lock_wait_list.hpp"
#include "txn/stages/owner_status.hpp"
#include "txn/stages/toolkit.hpp"

namespace rdtx::txn {

namespace {

using Data = std::span<const std::byte>;

std::atomic_ref<uint64_t> word_at(std::byte* tuple, uint32_t off) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(tuple + off));
}

uint64_t arg_word(Data d) {
  uint64_t v = 0;
  if (d.size() >= 8) std::memcpy(&v, d.data(), 8);
  return v;
}

// A span [off, off+len) inside a tuple of `tuple_bytes`, 8-byte aligned.
bool span_ok(uint32_t off, uint32_t len, uint32_t tuple_bytes) {
  return off % 8 == 0 && len % 8 == 0 && len <= tuple_bytes && off <= tuple_bytes - len;
}

}  // namespace

Toolkit::Toolkit(WorkerEngine& e) : e_(e), atomics_(e.owner_atomics()) {}
Toolkit::~Toolkit() = default;

Result<std::unique_ptr<Toolkit>> Toolkit::create(WorkerEngine& e) {
  std::unique_ptr<Toolkit> k(new Toolkit(e));
  k->workers_per_node_ = e.workers_per_node();
  k->fence_.assign(static_cast<size_t>(e.db().nodes()) * k->workers_per_node_ * kMaxCoroutines, 0);
  k->asked_.assign(k->fence_.size(), 0);
  RDTX_TRY(k->register_handlers());
  return k;
}

Result<void> Toolkit::enable_waiting(uint32_t capacity) {
  if (wait_) return {};
  auto w = LockWaitList::create(*this, capacity, e_.ctx().rpc->max_payload(), e_.ctx().rpc_timeout_ns / 4);
  if (!w.ok()) return w.error();
  wait_ = w->get();
  e_.add_service(std::move(*w));
  return {};
}

Result<void> Toolkit::enable_shared_reads(uint32_t capacity) {
  // (MVCC's lock check reads timestamps the shared holders do not keep.)
  if (check_ != nullptr) return make_error(EINVAL, "shared read locks: not with a protocol's lock check");
  if (capacity == 0 || capacity > (1u << 28))
    return make_error(EINVAL, "shared read locks: holder table capacity %u is not in [1, 2^28]", capacity);
  shared_ = true;
  holds_.init(capacity);
  return {};
}

void Toolkit::SharedHolds::init(uint32_t capacity) {
  uint32_t n = 16;
  while (n < capacity) n <<= 1;
  e_.assign(n, Entry{});
  mask_ = n - 1;
  used_ = 0;
  limit_ = n - n / 4;  // probes stay short below 3/4 full
}

uint32_t Toolkit::SharedHolds::home(uint64_t id, const std::byte* tuple) const {
  uint64_t h = (id ^ reinterpret_cast<uintptr_t>(tuple)) * 0x9e3779b97f4a7c15ull;
  return static_cast<uint32_t>(h >> 32) & mask_;
}

bool Toolkit::SharedHolds::insert(uint64_t id, const std::byte* tuple) {
  if (used_ >= limit_) return false;
  uint32_t i = home(id, tuple);
  while (e_[i].id != 0) i = (i + 1) & mask_;
  e_[i] = {id, tuple};
  ++used_;
  return true;
}

bool Toolkit::SharedHolds::erase(uint64_t id, const std::byte* tuple) {
  if (used_ == 0) return false;
  uint32_t i = home(id, tuple);
  while (e_[i].id != id || e_[i].tuple != tuple) {
    if (e_[i].id == 0) return false;
    i = (i + 1) & mask_;
  }
  // Shift later entries of the run back into the hole, unless their home
  // lies cyclically in (hole, them]: a lookup must never stop at a gap
  // before it reaches them.
  for (uint32_t j = (i + 1) & mask_; e_[j].id != 0; j = (j + 1) & mask_) {
    const uint32_t h = home(e_[j].id, e_[j].tuple);
    if (((j - h) & mask_) >= ((j - i) & mask_)) {
      e_[i] = e_[j];
      i = j;
    }
  }
  e_[i] = Entry{};
  --used_;
  return true;
}

// Items [first, ...) of a lock_read request: per item CAS the lock word
// (meta word 0) from 0 to arg0, unless the attempt (arg1) is fenced, then
// copy the requested span. A conflict stops the request (later items:
// kNotAttempted); under WAITDIE an older requester waits instead, if it
// may (returns the item's index and its tuple).
int Toolkit::serve_lock_read(std::span<const std::byte> payload, uint32_t first, std::span<std::byte> out,
                             uint32_t* out_len, bool can_wait, const std::byte** wait_tuple) {
  const store::Store& st = e_.db().store(e_.node());
  ItemReader in(payload);
  ItemHeader h;
  Data data;
  uint32_t len = *out_len;
  auto put = [&](const ItemReply& rep, const std::byte* src, uint32_t n) {
    if (out.size() < len + sizeof rep + pad8(n)) return;
    ItemReply r = rep;
    r.len = n;
    std::memcpy(out.data() + len, &r, sizeof r);
    // The tuple is ours (locked): a word copy is consistent.
    if (n) store::load_words(reinterpret_cast<uint64_t*>(out.data() + len + sizeof r),
                             reinterpret_cast<const uint64_t*>(src), n / 8);
    len += sizeof r + pad8(n);
  };
  bool stopped = false;
  for (uint32_t k = 0; in.next(&h, &data); ++k) {
    if (k < first) continue;
    if (stopped) {
      put({owner::kNotAttempted, 0, 0, 0, 0}, nullptr, 0);
      continue;
    }
    store::Table* tab = st.table(h.table);
    store::TupleRef ref;
    int rc = tab ? tab->lookup(h.key, &ref) : -EINVAL;
    const uint64_t sw = arg_word(data);
    const uint32_t off = static_cast<uint32_t>(sw);
    uint32_t n = static_cast<uint32_t>(sw >> 32);
    if (rc == 0 && n == 0 && off < tab->tuple_bytes()) n = tab->tuple_bytes() - off;  // to the end
    if (rc == 0 && (data.size() != 8 || !span_ok(off, n, tab->tuple_bytes()))) rc = -EINVAL;
    if (rc == 0 && fenced(h.arg1)) rc = owner::kFenced;
    if (rc == 0) asked(h.arg1);
    if (rc != 0) {
      put({rc, 0, 0, 0, 0}, nullptr, 0);
      stopped = true;
      continue;
    }
    uint64_t holder = 0, seen = 0;
    if (shared_) {
      // Shared read locks: a request without kExclusiveBit joins the
      // word's shared holders (count + 1) unless an exclusive holder has
      // it; one with the bit needs the word free. Priorities (WAITDIE's
      // timestamps) are compared without the bit.
      const uint64_t prio = h.arg0 & ~kExclusiveBit;
      const bool reader = !(h.arg0 & kExclusiveBit);
      const bool queued = wait_ && wait_->older_waiter(ref.tuple, prio);
      std::atomic_ref<uint64_t> word = word_at(ref.tuple, 0);
      bool granted = false;
      // Read-modify-writes through the owner atomics (a NIC may CAS or FAA
      // the word too); the writer's give-back is the holder's store.
      if (!queued && reader) {
        holder = word.load(std::memory_order_relaxed);
        while (!(holder & kExclusiveBit) && !granted)
          granted = atomics_.cas(h.table, ref.tuple, holder, holder + 1, std::memory_order_seq_cst);
      } else if (!queued) {
        granted = atomics_.cas(h.table, ref.tuple, holder, h.arg0, std::memory_order_seq_cst);
      }
      auto give_back = [&] {
        if (reader)
          atomics_.faa(h.table, ref.tuple, ~uint64_t{0}, std::memory_order_release);
        else
          word.store(0, std::memory_order_release);
      };
      if (granted && word_at(ref.tuple, tab->layout().state_offset()).load(std::memory_order_acquire) != ref.state) {
        give_back();  // the key moved or went meanwhile, as above
        put({-EAGAIN, 0, 0, 0, 0}, nullptr, 0);
        stopped = true;
        continue;
      }
      // A shared grant is remembered, or not made: its release and a
      // cancel must find it.
      if (granted && reader && !holds_.insert(h.arg1, ref.tuple)) {
        give_back();
        granted = false;
        holder = 0;
      }
      if (granted) {
        put({owner::kOk, 0, ref.index, ref.state, 0}, ref.tuple + off, n);
        continue;
      }
      // Refused: an exclusive holder's value without the bit; shared
      // holders have none (0), and a WAITDIE writer finding them dies, as it
      // cannot show it is older than each of them.
      holder = holder & kExclusiveBit ? holder & ~kExclusiveBit : 0;
      LockResult verdict = LockResult::kConflict;
      if (queued)
        verdict = LockResult::kDie;
      else if (rule_ == ConflictRule::kWaitDie)
        verdict = wait_die(prio, holder);
      if (verdict == LockResult::kWait && can_wait) {
        *out_len = len;
        *wait_tuple = ref.tuple;
        return static_cast<int>(k);
      }
      put({verdict == LockResult::kConflict ? owner::kConflict : owner::kDie, 0, 0, 0, holder}, nullptr, 0);
      stopped = true;
      continue;
    }
    // The protocol's condition, before the CAS (nothing to undo when it
    // fails) and again once the lock is taken: what changed in between is
    // seen, and a lock that fails it is given back at once.
    if (check_ != nullptr && !check_(ref.tuple, h.arg0, &seen)) {
      put({owner::kRefused, 0, 0, 0, seen}, nullptr, 0);
      stopped = true;
      continue;
    }
    // Waiters come before a newcomer that finds the lock free (no barging),
    // so an old transaction is not starved by a stream of younger ones.
    const bool queued = wait_ && wait_->older_waiter(ref.tuple, h.arg0);
    // seq_cst: with a check, the CAS must be ordered before the check's
    // loads (a reader's rts update and this lock cannot both go unseen).
    if (!queued && atomics_.cas(h.table, ref.tuple, holder, h.arg0, std::memory_order_seq_cst)) {
      // Another thread of this node may have erased or moved the key, and
      // the tuple taken another key, between the lookup and the CAS.
      if (word_at(ref.tuple, tab->layout().state_offset()).load(std::memory_order_acquire) != ref.state) {
        word_at(ref.tuple, 0).store(0, std::memory_order_release);
        put({-EAGAIN, 0, 0, 0, 0}, nullptr, 0);
        stopped = true;
        continue;
      }
      if (check_ != nullptr && !check_(ref.tuple, h.arg0, &seen)) {
        word_at(ref.tuple, 0).store(0, std::memory_order_release);
        put({owner::kRefused, 0, 0, 0, seen}, nullptr, 0);
        stopped = true;
        continue;
      }
      put({owner::kOk, 0, ref.index, ref.state, 0}, ref.tuple + off, n);
      continue;
    }
    LockResult verdict = LockResult::kConflict;
    if (queued) verdict = LockResult::kDie;  // younger than a waiter
    else if (rule_ == ConflictRule::kWaitDie) verdict = wait_die(h.arg0, holder);
    if (verdict == LockResult::kWait && can_wait) {
      *out_len = len;
      *wait_tuple = ref.tuple;
      return static_cast<int>(k);
    }
    const int32_t status = verdict == LockResult::kConflict ? owner::kConflict : owner::kDie;
    put({status, 0, 0, 0, holder}, nullptr, 0);
    stopped = true;
  }
  *out_len = len;
  return -1;
}

Result<void> Toolkit::register_handlers() {
  const store::Store& st = e_.db().store(e_.node());
  auto reg = [&](rpc::HandlerId* id, const char* name, rpc::Handler h) -> Result<void> {
    auto r = e_.register_handler(name, std::move(h));
    if (!r.ok()) return r.error();
    *id = *r;
    return {};
  };
  // A consistent copy of the tuple (the store's seqlock-checked copy).
  RDTX_TRY(reg(&h_.read, "txn.read", [&st](rpc::Request& r) {
    serve_items(r, st, [](const ItemHeader&, Data, int rc, store::Table* tab, const store::TupleRef& ref,
                          ItemWriter& out) {
      if (rc != 0) {
        out.add({rc, 0, 0, 0, 0});
        return;
      }
      std::byte* dst = out.add_reserved({owner::kOk, 0, ref.index, ref.state, 0}, tab->tuple_bytes());
      if (dst != nullptr && !tab->copy_tuple(ref, dst)) out.set_last_status(-EAGAIN);
    });
  }));
  // The leading arg0 bytes, word by word.
  RDTX_TRY(reg(&h_.read_meta, "txn.read_meta", [&st](rpc::Request& r) {
    serve_items(r, st, [](const ItemHeader& h, Data, int rc, store::Table* tab, const store::TupleRef& ref,
                          ItemWriter& out) {
      if (rc == 0 && !span_ok(0, static_cast<uint32_t>(h.arg0), tab->tuple_bytes())) rc = -EINVAL;
      if (rc != 0) {
        out.add({rc, 0, 0, 0, 0});
        return;
      }
      const uint32_t n = static_cast<uint32_t>(h.arg0);
      std::byte* dst = out.add_reserved({owner::kOk, 0, ref.index, ref.state, 0}, n);
      if (dst != nullptr)
        store::load_words(reinterpret_cast<uint64_t*>(dst), reinterpret_cast<const uint64_t*>(ref.tuple), n / 8);
    });
  }));
  RDTX_TRY(reg(&h_.lock_read, "txn.lock_read", [this](rpc::Request& r) {
    uint32_t len = 0;
    // With no room left to wait, an older requester dies rather than block.
    const bool can_wait = wait_ && wait_->has_room();
    const std::byte* tuple = nullptr;
    const int wait = serve_lock_read(r.payload(), 0, r.reply_buffer(), &len, can_wait, &tuple);
    if (wait >= 0) {
      ItemReader in(r.payload());
      ItemHeader h{};
      Data d;
      in.next(&h, &d);  // every item carries the requester's lock value and attempt
      // (Shared read locks: a write's value carries kExclusiveBit, which
      // no priority comparison may see.)
      const uint64_t prio = shared_ ? h.arg0 & ~kExclusiveBit : h.arg0;
      if (wait_->park(r, static_cast<uint32_t>(wait), std::span<const std::byte>(r.reply_buffer().data(), len),
                      tuple, prio, h.arg1))
        return;
      // Could not park (full): answer what we have; the waiting item dies.
      len = 0;
      serve_lock_read(r.payload(), 0, r.reply_buffer(), &len, false, &tuple);
    }
    r.set_reply_len(len);
  }));
  // Install (body, then version word) and unlock, while the lock word holds
  // arg0; arg1 is the attempt. The data: a span word (body offset | version
  // offset << 32), then the tuple's bytes from the version offset (or the
  // body offset without one); none for a release.
  // Duplicates and late copies: a message of attempt A finishes A here, so
  // A's lock requests arriving later (duplicated or delayed) are refused
  // (fenced). A release of A once a later attempt of the same coordinator
  // has asked for locks is a stale copy: the coordinator starts an attempt
  // only after its previous release was answered, and under WAITDIE the
  // later attempt's lock value (the transaction's timestamp) is the same.
  auto unlock_items = [this, &st](rpc::Request& r, bool write_back) {
    serve_items(r, st, [this, write_back](const ItemHeader& h, Data data, int rc, store::Table* tab,
                                          const store::TupleRef& ref, ItemWriter& out) {
      if (rc == 0 && data.size() < 8) rc = -EINVAL;
      if (rc != 0) {
        out.add({rc, 0, 0, 0, 0});
        return;
      }
      const uint64_t sw = arg_word(data);
      data = data.subspan(8);
      const uint32_t body = static_cast<uint32_t>(sw), ver = static_cast<uint32_t>(sw >> 32);
      const uint32_t first = ver != 0 ? ver : body;
      const uint32_t tb = tab->tuple_bytes();
      const bool shape = data.empty() || (write_back && body >= 8 &&
                                          span_ok(first, static_cast<uint32_t>(data.size()), tb) &&
                                          first + data.size() == tb && (ver == 0 || (ver >= 8 && ver + 8 <= body)));
      if (!shape) {
        out.add({-EINVAL, 0, 0, 0, 0});
        return;
      }
      fence(h.arg1);
      if (!write_back && superseded(h.arg1)) {
        out.add({owner::kFenced, 0, 0, 0, 0});
        return;
      }
      if (shared_ && h.arg0 == 0) {
        // A shared holder's release (no value: a count names nobody). Only
        // a grant remembered here is given back, and forgotten: a re-sent
        // copy finds nothing to take.
        if (!data.empty() || !holds_.erase(h.arg1, ref.tuple)) {
          out.add({data.empty() ? owner::kNotHeld : -EINVAL, 0, 0, 0, 0});
          return;
        }
        atomics_.faa(h.table, ref.tuple, ~uint64_t{0}, std::memory_order_release);
        out.add({owner::kOk, 0, 0, 0, 0});
        return;
      }
      if (word_at(ref.tuple, 0).load(std::memory_order_acquire) != h.arg0) {
        out.add({owner::kNotHeld, 0, 0, 0, 0});
        return;
      }
      if (!data.empty()) {
        const auto* w = reinterpret_cast<const uint64_t*>(data.data());
        store::store_words(reinterpret_cast<uint64_t*>(ref.tuple + body), w + (body - first) / 8, (tb - body) / 8);
        if (ver != 0) word_at(ref.tuple, ver).store(w[0], std::memory_order_release);
      }
      word_at(ref.tuple, 0).store(0, std::memory_order_release);  // publishes what is above
      out.add({owner::kOk, 0, 0, 0, 0});
    });
  };
  RDTX_TRY(reg(&h_.write_back, "txn.write_back", [unlock_items](rpc::Request& r) { unlock_items(r, true); }));
  RDTX_TRY(reg(&h_.release, "txn.release", [unlock_items](rpc::Request& r) { unlock_items(r, false); }));
  // The caller gave up on attempt arg1: refuse its lock requests from now
  // on, free what it holds (lock word == arg0).
  RDTX_TRY(reg(&h_.cancel, "txn.cancel", [this, &st](rpc::Request& r) {
    serve_items(r, st, [this](const ItemHeader& h, Data, int rc, store::Table*, const store::TupleRef& ref,
                              ItemWriter& out) {
      fence(h.arg1);
      // A shared lock the attempt was granted here (its reply lost, or not
      // awaited) is found by (attempt, tuple); anything else is freed if
      // the word holds the attempt's exclusive value.
      if (rc == 0 && shared_ && holds_.erase(h.arg1, ref.tuple)) {
        atomics_.faa(h.table, ref.tuple, ~uint64_t{0}, std::memory_order_release);
      } else if (rc == 0) {
        uint64_t held = h.arg0;
        atomics_.cas(h.table, ref.tuple, held, 0, std::memory_order_release);
      }
      out.add({owner::kOk, 0, 0, 0, 0});
    });
  }));
  return {};
}

}  // namespace rdtx::txn
