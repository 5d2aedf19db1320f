// Small helpers shared by the rdma tests and their peer agent: payload
// patterns, hex encoding of QP addresses, and polling with a deadline.
// Thread-safety: pure functions, or per-call state only.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "rdma/rdma.hpp"

namespace rdtx::rdma::test {

// Byte i of the message with sequence number seq; the first 8 bytes of a
// message of at least 8 bytes hold seq itself.
inline uint8_t pattern_byte(uint64_t seq, size_t i) { return static_cast<uint8_t>(seq * 131 + i * 7 + 1); }
inline void fill_pattern(uint8_t* p, size_t len, uint64_t seq) {
  for (size_t i = 0; i < len; ++i) p[i] = pattern_byte(seq, i);
  if (len >= sizeof seq) std::memcpy(p, &seq, sizeof seq);
}
inline bool check_pattern(const uint8_t* p, size_t len, uint64_t seq) {
  std::vector<uint8_t> want(len);
  fill_pattern(want.data(), len, seq);
  return std::memcmp(p, want.data(), len) == 0;
}

inline std::string to_hex(const void* data, size_t len) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < len; ++i) {
    uint8_t b = static_cast<const uint8_t*>(data)[i];
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}
inline bool from_hex(const std::string& s, void* out, size_t len) {
  if (s.size() != 2 * len) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < len; ++i) {
    int hi = nibble(s[2 * i]), lo = nibble(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    static_cast<uint8_t*>(out)[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}
inline std::string to_hex(const QpAddress& a) { return to_hex(a.bytes, sizeof a.bytes); }
inline bool from_hex(const std::string& s, QpAddress* a) { return from_hex(s, a->bytes, sizeof a->bytes); }

// Polls until n completions arrived or the timeout passed; returns what came
// (never more than n: the rest stay in the CQ).
inline std::vector<Completion> poll_for(CompletionQueue& cq, size_t n,
                                        std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  std::vector<Completion> got;
  Completion wc[32];
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (got.size() < n && std::chrono::steady_clock::now() < deadline) {
    int k = cq.poll(wc, static_cast<int>(std::min<size_t>(32, n - got.size())));
    got.insert(got.end(), wc, wc + k);
  }
  return got;
}

}  // namespace rdtx::rdma::test
