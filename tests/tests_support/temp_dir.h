#pragma once

#include <filesystem>
#include <string>

namespace di::testing {

// A fresh directory under the system temp dir, removed (recursively) on destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "deepinfer-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// Writes `content` to `path` (binary), creating parent directories.
void write_file(const std::filesystem::path& path, const std::string& content);
std::string read_file(const std::filesystem::path& path);

}  // namespace di::testing
