// OCC (RTX / DrTM+H). See occ.cpp for the steps.
#pragma once

#include "runtime/task.hpp"
#include "txn/coordinator.hpp"
#include "txn/stages/toolkit.hpp"

namespace rdtx::cc::occ {

// OCC's tuple metadata and the pieces of OCC another protocol on the same
// metadata composes (FaRM's commit protocol: execute and VALIDATE are
// OCC's). Word 0 the lock (0, or the attempt id holding it), word 1 the
// version, word 2 the checksum of (version, hidden words, record).
inline constexpr uint32_t kLockOff = 0;
inline constexpr uint32_t kSeqOff = 8;
inline constexpr uint32_t kSumOff = 16;
inline constexpr uint32_t kMetaBytes = 24;
// Per access: the version seen at fetch.
struct AccessState {
  uint64_t version;
};
// The abort reasons these pieces report: the whole list of a protocol
// that composes them (ProtocolDef::abort_reasons = occ::kReasons, as OCC
// and FaRM do), so their numbers below are that protocol's.
inline constexpr txn::AbortReasonName kReasons[] = {{"lock_conflict", "lock conflict"},
                                                    {"validation", "validation failed"},
                                                    {"locked_at_read", "locked at read"},
                                                    {"unsettled_read", "copy torn or moved on every read"}};
inline const txn::AbortReason kLockConflict = txn::protocol_reason(0);
inline const txn::AbortReason kValidation = txn::protocol_reason(1);
inline const txn::AbortReason kLockedAtRead = txn::protocol_reason(2);
inline const txn::AbortReason kUnsettledRead = txn::protocol_reason(3);

// The checksum a writer stores with `version` (the tuple's own version
// word is not read: a writer passes the new one).
uint64_t checksum(const std::byte* tuple, uint64_t version, const store::TupleLayout& l);
// Fetch: lock-free reads (read_tuples), a copy held by a commit aborts, a
// torn one is read again; the version is kept in AccessState.
runtime::Task<bool> fetch_unlocked(txn::Coordinator& c, txn::Txn& t, txn::Primitive p, uint32_t from);
// Validation of the read-only set: unlocked, same version, same incarnation.
runtime::Task<bool> validate_reads(txn::Coordinator& c, txn::Txn& t, txn::Primitive p);

extern const txn::ProtocolDef kDef;
// Recovery of a removed coordinator's transactions on OCC's metadata
// (txn/recovery.hpp), FaRM's too: the lock word holds the attempt id.
extern const txn::RecoveryHooks kRecovery;
// Tests only, never in the registry: OCC with its validation removed (the
// read set is not validated, read-write records are locked without checking
// their version). Not serializable: the stress suite runs it to show that
// the history checker catches a broken protocol.
extern const txn::ProtocolDef kUnvalidatedForTests;
}
