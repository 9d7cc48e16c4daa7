#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "core/shape.h"

namespace di {

// A tensor to be written: name, dtype, shape. Payload bytes are produced later, in order.
struct TensorSpec {
  std::string name;
  DType dtype = DType::kU8;
  Shape shape;
  uint64_t nbytes() const { return static_cast<uint64_t>(shape.numel()) * dtype_size(dtype); }
};

// Streaming safetensors writer: the header (all specs, offsets assigned in the given order,
// padded with spaces to a multiple of 8 bytes like the HF writer) is written at construction;
// then the payload of each tensor is appended, in order, in chunks of any size. Memory use is
// independent of the tensor sizes. finish() checks that every byte was written and closes.
// All failures throw di::Error naming the file (and tensor).
class SafetensorsWriter {
 public:
  SafetensorsWriter(const std::string& path, std::vector<TensorSpec> specs,
                    const std::map<std::string, std::string>& metadata = {{"format", "pt"}});
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // Index of the tensor whose bytes are expected next; specs().size() when all are complete.
  size_t current() const { return current_; }
  const std::vector<TensorSpec>& specs() const { return specs_; }
  // Appends bytes to the current tensor; a chunk may not cross into the next tensor.
  void write(std::span<const std::byte> chunk);
  // Leaves the rest of the current tensor as a hole (zero bytes, sparse on disk when the file
  // system supports it). Used for huge synthetic tables.
  void skip_rest_of_current();
  void finish();
  uint64_t file_size() const { return data_offset_ + data_size_; }

 private:
  void advance_if_complete();
  std::string path_;
  std::FILE* f_ = nullptr;
  std::vector<char> buffer_;  // setvbuf buffer of f_ (glibc ignores the size of its own)
  std::vector<TensorSpec> specs_;
  std::vector<uint64_t> begins_;
  uint64_t data_offset_ = 0;
  uint64_t data_size_ = 0;
  size_t current_ = 0;
  uint64_t written_in_current_ = 0;
  bool finished_ = false;
};

}  // namespace di
