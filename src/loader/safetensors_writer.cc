#include "loader/safetensors_writer.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>

#include "common/check.h"
#include "common/logging.h"

namespace di {
namespace {

constexpr size_t kIoBufferBytes = 8u << 20;

std::string errno_text() {
  return std::strerror(errno);
}

}  // namespace

SafetensorsWriter::SafetensorsWriter(const std::string& path, std::vector<TensorSpec> specs,
                                     const std::map<std::string, std::string>& metadata)
    : path_(path), specs_(std::move(specs)) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = metadata;
  std::set<std::string_view> names;
  uint64_t offset = 0;
  begins_.reserve(specs_.size());
  for (const TensorSpec& s : specs_) {
    DI_CHECK(!s.name.empty() && s.name != "__metadata__", "{}: invalid tensor name '{}'", path_,
             s.name);
    DI_CHECK(names.insert(s.name).second, "{}: tensor '{}' specified twice", path_, s.name);
    int64_t numel = s.shape.numel();
    uint64_t nbytes = 0;
    DI_CHECK(numel >= 0 && !__builtin_mul_overflow(static_cast<uint64_t>(numel),
                                                   dtype_size(s.dtype), &nbytes),
             "{}: tensor '{}' has an invalid shape {}", path_, s.name, s.shape);
    uint64_t end = 0;
    DI_CHECK(!__builtin_add_overflow(offset, nbytes, &end) && end <= uint64_t{INT64_MAX},
             "{}: tensor '{}' ends beyond the largest possible file", path_, s.name);
    begins_.push_back(offset);
    header[s.name] = {
        {"dtype", dtype_name(s.dtype)}, {"shape", s.shape.dims()}, {"data_offsets", {offset, end}}};
    offset = end;
  }
  data_size_ = offset;

  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    DI_FAIL("{}: cannot encode the header (tensor names and metadata must be UTF-8): {}", path_,
            e.what());
  }
  // Pad with spaces (valid JSON whitespace) so that the data section starts 8-byte aligned.
  text.append((8 - text.size() % 8) % 8, ' ');
  data_offset_ = 8 + text.size();
  DI_CHECK(data_offset_ <= uint64_t{INT64_MAX} - data_size_, "{}: file too large", path_);

  f_ = std::fopen(path_.c_str(), "wb");
  if (f_ == nullptr) DI_FAIL("{}: cannot create: {}", path_, errno_text());
  buffer_.resize(kIoBufferBytes);
  // A throwing constructor runs no destructor: close the file ourselves on failure.
  if (std::setvbuf(f_, buffer_.data(), _IOFBF, buffer_.size()) != 0) {
    std::fclose(f_);
    f_ = nullptr;
    DI_FAIL("{}: setvbuf failed", path_);
  }
  unsigned char len[8];
  for (int i = 0; i < 8; ++i)
    len[i] = static_cast<unsigned char>(text.size() >> (8 * i));
  if (std::fwrite(len, 1, 8, f_) != 8 ||
      std::fwrite(text.data(), 1, text.size(), f_) != text.size()) {
    std::string err = errno_text();
    std::fclose(f_);
    f_ = nullptr;
    DI_FAIL("{}: cannot write the header: {}", path_, err);
  }
  advance_if_complete();
}

SafetensorsWriter::~SafetensorsWriter() {
  if (f_ != nullptr) std::fclose(f_);
  if (!finished_) {
    try {
      DI_LOG_WARN("{}: safetensors writer destroyed before finish(); the file is incomplete",
                  path_);
    } catch (...) {  // NOLINT(bugprone-empty-catch): destructors never throw
    }
  }
}

void SafetensorsWriter::write(std::span<const std::byte> chunk) {
  DI_CHECK(!finished_ && f_ != nullptr, "{}: write after finish()", path_);
  if (chunk.empty()) return;
  DI_CHECK(current_ < specs_.size(), "{}: {} bytes written after the last tensor", path_,
           chunk.size());
  const TensorSpec& spec = specs_[current_];
  uint64_t remaining = spec.nbytes() - written_in_current_;
  DI_CHECK(chunk.size() <= remaining,
           "{}: chunk of {} bytes overruns tensor '{}' ({} of {} bytes left)", path_, chunk.size(),
           spec.name, remaining, spec.nbytes());
  if (std::fwrite(chunk.data(), 1, chunk.size(), f_) != chunk.size()) {
    DI_FAIL("{}: write failed in tensor '{}': {}", path_, spec.name, errno_text());
  }
  written_in_current_ += chunk.size();
  advance_if_complete();
}

void SafetensorsWriter::skip_rest_of_current() {
  DI_CHECK(!finished_ && f_ != nullptr, "{}: skip after finish()", path_);
  DI_CHECK(current_ < specs_.size(), "{}: skip after the last tensor", path_);
  const TensorSpec& spec = specs_[current_];
  uint64_t remaining = spec.nbytes() - written_in_current_;
  // Seeking forward past the end leaves a hole; finish() sets the final size with ftruncate.
  if (::fseeko(f_, static_cast<off_t>(remaining), SEEK_CUR) != 0) {
    DI_FAIL("{}: cannot skip {} bytes in tensor '{}': {}", path_, remaining, spec.name,
            errno_text());
  }
  written_in_current_ += remaining;
  advance_if_complete();
}

void SafetensorsWriter::finish() {
  DI_CHECK(!finished_ && f_ != nullptr, "{}: finish() called twice", path_);
  if (current_ < specs_.size()) {
    DI_FAIL("{}: finish() with tensor '{}' incomplete ({} of {} bytes written)", path_,
            specs_[current_].name, written_in_current_, specs_[current_].nbytes());
  }
  if (std::fflush(f_) != 0) DI_FAIL("{}: write failed: {}", path_, errno_text());
  // A trailing hole (skip of the last tensors) does not extend the file by itself.
  if (::ftruncate(::fileno(f_), static_cast<off_t>(file_size())) != 0) {
    DI_FAIL("{}: cannot set the file size to {}: {}", path_, file_size(), errno_text());
  }
  std::FILE* f = f_;
  f_ = nullptr;
  if (std::fclose(f) != 0) DI_FAIL("{}: close failed: {}", path_, errno_text());
  finished_ = true;
}

void SafetensorsWriter::advance_if_complete() {
  while (current_ < specs_.size() && written_in_current_ == specs_[current_].nbytes()) {
    ++current_;
    written_in_current_ = 0;
  }
}

}  // namespace di
