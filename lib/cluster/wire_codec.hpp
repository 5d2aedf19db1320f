// The byte encoding of everything the processes of a multi-process run send
// each other over the bootstrap channel: the channel's own messages
// (bootstrap_wire.hpp) and what its users exchange through all_gather() and
// gather() (the runner's checks and results). One encoding, so that a field
// reads the same on every host:
//
//   integers            big-endian, of the type's width (signed: two's complement)
//   "word" structs      trivially copyable structs and arrays made only of
//                       64-bit integers (counters, histograms): each 8-byte word
//                       big-endian, in memory order
//   str16 / str32       u16 / u32 length, then the bytes
//   blob                u32 length, then the bytes
//   vectors             u32 element count, then each element as above
//
// WireReader checks bounds on every read: a read past the end yields zero (or
// an empty span) and makes ok() false for good, so a decoder reads a whole
// message and checks done() (everything read, nothing left over) once.
// Counts and lengths are checked against the bytes left before anything is
// allocated, so a malformed message cannot make the reader allocate more
// than the message's size.
//
// Thread-safety: plain values; one thread per instance.
#pragma once

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

namespace rdtx::cluster {

// An integer the codec writes at its own width.
template <typename T>
concept WireInteger = std::is_integral_v<T> && !std::is_same_v<T, bool>;

// A struct or array the codec writes as 64-bit words. The compiler checks
// size, alignment and the absence of padding; it cannot check that every
// field is 64 bits wide, which the encoding assumes (a pair of 32-bit fields
// would round-trip between hosts of one byte order only).
template <typename T>
concept WireWords = std::is_trivially_copyable_v<T> && !std::is_scalar_v<T> && sizeof(T) % 8 == 0 && alignof(T) == 8 &&
                    std::has_unique_object_representations_v<T>;

template <typename T>
concept WireValue = WireInteger<T> || WireWords<T>;

// The encoded size of one value of T.
template <WireValue T>
inline constexpr size_t kWireSize = sizeof(T);

class WireWriter {
 public:
  template <WireValue T>
  void put(const T& v) {
    if constexpr (WireInteger<T>) {
      using U = std::make_unsigned_t<T>;
      const U u = static_cast<U>(v);
      for (size_t i = sizeof(T); i-- > 0;) buf_.push_back(std::byte{static_cast<uint8_t>(u >> (8 * i) & 0xff)});
    } else {
      uint64_t w[sizeof(T) / 8];
      std::memcpy(w, &v, sizeof(T));
      for (uint64_t x : w) put(x);
    }
  }
  void u8(uint8_t v) { put(v); }
  void u16(uint16_t v) { put(v); }
  void u32(uint32_t v) { put(v); }
  void u64(uint64_t v) { put(v); }
  // Raw bytes, no length: the reader must know how many.
  void bytes(std::span<const std::byte> b) { buf_.insert(buf_.end(), b.begin(), b.end()); }
  void text(std::string_view s) { bytes(std::as_bytes(std::span(s.data(), s.size()))); }
  // Length-prefixed. The caller keeps s within the prefix's range (str16:
  // 65535 bytes); longer input is cut there rather than mis-framed.
  void str16(std::string_view s) {
    s = s.substr(0, UINT16_MAX);
    u16(static_cast<uint16_t>(s.size()));
    text(s);
  }
  void str32(std::string_view s) { blob(std::as_bytes(std::span(s.data(), s.size()))); }
  void blob(std::span<const std::byte> b) {
    b = b.first(std::min<size_t>(b.size(), UINT32_MAX));
    u32(static_cast<uint32_t>(b.size()));
    bytes(b);
  }
  template <WireValue T>
  void put_vector(const std::vector<T>& v) {
    const size_t n = std::min<size_t>(v.size(), UINT32_MAX);
    u32(static_cast<uint32_t>(n));
    for (size_t i = 0; i < n; ++i) put(v[i]);
  }

  size_t size() const { return buf_.size(); }
  std::span<const std::byte> view() const { return buf_; }
  std::vector<std::byte> take() { return std::move(buf_); }

 private:
  std::vector<std::byte> buf_;
};

class WireReader {
 public:
  explicit WireReader(std::span<const std::byte> b) : b_(b) {}

  // Reads into *v; false (and *v left as it was) after any short read.
  template <WireValue T>
  bool get(T* v) {
    if (!need(sizeof(T))) return false;
    if constexpr (WireInteger<T>) {
      *v = read_int<T>();
    } else {
      uint64_t w[sizeof(T) / 8];
      for (uint64_t& x : w) x = read_int<uint64_t>();
      std::memcpy(static_cast<void*>(v), w, sizeof(T));
    }
    return true;
  }
  template <WireValue T>
    requires(!std::is_array_v<T>)
  T get() {
    T v{};
    get(&v);
    return v;
  }
  uint8_t u8() { return get<uint8_t>(); }
  uint16_t u16() { return get<uint16_t>(); }
  uint32_t u32() { return get<uint32_t>(); }
  uint64_t u64() { return get<uint64_t>(); }
  std::span<const std::byte> bytes(size_t n) {
    if (!need(n)) return {};
    auto s = b_.subspan(off_, n);
    off_ += n;
    return s;
  }
  std::string_view text(size_t n) {
    auto s = bytes(n);
    return {reinterpret_cast<const char*>(s.data()), s.size()};
  }
  std::string_view str16() { return text(u16()); }
  std::string_view str32() { return text(u32()); }
  std::span<const std::byte> blob() { return bytes(u32()); }
  std::span<const std::byte> rest() { return bytes(remaining()); }
  // A vector of at most `max` elements; false (and ok() false) if the count
  // exceeds `max` or the bytes left.
  template <WireValue T>
  bool get_vector(std::vector<T>* v, size_t max = SIZE_MAX) {
    const uint32_t n = u32();
    if (!ok_ || n > max || n > remaining() / kWireSize<T>) {
      ok_ = false;
      return false;
    }
    v->resize(n);
    for (T& x : *v) get(&x);
    return ok_;
  }

  size_t remaining() const { return ok_ ? b_.size() - off_ : 0; }
  bool ok() const { return ok_; }
  // Everything read and nothing left over.
  bool done() const { return ok_ && off_ == b_.size(); }

 private:
  // The caller checked need(sizeof(T)).
  template <WireInteger T>
  T read_int() {
    using U = std::make_unsigned_t<T>;
    U u = 0;
    for (size_t i = 0; i < sizeof(T); ++i) u = static_cast<U>(u << 8 | std::to_integer<U>(b_[off_ + i]));
    off_ += sizeof(T);
    return static_cast<T>(u);
  }
  bool need(size_t n) {
    if (ok_ && b_.size() - off_ >= n) return true;
    ok_ = false;
    return false;
  }
  std::span<const std::byte> b_;
  size_t off_ = 0;
  bool ok_ = true;
};

}  // namespace rdtx::cluster
