// libFuzzer target for the untrusted-input parsers of the loader: safetensors headers and
// model.safetensors.index.json. Bad input must end in di::Error; any other exception, a crash,
// a sanitizer report or a violated postcondition of an accepted input is a bug.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>

#include "common/error.h"
#include "loader/safetensors.h"
#include "loader/shard_index.h"

namespace {

void require(bool ok) {
  if (!ok) std::abort();
}

// What parse_safetensors promises for an accepted file.
void check_header(const di::SafetensorsHeader& h, size_t file_size) {
  require(h.header_len > 0 && h.header_len <= di::kMaxSafetensorsHeaderBytes);
  require(h.data_offset == 8 + h.header_len && h.data_offset <= file_size);
  uint64_t covered = 0;
  for (const di::TensorInfo& t : h.tensors) {
    require(t.begin == covered && t.begin <= t.end);
    require(t.shape.numel() >= 0);
    require(t.nbytes() == static_cast<uint64_t>(t.shape.numel()) * di::dtype_size(t.dtype));
    covered = t.end;
  }
  require(covered == file_size - h.data_offset);
}

void check_index(const di::ShardIndex& idx) {
  require(!idx.weight_map.empty() && !idx.shard_files.empty());
  for (const auto& [name, file] : idx.weight_map) {
    require(!name.empty());
    require(file.find('/') == std::string::npos && file.find("..") == std::string::npos);
    require(std::string_view(file).ends_with(".safetensors"));
    require(std::binary_search(idx.shard_files.begin(), idx.shard_files.end(), file));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    check_header(di::parse_safetensors(bytes, "fuzz.safetensors"), size);
  } catch (const di::Error&) {
  }
  // Selector: an index file starts with '{' (a safetensors file rarely does: that would be a
  // header length with 0x7B as its low byte), so those inputs also go to the index parser.
  if (size > 0 && data[0] == '{') {
    try {
      check_index(di::parse_shard_index(std::string_view(reinterpret_cast<const char*>(data), size),
                                        "fuzz.index.json"));
    } catch (const di::Error&) {
    }
  }
  return 0;
}
