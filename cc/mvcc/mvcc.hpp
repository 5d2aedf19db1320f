// MVCC (RCC section 4.4): multi-version timestamp ordering with four version
// slots per tuple. See mvcc.cpp for the steps and doc/txn.md for the layout
// and every choice the paper leaves open.
#pragma once

#include "txn/coordinator.hpp"
#include "txn/stages/toolkit.hpp"

namespace rdtx::cc::mvcc {
extern const txn::ProtocolDef kDef;
// Tests only (broken = true): MVCC whose reads take the newest version below
// tts and nothing more: no look at the lock, no rts update, no re-check
// (no b4/b5/b7, no second traversal in a2). Not
// serializable: a writer older than a reader installs a version the reader
// should have seen. The tests show the history checker catches it.
extern const txn::ProtocolDef kNoReadTimestampForTests;
}  // namespace rdtx::cc::mvcc
