// ItemBatch: the RPC form of a stage. Per-access items (table, key, two
// protocol arguments, optional data) are packed into calls to the owner of
// each access — the worker with the same index on that node, as threads are
// paired — as few calls as the datagram size allows, all sent with one
// doorbell and awaited once. Replies come back per item in the same order.
//
// Handlers parse requests with ItemReader and answer with ItemWriter; both
// check every length against the message, so a malformed request is refused,
// never read out of bounds.
// Thread-safety: one per coordinator.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "rpc/endpoint.hpp"
#include "store/store.hpp"
#include "runtime/task.hpp"
#include "txn/txn.hpp"

namespace rdtx::txn {

class Coordinator;

struct ItemHeader {
  uint32_t table;
  uint32_t len;  // data bytes after the header (padded to 8 in the message)
  uint64_t key;
  uint64_t arg0;
  uint64_t arg1;
};
static_assert(sizeof(ItemHeader) == 32);

struct ItemReply {
  int32_t status;  // 0 or a protocol's code (negative errno for lookup errors)
  uint32_t len;    // data bytes after the reply header (padded to 8)
  uint64_t tuple_index;
  uint64_t state;
  uint64_t arg;
};
static_assert(sizeof(ItemReply) == 32);

inline constexpr uint32_t pad8(uint32_t n) { return (n + 7u) & ~7u; }

class ItemBatch {
 public:
  // One call per item at most (each item fits a datagram: the bench's
  // check_plan refuses a record that does not).
  static constexpr uint32_t kMaxCalls = Txn::kMaxAccesses;
  ItemBatch(Coordinator& c, rpc::HandlerId handler);
  // Empties the batch for a new stage talking to `handler`.
  void reset(rpc::HandlerId handler);

  // Adds an item for access `i`; `reply_data` is the most data its reply may
  // carry; `prefix`, if given, is an 8-byte word sent before `data`. False
  // if the item cannot fit a datagram, or the batch is full (more than
  // kMaxCalls calls).
  bool add(uint32_t i, uint64_t arg0, uint64_t arg1, std::span<const std::byte> data, uint32_t reply_data,
           const uint64_t* prefix = nullptr);
  // The same, to node `node` instead of the access's owner (the log stage
  // writes to the owner's backups).
  bool add_to(uint32_t node, uint32_t i, uint64_t arg0, uint64_t arg1, std::span<const std::byte> data,
              uint32_t reply_data, const uint64_t* prefix = nullptr);
  // The same for an item that is not an access (the log stage's inserted
  // rows): `id` is what the reply and failure callbacks are given for it.
  // `worker`: the worker of `node` it goes to (kPaired: the one paired with
  // this coordinator's, as everywhere else; a 2PL lock-table shard otherwise).
  static constexpr uint32_t kPaired = UINT32_MAX;
  bool add_item(uint32_t node, uint32_t id, TableId table, Key key, uint64_t arg0, uint64_t arg1,
                std::span<const std::byte> data, uint32_t reply_data, const uint64_t* prefix = nullptr,
                uint32_t worker = kPaired);
  // Makes retry_failed() send call k again (its answer asked for it).
  void mark_for_retry(uint32_t k) { calls_[k]->reply.status = rpc::CallStatus::kPending; }
  bool empty() const { return ncalls_ == 0; }
  // Sends all calls and waits for every reply. False: a call failed.
  // `timeout_ns`: the calls' own timeout (0: the endpoint's). With
  // txn.options.outstanding_requests off, one call after another, each
  // awaited before the next is sent (a round trip each), as RCC's
  // protocols without outstanding requests do.
  runtime::Task<bool> call(uint64_t timeout_ns = 0);
  // Sends all calls without waiting; finish() awaits them later (the batch
  // and its buffers stay untouched meanwhile). `lazy`: the replies may ride
  // on the owners' later messages (rpc::Batch::call).
  void start(bool lazy = false);
  bool in_flight() const { return inflight_.has_value(); }
  // The calls start() sent: co_await finish() (false: a call failed), then
  // end_flight(). (An awaitable, not a task: no coroutine frame.)
  runtime::WaitGroup::Ref finish() const { return inflight_wait_; }
  void end_flight() { inflight_.reset(); }
  // Sends again the calls that failed (no reply, or not OK) and waits.
  runtime::Task<bool> retry_failed();
  bool call_failed(uint32_t k) const { return calls_[k]->reply.status != rpc::CallStatus::kOk; }
  // Whether call k's answer was judged (judge_unlocks: once per call,
  // however often the batch is re-sent); false for a new call.
  bool judged(uint32_t k) const { return calls_[k]->judged; }
  void set_judged(uint32_t k) { calls_[k]->judged = true; }
  // fn(access index) for every item of every failed call.
  template <typename Fn>
  void for_each_failed_item(Fn&& fn) const {
    for (uint32_t k = 0; k < ncalls_; ++k)
      if (call_failed(k)) for_each_item_of(k, fn);
  }
  uint32_t calls() const { return ncalls_; }
  // fn(access index, reply, data) for the items of call k, if it was answered.
  template <typename Fn>
  bool for_each_reply_of(uint32_t k, Fn&& fn) const {
    const Call& cl = *calls_[k];
    if (cl.reply.status != rpc::CallStatus::kOk) return true;
    uint32_t off = 0;
    for (uint32_t j = cl.first; j != kNone; j = items_[j].next) {
      if (cl.reply.len < off + sizeof(ItemReply)) return false;
      ItemReply r;
      std::memcpy(&r, cl.reply.buf + off, sizeof r);
      off += sizeof r;
      if (r.len > cl.reply.len - off) return false;
      fn(items_[j].id, r, std::span<const std::byte>(cl.reply.buf + off, r.len));
      off += pad8(r.len);
    }
    return true;
  }
  // Call k without its transport, for a stage that carries the batch's
  // requests and replies another way (2PL's mailboxes): its destination
  // worker (node x workers_per_node + worker), its request bytes, and its
  // reply buffer (max_payload bytes), filled by the carrier, which then
  // says whether it came (set_reply; replies are then read as from RPC).
  uint32_t call_dest(uint32_t k) const { return calls_[k]->dest; }
  std::span<const std::byte> request(uint32_t k) const { return {calls_[k]->req, calls_[k]->req_len}; }
  std::span<std::byte> reply_buffer(uint32_t k) { return {calls_[k]->reply.buf, calls_[k]->reply.capacity}; }
  void set_reply(uint32_t k, bool came, uint32_t len) {
    calls_[k]->reply.status = came ? rpc::CallStatus::kOk : rpc::CallStatus::kTimeout;
    calls_[k]->reply.len = came ? len : 0;
  }

  // fn(access index) for every item of every call.
  template <typename Fn>
  void for_each_item(Fn&& fn) const {
    for (uint32_t k = 0; k < ncalls_; ++k) for_each_item_of(k, fn);
  }

  // Replies, in item order: fn(access index, reply, data). False if a reply
  // is malformed (shorter than its items).
  template <typename Fn>
  bool for_each_reply(Fn&& fn) const {
    bool ok = true;
    for (uint32_t k = 0; k < ncalls_; ++k) ok &= for_each_reply_of(k, fn);
    return ok;
  }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  // A call's items are a list through items_ (calls to several nodes are
  // filled in turn), in the order they were added: the order of the
  // request, and of the reply.
  struct Item {
    uint32_t id;    // access index (or add_item's id)
    uint32_t next;  // the call's next item in items_, kNone: the last
  };
  struct Call {
    uint32_t dest = 0;
    uint32_t node = 0;
    uint32_t req_len = 8;  // starts with the item count (8 bytes: keeps items 8-aligned)
    uint32_t reply_len = 0;
    uint32_t nitems = 0;
    uint32_t first = kNone, last = kNone;
    bool judged = false;
    std::vector<std::byte> buf;  // request, then reply: max_payload bytes each
    std::byte* req = nullptr;
    rpc::Reply reply;  // the endpoint writes it while the call is in flight: never moves
  };
  template <typename Fn>
  void for_each_item_of(uint32_t k, Fn&& fn) const {
    for (uint32_t j = calls_[k]->first; j != kNone; j = items_[j].next) fn(items_[j].id);
  }

  Coordinator& c_;
  rpc::HandlerId handler_;
  uint32_t max_payload_;
  std::optional<rpc::Batch> inflight_;
  runtime::WaitGroup::Ref inflight_wait_{nullptr};
  uint32_t ncalls_ = 0;
  int cur_[64];  // current call per node (the last one opened for it), -1: none
  // Calls 0..ncalls_-1 are this stage's; the rest are kept with their
  // buffers for the next stage that needs as many.
  std::vector<std::unique_ptr<Call>> calls_;
  std::vector<Item> items_;
};

// Reads the items of a request, checking every length.
class ItemReader {
 public:
  explicit ItemReader(std::span<const std::byte> p);
  bool valid() const { return valid_; }
  uint32_t count() const { return count_; }
  // The next item, or false at the end or on a malformed item.
  bool next(ItemHeader* h, std::span<const std::byte>* data);

 private:
  std::span<const std::byte> p_;
  uint32_t off_ = 8;
  uint32_t count_ = 0;
  uint32_t seen_ = 0;
  bool valid_ = false;
};

// Writes replies into a request's reply buffer; refuses past its end.
class ItemWriter {
 public:
  explicit ItemWriter(rpc::Request& r) : r_(r), buf_(r.reply_buffer()) {}
  // Appends a reply header and, if `data` is given, copies it after.
  bool add(const ItemReply& rep, std::span<const std::byte> data = {});
  // Reserves room for a reply with `n` data bytes; returns where to write
  // the data (nullptr if it does not fit).
  std::byte* add_reserved(const ItemReply& rep, uint32_t n);
  // Changes the status of the reply added last.
  void set_last_status(int32_t status) {
    if (last_ != UINT32_MAX) std::memcpy(buf_.data() + last_, &status, sizeof status);
  }
  void finish() { r_.set_reply_len(len_); }

 private:
  rpc::Request& r_;
  std::span<std::byte> buf_;
  uint32_t len_ = 0;
  uint32_t last_ = UINT32_MAX;
};

// Per item of every request: inline.
inline bool ItemReader::next(ItemHeader* h, std::span<const std::byte>* data) {
  if (!valid_ || seen_ == count_) return false;
  if (p_.size() < off_ + sizeof(ItemHeader)) {
    valid_ = false;
    return false;
  }
  std::memcpy(h, p_.data() + off_, sizeof *h);
  off_ += sizeof *h;
  if (h->len > p_.size() - off_) {
    valid_ = false;
    return false;
  }
  *data = p_.subspan(off_, h->len);
  off_ += pad8(h->len) <= p_.size() - off_ ? pad8(h->len) : h->len;
  ++seen_;
  return true;
}

inline bool ItemWriter::add(const ItemReply& rep, std::span<const std::byte> data) {
  std::byte* d = add_reserved(rep, static_cast<uint32_t>(data.size()));
  if (d == nullptr) return false;
  if (!data.empty()) std::memcpy(d, data.data(), data.size());
  return true;
}

inline std::byte* ItemWriter::add_reserved(const ItemReply& rep, uint32_t n) {
  if (buf_.size() < len_ + sizeof rep + pad8(n)) return nullptr;
  ItemReply r = rep;
  r.len = n;
  std::memcpy(buf_.data() + len_, &r, sizeof r);
  last_ = len_;
  std::byte* d = buf_.data() + len_ + sizeof r;
  len_ += sizeof r + pad8(n);
  return d;
}


// The owner side of an item RPC: for each item of request `r`, looks its key
// up in `st` and calls fn(header, data, status, table, ref, writer), where
// status is 0, or -EINVAL (unknown table id: table is nullptr) or the lookup's
// error; `fn` adds exactly one reply per item. A malformed request stops at
// the first bad item.
template <typename Fn>
void serve_items(rpc::Request& r, const store::Store& st, Fn&& fn) {
  ItemReader in(r.payload());
  ItemWriter out(r);
  ItemHeader h;
  std::span<const std::byte> data;
  while (in.next(&h, &data)) {
    store::Table* tab = st.table(h.table);
    store::TupleRef ref;
    int rc = tab ? tab->lookup(h.key, &ref) : -EINVAL;
    fn(h, data, rc, tab, ref, out);
  }
  out.finish();
}

}  // namespace rdtx::txn
