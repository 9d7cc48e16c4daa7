#include "loader/safetensors_writer.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "loader/safetensors.h"
#include "tests_support/temp_dir.h"
#include "unit/loader/loader_test_util.h"

namespace di {
namespace {

using testing::contains;
using testing::error_of;

std::vector<std::byte> pattern(size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<std::byte>((i * 131 + seed * 7) & 0xFF);
  return v;
}

TEST(SafetensorsWriter, RoundTripsChunkedPayloads) {
  testing::TempDir dir;
  std::string path = (dir / "out.safetensors").string();
  std::vector<TensorSpec> specs = {
      {"w.bf16", DType::kBF16, {17, 5}}, {"empty", DType::kF32, {0, 3}},
      {"scale", DType::kF8E8M0, {3}},    {"x.f32", DType::kF32, {4, 4}},
      {"scalar", DType::kI64, {}},       {"tail_empty", DType::kU8, {0}},
  };
  std::vector<std::vector<std::byte>> payloads;
  for (size_t i = 0; i < specs.size(); ++i) {
    payloads.push_back(pattern(specs[i].nbytes(), static_cast<unsigned>(i)));
  }
  {
    SafetensorsWriter w(path, specs, {{"format", "pt"}, {"source", "unit test"}});
    EXPECT_EQ(w.current(), 0u);
    for (size_t i = 0; i < specs.size(); ++i) {
      const auto& p = payloads[i];
      // Uneven chunks, including empty ones.
      for (size_t off = 0; off < p.size();) {
        size_t n = std::min<size_t>(p.size() - off, 1 + off % 7);
        w.write(std::span(p).subspan(off, n));
        w.write({});
        off += n;
      }
    }
    EXPECT_EQ(w.current(), specs.size());
    w.finish();
    EXPECT_EQ(w.file_size(), std::filesystem::file_size(path));
  }
  SafetensorsFile st(path);
  EXPECT_EQ(st.header().data_offset % 8, 0u);
  EXPECT_EQ(st.header().metadata.at("source"), "unit test");
  ASSERT_EQ(st.tensors().size(), specs.size());
  uint64_t expected_begin = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorInfo* info = st.find(specs[i].name);
    ASSERT_NE(info, nullptr) << specs[i].name;
    EXPECT_EQ(info->begin, expected_begin) << "offsets follow spec order";
    expected_begin = info->end;
    EXPECT_EQ(info->dtype, specs[i].dtype);
    EXPECT_EQ(info->shape, specs[i].shape);
    ConstTensorView v = st.view(*info);
    ASSERT_EQ(v.nbytes(), payloads[i].size());
    EXPECT_TRUE(payloads[i].empty() ||
                std::memcmp(v.data, payloads[i].data(), payloads[i].size()) == 0)
        << specs[i].name;
  }
}

TEST(SafetensorsWriter, HeaderPaddingKeepsDataAligned) {
  testing::TempDir dir;
  for (size_t len = 1; len <= 9; ++len) {
    std::string path = (dir / fmt::format("p{}.safetensors", len)).string();
    SafetensorsWriter w(path, {{std::string(len, 'n'), DType::kU8, {1}}}, {});
    w.write(pattern(1, 0));
    w.finish();
    SafetensorsFile st(path);
    EXPECT_EQ(st.header().data_offset % 8, 0u) << len;
    EXPECT_TRUE(st.header().metadata.empty());
  }
}

TEST(SafetensorsWriter, SkippedTensorsAreSparseZeroHoles) {
  testing::TempDir dir;
  std::string path = (dir / "holes.safetensors").string();
  constexpr int64_t kBig = 64ll << 20;  // 64 MiB each, never materialized
  std::vector<TensorSpec> specs = {{"head", DType::kU8, {8}},
                                   {"table", DType::kU8, {kBig}},
                                   {"mid", DType::kI32, {2}},
                                   {"tail", DType::kU8, {kBig}}};
  SafetensorsWriter w(path, specs);
  w.write(pattern(8, 1));
  w.write(pattern(100, 2));  // partial, then skip the rest
  w.skip_rest_of_current();
  EXPECT_EQ(w.current(), 2u);
  w.write(pattern(8, 3));
  w.skip_rest_of_current();  // trailing hole: only ftruncate gives the file its size
  EXPECT_EQ(w.current(), 4u);
  w.finish();

  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), w.file_size());
  EXPECT_LT(st.st_blocks * 512, 8ll << 20) << "holes were materialized";

  SafetensorsFile f(path);
  ConstTensorView table = f.view("table");
  auto expected = pattern(100, 2);
  EXPECT_EQ(std::memcmp(table.data, expected.data(), 100), 0);
  EXPECT_EQ(table.bytes()[100], std::byte{0});
  EXPECT_EQ(table.bytes()[kBig - 1], std::byte{0});
  EXPECT_EQ(f.view("tail").bytes()[kBig - 1], std::byte{0});
  auto mid = pattern(8, 3);
  EXPECT_EQ(std::memcmp(f.view("mid").data, mid.data(), 8), 0);
}

TEST(SafetensorsWriter, RejectsMisuse) {
  testing::TempDir dir;
  std::string path = (dir / "m.safetensors").string();
  std::vector<TensorSpec> specs = {{"a", DType::kF32, {2}}, {"b", DType::kU8, {3}}};

  EXPECT_TRUE(
      contains(error_of([&] {
                 SafetensorsWriter w(path, {{"a", DType::kU8, {1}}, {"a", DType::kU8, {1}}});
               }),
               "tensor 'a' specified twice"));
  EXPECT_TRUE(contains(error_of([&] {
                         SafetensorsWriter w(path, {{"__metadata__", DType::kU8, {1}}});
                       }),
                       "invalid tensor name"));
  EXPECT_TRUE(contains(error_of([&] {
                         SafetensorsWriter w(path, {{"n", DType::kU8, {-1}}});
                       }),
                       "tensor 'n' has an invalid shape"));
  EXPECT_TRUE(contains(error_of([&] {
                         SafetensorsWriter w(path, {{"n", DType::kF64, {1ll << 62}}});
                       }),
                       "tensor 'n'"));

  std::string overrun = error_of([&] {
    SafetensorsWriter w(path, specs);
    w.write(pattern(9, 0));  // crosses from 'a' into 'b'
  });
  EXPECT_TRUE(contains(overrun, path));
  EXPECT_TRUE(contains(overrun, "overruns tensor 'a'"));

  std::string incomplete = error_of([&] {
    SafetensorsWriter w(path, specs);
    w.write(pattern(8, 0));
    w.write(pattern(1, 0));
    w.finish();
  });
  EXPECT_TRUE(contains(incomplete, "tensor 'b' incomplete (1 of 3 bytes written)"));

  std::string after_last = error_of([&] {
    SafetensorsWriter w(path, specs);
    w.write(pattern(8, 0));
    w.write(pattern(3, 0));
    w.write(pattern(1, 0));
  });
  EXPECT_TRUE(contains(after_last, "1 bytes written after the last tensor"));

  EXPECT_TRUE(contains(
      error_of([&] { SafetensorsWriter w((dir / "no/such/dir/x.safetensors").string(), specs); }),
      "no/such/dir/x.safetensors: cannot create"));
}

TEST(SafetensorsWriter, DestroyedWithoutFinishDoesNotThrow) {
  testing::TempDir dir;
  std::string path = (dir / "partial.safetensors").string();
  {
    SafetensorsWriter w(path, {{"a", DType::kU8, {4}}});
    w.write(pattern(2, 0));
  }
  EXPECT_TRUE(std::filesystem::exists(path));  // left in place, not removed
}

TEST(SafetensorsWriter, DiskFullNamesThePath) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  std::string msg = error_of([] {
    SafetensorsWriter w("/dev/full", {{"a", DType::kU8, {1 << 20}}});
    auto chunk = pattern(1 << 20, 0);
    w.write(std::span(chunk));
    w.finish();
  });
  EXPECT_TRUE(testing::starts_with(msg, "/dev/full: ")) << msg;
  EXPECT_TRUE(contains(msg, "No space left on device"));
}

}  // namespace
}  // namespace di
