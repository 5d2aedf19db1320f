#include "txn/replication.hpp"

#include <algorithm>
#include <bit>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <map>
#include <chrono>
#include <functional>
#include <thread>
#include <tuple>

#include "env/log.hpp"
#include "env/tsc.hpp"
#include "store/tuple.hpp"
#include "txn/coordinator.hpp"
#include "txn/fault.hpp"
#include "txn/stages/toolkit.hpp"
#include "txn/item_batch.hpp"
#include "txn/ring_log.hpp"

namespace rdtx::txn {

using runtime::Task;

std::string placement_text(uint32_t nodes, uint32_t replicas) {
  std::string s;
  for (uint32_t p = 0; p < nodes; ++p) {
    s += (p ? "; " : "") + std::string("partition ") + std::to_string(p) + ": primary " + std::to_string(p);
    if (replicas > 1) {
      s += ", backups";
      for (uint32_t k = 1; k < replicas; ++k) s += (k > 1 ? "," : "") + std::string(" ") + std::to_string(backup_node(p, k, nodes));
    }
  }
  return s;
}

namespace {

uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// One tuple's contribution to a digest.
uint64_t tuple_hash(uint64_t key, uint64_t seq, uint64_t writer, const std::byte* record, uint32_t bytes) {
  uint64_t h = mix(key ^ 0x9e3779b97f4a7c15ull);
  h = mix(h ^ seq);
  h = mix(h ^ writer);
  for (uint32_t off = 0; off < bytes; off += 8) {
    uint64_t w = 0;
    std::memcpy(&w, record + off, std::min<uint32_t>(8, bytes - off));
    h = mix(h ^ w);
  }
  return h;
}

uint64_t word_at(const std::byte* p, uint32_t off) {
  return store::load_word(reinterpret_cast<const uint64_t*>(p + off), std::memory_order_acquire);
}

// Bit 63 of a backup tuple's sequence word: an applier is copying into it.
constexpr uint64_t kBusy = uint64_t{1} << 63;
// Bit 62 of a logged record's sequence, and of the backup tuple's sequence
// word once applied: the row was erased (Txn::erase) at that sequence. A
// backup keeps the erased row as a tombstone (left out of its digest), so
// that an older image still in another sender's ring, or the row's insert,
// arriving later cannot bring it back: it is older. Tombstones are not
// reclaimed (a backup table holds every row its primary ever held).
constexpr uint64_t kErased = uint64_t{1} << 62;
constexpr uint64_t kSeqBits = kErased - 1;

}  // namespace

std::vector<ReplicaDigest> replica_digests(const Database& db) {
  std::vector<ReplicaDigest> out;
  if (db.replicas() <= 1) return out;
  auto digest = [&](const store::Store& st, uint32_t partition, uint32_t holder, bool primary) {
    for (TableId t = 0; t < db.tables(); ++t) {
      if (!db.has_table(t)) continue;
      const store::Table* tab = st.table(t);
      if (tab == nullptr) continue;
      const store::TupleLayout& l = tab->layout();
      ReplicaDigest d{partition, holder, t, 0, 0, 0};
      for (uint32_t i = 0; i < tab->high_water(); ++i) {
        const std::byte* tuple = tab->tuple(i);
        const store::TupleHeader h = store::read_header(tuple, l);
        if (!store::is_live(h.state)) continue;
        uint64_t seq, writer;
        if (primary) {
          seq = word_at(tuple, db.replication_word_offset());
          writer = db.recording() ? word_at(tuple, db.history_word_offset(0)) : 0;
        } else {
          seq = word_at(tuple, kBackupSeqOffset);
          writer = word_at(tuple, kBackupWriterOffset);
          if (seq & kErased) continue;  // a tombstone: the primary erased the row
        }
        ++d.tuples;
        d.sum += tuple_hash(h.key, seq, writer, tuple + l.record_offset(), l.record_bytes);
      }
      out.push_back(d);
    }
  };
  for (uint32_t n = 0; n < db.data_nodes(); ++n)
    if (db.is_local(n)) digest(db.store(n), n, n, true);
  for (const Database::BackupCopy& b : db.backups()) digest(*b.store, b.partition, b.node, false);
  return out;
}

Result<void> compare_replicas(const Database& db, const std::vector<ReplicaDigest>& all) {
  if (db.replicas() <= 1) return {};
  std::map<std::tuple<uint32_t, uint32_t, uint32_t>, const ReplicaDigest*> by;
  for (const ReplicaDigest& d : all) by[{d.partition, d.table, d.holder}] = &d;
  for (uint32_t p = 0; p < db.data_nodes(); ++p)
    for (TableId t = 0; t < db.tables(); ++t) {
      if (!db.has_table(t)) continue;
      auto prim = by.find({p, t, p});
      if (prim == by.end()) return make_error(EPROTO, "no digest of partition %u of table '%s' on its primary", p, db.def(t).name.c_str());
      for (uint32_t k = 1; k < db.replicas(); ++k) {
        const uint32_t b = backup_node(p, k, db.data_nodes());
        auto bk = by.find({p, t, b});
        if (bk == by.end())
          return make_error(EPROTO, "no digest of the copy of partition %u of table '%s' on backup node %u", p,
                            db.def(t).name.c_str(), b);
        if (bk->second->tuples != prim->second->tuples || bk->second->sum != prim->second->sum)
          return make_error(EIO,
                            "replicas differ: partition %u of table '%s' on backup node %u (%llu tuples, digest "
                            "%016llx) is not its primary's (%llu tuples, digest %016llx)",
                            p, db.def(t).name.c_str(), b, static_cast<unsigned long long>(bk->second->tuples),
                            static_cast<unsigned long long>(bk->second->sum),
                            static_cast<unsigned long long>(prim->second->tuples),
                            static_cast<unsigned long long>(prim->second->sum));
      }
    }
  return {};
}

namespace {

const env::LogType kLogRepl("rdtx.replication");

// Item statuses of log.append.
constexpr int32_t kLogOk = 0;
constexpr int32_t kLogFull = 1;     // the ring has no room now: nothing appended
constexpr int32_t kLogRefused = 2;  // malformed (unknown table, too large)

// A record in a ring entry: this header, then the record (padded to 8).
struct LogRecord {
  uint32_t table;
  uint32_t len;
  uint64_t key;
  uint64_t seq;
  uint64_t writer;
};
static_assert(sizeof(LogRecord) == 32);

using ringlog::EntryHead;
using ringlog::kEntryOverhead;
using ringlog::seal_entry;
using ringlog::skip_before;
// The receiving worker's log region (ring_log.hpp's layout), in registered
// memory that the senders WRITE into (one-sided form) or its log.append
// handler writes (RPC form): a ring and a head word per sending node. Only
// the worker of the same index on each node sends to this worker (the
// runner hands a worker's region to those workers, and log.append goes
// through the paired RPC endpoints), so a ring per node is a ring per
// sender.
using RegionLayout = ringlog::RegionLayout;

// The worker's rings (one per sending node) and their applier.
class LogApplier final : public Service {
 public:
  LogApplier(WorkerEngine& e, uint32_t senders)
      : Service("log-applier", kApplyPeriodNs),
        e_(e),
        db_(e.db()),
        cap_(e.options().log_ring_bytes),
        layout_{senders, cap_},
        head_(senders),
        rpc_tail_(senders),
        window_(senders),
        entries_(senders) {}

  Result<void> start() override {
    rdma::Device& dev = *e_.ctx().device;
    auto mem = dev.alloc_memory(layout_.bytes());
    if (!mem.ok())
      return make_error(mem.error().code, "log rings (%llu bytes): %s",
                        static_cast<unsigned long long>(layout_.bytes()), mem.error().message.c_str());
    mem_ = std::move(*mem);
    std::memset(mem_->data(), 0, layout_.bytes());
    auto mr = dev.reg_mr(mem_->data(), layout_.bytes(), rdma::kAccessAll);
    if (!mr.ok()) return make_error(mr.error().code, "log rings: %s", mr.error().message.c_str());
    mr_ = *mr;
    copy_.resize(cap_ / 8);
    // The positions of the entries a ring holds: at most one per smallest
    // entry (a head, one record of 8 bytes, the trailer).
    window_mask_ = std::bit_ceil(cap_ / (kEntryOverhead + sizeof(LogRecord) + 8) + 1) - 1;
    for (auto& w : window_) w.assign(window_mask_ + 1, 0);
    e_.log_regions().own = LogRegionDesc{reinterpret_cast<uint64_t>(mem_->data()), mr_.rkey, layout_.rings, e_.node(),
                                         e_.ctx().index, cap_};
    return {};
  }
  void stop() override {
    if (mem_) (void)e_.ctx().device->dereg_mr(mr_);
  }
  int poll() override { return apply_all(); }
  bool drain() override {
    apply_all();
    return true;
  }
  // After the run: everything complete is applied; an entry begun and
  // never completed (a WRITE that never landed) is an error.
  void settle() override {
    apply_all();
    // A frozen ring's sender was removed: an entry it began and never
    // completed belongs to a transaction that recovery aborted.
    for (uint32_t s = 0; s < layout_.rings; ++s)
      if (!is_frozen(s) && ringlog::begun(ring_of(s), cap_, head_[s])) ++e_.stats().log_errors;
  }

  // Recovery (any thread): the rings of the senders in `mask` are applied
  // as far as they are complete, then frozen (never applied again).
  void freeze_senders(uint64_t mask) override { freeze_req_.fetch_or(mask, std::memory_order_acq_rel); }
  bool senders_frozen(uint64_t mask) const override {
    return (frozen_.load(std::memory_order_acquire) & mask) == mask;
  }
  // fn(txn, record, data) for every record of the frozen rings' entries
  // still in their rings (after frozen_all(): the worker no longer touches
  // them).
  template <typename Fn>
  void for_each_frozen_record(Fn&& fn) {
    const uint64_t frozen = frozen_.load(std::memory_order_acquire);
    std::vector<uint64_t> copy(cap_ / 8);
    for (uint32_t s = 0; s < layout_.rings; ++s) {
      if (!(frozen >> s & 1)) continue;
      const uint64_t n = std::min<uint64_t>(entries_[s], window_mask_ + 1);
      for (uint64_t i = entries_[s] - n; i < entries_[s]; ++i) {
        EntryHead eh;
        uint64_t advance = 0;
        // Overwritten by a later lap: its position no longer matches.
        if (ringlog::scan(ring_of(s), cap_, window_[s][i & window_mask_], copy.data(), &eh, &advance) !=
            ringlog::Scan::kEntry)
          continue;
        const std::byte* p = reinterpret_cast<const std::byte*>(copy.data());
        for_each_record(p, eh, [&](const LogRecord& rec, const std::byte* data) { fn(rec, data); });
      }
    }
  }

  // The RPC form: appends request `r`'s records as one entry to the
  // caller's ring, or refuses them all (full ring, malformed request).
  void append(rpc::Request& r) {
    ItemReader in(r.payload());
    ItemWriter out(r);
    int32_t status = kLogOk;
    // The caller is a worker's endpoint (node x workers + index); only the
    // worker of this one's index on each node logs here, into its node's ring.
    const uint32_t wpn = e_.workers_per_node(), s = r.src() / wpn;
    uint32_t bytes = kEntryOverhead;
    ItemHeader h;
    std::span<const std::byte> data;
    uint32_t n = 0;
    if (s >= layout_.rings || r.src() % wpn != e_.ctx().index || !in.valid() || is_frozen(s)) status = kLogRefused;
    while (status == kLogOk && in.next(&h, &data)) {
      if (!db_.has_table(h.table) || data.size() != db_.def(h.table).record_bytes) status = kLogRefused;
      bytes += sizeof(LogRecord) + pad8(static_cast<uint32_t>(data.size()));
      ++n;
    }
    if (status == kLogOk && (!in.valid() || n != in.count() || n == 0 || bytes > cap_ / 2))
      status = kLogRefused;
    if (status == kLogOk) {
      uint64_t pos = rpc_tail_[s];
      const uint64_t skip = skip_before(pos, bytes, cap_);
      if (pos + skip + bytes - head_[s] > cap_) {
        status = kLogFull;
      } else {
        std::byte* ring = ring_of(s);
        if (skip >= sizeof(EntryHead)) seal_entry(ring + (pos & (cap_ - 1)), static_cast<uint32_t>(skip), 0, pos);
        pos += skip;
        std::byte* p = ring + (pos & (cap_ - 1));
        uint32_t off = sizeof(EntryHead);
        ItemReader again(r.payload());
        while (again.next(&h, &data)) {
          const LogRecord rec{h.table, static_cast<uint32_t>(data.size()), h.key, h.arg0, h.arg1};
          std::memcpy(p + off, &rec, sizeof rec);
          std::memcpy(p + off + sizeof rec, data.data(), data.size());
          off += sizeof rec + pad8(static_cast<uint32_t>(data.size()));
        }
        seal_entry(p, bytes, n, pos);
        rpc_tail_[s] = pos + bytes;
      }
    }
    for (uint32_t k = 0; k < in.count() && k < Txn::kMaxAccesses; ++k) out.add(ItemReply{status, 0, 0, 0, 0});
    out.finish();
  }

 private:
  std::byte* ring_of(uint32_t s) { return static_cast<std::byte*>(mem_->data()) + layout_.ring(s); }

  bool is_frozen(uint32_t s) const { return s < 64 && (frozen_.load(std::memory_order_relaxed) >> s & 1); }

  int apply_all() {
    int done = 0;
    // Rings recovery asked to freeze: applied below as far as complete,
    // then marked (the recovery thread reads them from then on).
    const uint64_t freeze = freeze_req_.load(std::memory_order_relaxed) & ~frozen_.load(std::memory_order_relaxed);
    for (uint32_t s = 0; s < layout_.rings; ++s) {
      if (is_frozen(s)) continue;
      const uint64_t before = head_[s];
      for (;;) {
        EntryHead eh;
        uint64_t advance = 0;
        const ringlog::Scan got = ringlog::scan(ring_of(s), cap_, head_[s], copy_.data(), &eh, &advance);
        if (got == ringlog::Scan::kNone) break;
        if (got == ringlog::Scan::kEntry) {
          window_[s][entries_[s]++ & window_mask_] = head_[s];
          apply_entry(reinterpret_cast<const std::byte*>(copy_.data()), eh);
          ++done;
        }
        head_[s] += advance;
      }
      if (head_[s] != before)
        store::store_word(reinterpret_cast<uint64_t*>(static_cast<std::byte*>(mem_->data()) + layout_.head(s)), head_[s],
                          std::memory_order_release);
    }
    if (freeze != 0) frozen_.fetch_or(freeze, std::memory_order_release);
    return done;
  }

  // fn(record, data) for each well-formed record of an entry; false at
  // the first malformed one.
  template <typename Fn>
  bool for_each_record(const std::byte* p, const EntryHead& eh, Fn&& fn) const {
    uint32_t off = sizeof eh;
    for (uint32_t k = 0; k < eh.count; ++k) {
      LogRecord rec;
      if (off + sizeof rec > eh.bytes - 8) return false;
      std::memcpy(&rec, p + off, sizeof rec);
      const std::byte* data = p + off + sizeof rec;
      off += sizeof rec + pad8(rec.len);
      if (off > eh.bytes - 8 || !db_.has_table(rec.table) || rec.len != db_.def(rec.table).record_bytes) return false;
      fn(rec, data);
    }
    return true;
  }

  void apply_entry(const std::byte* p, const EntryHead& eh) {
    if (!for_each_record(p, eh, [&](const LogRecord& rec, const std::byte* data) { apply_record(rec, data); }))
      ++e_.stats().log_errors;
  }

  // One record image: the backup's tuple takes it if it is newer than what
  // the tuple holds; a key the backup does not hold yet is inserted with it
  // (a row the transaction inserted, or one whose insert is still in
  // another sender's ring: images are complete, so either order converges).
  void apply_record(const LogRecord& rec, const std::byte* data) {
    store::Store* st = db_.backup(e_.node(), db_.owner(rec.table, rec.key));
    store::Table* tab = st ? st->table(rec.table) : nullptr;
    if (tab == nullptr) {
      ++e_.stats().log_errors;  // not a partition this node backs up
      return;
    }
    store::TupleRef ref;
    int rc = tab->lookup(rec.key, &ref);
    // Every record names its transaction (recovery finds a removed
    // coordinator's entries by it); the copy keeps it when histories are
    // recorded, as the primary's history word does, else 0.
    const uint64_t writer = db_.recording() ? rec.writer : 0;
    if (rc == -ENOENT) {
      const store::Table::MetaWord meta[2] = {{kBackupSeqOffset, rec.seq}, {kBackupWriterOffset, writer}};
      rc = tab->insert(rec.key, {data, rec.len}, nullptr, meta);
      if (rc == 0) {
        ++e_.stats().log_applied;
        return;
      }
      // Another applier of this node inserted it meanwhile: newest wins.
      if (rc == -EEXIST) rc = tab->lookup(rec.key, &ref);
    }
    if (rc != 0) {
      ++e_.stats().log_errors;  // a full backup table, or a corrupt index
      return;
    }
    std::atomic_ref<uint64_t> seq(*reinterpret_cast<uint64_t*>(ref.tuple + kBackupSeqOffset));
    // Newest image wins; another worker's applier copying into the same
    // tuple holds the busy bit for the length of one record copy.
    uint64_t cur = seq.load(std::memory_order_acquire);
    for (;;) {
      if ((cur & kSeqBits) >= (rec.seq & kSeqBits)) break;
      if (cur & kBusy) {
        cur = seq.load(std::memory_order_acquire);
        continue;
      }
      if (seq.compare_exchange_weak(cur, rec.seq | kBusy, std::memory_order_acquire)) {
        std::memcpy(ref.tuple + tab->layout().record_offset(), data, rec.len);
        store::store_word(reinterpret_cast<uint64_t*>(ref.tuple + kBackupWriterOffset), writer,
                          std::memory_order_relaxed);
        seq.store(rec.seq, std::memory_order_release);
        ++e_.stats().log_applied;
        break;
      }
    }
  }

  WorkerEngine& e_;
  Database& db_;
  uint64_t cap_;  // bytes per ring, a power of two
  RegionLayout layout_;
  std::unique_ptr<rdma::DeviceMemory> mem_;
  rdma::MemoryRegion mr_;
  std::vector<uint64_t> head_;      // per sender: bytes applied (published in the head words)
  std::vector<uint64_t> rpc_tail_;  // per sender, RPC form: bytes appended
  std::vector<uint64_t> copy_;      // an entry copied out of its ring, then checked
  // Per sender: the positions of its last entries (a ring's worth), for
  // recovery to find a removed coordinator's entries by.
  std::vector<std::vector<uint64_t>> window_;
  std::vector<uint64_t> entries_;  // per sender: entries applied
  uint64_t window_mask_ = 0;
  std::atomic<uint64_t> freeze_req_{0}, frozen_{0};  // bit s: sender s's ring
};

// The coordinator side: one redo entry per backup node, by RPC or by one-
// sided WRITEs into this worker's ring on each backup; retried until every
// backup has it: the commit point.
class LogStage final : public StageModule {
 public:
  LogStage(WorkerEngine& e, rpc::HandlerId h) : e_(e), handler_(h), cap_(e.options().log_ring_bytes) {}

  // One-sided: registered staging for the coroutines' entries.
  Result<void> init_onesided() {
    uint32_t max_record = 0;
    for (TableId t = 0; t < e_.db().tables(); ++t)
      if (e_.db().has_table(t)) max_record = std::max(max_record, e_.db().def(t).record_bytes);
    // Room for the entries of every backup node at once, as large as the
    // largest transaction could need, but no more than half a ring: an
    // entry never exceeds that (a larger transaction fails the run, see
    // log_onesided), and the last 8 bytes take READs of a ring's head.
    const uint64_t worst =
        uint64_t{Txn::kMaxAccesses + Txn::kMaxInserts} * (e_.db().replicas() - 1) * (sizeof(LogRecord) + pad8(max_record)) +
        uint64_t{e_.db().nodes()} * (kEntryOverhead + sizeof(EntryHead) + 8) + 8;
    per_co_ = std::min<uint64_t>(worst, cap_ / 2);
    rdma::Device& dev = *e_.ctx().device;
    auto mem = dev.alloc_memory(per_co_ * e_.options().coroutines);
    if (!mem.ok()) return make_error(mem.error().code, "log staging: %s", mem.error().message.c_str());
    staging_ = std::move(*mem);
    auto mr = dev.reg_mr(staging_->data(), staging_->size(), rdma::kAccessAll);
    if (!mr.ok()) return make_error(mr.error().code, "log staging: %s", mr.error().message.c_str());
    mr_ = *mr;
    onesided_ = true;
    return {};
  }
  ~LogStage() override {
    if (staging_) (void)e_.ctx().device->dereg_mr(mr_);
  }

  Task<bool> run(Coordinator& c, Txn& t, uint32_t) override {
    Database& db = c.db();
    const uint32_t seq_off = db.replication_word_offset();
    const uint32_t skip_every = c.engine().options().log_skip_every;
    const bool skip = skip_every != 0 && ++logged_ % skip_every == 0;  // the broken variant (tests)
    uint32_t writes = 0;
    for (uint32_t i = 0; i < t.size(); ++i) {
      Access& a = t.access(i);
      if (a.mode != AccessMode::kWrite) continue;
      // This write's replication sequence: one more than the committed
      // version's, which the copy holds (read or validated under the lock).
      uint64_t seq;
      std::memcpy(&seq, a.copy + seq_off, 8);
      ++seq;
      std::memcpy(a.copy + seq_off, &seq, 8);
      ++writes;
    }
    if (writes == 0 && t.inserts() == 0) co_return true;  // read-only: nothing to log
    if (onesided_) co_return co_await log_onesided(c, t, skip);
    co_return co_await log_rpc(c, t, skip);
  }

 private:
  // The backups of access a's partition this entry goes to (the broken
  // variant leaves the first out).
  static uint32_t first_backup(bool skip) { return skip ? 2 : 1; }
  static TableId table_of(Txn& t, uint32_t id) {
    return id < Txn::kMaxAccesses ? t.access(id).table : t.insert_at(id - Txn::kMaxAccesses).table;
  }

  // One logged record: a written access (its image and the sequence the
  // stage gave it) or an inserted row (sequence 0, as its primary tuple
  // starts); `id` is the access index, or Txn::kMaxAccesses + the insert's.
  struct Logged {
    uint32_t id;
    TableId table;
    Key key;
    uint32_t node;  // the primary
    uint64_t seq;
    std::span<const std::byte> record;
  };
  template <typename Fn>
  static void for_each_logged(const Database& db, Txn& t, Fn&& fn) {
    const uint32_t seq_off = db.replication_word_offset();
    for (uint32_t i = 0; i < t.size(); ++i) {
      const Access& a = t.access(i);
      if (a.mode != AccessMode::kWrite) continue;
      uint64_t seq;
      std::memcpy(&seq, a.copy + seq_off, 8);
      if (a.change == RowChange::kErase) seq |= kErased;  // a relocation is a write like any other
      fn(Logged{i, a.table, a.key, a.node, seq, t.record(static_cast<int>(i))});
    }
    for (uint32_t k = 0; k < t.inserts(); ++k) {
      const Insert& in = t.insert_at(k);
      fn(Logged{Txn::kMaxAccesses + k, in.table, in.key, in.node, 0, {in.record, db.def(in.table).record_bytes}});
    }
  }

  Task<bool> log_rpc(Coordinator& c, Txn& t, bool skip) {
    Database& db = c.db();
    const uint64_t writer = t.id();  // every record names its transaction (recovery)
    WorkerStats& st = c.engine().stats();
    ItemBatch& batch = c.items(handler_);
    bool fits = true;
    for_each_logged(db, t, [&](const Logged& r) {
      for (uint32_t k = first_backup(skip); k < db.replicas() && fits; ++k)
        fits =
            batch.add_item(backup_node(r.node, k, db.data_nodes()), r.id, r.table, r.key, r.seq, writer, r.record, 0);
    });
    if (!fits) {
      // More than ItemBatch::kMaxCalls datagrams of records: the run fails
      // (log_errors) rather than commit what its backups do not have.
      if (st.log_errors++ == 0)
        RDTX_LOG(kLogRepl, Error, "RPC logging: a transaction's records need more than %u calls to its backups",
                 ItemBatch::kMaxCalls);
      co_return true;
    }
    if (batch.empty()) co_return true;
    if (c.engine().measuring()) {
      st.log_entries += batch.calls();
      st.log_bytes += uint64_t{batch.calls()} * kEntryOverhead;
      batch.for_each_item(
          [&](uint32_t i) { st.log_bytes += sizeof(LogRecord) + pad8(db.def(table_of(t, i)).record_bytes); });
    }
    // A lost call is sent again (an entry appended twice applies once: the
    // same sequence); a full ring is waited for.
    bool ok = co_await batch.call();
    for (StopBudget budget;;) {
      bool again = !ok;
      for (uint32_t k = 0; k < batch.calls(); ++k) {
        bool full = false;
        batch.for_each_reply_of(k, [&](uint32_t, const ItemReply& r, std::span<const std::byte>) {
          if (r.status == kLogFull) full = true;
          if (r.status == kLogRefused) ++st.log_errors;
        });
        if (full) {
          batch.mark_for_retry(k);
          again = true;
          ++st.log_full_waits;
        }
      }
      if (!again) break;
      if (budget.spent()) {
        batch.for_each_failed_item([&](uint32_t) { ++st.log_errors; });
        break;
      }
      co_await runtime::sleep_for(kApplyPeriodNs);
      ok = co_await batch.retry_failed();
    }
    co_return true;
  }

  // One-sided: per backup node, the entry is laid out in this coroutine's
  // staging, its room reserved in this worker's ring there (tail), and
  // WRITTEN; all backups' WRITEs go with one doorbell per QP and one wait.
  Task<bool> log_onesided(Coordinator& c, Txn& t, bool skip) {
    Database& db = c.db();
    const uint32_t nodes = db.nodes(), data_nodes = db.data_nodes();
    const uint64_t writer = t.id();  // every record names its transaction (recovery)
    WorkerStats& st = c.engine().stats();
    std::byte* stage = static_cast<std::byte*>(staging_->data()) + per_co_ * c.index();
    // Entry bytes and record count per backup node.
    uint32_t bytes[kMaxNodes] = {}, count[kMaxNodes] = {};
    for_each_logged(db, t, [&](const Logged& r) {
      for (uint32_t k = first_backup(skip); k < db.replicas(); ++k) {
        const uint32_t b = backup_node(r.node, k, data_nodes);
        bytes[b] += sizeof(LogRecord) + pad8(static_cast<uint32_t>(r.record.size()));
        ++count[b];
      }
    });
    uint64_t need = 8;
    for (uint32_t b = 0; b < nodes; ++b)
      if (count[b] != 0) need += sizeof(EntryHead) + bytes[b] + kEntryOverhead;
    if (need > per_co_) {
      // Larger than half a ring: the run fails (log_errors) rather than
      // commit what its backups do not have.
      if (st.log_errors++ == 0)
        RDTX_LOG(kLogRepl, Error,
                 "one-sided logging: a transaction's entries (%llu bytes) exceed half a %llu-byte log ring: raise "
                 "txn.log_ring_kb",
                 static_cast<unsigned long long>(need), static_cast<unsigned long long>(cap_));
      co_return true;
    }
    // Lay each entry out: [skip marker room][entry], positions set below.
    uint64_t at[kMaxNodes] = {};
    uint64_t used = 0;
    for (uint32_t b = 0; b < nodes; ++b) {
      if (count[b] == 0) continue;
      bytes[b] += kEntryOverhead;
      at[b] = used + sizeof(EntryHead);
      used += sizeof(EntryHead) + bytes[b];
      std::byte* p = stage + at[b];
      uint32_t off = sizeof(EntryHead);
      for_each_logged(db, t, [&](const Logged& r) {
        bool here = false;
        for (uint32_t k = first_backup(skip); k < db.replicas(); ++k) here |= backup_node(r.node, k, data_nodes) == b;
        if (!here) return;
        const LogRecord rec{r.table, static_cast<uint32_t>(r.record.size()), r.key, r.seq, writer};
        std::memcpy(p + off, &rec, sizeof rec);
        std::memcpy(p + off + sizeof rec, r.record.data(), rec.len);
        off += sizeof rec + pad8(rec.len);
      });
    }
    // Reserve the room in every ring at once (no wait in between, so no
    // coroutine ever holds room in one ring while it waits for another: an
    // applier stops at a reserved entry until it lands); a full ring: READ
    // its head again, and wait if it is still full.
    uint64_t pos[kMaxNodes] = {};
    int failed_reads = 0;
    for (StopBudget budget;;) {
      uint32_t full = UINT32_MAX;
      for (uint32_t b = 0; b < nodes && full == UINT32_MAX; ++b)
        if (count[b] != 0 && !ring_[b].fits(bytes[b], cap_)) full = b;
      if (full == UINT32_MAX) {
        for (uint32_t b = 0; b < nodes; ++b)
          if (count[b] != 0) pos[b] = ring_[b].reserve(bytes[b], cap_);
        break;
      }
      const uint64_t was = ring_[full].head;
      if (!co_await read_head(c, full)) ++failed_reads;
      if (ring_[full].head != was) continue;  // room was freed: try again at once
      ++st.log_full_waits;
      if (budget.spent() || failed_reads > 3) {
        ++st.log_errors;
        co_return true;
      }
      co_await runtime::sleep_for(kApplyPeriodNs);
    }
    // Crash injection (fault.hpp, kLog): the entry to one backup node only.
    uint32_t cut_after = UINT32_MAX;
    if (fault::armed_at(fault::KillPoint::kLog)) [[unlikely]] {
      uint32_t targets = 0, first = 0;
      for (uint32_t b = nodes; b-- > 0;)
        if (count[b] != 0) ++targets, first = b;
      if (targets >= 2) cut_after = first;
    }
    // Seal and WRITE.
    for (StopBudget budget;;) {
      OneSidedBatch& batch = c.onesided();
      for (uint32_t b = 0; b < nodes && b <= cut_after; ++b) {
        if (count[b] == 0) continue;
        const LogRegionDesc& r = c.engine().log_regions().peer(b);
        const uint64_t ring = r.addr + RegionLayout{r.senders, r.ring_bytes}.ring(sender_id());
        ringlog::seal_for_write(stage + at[b], bytes[b], count[b], pos[b], cap_,
                                [&](std::byte* local, uint32_t len, uint64_t off) {
                                  add_write(batch, b, local, len, ring + off, r.rkey);
                                });
        if (c.engine().measuring()) {
          ++st.log_entries;
          st.log_bytes += bytes[b];
        }
      }
      if (cut_after != UINT32_MAX) {
        co_await batch.execute();
        fault::die_at(fault::KillPoint::kLog, t.id(), "its entry WRITten to one backup node of several");
      }
      if (co_await batch.execute()) break;
      // A failed QP was reconnected: WRITE the same bytes again.
      if (budget.spent()) {
        ++st.log_errors;
        break;
      }
    }
    co_return true;
  }

  void add_write(OneSidedBatch& batch, uint32_t node, std::byte* local, uint32_t len, uint64_t remote, uint32_t rkey) {
    batch.write({node, remote, rkey}, local, len, 0, mr_.lkey);
  }

  // READs this worker's head word on backup b (into the staging's end).
  Task<bool> read_head(Coordinator& c, uint32_t b) {
    const LogRegionDesc& r = c.engine().log_regions().peer(b);
    std::byte* dst = static_cast<std::byte*>(staging_->data()) + per_co_ * c.index() + per_co_ - 8;
    OneSidedBatch& batch = c.onesided();
    batch.read({b, r.addr + RegionLayout{r.senders, r.ring_bytes}.head(sender_id()), r.rkey}, dst, 8, 0, mr_.lkey);
    if (!co_await batch.execute()) co_return false;
    uint64_t h;
    std::memcpy(&h, dst, 8);
    ring_[b].saw_head(h);
    co_return true;
  }

  // This worker's ring in the paired worker's region on each backup.
  uint32_t sender_id() const { return e_.node(); }

  WorkerEngine& e_;
  rpc::HandlerId handler_;
  uint64_t cap_;  // bytes per ring (every worker's: the configuration is the cluster's)
  uint64_t logged_ = 0;
  bool onesided_ = false;
  std::unique_ptr<rdma::DeviceMemory> staging_;
  rdma::MemoryRegion mr_;
  uint64_t per_co_ = 0;
  ringlog::RingTail ring_[kMaxNodes];  // per backup node: this worker's ring there
};

}  // namespace

namespace {

// A node's appliers, for recovery (Database::node_state "log-appliers").
struct NodeAppliers {
  std::vector<LogApplier*> list;
};

NodeAppliers* appliers_of(Database& db, uint32_t node) {
  return static_cast<NodeAppliers*>(db.node_state(node, "log-appliers").get());
}

}  // namespace

void for_each_frozen_record(Database& db, uint32_t node, const std::function<void(const LoggedRecord&)>& fn) {
  NodeAppliers* a = appliers_of(db, node);
  if (a == nullptr) return;
  for (LogApplier* l : a->list)
    l->for_each_frozen_record([&](const LogRecord& rec, const std::byte* data) {
      fn(LoggedRecord{rec.writer, rec.table, rec.key, rec.seq, {data, rec.len}});
    });
}

bool logged_row_change(uint64_t seq) { return seq == 0 || (seq & kErased) != 0; }

bool read_backup_record(Database& db, uint32_t node, TableId table, Key key, uint64_t* seq,
                        std::vector<std::byte>* record) {
  store::Store* st = db.backup(node, db.owner(table, key));
  store::Table* tab = st ? st->table(table) : nullptr;
  store::TupleRef ref;
  if (tab == nullptr || tab->lookup(key, &ref) != 0) return false;
  const std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t*>(ref.tuple + kBackupSeqOffset));
  const uint32_t len = tab->layout().record_bytes;
  record->resize(len);
  for (;;) {
    const uint64_t before = word.load(std::memory_order_acquire);
    if (before & kBusy) continue;
    std::vector<uint64_t> words((len + 7) / 8);
    store::load_words(words.data(), reinterpret_cast<const uint64_t*>(ref.tuple + tab->layout().record_offset()),
                      words.size());
    std::atomic_thread_fence(std::memory_order_acquire);
    if (word.load(std::memory_order_relaxed) != before) continue;
    std::memcpy(record->data(), words.data(), len);
    *seq = before;
    return true;
  }
}

Result<void> revert_backup_record(Database& db, uint32_t node, TableId table, Key key, uint64_t expect_seq,
                                  uint64_t seq, uint64_t writer, std::span<const std::byte> record) {
  store::Store* st = db.backup(node, db.owner(table, key));
  store::Table* tab = st ? st->table(table) : nullptr;
  if (tab == nullptr)
    return make_error(ENOENT, "node %u holds no backup of table '%s' key %llu", node, db.def(table).name.c_str(),
                      static_cast<unsigned long long>(key));
  store::TupleRef ref;
  if (tab->lookup(key, &ref) != 0)
    return make_error(ENOENT, "node %u's backup of table '%s' has no key %llu", node, db.def(table).name.c_str(),
                      static_cast<unsigned long long>(key));
  if (record.size() != tab->layout().record_bytes) return make_error(EINVAL, "record size");
  std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t*>(ref.tuple + kBackupSeqOffset));
  uint64_t cur = word.load(std::memory_order_acquire);
  for (;;) {
    if (cur & kBusy) {
      cur = word.load(std::memory_order_acquire);
      continue;
    }
    // It holds another image than the one to undo: nothing to revert.
    if (cur != expect_seq) return {};
    if (word.compare_exchange_weak(cur, cur | kBusy, std::memory_order_acquire)) break;
  }
  std::memcpy(ref.tuple + tab->layout().record_offset(), record.data(), record.size());
  store::store_word(reinterpret_cast<uint64_t*>(ref.tuple + kBackupWriterOffset), db.recording() ? writer : 0,
                    std::memory_order_relaxed);
  word.store(seq, std::memory_order_release);
  return {};
}

Result<std::unique_ptr<StageModule>> create_log_stage(WorkerEngine& e) {
  const uint32_t senders = e.db().nodes();  // one ring per node: its worker of this index
  // The handler is registered on every worker (handler ids agree across
  // nodes); only a node that holds data backs partitions up and has rings.
  // A compute node's refuses every record (a malformed request: nobody logs
  // to a node that holds no data).
  Result<rpc::HandlerId> h = make_error(EINVAL, "no log handler");
  if (e.db().holds_data(e.node())) {
    auto applier = std::make_unique<LogApplier>(e, senders);
    LogApplier* a = applier.get();
    h = e.register_handler("log.append", [a](rpc::Request& r) { a->append(r); });
    if (!h.ok()) return h.error();
    std::shared_ptr<void>& slot = e.db().node_state(e.node(), "log-appliers");
    if (!slot) slot = std::make_shared<NodeAppliers>();
    static_cast<NodeAppliers*>(slot.get())->list.push_back(a);
    e.add_service(std::move(applier));
  } else {
    h = e.register_handler("log.append", [](rpc::Request& r) {
      ItemReader in(r.payload());
      ItemWriter out(r);
      ItemHeader ih;
      std::span<const std::byte> data;
      while (in.next(&ih, &data)) out.add(ItemReply{kLogRefused, 0, 0, 0, 0});
      out.finish();
    });
    if (!h.ok()) return h.error();
    e.log_regions().own = LogRegionDesc{0, 0, 0, e.node(), e.ctx().index, 0};  // none: the runner expects none
  }
  // A memory node runs no coordinator: no log stage.
  if (e.options().stage(Stage::kLog) == Primitive::kOff || !e.db().coordinates(e.node()))
    return std::unique_ptr<StageModule>();
  auto stage = std::make_unique<LogStage>(e, *h);
  if (e.options().stage(Stage::kLog) == Primitive::kOneSided) RDTX_TRY(stage->init_onesided());
  return std::unique_ptr<StageModule>(std::move(stage));
}

}  // namespace rdtx::txn
