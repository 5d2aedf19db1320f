// CRC32C (Castagnoli, the iSCSI CRC) of history files, computed with ISA-L
// (Debian's libisal, which libdpdk-dev already depends on): it picks the
// SSE4.2/PCLMUL/AVX-512 code path at run time, so checksumming a buffer
// costs far less than writing it.
// Thread-safety: a pure function.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rdtx::history {

// The CRC32C of the bytes that `crc` covers followed by p[0..n): start from
// 0 (the CRC of no bytes) and feed the data in pieces of any size. Standard
// CRC32C: crc32c_extend(0, "123456789", 9) == 0xe3069283.
uint32_t crc32c_extend(uint32_t crc, const void* p, size_t n);

}  // namespace rdtx::history
