#include "txn/recovery.hpp"

#include <cstdio>
#include <chrono>
#include <cstring>
#include <map>
#include <set>
#include <thread>
#include <tuple>

#include "env/tsc.hpp"
#include "store/tuple.hpp"
#include "txn/replication.hpp"
#include "txn/service.hpp"

namespace rdtx::txn {

namespace {

// What the phases exchange: arrays of these, as bytes.
struct Held {  // a primary tuple a removed node's attempt holds
  uint64_t txn;
  uint32_t table;
  uint32_t node;  // the primary's
  uint64_t key;
};
struct Logged {  // a record of such an attempt in an entry on a backup
  uint64_t txn;
  uint32_t table;
  uint32_t backup;
  uint64_t key;
  uint64_t seq;
};
struct ImageHead {  // then `len` bytes of record, padded to 8
  uint64_t txn;
  uint32_t table;
  uint32_t committed;  // 1: the transaction's new image; 0: the primary's, to revert to
  uint64_t key;
  uint64_t seq;
  uint64_t writer;
  uint32_t len;
  uint32_t pad;
};

template <typename T>
void put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
template <typename T>
Result<std::vector<T>> all_of(const std::vector<std::string>& blobs, const char* phase) {
  std::vector<T> out;
  for (const std::string& b : blobs) {
    if (b.size() % sizeof(T) != 0) return make_error(EPROTO, "recovery: a malformed '%s' blob (%zu bytes)", phase, b.size());
    for (size_t off = 0; off < b.size(); off += sizeof(T)) {
      T v;
      std::memcpy(&v, b.data() + off, sizeof v);
      out.push_back(v);
    }
  }
  return out;
}

struct Copy {  // a record recovery touched, as its primary holds it now
  uint64_t txn;
  uint32_t table;
  uint32_t pad;
  uint64_t key;
  uint64_t seq;
  uint64_t hash;  // record_hash()
};

uint64_t record_hash(std::span<const std::byte> rec) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (std::byte b : rec) h = (h ^ static_cast<uint64_t>(b)) * 0x100000001b3ull;
  return h;
}

using Rec = std::pair<uint32_t, uint64_t>;  // (table, key)

std::string rec_text(const Database& db, uint64_t txn, uint32_t table, uint64_t key) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "transaction %llx (node %u, worker %u, coroutine %u), table '%s' key %llu",
                static_cast<unsigned long long>(txn), txn_node(txn), txn_worker(txn), txn_coroutine(txn),
                db.has_table(table) ? db.def(table).name.c_str() : "?", static_cast<unsigned long long>(key));
  return buf;
}

// The local primary tuple of (table, key), or nullptr.
std::byte* primary_tuple(Database& db, uint32_t table, uint64_t key) {
  const uint32_t node = db.owner(table, key);
  if (!db.is_local(node)) return nullptr;
  store::Table* tab = db.store(node).table(table);
  store::TupleRef ref;
  if (tab == nullptr || tab->lookup(key, &ref) != 0) return nullptr;
  return ref.tuple;
}

uint64_t word_at(const std::byte* tuple, uint32_t off) {
  return store::load_word(reinterpret_cast<const uint64_t*>(tuple + off), std::memory_order_acquire);
}

}  // namespace

Result<RecoveryFigures> resolve_removed(Database& db, const ProtocolDef& p, uint64_t removed, uint64_t wait_ns,
                                        const RecoveryExchange& exchange, bool skip_install) {
  if (p.recovery == nullptr)
    return make_error(ENOTSUP,
                      "protocol '%s' cannot resolve a removed coordinator's transactions yet (recovery is "
                      "implemented for occ and farm)",
                      p.name);
  const RecoveryHooks& hooks = *p.recovery;
  RecoveryFigures fig;
  uint64_t mark = env::monotonic_ns();
  auto lap = [&](const char* what) {
    const uint64_t now = env::monotonic_ns();
    char buf[48];
    std::snprintf(buf, sizeof buf, "%s%s %.1f", fig.timing.empty() ? "" : ", ", what,
                  static_cast<double>(now - mark) / 1e6);
    fig.timing += buf;
    mark = now;
  };
  // Each exchange, timed.
  auto exchange_timed = [&](const char* phase, const std::string& blob) {
    auto r = exchange(phase, blob);
    lap(phase);
    return r;
  };
  std::vector<uint32_t> local;  // this process's nodes that hold data
  for (uint32_t n = 0; n < db.data_nodes(); ++n)
    if (db.is_local(n)) local.push_back(n);
  for (uint32_t n = 0; n < db.data_nodes(); ++n)
    if (removed >> n & 1)
      return make_error(ENOTSUP, "recovery: node %u held data (promoting a backup is not implemented)", n);
  // Phase "locks": the tuples a removed node's attempt holds here.
  // Every service that takes work from other nodes (the log appliers,
  // FaRM's messenger) processes what the removed nodes sent, then nothing.
  for (uint32_t n : local) {
    auto* services = static_cast<std::vector<Service*>*>(db.node_state(n, "services").get());
    if (services == nullptr) continue;
    for (Service* s : *services) s->freeze_senders(removed);
    const uint64_t end = env::monotonic_ns() + wait_ns;
    for (Service* s : *services)
      while (!s->senders_frozen(removed)) {
        if (env::monotonic_ns() >= end)
          return make_error(ETIMEDOUT,
                            "recovery: service %s of node %u did not stop taking work from the removed nodes within "
                            "%.0f ms (its worker's loop not running?)",
                            s->name().c_str(), n, static_cast<double>(wait_ns) / 1e6);
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
  }
  std::string mine;
  for (uint32_t n : local)
    for (TableId t = 0; t < db.tables(); ++t) {
      if (!db.has_table(t) || db.def(t).replicated) continue;
      store::Table* tab = db.store(n).table(t);
      if (tab == nullptr) continue;
      const store::TupleLayout& l = tab->layout();
      for (uint32_t i = 0; i < tab->high_water(); ++i) {
        const std::byte* tuple = tab->tuple(i);
        const store::TupleHeader h = store::read_header(tuple, l);
        if (!store::is_live(h.state)) continue;
        const uint64_t holder = hooks.holder(tuple, l);
        if (holder != 0 && txn_node(holder) < 64 && (removed >> txn_node(holder) & 1))
          put(mine, Held{holder, t, n, h.key});
      }
    }
  lap("freeze and scan");
  auto blobs = exchange_timed("locks", mine);
  if (!blobs.ok()) return blobs.error();
  auto held = all_of<Held>(*blobs, "locks");
  if (!held.ok()) return held.error();
  std::map<uint64_t, std::set<Rec>> locked;  // by transaction
  for (const Held& h : *held) locked[h.txn].insert({h.table, h.key});
  fig.transactions = locked.size();
  if (!locked.empty() && db.replicas() <= 1)
    return make_error(EHOSTDOWN,
                      "recovery: the removed node(s) held %zu lock(s) of %zu transaction(s), and without a log "
                      "(cluster.replicas = 1) a write-back cut in the middle cannot be told from an abort",
                      held->size(), locked.size());

  // Phase "logs": what those transactions logged on this node's backups.
  mine.clear();
  std::string refused;
  for (uint32_t n : local)
    for_each_frozen_record(db, n, [&](const LoggedRecord& r) {
      if (!locked.contains(r.txn)) return;
      if (logged_row_change(r.seq) && refused.empty()) refused = rec_text(db, r.txn, r.table, r.key);
      put(mine, Logged{r.txn, r.table, n, r.key, r.seq});
    });
  if (!refused.empty())
    return make_error(ENOTSUP, "recovery: %s inserted or erased a row, which recovery does not resolve yet",
                      refused.c_str());
  blobs = exchange_timed("logs", mine);
  if (!blobs.ok()) return blobs.error();
  auto logs = all_of<Logged>(*blobs, "logs");
  if (!logs.ok()) return logs.error();
  std::map<uint64_t, std::map<Rec, std::map<uint32_t, uint64_t>>> logged;  // txn -> record -> backup -> seq
  for (const Logged& g : *logs) logged[g.txn][{g.table, g.key}][g.backup] = g.seq;

  // Decide (every node the same): committed iff each record it locked or
  // logged is in its entry on every backup of its partition.
  std::set<uint64_t> committed;
  for (const auto& [txn, recs] : locked) {
    static const std::map<Rec, std::map<uint32_t, uint64_t>> kNone;
    const auto lt = logged.find(txn);
    const auto& mine_logged = lt == logged.end() ? kNone : lt->second;
    std::set<Rec> all = recs;
    for (const auto& [r, by] : mine_logged) all.insert(r);
    bool ok = true;
    for (const Rec& r : all) {
      const uint32_t part = db.owner(r.first, r.second);
      const auto it = mine_logged.find(r);
      for (uint32_t k = 1; k < db.replicas() && ok; ++k)
        ok = it != mine_logged.end() && it->second.contains(backup_node(part, k, db.data_nodes()));
    }
    if (ok) {
      committed.insert(txn);
      continue;
    }
    for (const auto& [r, by] : mine_logged)
      if (!recs.contains(r))
        return make_error(EIO,
                          "recovery: %s was written back on its primary (unlocked), so its transaction passed the "
                          "commit point, but a backup of the transaction's records has no entry of it (overwritten "
                          "in its log ring?): the log cannot decide it",
                          rec_text(db, txn, r.first, r.second).c_str());
  }
  fig.committed = committed.size();

  // Phase "images": committed images from each partition's first backup,
  // for records still locked; the primaries' images of records a backup
  // applied for a transaction that did not commit.
  mine.clear();
  auto put_image = [&](const ImageHead& h, std::span<const std::byte> rec) {
    ImageHead hh = h;
    hh.len = static_cast<uint32_t>(rec.size());
    put(mine, hh);
    mine.append(reinterpret_cast<const char*>(rec.data()), rec.size());
    mine.append((8 - rec.size() % 8) % 8, '\0');
  };
  for (uint32_t n : local)
    for_each_frozen_record(db, n, [&](const LoggedRecord& r) {
      if (!committed.contains(r.txn) || !locked.at(r.txn).contains({r.table, r.key})) return;
      if (backup_node(db.owner(r.table, r.key), 1, db.data_nodes()) != n) return;
      put_image(ImageHead{r.txn, r.table, 1, r.key, r.seq, r.txn, 0, 0}, r.record);
    });
  for (const auto& [txn, recs] : logged) {
    if (committed.contains(txn)) continue;
    for (const auto& [r, by] : recs) {
      std::byte* tuple = primary_tuple(db, r.first, r.second);
      if (tuple == nullptr) continue;  // another node's primary
      const store::TupleLayout& l = db.layout(r.first);
      const uint64_t writer = db.recording() ? word_at(tuple, db.history_word_offset()) : 0;
      put_image(ImageHead{txn, r.first, 0, r.second, word_at(tuple, db.replication_word_offset()), writer, 0, 0},
                {tuple + l.record_offset(), l.record_bytes});
    }
  }
  blobs = exchange_timed("images", mine);
  if (!blobs.ok()) return blobs.error();
  std::map<std::tuple<uint64_t, uint32_t, uint64_t>, std::pair<ImageHead, std::string>> images;  // (txn, table, key)
  for (const std::string& b : *blobs)
    for (size_t off = 0; off < b.size();) {
      ImageHead h;
      if (b.size() - off < sizeof h) return make_error(EPROTO, "recovery: a malformed 'images' blob");
      std::memcpy(&h, b.data() + off, sizeof h);
      off += sizeof h;
      const size_t padded = (h.len + 7u) & ~size_t{7};
      if (b.size() - off < padded || !db.has_table(h.table) || h.len != db.def(h.table).record_bytes)
        return make_error(EPROTO, "recovery: a malformed 'images' blob");
      images[{h.txn, h.table, h.key}] = {h, b.substr(off, h.len)};
      off += padded;
    }

  // This node's backups undo what did not commit.
  for (const auto& [txn, recs] : logged) {
    if (committed.contains(txn)) continue;
    for (const auto& [r, by] : recs)
      for (const auto& [backup, seq] : by) {
        if (!db.is_local(backup)) continue;
        auto it = images.find({txn, r.first, r.second});
        if (it == images.end() || it->second.first.committed != 0)
          return make_error(EPROTO, "recovery: no primary image to revert %s to", rec_text(db, txn, r.first, r.second).c_str());
        const ImageHead& h = it->second.first;
        RDTX_TRY(revert_backup_record(db, backup, r.first, r.second, seq, h.seq, h.writer,
                                      std::as_bytes(std::span(it->second.second))));
        ++fig.reverted;
      }
  }

  // Phase "installed" (with the reverts above: no lock is released before
  // both are done everywhere): this node's primaries complete what
  // committed, the locks still held, and say what each record now is.
  mine.clear();
  for (const Held& h : *held) {
    if (!db.is_local(h.node)) continue;
    std::byte* tuple = primary_tuple(db, h.table, h.key);
    const store::TupleLayout& l = db.layout(h.table);
    if (tuple == nullptr || hooks.holder(tuple, l) != h.txn)
      return make_error(EPROTO, "recovery: %s is no longer held by it", rec_text(db, h.txn, h.table, h.key).c_str());
    if (committed.contains(h.txn) && !skip_install) {
      auto it = images.find({h.txn, h.table, h.key});
      if (it == images.end() || it->second.first.committed != 1)
        return make_error(EPROTO, "recovery: no committed image of %s", rec_text(db, h.txn, h.table, h.key).c_str());
      hooks.install(tuple, l, db, std::as_bytes(std::span(it->second.second)), it->second.first.seq, h.txn);
      ++fig.installed;
    }
    put(mine, Copy{h.txn, h.table, 0, h.key, word_at(tuple, db.replication_word_offset()),
                   record_hash({tuple + l.record_offset(), l.record_bytes})});
  }
  blobs = exchange_timed("installed", mine);
  if (!blobs.ok()) return blobs.error();
  auto copies = all_of<Copy>(*blobs, "installed");
  if (!copies.ok()) return copies.error();

  // Phase "verified": every backup of every record recovery touched holds
  // what its primary now holds (the primaries' locks keep them still); a
  // backup behind is given a moment for its appliers.
  std::string wrong;
  for (const Copy& cp : *copies) {
    const uint32_t part = db.owner(cp.table, cp.key);
    for (uint32_t k = 1; k < db.replicas() && wrong.empty(); ++k) {
      const uint32_t b = backup_node(part, k, db.data_nodes());
      if (!db.is_local(b)) continue;
      uint64_t seq = 0, hash = 0;
      for (int tries = 0;; ++tries) {
        std::vector<std::byte> rec;
        if (!read_backup_record(db, b, cp.table, cp.key, &seq, &rec)) {
          seq = UINT64_MAX;
          break;
        }
        hash = record_hash(rec);
        if (seq >= cp.seq || tries >= 200) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (seq != cp.seq || hash != cp.hash) {
        char buf[160];
        std::snprintf(buf, sizeof buf, ": the primary (node %u) holds sequence %llu, backup node %u %s", part,
                      static_cast<unsigned long long>(cp.seq), b,
                      seq == UINT64_MAX ? "no copy"
                                        : (std::string("sequence ") + std::to_string(seq) +
                                           (seq == cp.seq ? " with another record" : ""))
                                              .c_str());
        wrong = rec_text(db, cp.txn, cp.table, cp.key) + buf;
      }
    }
  }
  blobs = exchange_timed("verified", wrong);
  if (!blobs.ok()) return blobs.error();
  for (const std::string& w : *blobs)
    if (!w.empty())
      return make_error(EIO, "recovery: the copies of a record it resolved differ: %s", w.c_str());

  // Every copy checked everywhere: the locks go.
  for (const Held& h : *held) {
    if (!db.is_local(h.node)) continue;
    hooks.release(primary_tuple(db, h.table, h.key), db.layout(h.table));
    ++fig.locks_released;
  }
  lap("released");
  return fig;
}

}  // namespace rdtx::txn
