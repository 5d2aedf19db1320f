#include "txn/item_batch.hpp"

#include "txn/coordinator.hpp"

namespace rdtx::txn {

ItemBatch::ItemBatch(Coordinator& c, rpc::HandlerId handler)
    : c_(c), handler_(handler), max_payload_(c.engine().ctx().rpc->max_payload()) {
  for (int& x : cur_) x = -1;
  items_.reserve(Txn::kMaxAccesses);
}

void ItemBatch::reset(rpc::HandlerId handler) {
  handler_ = handler;
  for (uint32_t k = 0; k < ncalls_; ++k) cur_[calls_[k]->node] = -1;
  ncalls_ = 0;
  items_.clear();
}

bool ItemBatch::add(uint32_t i, uint64_t arg0, uint64_t arg1, std::span<const std::byte> data, uint32_t reply_data,
                    const uint64_t* prefix) {
  return add_to(c_.txn().access(i).node, i, arg0, arg1, data, reply_data, prefix);
}

bool ItemBatch::add_to(uint32_t node, uint32_t i, uint64_t arg0, uint64_t arg1, std::span<const std::byte> data,
                       uint32_t reply_data, const uint64_t* prefix) {
  const Access& a = c_.txn().access(i);
  return add_item(node, i, a.table, a.key, arg0, arg1, data, reply_data, prefix);
}

bool ItemBatch::add_item(uint32_t node, uint32_t i, TableId table, Key key, uint64_t arg0, uint64_t arg1,
                         std::span<const std::byte> data, uint32_t reply_data, const uint64_t* prefix,
                         uint32_t worker) {
  const uint32_t data_len = static_cast<uint32_t>(data.size()) + (prefix ? 8 : 0);
  const uint32_t req_need = sizeof(ItemHeader) + pad8(data_len);
  const uint32_t rep_need = sizeof(ItemReply) + pad8(reply_data);
  if (req_need + 8 > max_payload_ || rep_need > max_payload_) return false;
  const uint32_t dest =
      node * c_.engine().workers_per_node() + (worker == kPaired ? c_.engine().ctx().index : worker);
  int k = cur_[node];
  // Calls to several workers of one node: the node's last call is not
  // necessarily this worker's (a short search of the calls).
  if (k >= 0 && calls_[k]->dest != dest) {
    k = -1;
    for (uint32_t j = ncalls_; j-- > 0;)
      if (calls_[j]->dest == dest) {
        k = static_cast<int>(j);
        break;
      }
  }
  if (k < 0 || calls_[k]->req_len + req_need > max_payload_ || calls_[k]->reply_len + rep_need > max_payload_ ||
      calls_[k]->nitems == Txn::kMaxAccesses) {
    if (ncalls_ == kMaxCalls) return false;
    if (ncalls_ == calls_.size()) {
      // More calls than any stage of this batch needed so far (a control
      // path: once per high-water mark).
      auto fresh = std::make_unique<Call>();
      fresh->buf.resize(2 * size_t{max_payload_});
      fresh->req = fresh->buf.data();
      calls_.push_back(std::move(fresh));
    }
    k = static_cast<int>(ncalls_++);
    Call& cl = *calls_[k];
    cl.req_len = 8;
    cl.reply_len = 0;
    cl.nitems = 0;
    cl.first = cl.last = kNone;
    cl.judged = false;
    cl.node = node;
    cl.dest = dest;
    cl.reply = {cl.buf.data() + max_payload_, max_payload_};
    cur_[node] = k;
  }
  Call& cl = *calls_[k];
  ItemHeader h{table, data_len, key, arg0, arg1};
  std::byte* d = cl.req + cl.req_len;
  std::memcpy(d, &h, sizeof h);
  d += sizeof h;
  if (prefix) {
    std::memcpy(d, prefix, 8);
    d += 8;
  }
  if (!data.empty()) std::memcpy(d, data.data(), data.size());
  cl.req_len += req_need;
  cl.reply_len += rep_need;
  const uint32_t at = static_cast<uint32_t>(items_.size());
  items_.push_back({i, kNone});
  if (cl.last == kNone) cl.first = at;
  else items_[cl.last].next = at;
  cl.last = at;
  ++cl.nitems;
  const uint64_t count = cl.nitems;
  std::memcpy(cl.req, &count, 8);
  return true;
}

runtime::Task<bool> ItemBatch::call(uint64_t timeout_ns) {
  if (!c_.engine().options().outstanding_requests && ncalls_ > 1) {
    bool ok = true;
    for (uint32_t k = 0; k < ncalls_; ++k) {
      rpc::Batch b(*c_.engine().ctx().rpc);
      b.set_timeout_ns(timeout_ns);
      ok &= b.call(calls_[k]->dest, handler_, std::span<const std::byte>(calls_[k]->req, calls_[k]->req_len),
                   &calls_[k]->reply);
      c_.count_verb(stats::Verb::kSend, calls_[k]->req_len);
      c_.count_doorbell();
      ok &= co_await b.send();
      c_.count_round_trip();
    }
    co_return ok;
  }
  rpc::Batch b(*c_.engine().ctx().rpc);
  b.set_timeout_ns(timeout_ns);
  bool ok = true;
  for (uint32_t k = 0; k < ncalls_; ++k) {
    ok &= b.call(calls_[k]->dest, handler_, std::span<const std::byte>(calls_[k]->req, calls_[k]->req_len),
                 &calls_[k]->reply);
    c_.count_verb(stats::Verb::kSend, calls_[k]->req_len);
  }
  if (ncalls_ > 0) c_.count_doorbell();
  ok &= co_await b.send();
  c_.count_round_trip();
  co_return ok;
}

void ItemBatch::start(bool lazy) {
  inflight_.emplace(*c_.engine().ctx().rpc);
  for (uint32_t k = 0; k < ncalls_; ++k) {
    inflight_->call(calls_[k]->dest, handler_, std::span<const std::byte>(calls_[k]->req, calls_[k]->req_len),
                    &calls_[k]->reply, lazy);
    c_.count_verb(stats::Verb::kSend, calls_[k]->req_len);
  }
  if (ncalls_ > 0) c_.count_doorbell();
  inflight_wait_ = inflight_->send();
}

runtime::Task<bool> ItemBatch::retry_failed() {
  rpc::Batch b(*c_.engine().ctx().rpc);
  bool ok = true;
  bool unsent = false;
  for (uint32_t k = 0; k < ncalls_; ++k) {
    if (!call_failed(k)) continue;
    calls_[k]->reply.len = 0;
    const bool sent = b.call(calls_[k]->dest, handler_,
                             std::span<const std::byte>(calls_[k]->req, calls_[k]->req_len), &calls_[k]->reply);
    ok &= sent;
    unsent |= !sent;
    c_.count_verb(stats::Verb::kSend, calls_[k]->req_len);
  }
  c_.count_doorbell();
  ok &= co_await b.send();
  c_.count_round_trip();
  // A call that could not even be sent (no free send buffer or call slot:
  // they wait for credits and replies the pollers bring) fails at once,
  // without suspending: let the pollers run before the caller tries again.
  // Otherwise a retry loop would spin in place, and with every node on one
  // thread nothing it waits for could ever arrive (a hang the chaos suite
  // found on TPC-C: 32 write-backs a transaction under lost datagrams).
  if (unsent) co_await runtime::poll_wait();
  co_return ok;
}

ItemReader::ItemReader(std::span<const std::byte> p) : p_(p) {
  if (p.size() < 8) return;
  std::memcpy(&count_, p.data(), 4);
  valid_ = count_ <= Txn::kMaxAccesses;
}

}  // namespace rdtx::txn
