// The RPC wire format: one UD datagram carries one or more messages to one
// destination endpoint, so that requests, replies and passive acks bound for
// the same peer share a SEND (coalescing, and piggybacking of acks).
//
//   datagram: DatagramHeader, then `count` x (MsgHeader, payload padded to 8)
//
// Flow control (session credits, as FaSST and eRPC): a sender may have at
// most `credits` datagrams with messages outstanding to one peer; the peer
// returns credits in the `credits` field of any datagram it sends back, or
// in a datagram of no messages (count 0) that carries only that field.
//
// Everything that arrives is validated by parse_datagram() before use.
// Thread-safety: pure data and functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace rdtx::rpc {

inline constexpr uint16_t kMagic = 0x5254;  // "RT"
inline constexpr uint8_t kVersion = 5;

struct DatagramHeader {
  uint16_t magic;
  uint8_t version;
  uint8_t count;     // messages that follow; 0 only in a credit return alone
  uint16_t src;      // sender's endpoint id
  uint16_t credits;  // the destination's datagrams the sender has received
                     // (and reposted the buffer of) since it last said so
  uint32_t seq;      // the sender's datagram number to this destination (from 1):
                     // a copy of a datagram already received is dropped
  uint32_t config;   // the sender's configuration number when it posted it (0:
                     // no configurations); one older than the receiver's is
                     // dropped (doc/membership.md "Refusing the old configuration")
};
static_assert(sizeof(DatagramHeader) == 16);

enum class Kind : uint8_t {
  kRequest = 1,  // a reply is wanted and awaited
  kOneway = 2,   // no reply
  kPassive = 3,  // a reply (ack) is wanted but not awaited: it may ride on later traffic
  kReply = 4,
  kLazyRequest = 5,  // a reply is wanted and awaited, but not soon: it may ride on later traffic
};

// Status carried by a reply.
enum class WireStatus : uint8_t { kOk = 0, kNoHandler = 1 };

struct MsgHeader {
  Kind kind;
  uint8_t handler;
  WireStatus status;
  uint8_t reserved;
  uint32_t len;     // payload bytes
  uint64_t cookie;  // request: the caller's call id; reply: echoed
};
static_assert(sizeof(MsgHeader) == 16);

inline constexpr uint32_t pad8(uint32_t n) { return (n + 7u) & ~7u; }
inline constexpr uint32_t kDatagramOverhead = sizeof(DatagramHeader) + sizeof(MsgHeader);
// Endpoint ids fit DatagramHeader::src.
inline constexpr uint32_t kMaxEndpoints = 1u << 16;

// Why a datagram or message was rejected (counted per reason).
enum class Malformed : uint8_t {
  kShort,        // shorter than a header
  kMagic,        // wrong magic or version
  kSource,       // unknown or unconnected source endpoint
  kCount,        // zero messages and no credits, or more messages than fit
  kLength,       // payload runs past the datagram
  kKind,         // unknown message kind
  kHandler,      // request for a handler id that is out of range
  kCount_,       // number of reasons
};
const char* to_string(Malformed m);

}  // namespace rdtx::rpc
