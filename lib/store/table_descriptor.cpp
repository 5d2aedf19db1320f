#include "store/table_descriptor.hpp"

namespace rdtx::store {

namespace {
// a + b * c without wrapping past 2^64.
bool end_fits(uint64_t a, uint64_t b, uint64_t c) {
  unsigned __int128 end = static_cast<unsigned __int128>(b) * c + a;
  return end <= UINT64_MAX;
}
}  // namespace

Result<void> validate(const TableDescriptor& d) {
  auto fail = [&](const char* what) {
    return make_error(EINVAL, "table %u of node %u: descriptor %s", d.table_id, d.node_id, what);
  };
  if (d.meta_bytes % 8 != 0) return fail("meta_bytes is not a multiple of 8");
  if (d.record_slots == 0 || d.record_slots > 64) return fail("record_slots is not in [1, 64]");
  if (d.record_bytes > UINT32_MAX - 8 ||
      uint64_t{d.meta_bytes} + sizeof(TupleHeader) + uint64_t{d.record_slots} * round_up8(d.record_bytes) !=
          d.tuple_bytes)
    return fail("tuple_bytes does not match meta_bytes + 16 + record_slots x record_bytes rounded up to 8");
  if (d.buckets == 0) return fail("has no primary bucket");
  if (d.capacity == 0 || d.capacity >= UINT32_MAX) return fail("capacity is not in [1, 2^32-1)");
  if (d.overflow_buckets > UINT64_MAX / kBucketBytes - d.buckets) return fail("bucket count overflows");
  if (d.index_addr % 8 != 0 || d.heap_addr % 8 != 0) return fail("address is not 8-byte aligned");
  if (!end_fits(d.index_addr, d.buckets + d.overflow_buckets, kBucketBytes))
    return fail("index extends past the end of the address space");
  if (!end_fits(d.heap_addr, d.capacity, d.tuple_bytes)) return fail("heap extends past the end of the address space");
  return {};
}

}  // namespace rdtx::store
