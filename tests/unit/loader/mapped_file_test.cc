#include "core/mapped_file.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "common/error.h"
#include "tests_support/temp_dir.h"

namespace di {
namespace {

// The first line starting with `field` in the /proc/self/smaps entry of the mapping that holds
// address `p` ("" if none).
std::string smaps_line(const void* p, const std::string& field) {
  std::ifstream smaps("/proc/self/smaps");
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-' &&
        line.find(' ') != std::string::npos && line.find(':') > line.find(' ')) {
      inside = addr >= lo && addr < hi;
      continue;
    }
    if (inside && line.rfind(field, 0) == 0) return line;
  }
  return "";
}

std::string vm_flags_of(const void* p) {
  return smaps_line(p, "VmFlags:");
}

// The mapping's Rss in kB (-1 if no entry).
int64_t rss_kb_of(const void* p) {
  const std::string line = smaps_line(p, "Rss:");
  return line.empty() ? -1 : std::stoll(line.substr(4));
}

// Writes dir/table.bin of `bytes` bytes i % mod and returns its content.
std::string write_pattern(const testing::TempDir& dir, size_t bytes, int mod) {
  std::string content(bytes, '\0');
  for (size_t i = 0; i < content.size(); ++i)
    content[i] = static_cast<char>(i % static_cast<size_t>(mod));
  testing::write_file(dir / "table.bin", content);
  return content;
}

TEST(MappedFile, MapsTheBytesAndNamesAMissingFile) {
  testing::TempDir dir;
  std::string content(3 * 4096 + 17, '\0');
  for (size_t i = 0; i < content.size(); ++i)
    content[i] = static_cast<char>(i * 31 + 7);
  testing::write_file(dir / "table.bin", content);
  const MappedFile f((dir / "table.bin").string());
  ASSERT_EQ(f.size(), content.size());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(f.data()), f.size()), content);
  try {
    MappedFile missing((dir / "absent.bin").string());
    FAIL() << "no error for a missing file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("absent.bin"), std::string::npos) << e.what();
  }
}

// The Engram tables are read a few rows at a time: advise_random_access turns readahead off for
// the pages of the range (the kernel shows it as the "rr" flag of the mapping), leaves the bytes
// as they were, and tolerates an empty range.
TEST(MappedFile, AdviseRandomAccessMarksThePagesOfTheRange) {
  testing::TempDir dir;
  const size_t page = 4096, pages = 64;
  const std::string content = write_pattern(dir, pages * page, 251);
  const MappedFile f((dir / "table.bin").string());
  // An unaligned range in the middle: pages 8..40 become random-read, page 0 does not.
  const std::byte* mid = f.data() + 8 * page + 100;
  const std::string before = vm_flags_of(mid);
  ASSERT_FALSE(before.empty()) << "no smaps entry for the mapping";
  EXPECT_EQ(before.find(" rr"), std::string::npos) << before;
  advise_random_access({mid, 32 * page});
  EXPECT_NE(vm_flags_of(mid).find(" rr"), std::string::npos) << vm_flags_of(mid);
  EXPECT_NE(vm_flags_of(f.data() + 8 * page).find(" rr"), std::string::npos);
  EXPECT_EQ(vm_flags_of(f.data()).find(" rr"), std::string::npos) << vm_flags_of(f.data());
  advise_random_access({});  // no-op
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(f.data()), f.size()), content);
}

// populate_read maps the pages of the range into the process (the mapping's Rss grows by them,
// not by the whole file) and leaves the bytes as they are; an empty range is a no-op. Kernels
// without MADV_POPULATE_READ (before 5.14) report false: skipped then.
TEST(MappedFile, PopulateReadMapsThePagesOfTheRange) {
  testing::TempDir dir;
  const size_t page = 4096, pages = 64;
  const std::string content = write_pattern(dir, pages * page, 253);
  const MappedFile f((dir / "table.bin").string());
  ASSERT_EQ(rss_kb_of(f.data()), 0) << "a fresh mapping has nothing resident";
  EXPECT_TRUE(populate_read({}));
  // Pages 16..47 (an unaligned range inside them).
  if (!populate_read({f.data() + 16 * page + 10, 32 * page - 20})) {
    GTEST_SKIP() << "this kernel has no MADV_POPULATE_READ";
  }
  // At least the 32 pages; fewer than the whole file (the kernel's fault-around may map a few
  // cached neighbours of a faulting page too).
  EXPECT_GE(rss_kb_of(f.data()), static_cast<int64_t>(32 * page / 1024));
  EXPECT_LT(rss_kb_of(f.data()), static_cast<int64_t>(pages * page / 1024));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(f.data()), f.size()), content);
  EXPECT_GT(available_memory_bytes(), uint64_t{0});
}

}  // namespace
}  // namespace di
