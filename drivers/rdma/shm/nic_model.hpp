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
// Each resource is a calendar of FIFO servers (NicCalendar): time is cut
// into slots (a power of two of fixed-point ticks: TSC ticks in fixed
// point, kFrac fractional bits; the largest at most 128 ns or four
// requests' cost, whichever is longer), and each slot serves requests first
// come, first served from where its last one ended, up to its width; what
// does not fit goes on in the next slots. A request starts in the slot of
// the time it is ready, no earlier than that time. So requests posted in
// time order are served exactly as by one FIFO server, and a request
// stamped earlier than others already reserved (in virtual time a worker
// whose pass computed for 60 us posts 60 us "ahead" of the others; in real
// time a thread may be preempted between reading the clock and reserving)
// still finds the capacity of its own time instead of queueing behind the
// future. One word a slot, (slot number, fill), reserved with a CAS loop:
// no locks, lock-free across processes. The slots are a ring covering 1-2
// ms, or 32,768-65,536 requests' cost if longer; a request older than the
// ring (its slot already reused for a later time) is served at once,
// unaccounted, and so is what would queue past the ring. Each calendar
// counts both (NicCalendar::stale, ::overflow). An overflow means the
// model's figures are wrong, and rdtx-bench fails the run (its check "NIC
// model unaccounted"); so does a stale request in virtual time, where it
// takes a backlog as long as the ring. In real time a stale request is a
// poster that lost its CPU for longer than the ring between reading the
// clock and reserving (an overloaded machine): reported, not failed.
//
// The calendars live in the node's NIC file (NicShared,
// /dev/shm/rdtx.<fabric>.n<N>.nic, mapped read-write by the owner and by
// every peer). The arithmetic (reserve(), the costs) takes the time as an
// argument, so tests drive it with a fake clock. Disabled (no key given),
// nothing of it runs: the QP's untimed path never reads the clock or the
// NIC file.
// Thread-safety: NicModel is immutable after construction; NicShared's
// words are only accessed atomically.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <initializer_list>

namespace rdtx::rdma::shm {

// The values of one NIC (0: that limit is off).
struct NicParams {
  double msg_mops = 0;     // work requests per microsecond (M/s) per NIC
  uint64_t doorbell_ns = 0;
  double link_gbps = 0;    // per node and direction
  double atomic_mops = 0;  // CAS/FAA per microsecond per NIC
  bool any() const { return msg_mops > 0 || doorbell_ns > 0 || link_gbps > 0 || atomic_mops > 0; }
};

// One resource of a NIC: kSlots slots, each one word, the slot's number
// (modulo 2^40: 19 hours of 128 ns slots either way) above where its
// reservations end, in fixed-point ticks from its start (kFillBits). A
// word 0 is a slot never used; a slot whose number is not the one asked for
// holds an earlier lap of the ring (free) or a later one (the request is
// older than the ring).
struct NicCalendar {
  static constexpr uint32_t kSlots = 16384;
  static constexpr int kFillBits = 24;
  static constexpr uint64_t kFillMask = (uint64_t{1} << kFillBits) - 1;
  static constexpr uint64_t kTagMask = (uint64_t{1} << (64 - kFillBits)) - 1;
  uint64_t slot[kSlots];
  // Requests served unaccounted: older than the ring, and queued past it.
  alignas(64) uint64_t stale;
  uint64_t overflow;
};

// One NIC's shared state: a calendar per resource.
struct NicShared {
  static constexpr uint64_t kMagic = 0x33'43'49'4e'58'54'44'52;  // "RDTXNIC3"
  alignas(64) uint64_t magic;
  alignas(64) NicCalendar msg;
  alignas(64) NicCalendar egress;
  alignas(64) NicCalendar ingress;
  alignas(64) NicCalendar atomic;
  // What the four calendars served unaccounted, so far: older than their
  // ring, and queued past it.
  uint64_t stale() const { return sum(&NicCalendar::stale); }
  uint64_t overflow() const { return sum(&NicCalendar::overflow); }
  uint64_t sum(uint64_t NicCalendar::*counter) const {
    uint64_t n = 0;
    for (const NicCalendar* c : {&msg, &egress, &ingress, &atomic})
      n += std::atomic_ref<const uint64_t>(c->*counter).load(std::memory_order_relaxed);
    return n;
  }
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

  // The slot widths (log2 of fixed-point ticks) of the message, atomic and
  // link calendars: the largest power of two at most 128 ns or 4 requests'
  // cost (a link's: of 512 bytes), whichever is longer.
  int msg_shift() const { return msg_shift_; }
  int atomic_shift() const { return atomic_shift_; }
  int link_shift() const { return link_shift_; }
  static int slot_shift(uint64_t tsc_hz, uint64_t cost) {
    const auto floor_ns = static_cast<uint64_t>(static_cast<double>(tsc_hz) * 128e-9 * (1u << kFrac));
    const int shift = static_cast<int>(std::bit_width(std::max<uint64_t>({floor_ns, 4 * cost, 2}))) - 1;
    return std::min(shift, NicCalendar::kFillBits - 1);
  }

  // Reserves `cost` (fixed point) of `cal`'s server from `ready` on (fixed
  // point); returns when the request is done (fixed point). cost 0:
  // returns `ready` without touching `cal`.
  static uint64_t reserve(NicCalendar* cal, int slot_shift, uint64_t ready, uint64_t cost) {
    using C = NicCalendar;
    if (cost == 0) return ready;
    const uint64_t width = uint64_t{1} << slot_shift;
    uint64_t index = ready >> slot_shift;
    uint64_t offset = ready & (width - 1);  // no earlier than `ready` in its own slot
    uint64_t remaining = cost;
    for (uint32_t n = 0; n < C::kSlots; ++n, ++index, offset = 0) {
      std::atomic_ref<uint64_t> word(cal->slot[index & (C::kSlots - 1)]);
      const uint64_t tag = index & C::kTagMask;
      uint64_t cur = word.load(std::memory_order_relaxed);
      for (;;) {
        const uint64_t held = cur >> C::kFillBits;
        uint64_t fill = 0;
        if (held == tag) fill = cur & C::kFillMask;
        else if (cur != 0 && ((tag - held) & C::kTagMask) > (C::kTagMask >> 1))
          return unaccounted(&cal->stale, ready + cost);  // older than the ring
        const uint64_t from = fill > offset ? fill : offset;
        if (from >= width) break;  // full: the next slot
        const uint64_t take = std::min(width - from, remaining);
        if (word.compare_exchange_weak(cur, tag << C::kFillBits | (from + take), std::memory_order_relaxed)) {
          remaining -= take;
          if (remaining == 0) return (index << slot_shift) + from + take;
          break;
        }
      }
    }
    return unaccounted(&cal->overflow, (index << slot_shift) + remaining);  // past the ring
  }

 private:
  static uint64_t unaccounted(uint64_t* counter, uint64_t done) {
    std::atomic_ref<uint64_t>(*counter).fetch_add(1, std::memory_order_relaxed);
    return done;
  }
  // link_sub_per_byte_ carries kLinkShift more fractional bits, so that
  // 64 bytes at 100 Gb/s (5.12 ns) is not rounded per byte.
  static constexpr int kLinkShift = 16;
  bool enabled_ = false;
  uint64_t doorbell_ticks_ = 0;
  uint64_t msg_cost_ = 0;
  uint64_t atomic_cost_ = 0;
  uint64_t link_sub_per_byte_ = 0;
  // After the costs they are computed from.
  int msg_shift_ = 0;
  int atomic_shift_ = 0;
  int link_shift_ = 0;
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
                             : 0),
      msg_shift_(slot_shift(tsc_hz, msg_cost_)),
      atomic_shift_(slot_shift(tsc_hz, atomic_cost_)),
      link_shift_(slot_shift(tsc_hz, link_cost(512))) {}

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
  const int k = m.link_shift();
  const uint64_t issued = M::reserve(&local->msg, m.msg_shift(), M::to_fixed(ready), m.msg_cost());
  const uint64_t sent = std::max(issued, M::to_fixed(wire_done));
  NicTimes t{};
  switch (op) {
    case NicOp::kWrite:
    case NicOp::kSend: {
      // The payload leaves through the poster's egress and enters through
      // the target's ingress one one-way delay later.
      const uint64_t x = m.link_cost(bytes);
      const uint64_t out = M::reserve(&local->egress, k, sent, x);
      const uint64_t in = M::reserve(&remote->ingress, k, sent + ow, x);
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
      const uint64_t out = M::reserve(&remote->egress, k, at_target, x);
      const uint64_t in = M::reserve(&local->ingress, k, at_target + ow, x);
      t.effect = M::to_ticks(at_target);
      t.arrival = t.effect;
      t.visible = M::to_ticks(std::max(out + ow, in));
      break;
    }
    case NicOp::kAtomic: {
      // The target NIC's atomic unit runs one CAS/FAA at a time.
      const uint64_t at_target = sent + ow;
      const uint64_t done = M::reserve(&remote->atomic, m.atomic_shift(), at_target, m.atomic_cost());
      t.effect = M::to_ticks(done);
      t.arrival = M::to_ticks(at_target);
      t.visible = M::to_ticks(done + ow);
      break;
    }
  }
  return t;
}

}  // namespace rdtx::rdma::shm
