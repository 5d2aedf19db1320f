// ShardService: see shard_service.hpp. Every id, mode and length in a
// request is checked before use; a malformed item gets -EINVAL and takes no
// lock.
#include "cc/twopl/shard_service.hpp"

#include <algorithm>
#include <cstring>

#include "env/log.hpp"
#include "env/tsc.hpp"
#include "store/tuple.hpp"
#include "txn/coordinator.hpp"
#include "txn/stages/toolkit.hpp"
#include "runtime/cq_poller.hpp"
#include "txn/item_batch.hpp"
#include "txn/ring_log.hpp"

namespace rdtx::cc::twopl {

using txn::ItemHeader;
using txn::ItemReader;
using txn::ItemReply;
using txn::pad8;

namespace {

constexpr uint32_t kNoPending = UINT32_MAX;
// 2PC-vote FAAs in flight from one shard: with the mailbox replies
// (MailboxLayout::kReplyStaging), within txn::kServiceVerbsPerQp.
constexpr int kVotesInFlight = 16;
static_assert(kVotesInFlight + MailboxLayout::kReplyStaging <= txn::kServiceVerbsPerQp);
const env::LogType kLog("rdtx.2pl");

// Sizes from the run: every coordinator of the cluster may have an attempt
// and a lingering earlier one here, each with every access of a transaction.
template <class Table>
typename Table::Limits limits_for(uint32_t coordinators) {
  const uint64_t reqs = std::min<uint64_t>(uint64_t{coordinators} * 2 * txn::Txn::kMaxAccesses, 1u << 20);
  return {static_cast<uint32_t>(reqs), static_cast<uint32_t>(reqs), 4 * coordinators + 16};
}

template <class Table>
Table new_table(const typename Table::Limits& limits, DeadlockPolicy policy, uint64_t wait_tsc) {
  if constexpr (std::is_same_v<Table, TsTable>) return TsTable(limits, wait_tsc);
  else return LockTable(limits, policy, wait_tsc);
}

}  // namespace

template <class Table>
ShardService<Table>::ShardService(txn::WorkerEngine& e, const typename Table::Limits& limits, DeadlockPolicy policy,
                                  uint64_t wait_tsc, uint32_t pending, uint32_t max_payload)
    : Service(kTimestampOrdering ? "to.shard" : "2pl.locks"),
      e_(e),
      table_(new_table<Table>(limits, policy, wait_tsc)),
      wait_tsc_(wait_tsc),
      pending_(pending),
      workers_per_node_(e.workers_per_node()) {
  for (Pending& p : pending_) p.reply.resize(max_payload);
  if constexpr (!kTimestampOrdering) {
    voted_.assign(static_cast<size_t>(e.db().nodes()) * workers_per_node_ * txn::kMaxCoroutines, 0);
    refused_.assign(voted_.size(), 0);
    abort_every_ = static_cast<uint64_t>(e.options().setting_int("2pl.test_vote_abort_every", 0));
    drop_every_ = static_cast<uint64_t>(e.options().setting_int("2pl.test_vote_drop_every", 0));
    vote_queue_.resize(std::max<size_t>(voted_.size(), 1));
  }
  free_pending_.reserve(pending);
  for (uint32_t i = pending; i-- > 0;) free_pending_.push_back(i);
}

template <class Table>
Result<std::unique_ptr<ShardService<Table>>> ShardService<Table>::create(txn::WorkerEngine& e, const Config& cfg) {
  const uint32_t coordinators = e.db().nodes() * e.workers_per_node() * e.options().coroutines;
  std::unique_ptr<ShardService> s(new ShardService(e, limits_for<Table>(coordinators), cfg.policy,
                                                   env::ns_to_tsc(std::max<uint64_t>(cfg.wait_ns, 1)),
                                                   4 * coordinators + 16, e.ctx().rpc->max_payload()));
  ShardService* self = s.get();
  auto lock = e.register_handler(kTimestampOrdering ? "to.lock" : "2pl.lock",
                                 [self](rpc::Request& r) { self->serve_lock(r); });
  if (!lock.ok()) return lock.error();
  s->lock_id_ = *lock;
  auto end = e.register_handler(kTimestampOrdering ? "to.end" : "2pl.end",
                                [self](rpc::Request& r) { self->serve_end(r); });
  if (!end.ok()) return end.error();
  s->end_id_ = *end;
  if constexpr (!kTimestampOrdering) {
    // The vote words are in the protocol region (ProtocolDef::region_bytes).
    const uint64_t need = VoteLayout::region_bytes(e.workers_per_node(), e.options().coroutines);
    if (e.db().region_bytes() < need)
      return make_error(EINVAL, "2pl: the protocol region has %llu bytes, the vote words need %llu",
                        static_cast<unsigned long long>(e.db().region_bytes()), static_cast<unsigned long long>(need));
    auto vote = e.register_handler("2pl.vote", [self](rpc::Request& r) { self->serve_vote(r); });
    if (!vote.ok()) return vote.error();
    s->vote_id_ = *vote;
    if (cfg.mailbox) {
      const MailboxLayout l =
          MailboxLayout::of(e.db().nodes(), e.workers_per_node(), e.options().coroutines);
      if (e.db().region_bytes() < l.region_bytes())
        return make_error(EINVAL, "2pl: the protocol region has %llu bytes, the mailboxes need %llu",
                          static_cast<unsigned long long>(e.db().region_bytes()),
                          static_cast<unsigned long long>(l.region_bytes()));
      s->mail_ = l;
      s->mail_seen_.assign(static_cast<size_t>(l.workers) * l.nodes * l.coroutines, 0);
      s->mail_buf_.resize(MailboxLayout::kSlotBytes / 8);
    }
  }
  return s;
}

// Attempts ended here are fenced with the worker's attempt fences (the
// toolkit's, shared with its handlers); an id naming no coordinator of the
// run (a malformed request) is refused like a fenced one.
template <class Table>
bool ShardService<Table>::fenced(uint64_t id) const {
  const uint32_t node = txn::txn_node(id), worker = txn::txn_worker(id), co = txn::txn_coroutine(id);
  if (node >= e_.db().nodes() || worker >= workers_per_node_ || co >= e_.options().coroutines) return true;
  return e_.toolkit().fenced(id);
}

template <class Table>
int32_t ShardService<Table>::copy_row(txn::TableId table, txn::Key key, std::byte* slot, uint32_t tb, uint64_t* index,
                                          uint64_t* state) const {
  const store::Table* tab = e_.db().store(e_.node()).table(table);
  store::TupleRef ref;
  const int rc = tab->lookup(key, &ref);
  if (rc != 0) {
    std::memset(slot, 0, tb);
    return rc;
  }
  // Under the lock (TO: with no write pending) nobody writes the row: the
  // copy cannot tear (the check stays, as the store offers it).
  if (!tab->copy_tuple(ref, slot)) return -EAGAIN;
  *index = ref.index;
  *state = ref.state;
  return kLockGranted;
}

template <class Table>
void ShardService<Table>::serve_lock(rpc::Request& r) {
  uint32_t p = kNoPending;
  const uint32_t len = serve_items(r.payload(), r.reply_buffer(), &p);
  if (p == kNoPending) r.set_reply_len(len);
  else pending_[p].token = r.defer();
  deliver_events();  // waiters a short lock held up, granted when it went
}

template <class Table>
uint32_t ShardService<Table>::serve_items(std::span<const std::byte> payload, std::span<std::byte> out,
                                          uint32_t* pending) {
  ItemReader in(payload);
  const store::Store& st = e_.db().store(e_.node());
  const uint32_t p = free_pending_.empty() ? kNoPending : free_pending_.back();
  const uint64_t now = env::tsc();
  uint32_t len = 0, waiting = 0;
  uint64_t txn = 0;
  ItemHeader h;
  std::span<const std::byte> data;
  auto put = [&](ItemReply rep, uint32_t n) -> std::byte* {
    if (out.size() < len + sizeof rep + pad8(n)) return nullptr;
    rep.len = n;
    std::memcpy(out.data() + len, &rep, sizeof rep);
    std::byte* d = out.data() + len + sizeof rep;
    len += sizeof rep + pad8(n);
    return d;
  };
  txn::WorkerStats& stats = e_.stats();
  const bool counting = e_.measuring();
  while (in.next(&h, &data)) {
    stats.lock_requests += counting;
    const store::Table* tab = st.table(h.table);
    uint64_t mode_word = 0;
    if (data.size() == 8) std::memcpy(&mode_word, data.data(), 8);
    const auto mode = static_cast<LockMode>(mode_word & 0xff);
    const bool short_lock = (mode_word & kShortLock) != 0;
    const bool parent = (mode_word & kParentLock) != 0;
    // TO: a read (S) or a write (X), nothing held short. 2PL: a partition's
    // lock is held to the end.
    const bool mode_ok = kTimestampOrdering ? mode_word == static_cast<uint64_t>(LockMode::kS) ||
                                                  mode_word == static_cast<uint64_t>(LockMode::kX)
                                            : (mode_word & ~(kShortLock | kParentLock | 0xff)) == 0 &&
                                                  (mode_word & 0xff) <= static_cast<uint64_t>(LockMode::kX) &&
                                                  mode != LockMode::kNL && !(parent && short_lock);
    if (tab == nullptr || data.size() != 8 || !mode_ok || (txn != 0 && h.arg0 != txn) || h.arg0 == 0) {
      if (!put({-EINVAL, 0, 0, 0, 0}, 0)) break;
      continue;
    }
    txn = h.arg0;
    const uint32_t tb = parent ? 0 : tab->tuple_bytes();
    if (out.size() < len + sizeof(ItemReply) + pad8(tb)) {  // the caller sized its call for this
      put({-EMSGSIZE, 0, 0, 0, 0}, 0);
      break;
    }
    if (fenced(txn)) {
      put({kLockFenced, 0, 0, 0, 0}, 0);
      continue;
    }
    if (p == kNoPending) {  // no room to defer a reply: nothing may wait
      put({kLockFull, 0, 0, 0, 0}, 0);
      continue;
    }
    const uint64_t name = parent ? parent_lock_name(h.table, h.key) : lock_name(h.table, h.key);
    const uint32_t at = len;
    const typename Table::Request req{txn, h.arg1, mode, (uint64_t{p} << 32) | at};
    uint64_t seen = 0;
    typename Table::Outcome o;
    if constexpr (kTimestampOrdering) {
      // The item's rts and wts are the tuple's protocol words (to's meta).
      store::TupleRef ref;
      if (const int rc = tab->lookup(h.key, &ref); rc != 0) {
        put({rc, 0, 0, 0, 0}, 0);
        continue;
      }
      o = table_.acquire(name, reinterpret_cast<uint64_t*>(ref.tuple), req, now, &seen);
    } else {
      o = table_.acquire(name, req, now);
    }
    switch (o) {
      case Table::Outcome::kGranted: {
        ItemReply rep{};
        std::byte* slot = put(rep, tb);
        rep.status = parent ? kLockGranted : copy_row(h.table, h.key, slot, tb, &rep.tuple_index, &rep.state);
        rep.len = tb;
        std::memcpy(out.data() + at, &rep, sizeof rep);
        if constexpr (!kTimestampOrdering)
          if (short_lock) table_.release(name, txn);  // waiters it held up are granted (events)
        break;
      }
      case Table::Outcome::kWaiting:
        // The slot is reserved at its full size; the event fills it in. The
        // table, key and flags (1 short, 2 a partition) wait in the reply's arg, tuple_index and state.
        put({kLockPending, 0, h.key, (short_lock ? 1u : 0u) | (parent ? 2u : 0u), h.table}, tb);
        ++waiting;
        stats.lock_waits += counting;
        break;
      case Table::Outcome::kDenied: put({kLockDenied, 0, 0, 0, seen}, 0); break;
      case Table::Outcome::kFull: put({kLockFull, 0, 0, 0, 0}, 0); break;
    }
  }
  if (!in.valid() && len == 0) put({-EINVAL, 0, 0, 0, 0}, 0);
  *pending = kNoPending;
  if (waiting == 0) return len;
  // The reply waits in a pending slot; the caller says how it goes.
  free_pending_.pop_back();
  ++pending_used_;
  Pending& pd = pending_[p];
  pd.used = true;
  pd.mail = false;
  pd.token = {};
  pd.txn = txn;
  pd.waiting = waiting;
  pd.len = len;
  std::memcpy(pd.reply.data(), out.data(), len);
  *pending = p;
  return len;
}

template <class Table>
int ShardService<Table>::deliver_events() {
  int n = 0;
  typename Table::Event ev;
  while (table_.pop_event(&ev)) {
    ++n;
    const uint32_t p = static_cast<uint32_t>(ev.tag >> 32), at = static_cast<uint32_t>(ev.tag);
    if (p >= pending_.size() || !pending_[p].used || pending_[p].txn != ev.txn) continue;  // its call was dropped
    Pending& pd = pending_[p];
    ItemReply rep;
    std::memcpy(&rep, pd.reply.data() + at, sizeof rep);
    if (rep.status != kLockPending) continue;
    std::byte* slot = pd.reply.data() + at + sizeof rep;
    if (ev.granted) {
      const txn::TableId table = static_cast<txn::TableId>(rep.arg);
      const txn::Key key = rep.tuple_index;
      const bool short_lock = (rep.state & 1) != 0, parent = (rep.state & 2) != 0;
      rep.arg = rep.tuple_index = rep.state = 0;
      rep.status = parent ? kLockGranted : copy_row(table, key, slot, rep.len, &rep.tuple_index, &rep.state);
      if constexpr (!kTimestampOrdering)
        if (short_lock) table_.release(ev.lock, ev.txn);
    } else {
      rep.status = kLockTimedOut;
      rep.arg = rep.tuple_index = 0;
    }
    std::memcpy(pd.reply.data() + at, &rep, sizeof rep);
    if (--pd.waiting == 0) finish(p);
  }
  return n;
}

template <class Table>
void ShardService<Table>::finish(uint32_t p) {
  Pending& pd = pending_[p];
  if (pd.mail) {
    // Through the coordinator's mailbox; with no staging slot free now,
    // poll() sends it later.
    if (!send_mail(pd.to, {pd.reply.data(), pd.len})) {
      pd.ready = true;
      return;
    }
  } else {
    e_.ctx().rpc->reply(pd.token, std::span<const std::byte>(pd.reply.data(), pd.len));
  }
  pd.used = false;
  pd.ready = false;
  free_pending_.push_back(p);
  --pending_used_;
}

template <class Table>
void ShardService<Table>::serve_end(rpc::Request& r) {
  ItemReader in(r.payload());
  txn::ItemWriter out(r);
  const store::Store& st = e_.db().store(e_.node());
  uint64_t txn = 0;
  bool commit = false;
  ItemHeader h;
  std::span<const std::byte> data;
  while (in.next(&h, &data)) {
    if (h.arg0 == 0 || (txn != 0 && h.arg0 != txn)) {
      out.add({-EINVAL, 0, 0, 0, 0});
      continue;
    }
    txn = h.arg0;
    commit = h.arg1 == kEndCommit;
    if (commit && voted_no(txn)) {  // nothing installed; the locks are released below
      out.add({kLockVotedNo, 0, 0, 0, 0});
      continue;
    }
    if (data.empty()) {  // a release only
      out.add({kLockGranted, 0, 0, 0, 0});
      continue;
    }
    store::Table* tab = st.table(h.table);
    if (tab == nullptr || h.arg1 != kEndCommit || data.size() != tab->tuple_bytes()) {
      out.add({-EINVAL, 0, 0, 0, 0});
      continue;
    }
    // Only under this attempt's X lock; else a re-sent copy (the first
    // applied and released) or a bug, which the coordinator tells apart.
    if (table_.held(lock_name(h.table, h.key), txn) != LockMode::kX) {
      out.add({kLockNotHeld, 0, 0, 0, 0});
      continue;
    }
    store::TupleRef ref;
    const int rc = tab->lookup(h.key, &ref);
    if (rc != 0) {
      out.add({rc, 0, 0, 0, 0});
      continue;
    }
    // The tuple as the attempt read it and changed it, from its hidden
    // words (history, replication) on: the header it saw (unchanged under
    // the lock) and the record; not the protocol's words (TO's rts and wts,
    // which the table keeps).
    const uint32_t meta = e_.db().protocol_meta_bytes();
    store::store_words(reinterpret_cast<uint64_t*>(ref.tuple + meta),
                       reinterpret_cast<const uint64_t*>(data.data() + meta), (data.size() - meta) / 8);
    out.add({kLockGranted, 0, 0, 0, 0});
  }
  out.finish();
  if (txn == 0) return;
  e_.toolkit().fence(txn);
  if constexpr (kTimestampOrdering) table_.release_all(txn, commit);
  else table_.release_all(txn);
  // A call of this attempt still deferred here: its caller gave up on it
  // (it ends the attempt only after every lock call returned or failed).
  if (pending_used_ > 0)
    for (uint32_t p = 0; p < pending_.size(); ++p)
      if (pending_[p].used && pending_[p].txn == txn) {
        pending_[p].waiting = 0;
        finish(p);
      }
  deliver_events();
}

template <class Table>
bool ShardService<Table>::voted_no(uint64_t txn) const {
  if constexpr (kTimestampOrdering) {
    return false;
  } else {
    const uint32_t node = txn::txn_node(txn), worker = txn::txn_worker(txn), co = txn::txn_coroutine(txn);
    if (node >= e_.db().nodes() || worker >= workers_per_node_ || co >= txn::kMaxCoroutines) return false;
    return refused_[(size_t{node} * workers_per_node_ + worker) * txn::kMaxCoroutines + co] == txn;
  }
}

template <class Table>
void ShardService<Table>::serve_vote(rpc::Request& r) {
  if constexpr (!kTimestampOrdering) {
    std::span<const std::byte> in = r.payload();
    uint64_t txn = 0;
    if (in.size() != 8) return;  // malformed: no vote (the coordinator's wait ends it)
    std::memcpy(&txn, in.data(), 8);
    const uint32_t node = txn::txn_node(txn), worker = txn::txn_worker(txn), co = txn::txn_coroutine(txn);
    if (node >= e_.db().nodes() || worker >= workers_per_node_ || co >= e_.options().coroutines) return;
    const size_t who = (size_t{node} * workers_per_node_ + worker) * txn::kMaxCoroutines + co;
    uint32_t& last = voted_[who];
    const uint32_t seq = static_cast<uint32_t>(txn);
    if (last != 0 && seq + 1 <= last) return;  // this attempt (or a later one) voted: a copy
    last = seq + 1;
    // Yes iff the attempt still holds what it took here: it has not ended
    // (a fence) and the table knows it.
    bool yes = !e_.toolkit().fenced(txn) && table_.known(txn);
    // Tests' faults (protocol settings no configuration has): every n-th
    // vote request is answered with abort, or not at all.
    ++votes_seen_;
    if (abort_every_ != 0 && votes_seen_ % abort_every_ == 0) yes = false;
    const bool drop = drop_every_ != 0 && votes_seen_ % drop_every_ == 0;
    // A participant that did not vote yes never commits the attempt
    // (serve_end refuses it): a coordinator deciding without every yes is
    // caught by its commit errors.
    if (!yes || drop) refused_[who] = txn;
    if (drop) return;
    const uint32_t cap = static_cast<uint32_t>(vote_queue_.size());
    if (vq_count_ == cap) return;  // cannot happen: one queued vote per coordinator at most
    vote_queue_[(vq_head_ + vq_count_) % cap] = {txn, yes};
    ++vq_count_;
    post_votes();
  } else {
    (void)r;
  }
}

template <class Table>
int ShardService<Table>::post_votes() {
  int n = 0;
  const uint32_t j = e_.ctx().index, me = e_.node();
  const uint32_t coroutines = e_.options().coroutines;
  while (vq_count_ > 0 && faa_wg_.remaining() < kVotesInFlight) {
    const Vote v = vote_queue_[vq_head_];
    vq_head_ = (vq_head_ + 1) % static_cast<uint32_t>(vote_queue_.size());
    --vq_count_;
    const uint32_t node = txn::txn_node(v.txn), worker = txn::txn_worker(v.txn), co = txn::txn_coroutine(v.txn);
    // The coordinator's word in this worker's counterpart region on its
    // node: the one region this worker's QP to that node reaches.
    const txn::RegionDescriptor& rd = e_.db().region(node, j);
    rdma::WorkRequest wr;
    wr.opcode = rdma::Opcode::kFetchAdd;
    wr.flags = rdma::kSignaled;
    wr.wr_id = runtime::CqPoller::wr_id(&faa_wg_);
    wr.local = e_.db().local_region(me, j) + VoteLayout::scratch_offset(workers_per_node_, coroutines);
    wr.length = 8;
    wr.lkey = e_.db().local_region_lkey(me, j);
    wr.remote_addr = rd.addr + VoteLayout::offset(worker, co, coroutines, v.txn);
    wr.rkey = rd.rkey;
    wr.compare_add = v.yes ? kVoteYes : kVoteAbort;
    faa_wg_.add(1);
    rdma::WorkRequest* bad = nullptr;
    if (e_.ctx().qp_to(node, 0)->post_send(&wr, &bad) != 0) {
      faa_wg_.done(false);  // no vote: the coordinator's wait ends it
    }
    ++n;
  }
  if (faa_wg_.failed() && faa_wg_.remaining() == 0) {
    // A vote that did not land: its coordinator's wait ends the attempt
    // (vote_timeout; a FAA is not repeated: it may have been applied). Its
    // QP is in the error state: bring the QPs of this worker's votes back.
    for (uint32_t nd = 0; nd < e_.db().nodes(); ++nd) (void)e_.ctx().reconnect(nd, 0);
    RDTX_LOG(kLog, Warning, "2pl: a 2PC vote's fetch-and-add failed on worker %u of node %u", e_.ctx().index,
             e_.node());
    faa_wg_.reset(0);
  }
  return n;
}

template <class Table>
int ShardService<Table>::free_staging() const {
  for (uint32_t k = 0; k < MailboxLayout::kReplyStaging; ++k)
    if (staging_wg_[k].remaining() == 0) return static_cast<int>(k);
  return -1;
}

template <class Table>
bool ShardService<Table>::send_mail(const MailTo& to, std::span<const std::byte> reply) {
  const int k = free_staging();
  if (k < 0) return false;
  std::byte* st = e_.db().local_region(e_.node(), e_.ctx().index) + mail_.reply_staging(static_cast<uint32_t>(k));
  if (reply.data() != st + sizeof(txn::ringlog::EntryHead))
    std::memcpy(st + sizeof(txn::ringlog::EntryHead), reply.data(), reply.size());
  post_mail(to, static_cast<uint32_t>(k), static_cast<uint32_t>(reply.size()));
  return true;
}

template <class Table>
void ShardService<Table>::post_mail(const MailTo& to, uint32_t k, uint32_t len) {
  // The reply, sealed for its request's position, WRITten into the
  // coordinator's reply slot in this worker's counterpart region there.
  const uint32_t me = e_.node(), j = e_.ctx().index;
  std::byte* st = e_.db().local_region(me, j) + mail_.reply_staging(k);
  const uint32_t bytes = static_cast<uint32_t>(sizeof(txn::ringlog::EntryHead)) + len + 8;
  txn::ringlog::seal_entry(st, bytes, 1, MailboxLayout::pos(to.seq));
  const txn::RegionDescriptor& rd = e_.db().region(to.node, j);
  if (staged_[k].to.seq != to.seq || staged_[k].to.node != to.node) staged_[k] = {to, len, 0};
  ++staged_[k].tries;
  rdma::WorkRequest wr;
  wr.opcode = rdma::Opcode::kWrite;
  wr.flags = rdma::kSignaled;
  wr.wr_id = runtime::CqPoller::wr_id(&staging_wg_[k]);
  wr.local = st;
  wr.length = bytes;
  wr.lkey = e_.db().local_region_lkey(me, j);
  wr.remote_addr = rd.addr + mail_.reply(to.worker, to.coroutine, me);
  wr.rkey = rd.rkey;
  staging_wg_[k].reset(1);
  rdma::WorkRequest* bad = nullptr;
  if (e_.ctx().qp_to(to.node, 0)->post_send(&wr, &bad) != 0) {
    // Not sent: the coordinator's wait ends its call (a failed lock call).
    staging_wg_[k].reset(0);
    RDTX_LOG(kLog, Warning, "2pl: a mailbox reply could not be posted on worker %u of node %u", j, me);
  }
}

template <class Table>
int ShardService<Table>::retry_failed_mail() {
  int n = 0;
  for (uint32_t k = 0; k < MailboxLayout::kReplyStaging; ++k) {
    runtime::WaitGroup& w = staging_wg_[k];
    if (w.remaining() != 0 || !w.failed()) continue;
    ++n;
    const Staged s = staged_[k];
    // A failed verb left the QP in the error state (a peer stalled past the
    // transport's retries): bring it back, as coordinators do.
    (void)e_.ctx().reconnect(s.to.node, 0);
    w.reset(0);
    if (s.tries < 3) {
      post_mail(s.to, k, s.len);
    } else {
      // Given up: the coordinator's wait ends its call (a failed lock call).
      RDTX_LOG(kLog, Warning, "2pl: a mailbox reply to node %u failed %u times on worker %u of node %u", s.to.node,
               s.tries, e_.ctx().index, e_.node());
      staged_[k] = {};
    }
  }
  return n;
}

template <class Table>
int ShardService<Table>::poll_mailboxes() {
  // Every request slot meant for this shard, in every region of its node.
  int n = 0;
  const uint32_t me = e_.node(), j = e_.ctx().index;
  for (uint32_t i = 0; i < mail_.workers; ++i) {
    const std::byte* region = e_.db().local_region(me, i);
    for (uint32_t src = 0; src < mail_.nodes; ++src)
      for (uint32_t c = 0; c < mail_.coroutines; ++c) {
        const std::byte* slot = region + mail_.request(src, c, j);
        const uint64_t pos = store::load_word(
            reinterpret_cast<const uint64_t*>(slot + offsetof(txn::ringlog::EntryHead, pos)),
            std::memory_order_acquire);
        uint64_t& last = mail_seen_[(size_t{i} * mail_.nodes + src) * mail_.coroutines + c];
        if (pos == 0 || pos % MailboxLayout::kSlotBytes != 0 || pos / MailboxLayout::kSlotBytes <= last) continue;
        const int k = free_staging();
        if (k < 0) return n;  // no room for a reply: later
        txn::ringlog::EntryHead eh;
        uint64_t advance = 0;
        if (txn::ringlog::scan(slot, MailboxLayout::kSlotBytes, pos, mail_buf_.data(), &eh, &advance) !=
            txn::ringlog::Scan::kEntry)
          continue;  // not all landed yet
        last = pos / MailboxLayout::kSlotBytes;
        ++n;
        const MailTo to{src, i, c, last};
        const std::span<const std::byte> req(reinterpret_cast<const std::byte*>(mail_buf_.data()) +
                                                 sizeof(txn::ringlog::EntryHead),
                                             eh.bytes - txn::ringlog::kEntryOverhead);
        std::byte* st = e_.db().local_region(me, j) + mail_.reply_staging(static_cast<uint32_t>(k));
        const std::span<std::byte> out(st + sizeof(txn::ringlog::EntryHead),
                                       MailboxLayout::kSlotBytes - txn::ringlog::kEntryOverhead);
        uint32_t p = kNoPending;
        const uint32_t len = serve_items(req, out, &p);
        if (p == kNoPending) {
          post_mail(to, static_cast<uint32_t>(k), len);
        } else {
          pending_[p].mail = true;
          pending_[p].to = to;
        }
        deliver_events();
      }
  }
  return n;
}

// Replies complete but held back for want of a staging slot (mailboxes):
// sent as slots free up.
template <class Table>
void ShardService<Table>::finish_ready() {
  for (uint32_t p = 0; p < pending_.size(); ++p)
    if (pending_[p].used && pending_[p].ready) finish(p);
}

template <class Table>
int ShardService<Table>::poll() {
  int n = 0;
  if constexpr (!kTimestampOrdering)
    if (mail_.nodes != 0) {
      n += retry_failed_mail();
      n += poll_mailboxes();
      if (pending_used_ > 0) finish_ready();
    }
  if constexpr (!kTimestampOrdering)
    if (vq_count_ > 0) n += post_votes();
  if (pending_used_ > 0) n += static_cast<int>(table_.expire(env::tsc()));
  return n + deliver_events();
}

template <class Table>
bool ShardService<Table>::drain() {
  // Stopping: nothing waits any more (every waiter is denied now).
  table_.expire(UINT64_MAX - wait_tsc_);
  deliver_events();
  if constexpr (!kTimestampOrdering) {
    post_votes();
    if (vq_count_ > 0 || faa_wg_.remaining() > 0) return false;  // votes still going out
    if (mail_.nodes != 0) {
      finish_ready();
      for (const runtime::WaitGroup& w : staging_wg_)
        if (w.remaining() > 0) return false;  // replies still landing
    }
  }
  return pending_used_ == 0;
}

template class ShardService<LockTable>;
template class ShardService<TsTable>;

}  // namespace rdtx::cc::twopl
