// NAM-DB (Zamanian et al., VLDB 2017; papers/004_*.txt): snapshot isolation
// on network-attached memory, one-sided verbs only, with the timestamp
// vector oracle, multi-version records (the current version in place, older
// ones in a per-record circular buffer, moved to a per-node overflow region
// by a version mover) and a commit that validates and locks with one CAS.
// See namdb.cpp for the steps and doc/txn.md "NAM-DB" for the layout and the
// choices the paper leaves open.
#pragma once

#include "txn/coordinator.hpp"
#include "txn/stages/toolkit.hpp"

namespace rdtx::cc::namdb {
extern const txn::ProtocolDef kDef;
// Tests only (broken = true): NAM-DB whose commit CAS does not compare the
// version read (it locks whatever version is current): two writers of one
// record that both read the same version both commit, a lost update that
// snapshot isolation forbids (first committer wins). The tests show the
// history checker catches it.
extern const txn::ProtocolDef kNoFirstCommitterWinsForTests;
}  // namespace rdtx::cc::namdb
