// Internal to lib/cluster/bootstrap*: the bootstrap channel's messages —
// framing, message types, and the layout of each payload (doc/bootstrap.md,
// "Message format"). Encoding only: no sockets, no state, so every decoder
// here is testable on bytes alone. Decoders validate lengths and bounds and
// report a malformed message, never read past it.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cluster/bootstrap.hpp"
#include "cluster/wire_codec.hpp"

namespace rdtx::cluster::detail {

// Every message is a 16-byte header, then `length` payload bytes:
//   u32 magic "RDTB" | u16 version | u16 type | u32 sender node id | u32 length
constexpr uint32_t kMagic = 0x52445442;
constexpr uint16_t kVersion = 2;
constexpr size_t kHeaderBytes = 16;
// A connection that has not sent a valid hello is a stranger: its first
// message may not make node 0 allocate more than this.
constexpr uint32_t kMaxHelloBytes = 4096;
constexpr uint32_t kMaxPayload = 256u << 20;
constexpr size_t kMaxTextBytes = 1024;  // run ids and operation names
constexpr size_t kMaxAbortBytes = 64 * 1024;

enum MsgType : uint16_t {
  kHello = 1,      // joiner -> 0: see Hello
  kWelcome = 2,    // 0 -> joiner: u64 run token; every node has joined
  kAbort = 3,      // 0 -> joiner: u32 errno, then the error text; the run is over
  kContrib = 4,    // joiner -> 0: op header, then the contribution
  kResult = 5,     // 0 -> joiner: op header, then the result
  kHeartbeat = 6,  // both: u8 1 = monitoring, 0 = left the monitored phase
  kStop = 7,       // joiner -> 0: u32 signal number; a signal stopped the sender
};
constexpr uint16_t kLastType = kStop;

struct Frame {
  uint16_t type = 0;
  uint32_t from = 0;
  std::vector<std::byte> payload;
};

std::vector<std::byte> make_frame(uint16_t type, uint32_t from, std::span<const std::byte> payload);

// Takes the next frame from in[off..]: 1 with a frame (off advanced), 0 if
// more bytes are needed, -1 with `why` if the bytes are not a valid frame
// (bad magic, another version, an unknown type, a length above max_payload).
int take_frame(const std::vector<std::byte>& in, size_t& off, uint32_t max_payload, Frame& f, std::string& why);

// The hello a joiner sends node 0: u64 run token, then what the token is
// made of, so that node 0 can say how a stranger differs: u32 nodes, u64
// node-list fingerprint, u16 + bytes run id.
struct Hello {
  uint64_t token = 0;
  uint32_t nodes = 0;
  uint64_t fingerprint = 0;
  std::string run_id;
};
std::vector<std::byte> encode_hello(const Hello& h);
std::optional<Hello> decode_hello(std::span<const std::byte> payload);

// The welcome: u64 run token (node 0's; the joiner checks it is its own).
std::vector<std::byte> encode_welcome(uint64_t token);
std::optional<uint64_t> decode_welcome(std::span<const std::byte> payload);

// A stop notice: u32 signal number, 1..kMaxSignal.
constexpr int kMaxSignal = 64;
std::vector<std::byte> encode_stop(int signal);
std::optional<int> decode_stop(std::span<const std::byte> payload);
// "SIGTERM", "SIGINT", ...; "signal 40" for the others.
std::string signal_name(int signal);

// Abort: u32 errno, then the text (at most kMaxAbortBytes - 4 bytes).
std::vector<std::byte> encode_abort(const Error& e);
std::optional<Error> decode_abort(std::span<const std::byte> payload);

// FNV-1a over "<id>=<host>:<port>;" for every node in id order: nodes whose
// lists differ (a host, a port, the count) refuse each other.
uint64_t fingerprint(const std::vector<NodeAddress>& nodes);

// The run token: what the nodes of one run share before they meet — the
// protocol version, the node count, the node list and the run id — hashed
// (64-bit FNV-1a over "rdtx-run v<version> <nodes> <fingerprint, 16 hex
// digits> <run id>"). A hello with another token comes from a process of
// another run (or one started with other settings) and is refused. It tells
// runs apart; it does not authenticate anybody.
uint64_t run_token(uint32_t nodes, uint64_t fingerprint, std::string_view run_id);

// A collective's header: u64 sequence number | u8 kind | u16 + bytes name.
enum class OpKind : uint8_t { kAllGather = 1, kGather = 2, kBarrier = 3, kAgree = 4 };
const char* to_string(OpKind k);
// "barrier 'loaded'"; kind as it came off the wire (unknown kinds are named so).
std::string describe(uint8_t kind, std::string_view name);
std::vector<std::byte> op_header(OpKind kind, std::string_view what, uint64_t seq);

// A collective's message as op_header() wrote it, and its body (views into
// the payload it was parsed from).
struct OpMessage {
  uint64_t seq = 0;
  uint8_t kind = 0;
  std::string_view name;
  std::span<const std::byte> body;
  bool ok = false;  // well-formed
  bool is(uint64_t s, OpKind k, std::string_view what) const {
    return seq == s && kind == static_cast<uint8_t>(k) && name == what;
  }
};
OpMessage parse_op(std::span<const std::byte> payload);

// agree()'s contribution: u32 pair count, then per pair str32 key, str32 value.
using Config = std::vector<std::pair<std::string, std::string>>;
std::vector<std::byte> encode_config(const Config& config);
std::optional<Config> decode_config(std::span<const std::byte> b);

// all_gather()'s result: u32 node count, then per node a blob.
std::vector<std::byte> encode_blobs(const std::vector<std::vector<std::byte>>& blobs);
// nullopt unless it holds exactly `nodes` blobs and nothing else.
std::optional<std::vector<std::vector<std::byte>>> decode_blobs(std::span<const std::byte> b, uint32_t nodes);

}  // namespace rdtx::cluster::detail
