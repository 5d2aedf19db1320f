// VerbCounts: the network work of a transaction attempt or of a worker --
// one-sided verbs by type, RPC messages, doorbells, bytes and round trips
// (waits on the network). Plain counters: each coordinator counts its own
// attempt, and a worker adds them up; nothing is shared between threads.
// Thread-safety: plain value type.
#pragma once

#include <cstdint>

namespace rdtx::stats {

enum class Verb : uint8_t { kRead, kWrite, kCas, kFaa, kSend, kCount_ };
inline constexpr int kVerbs = static_cast<int>(Verb::kCount_);
inline const char* to_string(Verb v) {
  constexpr const char* kNames[] = {"read", "write", "cas", "faa", "send"};
  return kNames[static_cast<int>(v)];
}

struct VerbCounts {
  uint64_t verbs[kVerbs] = {};
  uint64_t doorbells = 0;
  uint64_t bytes = 0;  // payload: READ/WRITE lengths, 8 per atomic, RPC request bytes
  uint64_t round_trips = 0;

  void count(Verb v, uint64_t n_bytes) {
    ++verbs[static_cast<int>(v)];
    bytes += n_bytes;
  }
  uint64_t total_verbs() const {
    uint64_t n = 0;
    for (uint64_t v : verbs) n += v;
    return n;
  }
  void add(const VerbCounts& o) {
    for (int i = 0; i < kVerbs; ++i) verbs[i] += o.verbs[i];
    doorbells += o.doorbells;
    bytes += o.bytes;
    round_trips += o.round_trips;
  }
};

}  // namespace rdtx::stats
