// LockWaitList: lock requests waiting on an owner (WAITDIE over RPC). A
// request whose item k must wait is parked with the reply written so far; a
// poller retries it until every item is answered, or until it has waited
// max_wait_ns (then the waiting item dies: its caller must hear back before
// its RPC timeout). A service of the worker (service.hpp): once the worker
// stops, nothing waits any more (drain: every waiting item dies at once).
// Fixed capacity, no allocation after creation.
// Thread-safety: the owner worker's thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/result.hpp"
#include "rpc/endpoint.hpp"
#include "txn/service.hpp"

namespace rdtx::txn {

class Toolkit;

class LockWaitList final : public Service {
 public:
  static Result<std::unique_ptr<LockWaitList>> create(Toolkit& k, uint32_t capacity, uint32_t max_payload,
                                                      uint64_t max_wait_ns);
  // Parks request `r` whose items [next, ...) are still to be answered,
  // waiting for `tuple`, requester lock value `value`, attempt `id`.
  // False if full or the request is too large.
  bool park(rpc::Request& r, uint32_t next, std::span<const std::byte> reply_so_far, const std::byte* tuple,
            uint64_t value, uint64_t id);
  bool has_room() const { return used_ < entries_.size(); }
  // True if a request older than `value` waits for `tuple`.
  bool older_waiter(const std::byte* tuple, uint64_t value) const;
  // Retries every parked request; answers those that are done.
  int poll() override { return retry(false); }
  // Answers every parked request (its waiting item dies); true when empty.
  bool drain() override {
    retry(true);
    return used_ == 0;
  }

 private:
  struct Entry {
    bool used = false;
    rpc::Deferred token;
    std::vector<std::byte> req;
    uint32_t req_len = 0;
    uint32_t next = 0;
    std::vector<std::byte> reply;
    uint32_t reply_len = 0;
    const std::byte* tuple = nullptr;
    uint64_t value = 0;
    uint64_t parked_at = 0;  // TSC
  };
  LockWaitList(Toolkit& k, uint32_t capacity, uint32_t max_payload, uint64_t max_wait_tsc);
  int retry(bool give_up);
  Toolkit& k_;
  std::vector<Entry> entries_;
  uint32_t used_ = 0;
  uint64_t max_wait_tsc_;
};

}  // namespace rdtx::txn
