#include "engram/token_map.h"

#include <cstring>
#include <limits>
#include <utility>

#include "common/check.h"
#include "loader/safetensors.h"

namespace di {

CompressedTokenMap::CompressedTokenMap(std::vector<int32_t> compressed_ids,
                                       int64_t compressed_vocab_size, std::string source)
    : ids_(std::move(compressed_ids)),
      compressed_vocab_size_(compressed_vocab_size),
      source_(std::move(source)) {
  DI_CHECK(
      compressed_vocab_size_ > 0 && compressed_vocab_size_ <= std::numeric_limits<int32_t>::max(),
      "{}: compressed vocab size {} is not in [1, 2^31)", source_, compressed_vocab_size_);
  DI_CHECK(!ids_.empty(), "{}: token map is empty", source_);
  for (size_t raw = 0; raw < ids_.size(); ++raw) {
    DI_CHECK(ids_[raw] >= 0 && ids_[raw] < compressed_vocab_size_,
             "{}: token_map[{}] = {} is outside [0, {}) (engram_compressed_vocab_size)", source_,
             raw, ids_[raw], compressed_vocab_size_);
  }
}

CompressedTokenMap CompressedTokenMap::load_file(const std::filesystem::path& file,
                                                 int64_t compressed_vocab_size) {
  const std::string label = file.string();
  DI_CHECK(
      compressed_vocab_size > 0 && compressed_vocab_size <= std::numeric_limits<int32_t>::max(),
      "{}: compressed vocab size {} is not in [1, 2^31)", label, compressed_vocab_size);
  SafetensorsFile st(label);
  const TensorInfo* info = st.find(kEngramTokenMapTensor);
  DI_CHECK(info != nullptr, "{}: tensor '{}' not found", label, kEngramTokenMapTensor);
  DI_CHECK(info->dtype == DType::kI64 && info->shape.rank() == 1,
           "{}: tensor '{}' must be I64 [vocab], got {} {}", label, kEngramTokenMapTensor,
           dtype_name(info->dtype), info->shape);
  // safetensors does not align tensor data, so read the little-endian words bytewise rather
  // than through an int64 view.
  const std::span<const std::byte> bytes = st.view(*info).bytes();
  std::vector<int32_t> ids(bytes.size() / sizeof(int64_t));
  for (size_t i = 0; i < ids.size(); ++i) {
    int64_t value = 0;
    std::memcpy(&value, bytes.data() + i * sizeof(int64_t), sizeof(int64_t));
    // Range-check before narrowing so a corrupt 64-bit value is reported, not truncated.
    DI_CHECK(value >= 0 && value < compressed_vocab_size,
             "{}: tensor '{}': entry {} = {} is outside [0, {}) (engram_compressed_vocab_size)",
             label, kEngramTokenMapTensor, i, value, compressed_vocab_size);
    ids[i] = static_cast<int32_t>(value);
  }
  return CompressedTokenMap(std::move(ids), compressed_vocab_size,
                            label + ":" + kEngramTokenMapTensor);
}

CompressedTokenMap CompressedTokenMap::load(const std::filesystem::path& model_dir,
                                            int64_t compressed_vocab_size) {
  return load_file(model_dir / kEngramTokenMapFile, compressed_vocab_size);
}

int64_t CompressedTokenMap::lookup(int64_t raw_id) const {
  DI_CHECK(raw_id >= 0 && raw_id < vocab_size(),
           "token id {} is outside the token map [0, {}) of {}", raw_id, vocab_size(), source_);
  return ids_[static_cast<size_t>(raw_id)];
}

}  // namespace di
