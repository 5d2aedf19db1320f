// The log tag of lib/store ("rdtx.store"); see env/log.hpp.
// Thread-safety: registered once on first use (a function-local static).
#pragma once

#include "env/log.hpp"

namespace rdtx::store {

inline const env::LogType& store_log() {
  static const env::LogType type("rdtx.store");
  return type;
}

}  // namespace rdtx::store
