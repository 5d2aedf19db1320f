// The RDMA device API every driver implements (drivers/rdma/shm, verbs).
// It mirrors libibverbs closely so that the verbs driver is a thin adapter:
// memory regions with rkeys, RC queue pairs for one-sided READ, WRITE and
// 8-byte CAS/FAA, UD queue pairs for SEND/RECV, completion queues polled in
// bursts, signaled/unsignaled and inline work requests, and a linked list of
// work requests posted with one doorbell.
//
// Control path (open, register, create, connect) returns Result<>; fast path
// (post, poll) returns counts or negative errno and never allocates.
// Driver dispatch is one virtual call per burst, never per element.
//
// Thread-safety: a Device may be shared by the threads of one node for
// control-path calls. A QueuePair and the CQs it reports to belong to one
// thread.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "base/result.hpp"

namespace rdtx::rdma {

enum class Opcode : uint8_t { kRead, kWrite, kCompareSwap, kFetchAdd, kSend, kRecv };
const char* to_string(Opcode op);

// Completion status, as ibv_wc_status.
enum class Status : uint8_t {
  kSuccess,
  kLocalLengthError,      // local buffer too small (RECV) or length > limit
  kLocalProtectionError,  // lkey does not cover the local buffer
  kRemoteAccessError,     // rkey invalid, out of bounds, or access not granted
  kRemoteInvalidRequest,  // e.g. misaligned atomic, unknown destination QP
  kFlushed,               // QP was in the error state
  kGeneralError,
  // An internal consistency error of the local QP while processing a work
  // request (IBV_WC_LOC_QP_OP_ERR). Soft-RoCE reports it where the verbs
  // specification says local protection error (an lkey that does not cover
  // the local buffer), so tests of a local key violation accept both.
  kLocalQpOperationError,
};
const char* to_string(Status st);

enum Access : uint32_t {
  kLocalWrite = 1u << 0,
  kRemoteRead = 1u << 1,
  kRemoteWrite = 1u << 2,
  kRemoteAtomic = 1u << 3,
  kAccessAll = kLocalWrite | kRemoteRead | kRemoteWrite | kRemoteAtomic,
};

// A registered buffer. Remote peers address it with (addr + offset, rkey).
struct MemoryRegion {
  void* addr = nullptr;
  size_t length = 0;
  uint32_t lkey = 0;
  uint32_t rkey = 0;
  uint64_t remote_addr(size_t offset = 0) const { return reinterpret_cast<uint64_t>(addr) + offset; }
};

// What a peer needs to reach a queue pair: produced by QueuePair::address(),
// carried by the bootstrap, consumed by connect() or create_ah(). Opaque to
// everything but the driver that made it.
struct QpAddress {
  uint8_t bytes[48] = {};
  bool operator==(const QpAddress& o) const { return std::memcmp(bytes, o.bytes, sizeof bytes) == 0; }
};

// A UD destination (verbs: ibv_ah + remote QPN + Q_Key).
class AddressHandle {
 public:
  virtual ~AddressHandle() = default;
};

enum SendFlags : uint32_t {
  kSignaled = 1u << 0,  // produce a completion on success (errors always do)
  kInline = 1u << 1,    // payload copied at post time; lkey ignored
  kFence = 1u << 2,     // wait for earlier READ/atomics on this QP first
};

// One send-queue entry (ibv_send_wr with a single SGE).
struct WorkRequest {
  uint64_t wr_id = 0;
  WorkRequest* next = nullptr;  // the rest of the doorbell batch
  Opcode opcode = Opcode::kRead;
  uint32_t flags = 0;
  void* local = nullptr;  // READ/atomic: destination; WRITE/SEND: source
  uint32_t length = 0;    // atomics: must be 8
  uint32_t lkey = 0;
  uint64_t remote_addr = 0;  // RC
  uint32_t rkey = 0;         // RC
  uint64_t compare_add = 0;  // CAS: compare; FAA: add
  uint64_t swap = 0;         // CAS: swap
  const AddressHandle* ah = nullptr;  // UD SEND
};

// One receive-queue entry.
struct RecvRequest {
  uint64_t wr_id = 0;
  RecvRequest* next = nullptr;
  void* addr = nullptr;
  uint32_t length = 0;
  uint32_t lkey = 0;
};

// One completion (ibv_wc). For RECV, byte_len is the payload size and
// src_qp identifies the sender's QP (driver-defined number).
struct Completion {
  uint64_t wr_id = 0;
  uint32_t byte_len = 0;
  uint32_t src_qp = 0;
  Opcode opcode = Opcode::kRead;
  Status status = Status::kSuccess;
};

struct DeviceCaps {
  std::string driver;       // "shm", "verbs"
  std::string name;         // e.g. "shm:node3", "mlx5_0"
  // Remote atomics (CAS/FAA through a QP) are atomic with respect to CPU
  // atomics on the same word. When false, a node must not mix CPU atomics
  // and NIC atomics on a lock word (verbs: IBV_ATOMIC_HCA).
  bool atomics_coherent_with_cpu = false;
  uint32_t max_inline = 0;      // bytes
  uint32_t max_send_wr = 0;     // per QP
  uint32_t max_recv_wr = 0;     // per QP
  uint32_t max_cqe = 0;         // per CQ
  uint32_t max_msg_size = 0;    // UD payload limit (MTU)
  uint64_t max_mr_size = 0;
  // reserve_memory() works: a region may cover memory committed after its
  // registration (shm: sparse files; verbs would need on-demand paging).
  bool lazy_memory = false;
  // A posted request still without a completion after this long never
  // gets one: the driver fails its QP (verbs: twice what the RC transport's
  // retries take, at least 1 s). 0: the driver completes every request by
  // itself (shm). Whoever waits for requests to drain waits longer.
  uint64_t stall_ns = 0;
  // connect() again after an error restores an RC link from this end alone
  // (shm: a QP keeps no transport state). false (verbs): the peer's QP keeps
  // its own (the expected PSN), so requests after a one-ended reconnect
  // would be taken as duplicates there; both ends must reset together.
  bool one_ended_reconnect = false;
  // Latency model (shm only; 0 for real devices).
  uint64_t latency_ns = 0;
  double bw_gbps = 0;
  // An RNIC model limits the node (shm's nic=...; Device::model_unaccounted()).
  bool nic_model = false;
};

// A CQ's depth must cover the send completions all its QPs can have
// outstanding (the sum of their max_send_wr) plus their posted receives;
// create_qp refuses a QP that would break this, as verbs would overflow.
class CompletionQueue {
 public:
  virtual ~CompletionQueue() = default;
  // Fills up to max completions; returns how many (0 if none), never blocks.
  // Polling also drives the driver's progress (shm latency model).
  virtual int poll(Completion* out, int max) = 0;
};

enum class QpType : uint8_t { kRc, kUd };

struct QpInit {
  QpType type = QpType::kRc;
  CompletionQueue* send_cq = nullptr;
  CompletionQueue* recv_cq = nullptr;  // UD only
  uint32_t max_send_wr = 256;
  uint32_t max_recv_wr = 256;
  uint32_t max_inline = 64;
};

class QueuePair {
 public:
  virtual ~QueuePair() = default;
  virtual QpType type() const = 0;
  virtual QpAddress address() const = 0;
  // Identifies this QP in Completion::src_qp of the messages it sends.
  virtual uint32_t qp_num() const = 0;
  // RC: connects to the remote QP (verbs INIT->RTR->RTS). Also brings a QP
  // that went to the error state back to ready; for a UD QP that is all it
  // does (pass the QP's own address).
  virtual Result<void> connect(const QpAddress& remote) = 0;
  // RC: moves the QP to the error state, as a node does to the QPs that
  // connect it to a member removed from the configuration
  // (doc/membership.md): its own requests, posted or later, are flushed, and
  // the peer's requests through the QP connected to it fail (verbs: this
  // responder drops them and the peer's retries run out,
  // kGeneralError; shm: they fail at once with kGeneralError). connect()
  // undoes it. On the thread that owns the QP.
  virtual Result<void> disconnect() {
    return make_error(ENOTSUP, "QP %u: this driver cannot disconnect a QP", qp_num());
  }
  // Posts a linked list of work requests with one doorbell. Returns 0, or a
  // negative errno with *bad set to the first request not posted (-ENOMEM:
  // send queue full; -EINVAL: malformed request, e.g. SEND on RC).
  // Unsignaled requests hold their send-queue slot until a later signaled
  // request on the same QP is completed and polled, as with verbs.
  virtual int post_send(WorkRequest* list, WorkRequest** bad) = 0;
  // UD: posts receive buffers. Same return convention. A buffer not covered
  // by its lkey may fail here (-EINVAL, shm) or when a message lands in it
  // (verbs: an error completion); callers must handle both.
  virtual int post_recv(RecvRequest* list, RecvRequest** bad) = 0;
};

// Per-open parameters that are not devargs: which node this device serves
// and the fabric (shm: the name of the shared-memory domain that all nodes of
// one cluster join). Drivers ignore what they do not need.
struct OpenOptions {
  uint32_t node_id = 0;
  std::string fabric;  // empty: driver default
};

// Memory obtained from Device::alloc_memory(): suitable for registration and
// reachable by every peer the driver supports (shm: shared memory that other
// processes can map; verbs: page-aligned, huge pages when available).
class DeviceMemory;

class Device {
 public:
  virtual ~Device() = default;
  virtual const DeviceCaps& caps() const = 0;

  virtual Result<std::unique_ptr<DeviceMemory>> alloc_memory(size_t bytes) = 0;
  // Address space for `reserve` bytes, of which the first `commit` are
  // backed and zero (as alloc_memory()'s); the rest is committed later, in
  // any pieces, by DeviceMemory::commit(), and until then holds no memory.
  // A region registered over all of it reaches each piece as soon as it is
  // committed, with the same keys: nothing is re-registered or re-sent to
  // peers. ENOTSUP unless caps().lazy_memory.
  virtual Result<std::unique_ptr<DeviceMemory>> reserve_memory(size_t reserve, size_t commit) {
    (void)reserve;
    (void)commit;
    return make_error(ENOTSUP, "reserve_memory: device %s cannot commit registered memory later",
                      caps().name.c_str());
  }
  virtual Result<MemoryRegion> reg_mr(void* addr, size_t length, uint32_t access) = 0;
  virtual Result<void> dereg_mr(const MemoryRegion& mr) = 0;

  virtual Result<std::unique_ptr<CompletionQueue>> create_cq(uint32_t depth) = 0;
  virtual Result<std::unique_ptr<QueuePair>> create_qp(const QpInit& init) = 0;
  virtual Result<std::unique_ptr<AddressHandle>> create_ah(const QpAddress& remote) = 0;

  // Another context on the same device, port and node, for one thread (a
  // worker): verbs opens its own ibv_context and protection domain, so no
  // doorbell, lock or domain is shared with the other threads. Protection is
  // per context, as with verbs protection domains: a region's keys are valid
  // only with QPs of the context that registered it (an access through
  // another context's QP fails with kRemoteAccessError or
  // kLocalProtectionError), CQs and QPs must come from the same context, and
  // a region is deregistered through the context that registered it. Memory
  // from any context's alloc_memory() of the node may be registered with any
  // of them. The context may outlive this Device.
  virtual Result<std::unique_ptr<Device>> open_context() = 0;
  // Work requests the node's RNIC model (caps().nic_model) served without
  // accounting for them, by any context or process of the node, so far;
  // zeros without a model.
  struct ModelUnaccounted {
    uint64_t stale = 0;     // stamped before the model's window (its poster stalled that long)
    uint64_t overflow = 0;  // queued past the model's window: its figures are wrong
  };
  virtual ModelUnaccounted model_unaccounted() const { return {}; }
};

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual void* data() const = 0;
  virtual size_t size() const = 0;  // reserved bytes (reserve_memory()), else allocated bytes
  // Backs [offset, offset + length) of memory from reserve_memory() (page
  // granularity: the pages the range touches), zero where never committed
  // before. Errors (nothing committed then): EINVAL outside size(); ENOSPC
  // or ENOMEM when the machine has no memory for it, with a message saying
  // where. Memory from alloc_memory() is committed already: a no-op.
  // Thread-safety: concurrent calls on disjoint ranges are safe.
  virtual Result<void> commit(size_t offset, size_t length) {
    if (offset > size() || length > size() - offset)
      return make_error(EINVAL, "commit(%zu, %zu): outside the %zu bytes allocated", offset, length, size());
    return {};
  }
};

// Opens a device from a devargs string: "<driver>[,key=value]*", for example
// "shm", "shm,latency_ns=2000,bw_gbps=100", "verbs,dev=mlx5_0,port=1".
// Unknown drivers and unknown keys are errors naming them.
Result<std::unique_ptr<Device>> open_device(std::string_view devargs, const OpenOptions& opts = {});

}  // namespace rdtx::rdma
