#include "history/format.hpp"

#include "history/checksum.hpp"

namespace rdtx::history {

const char* to_string(Op op) {
  switch (op) {
    case Op::kRead:
      return "read";
    case Op::kWrite:
      return "write";
    case Op::kInsert:
      return "insert";
    case Op::kDelete:
      return "delete";
  }
  return "?";
}

uint32_t header_checksum(FileHeader h) {
  h.header_crc = 0;
  return crc32c_extend(0, &h, sizeof h);
}

}  // namespace rdtx::history
