#include "history/names.hpp"

#include <cstring>

namespace rdtx::history {

namespace {

const char* const kListNames[] = {"table", "type", "abort reason"};

std::string name_or_number(const std::vector<std::string>& names, uint64_t id, const char* what) {
  if (id < names.size()) return names[id];
  return what + std::to_string(id);
}

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  uint8_t b[4];
  std::memcpy(b, &v, 4);
  out.insert(out.end(), b, b + 4);
}

}  // namespace

std::string NameTables::table(uint32_t id) const { return name_or_number(tables, id, "table"); }
std::string NameTables::type(uint16_t id) const { return name_or_number(types, id, "type"); }
std::string NameTables::abort_reason(uint16_t id) const { return name_or_number(abort_reasons, id, "reason"); }

Result<void> NameTables::validate() const {
  const std::vector<std::string>* lists[] = {&tables, &types, &abort_reasons};
  for (int l = 0; l < 3; ++l) {
    if (lists[l]->size() > kMaxNames)
      return make_error(EINVAL, "%zu %s names, at most %zu", lists[l]->size(), kListNames[l], kMaxNames);
    for (size_t i = 0; i < lists[l]->size(); ++i)
      if ((*lists[l])[i].size() > kMaxNameBytes)
        return make_error(EINVAL, "%s name %zu is %zu bytes long, at most %zu", kListNames[l], i, (*lists[l])[i].size(),
                          kMaxNameBytes);
  }
  return {};
}

std::vector<uint8_t> NameTables::encode() const {
  std::vector<uint8_t> out;
  for (const auto* list : {&tables, &types, &abort_reasons}) {
    put_u32(out, static_cast<uint32_t>(list->size()));
    for (const std::string& s : *list) {
      put_u32(out, static_cast<uint32_t>(s.size()));
      out.insert(out.end(), s.begin(), s.end());
    }
  }
  out.resize((out.size() + 7) & ~size_t{7}, 0);
  return out;
}

Result<NameTables> NameTables::decode(std::span<const uint8_t> bytes) {
  NameTables t;
  std::vector<std::string>* lists[] = {&t.tables, &t.types, &t.abort_reasons};
  size_t pos = 0;
  auto get_u32 = [&](uint32_t& v) {
    if (bytes.size() - pos < 4) return false;
    std::memcpy(&v, bytes.data() + pos, 4);
    pos += 4;
    return true;
  };
  for (int l = 0; l < 3; ++l) {
    uint32_t count = 0;
    if (!get_u32(count))
      return make_error(EBADMSG, "the count of %s names runs past the end of the names section", kListNames[l]);
    if (count > kMaxNames) return make_error(EBADMSG, "%u %s names, at most %zu", count, kListNames[l], kMaxNames);
    lists[l]->reserve(count);
    for (uint32_t i = 0; i < count; ++i) {
      uint32_t len = 0;
      if (!get_u32(len) || bytes.size() - pos < len)
        return make_error(EBADMSG, "%s name %u runs past the end of the names section", kListNames[l], i);
      if (len > kMaxNameBytes)
        return make_error(EBADMSG, "%s name %u is %u bytes long, at most %zu", kListNames[l], i, len, kMaxNameBytes);
      lists[l]->emplace_back(reinterpret_cast<const char*>(bytes.data() + pos), len);
      pos += len;
    }
  }
  return t;
}

}  // namespace rdtx::history
