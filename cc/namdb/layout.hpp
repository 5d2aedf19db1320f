// NAM-DB's memory layout, shared by the protocol (namdb.cpp) and the
// version mover (version_mover.cpp): the version header word, the tuple
// metadata and its checksums, the overflow entries, the settings, and the
// node region's geometry. namdb.cpp's head comment describes each word.
//
// Thread-safety: constants and pure functions.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "store/tuple.hpp"
#include "txn/coordinator.hpp"
#include "txn/stages/toolkit.hpp"
#include "txn/stages/copy_check.hpp"

namespace rdtx::cc::namdb {

using txn::checksum_start;
using txn::checksum_words;
using txn::copy_word;

// --- the header word (5.1) ---------------------------------------------------
constexpr uint32_t kTsShift = 29;
constexpr uint64_t kThreadMask = (uint64_t{1} << kTsShift) - 1;
constexpr uint64_t kTsMask = 0xffffffffull;
constexpr uint64_t kMoved = uint64_t{1} << 61;
constexpr uint64_t kDeleted = uint64_t{1} << 62;
constexpr uint64_t kLocked = uint64_t{1} << 63;
constexpr uint64_t kVersionMask = (uint64_t{1} << 61) - 1;  // thread and timestamp
// A buffer slot never written: moved (free to use), its version all ones
// (a thread no vector has: never visible).
constexpr uint64_t kEmptyEntry = kMoved | kVersionMask;

constexpr uint64_t make_header(uint64_t thread, uint64_t ts) { return (ts << kTsShift) | thread; }
constexpr uint64_t thread_of(uint64_t h) { return h & kThreadMask; }
constexpr uint64_t ts_of(uint64_t h) { return (h >> kTsShift) & kTsMask; }

// --- tuple metadata ------------------------------------------------------------
constexpr uint32_t kBufferSlots = 4;
constexpr uint32_t kHdrOff = 0;
constexpr uint32_t kSumOff = 8;
constexpr uint32_t kCountOff = 16;
constexpr uint32_t kOverflowOff = 24;
constexpr uint32_t kEntriesOff = 32;
constexpr uint32_t kEntryBytes = 24;  // header, copy number, checksum
constexpr uint32_t kMetaBytes = kEntriesOff + kBufferSlots * kEntryBytes;
inline uint32_t entry_off(uint32_t s) { return kEntriesOff + s * kEntryBytes; }
// An access's metadata is READ whole into its extra space (old_versions()).
static_assert(kMetaBytes <= txn::Coordinator::kExtraBytes, "the metadata must fit an access's extra space");

// --- overflow entries (words) ----------------------------------------------------
enum OverflowWord : uint32_t {
  kOvPos,
  kOvTable,
  kOvKey,
  kOvHdr,
  kOvCopy,
  kOvPrev,
  kOvWriter,
  kOvMovedTsc,
  kOvSum,
  kOvHead
};
constexpr uint32_t kOvHeadBytes = 8 * kOvHead;
constexpr uint32_t kMaxChain = 64;  // overflow entries one read may walk

inline uint64_t mix(uint64_t h, uint64_t w) {
  std::byte b[8];
  std::memcpy(b, &w, 8);
  return checksum_words(h, b, 0, 8);
}

inline bool recording(const store::TupleLayout& l) { return l.meta_bytes > kMetaBytes; }
// The writer-id word of record slot k (0: the current version, 1 + s: buffer slot s).
inline uint32_t writer_off(uint32_t k) { return kMetaBytes + 8 * k; }
inline uint32_t record_words(const store::TupleLayout& l) { return store::round_up8(l.record_bytes); }

// The current version's checksum, over a tuple (or copy) whose record and
// writer word are the version's.
inline uint64_t current_sum(const std::byte* p, const store::TupleLayout& l, uint64_t hdr, uint64_t count) {
  uint64_t h = mix(checksum_start(hdr & kVersionMask), count);
  if (recording(l)) h = checksum_words(h, p, writer_off(0), writer_off(1));
  return checksum_words(h, p, l.record_offset(), l.record_offset() + record_words(l));
}

// A buffer entry's checksum: its version, copy number, writer id, the
// record's key and the data (the key: an entry of a tuple reused by another
// key never passes for this key's).
inline uint64_t entry_sum(uint64_t hdr, uint64_t copy_no, uint64_t writer, uint64_t key, const std::byte* data,
                   uint32_t bytes) {
  uint64_t h = mix(mix(mix(checksum_start(hdr & kVersionMask), copy_no), writer), key);
  return checksum_words(h, data, 0, bytes);
}

// An overflow entry's checksum (not over its moved time or deleted bit).
inline uint64_t overflow_sum(const std::byte* e, uint32_t data_bytes) {
  uint64_t h = checksum_start(copy_word(e, 8 * kOvHdr) & kVersionMask);
  for (uint32_t w : {kOvPos, kOvTable, kOvKey, kOvCopy, kOvPrev, kOvWriter}) h = mix(h, copy_word(e, 8 * w));
  return checksum_words(h, e, kOvHeadBytes, kOvHeadBytes + data_bytes);
}

// --- settings and the node region ----------------------------------------------
struct Settings {
  bool compressed = false;  // namdb.oracle = "compressed": one slot per compute node
  uint32_t oracle_node = 0;
  uint64_t overflow_entries = 0;
  uint64_t max_txn_ns = 0;
};
inline Settings settings_of(const txn::Options& o) {
  Settings s;
  s.compressed = o.setting_string("namdb.oracle", "vector") == "compressed";
  s.oracle_node = static_cast<uint32_t>(o.setting_int("namdb.oracle_node", 0));
  s.overflow_entries = static_cast<uint64_t>(o.setting_int("namdb.overflow_entries", 16384));
  s.max_txn_ns = static_cast<uint64_t>(o.setting_int("namdb.max_txn_us", 10000)) * 1000;
  return s;
}

inline uint64_t round64(uint64_t n) { return (n + 63) & ~uint64_t{63}; }
// The dirty bytes a node needs: one per tuple its tables start with, and
// up to 7 more per table (each table's first one 8-aligned).
inline uint64_t dirty_of(uint64_t tables, uint64_t tuples) { return tuples + 8 * tables; }

// The node region: [vector][per coordinator: snapshot, FAA result, one
// overflow entry][overflow ring][dirty bytes: one per tuple of every
// table, set by a writer that filled a buffer slot of one of them, cleared
// by the version mover].
struct Geometry {
  uint32_t slots = 0;  // vector slots: coordinators of the cluster, or nodes (compressed)
  uint32_t coroutines = 0;
  uint64_t vec_bytes = 0, co_off = 0, co_bytes = 0, entry_bytes = 0, ring_off = 0, ring_entries = 0;
  uint64_t dirty_off = 0, dirty_bytes = 0, total = 0;
  uint32_t data_bytes = 0;  // the largest record, rounded up to 8
  static Geometry make(uint32_t nodes, uint32_t wpn, uint32_t coroutines, uint32_t max_record, uint64_t dirty,
                       const Settings& s) {
    Geometry g;
    g.slots = s.compressed ? nodes : nodes * wpn * coroutines;
    g.coroutines = coroutines;
    g.data_bytes = store::round_up8(max_record);
    g.vec_bytes = round64(8ull * g.slots);
    g.entry_bytes = round64(kOvHeadBytes + g.data_bytes);
    g.co_off = g.vec_bytes;
    g.co_bytes = round64(8ull * g.slots) + 64 + g.entry_bytes;
    g.ring_off = g.co_off + g.co_bytes * wpn * coroutines;
    g.ring_entries = s.overflow_entries;
    g.dirty_off = g.ring_off + g.entry_bytes * g.ring_entries;
    g.dirty_bytes = round64(dirty);
    g.total = g.dirty_off + g.dirty_bytes;
    return g;
  }
  uint64_t snapshot_off(uint32_t worker, uint32_t co) const { return co_off + co_bytes * (worker * coroutines + co); }
  uint64_t faa_off(uint32_t worker, uint32_t co) const { return snapshot_off(worker, co) + round64(8ull * slots); }
  uint64_t entry_buf_off(uint32_t worker, uint32_t co) const { return faa_off(worker, co) + 64; }
  uint64_t ring_entry_off(uint64_t pos) const { return ring_off + entry_bytes * (pos % ring_entries); }
};

}  // namespace rdtx::cc::namdb
