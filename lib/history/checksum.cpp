#include "history/checksum.hpp"

#include <isa-l/crc.h>

#include <algorithm>

namespace rdtx::history {

uint32_t crc32c_extend(uint32_t crc, const void* p, size_t n) {
  // ISA-L keeps the CRC register uninverted and takes an int length.
  constexpr size_t kPiece = size_t{1} << 30;
  unsigned int reg = ~crc;
  // ISA-L takes a non-const pointer but only reads through it.
  auto* b = static_cast<unsigned char*>(const_cast<void*>(p));
  while (n > 0) {
    const size_t k = std::min(n, kPiece);
    reg = crc32_iscsi(b, static_cast<int>(k), reg);
    b += k;
    n -= k;
  }
  return ~reg;
}

}  // namespace rdtx::history
