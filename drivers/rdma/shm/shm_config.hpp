// Parsed devargs of the shm driver:
//   shm[,latency_ns=N][,bw_gbps=X][,mtu=B]
//      [,read_order=ascending|descending|random][,write_order=ascending|random]
//      [,ud_drop=P][,ud_dup=P][,ud_delay=P][,ud_delay_ns=N][,seed=S]
//      [,pause_node=N,pause_at_ms=T,pause_ms=D][,rc_stall=P][,stall_ms=N]
//      [,nic=edr|fdr][,nic_mops=X][,doorbell_ns=N][,link_gbps=X][,atomic_mops=X]
//      [,atomics=cpu|hca]
// The read_order ... pause lines make the software NIC adversarial where a
// real one may be (doc/drivers.md, "Adversarial modes"): word order inside a
// READ or WRITE, loss, duplication and reordering of datagrams, a stopped
// node; so does atomics=hca: remote atomics that are not atomic with respect
// to CPU atomics (hca_atomics.hpp).
// Thread-safety: a plain value type.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/result.hpp"
#include "nic_model.hpp"

namespace rdtx::rdma::shm {

// The order in which a READ or WRITE moves the payload's aligned 8-byte words.
enum class WordOrder : uint8_t { kAscending, kDescending, kRandom };
const char* to_string(WordOrder o);

// What remote CAS and FAA are atomic with respect to. kCpu: CPU atomics on
// the same word too (both are CPU atomics; IBV_ATOMIC_GLOB). kHca: only the
// other remote atomics on that node (IBV_ATOMIC_HCA, most RNICs): a read,
// then a write, serialised against other NIC atomics alone
// (hca_atomics.hpp).
enum class AtomicsMode : uint8_t { kCpu, kHca };
const char* to_string(AtomicsMode m);

struct ShmConfig {
  uint64_t latency_ns = 0;  // one-way delay
  double bw_gbps = 0;       // 0: infinite
  uint32_t mtu = 4096;      // UD message size limit

  WordOrder read_order = WordOrder::kAscending;
  WordOrder write_order = WordOrder::kAscending;  // never kDescending

  // Datagram faults, each drawn independently per SEND (probabilities).
  double ud_drop = 0;
  double ud_dup = 0;
  double ud_delay = 0;
  uint64_t ud_delay_ns = kDefaultUdDelayNs;
  static constexpr uint64_t kDefaultUdDelayNs = 100'000;

  // A stalling NIC (as Soft-RoCE's lost retransmission): each RC request
  // is, with probability rc_stall, never executed nor completed, and its QP's
  // later requests wait behind it; after stall_ms the driver's watchdog
  // moves the QP to the error state (its requests complete kFlushed), as
  // the verbs driver does (DeviceCaps::stall_ns).
  double rc_stall = 0;
  uint64_t stall_ms = kDefaultStallMs;
  static constexpr uint64_t kDefaultStallMs = 100;
  static constexpr uint64_t kMaxStallMs = 60'000;

  // Seed of every random choice above; drawn at open (and logged) if absent.
  uint64_t seed = 0;
  bool seed_given = false;

  // The node that stops for [pause_at_ms, pause_at_ms + pause_ms) after its
  // device was opened; no pause unless has_pause.
  bool has_pause = false;
  uint32_t pause_node = 0;
  uint64_t pause_at_ms = 0;
  uint64_t pause_ms = 0;

  // The RNIC model (nic_model.hpp): a named calibration (nic=, "" for none)
  // and the values in force (the calibration's, each overridden by its
  // explicit key).
  std::string nic_name;
  NicParams nic;

  AtomicsMode atomics = AtomicsMode::kCpu;

  bool random_order() const { return read_order == WordOrder::kRandom || write_order == WordOrder::kRandom; }
  bool ud_faults() const { return ud_drop > 0 || ud_dup > 0 || ud_delay > 0; }
  bool needs_seed() const { return random_order() || ud_faults() || rc_stall > 0; }

  // Errors name the devargs and the offending key or value.
  static Result<ShmConfig> parse(std::string_view devargs);
};

// The one-line devargs summary shown by the driver registry.
inline constexpr const char* kShmDevargsHelp =
    "shm[,latency_ns=N][,bw_gbps=X][,mtu=B][,read_order=ascending|descending|random][,write_order=ascending|random]"
    "[,ud_drop=P][,ud_dup=P][,ud_delay=P][,ud_delay_ns=N][,seed=S][,pause_node=N,pause_at_ms=T,pause_ms=D]"
    "[,rc_stall=P][,stall_ms=N]"
    "[,nic=edr|fdr][,nic_mops=X][,doorbell_ns=N][,link_gbps=X][,atomic_mops=X][,atomics=cpu|hca]: "
    "software RNIC over shared memory; one-way latency in ns (default 0), per-QP bandwidth in Gbit/s (default 0 = "
    "infinite), UD message size limit in bytes (default 4096); adversarial modes: word order of READ/WRITE "
    "payloads, datagram loss/duplication/delay probabilities, seed, a node that stops for a while, and RC "
    "requests that stall their QP with probability P until a watchdog fails it after N ms (default 100) "
    "; an RNIC model shared by a node's QPs: message rate (M/s), doorbell cost per post_send, link bandwidth per "
    "node and direction, atomics (M/s), from a named calibration and/or explicit keys; remote CAS/FAA atomic with "
    "respect to CPU atomics (cpu, default) or only to other remote atomics, as IBV_ATOMIC_HCA NICs (hca) "
    "(doc/drivers.md)";

}  // namespace rdtx::rdma::shm
