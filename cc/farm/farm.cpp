// FaRM's commit protocol (SOSP'15; papers/003_*.txt), composed from the
// stage toolkit and FaRM's messaging: per-pair message logs in the
// receiver's registered memory, written with one-sided WRITEs, polled by the
// receiver's CPU (a per-worker service, Messenger below).
//
//   execute        fetch: one-sided READs of the tuples (read_tuples), no
//                  locks; the version of each copy recorded (checksum-checked
//                  copies: copy_check.hpp, OCC's metadata layout)
//   LOCK           lock (mailbox): one LOCK record per primary with written
//                  records (their keys, the versions read, the new values),
//                  WRITten into this worker's message log on the primary; the
//                  primary's Messenger locks each (CAS lock word 0 -> attempt
//                  id, then compares the version) and replies through the
//                  reverse log; a failure undoes that primary's locks
//   VALIDATE       validate (onesided): READ of the read-only set's lock word,
//                  then version (read_meta)
//   COMMIT-BACKUP  the engine's log stage (txn.pipeline.log = onesided,
//                  cluster.replicas > 1): redo entries WRITten into the
//                  backups' rings, the stage waits for every hardware ACK;
//                  with replicas = 1 there are no backups and no such step
//   COMMIT-PRIMARY commit (mailbox): a COMMIT-PRIMARY record to every written
//                  primary; the transaction is reported committed after the
//                  hardware ACK of the first one (the others are settled
//                  before the coordinator's next attempt); the primary's
//                  Messenger installs the values of the LOCK record, bumps
//                  the version (new checksum) and unlocks
//   ABORT          release: an ABORT record to every primary sent a LOCK; it
//                  unlocks what that LOCK still holds
//   TRUNCATE       a primary frees a LOCK record's room in its log once the
//                  record's COMMIT-PRIMARY or ABORT is processed (its values
//                  are then installed or dropped); other records are freed
//                  once processed. The sender learns the freed room by a
//                  READ of the ring's head word when its ring looks full.
//                  The backups' log applier applies and frees lazily.
//
// Tuple metadata (OCC's): word 0 the lock (0, or the attempt id holding
// it), word 1 the version, word 2 a checksum of (version, hidden words,
// record).
//
// Read-only transactions: execute + VALIDATE, no LOCK and no commit record.
#include "cc/farm/farm.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "cc/occ/occ.hpp"
#include "env/tsc.hpp"
#include "runtime/cq_poller.hpp"
#include "runtime/deadline.hpp"
#include "store/tuple.hpp"
#include "txn/ring_log.hpp"
#include "txn/stages/copy_check.hpp"
#include "txn/stages/toolkit.hpp"

namespace rdtx::cc::farm {

using namespace rdtx::txn;
using runtime::Task;
using ringlog::EntryHead;
using ringlog::RegionLayout;
using ringlog::RingTail;

// OCC's metadata, execute and VALIDATE (cc/occ/occ.hpp), and its abort
// reasons first in kDef's list, in its order.
using occ::AccessState;
using occ::kLockConflict;
using occ::kLockOff;
using occ::kMetaBytes;
using occ::kSeqOff;
using occ::kSumOff;
using occ::kValidation;

namespace {

// A message: an entry of a message log whose payload starts with MsgHead;
// EntryHead::count is 1 + the records that follow it (LOCK: LockRec +
// record, padded to 8, per written record the receiver is primary for).
enum Kind : uint16_t { kLock = 1, kAbort = 2, kCommitPrimary = 3, kLockReply = 4 };
// LOCK results (kLockReply's status).
enum LockStatus : uint16_t { kOk = 0, kHeld = 1, kChanged = 2, kRefused = 3, kMissing = 4 };
struct MsgHead {
  uint16_t kind;
  uint16_t status;     // kLockReply
  uint32_t coroutine;  // the coordinator's index on its worker
  uint64_t txn;        // the attempt id (also the lock value)
};
static_assert(sizeof(MsgHead) == 16);
struct LockRec {
  uint32_t table;
  uint32_t len;  // record bytes
  uint64_t key;
  uint64_t version;  // read at execute: the lock fails if it changed
  uint64_t state;    // the tuple's incarnation seen at execute (store state word)
};
static_assert(sizeof(LockRec) == 32);
// LockRec::table bit: the coordinator erases or relocates the row itself
// (Txn::erase, Txn::relocate) before COMMIT-PRIMARY, which then does not
// find it locked by the transaction, and must not count that as an error.
constexpr uint32_t kRecChanged = 1u << 31;

// ABORT, COMMIT-PRIMARY and LOCK replies: head + MsgHead + trailer.
constexpr uint32_t kSmallEntry = ringlog::kEntryOverhead + sizeof(MsgHead);
// Room a sender keeps free in a primary's log for the decision (COMMIT-
// PRIMARY or ABORT) of every LOCK it sent there and has not decided: the
// entry and the most a skip marker before it can take. Without it a log
// full of undecided LOCK records would wait for decisions that cannot be
// written.
constexpr uint64_t kDecisionRoom = 2 * kSmallEntry;
// Replies a Messenger keeps queued per coordinator node while its reverse
// log is full (beyond: dropped; the coordinator times out and sends ABORT).
constexpr uint32_t kReplyQueue = 256;
// Signaled reply WRITEs in flight per Messenger: a small share of the send
// queue of the QP it posts on, which coordinator 0 uses too (max_send_wr
// 256; a coordinator's batch may take most of it).
constexpr int kRepliesInFlight = 16;
// How long a coordinator waits before reading a full log's head again.
constexpr uint64_t kFullWaitNs = 20'000;

// A worker's message region: per node a request log (LOCK, ABORT,
// COMMIT-PRIMARY from that node's worker of the same index) and a reply log
// (its Messenger's LOCK replies), each with its head word.
uint32_t request_ring(uint32_t src) { return src; }
uint32_t reply_ring(uint32_t nodes, uint32_t src) { return nodes + src; }
RegionLayout region_layout(uint32_t nodes, uint64_t ring_bytes) { return RegionLayout{2 * nodes, ring_bytes}; }

std::atomic_ref<uint64_t> word_at(std::byte* tuple, uint32_t off) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(tuple + off));
}

class Messenger;

struct Farm final : public Protocol {
  Farm(WorkerEngine& e, bool validating)
      : e(e),
        o(e.options()),
        validating(validating),
        nodes(e.db().nodes()),
        cap(e.options().log_ring_bytes),
        layout(region_layout(nodes, cap)),
        lock_timers(e.add_message_timers()) {}
  ~Farm() override {
    if (staging) (void)e.ctx().device->dereg_mr(mr);
  }

  WorkerEngine& e;
  const Options& o;
  // False only in the broken variant for tests: no VALIDATE, and the
  // primaries lock whatever version they find.
  const bool validating;
  const uint32_t nodes;
  const uint64_t cap;  // bytes per message log
  const RegionLayout layout;
  // The wait for LOCK replies: adaptive timeouts (txn/message_timers.hpp).
  MessageTimers& lock_timers;

  // Coordinator side. Per coroutine: LOCK entries (and their skip markers),
  // then the decision entries, then the word a head READ lands in.
  std::unique_ptr<rdma::DeviceMemory> staging;
  rdma::MemoryRegion mr;
  uint64_t per_co = 0;
  uint64_t decisions_at = 0;  // offset of the decision area in a coroutine's staging
  RingTail req[kMaxNodes];    // this worker's request log on each node
  uint64_t promised[kMaxNodes] = {};  // room kept there for undecided LOCKs' decisions
  // LOCK replies, delivered by this worker's Messenger to the coroutine
  // waiting for them (stale ones, of another attempt, are dropped).
  struct Slot {
    uint64_t txn = 0;
    uint32_t expected = 0, got = 0;
    uint16_t status = kOk;
  };
  Slot slots[kMaxCoroutines];
  uint64_t lock_nodes[kMaxCoroutines] = {};  // per coroutine: nodes sent this attempt's LOCK

  std::byte* stage_of(uint32_t co) { return static_cast<std::byte*>(staging->data()) + per_co * co; }
  uint64_t remote_ring(uint32_t node, uint32_t ring) const {
    return e.db().region(node, e.ctx().index).addr + layout.ring(ring);
  }
  uint32_t rkey_of(uint32_t node) const { return e.db().region(node, e.ctx().index).rkey; }
};

// The receiver: polls the worker's request and reply logs. Requests are
// processed in log order (a sender's ABORT or COMMIT-PRIMARY always comes
// after its LOCK); a LOCK record stays in the log, holding its room, until
// its decision is processed. Replies go back through the coordinator's
// reply log with inline WRITEs (no staging to keep alive).
class Messenger final : public Service {
 public:
  Messenger(WorkerEngine& e, Farm& f)
      : Service("farm-messenger"), e_(e), f_(f), db_(e.db()), nodes_(e.db().nodes()), cap_(f.cap) {}

  Result<void> start() override {
    copy_.resize(cap_ / 8);
    rdma::Device& dev = *e_.ctx().device;
    auto mem = dev.alloc_memory(uint64_t{kMaxNodes} * 8);
    if (!mem.ok()) return make_error(mem.error().code, "farm head words: %s", mem.error().message.c_str());
    heads_mem_ = std::move(*mem);
    auto mr = dev.reg_mr(heads_mem_->data(), heads_mem_->size(), rdma::kAccessAll);
    if (!mr.ok()) return make_error(mr.error().code, "farm head words: %s", mr.error().message.c_str());
    heads_mr_ = *mr;
    return {};
  }
  void stop() override {
    if (heads_mem_) (void)e_.ctx().device->dereg_mr(heads_mr_);
  }
  int poll() override { return serve_requests(true) + take_replies() + send_replies(); }
  // Done once nothing is left to answer or decide: every LOCK here has its
  // decision, every reply is out. (A coordinator of another node may still
  // wait for a reply: it is sent while the worker drains.) A removed node's
  // LOCKs are recovery's to decide, and it waits for no reply.
  bool drain() override {
    poll();
    const uint64_t frozen = frozen_.load(std::memory_order_relaxed);
    for (uint32_t n = 0; n < nodes_; ++n)
      if (!(n < 64 && (frozen >> n & 1)) && (in_[n].npend != 0 || out_[n].queued != 0)) return false;
    return true;
  }
  // Recovery (recovery.hpp): the removed senders' messages are processed
  // as far as they have landed (a LOCK takes its locks, a COMMIT-PRIMARY
  // installs), then their logs are read no more and nothing is sent back:
  // their LOCKs still undecided are recovery's to resolve from the backups'
  // logs.
  void freeze_senders(uint64_t mask) override { freeze_req_.fetch_or(mask, std::memory_order_acq_rel); }
  bool senders_frozen(uint64_t mask) const override {
    return (frozen_.load(std::memory_order_acquire) & mask) == mask;
  }
  // After the run: what is left in the logs (decisions whose WRITE landed
  // after the last poll) is processed; nobody waits for replies any more.
  void settle() override { serve_requests(false); }

 private:
  std::byte* region() const { return db_.local_region(e_.node(), e_.ctx().index); }
  std::byte* ring(uint32_t r) const { return region() + f_.layout.ring(r); }
  void publish_head(uint32_t r, uint64_t h) {
    store::store_word(reinterpret_cast<uint64_t*>(region() + f_.layout.head(r)), h, std::memory_order_release);
  }

  // A LOCK record not decided yet: where it is in its log.
  struct Pending {
    uint64_t pos;  // ring position (the log's head cannot pass it)
    uint64_t txn;
    uint32_t off;  // byte offset in the ring
    uint32_t count;
  };
  struct In {
    uint64_t scan = 0;  // next entry to process
    uint64_t head = 0;  // published: everything before it is free
    Pending pend[kMaxCoroutines];
    uint32_t npend = 0;
  };
  struct Out {
    RingTail tail;  // this worker's reply log on the coordinator's node
    MsgHead q[kReplyQueue];
    uint32_t first = 0, queued = 0;
    runtime::WaitGroup head_read;
    bool reading = false;
  };

  bool is_frozen(uint32_t s) const { return s < 64 && (frozen_.load(std::memory_order_relaxed) >> s & 1); }

  int serve_requests(bool reply) {
    int done = 0;
    const uint64_t freeze = freeze_req_.load(std::memory_order_relaxed) & ~frozen_.load(std::memory_order_relaxed);
    for (uint32_t s = 0; s < nodes_; ++s) {
      if (is_frozen(s)) continue;
      In& in = in_[s];
      std::byte* r = ring(request_ring(s));
      for (;;) {
        EntryHead eh;
        uint64_t advance = 0;
        const ringlog::Scan got = ringlog::scan(r, cap_, in.scan, copy_.data(), &eh, &advance);
        if (got == ringlog::Scan::kNone) break;
        if (got == ringlog::Scan::kEntry) {
          handle(s, in, eh, reply);
          ++done;
        }
        in.scan += advance;
      }
      // TRUNCATE: free everything before the oldest undecided LOCK.
      uint64_t h = in.scan;
      for (uint32_t k = 0; k < in.npend; ++k) h = std::min(h, in.pend[k].pos);
      if (h != in.head) {
        in.head = h;
        publish_head(request_ring(s), h);
      }
    }
    if (freeze != 0) {
      for (uint32_t n = 0; n < nodes_ && n < 64; ++n)
        if (freeze >> n & 1) out_[n].queued = 0;  // nobody reads a reply there any more
      frozen_.fetch_or(freeze, std::memory_order_release);
    }
    return done;
  }

  void handle(uint32_t s, In& in, const EntryHead& eh, bool reply) {
    const std::byte* e = reinterpret_cast<const std::byte*>(copy_.data());
    MsgHead m;
    if (eh.bytes < kSmallEntry || eh.count < 1) {
      ++e_.stats().commit_errors;  // malformed: nothing sends this
      return;
    }
    std::memcpy(&m, e + sizeof(EntryHead), sizeof m);
    Toolkit& k = e_.toolkit();
    switch (m.kind) {
      case kLock: {
        uint16_t status = lock(eh, e, m.txn);
        if (status == kOk && in.npend == kMaxCoroutines) {  // more undecided LOCKs than coordinators: refuse
          unlock(e, eh.count - 1, m.txn);
          status = kRefused;
        }
        if (status == kOk)
          in.pend[in.npend++] = {eh.pos, m.txn, static_cast<uint32_t>(eh.pos & (cap_ - 1)), eh.count};
        if (reply) queue_reply(s, {kLockReply, status, m.coroutine, m.txn});
        break;
      }
      case kCommitPrimary:
      case kAbort: {
        // Idempotent: a decision whose LOCK failed or was decided already
        // finds no pending record and changes nothing. Either one finishes
        // the attempt here, so a LOCK of it that came later would be refused.
        k.fence(m.txn);
        for (uint32_t p = 0; p < in.npend; ++p) {
          if (in.pend[p].txn != m.txn) continue;
          // The LOCK record is still in the log (its room is not freed).
          const std::byte* lock_entry = ring(request_ring(s)) + in.pend[p].off;
          if (m.kind == kCommitPrimary)
            install(lock_entry, in.pend[p].count - 1, m.txn);
          else
            unlock(lock_entry, in.pend[p].count - 1, m.txn);
          in.pend[p] = in.pend[--in.npend];
          break;
        }
        break;
      }
      default: ++e_.stats().commit_errors;
    }
  }

  // Walks the records of a LOCK entry at `e`: fn(rec, record bytes, tuple)
  // for each whose tuple is here; false if the entry is malformed.
  template <typename Fn>
  bool each_record(const std::byte* e, uint32_t n, uint32_t bytes, Fn&& fn) {
    uint32_t off = sizeof(EntryHead) + sizeof(MsgHead);
    const store::Store& st = db_.store(e_.node());
    for (uint32_t i = 0; i < n; ++i) {
      LockRec rec;
      if (off + sizeof rec > bytes - 8) return false;
      std::memcpy(&rec, e + off, sizeof rec);
      const std::byte* data = e + off + sizeof rec;
      off += sizeof rec + pad8(rec.len);
      const uint32_t table = rec.table & ~kRecChanged;
      if (off > bytes - 8 || !db_.has_table(table) || rec.len != db_.def(table).record_bytes) return false;
      store::Table* tab = st.table(table);
      store::TupleRef ref;
      if (tab == nullptr || tab->lookup(rec.key, &ref) != 0) ref.tuple = nullptr;
      if (!fn(rec, data, ref, tab)) return true;
    }
    return true;
  }

  // LOCK at the primary: each record's lock word CAS 0 -> txn, then its
  // version and incarnation compared with those read; the first failure
  // gives back the locks taken.
  uint16_t lock(const EntryHead& eh, const std::byte* e, uint64_t txn) {
    // A LOCK of an attempt its coordinator already gave up on (cancelled
    // by an ABORT) is refused: never grant anything to a fenced attempt.
    if (e_.toolkit().fenced(txn)) return kRefused;
    uint16_t status = kOk;
    uint32_t taken = 0;
    const bool wellformed = each_record(e, eh.count - 1, eh.bytes, [&](const LockRec& rec, const std::byte*,
                                                                      const store::TupleRef& ref, store::Table* tab) {
      if (ref.tuple == nullptr) {
        status = kMissing;
        return false;
      }
      uint64_t held = 0;
      if (!word_at(ref.tuple, kLockOff).compare_exchange_strong(held, txn, std::memory_order_seq_cst)) {
        status = kHeld;
        return false;
      }
      ++taken;
      if (f_.validating && (word_at(ref.tuple, kSeqOff).load(std::memory_order_acquire) != rec.version ||
                            word_at(ref.tuple, tab->layout().state_offset()).load(std::memory_order_acquire) !=
                                rec.state)) {
        status = kChanged;
        return false;
      }
      return true;
    });
    if (!wellformed) {
      ++e_.stats().commit_errors;
      status = kRefused;
    }
    if (status != kOk && taken > 0) unlock(e, taken, txn);
    return status;
  }

  // ABORT: frees the first n records' locks that txn holds.
  void unlock(const std::byte* e, uint32_t n, uint64_t txn) {
    each_record(e, n, ~0u, [&](const LockRec&, const std::byte*, const store::TupleRef& ref, store::Table*) {
      if (ref.tuple != nullptr) {
        uint64_t held = txn;
        word_at(ref.tuple, kLockOff).compare_exchange_strong(held, 0, std::memory_order_release);
      }
      return true;
    });
  }

  // COMMIT-PRIMARY: installs each record of the LOCK entry (the tuple is
  // locked by txn): the record, the hidden words (history: the writer id;
  // replication: the sequence the log stage gave the backups, one more than
  // the committed one), then the checksum, the version (+1), the unlock.
  void install(const std::byte* e, uint32_t n, uint64_t txn) {
    const bool rec_hist = db_.recording();
    const bool replicated = db_.replicas() > 1;
    each_record(e, n, ~0u, [&](const LockRec& rec, const std::byte* data, const store::TupleRef& ref,
                                store::Table* tab) {
      if (ref.tuple == nullptr || word_at(ref.tuple, kLockOff).load(std::memory_order_acquire) != txn) {
        // Erased or moved by its coordinator (the lock died with the old
        // tuple); otherwise locked by this LOCK: cannot happen. (A move that
        // found no free tuple left the row here, locked: installed below.)
        if (!(rec.table & kRecChanged)) ++e_.stats().commit_errors;
        return true;
      }
      const store::TupleLayout& l = tab->layout();
      std::byte* t = ref.tuple;
      store::store_words(reinterpret_cast<uint64_t*>(t + l.record_offset()), reinterpret_cast<const uint64_t*>(data),
                         pad8(rec.len) / 8);  // the entry carries the record padded to words
      if (rec_hist) word_at(t, db_.history_word_offset()).store(txn, std::memory_order_relaxed);
      if (replicated) {
        const uint32_t off = db_.replication_word_offset();
        word_at(t, off).store(word_at(t, off).load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      }
      const uint64_t version = rec.version + 1;
      word_at(t, kSumOff).store(occ::checksum(t, version, l), std::memory_order_relaxed);
      word_at(t, kSeqOff).store(version, std::memory_order_release);
      word_at(t, kLockOff).store(0, std::memory_order_release);  // publishes what is above
      return true;
    });
  }

  // LOCK replies from the primaries, to the waiting coroutines.
  int take_replies() {
    int done = 0;
    for (uint32_t s = 0; s < nodes_; ++s) {
      const uint32_t r = reply_ring(nodes_, s);
      const uint64_t before = reply_head_[s];
      for (;;) {
        EntryHead eh;
        uint64_t advance = 0;
        const ringlog::Scan got = ringlog::scan(ring(r), cap_, reply_head_[s], copy_.data(), &eh, &advance);
        if (got == ringlog::Scan::kNone) break;
        if (got == ringlog::Scan::kEntry && eh.bytes >= kSmallEntry) {
          MsgHead m;
          std::memcpy(&m, reinterpret_cast<const std::byte*>(copy_.data()) + sizeof(EntryHead), sizeof m);
          if (m.kind == kLockReply && m.coroutine < kMaxCoroutines) {
            Farm::Slot& slot = f_.slots[m.coroutine];
            if (slot.txn == m.txn && slot.got < slot.expected) {
              ++slot.got;
              if (m.status != kOk && slot.status == kOk) slot.status = m.status;
            }
          }
          ++done;
        }
        reply_head_[s] += advance;
      }
      if (reply_head_[s] != before) publish_head(r, reply_head_[s]);
    }
    return done;
  }

  void queue_reply(uint32_t node, const MsgHead& m) {
    Out& o = out_[node];
    if (o.queued == kReplyQueue) return;  // the coordinator times out and sends ABORT
    o.q[(o.first + o.queued++) % kReplyQueue] = m;
  }

  // Sends the queued replies (inline WRITEs into the coordinator's reply
  // log); a full log: READ its head word, and send once it has room.
  int send_replies() {
    int sent = 0;
    for (uint32_t n = 0; n < nodes_; ++n) {
      Out& o = out_[n];
      if (is_frozen(n)) continue;
      if (o.reading) {
        if (o.head_read.remaining() > 0) continue;
        o.reading = false;
        if (!o.head_read.failed()) {
          uint64_t h;
          std::memcpy(&h, static_cast<std::byte*>(heads_mem_->data()) + n * 8, 8);
          o.tail.saw_head(h);
        }
      }
      while (o.queued > 0 && sent_.remaining() < kRepliesInFlight) {
        if (!o.tail.fits(kSmallEntry, cap_)) {
          read_head(n);
          break;
        }
        const uint64_t pos = o.tail.reserve(kSmallEntry, cap_);
        alignas(8) std::byte buf[sizeof(EntryHead) + kSmallEntry] = {};
        std::byte* entry = buf + sizeof(EntryHead);
        std::memcpy(entry + sizeof(EntryHead), &o.q[o.first], sizeof(MsgHead));
        const uint64_t base = f_.remote_ring(n, reply_ring(nodes_, e_.node()));
        rdma::WorkRequest wrs[2];
        uint32_t k = 0;
        ringlog::seal_for_write(entry, kSmallEntry, 1, pos, cap_, [&](std::byte* local, uint32_t len, uint64_t off) {
          rdma::WorkRequest& wr = wrs[k++];
          wr.opcode = rdma::Opcode::kWrite;
          wr.flags = rdma::kInline;
          wr.local = local;
          wr.length = len;
          wr.remote_addr = base + off;
          wr.rkey = f_.rkey_of(n);
        });
        for (uint32_t i = 0; i + 1 < k; ++i) wrs[i].next = &wrs[i + 1];
        wrs[k - 1].flags |= rdma::kSignaled;
        wrs[k - 1].wr_id = runtime::CqPoller::wr_id(&sent_);
        sent_.add(1);
        rdma::WorkRequest* bad = nullptr;
        if (e_.ctx().qp_to(n, 0)->post_send(wrs, &bad) != 0) {
          sent_.done(false);
          ++e_.stats().commit_errors;  // a reply lost: its coordinator times out and aborts
        }
        o.first = (o.first + 1) % kReplyQueue;
        --o.queued;
        ++sent;
      }
    }
    return sent;
  }

  void read_head(uint32_t n) {
    Out& o = out_[n];
    if (o.reading) return;
    rdma::WorkRequest wr;
    wr.opcode = rdma::Opcode::kRead;
    wr.flags = rdma::kSignaled;
    wr.local = static_cast<std::byte*>(heads_mem_->data()) + n * 8;
    wr.length = 8;
    wr.lkey = heads_mr_.lkey;
    wr.remote_addr = db_.region(n, e_.ctx().index).addr + f_.layout.head(reply_ring(nodes_, e_.node()));
    wr.rkey = f_.rkey_of(n);
    wr.wr_id = runtime::CqPoller::wr_id(&o.head_read);
    o.head_read.reset(1);
    rdma::WorkRequest* bad = nullptr;
    if (e_.ctx().qp_to(n, 0)->post_send(&wr, &bad) != 0) {
      o.head_read.reset(0);
      return;
    }
    o.reading = true;
  }

  WorkerEngine& e_;
  Farm& f_;
  Database& db_;
  const uint32_t nodes_;
  const uint64_t cap_;
  std::vector<uint64_t> copy_;  // an entry copied out of its log, then checked
  In in_[kMaxNodes];
  uint64_t reply_head_[kMaxNodes] = {};
  Out out_[kMaxNodes];
  runtime::WaitGroup sent_;  // reply WRITEs in flight
  std::unique_ptr<rdma::DeviceMemory> heads_mem_;
  rdma::MemoryRegion heads_mr_;
  std::atomic<uint64_t> freeze_req_{0}, frozen_{0};  // recovery's: bit n, node n
};

// ---- coordinator side ----

// Execute: one-sided READs without locks.
Task<bool> fetch(Farm& p, Coordinator& c, Txn& t, uint32_t from) {
  return occ::fetch_unlocked(c, t, p.o.stage(Stage::kFetch), from);
}

void add_write(Farm& p, OneSidedBatch& batch, uint32_t node, std::byte* local, uint32_t len, uint64_t remote) {
  batch.write({node, remote, p.rkey_of(node)}, local, len, 0, p.mr.lkey);
}

// READs this worker's request log head on `node` (room freed there).
Task<bool> read_request_head(Farm& p, Coordinator& c, uint32_t node) {
  std::byte* dst = p.stage_of(c.index()) + p.per_co - 8;
  OneSidedBatch& batch = c.onesided();
  batch.read({node, p.e.db().region(node, p.e.ctx().index).addr + p.layout.head(request_ring(p.e.node())), p.rkey_of(node)},
             dst, 8, 0, p.mr.lkey);
  if (!co_await batch.execute()) co_return false;
  uint64_t h;
  std::memcpy(&h, dst, 8);
  p.req[node].saw_head(h);
  co_return true;
}

// Reserves room for an entry of bytes[n] in this worker's request log on
// every node of `mask` at once (no coroutine holds room in one log while it
// waits for another's), keeping `keep` bytes free besides the promised
// decisions. A full log: READ its head again, wait if it is still full.
// False only when the worker is stopping and a log stays full.
Task<bool> reserve(Farm& p, Coordinator& c, uint64_t mask, const uint32_t* bytes, uint64_t keep, uint64_t* pos) {
  int failed_reads = 0;
  for (StopBudget budget;;) {
    uint32_t full = UINT32_MAX;
    for (uint32_t n = 0; n < p.nodes && full == UINT32_MAX; ++n)
      if ((mask >> n & 1) && !p.req[n].fits(bytes[n], p.cap, p.promised[n] + keep)) full = n;
    if (full == UINT32_MAX) {
      for (uint32_t n = 0; n < p.nodes; ++n)
        if (mask >> n & 1) pos[n] = p.req[n].reserve(bytes[n], p.cap);
      co_return true;
    }
    const uint64_t was = p.req[full].head;
    if (!co_await read_request_head(p, c, full)) ++failed_reads;
    if (p.req[full].head != was) continue;
    if (budget.spent() || failed_reads > 3) co_return false;
    co_await runtime::sleep_for(kFullWaitNs);
  }
}

// WRITEs the sealed entries of batch-building `fill` until they land (a
// failed QP was reconnected: the same bytes again, so the receiver never
// waits at a hole in its log).
template <typename Fill>
Task<bool> write_until_landed(Coordinator& c, Fill fill) {
  for (StopBudget budget;;) {
    OneSidedBatch& batch = c.onesided();
    fill(batch);
    if (co_await batch.execute()) co_return true;
    if (budget.spent()) co_return false;
  }
}

// LOCK: one LOCK record per primary with written records; its Messenger
// locks them at the versions read and replies through the reverse log.
Task<bool> lock(Farm& p, Coordinator& c, Txn& t, uint32_t) {
  Database& db = c.db();
  const uint32_t co = c.index();
  p.lock_nodes[co] = 0;
  uint32_t bytes[kMaxNodes] = {}, count[kMaxNodes] = {};
  uint64_t mask = 0;
  for (uint32_t i = 0; i < t.size(); ++i) {
    const Access& a = t.access(i);
    if (a.mode != AccessMode::kWrite) continue;
    bytes[a.node] += sizeof(LockRec) + pad8(db.def(a.table).record_bytes);
    ++count[a.node];
    mask |= uint64_t{1} << a.node;
  }
  if (mask == 0) co_return true;  // read-only: no LOCK (FaRM's read-only path)
  // Lay each LOCK entry out after room for a skip marker.
  std::byte* stage = p.stage_of(co);
  uint64_t at[kMaxNodes] = {};
  uint64_t used = 0;
  for (uint32_t n = 0; n < p.nodes; ++n) {
    if (count[n] == 0) continue;
    bytes[n] += ringlog::kEntryOverhead + sizeof(MsgHead);
    at[n] = used + sizeof(EntryHead);
    used += sizeof(EntryHead) + bytes[n];
    std::byte* e = stage + at[n];
    const MsgHead m{kLock, 0, co, t.id()};
    std::memcpy(e + sizeof(EntryHead), &m, sizeof m);
    uint32_t off = sizeof(EntryHead) + sizeof(MsgHead);
    for (uint32_t i = 0; i < t.size(); ++i) {
      const Access& a = t.access(i);
      if (a.mode != AccessMode::kWrite || a.node != n) continue;
      const LockRec rec{a.table | (a.change != RowChange::kNone ? kRecChanged : 0u), db.def(a.table).record_bytes, a.key,
                        t.state<AccessState>(i).version, a.state};
      std::memcpy(e + off, &rec, sizeof rec);
      std::memcpy(e + off + sizeof rec, t.record(static_cast<int>(i)).data(), rec.len);
      off += sizeof rec + pad8(rec.len);
    }
  }
  uint64_t pos[kMaxNodes] = {};
  if (!co_await reserve(p, c, mask, bytes, kDecisionRoom, pos)) {
    t.fail(AbortReason::kNetwork);
    co_return false;
  }
  for (uint32_t n = 0; n < p.nodes; ++n)
    if (mask >> n & 1) p.promised[n] += kDecisionRoom;
  p.lock_nodes[co] = mask;  // from here on the release sends ABORTs
  Farm::Slot& slot = p.slots[co];
  slot = {t.id(), static_cast<uint32_t>(__builtin_popcountll(mask)), 0, kOk};
  const bool landed = co_await write_until_landed(c, [&](OneSidedBatch& batch) {
    for (uint32_t n = 0; n < p.nodes; ++n) {
      if (!(mask >> n & 1)) continue;
      const uint64_t base = p.remote_ring(n, request_ring(p.e.node()));
      ringlog::seal_for_write(stage + at[n], bytes[n], count[n] + 1, pos[n], p.cap,
                              [&](std::byte* local, uint32_t len, uint64_t off) {
                                add_write(p, batch, n, local, len, base + off);
                              });
    }
  });
  if (!landed) {
    slot.txn = 0;
    t.fail(AbortReason::kNetwork);
    co_return false;
  }
  // The replies. Primaries that do not answer within the timeout their
  // round trips have earned (txn::MessageTimers: adaptive, above the RPC
  // timeout) fail the attempt, counted as a timed-out call: the release's
  // ABORT frees whatever its LOCK took, whenever it is processed (after the
  // LOCK: log order). Time this coroutine was not resumed (a descheduled
  // thread) moves the deadline on, as the RPC layer does (runtime::Deadline).
  MessageTimers& timers = p.lock_timers;
  const uint64_t sent_ns = env::tsc_to_ns(env::tsc());
  runtime::Deadline deadline(timers.timeout_ns(mask));
  while (slot.got < slot.expected) {
    co_await runtime::poll_wait();
    if (deadline.passed()) break;
  }
  const uint64_t now_ns = env::tsc_to_ns(env::tsc());
  if (slot.got < slot.expected)
    timers.timed_out(mask, sent_ns, now_ns);
  else
    timers.answered(mask, now_ns - sent_ns, true);
  const uint16_t status = slot.got < slot.expected ? static_cast<uint16_t>(kRefused) : slot.status;
  slot.txn = 0;  // late replies are dropped
  switch (status) {
    case kOk: co_return true;
    case kHeld: t.fail(kLockConflict); break;
    case kChanged: t.fail(kValidation); break;
    case kMissing: t.fail(AbortReason::kNotFound); break;
    default: t.fail(AbortReason::kNetwork);  // timed out (or refused: a fenced attempt)
  }
  co_return false;
}

// VALIDATE: the read-only set unlocked, same version, same incarnation
// (read_meta reads the lock word before the version, fenced).
Task<bool> validate(Farm& p, Coordinator& c, Txn& t, uint32_t) {
  if (!p.validating) co_return true;
  co_return co_await occ::validate_reads(c, t, p.o.stage(Stage::kValidate));
}

// A decision record (COMMIT-PRIMARY or ABORT) to every node of the
// coroutine's LOCK: its room was promised at LOCK. commit: reported after
// the first primary's hardware ACK, the rest left in flight (settled before
// the coordinator's next attempt); abort: all awaited unless passive ACK.
Task<void> decide(Farm& p, Coordinator& c, Txn& t, Kind kind) {
  const uint32_t co = c.index();
  const uint64_t mask = p.lock_nodes[co];
  p.lock_nodes[co] = 0;
  if (mask == 0) co_return;
  std::byte* area = p.stage_of(co) + p.decisions_at;
  uint32_t bytes[kMaxNodes];
  for (uint32_t n = 0; n < p.nodes; ++n) bytes[n] = kSmallEntry;
  uint64_t pos[kMaxNodes] = {};
  for (uint32_t n = 0; n < p.nodes; ++n)
    if (mask >> n & 1) p.promised[n] -= kDecisionRoom;  // this is the promised room
  if (!co_await reserve(p, c, mask, bytes, 0, pos)) {
    ++c.engine().stats().commit_errors;  // stopping with a full log: the lock stays (reported)
    co_return;
  }
  const uint32_t first = static_cast<uint32_t>(__builtin_ctzll(mask));
  auto fill = [&](OneSidedBatch& batch, bool firsts) {
    for (uint32_t n = 0; n < p.nodes; ++n) {
      if (!(mask >> n & 1) || (n == first) != firsts) continue;
      std::byte* e = area + n * (sizeof(EntryHead) + kSmallEntry) + sizeof(EntryHead);
      const MsgHead m{static_cast<uint16_t>(kind), 0, co, t.id()};
      std::memcpy(e + sizeof(EntryHead), &m, sizeof m);
      const uint64_t base = p.remote_ring(n, request_ring(p.e.node()));
      ringlog::seal_for_write(e, kSmallEntry, 1, pos[n], p.cap, [&](std::byte* local, uint32_t len, uint64_t off) {
        add_write(p, batch, n, local, len, base + off);
      });
    }
  };
  const bool passive = p.o.passive_ack;
  if (passive && (mask & ~(uint64_t{1} << first)) != 0) {
    OneSidedBatch& batch = c.onesided();
    fill(batch, false);
    if (!batch.post_only(c.pending_commit())) ++c.engine().stats().commit_errors;
  }
  const bool landed = co_await write_until_landed(c, [&](OneSidedBatch& batch) {
    fill(batch, true);
    if (!passive) fill(batch, false);
  });
  if (!landed) ++c.engine().stats().commit_errors;
}

// COMMIT-PRIMARY (after COMMIT-BACKUP, the engine's log stage).
Task<bool> commit(Farm& p, Coordinator& c, Txn& t, uint32_t) {
  // The local copies as the primaries will have them (the history word:
  // what the checker and the log stage's writer id expect).
  if (c.db().recording())
    for (uint32_t i = 0; i < t.size(); ++i)
      if (t.access(i).mode == AccessMode::kWrite) set_copy_word(t.access(i).copy, c.db().history_word_offset(), t.id());
  co_await decide(p, c, t, kCommitPrimary);
  co_return true;
}

// ABORT to the primaries a LOCK went to (failed, timed out, or a later
// stage failed).
Task<bool> release(Farm& p, Coordinator& c, Txn& t, uint32_t) {
  co_await decide(p, c, t, kAbort);
  co_return true;
}

Result<std::unique_ptr<Protocol>> make(WorkerEngine& e, bool validating) {
  auto p = std::make_unique<Farm>(e, validating);
  // No NIC atomic: only the primaries' CPUs lock (message logs), so their
  // CPU atomics meet no NIC atomic on any device.
  e.set_atomic_stages(0);
  Database& db = e.db();
  uint32_t max_record = 0;
  for (TableId t = 0; t < db.tables(); ++t)
    if (db.has_table(t)) max_record = std::max(max_record, db.def(t).record_bytes);
  // The largest LOCK entry (every access a write to one primary) must fit
  // half a log, beside the decisions every coroutine may have promised.
  const uint64_t lock_max =
      ringlog::kEntryOverhead + sizeof(MsgHead) + uint64_t{Txn::kMaxAccesses} * (sizeof(LockRec) + pad8(max_record));
  if (2 * (lock_max + sizeof(EntryHead)) + uint64_t{e.options().coroutines} * kDecisionRoom > p->cap)
    return make_error(EINVAL,
                      "a LOCK record of up to %llu bytes (%u writes of %u-byte records) does not fit half a %llu-byte "
                      "message log: raise txn.log_ring_kb",
                      static_cast<unsigned long long>(lock_max), Txn::kMaxAccesses, max_record,
                      static_cast<unsigned long long>(p->cap));
  if (db.region_bytes() < p->layout.bytes())
    return make_error(EINVAL, "the message region has %llu bytes, the logs need %llu",
                      static_cast<unsigned long long>(db.region_bytes()),
                      static_cast<unsigned long long>(p->layout.bytes()));
  if (e.ctx().device->caps().max_inline < sizeof(EntryHead) + kSmallEntry)
    return make_error(EINVAL, "device %s: LOCK replies are inline WRITEs of %zu bytes; it inlines %u",
                      e.ctx().device->caps().name.c_str(), sizeof(EntryHead) + kSmallEntry,
                      e.ctx().device->caps().max_inline);
  // Staging per coroutine: LOCK entries (each after room for a skip
  // marker), the decision entries, the head READ's word.
  p->decisions_at = uint64_t{p->nodes} * sizeof(EntryHead) + uint64_t{p->nodes} * (ringlog::kEntryOverhead + sizeof(MsgHead)) +
                    uint64_t{Txn::kMaxAccesses} * (sizeof(LockRec) + pad8(max_record));
  p->per_co = p->decisions_at + uint64_t{p->nodes} * (sizeof(EntryHead) + kSmallEntry) + 8;
  rdma::Device& dev = *e.ctx().device;
  auto mem = dev.alloc_memory(p->per_co * e.options().coroutines);
  if (!mem.ok()) return make_error(mem.error().code, "message staging: %s", mem.error().message.c_str());
  p->staging = std::move(*mem);
  auto mr = dev.reg_mr(p->staging->data(), p->staging->size(), rdma::kAccessAll);
  if (!mr.ok()) return make_error(mr.error().code, "message staging: %s", mr.error().message.c_str());
  p->mr = *mr;
  e.add_service(std::make_unique<Messenger>(e, *p));
  p->set_stage(Stage::kFetch, *p, fetch);
  p->set_stage(Stage::kLock, *p, lock);
  p->set_stage(Stage::kValidate, *p, validate);
  p->set_stage(Stage::kCommit, *p, commit);
  p->set_release(*p, release);
  return std::unique_ptr<Protocol>(std::move(p));
}
Result<std::unique_ptr<Protocol>> create(WorkerEngine& e) { return make(e, true); }
Result<std::unique_ptr<Protocol>> create_novalidate(WorkerEngine& e) { return make(e, false); }

// Per worker: a request log and a reply log per node (txn.log_ring_kb each).
Result<uint64_t> region_bytes(const RegionQuery& q) {
  return region_layout(q.nodes, q.options->log_ring_bytes).bytes();
}

}  // namespace

constexpr ProtocolDef kDef = {
    .name = "farm",
    .summary = "FaRM's commit: read without locks; LOCK records to the primaries' message logs, VALIDATE by READ, "
               "COMMIT-BACKUP (log stage), COMMIT-PRIMARY records (SOSP'15)",
    .meta_bytes = kMetaBytes,
    .access_state_bytes = sizeof(AccessState),
    .isolation = Isolation::kSerializable,
    .strict = true,  // a read of a record a commit still holds aborts (doc/txn.md)
    .allowed = {.fetch = {Primitive::kOneSided},    // execute
                .lock = {Primitive::kMailbox},      // LOCK
                .validate = {Primitive::kOneSided},  // VALIDATE
                // log: the engine's (COMMIT-BACKUP)
                .commit = {Primitive::kMailbox}},  // COMMIT-PRIMARY; ABORT
    .abort_reasons = occ::kReasons,  // OCC's pieces report them (occ.hpp)
    .lock_held = lock_word0_held,
    .recovery = &occ::kRecovery,  // OCC's metadata, and its installs (COMMIT-PRIMARY's)
    .create = create,
    .region_bytes = region_bytes,
};

constexpr ProtocolDef kNoValidateForTests =
    broken_variant(kDef, "farm-broken-novalidate",
                   "BROKEN, tests only: FaRM without validation (no VALIDATE; LOCK ignores the versions read)",
                   create_novalidate);

RDTX_REGISTER_PROTOCOL(kDef)
RDTX_REGISTER_PROTOCOL(kNoValidateForTests)

}  // namespace rdtx::cc::farm
