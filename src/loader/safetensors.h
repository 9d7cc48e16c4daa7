#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/dtype.h"
#include "core/mapped_file.h"
#include "core/shape.h"
#include "core/tensor_view.h"

namespace di {

// One entry of a safetensors header.
struct TensorInfo {
  std::string name;
  DType dtype = DType::kU8;
  Shape shape;
  uint64_t begin = 0;  // byte offset relative to the start of the data section
  uint64_t end = 0;    // one past the last byte, relative to the data section
  uint64_t nbytes() const { return end - begin; }
};

struct SafetensorsHeader {
  uint64_t header_len = 0;          // the 8-byte little-endian length prefix
  uint64_t data_offset = 0;         // 8 + header_len: absolute file offset of the data section
  std::vector<TensorInfo> tensors;  // sorted by begin offset
  std::map<std::string, std::string> metadata;  // "__metadata__" (string -> string)
};

// Upper bound accepted for the JSON header (the HF library uses 100 MB).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

// Parses and strictly validates a safetensors file image (`file` = all bytes of the file).
// Checks: length prefix present and within bounds, header is a JSON object, every entry has a
// known dtype tag, a shape of non-negative integers and data_offsets [begin, end] inside the
// data section with end - begin == numel * dtype size, no name listed twice, entries sorted by
// offset with no overlaps or holes covering the whole data section, metadata values are strings.
// Throws di::Error whose message starts with `file_label` and names the offending tensor/field.
SafetensorsHeader parse_safetensors(std::span<const std::byte> file, std::string_view file_label);

// A memory-mapped safetensors file with its parsed header; views are zero-copy into the map.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);  // throws di::Error naming the file

  const std::string& path() const { return file_.path(); }
  const SafetensorsHeader& header() const { return header_; }
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  // nullptr when absent.
  const TensorInfo* find(std::string_view name) const;
  // Throws di::Error naming file and tensor when absent.
  ConstTensorView view(std::string_view name) const;
  ConstTensorView view(const TensorInfo& info) const;
  size_t file_size() const { return file_.size(); }
  // All bytes of the mapped file (header included); CheckpointTensor offsets index into it.
  std::span<const std::byte> bytes() const { return file_.bytes(); }
  const MappedFile& mapping() const { return file_; }

 private:
  MappedFile file_;
  SafetensorsHeader header_;
  std::map<std::string, size_t, std::less<>> by_name_;
};

}  // namespace di
