// The per-item statuses the toolkit's owner-side handlers reply with, and
// the encoding of a tuple span in a request. Internal to lib/txn/stages.
#pragma once

#include <cstdint>

namespace rdtx::txn::owner {

// ItemReply::status; negative values are errno codes (lookup failures).
enum Status : int32_t {
  kOk = 0,
  kConflict = 1,      // held by another: ItemReply::arg is the holder's value
  kDie = 2,           // WAITDIE: younger than the holder
  kNotAttempted = 3,  // an earlier item of the request stopped it
  kNotHeld = 4,       // commit/release: the lock word does not hold the value
  kFenced = 5,        // the attempt was cancelled here: nothing done
  kRefused = 6,       // the protocol's lock check refused: ItemReply::arg is what it saw
};

// A span request word: offset in the low 32 bits, length in the high.
inline constexpr uint64_t span_word(uint32_t offset, uint32_t length) {
  return uint64_t{offset} | (uint64_t{length} << 32);
}

}  // namespace rdtx::txn::owner
