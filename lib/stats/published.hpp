// Published<T>: a copy of a worker's value that other threads may read
// while the worker goes on (progress line, telemetry). One writer publishes
// now and then (not per transaction); readers on any thread get a
// consistent copy or retry. A sequence lock: the writer makes the sequence
// odd, stores the words, makes it even; a reader copies the words between
// two reads of the same even sequence. Every word is copied with a relaxed
// atomic access, so there is no data race, and the writer never waits.
//
// PublishedList<T>: a library's live objects that each publish a T, for one
// telemetry command that lists them (as DPDK's /ethdev/stats walks every
// port): an object joins with an Entry and leaves when the Entry goes.
//
// Thread-safety: Published: one writer thread; any number of reader threads.
// PublishedList: entries join and leave from any thread (control path: a
// lock no fast path takes); for_each from any thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

namespace rdtx::stats {

template <typename T>
class Published {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) % 8 == 0 && alignof(T) <= 8);
  static constexpr size_t kWords = sizeof(T) / 8;

 public:
  void publish(const T& v) {
    const uint64_t s = seq_.load(std::memory_order_relaxed);
    seq_.store(s + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    uint64_t w[kWords];
    std::memcpy(w, &v, sizeof w);
    for (size_t i = 0; i < kWords; ++i) std::atomic_ref<uint64_t>(words_[i]).store(w[i], std::memory_order_relaxed);
    seq_.store(s + 2, std::memory_order_release);
  }
  // A consistent copy (retries while the writer is publishing); false if
  // nothing was published yet.
  bool read(T* out) const {
    uint64_t w[kWords];
    for (;;) {
      const uint64_t s0 = seq_.load(std::memory_order_acquire);
      if (s0 == 0) return false;
      if (s0 & 1) continue;
      for (size_t i = 0; i < kWords; ++i)
        w[i] = std::atomic_ref<uint64_t>(const_cast<uint64_t&>(words_[i])).load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (seq_.load(std::memory_order_relaxed) == s0) break;
    }
    std::memcpy(static_cast<void*>(out), w, sizeof w);
    return true;
  }

 private:
  std::atomic<uint64_t> seq_{0};
  alignas(8) uint64_t words_[kWords] = {};
};

template <typename T>
class PublishedList {
 public:
  // One object's place in the list, named for the reply. Its owner
  // publishes now and then (not per operation); until the first
  // publication the entry is left out of for_each.
  class Entry {
   public:
    Entry(PublishedList& list, std::string name) : list_(list), name_(std::move(name)) { list_.add(this); }
    ~Entry() { list_.remove(this); }
    Entry(const Entry&) = delete;
    Entry& operator=(const Entry&) = delete;
    void publish(const T& v) { value_.publish(v); }
    const std::string& name() const { return name_; }

   private:
    friend class PublishedList;
    PublishedList& list_;
    const std::string name_;
    Published<T> value_;
  };

  // fn(name, value) for every entry that has published, in the order they
  // joined. Holds the list's lock: fn must not add or remove entries.
  template <typename Fn>
  void for_each(Fn&& fn) const {
    std::lock_guard lock(mu_);
    T v;
    for (const Entry* e : entries_)
      if (e->value_.read(&v)) fn(e->name_, v);
  }

 private:
  void add(const Entry* e) {
    std::lock_guard lock(mu_);
    entries_.push_back(e);
  }
  void remove(const Entry* e) {
    std::lock_guard lock(mu_);
    std::erase(entries_, e);
  }
  mutable std::mutex mu_;
  std::vector<const Entry*> entries_;
};

}  // namespace rdtx::stats
