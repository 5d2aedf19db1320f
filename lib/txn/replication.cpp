#include "txn/replication.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <tuple>

#include "store/tuple.hpp"
#include "txn/engine.hpp"
#include "txn/item_batch.hpp"

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
      for (uint32_t i = 0; i < tab->capacity(); ++i) {
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
        }
        ++d.tuples;
        d.sum += tuple_hash(h.key, seq, writer, tuple + l.record_offset(), l.record_bytes);
      }
      out.push_back(d);
    }
  };
  for (uint32_t n = 0; n < db.nodes(); ++n)
    if (db.is_local(n)) digest(db.store(n), n, n, true);
  for (const Database::BackupCopy& b : db.backups()) digest(*b.store, b.partition, b.node, false);
  return out;
}

Result<void> compare_replicas(const Database& db, const std::vector<ReplicaDigest>& all) {
  if (db.replicas() <= 1) return {};
  std::map<std::tuple<uint32_t, uint32_t, uint32_t>, const ReplicaDigest*> by;
  for (const ReplicaDigest& d : all) by[{d.partition, d.table, d.holder}] = &d;
  for (uint32_t p = 0; p < db.nodes(); ++p)
    for (TableId t = 0; t < db.tables(); ++t) {
      if (!db.has_table(t)) continue;
      auto prim = by.find({p, t, p});
      if (prim == by.end()) return make_error(EPROTO, "no digest of partition %u of table '%s' on its primary", p, db.def(t).name.c_str());
      for (uint32_t k = 1; k < db.replicas(); ++k) {
        const uint32_t b = backup_node(p, k, db.nodes());
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

// An entry: [EntryHead][LogRecord + record]...[uint64 bytes]; `bytes` is
// the whole entry, at its start and its end (DrTM+H: a reader tells a
// complete entry by the two). count == 0: a skip to the ring's start.
struct EntryHead {
  uint32_t bytes;
  uint32_t count;
};

// One sender's ring on its receiving worker. head/tail count bytes ever
// written (offsets mod the capacity).
struct Ring {
  std::vector<std::byte> buf;
  uint64_t head = 0;
  uint64_t tail = 0;
  std::byte* at(uint64_t pos) { return buf.data() + (pos & (buf.size() - 1)); }
};

// The worker's rings (one per sender) and their applier.
class LogApplier final : public Service {
 public:
  LogApplier(WorkerEngine& e, uint32_t senders)
      : Service("log-applier", kApplyPeriodNs), e_(e), db_(e.db()), rings_(senders) {}

  Result<void> start() override {
    for (Ring& r : rings_) r.buf.assign(kLogRingBytes, std::byte{0});
    return {};
  }
  int poll() override { return apply_all(); }
  bool drain() override {
    apply_all();
    return true;
  }
  void settle() override { apply_all(); }

  // The handler: appends request `r`'s records as one entry to the caller's
  // ring, or refuses them all (full ring, malformed request).
  void append(rpc::Request& r) {
    ItemReader in(r.payload());
    ItemWriter out(r);
    int32_t status = kLogOk;
    Ring* ring = r.src() < rings_.size() ? &rings_[r.src()] : nullptr;
    // First pass: validate and size the entry.
    uint32_t bytes = sizeof(EntryHead) + 8;
    ItemHeader h;
    std::span<const std::byte> data;
    uint32_t n = 0;
    if (ring == nullptr || !in.valid()) status = kLogRefused;
    while (status == kLogOk && in.next(&h, &data)) {
      if (!db_.has_table(h.table) || data.size() != db_.def(h.table).record_bytes) status = kLogRefused;
      bytes += sizeof(LogRecord) + pad8(static_cast<uint32_t>(data.size()));
      ++n;
    }
    if (status == kLogOk && (!in.valid() || n != in.count())) status = kLogRefused;
    if (status == kLogOk && bytes + sizeof(EntryHead) + 8 > kLogRingBytes / 2) status = kLogRefused;
    if (status == kLogOk) {
      // Room for the entry, plus a skip record if it would wrap.
      const uint64_t cap = ring->buf.size();
      const uint64_t to_end = cap - (ring->tail & (cap - 1));
      const uint64_t need = bytes + (to_end < bytes ? to_end : 0);
      if (ring->tail + need - ring->head > cap) {
        status = kLogFull;
      } else {
        if (to_end < bytes) {
          const EntryHead skip{static_cast<uint32_t>(to_end), 0};
          std::memcpy(ring->at(ring->tail), &skip, sizeof skip);
          ring->tail += to_end;
        }
        std::byte* p = ring->at(ring->tail);
        const EntryHead eh{bytes, n};
        std::memcpy(p, &eh, sizeof eh);
        uint32_t off = sizeof eh;
        ItemReader again(r.payload());
        while (again.next(&h, &data)) {
          const LogRecord rec{h.table, static_cast<uint32_t>(data.size()), h.key, h.arg0, h.arg1};
          std::memcpy(p + off, &rec, sizeof rec);
          std::memcpy(p + off + sizeof rec, data.data(), data.size());
          off += sizeof rec + pad8(static_cast<uint32_t>(data.size()));
        }
        const uint64_t trailer = bytes;
        std::memcpy(p + off, &trailer, 8);
        ring->tail += bytes;
      }
    }
    for (uint32_t k = 0; k < in.count() && k < Txn::kMaxAccesses; ++k) out.add(ItemReply{status, 0, 0, 0, 0});
    out.finish();
  }

 private:
  int apply_all() {
    int done = 0;
    for (Ring& r : rings_)
      while (r.head < r.tail) {
        EntryHead eh;
        std::memcpy(&eh, r.at(r.head), sizeof eh);
        if (eh.count > 0) {
          uint64_t trailer;
          std::memcpy(&trailer, r.at(r.head) + eh.bytes - 8, 8);
          if (trailer != eh.bytes) {  // cannot happen: this worker wrote it
            ++e_.stats().log_errors;
          } else {
            apply_entry(r.at(r.head), eh);
          }
          ++done;
        }
        r.head += eh.bytes;
      }
    return done;
  }

  void apply_entry(const std::byte* p, const EntryHead& eh) {
    uint32_t off = sizeof eh;
    for (uint32_t k = 0; k < eh.count; ++k) {
      LogRecord rec;
      std::memcpy(&rec, p + off, sizeof rec);
      const std::byte* data = p + off + sizeof rec;
      off += sizeof rec + pad8(rec.len);
      store::Store* st = db_.backup(e_.node(), db_.owner(rec.table, rec.key));
      store::Table* tab = st ? st->table(rec.table) : nullptr;
      store::TupleRef ref;
      if (tab == nullptr || tab->lookup(rec.key, &ref) != 0) {
        ++e_.stats().log_errors;  // not a record this node backs up
        continue;
      }
      auto* seqw = reinterpret_cast<uint64_t*>(ref.tuple + kBackupSeqOffset);
      std::atomic_ref<uint64_t> seq(*seqw);
      // Newest image wins; another worker's applier copying into the same
      // tuple holds the busy bit for the length of one record copy.
      uint64_t cur = seq.load(std::memory_order_acquire);
      for (;;) {
        if ((cur & ~kBusy) >= rec.seq) break;
        if (cur & kBusy) {
          cur = seq.load(std::memory_order_acquire);
          continue;
        }
        if (seq.compare_exchange_weak(cur, rec.seq | kBusy, std::memory_order_acquire)) {
          std::memcpy(ref.tuple + tab->layout().record_offset(), data, rec.len);
          store::store_word(reinterpret_cast<uint64_t*>(ref.tuple + kBackupWriterOffset), rec.writer,
                            std::memory_order_relaxed);
          seq.store(rec.seq, std::memory_order_release);
          ++e_.stats().log_applied;
          break;
        }
      }
    }
  }

  WorkerEngine& e_;
  Database& db_;
  std::vector<Ring> rings_;
};

// The coordinator side: one redo entry per backup node, retried until every
// backup has it.
class LogStage final : public StageModule {
 public:
  LogStage(rpc::HandlerId h) : handler_(h) {}

  Task<bool> run(Coordinator& c, Txn& t, uint32_t) override {
    Database& db = c.db();
    const uint32_t nodes = db.nodes();
    const uint32_t seq_off = db.replication_word_offset();
    const uint64_t writer = db.recording() ? t.id() : 0;
    WorkerStats& st = c.engine().stats();
    ItemBatch& batch = c.items(handler_);
    uint32_t records = 0;
    const uint32_t skip_every = c.engine().options().log_skip_every;
    const bool skip = skip_every != 0 && ++logged_ % skip_every == 0;  // the broken variant (tests)
    for (uint32_t i = 0; i < t.size(); ++i) {
      Access& a = t.access(i);
      if (a.mode != AccessMode::kWrite) continue;
      // This write's replication sequence: one more than the committed
      // version's, which the copy holds (read or validated under the lock).
      uint64_t seq;
      std::memcpy(&seq, a.copy + seq_off, 8);
      ++seq;
      std::memcpy(a.copy + seq_off, &seq, 8);
      const std::span<const std::byte> rec = t.record(static_cast<int>(i));
      for (uint32_t k = skip ? 2 : 1; k < db.replicas(); ++k) {
        if (!batch.add_to(backup_node(a.node, k, nodes), i, seq, writer, rec, 0)) {
          ++st.log_errors;  // more than the batch holds: cannot happen within Txn::kMaxAccesses
          co_return true;
        }
        ++records;
      }
    }
    if (records == 0) co_return true;  // read-only: nothing to log
    if (c.engine().measuring()) {
      st.log_entries += batch.calls();
      st.log_bytes += uint64_t{batch.calls()} * (sizeof(EntryHead) + 8);
      batch.for_each_item(
          [&](uint32_t i) { st.log_bytes += sizeof(LogRecord) + pad8(db.def(t.access(i).table).record_bytes); });
    }
    // The commit point: every backup has its entry. A lost call is sent
    // again (an entry appended twice applies once: same sequence); a full
    // ring is waited for.
    bool ok = co_await batch.call();
    for (int late = 0;;) {
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
      late += runtime::Worker::current()->stopping();
      if (late > 3) {
        batch.for_each_failed_item([&](uint32_t) { ++st.log_errors; });
        break;
      }
      co_await runtime::sleep_for(kApplyPeriodNs);
      ok = co_await batch.retry_failed();
    }
    co_return true;
  }

 private:
  rpc::HandlerId handler_;
  uint64_t logged_ = 0;
};

}  // namespace

Result<std::unique_ptr<StageModule>> create_log_stage(WorkerEngine& e) {
  const uint32_t senders = e.db().nodes() * e.workers_per_node();
  auto applier = std::make_unique<LogApplier>(e, senders);
  LogApplier* a = applier.get();
  auto h = e.register_handler("log.append", [a](rpc::Request& r) { a->append(r); });
  if (!h.ok()) return h.error();
  e.add_service(std::move(applier));
  if (e.options().stage(Stage::kLog) == Primitive::kOff) return std::unique_ptr<StageModule>();
  return std::unique_ptr<StageModule>(std::make_unique<LogStage>(*h));
}

}  // namespace rdtx::txn
