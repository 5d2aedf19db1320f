// Atomic access to plain integer words that live in shared memory.
//
// Shared segments are mapped by several processes, some of them read-only,
// and their words are never constructed as std::atomic objects: a file of
// zeros is their valid initial state. std::atomic_ref gives atomic access to
// such plain words. A read-only mapping only ever sees loads, which do not
// write, so casting away const for them is safe.
// Thread-safety: these are the synchronisation primitives themselves.
#pragma once

#include <atomic>

namespace rdtx::rdma::shm {

template <typename T>
inline T load_word(const T& word, std::memory_order order) {
  return std::atomic_ref<T>(const_cast<T&>(word)).load(order);
}

template <typename T>
inline void store_word(T& word, T value, std::memory_order order) {
  std::atomic_ref<T>(word).store(value, order);
}

}  // namespace rdtx::rdma::shm
