#include "recv_queue.hpp"

#include <bit>
#include <cerrno>

#include "env/tsc.hpp"

namespace rdtx::rdma::shm {

Result<std::unique_ptr<RecvQueue>> RecvQueue::create(const std::string& path, uint32_t qpn, uint64_t node_token,
                                                     uint32_t max_recv_wr) {
  uint32_t capacity = std::bit_ceil(max_recv_wr);
  auto file = MappedFile::create(path, recv_queue_file_size(capacity));
  if (!file.ok()) return file.error();
  auto* h = reinterpret_cast<RecvQueueHeader*>(file->data());
  h->version = kLayoutVersion;
  h->capacity = capacity;
  h->node_token = node_token;
  h->qpn = qpn;
  // Release: a sender that validates the magic sees the fields above.
  store_word(h->magic, kRecvQueueMagic, std::memory_order_release);
  return std::make_unique<RecvQueue>(std::move(*file), capacity, max_recv_wr);
}

RecvQueue::RecvQueue(MappedFile file, uint32_t capacity, uint32_t max_recv_wr)
    : file_(std::move(file)),
      header_(reinterpret_cast<RecvQueueHeader*>(file_.data())),
      slots_(reinterpret_cast<RecvSlot*>(file_.data() + kRecvSlotsOffset)),
      mask_(capacity - 1),
      max_recv_wr_(max_recv_wr),
      posted_info_(std::make_unique<Posted[]>(capacity)) {}

int RecvQueue::post(RecvRequest* list, RecvRequest** bad, const RegionTable& regions, uint32_t pd, bool publish) {
  int rc = 0;
  for (RecvRequest* r = list; r != nullptr; r = r->next) {
    if (posted_ - head_ >= max_recv_wr_) {
      *bad = r;
      rc = -ENOMEM;
      break;
    }
    Region reg;
    uint64_t addr = reinterpret_cast<uint64_t>(r->addr);
    if (!regions.lookup(r->lkey, &reg) || reg.pd != pd || (reg.access & kLocalWrite) == 0 ||
        !reg.covers(addr, r->length)) {
      *bad = r;
      rc = -EINVAL;
      break;
    }
    // The slot is free: its previous round was harvested, so no sender
    // touches it until `posted` covers it again.
    RecvSlot& s = slots_[posted_ & mask_];
    s.addr = addr;
    s.length = r->length;
    s.lkey = r->lkey;
    posted_info_[posted_ & mask_] = Posted{r->wr_id, r->length};
    ++posted_;
  }
  // One release store publishes the whole list (the doorbell).
  if (publish && posted_ != published_) {
    store_word(header_->posted, posted_, std::memory_order_release);
    published_ = posted_;
  }
  return rc;
}

int RecvQueue::harvest(Completion* out, int max) {
  if (published_ != posted_) {
    store_word(header_->posted, posted_, std::memory_order_release);
    published_ = posted_;
  }
  int n = 0;
  uint64_t now = 0;  // read lazily: only completions stamped by a latency model need it
  while (n < max && head_ != posted_) {
    RecvSlot& s = slots_[head_ & mask_];
    // Acquire pairs with the sender's release in RemoteRecvQueue::complete().
    if (load_word(s.done, std::memory_order_acquire) != head_ + 1) break;
    uint64_t visible = s.visible_tsc;
    if (visible != 0) {
      if (now == 0) now = env::tsc();
      if (visible > now) break;
    }
    const Posted& p = posted_info_[head_ & mask_];
    Completion& c = out[n++];
    c.wr_id = p.wr_id;
    c.opcode = Opcode::kRecv;
    c.src_qp = s.src_qp;
    c.byte_len = s.byte_len;
    uint8_t st = s.status;
    // The sender is another party: accept only statuses a receive can have
    // and lengths that fit the buffer that was posted.
    bool sane = (st == uint8_t(Status::kSuccess) && c.byte_len <= p.length) ||
                st == uint8_t(Status::kLocalLengthError) || st == uint8_t(Status::kLocalProtectionError);
    c.status = sane ? static_cast<Status>(st) : Status::kGeneralError;
    ++head_;
  }
  return n;
}

uint64_t RecvQueue::dropped() const { return load_word(header_->dropped, std::memory_order_relaxed); }
uint64_t RecvQueue::injected_drops() const { return load_word(header_->injected_drops, std::memory_order_relaxed); }
uint64_t RecvQueue::injected_dups() const { return load_word(header_->injected_dups, std::memory_order_relaxed); }
uint64_t RecvQueue::injected_delays() const {
  return load_word(header_->injected_delays, std::memory_order_relaxed);
}

Result<RemoteRecvQueue> RemoteRecvQueue::open(const std::string& path, uint32_t qpn, uint64_t node_token) {
  auto file = MappedFile::open(path, true, sizeof(RecvQueueHeader));
  if (!file.ok()) return file.error();
  return attach(std::make_shared<const MappedFile>(std::move(*file)), path, qpn, node_token);
}

Result<RemoteRecvQueue> RemoteRecvQueue::attach(std::shared_ptr<const MappedFile> file, const std::string& path,
                                                uint32_t qpn, uint64_t node_token) {
  auto* h = reinterpret_cast<RecvQueueHeader*>(file->data());
  if (load_word(h->magic, std::memory_order_acquire) != kRecvQueueMagic || h->version != kLayoutVersion)
    return make_error(EPROTO, "%s is not an rdtx shm receive queue of this version", path.c_str());
  uint32_t capacity = h->capacity;
  if (h->qpn != qpn || h->node_token != node_token)
    return make_error(ESTALE, "%s belongs to another QP or node incarnation (stale address)", path.c_str());
  if (capacity == 0 || !std::has_single_bit(capacity) || file->size() < recv_queue_file_size(capacity))
    return make_error(EPROTO, "%s: capacity %u does not match its size %zu", path.c_str(), capacity, file->size());
  RemoteRecvQueue q;
  q.file_ = std::move(file);
  q.header_ = reinterpret_cast<RecvQueueHeader*>(q.file_->data());
  q.slots_ = reinterpret_cast<RecvSlot*>(q.file_->data() + kRecvSlotsOffset);
  q.mask_ = capacity - 1;
  return q;
}

}  // namespace rdtx::rdma::shm
