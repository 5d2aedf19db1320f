// NAM-DB's version mover and garbage collection (papers/004, 5.1 and 5.3):
// a service of each node's worker 0 that moves the old versions writers
// left in the records' buffers to the node's overflow ring, chained per
// record newest first, frees ring entries older than the maximal
// transaction time E, and removes rows erased more than E ago. The
// protocol itself is namdb.cpp; the layout both share, layout.hpp.
#include "cc/namdb/version_mover.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <utility>
#include <vector>

#include "env/tsc.hpp"
#include "store/tuple.hpp"

namespace rdtx::cc::namdb {

using namespace rdtx::txn;

namespace {

// Dirty bytes: table t starts with span[t] tuples (its capacity_per_node)
// and has span[t] bytes from prefix[t] on; tuple k's is k % span[t], so a
// table that grew past its start shares each byte among the tuples k,
// k + span, k + 2 span, ... and the mover looks at all of them.
// One byte a tuple: a set byte costs the mover one tuple's headers (a byte
// per 64 tuples cost 64, and SmallBank 0.66x its throughput). The mover
// sweeps kScan bytes a pass (a few hundred passes for all of a TPC-C
// node's), and keeps the bytes of hot tuples, found by the sweep with
// kBufferSlots - 1 or more versions to move, in a small table it looks at
// every pass: a row written faster than a sweep (TPC-C's WAREHOUSE,
// DISTRICT and NEW-ORDER heads) does not fill its slots while it waits.
class VersionMover final : public Service {
 public:
  VersionMover(WorkerEngine& e, const Geometry& g, const Settings& s, std::vector<uint64_t> prefix,
               std::vector<uint64_t> span)
      : Service("namdb.mover"),
        e_(e),
        g_(g),
        max_txn_tsc_(env::ns_to_tsc(s.max_txn_ns)),
        prefix_(std::move(prefix)),
        span_(std::move(span)),
        graves_(kGraves) {}

  Result<void> start() override {
    Database& db = e_.db();
    std::byte* base = db.local_region(e_.node(), 0);
    ring_ = base + g_.ring_off;
    for (TableId t = 0; t < db.tables(); ++t) {
      if (!db.has_table(t) || !db.is_local(e_.node()) || span_[t] == 0) continue;
      store::Table* tab = db.store(e_.node()).table(t);
      if (tab == nullptr || tab->capacity() == 0) continue;
      const uint64_t bytes = span_[t];
      if (prefix_[t] + bytes > g_.dirty_bytes)
        return make_error(EINVAL, "namdb.mover: table '%s' has %llu dirty bytes, beyond the node region's",
                          tab->name().c_str(), static_cast<unsigned long long>(bytes));
      tables_.push_back({tab, prefix_[t], bytes, span_[t]});
      end_ = std::max(end_, prefix_[t] + bytes);
    }
    dirty_ = reinterpret_cast<uint8_t*>(base + g_.dirty_off);
    return {};
  }

  // One pass: garbage collection, the rows erased more than E ago removed,
  // the hot bytes, then the next kScan dirty bytes of the sweep, each dirty
  // tuple's unmoved entries moved.
  int poll() override {
    collect();
    int work = bury();
    if (tables_.empty()) return work;
    for (uint32_t h = 0; hot_count_ > 0 && h < kHot; ++h) {
      Hot& x = hot_[h];
      if (x.byte == 0) continue;
      if (visit(tables_[x.table], x.byte - 1, &work)) {
        x.idle = 0;
      } else if (++x.idle >= kHotIdle) {
        x.byte = 0;
        --hot_count_;
      }
    }
    sweep(cursor_, cursor_ + kScan, &work);
    cursor_ = cursor_ + kScan >= end_ ? 0 : cursor_ + kScan;
    return work;
  }

  // After the run (no snapshot is left): every row still marked erased is
  // removed, so that the workload's checks see the rows that exist.
  void settle() override {
    for (Dirty& d : tables_) {
      const store::TupleLayout& l = d.table->layout();
      for (uint32_t x = 0; x < d.table->capacity(); ++x) {
        const std::byte* t = d.table->tuple(x);
        if (store::is_live(word(t, l.state_offset())) && (word(t, kHdrOff) & kDeleted) != 0)
          (void)d.table->erase(word(t, l.key_offset()));
      }
    }
    grave_head_ = grave_tail_ = 0;
  }

 private:
  static constexpr uint32_t kGraves = 1 << 16;  // rows erased, waiting E before they are removed
  static constexpr uint64_t kScan = 4096;       // dirty bytes a pass sweeps (512 loads when clean)
  static constexpr uint32_t kHot = 64;          // hot dirty bytes looked at every pass
  static constexpr uint32_t kProbe = 8;         // the places a hot byte may take
  static constexpr uint32_t kHotIdle = 4096;    // passes a hot byte stays clean before it leaves
  struct Dirty {
    store::Table* table;
    uint64_t first, bytes;  // its dirty bytes
    uint64_t span;          // the tuples it starts with
  };
  struct Hot {
    uint64_t byte;  // + 1; 0: empty
    uint32_t table, idle;
  };

  static uint64_t load8(const uint8_t* p) {
    return std::atomic_ref<const uint64_t>(*reinterpret_cast<const uint64_t*>(p)).load(std::memory_order_acquire);
  }
  // Clears a set byte, before the look it asks for: a later write sets it again.
  static bool take(uint8_t* p) {
    std::atomic_ref<uint8_t> byte(*p);
    if (byte.load(std::memory_order_acquire) == 0) return false;
    byte.store(0, std::memory_order_release);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return true;
  }
  // Byte k made hot: kept where it is, else in an empty place of its
  // kProbe, else in place of the one there clean the longest.
  void make_hot(uint32_t table, uint64_t k) {
    Hot* put = nullptr;
    for (uint32_t j = 0; j < kProbe; ++j) {
      Hot& x = hot_[(k + j) % kHot];
      if (x.byte == k + 1) return;
      if (put == nullptr || (put->byte != 0 && (x.byte == 0 || x.idle > put->idle))) put = &x;
    }
    if (put->byte == 0) ++hot_count_;
    *put = {k + 1, table, 0};
  }
  // The dirty bytes [from, to), eight at a time (most are clean). A tuple
  // with kBufferSlots - 1 or more versions to move is made hot.
  void sweep(uint64_t from, uint64_t to, int* work) {
    for (uint32_t t = 0; t < tables_.size(); ++t) {
      const Dirty& d = tables_[t];
      const uint64_t lo = std::max(from, d.first), hi = std::min(to, d.first + d.bytes);
      for (uint64_t i = lo; i < hi; i += 8) {
        if (i + 8 <= hi && load8(dirty_ + i) == 0) continue;
        for (uint64_t k = i; k < std::min(hi, i + 8); ++k) {
          const int before = *work;
          if (visit(d, k, work) && *work - before >= static_cast<int>(kBufferSlots) - 1) make_hot(t, k);
        }
      }
    }
  }
  // Byte k, if set: its tuples (k's, and the ones span, 2 span, ... after
  // it) looked at. One whose versions could not all be moved, or that is
  // locked (an erase shows once it is unlocked), sets the byte again for a
  // later look. False: the byte was clear.
  bool visit(const Dirty& d, uint64_t k, int* work) {
    if (!take(dirty_ + k)) return false;
    bool all = true;
    const uint32_t cap = d.table->capacity();
    for (uint64_t x = k - d.first; x < cap; x += d.span) all &= move_tuple(*d.table, static_cast<uint32_t>(x), work);
    if (!all) std::atomic_ref<uint8_t>(dirty_[k]).store(1, std::memory_order_release);
    return true;
  }
  // A row whose current version says it is erased, seen at `tsc`: removed
  // from the store once no snapshot can need its older versions.
  struct Grave {
    store::Table* table;
    uint32_t tuple;
    uint64_t state, key, tsc;
  };

  uint64_t word(const std::byte* t, uint32_t off) const {
    return store::load_word(reinterpret_cast<const uint64_t*>(t + off), std::memory_order_acquire);
  }
  void put(std::byte* p, uint32_t off, uint64_t v) {
    store::store_word(reinterpret_cast<uint64_t*>(p + off), v, std::memory_order_release);
  }

  // Garbage collection (5.3): entries moved more than E ago are marked
  // deleted and their room is free for the ring to reuse.
  void collect() {
    const uint64_t now = env::tsc();
    while (tail_ < head_) {
      std::byte* e = ring_ + (g_.ring_entry_off(tail_) - g_.ring_off);
      if (word(e, 8 * kOvMovedTsc) + max_txn_tsc_ > now) break;
      put(e, 8 * kOvHdr, word(e, 8 * kOvHdr) | kDeleted);
      ++tail_;
    }
  }

  // Rows erased more than E ago leave the store (the same incarnation,
  // still erased: nothing else removes a row of this protocol). A snapshot
  // older than that aborts as it does on a collected version.
  int bury() {
    const uint64_t now = env::tsc();
    int n = 0;
    for (; grave_tail_ < grave_head_; ++grave_tail_, ++n) {
      const Grave& g = graves_[grave_tail_ % kGraves];
      if (g.tsc + max_txn_tsc_ > now) break;
      const std::byte* t = g.table->tuple(g.tuple);
      const store::TupleLayout& l = g.table->layout();
      if (word(t, l.state_offset()) == g.state && word(t, l.key_offset()) == g.key && (word(t, kHdrOff) & kDeleted))
        (void)g.table->erase(g.key);
    }
    return n;
  }

  // Moves the tuple's unmoved buffer entries, oldest first, to the ring,
  // and puts a row whose current version is an erase in the graves.
  // False: one could not be moved yet (its writer's WRITEs are still
  // landing, or the ring is full of entries younger than E), or the graves
  // are full: look again.
  bool move_tuple(store::Table& tab, uint32_t index, int* work) {
    std::byte* t = tab.tuple(index);
    const store::TupleLayout& l = tab.layout();
    const uint64_t state = word(t, l.state_offset());
    if (!store::is_live(state)) return true;
    if (!move_versions(tab, t, work)) return false;
    const uint64_t hdr = word(t, kHdrOff);
    if ((hdr & kLocked) != 0) return false;  // a commit in flight: its erase, if it is one, shows later
    if ((hdr & kDeleted) == 0) return true;
    if (grave_head_ - grave_tail_ >= kGraves) return false;
    graves_[grave_head_++ % kGraves] = {&tab, index, state, word(t, l.key_offset()), env::tsc()};
    return true;
  }

  bool move_versions(store::Table& tab, std::byte* t, int* work) {
    const store::TupleLayout& l = tab.layout();
    uint32_t order[kBufferSlots];
    uint32_t n = 0;
    for (uint32_t s = 0; s < kBufferSlots; ++s)
      if ((word(t, entry_off(s)) & kMoved) == 0) order[n++] = s;
    for (uint32_t a = 1; a < n; ++a)  // oldest copy first (at most kBufferSlots: insertion sort)
      for (uint32_t b = a; b > 0 && word(t, entry_off(order[b]) + 8) < word(t, entry_off(order[b - 1]) + 8); --b)
        std::swap(order[b], order[b - 1]);
    const uint32_t bytes = record_words(l);
    const uint32_t words = bytes / 8;
    scratch_.resize(words);
    for (uint32_t k = 0; k < n; ++k) {
      const uint32_t s = order[k];
      const uint64_t hdr = word(t, entry_off(s));
      const uint64_t copy_no = word(t, entry_off(s) + 8);
      const uint64_t writer = recording(l) ? word(t, writer_off(1 + s)) : 0;
      // The data with atomic loads: the copy the checksum vouches for.
      store::load_words(scratch_.data(), reinterpret_cast<const uint64_t*>(t + l.slot_offset(1 + s)), words);
      const auto* copy = reinterpret_cast<const std::byte*>(scratch_.data());
      if (word(t, entry_off(s) + 16) != entry_sum(hdr, copy_no, writer, word(t, l.key_offset()), copy, bytes))
        return false;
      if (head_ - tail_ >= g_.ring_entries) {
        ++stalls_;  // full of entries younger than E: writers meet an unmoved slot (buffer_full)
        return false;
      }
      const uint64_t pos = head_++;
      std::byte* e = ring_ + (g_.ring_entry_off(pos) - g_.ring_off);
      auto* ew = reinterpret_cast<uint64_t*>(e);
      // Its position last: a reader that finds it finds the rest (or a
      // checksum that fails on a copy torn by the ring's reuse).
      store::store_word(ew + kOvPos, ~uint64_t{0}, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_release);
      uint64_t head[kOvHead] = {
          pos,        tab.id(), word(t, l.key_offset()), hdr & kVersionMask, copy_no, word(t, kOverflowOff), writer,
          env::tsc(), 0};
      uint64_t h = checksum_start(hdr & kVersionMask);
      for (uint32_t w : {kOvPos, kOvTable, kOvKey, kOvCopy, kOvPrev, kOvWriter}) h = mix(h, head[w]);
      head[kOvSum] = checksum_words(h, copy, 0, bytes);
      store::store_words(reinterpret_cast<uint64_t*>(e + kOvHeadBytes), scratch_.data(), words);
      store::store_words(ew + 1, head + 1, kOvHead - 1);
      store::store_word(ew + kOvPos, pos, std::memory_order_release);
      // The record's chain, then the slot's moved bit: a writer reuses the
      // slot only once it is moved, so a reader that misses the version in
      // the buffer finds it on the chain.
      put(t, kOverflowOff, pos + 1);
      std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(t + entry_off(s)))
          .fetch_or(kMoved, std::memory_order_acq_rel);
      ++*work;
    }
    return true;
  }

  WorkerEngine& e_;
  Geometry g_;
  uint64_t max_txn_tsc_;
  std::vector<uint64_t> prefix_, span_;
  std::vector<Grave> graves_;
  uint64_t grave_head_ = 0, grave_tail_ = 0;
  std::byte* ring_ = nullptr;
  uint64_t head_ = 0, tail_ = 0, stalls_ = 0;
  std::vector<Dirty> tables_;
  uint8_t* dirty_ = nullptr;
  uint64_t end_ = 0, cursor_ = 0;
  Hot hot_[kHot] = {};
  uint32_t hot_count_ = 0;
  std::vector<uint64_t> scratch_;
};

}  // namespace

std::unique_ptr<txn::Service> make_version_mover(txn::WorkerEngine& e, const Geometry& g, const Settings& s,
                                                 std::vector<uint64_t> prefix, std::vector<uint64_t> span) {
  return std::make_unique<VersionMover>(e, g, s, std::move(prefix), std::move(span));
}

}  // namespace rdtx::cc::namdb
