#include "loader/checkpoint.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "loader/safetensors_writer.h"
#include "tests_support/temp_dir.h"
#include "unit/loader/loader_test_util.h"

namespace di {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::error_of;
using testing::TempDir;

// A shard holding one I16 tensor of shape [2] per name; its values are (first char, length).
void write_shard(const fs::path& path, const std::vector<std::string>& names) {
  std::vector<TensorSpec> specs;
  for (const auto& n : names)
    specs.push_back({n, DType::kI16, {2}});
  SafetensorsWriter w(path.string(), specs);
  for (const auto& n : names) {
    int16_t v[2] = {static_cast<int16_t>(n[0]), static_cast<int16_t>(n.size())};
    w.write(std::as_bytes(std::span(v)));
  }
  w.finish();
}

std::string index_json(const std::vector<std::pair<std::string, std::string>>& entries) {
  std::string s = R"({"metadata":{"format":"pt"},"weight_map":{)";
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i > 0) s += ',';
    s += fmt::format(R"("{}":"{}")", entries[i].first, entries[i].second);
  }
  return s + "}}";
}

constexpr const char* kS1 = "model-00001-of-00002.safetensors";
constexpr const char* kS2 = "model-00002-of-00002.safetensors";

TEST(Checkpoint, OpensSingleFileAndIgnoresOtherSafetensors) {
  TempDir dir;
  write_shard(dir / "model.safetensors", {"b", "a", "cc"});
  write_shard(dir / "cases.safetensors", {"case"});
  write_shard(dir / "model-00001-of-00001.safetensors", {"ignored"});
  Checkpoint ckpt = Checkpoint::open(dir.path());
  EXPECT_FALSE(ckpt.has_index());
  EXPECT_EQ(ckpt.shard_files(), (std::vector<std::string>{"model.safetensors"}));
  ASSERT_EQ(ckpt.num_tensors(), 3u);
  EXPECT_EQ(ckpt.tensors()[0].name, "a");
  EXPECT_EQ(ckpt.tensors()[2].name, "cc");
  EXPECT_EQ(ckpt.total_bytes(), 12u);
  auto v = ckpt.view("cc").as<int16_t>();
  EXPECT_EQ(v[0], 'c');
  EXPECT_EQ(v[1], 2);
  EXPECT_EQ(ckpt.find("case"), nullptr);
  std::string msg = error_of([&] { ckpt.view("nope"); });
  EXPECT_TRUE(contains(msg, dir.path().string()));
  EXPECT_TRUE(contains(msg, "no tensor 'nope'"));
}

TEST(Checkpoint, OpensNumberedShardsWithoutIndex) {
  TempDir dir;
  write_shard(dir / "model-00001-of-00003.safetensors", {"z", "m"});
  write_shard(dir / "model-00002-of-00003.safetensors", {"a"});
  write_shard(dir / "model-00003-of-00003.safetensors", {"q"});
  write_shard(dir / "model-1-of-3.safetensors", {"ignored"});
  write_shard(dir / "trace.safetensors", {"trace"});
  Checkpoint ckpt = Checkpoint::open(dir.path());
  EXPECT_FALSE(ckpt.has_index());
  ASSERT_EQ(ckpt.shard_files().size(), 3u);
  EXPECT_EQ(ckpt.shard_files()[1], "model-00002-of-00003.safetensors");
  ASSERT_EQ(ckpt.num_tensors(), 4u);
  const CheckpointTensor* a = ckpt.find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->shard, 1u);
  EXPECT_EQ(a->offset, ckpt.shard(1).header().data_offset);
  EXPECT_EQ(ckpt.view("z").as<int16_t>()[0], 'z');
  EXPECT_EQ(ckpt.view(*ckpt.find("q")).as<int16_t>()[0], 'q');
}

TEST(Checkpoint, NumberedShardsMustBeComplete) {
  TempDir dir;
  write_shard(dir / "model-00001-of-00004.safetensors", {"a"});
  write_shard(dir / "model-00003-of-00004.safetensors", {"b"});
  std::string msg = error_of([&] { Checkpoint::open(dir.path()); });
  EXPECT_TRUE(contains(msg, dir.path().string()));
  EXPECT_TRUE(contains(msg,
                       "2 of 4 shards missing: model-00002-of-00004.safetensors, "
                       "model-00004-of-00004.safetensors"));
}

TEST(Checkpoint, NumberedShardsMustAgreeOnCount) {
  TempDir dir;
  write_shard(dir / "model-00001-of-00002.safetensors", {"a"});
  write_shard(dir / "model-00002-of-00003.safetensors", {"b"});
  write_shard(dir / "model-00000-of-00002.safetensors", {"c"});
  std::string msg = error_of([&] { Checkpoint::open(dir.path()); });
  EXPECT_TRUE(contains(msg, "model-00002-of-00003.safetensors disagrees with"));
  EXPECT_TRUE(contains(msg, "model-00000-of-00002.safetensors has a shard number outside 1..2"));
}

TEST(Checkpoint, DuplicateTensorAcrossShardsWithoutIndex) {
  TempDir dir;
  write_shard(dir / kS1, {"a", "dup"});
  write_shard(dir / kS2, {"dup", "b"});
  std::string msg = error_of([&] { Checkpoint::open(dir.path()); });
  EXPECT_TRUE(
      contains(msg, std::string("tensor 'dup' present in several shards: ") + kS1 + ", " + kS2));
}

TEST(Checkpoint, NoWeightsAndBadPaths) {
  TempDir dir;
  write_shard(dir / "cases.safetensors", {"x"});
  std::string msg = error_of([&] { Checkpoint::open(dir.path()); });
  EXPECT_TRUE(contains(msg, "no weights found in " + dir.path().string() +
                                " (expected model.safetensors.index.json, model.safetensors or "
                                "model-*-of-*.safetensors)"));
  EXPECT_TRUE(contains(error_of([&] { Checkpoint::open(dir / "absent"); }),
                       (dir / "absent").string() + ": checkpoint directory does not exist"));
  EXPECT_TRUE(contains(error_of([&] { Checkpoint::open(dir / "cases.safetensors"); }),
                       "cases.safetensors: not a directory"));
}

TEST(Checkpoint, OpensIndexedShards) {
  TempDir dir;
  write_shard(dir / kS1, {"a", "c"});
  write_shard(dir / kS2, {"b"});
  write_shard(dir / "model-00009-of-00009.safetensors", {"unindexed_file_is_ignored"});
  testing::write_file(dir / "model.safetensors.index.json",
                      index_json({{"a", kS1}, {"b", kS2}, {"c", kS1}}));
  Checkpoint ckpt = Checkpoint::open(dir.path());
  EXPECT_TRUE(ckpt.has_index());
  EXPECT_EQ(ckpt.shard_files(), (std::vector<std::string>{kS1, kS2}));
  ASSERT_EQ(ckpt.num_tensors(), 3u);
  EXPECT_EQ(ckpt.find("b")->shard, 1u);
  EXPECT_EQ(ckpt.view("b").as<int16_t>()[0], 'b');
  EXPECT_EQ(ckpt.total_bytes(), 12u);
}

TEST(Checkpoint, IndexProblemsAreReportedTogether) {
  TempDir dir;
  write_shard(dir / kS1, {"a", "extra", "dup"});
  write_shard(dir / "model-00003-of-00003.safetensors", {"dup", "elsewhere"});
  testing::write_file(dir / "model.safetensors.index.json",
                      index_json({{"a", kS1},
                                  {"gone", kS1},
                                  {"dup", kS1},
                                  {"elsewhere", kS1},
                                  {"m1", kS2},
                                  {"m2", kS2},
                                  {"x", "model-00003-of-00003.safetensors"}}));
  std::string msg = error_of([&] { Checkpoint::open(dir.path()); });
  EXPECT_TRUE(testing::starts_with(
      msg, dir.path().string() + ": model.safetensors.index.json does not match the shards"));
  EXPECT_TRUE(contains(msg, "(6 problems)"));
  EXPECT_TRUE(contains(msg, std::string("missing shard ") + kS2 + " (indexed to hold 2 tensors)"));
  EXPECT_TRUE(
      contains(msg, std::string("tensor 'gone' indexed to ") + kS1 + " is absent from its header"));
  EXPECT_TRUE(contains(msg, std::string("tensor 'elsewhere' indexed to ") + kS1 +
                                " is absent from its header (found in "
                                "model-00003-of-00003.safetensors)"));
  EXPECT_TRUE(contains(msg, "tensor 'x' indexed to model-00003-of-00003.safetensors is absent"));
  EXPECT_TRUE(contains(
      msg, std::string("tensor 'extra' in the header of ") + kS1 + " is not in the index"));
  EXPECT_TRUE(contains(msg, std::string("tensor 'dup' present in several shards: ") + kS1 +
                                ", model-00003-of-00003.safetensors"));
}

TEST(Checkpoint, LongProblemListsAreCapped) {
  TempDir dir;
  std::vector<std::string> names;
  for (int i = 0; i < 70; ++i)
    names.push_back(fmt::format("t{}", 100 + i));
  write_shard(dir / "model.safetensors", names);
  testing::write_file(dir / "model.safetensors.index.json",
                      index_json({{"other", "model.safetensors"}}));
  std::string msg = error_of([&] { Checkpoint::open(dir.path()); });
  EXPECT_TRUE(contains(msg, "(71 problems)"));
  EXPECT_TRUE(contains(msg, "\n  ... and 21 more"));
}

TEST(Checkpoint, CorruptShardAndIndexAreNamed) {
  TempDir dir;
  write_shard(dir / kS1, {"a"});
  testing::write_file(dir / kS2, "garbage");
  testing::write_file(dir / "model.safetensors.index.json", index_json({{"a", kS1}, {"b", kS2}}));
  std::string msg = error_of([&] { Checkpoint::open(dir.path()); });
  EXPECT_TRUE(contains(msg, std::string("unreadable shard ") + kS2));
  EXPECT_TRUE(contains(msg, "file has 7 bytes"));

  testing::write_file(dir / "model.safetensors.index.json",
                      R"({"weight_map":{"a":"x.safetensors","a":"y.safetensors"}})");
  msg = error_of([&] { Checkpoint::open(dir.path()); });
  EXPECT_TRUE(contains(msg, "model.safetensors.index.json: tensor 'a' listed twice in weight_map"));
}

TEST(Checkpoint, OpensTheTinyFixture) {
  fs::path path = fs::path(DI_SHARED_DIR) / "fixtures/v41-tiny-a";
  if (!fs::exists(path)) GTEST_SKIP() << path << " not present";
  Checkpoint ckpt = Checkpoint::open(path);
  EXPECT_FALSE(ckpt.has_index());
  EXPECT_EQ(ckpt.shard_files(), (std::vector<std::string>{"model.safetensors"}));
  EXPECT_EQ(ckpt.num_tensors(), 1509u);
  EXPECT_TRUE(std::is_sorted(
      ckpt.tensors().begin(), ckpt.tensors().end(),
      [](const CheckpointTensor& a, const CheckpointTensor& b) { return a.name < b.name; }));
  EXPECT_EQ(ckpt.total_bytes() + ckpt.shard(0).header().data_offset,
            fs::file_size(path / "model.safetensors"));
  ConstTensorView embed = ckpt.view("embed.weight");
  EXPECT_EQ(embed.dtype, DType::kBF16);
  EXPECT_EQ(embed.shape, (Shape{1280, 192}));
}

}  // namespace
}  // namespace di
