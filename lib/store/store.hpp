// Store: the tables one node owns, and their memory report. A node creates
// its tables at start-up (same specs, hence same partitioners, on every
// node), loads them (loader.hpp), hands descriptors() to the bootstrap for
// its peers, and then serves lookups through table(id).
// Thread-safety: create_table() during setup, from one thread; afterwards
// table(), descriptors() and memory_report() from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "rdma/rdma.hpp"
#include "store/table.hpp"
#include "store/table_descriptor.hpp"

namespace rdtx::store {

struct MemoryReport {
  uint32_t node_id = 0;
  std::vector<TableMemory> tables;  // by table id
  uint64_t total_bytes() const;
  // One line per table and a total, for logs and run reports.
  std::string to_string() const;
};

class Store {
 public:
  // Table ids are small integers (they index an array and travel in RPCs).
  static constexpr uint32_t kMaxTables = 1024;

  // `dev` (memory) and `contexts` (where tables are registered, see
  // Table::create) must outlive the store.
  Store(rdma::Device& dev, uint32_t node_id, std::vector<rdma::Device*> contexts = {})
      : dev_(dev), node_id_(node_id), contexts_(std::move(contexts)) {}

  // Creates a table on this node. Errors: EINVAL for an id >= kMaxTables,
  // EEXIST for an id or name already used, and Table::create's errors.
  Result<Table*> create_table(const TableSpec& spec);
  // The table with this id, or nullptr (ids from the network are checked
  // here, so an RPC handler may pass them through).
  Table* table(uint32_t id) const { return id < tables_.size() ? tables_[id].get() : nullptr; }

  uint32_t node_id() const { return node_id_; }
  // Every table's descriptor per context (table id order, then context),
  // for the bootstrap to send to peers.
  std::vector<TableDescriptor> descriptors() const;
  MemoryReport memory_report() const;

 private:
  rdma::Device& dev_;
  uint32_t node_id_;
  std::vector<rdma::Device*> contexts_;
  std::vector<std::unique_ptr<Table>> tables_;  // index = table id
};

}  // namespace rdtx::store
