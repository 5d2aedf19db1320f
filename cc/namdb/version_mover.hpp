// NAM-DB's version mover (version_mover.cpp): the service that moves old
// versions from the records' buffers to the node's overflow ring and
// collects what no snapshot can need any more.
//
// Thread-safety: the service runs on its worker's thread (txn::Service).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cc/namdb/layout.hpp"
#include "txn/service.hpp"

namespace rdtx::cc::namdb {

// The mover of e's node (added by its worker 0). Table t's dirty bytes are
// span[t] bytes from prefix[t] of the region's dirty area.
std::unique_ptr<txn::Service> make_version_mover(txn::WorkerEngine& e, const Geometry& g, const Settings& s,
                                                 std::vector<uint64_t> prefix, std::vector<uint64_t> span);

}  // namespace rdtx::cc::namdb
