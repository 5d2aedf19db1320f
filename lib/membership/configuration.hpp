// A cluster configuration as ZooKeeper holds it (FaRM's "configuration":
// its number, the members, the configuration manager and where every
// partition's primary and backups live) and its text form, the data of the
// `<root>/config` znode (doc/membership.md "Layout"):
//
//   rdtx-config 1
//   run <run id>
//   number <configuration number>
//   cm <node id>
//   member <node id> <endpoint>          one line per member, ids ascending
//   partition <p> <primary> [<backup>...] one line per partition, p = 0, 1, ...
//                                        (primary "-": lost, no live primary)
//
// Lines end with '\n'; fields are separated by one space. The run id and the
// endpoints are non-empty printable ASCII without spaces.
// Thread-safety: plain functions and value types.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/result.hpp"

namespace rdtx::membership {

inline constexpr const char* kConfigMagic = "rdtx-config";
inline constexpr uint32_t kConfigFormat = 1;

// A partition without a live primary: its primary left the configuration
// and no backup has taken its place (recovery, issue 48).
inline constexpr uint32_t kNoPrimary = UINT32_MAX;

struct Placement {
  uint32_t primary = 0;  // kNoPrimary: lost
  std::vector<uint32_t> backups;  // in the order in which they take over
  bool operator==(const Placement&) const = default;
};

struct Configuration {
  std::string run_id;                       // the run this configuration belongs to
  uint64_t number = 0;                      // 1 for the first; each change adds one
  uint32_t cm = 0;                          // the configuration manager's node id
  std::map<uint32_t, std::string> members;  // node id -> endpoint (host:port)
  std::vector<Placement> partitions;        // partition p's primary and backups
  bool operator==(const Configuration&) const = default;
};

// Configuration c + 1 without `gone`: the same CM (unless gone), the other
// members, every partition with `gone` dropped from its backups, and a
// partition whose primary is gone without one (kNoPrimary; a backup taking
// over is recovery, issue 48). EINVAL when the CM would be gone or nothing
// changes.
Result<Configuration> without(const Configuration& c, const std::vector<uint32_t>& gone);

// The partitions without a live primary, ascending.
std::vector<uint32_t> lost_partitions(const Configuration& c);

// EINVAL naming the field if the configuration cannot be encoded or is not
// self-consistent: an empty run id or endpoint, or one with a space or a
// non-printable character, number 0, a CM or a primary/backup that is not a
// member, a partition whose primary is also one of its backups, or a node
// twice among a partition's backups.
Result<void> validate(const Configuration& c);

// The text form above. Callers validate() first; encode() does not check.
std::string encode(const Configuration& c);

// Parses the text form and validates it. EINVAL naming the line (1-based)
// and what is wrong: another magic (not an rdtx configuration), another
// format version, a missing or repeated field, a partition out of order.
Result<Configuration> decode(const std::string& text);

// The first difference between two configurations, worded for an error
// message ("member 2 is 10.0.0.3:7000 in A, 10.0.0.4:7000 in B"), with `a`
// and `b` naming the two sides; "" if they are equal.
std::string first_difference(const Configuration& a, const Configuration& b, const std::string& a_name,
                             const std::string& b_name);

}  // namespace rdtx::membership
