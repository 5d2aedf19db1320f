// The layout of a tuple in a table's registered memory. Every tuple of a
// table has the same size and is 8-byte aligned:
//
//   offset 0               protocol metadata (meta_bytes, a multiple of 8,
//                          chosen by the protocol: e.g. OCC lock word + seq)
//   meta_bytes             TupleHeader: key, state
//   meta_bytes + 16        record (record_bytes rounded up to 8)
//   ... + k * that         record slot k, for k in [1, record_slots): room
//                          a protocol keeps for more versions of the record
//                          (MVCC); slot 0 is the record the loader writes and
//                          workloads' checks read
//
// so that one READ of tuple_bytes fetches metadata, header and record
// together (DESIGN.md), a protocol can CAS its lock word at offset 0, and a
// validation READ of [0, meta_bytes + 16) covers the protocol's versions and
// the store's state word in one go.
//
// The state word is incarnation << 1 | live. Incarnations are numbered per
// table: every insert (or relocation) gives its tuple the table's next one,
// so no two live tuples of a table, and no two lives of one tuple, ever
// share a state; erase makes a tuple dead (2i+1 -> 2i+2), below any
// incarnation still to come. A tuple's state therefore only grows. A reader
// that saw state s and later sees s again knows the tuple held the same key
// and incarnation in between; a reference that kept s detects any delete or
// reuse of the tuple as a different state, and a state seen in one tuple
// cannot be mistaken for another tuple's (a row that moved). A never-used
// tuple has state 0.
//
// Words of a tuple are accessed with std::atomic_ref on the owner (several
// threads of a node share a table) and copied without any atomicity by
// remote READs; see load_words() and store_words() below.
// Thread-safety: plain layout arithmetic and word accessors.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace rdtx::store {

struct TupleHeader {
  uint64_t key;
  uint64_t state;  // incarnation << 1 | live
};
static_assert(sizeof(TupleHeader) == 16);

inline constexpr bool is_live(uint64_t state) { return (state & 1) != 0; }
inline constexpr uint64_t incarnation(uint64_t state) { return state >> 1; }
// An index slot keeps the low 32 bits of a tuple's state (hash_index.hpp).
inline constexpr uint32_t state_low(uint64_t state) { return static_cast<uint32_t>(state); }

inline constexpr uint32_t round_up8(uint32_t n) { return (n + 7u) & ~7u; }

struct TupleLayout {
  uint32_t meta_bytes = 0;    // protocol metadata, multiple of 8
  uint32_t record_bytes = 0;  // as requested; stored rounded up to 8
  uint32_t record_slots = 1;  // record-sized slots, the record being slot 0

  constexpr uint32_t header_offset() const { return meta_bytes; }
  constexpr uint32_t key_offset() const { return meta_bytes; }
  constexpr uint32_t state_offset() const { return meta_bytes + 8; }
  constexpr uint32_t record_offset() const { return meta_bytes + sizeof(TupleHeader); }
  constexpr uint32_t slot_offset(uint32_t k) const { return record_offset() + k * round_up8(record_bytes); }
  constexpr uint32_t tuple_bytes() const {
    return meta_bytes + sizeof(TupleHeader) + record_slots * round_up8(record_bytes);
  }
};

// Reads the header of a tuple copied into a local buffer (e.g. by a READ).
// The buffer only needs byte alignment.
inline TupleHeader read_header(const std::byte* tuple, const TupleLayout& layout) {
  TupleHeader h;
  std::memcpy(&h, tuple + layout.header_offset(), sizeof h);
  return h;
}

// Atomic access to the 8-byte words of tuples and buckets that live in
// registered memory: these are plain words (the memory is raw, shared with
// the NIC), so std::atomic_ref rather than std::atomic objects.
inline uint64_t load_word(const uint64_t* w, std::memory_order mo) {
  return std::atomic_ref<uint64_t>(*const_cast<uint64_t*>(w)).load(mo);
}
inline void store_word(uint64_t* w, uint64_t v, std::memory_order mo) { std::atomic_ref<uint64_t>(*w).store(v, mo); }

// Copies n words with relaxed atomic loads/stores: the owner's threads may
// copy a tuple while another writes it without a C++ data race; consistency
// is established by the state-word protocol around the copy, not per word.
inline void load_words(uint64_t* dst, const uint64_t* src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = load_word(src + i, std::memory_order_relaxed);
}
inline void store_words(uint64_t* dst, const uint64_t* src, size_t n) {
  for (size_t i = 0; i < n; ++i) store_word(dst + i, src[i], std::memory_order_relaxed);
}

}  // namespace rdtx::store
