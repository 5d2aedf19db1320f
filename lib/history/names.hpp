// NameTables: the names of tables, transaction types and abort reasons that
// a history file carries so that reports read "checking[42]" and
// 'Amalgamate' rather than numbers. The ids in records are indexes into
// these tables; the reader rejects any id past the end of its table, so a
// recorder must name every table, type and reason it records.
//
// On disk (the names section): for tables, types, then abort reasons, a
// uint32 count followed by count entries of (uint32 length, length bytes),
// zero-padded to a multiple of 8 bytes.
// Thread-safety: plain value type.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/result.hpp"

namespace rdtx::history {

struct NameTables {
  static constexpr size_t kMaxNames = 65536;  // ids of types and reasons are 16 bits
  static constexpr size_t kMaxNameBytes = 256;

  std::vector<std::string> tables;
  std::vector<std::string> types;
  std::vector<std::string> abort_reasons;

  friend bool operator==(const NameTables&, const NameTables&) = default;

  // "checking", or "table7" when the id has no name.
  std::string table(uint32_t id) const;
  std::string type(uint16_t id) const;
  std::string abort_reason(uint16_t id) const;

  // Checks the limits above (count, length); the message names the entry.
  Result<void> validate() const;
  // The names section, zero-padded to a multiple of 8 bytes.
  std::vector<uint8_t> encode() const;
  // Parses a names section; every count and length is checked against the
  // bytes given. The error message says what is wrong ("type name 3 runs
  // past the end of the names section").
  static Result<NameTables> decode(std::span<const uint8_t> bytes);
};

}  // namespace rdtx::history
