#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor_view.h"
#include "loader/safetensors.h"

namespace di {

// A tensor of a checkpoint directory: where it lives and what its header says.
struct CheckpointTensor {
  std::string name;
  DType dtype = DType::kU8;
  Shape shape;
  uint32_t shard = 0;   // index into Checkpoint::shard_files()
  uint64_t offset = 0;  // absolute byte offset in the shard file
  uint64_t nbytes = 0;
};

// The weights of a model directory, opened zero-copy.
//
// Which files hold weights: `model.safetensors.index.json` when present (every shard it names
// must exist; every indexed tensor must be in its shard's header and every header tensor in the
// index); else `model.safetensors`; else all `model-XXXXX-of-YYYYY.safetensors` (all YYYYY
// present, consistent counts). Other .safetensors files in the directory (fixture cases,
// traces, Engram token maps) are not weights. A tensor name may appear only once overall.
// All problems found in the index/shard cross-check are reported together in one di::Error.
class Checkpoint {
 public:
  static Checkpoint open(const std::filesystem::path& dir);

  Checkpoint(Checkpoint&&) noexcept;
  Checkpoint& operator=(Checkpoint&&) noexcept;
  ~Checkpoint();

  const std::filesystem::path& dir() const { return dir_; }
  bool has_index() const { return has_index_; }
  const std::vector<std::string>& shard_files() const { return shard_files_; }  // names in dir
  // All tensors, sorted by name.
  const std::vector<CheckpointTensor>& tensors() const { return tensors_; }
  size_t num_tensors() const { return tensors_.size(); }
  uint64_t total_bytes() const;

  const CheckpointTensor* find(std::string_view name) const;  // nullptr when absent
  // Zero-copy view into the mapped shard; throws di::Error naming the tensor when absent.
  ConstTensorView view(std::string_view name) const;
  ConstTensorView view(const CheckpointTensor& t) const;
  // Drops the resident pages of the tensor's bytes [begin, begin + len) (after a one-pass scan
  // or upload); views stay valid and re-read the file when touched again.
  void release(const CheckpointTensor& t, uint64_t begin = 0,
               uint64_t len = UINT64_MAX) const noexcept;
  const SafetensorsFile& shard(uint32_t i) const { return *shards_.at(i); }

 private:
  Checkpoint() = default;
  std::filesystem::path dir_;
  bool has_index_ = false;
  std::vector<std::string> shard_files_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::vector<CheckpointTensor> tensors_;
  std::map<std::string, size_t, std::less<>> by_name_;
};

}  // namespace di
