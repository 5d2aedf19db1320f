#include "store/store.hpp"

#include <cinttypes>
#include <cstdio>

namespace rdtx::store {

Result<Table*> Store::create_table(const TableSpec& spec) {
  if (spec.id >= kMaxTables)
    return make_error(EINVAL, "table '%s': id %u is not below %u", spec.name.c_str(), spec.id, kMaxTables);
  if (table(spec.id) != nullptr)
    return make_error(EEXIST, "table '%s': id %u is already used by table '%s'", spec.name.c_str(), spec.id,
                      table(spec.id)->name().c_str());
  for (const auto& t : tables_)
    if (t && t->name() == spec.name)
      return make_error(EEXIST, "table '%s' (id %u): name already used by table id %u", spec.name.c_str(), spec.id,
                        t->id());
  auto t = Table::create(dev_, node_id_, spec, contexts_);
  if (!t.ok()) return t.error();
  if (tables_.size() <= spec.id) tables_.resize(spec.id + 1);
  tables_[spec.id] = std::move(*t);
  return tables_[spec.id].get();
}

std::vector<TableDescriptor> Store::descriptors() const {
  std::vector<TableDescriptor> out;
  for (const auto& t : tables_)
    if (t)
      for (uint32_t c = 0; c < t->contexts(); ++c) out.push_back(t->descriptor(c));
  return out;
}

MemoryReport Store::memory_report() const {
  MemoryReport r;
  r.node_id = node_id_;
  for (const auto& t : tables_)
    if (t) r.tables.push_back(t->memory());
  return r;
}

uint64_t MemoryReport::total_bytes() const {
  uint64_t sum = 0;
  for (const auto& t : tables) sum += t.total_bytes();
  return sum;
}

std::string MemoryReport::to_string() const {
  auto mib = [](uint64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); };
  std::string out;
  char line[320];
  std::snprintf(line, sizeof line, "node %u store memory\n%4s %-16s %12s %12s %6s %10s %15s %10s %10s %10s %10s\n",
                node_id, "id", "table", "live", "capacity", "tuple", "buckets", "overflow used", "index MiB",
                "heap MiB", "host MiB", "total MiB");
  out += line;
  for (const auto& t : tables) {
    std::snprintf(line, sizeof line,
                  "%4u %-16s %12" PRIu64 " %12" PRIu64 " %6u %10" PRIu64 " %7" PRIu64 "/%-7" PRIu64
                  " %10.2f %10.2f %10.2f %10.2f\n",
                  t.id, t.name.c_str(), t.live, t.capacity, t.tuple_bytes, t.buckets, t.overflow_used,
                  t.overflow_buckets, mib(t.index_bytes), mib(t.heap_bytes), mib(t.host_bytes), mib(t.total_bytes()));
    out += line;
  }
  std::snprintf(line, sizeof line, "total %.2f MiB (%" PRIu64 " bytes)\n", mib(total_bytes()), total_bytes());
  out += line;
  return out;
}

}  // namespace rdtx::store
