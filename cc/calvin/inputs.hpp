// CALVIN's input log (calvin.inputs, calvin.replay; calvin.cpp describes
// the protocol): the format of a coordinator's recorded input batches, and
// the checks made before anything is loaded (preflight_of()). inputs.cpp
// defines these and the Calvin members that record a coordinator's batches
// (record_batch(), write_recording()) and load them for a replay
// (load_replay()); sequencer.cpp's next_batch() sends them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/result.hpp"
#include "txn/protocol.hpp"

namespace rdtx::cc::calvin::detail {

// The recorded inputs of one coordinator (calvin.inputs / calvin.replay):
// a magic word, the recording's fingerprint (recording_fingerprint), then
// per epoch {count | final << 31 (8 bytes)} and count CRs, then a checksum
// (FNV-1a) of everything before it. A replay proves it replays the
// recorded run: a damaged file or one recorded under another configuration
// is refused before anything is loaded (preflight_of).
constexpr uint64_t kInputsMagic = 0x3274757069766c63ull;  // "clviput2"
constexpr size_t kInputsHeader = 16;                       // magic, fingerprint

// What the recorded inputs depend on (inputs.cpp).
uint64_t recording_fingerprint(const txn::Options& o, uint32_t epoch_size);
// A recording of at most `record_epochs` epochs: its largest file.
uint64_t max_inputs_bytes(uint64_t record_epochs, uint32_t epoch_size);
// ProtocolDef::preflight: calvin.inputs can be written, calvin.replay's
// files are there, whole, and of this configuration.
Result<void> preflight_of(const txn::RegionQuery& q);

}  // namespace rdtx::cc::calvin::detail
