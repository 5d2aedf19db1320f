// Table: one table's partition on its owner node. Fixed-size tuples
// (tuple.hpp) and the table's hash index (hash_index.hpp) live in one
// registered memory region, so that peers can look keys up and READ, WRITE
// or CAS tuples with one-sided verbs (remote_lookup.hpp, descriptor()),
// while the owner's threads (RPC handlers) use the same index and tuples
// locally through this class.
//
// Region layout: [primary buckets][overflow buckets][tuple heap], each part
// 64-byte aligned; the memory report (memory()) accounts for each part.
//
// Growth. A table whose spec says it grows (TableSpec::grows) reserves
// address space for max_capacity tuples and for overflow buckets enough to
// index them, registers all of it once, and commits memory only for
// `capacity` tuples and the spec's overflow buckets. When an insert finds no
// free tuple (or its chain no overflow bucket) the inserting thread commits
// the next kGrowBytes (Device::reserve_memory, DeviceMemory::commit) under a
// mutex and goes on: once per kGrowBytes of rows, never otherwise. Peers
// reach the new tuples with the descriptor and keys they already have; the
// descriptor's capacity is the reservation. The primary buckets stay as
// sized for `capacity`, so a table grown far past it has longer chains (more
// READs per one-sided lookup; memory().overflow_used shows it).
//
// Inserted tuples start with zeroed protocol metadata and zeroed extra record
// slots: a protocol that needs other initial values gives TableSpec::init_tuple. Metadata is
// per incarnation: a reused tuple starts from zero again, which is why a
// protocol's validation should re-read its versions together with the state
// word that follows them (one READ of [0, layout().record_offset())).
//
// Thread-safety: lookup() and copy_tuple() are lock-free and may run on any
// thread; insert() and erase() may run concurrently on any threads of the
// owner (they lock the key's index chain and allocate tuples lock-free);
// peers READ and write the region at any time without coordination.
// Record contents under concurrent in-place updates are the protocol's
// business (its metadata); the store guarantees key and incarnation.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "rdma/rdma.hpp"
#include "store/hash_index.hpp"
#include "store/partitioner.hpp"
#include "store/table_descriptor.hpp"
#include "store/tuple.hpp"
#include "store/tuple_allocator.hpp"

namespace rdtx::store {

struct TableSpec {
  uint32_t id = 0;
  std::string name;
  uint32_t meta_bytes = 0;    // protocol metadata, a multiple of 8
  uint32_t record_bytes = 0;  // rounded up to 8 in the tuple
  uint32_t record_slots = 1;  // record-sized slots per tuple (TupleLayout), >= 1
  // Called by insert() on the new tuple, after the record and zeroed
  // metadata are written and before the tuple is published (live): a
  // protocol's initial metadata (MVCC: the loaded record's version and
  // checksum). Must not touch the header. nullptr: zeroed metadata.
  void (*init_tuple)(std::byte* tuple, const TupleLayout& layout) = nullptr;
  uint32_t capacity = 0;      // tuples this node holds memory for at first, in [1, 2^32-1)
  // Inserts may take the table past `capacity` (see Growth above), up to
  // max_capacity tuples (0: as many as the machine's memory could hold;
  // always below 2^32-1). On a device without lazy memory
  // (DeviceCaps::lazy_memory) the table stays at `capacity`.
  bool grows = false;
  uint64_t max_capacity = 0;
  // Primary buckets; 0: ceil(capacity / 4), which keeps ~95% of keys in
  // their primary bucket (one READ) when the table is full.
  uint64_t buckets = 0;
  // Overflow buckets shared by all chains; default buckets / 8 + 16.
  std::optional<uint64_t> overflow_buckets;
  Partitioner partitioner;  // which node owns which key (all nodes agree)
};

// A located tuple on the owner. `state` is the state word the lookup
// confirmed; compare it to detect a later erase or reuse.
struct TupleRef {
  std::byte* tuple = nullptr;  // first byte of the tuple (metadata)
  uint32_t index = 0;
  uint64_t state = 0;
};

// Memory held by one table (bytes unless named otherwise).
struct TableMemory {
  uint32_t id = 0;
  std::string name;
  uint64_t capacity = 0;      // tuples with memory committed
  uint64_t max_capacity = 0;  // tuples it may grow to (== capacity: it does not grow)
  uint64_t live = 0;          // tuples in use
  uint32_t tuple_bytes = 0;
  uint64_t buckets = 0;
  uint64_t overflow_buckets = 0;  // with memory committed
  uint64_t overflow_used = 0;
  uint64_t index_bytes = 0;  // primary + overflow buckets committed (registered)
  uint64_t heap_bytes = 0;   // tuples committed (registered)
  uint64_t host_bytes = 0;   // unregistered bookkeeping (tuple free list)
  uint64_t total_bytes() const { return index_bytes + heap_bytes + host_bytes; }
};

class Table {
  struct Key {};  // lets create() use make_unique with a public constructor

 public:
  // Lookups retry this often when the key's slot and tuple disagree (an
  // erase or reuse raced with them) before giving up with -EAGAIN.
  static constexpr int kLookupAttempts = 8;
  static constexpr uint32_t kMaxTupleBytes = 1u << 20;
  // A growing table commits memory in steps of this many bytes of tuples
  // (at least one tuple) or of overflow buckets.
  static constexpr uint64_t kGrowBytes = 2u << 20;

  // A registration of the region in one device context.
  struct Registration {
    rdma::Device* context;
    rdma::MemoryRegion mr;
  };

  // Allocates the region with dev.alloc_memory(), zeroes it and registers
  // it (kAccessAll) in each of `contexts`: the device contexts peers reach
  // the table through (a node's workers' contexts, one registration per
  // distinct context, since keys are valid only in the context that made
  // them). Empty: `dev` alone. The devices must outlive the table. Errors
  // name the table: EINVAL for a bad spec (meta_bytes not a multiple of 8,
  // capacity out of range, tuple larger than kMaxTupleBytes, region larger
  // than the device allows), or the device's error; ECANCELED when a stop
  // request (SIGINT, SIGTERM) came while the region was being zeroed.
  static Result<std::unique_ptr<Table>> create(rdma::Device& dev, uint32_t node_id, const TableSpec& spec,
                                               std::span<rdma::Device* const> contexts = {});
  Table(Key, uint32_t node_id, const TableSpec& spec, const IndexGeometry& g, uint64_t overflow_committed,
        std::unique_ptr<rdma::DeviceMemory> mem, std::byte* base, std::vector<Registration> regs,
        std::vector<uint32_t> reg_of_context);
  Table(const Table&) = delete;
  Table& operator=(const Table&) = delete;
  // Deregisters and frees the region: peers' later verbs on it fail.
  ~Table();

  // Finds a live tuple. 0 with *ref: at one instant during the call the key
  // was live in ref->index with state ref->state. -ENOENT: absent. -EAGAIN:
  // erased and reinserted under our feet kLookupAttempts times. -EBADMSG:
  // the index is corrupt (a peer wrote into it).
  int lookup(uint64_t key, TupleRef* ref) const;

  // Copies the whole tuple (tuple_bytes) into `out` (any alignment). Returns
  // true if the tuple still held ref's incarnation after the copy, so `out`
  // is that key's tuple; false if it was erased or reused meanwhile.
  bool copy_tuple(const TupleRef& ref, std::byte* out) const;

  // Inserts `key` with `record` (at most record_bytes; the rest is zeroed)
  // and zeroed metadata. 0 with *ref (if given); -EEXIST: the key is
  // present; -ENOSPC: no free tuple or no overflow bucket left, and (a
  // growing table) no memory could be committed for more: the log says why,
  // naming the table; -EINVAL:
  // record too long; -EBADMSG: the key's index chain is corrupt.
  // `meta`: metadata words set before init_tuple (which may read them: MVCC
  // checksums its version with its writer) and before the tuple is
  // published (the engine's hidden history words: the inserter's id).
  struct MetaWord {
    uint32_t offset;  // a multiple of 8, below layout().header_offset()
    uint64_t value;
  };
  int insert(uint64_t key, std::span<const std::byte> record, TupleRef* ref = nullptr,
             std::span<const MetaWord> meta = {});
  // Erases `key`: its slot is emptied, its tuple dead (next incarnation) and
  // free for reuse. 0; -ENOENT: absent; -EBADMSG: the slot names a tuple
  // that is not this key's (corrupt index; nothing is changed).
  int erase(uint64_t key);
  // Moves live `key` to a free tuple holding `record` and `meta` (as
  // insert() writes them), in one step for readers: the key's index slot
  // names the new tuple from then on, and the old tuple is dead (next
  // incarnation) and free for reuse by any key. 0 with *ref (if given);
  // -ENOENT: absent; -ENOSPC: no free tuple (nothing changed); -EINVAL:
  // record too long; -EBADMSG: corrupt index (nothing changed).
  int relocate(uint64_t key, std::span<const std::byte> record, TupleRef* ref = nullptr,
               std::span<const MetaWord> meta = {});

  uint32_t id() const { return id_; }
  const std::string& name() const { return name_; }
  uint32_t node_id() const { return node_id_; }
  const TupleLayout& layout() const { return layout_; }
  uint32_t tuple_bytes() const { return tuple_bytes_; }
  const Partitioner& partitioner() const { return partitioner_; }
  // Tuples with memory committed now; a growing table raises it.
  uint32_t capacity() const { return alloc_.limit(); }
  // Tuples it may grow to (capacity() if it does not grow).
  uint32_t max_capacity() const { return alloc_.capacity(); }
  // Tuples [0, high_water()) are every tuple that was ever handed out: a
  // scan of the table's tuples stops there.
  uint32_t high_water() const { return alloc_.high_water(); }
  uint64_t size() const { return live_.load(std::memory_order_relaxed); }

  // The tuple with this index (< high_water() to hold anything): protocols
  // read and write metadata and record in place.
  std::byte* tuple(uint32_t index) const { return heap_ + uint64_t{index} * tuple_bytes_; }

  // What peers need for one-sided access through context `context` (an
  // index into create()'s list); see TableDescriptor.
  TableDescriptor descriptor(uint32_t context = 0) const;
  uint32_t contexts() const { return static_cast<uint32_t>(reg_of_context_.size()); }
  TableMemory memory() const;
  const rdma::MemoryRegion& region(uint32_t context = 0) const { return regs_[reg_of_context_[context]].mr; }
  // The index, for diagnostics and tests.
  HashIndex& index() { return index_; }

 private:
  const uint64_t* state_word(const std::byte* t) const {
    return reinterpret_cast<const uint64_t*>(t + layout_.state_offset());
  }
  const uint64_t* key_word(const std::byte* t) const {
    return reinterpret_cast<const uint64_t*>(t + layout_.key_offset());
  }
  uint64_t next_live_state(uint64_t old);
  bool valid_write(std::span<const std::byte> record, std::span<const MetaWord> meta) const;
  // A free tuple written with key, record and meta, then made live (not yet
  // in the index); -ENOSPC if none is free.
  int make_live(uint64_t key, std::span<const std::byte> record, std::span<const MetaWord> meta, TupleRef* out);
  // Under the key's chain lock: the tuple its used slot names, checked to be
  // that key's live one (-EBADMSG: a corrupt index).
  int slot_tuple_checked(uint64_t key, const IndexSlot* slot, TupleRef* out) const;
  void write_tuple(std::byte* t, uint64_t key, std::span<const std::byte> record, std::span<const MetaWord> meta);
  // Commit memory for more tuples / overflow buckets, unless another thread
  // did since the caller saw limit `seen`. False (logged once): the table
  // does not grow, is at its largest, or the memory could not be committed.
  bool grow_heap(uint32_t seen);
  bool grow_overflow(uint64_t seen);
  bool commit(std::byte* from, uint64_t bytes, const char* what);

  uint32_t id_;
  void (*init_tuple_)(std::byte*, const TupleLayout&) = nullptr;
  std::string name_;
  uint32_t node_id_;
  TupleLayout layout_;
  uint32_t tuple_bytes_;
  Partitioner partitioner_;
  std::unique_ptr<rdma::DeviceMemory> mem_;
  std::vector<Registration> regs_;       // distinct contexts
  std::vector<uint32_t> reg_of_context_;  // create()'s context i -> regs_ index
  std::byte* base_;  // of the index; heap_ follows it
  std::byte* heap_;
  bool grows_;
  std::mutex grow_mu_;  // serialises growth (never taken otherwise)
  std::atomic<bool> full_logged_{false};
  HashIndex index_;
  TupleAllocator alloc_;
  std::atomic<uint64_t> live_{0};
  std::atomic<uint64_t> incarnations_{0};  // of the table's tuples, given out by next_live_state()
};

}  // namespace rdtx::store
