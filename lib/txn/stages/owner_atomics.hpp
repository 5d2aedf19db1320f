// Owner atomics: the one way owner-side code (the toolkit's RPC handlers,
// a protocol's own handlers) read-modify-writes a tuple word that remote
// NICs may CAS or FAA at the same time (lock words, MVCC's rts).
//
// A device whose remote atomics are atomic with respect to CPU atomics
// (DeviceCaps::atomics_coherent_with_cpu: IBV_ATOMIC_GLOB, shm's default)
// needs nothing: cas() and faa() are std::atomic_ref operations, inline,
// as fast as before. On most RNICs (IBV_ATOMIC_HCA) a remote CAS or FAA is
// a read and a write inside the NIC, atomic only with respect to that NIC's
// other atomics: a CPU atomic on the same word can land between them and be
// lost. There, when the run's pipeline puts NIC atomics and owner-side
// read-modify-writes on the same words (the protocol names the stages that
// touch them when it is created: WorkerEngine::set_atomic_stages; a stage
// does so with NIC atomics one-sided, on the owner's CPU over RPC, both
// hybrid), cas() and faa() go
// through the NIC too, as DrTM and DrTM+H lock local records: the RDMA
// atomic is posted on a loopback RC QP of the worker's device context (a
// QP connected to itself) at the word's address in the node's registered
// memory, and its completion awaited by polling that QP's own CQ. The
// handler waits for it (a few microseconds on an RNIC): it cannot go on
// without the old value. doc/txn.md ("Devices whose atomics are not
// coherent") gives the safety argument, and why a lock holder's plain
// stores (releases) need no such care.
//
// Thread-safety: one per worker, used by its thread only.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/result.hpp"
#include "rdma/rdma.hpp"
#include "txn/types.hpp"

namespace rdtx::txn {

struct Options;

// How a run's owner-side read-modify-writes are done.
enum class OwnerAtomicsMode : uint8_t {
  kCpu,             // CPU atomics: the device's atomics are coherent with them
  kCpuNoMix,        // CPU atomics: not coherent, but the pipeline never puts NIC and CPU RMWs on one word
  kLoopback,        // NIC atomics through a loopback QP
  kCpuForced,       // CPU atomics where loopback is needed (tests only: Options::owner_atomics_cpu)
};
// For the start-up line: "CPU atomics (device atomics coherent with CPU)", ...
const char* describe(OwnerAtomicsMode m);

// The mode for a run with options `o` on a device with `caps`, of a
// protocol whose stages `atomic_stages` (stage_bit) read-modify-write the
// words it shares with NICs (WorkerEngine::set_atomic_stages): loopback iff
// the device is not coherent and, among those stages, one runs in a form
// that posts NIC atomics (any but rpc and off) and one in a form whose
// owner side does them on the CPU (rpc, hybrid). Otherwise only one side
// ever touches the words and CPU atomics are safe.
OwnerAtomicsMode owner_atomics_mode(const rdma::DeviceCaps& caps, uint32_t atomic_stages, const Options& o);
// The run's start-up line, "owner atomics: loopback RDMA (device atomics not
// coherent with CPU)": notice on a device that is not coherent, info
// otherwise (component rdtx.txn.atomics).
void log_owner_atomics(OwnerAtomicsMode m, const rdma::DeviceCaps& caps);

class OwnerAtomics {
 public:
  // What cas() leaves in `expected`, and faa() returns, when the loopback
  // atomic failed (its completion reported an error, or none came within
  // kTimeoutNs): whether it took effect is unknown. It has kExclusiveBit
  // set, so a lock request reading it sees a holder and stops.
  static constexpr uint64_t kUnknown = UINT64_MAX;
  static constexpr uint64_t kTimeoutNs = 2'000'000'000;

  // CPU atomics (any mode but kLoopback): no device resources.
  OwnerAtomics() = default;
  ~OwnerAtomics();
  OwnerAtomics(const OwnerAtomics&) = delete;
  OwnerAtomics& operator=(const OwnerAtomics&) = delete;

  // Loopback atomics on `dev` (the worker's device context): a CQ, an RC QP
  // connected to itself, and 64 bytes of registered memory for the result.
  // `rkey_by_table[t]`: the rkey, in this context, of the region holding
  // table t's tuples on this node (tables not held: any value). `errors`:
  // incremented per failed atomic (the worker's commit_errors: a lock word
  // in an unknown state fails the run). Errors name the device and step.
  Result<void> init_loopback(rdma::Device& dev, std::vector<uint32_t> rkey_by_table, uint64_t* errors);
  bool loopback() const { return qp_ != nullptr; }

  // CAS on the 8-byte word at `word` (a tuple word of table `table` on this
  // node): true if it held `expected` and now holds `desired`; else false
  // and `expected` is what it held (kUnknown: the loopback atomic failed).
  // `mo`: the CPU atomic's memory order; the loopback form is sequentially
  // consistent with this thread's later accesses (it waits for the
  // completion, then fences).
  bool cas(TableId table, std::byte* word, uint64_t& expected, uint64_t desired,
           std::memory_order mo = std::memory_order_seq_cst) {
    if (qp_ == nullptr) [[likely]]
      return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(word))
          .compare_exchange_strong(expected, desired, mo);
    const uint64_t want = expected;
    expected = nic(rdma::Opcode::kCompareSwap, table, word, want, desired);
    return expected == want;
  }
  // FAA: adds `delta` (two's complement: -1 subtracts) and returns the old
  // value (kUnknown: the loopback atomic failed).
  uint64_t faa(TableId table, std::byte* word, uint64_t delta, std::memory_order mo = std::memory_order_seq_cst) {
    if (qp_ == nullptr) [[likely]]
      return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(word)).fetch_add(delta, mo);
    return nic(rdma::Opcode::kFetchAdd, table, word, delta, 0);
  }
  // Loopback atomics that failed so far.
  uint64_t failures() const { return failures_; }

 private:
  uint64_t nic(rdma::Opcode op, TableId table, std::byte* word, uint64_t compare_add, uint64_t swap);
  uint64_t fail(rdma::Opcode op, const std::byte* word, const char* why);

  std::unique_ptr<rdma::DeviceMemory> mem_;
  rdma::MemoryRegion mr_{};
  rdma::Device* dev_ = nullptr;
  std::unique_ptr<rdma::CompletionQueue> cq_;
  std::unique_ptr<rdma::QueuePair> qp_;  // set last: it alone says "loopback"
  rdma::QpAddress self_{};
  std::vector<uint32_t> rkeys_;
  uint64_t* errors_ = nullptr;
  uint64_t failures_ = 0;
};

}  // namespace rdtx::txn
