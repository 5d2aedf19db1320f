#include "txn/stages/lock_wait_list.hpp"

#include <cstring>

#include "env/tsc.hpp"
#include "txn/coordinator.hpp"
#include "txn/stages/toolkit.hpp"

namespace rdtx::txn {

Result<std::unique_ptr<LockWaitList>> LockWaitList::create(Toolkit& k, uint32_t capacity, uint32_t max_payload,
                                                           uint64_t max_wait_ns) {
  if (capacity == 0 || capacity > 65536)
    return make_error(EINVAL, "lock wait list: capacity %u is not in [1, 65536]", capacity);
  return std::unique_ptr<LockWaitList>(new LockWaitList(k, capacity, max_payload, env::ns_to_tsc(max_wait_ns)));
}

LockWaitList::LockWaitList(Toolkit& k, uint32_t capacity, uint32_t max_payload, uint64_t max_wait_tsc)
    : Service("lock-wait-list"), k_(k), entries_(capacity), max_wait_tsc_(max_wait_tsc) {
  for (auto& e : entries_) {
    e.req.resize(max_payload);
    e.reply.resize(max_payload);
  }
}

bool LockWaitList::older_waiter(const std::byte* tuple, uint64_t value) const {
  if (used_ == 0) return false;
  for (const auto& e : entries_)
    if (e.used && e.tuple == tuple && e.value < value) return true;
  return false;
}

bool LockWaitList::park(rpc::Request& r, uint32_t next, std::span<const std::byte> reply_so_far,
                        const std::byte* tuple, uint64_t value, uint64_t) {
  if (used_ == entries_.size() || r.payload().size() > entries_[0].req.size()) return false;
  for (auto& e : entries_) {
    if (e.used) continue;
    e.used = true;
    std::memcpy(e.req.data(), r.payload().data(), r.payload().size());
    e.req_len = static_cast<uint32_t>(r.payload().size());
    std::memcpy(e.reply.data(), reply_so_far.data(), reply_so_far.size());
    e.reply_len = static_cast<uint32_t>(reply_so_far.size());
    e.next = next;
    e.tuple = tuple;
    e.value = value;
    e.parked_at = env::tsc();
    e.token = r.defer();
    ++used_;
    return true;
  }
  return false;
}

int LockWaitList::retry(bool give_up) {
  if (used_ == 0) return 0;
  int work = 0;
  const uint64_t now = env::tsc();
  for (auto& e : entries_) {
    if (!e.used) continue;
    const std::byte* tuple = nullptr;
    const bool may_wait = !give_up && now - e.parked_at < max_wait_tsc_;
    // Retrying, this entry must not see itself as an older waiter. A
    // cancelled attempt's items are refused (fenced) here too.
    e.used = false;
    const int wait = k_.serve_lock_read(std::span<const std::byte>(e.req.data(), e.req_len), e.next, e.reply,
                                        &e.reply_len, may_wait, &tuple);
    e.used = true;
    if (wait >= 0) {
      if (static_cast<uint32_t>(wait) != e.next) ++work;
      e.next = static_cast<uint32_t>(wait);
      e.tuple = tuple;
      continue;
    }
    k_.engine().ctx().rpc->reply(e.token, std::span<const std::byte>(e.reply.data(), e.reply_len));
    e.used = false;
    --used_;
    ++work;
  }
  return work;
}

}  // namespace rdtx::txn
