#include "history/format.hpp"

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

}  // namespace rdtx::history
