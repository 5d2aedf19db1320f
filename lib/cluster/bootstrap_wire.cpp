#include "cluster/bootstrap_wire.hpp"

#include <signal.h>

#include <cstdio>

namespace rdtx::cluster::detail {

std::vector<std::byte> make_frame(uint16_t type, uint32_t from, std::span<const std::byte> payload) {
  WireWriter w;
  w.u32(kMagic);
  w.u16(kVersion);
  w.u16(type);
  w.u32(from);
  w.u32(static_cast<uint32_t>(payload.size()));
  w.bytes(payload);
  return w.take();
}

int take_frame(const std::vector<std::byte>& in, size_t& off, uint32_t max_payload, Frame& f, std::string& why) {
  std::span<const std::byte> avail(in.data() + off, in.size() - off);
  char buf[160];
  // The magic is checked as soon as it is there, so that a stranger sending
  // a few bytes of something else is dropped without waiting for a header.
  if (avail.size() >= 4) {
    uint32_t magic = WireReader(avail).u32();
    if (magic != kMagic) {
      std::snprintf(buf, sizeof buf, "bad magic 0x%08x (not an rdtx bootstrap peer)", magic);
      why = buf;
      return -1;
    }
  }
  if (avail.size() < kHeaderBytes) return 0;
  WireReader r(avail);
  r.u32();
  uint16_t version = r.u16();
  uint16_t type = r.u16();
  uint32_t from = r.u32();
  uint32_t len = r.u32();
  if (version != kVersion) {
    std::snprintf(buf, sizeof buf, "bootstrap protocol version %u, this node speaks version %u (mixed builds?)",
                  version, kVersion);
    why = buf;
    return -1;
  }
  if (type == 0 || type > kLastType) {
    std::snprintf(buf, sizeof buf, "unknown message type %u", type);
    why = buf;
    return -1;
  }
  if (len > max_payload) {
    std::snprintf(buf, sizeof buf, "a message of %u bytes, more than the limit of %u", len, max_payload);
    why = buf;
    return -1;
  }
  if (avail.size() - kHeaderBytes < len) return 0;
  f.type = type;
  f.from = from;
  f.payload.assign(avail.begin() + kHeaderBytes, avail.begin() + kHeaderBytes + len);
  off += kHeaderBytes + len;
  return 1;
}

std::vector<std::byte> encode_hello(const Hello& h) {
  WireWriter w;
  w.u64(h.token);
  w.u32(h.nodes);
  w.u64(h.fingerprint);
  w.str16(h.run_id);
  return w.take();
}

std::optional<Hello> decode_hello(std::span<const std::byte> payload) {
  WireReader r(payload);
  Hello h;
  h.token = r.u64();
  h.nodes = r.u32();
  h.fingerprint = r.u64();
  h.run_id = std::string(r.str16());
  if (!r.done()) return std::nullopt;
  return h;
}

std::vector<std::byte> encode_welcome(uint64_t token) {
  WireWriter w;
  w.u64(token);
  return w.take();
}

std::optional<uint64_t> decode_welcome(std::span<const std::byte> payload) {
  WireReader r(payload);
  const uint64_t token = r.u64();
  if (!r.done()) return std::nullopt;
  return token;
}

std::vector<std::byte> encode_stop(int signal) {
  WireWriter w;
  w.u32(static_cast<uint32_t>(signal));
  return w.take();
}

std::optional<int> decode_stop(std::span<const std::byte> payload) {
  WireReader r(payload);
  const uint32_t sig = r.u32();
  if (!r.done() || sig == 0 || sig > kMaxSignal) return std::nullopt;
  return static_cast<int>(sig);
}

std::string signal_name(int signal) {
  switch (signal) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGHUP:
      return "SIGHUP";
    case SIGQUIT:
      return "SIGQUIT";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGUSR2:
      return "SIGUSR2";
    default:
      return "signal " + std::to_string(signal);
  }
}

std::vector<std::byte> encode_abort(const Error& e) {
  WireWriter w;
  w.u32(static_cast<uint32_t>(e.code));
  w.text(std::string_view(e.message).substr(0, kMaxAbortBytes - 4));
  return w.take();
}

std::optional<Error> decode_abort(std::span<const std::byte> payload) {
  WireReader r(payload);
  const int code = static_cast<int>(r.u32());
  const auto text = r.rest();
  if (!r.ok() || text.size() > kMaxAbortBytes) return std::nullopt;
  return Error{code > 0 ? code : ECONNABORTED, std::string(reinterpret_cast<const char*>(text.data()), text.size())};
}

uint64_t fingerprint(const std::vector<NodeAddress>& nodes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const NodeAddress& a : nodes) {
    std::string s = std::to_string(a.id) + "=" + a.host + ":" + std::to_string(a.port) + ";";
    for (unsigned char c : s) {
      h ^= c;
      h *= 0x100000001b3ull;
    }
  }
  return h;
}

uint64_t run_token(uint32_t nodes, uint64_t fingerprint, std::string_view run_id) {
  char head[80];
  std::snprintf(head, sizeof head, "rdtx-run v%u %u %016llx ", kVersion, nodes,
                static_cast<unsigned long long>(fingerprint));
  uint64_t h = 0xcbf29ce484222325ull;
  for (std::string_view part : {std::string_view(head), run_id})
    for (unsigned char c : part) {
      h ^= c;
      h *= 0x100000001b3ull;
    }
  return h;
}

const char* to_string(OpKind k) {
  switch (k) {
    case OpKind::kAllGather:
      return "all_gather";
    case OpKind::kGather:
      return "gather";
    case OpKind::kBarrier:
      return "barrier";
    case OpKind::kAgree:
      return "agree";
  }
  return "unknown operation";
}

std::string describe(uint8_t kind, std::string_view name) {
  return std::string(to_string(static_cast<OpKind>(kind))) + " '" + std::string(name) + "'";
}

std::vector<std::byte> op_header(OpKind kind, std::string_view what, uint64_t seq) {
  WireWriter w;
  w.u64(seq);
  w.u8(static_cast<uint8_t>(kind));
  w.str16(what);
  return w.take();
}

OpMessage parse_op(std::span<const std::byte> payload) {
  WireReader r(payload);
  OpMessage m;
  m.seq = r.u64();
  m.kind = r.u8();
  m.name = r.str16();
  m.body = r.rest();
  m.ok = r.ok();
  return m;
}

std::vector<std::byte> encode_config(const Config& config) {
  WireWriter w;
  w.u32(static_cast<uint32_t>(config.size()));
  for (const auto& [k, v] : config) {
    w.str32(k);
    w.str32(v);
  }
  return w.take();
}

std::optional<Config> decode_config(std::span<const std::byte> b) {
  WireReader r(b);
  uint32_t count = r.u32();
  Config c;
  // Each pair takes at least 8 bytes: a count beyond that is malformed, and
  // must not make us reserve memory for it.
  if (count > r.remaining() / 8) return std::nullopt;
  for (uint32_t i = 0; i < count && r.ok(); ++i) {
    std::string k(r.str32());
    std::string v(r.str32());
    c.emplace_back(std::move(k), std::move(v));
  }
  if (!r.done()) return std::nullopt;
  return c;
}

std::vector<std::byte> encode_blobs(const std::vector<std::vector<std::byte>>& blobs) {
  WireWriter w;
  w.u32(static_cast<uint32_t>(blobs.size()));
  for (const auto& b : blobs) w.blob(b);
  return w.take();
}

std::optional<std::vector<std::vector<std::byte>>> decode_blobs(std::span<const std::byte> b, uint32_t nodes) {
  WireReader r(b);
  std::vector<std::vector<std::byte>> blobs;
  if (r.u32() != nodes) return std::nullopt;
  for (uint32_t i = 0; i < nodes && r.ok(); ++i) {
    auto blob = r.blob();
    blobs.emplace_back(blob.begin(), blob.end());
  }
  if (!r.done() || blobs.size() != nodes) return std::nullopt;
  return blobs;
}

}  // namespace rdtx::cluster::detail
