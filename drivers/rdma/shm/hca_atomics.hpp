// atomics=hca (doc/drivers.md): remote CAS and FAA as an RNIC that reports
// IBV_ATOMIC_HCA performs them. Such a NIC reads the target word, computes,
// and writes it back, serialising the read-modify-write only against its
// other atomics: a CPU atomic (or a CPU store) on the same word may land
// between the read and the write, and is then lost (FAA, matching CAS) or
// unseen. A CAS whose compare fails writes nothing, which is what makes a
// lock holder's plain store of its release safe against a concurrent
// remote CAS (doc/txn.md "Devices whose atomics are not coherent").
//
// Here every remote atomic on a node's memory takes a spinlock of the node's
// atomic unit (HcaAtomicUnit: a table of stripes keyed by the target's
// address in the owner's address space, which every poster computes alike),
// loads the word, waits a short window (a real NIC's read and write are a
// PCIe round trip apart; the window makes the race show on two cores), and
// stores the result. CPU atomics never take the stripes, so they are atomic
// with respect to each other and not to the remote atomics.
//
// The unit lives in the node's file "<prefix>atomics" (segment.hpp), mapped
// read-write by the owner and by every peer, so the remote atomics of
// posters in different processes serialise as those of one NIC. A poster
// that dies holding a stripe (within a window) leaves it held: the node's
// atomics on that stripe then spin; runs that kill processes use the
// default atomics=cpu.
// Thread-safety: the stripes are the synchronisation; the table is only
// accessed atomically.
#pragma once

#include <atomic>
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "env/tsc.hpp"

namespace rdtx::rdma::shm {

struct HcaAtomicUnit {
  static constexpr uint64_t kMagic = 0x31'41'43'48'58'54'44'52;  // "RDTXHCA1"
  static constexpr uint32_t kStripes = 4096;
  // How long a remote atomic holds the word between its read and its write.
  static constexpr uint64_t kWindowNs = 1000;
  alignas(64) uint64_t magic;
  alignas(64) uint64_t stripe[kStripes];  // 0: free, 1: held

  // Performs the CAS (`cas`: compare compare_add, swap swap) or FAA (add
  // compare_add) on `target`, the word at `remote_addr` of this unit's node,
  // and returns the value it found. `window_ticks`: kWindowNs in
  // hardware-counter ticks (real time even under a virtual clock: the race
  // is between real threads).
  uint64_t execute(uint64_t remote_addr, uint64_t* target, bool cas, uint64_t compare_add, uint64_t swap,
                   uint64_t window_ticks) {
    std::atomic_ref<uint64_t> lock(stripe[stripe_of(remote_addr)]);
    for (;;) {
      uint64_t free = 0;
      if (lock.compare_exchange_weak(free, 1, std::memory_order_acquire, std::memory_order_relaxed)) break;
      while (lock.load(std::memory_order_relaxed) != 0) pause();
    }
    // A read and a write, not one RMW: a CPU atomic between them is lost.
    // Both seq_cst, as the coherent path's locked instruction: the write is
    // globally visible before the poster goes on (a NIC writes the word to
    // memory before it sends the completion), so a later READ or CPU load
    // of another word cannot be served before it (store-buffering: a
    // release store may wait in this core's store buffer while the poster
    // reads an rts, and a CPU reader raising that rts misses the lock).
    std::atomic_ref<uint64_t> word(*target);
    const uint64_t old = word.load(std::memory_order_seq_cst);
    if (!cas || old == compare_add) {
      const uint64_t until = env::hw_tsc() + window_ticks;
      while (env::hw_tsc() < until) pause();
      word.store(cas ? swap : old + compare_add, std::memory_order_seq_cst);
    }
    lock.store(0, std::memory_order_release);
    return old;
  }

 private:
  static uint32_t stripe_of(uint64_t remote_addr) {
    return static_cast<uint32_t>(((remote_addr >> 3) * 0x9e3779b97f4a7c15ull) >> 52) & (kStripes - 1);
  }
  static void pause() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
  }
};

}  // namespace rdtx::rdma::shm
