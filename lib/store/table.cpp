#include "store/table.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <unistd.h>

#include "runtime/shutdown.hpp"
#include "store/store_log.hpp"

namespace rdtx::store {

namespace {

constexpr uint64_t kAlign = 64;

uint64_t* words(std::byte* p) { return reinterpret_cast<uint64_t*>(p); }
uint64_t* words_mut(const uint64_t* w) { return const_cast<uint64_t*>(w); }

// Zeroes [p, p + n), which faults its pages in: seconds for a table of
// gigabytes (shared memory faults in at 200 MB/s on a busy host). In
// steps, between which a stop request (SIGINT, SIGTERM) ends it: returns
// false then.
bool zero_unless_stopped(std::byte* p, uint64_t n) {
  constexpr uint64_t kStep = uint64_t{16} << 20;
  for (uint64_t at = 0; at < n; at += kStep) {
    if (runtime::shutdown_requested()) return false;
    std::memset(p + at, 0, std::min(kStep, n - at));
  }
  return true;
}

}  // namespace

Result<std::unique_ptr<Table>> Table::create(rdma::Device& dev, uint32_t node_id, const TableSpec& spec,
                                             std::span<rdma::Device* const> contexts) {
  auto fail = [&](const char* what) {
    return make_error(EINVAL, "table '%s' (id %u): %s", spec.name.c_str(), spec.id, what);
  };
  if (spec.meta_bytes % 8 != 0) return fail("meta_bytes must be a multiple of 8");
  if (spec.capacity == 0 || spec.capacity >= UINT32_MAX) return fail("capacity must be in [1, 2^32-1)");
  if (spec.record_slots == 0 || spec.record_slots > 64) return fail("record_slots must be in [1, 64]");
  if (uint64_t{spec.meta_bytes} + sizeof(TupleHeader) +
          uint64_t{spec.record_slots} * (uint64_t{spec.record_bytes} + 7) >
      kMaxTupleBytes)
    return fail("tuple larger than 1 MiB");
  TupleLayout layout{spec.meta_bytes, spec.record_bytes, spec.record_slots};

  if (spec.grows && spec.max_capacity != 0 && spec.max_capacity < spec.capacity)
    return fail("max_capacity below capacity");
  const bool grows = spec.grows && dev.caps().lazy_memory;
  if (spec.grows && !grows)
    RDTX_LOG(store_log(), Notice, "table '%s': device %s cannot commit registered memory later: it stays at %u tuples",
             spec.name.c_str(), dev.caps().name.c_str(), spec.capacity);
  IndexGeometry g;
  g.capacity = spec.capacity;
  if (grows) {
    // As many tuples as the machine's memory could hold, unless the spec
    // says fewer: the reservation is address space, not memory.
    const uint64_t machine = uint64_t(sysconf(_SC_PHYS_PAGES)) * uint64_t(sysconf(_SC_PAGESIZE)) /
                             layout.tuple_bytes();
    g.capacity = std::clamp<uint64_t>(spec.max_capacity != 0 ? spec.max_capacity : machine, spec.capacity,
                                      UINT32_MAX - 1);
  }
  g.buckets = spec.buckets != 0 ? spec.buckets : (uint64_t{spec.capacity} + 3) / 4;
  const uint64_t overflow_committed = spec.overflow_buckets.value_or(g.buckets / 8 + 16);
  g.overflow = overflow_committed;
  // Growing: enough overflow buckets to index every tuple past the primary
  // buckets' slots, with one partly used bucket per chain.
  if (grows) g.overflow += (g.capacity + kSlotsPerBucket - 1) / kSlotsPerBucket + g.buckets;
  // Bucket counts are bounded by what could ever be addressed, so the sizes
  // below cannot wrap.
  if (g.buckets > (1ull << 40) || g.overflow > (1ull << 40)) return fail("bucket count above 2^40");
  const uint64_t index_bytes = (g.buckets + g.overflow) * kBucketBytes;
  const uint64_t heap_bytes = g.capacity * layout.tuple_bytes();
  const uint64_t region_bytes = index_bytes + heap_bytes;
  if (region_bytes > dev.caps().max_mr_size) return fail("region larger than the device's max_mr_size");
  const uint64_t index_committed = (g.buckets + overflow_committed) * kBucketBytes;
  const uint64_t heap_committed = uint64_t{spec.capacity} * layout.tuple_bytes();

  // alloc_memory() is page-aligned on every driver we know; over-allocate
  // by one alignment unit rather than rely on it.
  auto mem = grows ? dev.reserve_memory(region_bytes + kAlign, index_committed + kAlign)
                   : dev.alloc_memory(region_bytes + kAlign);
  if (!mem.ok())
    return make_error(mem.error().code, "table '%s' (id %u): %s", spec.name.c_str(), spec.id,
                      mem.error().message.c_str());
  auto raw = reinterpret_cast<uintptr_t>((*mem)->data());
  auto* base = reinterpret_cast<std::byte*>((raw + kAlign - 1) & ~(kAlign - 1));
  if (grows) {
    auto heap = (*mem)->commit(static_cast<size_t>(base + index_bytes - static_cast<std::byte*>((*mem)->data())),
                               heap_committed);
    if (!heap.ok())
      return make_error(heap.error().code, "table '%s' (id %u): %s", spec.name.c_str(), spec.id,
                        heap.error().message.c_str());
  }
  if (!zero_unless_stopped(base, index_committed) || !zero_unless_stopped(base + index_bytes, heap_committed))
    return make_error(ECANCELED, "table '%s' (id %u): stopped by %s", spec.name.c_str(), spec.id,
                      runtime::shutdown_cause());
  rdma::Device* const just_dev[] = {&dev};
  if (contexts.empty()) contexts = just_dev;
  std::vector<Registration> regs;
  std::vector<uint32_t> reg_of_context;
  for (rdma::Device* ctx : contexts) {
    auto same = std::find_if(regs.begin(), regs.end(), [ctx](const Registration& r) { return r.context == ctx; });
    if (same != regs.end()) {
      reg_of_context.push_back(static_cast<uint32_t>(same - regs.begin()));
      continue;
    }
    auto mr = ctx->reg_mr(base, region_bytes, rdma::kAccessAll);
    if (!mr.ok()) {
      for (const Registration& r : regs) (void)r.context->dereg_mr(r.mr);
      return make_error(mr.error().code, "table '%s' (id %u): %s", spec.name.c_str(), spec.id,
                        mr.error().message.c_str());
    }
    reg_of_context.push_back(static_cast<uint32_t>(regs.size()));
    regs.push_back({ctx, *mr});
  }
  return std::make_unique<Table>(Key{}, node_id, spec, g, overflow_committed, std::move(*mem), base, std::move(regs),
                                 std::move(reg_of_context));
}

Table::Table(Key, uint32_t node_id, const TableSpec& spec, const IndexGeometry& g, uint64_t overflow_committed,
             std::unique_ptr<rdma::DeviceMemory> mem, std::byte* base, std::vector<Registration> regs,
             std::vector<uint32_t> reg_of_context)
    : id_(spec.id),
      init_tuple_(spec.init_tuple),
      name_(spec.name),
      node_id_(node_id),
      layout_{spec.meta_bytes, spec.record_bytes, spec.record_slots},
      tuple_bytes_(layout_.tuple_bytes()),
      partitioner_(spec.partitioner),
      mem_(std::move(mem)),
      regs_(std::move(regs)),
      reg_of_context_(std::move(reg_of_context)),
      base_(base),
      heap_(base + (g.buckets + g.overflow) * kBucketBytes),
      grows_(g.capacity > spec.capacity || g.overflow > overflow_committed),
      index_(base, g, overflow_committed),
      alloc_(static_cast<uint32_t>(g.capacity), spec.capacity) {}

Table::~Table() {
  for (const Registration& reg : regs_) {
    auto r = reg.context->dereg_mr(reg.mr);
    if (!r.ok()) RDTX_LOG(store_log(), Warning, "table '%s': %s", name_.c_str(), r.error().message.c_str());
  }
}

int Table::lookup(uint64_t key, TupleRef* ref) const {
  for (int attempt = 0; attempt < kLookupAttempts; ++attempt) {
    uint64_t v = 0;
    int rc = index_.find(key, &v);
    if (rc != 0) return rc;
    uint32_t i = slot_tuple(v);  // < capacity: checked by find()
    std::byte* t = tuple(i);
    // acquire: pairs with insert()'s release of the live state, so the key
    // written before it is visible.
    uint64_t state = load_word(state_word(t), std::memory_order_acquire);
    if (is_live(state) && state_low(state) == slot_state(v) &&
        load_word(key_word(t), std::memory_order_relaxed) == key) {
      *ref = TupleRef{t, i, state};
      return 0;
    }
    // The key was erased (and maybe reinserted) since find() read its slot.
  }
  return -EAGAIN;
}

bool Table::copy_tuple(const TupleRef& ref, std::byte* out) const {
  const auto* src = reinterpret_cast<const uint64_t*>(ref.tuple);
  // Ascending, each load ordered after the previous one (plain moves on
  // x86), as a one-sided READ copies: protocols install a version word after
  // the words it covers (OCC), so a copy showing the new version holds the
  // new record.
  for (uint32_t i = 0; i < tuple_bytes_ / 8; ++i) {
    uint64_t w = load_word(src + i, std::memory_order_acquire);
    std::memcpy(out + 8 * i, &w, 8);
  }
  // Seqlock read side: the fence orders the copy before the re-check, and
  // pairs with the release fence insert() issues before rewriting a reused
  // tuple: if the copy saw any word of a later incarnation, the state
  // loaded below is that incarnation's (or later), not ref.state.
  std::atomic_thread_fence(std::memory_order_acquire);
  return load_word(state_word(ref.tuple), std::memory_order_relaxed) == ref.state;
}

void Table::write_tuple(std::byte* t, uint64_t key, std::span<const std::byte> record, std::span<const MetaWord> meta) {
  uint64_t* w = words(t);
  uint32_t meta_words = layout_.meta_bytes / 8;
  for (uint32_t i = 0; i < meta_words; ++i) store_word(w + i, 0, std::memory_order_relaxed);
  store_word(words_mut(key_word(t)), key, std::memory_order_relaxed);
  uint64_t* rec = words(t + layout_.record_offset());
  uint32_t rec_words = round_up8(layout_.record_bytes) / 8;
  for (uint32_t i = 0; i < rec_words; ++i) {
    uint64_t x = 0;
    size_t off = size_t{i} * 8;
    if (off < record.size()) std::memcpy(&x, record.data() + off, std::min<size_t>(8, record.size() - off));
    store_word(rec + i, x, std::memory_order_relaxed);
  }
  // The other slots of a reused tuple start empty too.
  for (uint32_t i = rec_words; i < rec_words * layout_.record_slots; ++i)
    store_word(rec + i, 0, std::memory_order_relaxed);
  for (const MetaWord& m : meta) store_word(w + m.offset / 8, m.value, std::memory_order_relaxed);
  if (init_tuple_ != nullptr) init_tuple_(t, layout_);
}

uint64_t Table::next_live_state(uint64_t old) {
  // A fresh incarnation of the table: no live state is ever given twice,
  // to this tuple or another. A free tuple is dead (even state) below it,
  // unless a peer scribbled on it: then past that value, so that the
  // tuple's states still only grow.
  uint64_t state = (incarnations_.fetch_add(1, std::memory_order_relaxed) << 1) | 1;
  if (state <= old) state = (old | 1) + 2;
  return state;
}

bool Table::valid_write(std::span<const std::byte> record, std::span<const MetaWord> meta) const {
  if (record.size() > layout_.record_bytes) return false;
  for (const MetaWord& m : meta)
    if (m.offset % 8 != 0 || m.offset >= layout_.header_offset()) return false;
  return true;
}

bool Table::commit(std::byte* from, uint64_t bytes, const char* what) {
  auto* data = static_cast<std::byte*>(mem_->data());
  auto r = mem_->commit(static_cast<size_t>(from - data), bytes);
  if (r.ok()) return true;
  if (!full_logged_.exchange(true))
    RDTX_LOG(store_log(), Error, "table '%s' on node %u is full: no memory for more %s: %s", name_.c_str(), node_id_,
             what, r.error().message.c_str());
  return false;
}

bool Table::grow_heap(uint32_t seen) {
  std::lock_guard lock(grow_mu_);
  const uint32_t cur = alloc_.limit();
  if (cur != seen) return true;  // grown meanwhile: try again
  if (cur >= alloc_.capacity()) {
    if (!full_logged_.exchange(true))
      RDTX_LOG(store_log(), Error, "table '%s' on node %u is full: it holds %u tuples, the most it may %s", name_.c_str(),
               node_id_, cur, grows_ ? "grow to" : "(it does not grow)");
    return false;
  }
  const uint64_t step = std::max<uint64_t>(1, kGrowBytes / tuple_bytes_);
  const auto next = static_cast<uint32_t>(std::min<uint64_t>(uint64_t{cur} + step, alloc_.capacity()));
  if (!commit(tuple(cur), uint64_t{next - cur} * tuple_bytes_, "tuples")) return false;
  alloc_.raise_limit(next);
  return true;
}

bool Table::grow_overflow(uint64_t seen) {
  std::lock_guard lock(grow_mu_);
  const uint64_t cur = index_.overflow_limit();
  const IndexGeometry& g = index_.geometry();
  if (cur != seen) return true;
  if (cur >= g.overflow) {
    if (!full_logged_.exchange(true))
      RDTX_LOG(store_log(), Error, "table '%s' on node %u is full: all %llu overflow buckets of its index are used",
               name_.c_str(), node_id_, static_cast<unsigned long long>(cur));
    return false;
  }
  const uint64_t next = std::min(cur + kGrowBytes / kBucketBytes, g.overflow);
  if (!commit(base_ + (g.buckets + cur) * kBucketBytes, (next - cur) * kBucketBytes, "index buckets")) return false;
  index_.raise_overflow_limit(next);
  return true;
}

int Table::make_live(uint64_t key, std::span<const std::byte> record, std::span<const MetaWord> meta, TupleRef* out) {
  int64_t got;
  for (;;) {
    const uint32_t seen = alloc_.limit();
    got = alloc_.allocate();
    if (got >= 0) break;
    if (!grow_heap(seen)) return -ENOSPC;
  }
  const auto i = static_cast<uint32_t>(got);
  std::byte* t = tuple(i);
  const uint64_t state = next_live_state(load_word(state_word(t), std::memory_order_relaxed));
  // Seqlock write side (pairs with copy_tuple()'s acquire fence): a reader
  // of the previous incarnation that sees any word written below also sees
  // the dead state erase() stored, which the allocator handed over to us.
  std::atomic_thread_fence(std::memory_order_release);
  write_tuple(t, key, record, meta);
  // release: pairs with lookup()'s acquire; the tuple is complete before it
  // is live.
  store_word(words_mut(state_word(t)), state, std::memory_order_release);
  *out = TupleRef{t, i, state};
  return 0;
}

int Table::slot_tuple_checked(uint64_t key, const IndexSlot* slot, TupleRef* out) const {
  const uint64_t v = load_word(&slot->value, std::memory_order_relaxed);
  const uint32_t i = slot_tuple(v);  // < capacity: checked by locate()
  std::byte* t = tuple(i);
  // Under the chain lock only this key's changes touch its tuple, so slot
  // and tuple agree unless someone scribbled on the index; then changing
  // the tuple would destroy another key's data.
  const uint64_t state = load_word(state_word(t), std::memory_order_relaxed);
  if (!is_live(state) || state_low(state) != slot_state(v) || load_word(key_word(t), std::memory_order_relaxed) != key)
    return -EBADMSG;
  *out = TupleRef{t, i, state};
  return 0;
}

int Table::insert(uint64_t key, std::span<const std::byte> record, TupleRef* ref, std::span<const MetaWord> meta) {
  if (!valid_write(record, meta)) return -EINVAL;
  HashIndex::ChainLock lock(index_, key);
  IndexSlot* slot = nullptr;
  int rc;
  for (;;) {
    const uint64_t seen = index_.overflow_limit();
    rc = index_.reserve(lock, key, &slot);
    if (rc != -ENOSPC || !grow_overflow(seen)) break;
  }
  if (rc != 0) return rc;
  TupleRef made;
  rc = make_live(key, record, meta, &made);
  if (rc != 0) return rc;  // the reserved slot simply stays empty
  HashIndex::publish(slot, key, slot_value(made.index, made.state));
  live_.fetch_add(1, std::memory_order_relaxed);
  if (ref != nullptr) *ref = made;
  return 0;
}

int Table::erase(uint64_t key) {
  HashIndex::ChainLock lock(index_, key);
  IndexSlot* slot = nullptr;
  int rc = index_.locate(lock, key, &slot);
  if (rc != 0) return rc;
  TupleRef cur;
  rc = slot_tuple_checked(key, slot, &cur);
  if (rc != 0) return rc;
  HashIndex::clear(slot);
  // release: readers that re-check the state after copying the tuple
  // (copy_tuple, remote confirmation) see it dead from here on.
  store_word(words_mut(state_word(cur.tuple)), cur.state + 1, std::memory_order_release);
  alloc_.release(cur.index);
  live_.fetch_sub(1, std::memory_order_relaxed);
  return 0;
}

int Table::relocate(uint64_t key, std::span<const std::byte> record, TupleRef* ref, std::span<const MetaWord> meta) {
  if (!valid_write(record, meta)) return -EINVAL;
  HashIndex::ChainLock lock(index_, key);
  IndexSlot* slot = nullptr;
  int rc = index_.locate(lock, key, &slot);
  if (rc != 0) return rc;
  TupleRef old;
  rc = slot_tuple_checked(key, slot, &old);
  if (rc != 0) return rc;
  TupleRef made;
  rc = make_live(key, record, meta, &made);
  if (rc != 0) return rc;
  // The slot names the new tuple before the old one dies: a lookup finds
  // one of the two live, never neither.
  store_word(&slot->value, slot_value(made.index, made.state), std::memory_order_release);
  store_word(words_mut(state_word(old.tuple)), old.state + 1, std::memory_order_release);
  alloc_.release(old.index);
  if (ref != nullptr) *ref = made;
  return 0;
}

TableDescriptor Table::descriptor(uint32_t context) const {
  const IndexGeometry& g = index_.geometry();
  const rdma::MemoryRegion& mr = region(context);
  TableDescriptor d;
  d.table_id = id_;
  d.node_id = node_id_;
  d.context = context;
  d.rkey = mr.rkey;
  d.meta_bytes = layout_.meta_bytes;
  d.record_bytes = layout_.record_bytes;
  d.record_slots = layout_.record_slots;
  d.tuple_bytes = tuple_bytes_;
  d.index_addr = mr.remote_addr(0);
  d.buckets = g.buckets;
  d.overflow_buckets = g.overflow;
  d.heap_addr = mr.remote_addr(static_cast<size_t>(heap_ - static_cast<std::byte*>(mr.addr)));
  d.capacity = g.capacity;
  return d;
}

TableMemory Table::memory() const {
  const IndexGeometry& g = index_.geometry();
  TableMemory m;
  m.id = id_;
  m.name = name_;
  m.capacity = capacity();
  m.max_capacity = max_capacity();
  m.live = size();
  m.tuple_bytes = tuple_bytes_;
  m.buckets = g.buckets;
  m.overflow_buckets = index_.overflow_limit();
  m.overflow_used = index_.overflow_used();
  m.index_bytes = (g.buckets + m.overflow_buckets) * kBucketBytes;
  m.heap_bytes = m.capacity * tuple_bytes_;
  m.host_bytes = alloc_.host_bytes();
  return m;
}

}  // namespace rdtx::store
