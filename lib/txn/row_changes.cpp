// Inserted rows (Txn::insert) and row changes (Txn::erase, Txn::relocate)
// applied on their owners once every stage that can abort has passed, and
// their owner side. A row of the coordinator's own node is changed in its
// store directly; a row of another node (always, for a compute node's
// coordinator: cluster.memory_nodes) goes to its owner in one `rows` RPC
// per owner, every owner's in flight together, and is changed there by
// the owner's worker. The owner checks every item (table, owner, lengths)
// and answers a status per item. An inserted row starts with the
// protocol's metadata word, if it gives one (Protocol::insert_word: NAM-DB's
// header of the inserter's commit version); an erase the protocol versions
// itself (ProtocolDef::versions_erases) is left to its commit stage.
//
// A call that gets no answer (a slow or stalled owner, a lost datagram) is
// sent again until its owner answers, as write-backs and releases are
// (stages/write_back.cpp, retry_unlocks; counted in commit_retries): the
// rows are applied once, and a re-sent copy that finds its insert's key
// present, or its erased row gone, finds the work of an earlier copy (the
// protocol lets no other transaction insert that key or erase that row
// while this attempt holds them). Only a stopping worker gives up
// (StopBudget): whether its rows changed is then unknown, so the run fails
// (insert_errors for an insert, commit_errors for a change), never silently.
#include <cstring>

#include "env/log.hpp"
#include "txn/coordinator.hpp"
#include "txn/item_batch.hpp"
#include "txn/stages/toolkit.hpp"

namespace rdtx::txn {

namespace {

const env::LogType kLog("rdtx.txn");

// Item arg0 of a `rows` request: the operation in its low byte; an insert
// with the protocol's word (Protocol::insert_word) has the word's offset in
// the high 32 bits and its value as the item's first 8 bytes.
enum RowOp : uint64_t { kOpInsert = 1, kOpErase = 2, kOpRelocate = 3, kOpInsertWord = 4 };

// Statuses no owner sends: the item's call got no answer; the item was
// not sent (the rows need more than ItemBatch::kMaxCalls calls).
constexpr int32_t kNoAnswer = INT32_MIN;
constexpr int32_t kNotSent = INT32_MIN + 1;

// The hidden words a new tuple starts with: the writer id in every record
// slot's history word (recording), and the replication sequence (replicas
// > 1, relocation: the sequence the log stage gave the backups).
uint32_t new_tuple_words(const Database& db, const store::Table& tab, uint64_t writer, const uint64_t* seq,
                         store::Table::MetaWord* w) {
  uint32_t nw = 0;
  for (uint32_t k = 0; db.recording() && k < tab.layout().record_slots && k < 8; ++k)
    w[nw++] = {db.history_word_offset(k), writer};
  if (seq != nullptr && db.replicas() > 1) w[nw++] = {db.replication_word_offset(), *seq};
  return nw;
}

const char* why_insert_failed(int rc) {
  return rc == -ENOSPC     ? "the table is full (the store logged why: its largest size, or no memory)"
         : rc == -EEXIST   ? "the key is present already (two transactions inserted it)"
         : rc == -EXDEV    ? "the owner does not hold the row's partition"
         : rc == -EINVAL   ? "the owner refused the request (no such table there, or a bad record)"
         : rc == kNoAnswer ? "its owner did not answer (the row may or may not be in)"
         : rc == kNotSent  ? "the attempt's rows need more RPC calls than a batch holds"
                           : strerror(-rc);
}

// Sends b's calls, then again those that got no answer, until every owner
// answered or the stopping worker's budget is spent. resent[k]: call k was
// sent more than once, so an earlier copy may have applied its rows.
runtime::Task<void> call_until_answered(Coordinator& c, ItemBatch& b, bool* resent) {
  (void)co_await b.call();
  for (uint32_t k = 0; k < b.calls(); ++k) resent[k] = false;
  for (StopBudget budget;;) {
    bool unanswered = false;
    for (uint32_t k = 0; k < b.calls(); ++k)
      if (b.call_failed(k)) unanswered = resent[k] = true;
    if (!unanswered || budget.spent()) co_return;
    ++c.engine().stats().commit_retries;
    (void)co_await b.retry_failed();
  }
}

}  // namespace

bool Coordinator::row_is_local(uint32_t node) const {
  return node == e_.node() && e_.db().is_local(node) && e_.db().holds_data(node);
}

runtime::Task<bool> Coordinator::apply_inserts(Txn& t) {
  Database& db = e_.db();
  int32_t rc[Txn::kMaxInserts];
  bool remote = false;
  store::Table::MetaWord pw{};
  const bool has_word = e_.protocol().insert_word(*this, t, &pw);
  for (uint32_t k = 0; k < t.inserts(); ++k) {
    const Insert& in = t.insert_at(k);
    if (!row_is_local(in.node)) {
      rc[k] = kNoAnswer;
      remote = true;
      continue;
    }
    store::Table* tab = db.store(in.node).table(in.table);
    store::Table::MetaWord w[10];
    uint32_t nw = new_tuple_words(db, *tab, t.id(), nullptr, w);
    if (has_word) w[nw++] = pw;
    rc[k] = tab->insert(in.key, {in.record, db.def(in.table).record_bytes}, nullptr, std::span(w, nw));
  }
  if (remote) {
    ItemBatch& b = items(e_.rows_handler());
    bool fits = true;
    const uint64_t op = has_word ? kOpInsertWord | uint64_t{pw.offset} << 32 : kOpInsert;
    for (uint32_t k = 0; k < t.inserts() && fits; ++k) {
      const Insert& in = t.insert_at(k);
      if (row_is_local(in.node)) continue;
      fits = b.add_item(in.node, k, in.table, in.key, op, t.id(), {in.record, db.def(in.table).record_bytes}, 0,
                        has_word ? &pw.value : nullptr);
    }
    if (fits) {
      bool resent[ItemBatch::kMaxCalls];
      co_await call_until_answered(*this, b, resent);
      for (uint32_t call = 0; call < b.calls(); ++call)
        b.for_each_reply_of(call, [&](uint32_t k, const ItemReply& r, std::span<const std::byte>) {
          // Present already, to a copy sent again: an earlier copy put it in.
          if (k < t.inserts()) rc[k] = resent[call] && r.status == -EEXIST ? 0 : r.status;
        });
    } else {
      for (uint32_t k = 0; k < t.inserts(); ++k)
        if (rc[k] == kNoAnswer) rc[k] = kNotSent;
    }
  }
  uint32_t failed = t.inserts();
  for (uint32_t k = 0; k < t.inserts() && failed == t.inserts(); ++k)
    if (rc[k] != 0) failed = k;
  if (failed == t.inserts()) co_return true;
  // Every failure fails the run (insert_errors): a full table, a key
  // present already (the guard did not serialise the inserters), or an
  // owner that did not answer.
  const Insert& in = t.insert_at(failed);
  if (e_.stats().insert_errors++ == 0)
    RDTX_LOG(kLog, Error, "insert into table %s on node %u (key %llu) failed: %s", db.def(in.table).name.c_str(),
             in.node, static_cast<unsigned long long>(in.key), why_insert_failed(rc[failed]));
  // The rows that went in come out again.
  bool done[Txn::kMaxInserts];
  for (uint32_t k = 0; k < t.inserts(); ++k) done[k] = rc[k] == 0;
  co_await erase_inserted(t, done);
  t.fail(AbortReason::kUser);
  co_return false;
}

runtime::Task<void> Coordinator::undo_inserts(Txn& t) {
  bool all[Txn::kMaxInserts];
  for (uint32_t k = 0; k < t.inserts(); ++k) all[k] = true;
  co_await erase_inserted(t, all);
}

runtime::Task<void> Coordinator::erase_inserted(Txn& t, const bool* which) {
  Database& db = e_.db();
  bool remote = false;
  for (uint32_t k = 0; k < t.inserts(); ++k) {
    if (!which[k]) continue;
    const Insert& in = t.insert_at(k);
    if (row_is_local(in.node))
      (void)db.store(in.node).table(in.table)->erase(in.key);
    else
      remote = true;
  }
  if (!remote) co_return;
  ItemBatch& b = items(e_.rows_handler());
  bool fits = true;
  for (uint32_t k = 0; k < t.inserts() && fits; ++k) {
    const Insert& in = t.insert_at(k);
    if (which[k] && !row_is_local(in.node)) fits = b.add_item(in.node, k, in.table, in.key, kOpErase, t.id(), {}, 0);
  }
  bool ok = fits;
  bool resent[ItemBatch::kMaxCalls] = {};
  if (ok) co_await call_until_answered(*this, b, resent);
  for (uint32_t call = 0; ok && call < b.calls(); ++call) {
    ok &= !b.call_failed(call);
    // Gone already, to a copy sent again: an earlier copy erased it.
    b.for_each_reply_of(call, [&](uint32_t, const ItemReply& r, std::span<const std::byte>) {
      ok &= r.status == 0 || (resent[call] && r.status == -ENOENT);
    });
  }
  // A row left in that no transaction committed: the run fails.
  if (!ok && e_.stats().commit_errors++ == 0)
    RDTX_LOG(kLog, Error, "a failed attempt's inserted rows could not all be erased again on their owners");
}

runtime::Task<void> Coordinator::apply_row_changes(Txn& t) {
  Database& db = e_.db();
  // Erases a protocol versions itself are its commit stage's.
  const bool erases = !e_.protocol_def().versions_erases;
  auto mine = [&](const Access& a) {
    return a.change == RowChange::kRelocate || (a.change == RowChange::kErase && erases);
  };
  bool remote = false;
  for (uint32_t i = 0; i < t.size(); ++i) {
    Access& a = t.access(i);
    if (!mine(a)) continue;
    if (!row_is_local(a.node)) {
      remote = true;
      continue;
    }
    store::Table* tab = db.store(a.node).table(a.table);
    int rc;
    if (a.change == RowChange::kErase) {
      rc = tab->erase(a.key);
    } else {
      // The new tuple starts as an insert's (the protocol's init_tuple) with
      // the hidden words of the version this attempt installs: its id in
      // every record slot's history word, the sequence the log stage gave
      // the backups.
      uint64_t seq;
      std::memcpy(&seq, a.copy + db.replication_word_offset(), 8);
      store::Table::MetaWord w[9];
      const uint32_t nw = new_tuple_words(db, *tab, t.id(), &seq, w);
      rc = tab->relocate(a.key, t.record(static_cast<int>(i)), nullptr, std::span(w, nw));
    }
    changed(t, i, rc);
  }
  if (!remote) co_return;
  ItemBatch& b = items(e_.rows_handler());
  bool fits = true;
  for (uint32_t i = 0; i < t.size() && fits; ++i) {
    const Access& a = t.access(i);
    if (!mine(a) || row_is_local(a.node)) continue;
    if (a.change == RowChange::kErase) {
      fits = b.add_item(a.node, i, a.table, a.key, kOpErase, t.id(), {}, 0);
    } else {
      uint64_t seq;
      std::memcpy(&seq, a.copy + db.replication_word_offset(), 8);
      fits = b.add_item(a.node, i, a.table, a.key, kOpRelocate, t.id(), t.record(static_cast<int>(i)), 0, &seq);
    }
  }
  int32_t rc[Txn::kMaxAccesses];
  for (uint32_t i = 0; i < t.size(); ++i) rc[i] = fits ? kNoAnswer : kNotSent;
  if (fits) {
    bool resent[ItemBatch::kMaxCalls];
    co_await call_until_answered(*this, b, resent);
    for (uint32_t call = 0; call < b.calls(); ++call)
      b.for_each_reply_of(call, [&](uint32_t i, const ItemReply& r, std::span<const std::byte>) {
        // An erased row gone already, to a copy sent again: an earlier copy
        // erased it.
        if (i < t.size())
          rc[i] = resent[call] && r.status == -ENOENT && t.access(i).change == RowChange::kErase ? 0 : r.status;
      });
  }
  for (uint32_t i = 0; i < t.size(); ++i)
    if (mine(t.access(i)) && !row_is_local(t.access(i).node)) changed(t, i, rc[i]);
}

void Coordinator::changed(Txn& t, uint32_t i, int rc) {
  Access& a = t.access(i);
  const char* what = a.change == RowChange::kErase ? "erase" : "relocation";
  // No free tuple: the row stays where it is, written back in place (where
  // a row lives is not part of what commits), and the run fails as a full
  // table does for inserts.
  if (rc == -ENOSPC && a.change == RowChange::kRelocate) {
    if (e_.stats().insert_errors++ == 0)
      RDTX_LOG(kLog, Error,
               "relocation of key %llu in table %s on node %u failed: the table is full (the store logged why)",
               static_cast<unsigned long long>(a.key), e_.db().def(a.table).name.c_str(), a.node);
    a.change = RowChange::kNone;
    return;
  }
  if (rc != 0) {
    // Held by this attempt since its fetch: the key cannot have gone. (No
    // answer: the row may have changed; its old tuple is not written.)
    if (e_.stats().commit_errors++ == 0)
      RDTX_LOG(kLog, Error, "%s of key %llu of table %s on node %u failed: %s", what,
               static_cast<unsigned long long>(a.key), e_.db().def(a.table).name.c_str(), a.node,
               rc == kNoAnswer  ? "its owner did not answer"
               : rc == kNotSent ? "the attempt's rows need more RPC calls than a batch holds"
                                : strerror(-rc));
    if (rc != kNoAnswer) return;
  }
  // Its old tuple is dead: no write-back, no unlock (the lock word dies
  // with the incarnation; a reuse starts from zeroed metadata).
  a.locked = false;
}

// The owner side: each item is an insert, an erase or a relocation of a row
// of this node's partition.
void WorkerEngine::serve_rows(rpc::Request& r) {
  ItemReader in(r.payload());
  ItemWriter out(r);
  ItemHeader h;
  std::span<const std::byte> data;
  const bool mine = db_.is_local(w_.node) && db_.holds_data(w_.node);
  while (in.next(&h, &data)) {
    store::Table* tab =
        mine && db_.has_table(h.table) && !db_.def(h.table).replicated ? db_.store(w_.node).table(h.table) : nullptr;
    int rc = -EINVAL;
    if (tab != nullptr && db_.owner(h.table, h.key) != w_.node) {
      rc = -EXDEV;
    } else if (tab != nullptr) {
      const uint32_t rb = db_.def(h.table).record_bytes;
      store::Table::MetaWord w[10];
      switch (h.arg0 & 0xff) {
        case kOpInsert:
          if (data.size() == rb && h.arg0 == kOpInsert)
            rc = tab->insert(h.key, data, nullptr, std::span(w, new_tuple_words(db_, *tab, h.arg1, nullptr, w)));
          break;
        case kOpInsertWord:
          // The word's offset is checked by the store (-EINVAL: not in the
          // protocol's metadata).
          if (data.size() == 8 + size_t{rb} && (h.arg0 >> 8 & 0xffffff) == 0) {
            uint32_t nw = new_tuple_words(db_, *tab, h.arg1, nullptr, w);
            w[nw].offset = static_cast<uint32_t>(h.arg0 >> 32);
            std::memcpy(&w[nw++].value, data.data(), 8);
            rc = tab->insert(h.key, data.subspan(8), nullptr, std::span(w, nw));
          }
          break;
        case kOpErase:
          if (data.empty() && h.arg0 == kOpErase) rc = tab->erase(h.key);
          break;
        case kOpRelocate:
          if (data.size() == 8 + size_t{rb} && h.arg0 == kOpRelocate) {
            uint64_t seq;
            std::memcpy(&seq, data.data(), 8);
            rc = tab->relocate(h.key, data.subspan(8), nullptr,
                               std::span(w, new_tuple_words(db_, *tab, h.arg1, &seq, w)));
          }
          break;
        default:
          break;
      }
    }
    if (!out.add(ItemReply{rc, 0, 0, 0, 0})) break;
  }
  out.finish();
}

}  // namespace rdtx::txn
