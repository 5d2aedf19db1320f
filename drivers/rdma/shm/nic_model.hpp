// The shm driver's RNIC model (devargs nic=, nic_mops=, doorbell_ns=,
// link_gbps=, atomic_mops=; doc/drivers.md "RNIC model"): the limits a real
// NIC puts on a node, shared by every QP, thread and process of that node.
//
//   message rate   every work request occupies the poster's NIC for
//                  1 / nic_mops us (READ, WRITE, CAS, FAA, SEND alike);
//   doorbell       every post_send() call burns doorbell_ns of the poster's
//                  CPU (the MMIO that rings the doorbell), once per batch;
//   link           payload bytes occupy the sender's egress and the
//                  receiver's ingress for bytes * 8 / link_gbps ns each
//                  (READ: the response flows from the target to the reader);
//   atomics        a CAS or FAA occupies the target NIC's atomic unit for
//                  1 / atomic_mops us.
//
// Each resource is a FIFO server whose state is one word, the time (TSC
// ticks, in fixed point: kFrac fractional bits) at which it is next free,
// kept in the node's NIC file (NicShared, /dev/shm/rdtx.<fabric>.n<N>.nic,
// mapped read-write by the owner and by every peer). A request reserves a
// resource with one CAS loop (reserve()): start = max(ready, free), free =
// start + cost. No locks; lock-free across processes.
//
// The arithmetic (reserve(), the costs) takes the time as an argument, so
// tests drive it with a fake clock. Disabled (no key given), nothing of it
// runs: the QP's untimed path never reads the clock or the NIC file.
// Thread-safety: NicModel is immutable after construction; NicShared's
// words are only accessed atomically.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace rdtx::rdma::shm {

// The values of one NIC (0: that limit is off).
struct NicParams {
  double msg_mops = 0;     // work requests per microsecond (M/s) per NIC
  uint64_t doorbell_ns = 0;
  double link_gbps = 0;    // per node and direction
  double atomic_mops = 0;  // CAS/FAA per microsecond per NIC
  bool any() const { return msg_mops > 0 || doorbell_ns > 0 || link_gbps > 0 || atomic_mops > 0; }
};

// One NIC's shared state: a cache line per resource.
struct NicShared {
  static constexpr uint64_t kMagic = 0x31'43'49'4e'58'54'44'52;  // "RDTXNIC1"
  alignas(64) uint64_t magic;
  alignas(64) uint64_t msg_free;
  alignas(64) uint64_t egress_free;
  alignas(64) uint64_t ingress_free;
  alignas(64) uint64_t atomic_free;
};

class NicModel {
 public:
  // Fixed point: free-times and costs in 1/64 TSC tick, so that a cost of
  // 75.7 ticks (33 M msg/s at 2.5 GHz) does not round to 76 on every
  // message. 2^64 / 64 ticks at 4 GHz: over 2 years of uptime.
  static constexpr int kFrac = 6;

  NicModel() = default;
  NicModel(const NicParams& p, uint64_t tsc_hz);

  bool enabled() const { return enabled_; }
  uint64_t doorbell_ticks() const { return doorbell_ticks_; }
  bool limits_messages() const { return msg_cost_ != 0; }
  bool limits_link() const { return link_sub_per_byte_ != 0; }
  bool limits_atomics() const { return atomic_cost_ != 0; }

  // Costs, in fixed-point ticks.
  uint64_t msg_cost() const { return msg_cost_; }
  uint64_t atomic_cost() const { return atomic_cost_; }
  uint64_t link_cost(uint64_t bytes) const { return bytes * link_sub_per_byte_ >> kLinkShift; }

  static uint64_t to_fixed(uint64_t ticks) { return ticks << kFrac; }
  // Rounded up: a request is not done before its last fraction of a tick.
  static uint64_t to_ticks(uint64_t fixed) { return (fixed + (uint64_t{1} << kFrac) - 1) >> kFrac; }

  // Reserves `cost` of the FIFO server whose next-free time is `*free`, no
  // earlier than `ready`; returns the start (all fixed point). cost 0:
  // returns `ready` without touching `*free`.
  static uint64_t reserve(uint64_t* free, uint64_t ready, uint64_t cost) {
    if (cost == 0) return ready;
    std::atomic_ref<uint64_t> word(*free);
    uint64_t cur = word.load(std::memory_order_relaxed);
    for (;;) {
      const uint64_t start = cur > ready ? cur : ready;
      if (word.compare_exchange_weak(cur, start + cost, std::memory_order_relaxed)) return start;
    }
  }

 private:
  // link_sub_per_byte_ carries kLinkShift more fractional bits, so that
  // 64 bytes at 100 Gb/s (5.12 ns) is not rounded per byte.
  static constexpr int kLinkShift = 16;
  bool enabled_ = false;
  uint64_t doorbell_ticks_ = 0;
  uint64_t msg_cost_ = 0;
  uint64_t atomic_cost_ = 0;
  uint64_t link_sub_per_byte_ = 0;
};

inline NicModel::NicModel(const NicParams& p, uint64_t tsc_hz)
    : enabled_(p.any()),
      doorbell_ticks_(static_cast<uint64_t>(static_cast<double>(p.doorbell_ns) * static_cast<double>(tsc_hz) / 1e9)),
      // ticks per op = hz / (mops * 1e6)
      msg_cost_(p.msg_mops > 0 ? static_cast<uint64_t>(static_cast<double>(tsc_hz) / (p.msg_mops * 1e6) *
                                                       static_cast<double>(1u << kFrac))
                               : 0),
      atomic_cost_(p.atomic_mops > 0 ? static_cast<uint64_t>(static_cast<double>(tsc_hz) / (p.atomic_mops * 1e6) *
                                                             static_cast<double>(1u << kFrac))
                                     : 0),
      // ticks per byte = hz * 8 / (gbps * 1e9)
      link_sub_per_byte_(p.link_gbps > 0
                             ? static_cast<uint64_t>(static_cast<double>(tsc_hz) * 8.0 / (p.link_gbps * 1e9) *
                                                     static_cast<double>(uint64_t{1} << (kFrac + kLinkShift)))
                             : 0) {}

// When one work request takes effect and completes under the NIC model,
// in TSC ticks. `ready`: when the QP may start it (its post time, or when
// the QP's own wire, bw_gbps, is free: per-QP order); `wire_done`: when the
// QP's wire has sent it; `one_way`: the latency model's one-way delay.
// `local`: the poster's NIC; `remote`: the target's (RC) or receiver's (UD).
struct NicTimes {
  uint64_t effect;   // READ/WRITE/atomic: applied at the target; SEND: -
  uint64_t visible;  // the sender's completion
  uint64_t arrival;  // SEND: when the receiver may see it
};
enum class NicOp : uint8_t { kRead, kWrite, kAtomic, kSend };

inline NicTimes nic_schedule(const NicModel& m, NicOp op, uint64_t bytes, uint64_t ready, uint64_t wire_done,
                             uint64_t one_way, NicShared* local, NicShared* remote) {
  using M = NicModel;
  const uint64_t ow = M::to_fixed(one_way);
  // The poster's NIC processes the work request (message rate).
  const uint64_t issued = M::reserve(&local->msg_free, M::to_fixed(ready), m.msg_cost()) + m.msg_cost();
  const uint64_t sent = std::max(issued, M::to_fixed(wire_done));
  NicTimes t{};
  switch (op) {
    case NicOp::kWrite:
    case NicOp::kSend: {
      // The payload leaves through the poster's egress and enters through
      // the target's ingress one one-way delay later.
      const uint64_t x = m.link_cost(bytes);
      const uint64_t out = M::reserve(&local->egress_free, sent, x) + x;
      const uint64_t in = M::reserve(&remote->ingress_free, sent + ow, x) + x;
      const uint64_t arrival = std::max(out + ow, in);
      t.arrival = M::to_ticks(arrival);
      t.effect = t.arrival;
      t.visible = op == NicOp::kSend ? M::to_ticks(out) : M::to_ticks(arrival + ow);
      break;
    }
    case NicOp::kRead: {
      // The request is small; the response leaves the target's egress and
      // enters the reader's ingress.
      const uint64_t at_target = sent + ow;
      const uint64_t x = m.link_cost(bytes);
      const uint64_t out = M::reserve(&remote->egress_free, at_target, x) + x;
      const uint64_t in = M::reserve(&local->ingress_free, at_target + ow, x) + x;
      t.effect = M::to_ticks(at_target);
      t.arrival = t.effect;
      t.visible = M::to_ticks(std::max(out + ow, in));
      break;
    }
    case NicOp::kAtomic: {
      // The target NIC's atomic unit runs one CAS/FAA at a time.
      const uint64_t at_target = sent + ow;
      const uint64_t done = M::reserve(&remote->atomic_free, at_target, m.atomic_cost()) + m.atomic_cost();
      t.effect = M::to_ticks(done);
      t.arrival = M::to_ticks(at_target);
      t.visible = M::to_ticks(done + ow);
      break;
    }
  }
  return t;
}

}  // namespace rdtx::rdma::shm
