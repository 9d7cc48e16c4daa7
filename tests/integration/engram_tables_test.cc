// Where the Engram tables' rows are read from (ForwardOptions::engram_tables): the choice for
// each mode and memory size, and place_engram_tables on the tiny fixture's tables.
#include <gtest/gtest.h>

#include <filesystem>

#include "config/model_config.h"
#include "model/deepseek_v41/cpu_model.h"
#include "model/deepseek_v41/weights.h"
#include "tests_support/fixture_paths.h"

namespace di {
namespace {

using testing_support::kTinyFixtureA;

TEST(EngramTables, AutoGoesResidentWhenTheTablesFitInHalfTheMemory) {
  constexpr uint64_t kGiB = 1ull << 30;
  EXPECT_TRUE(v41::engram_tables_go_resident(EngramTables::kAuto, 10 * kGiB, 20 * kGiB));
  EXPECT_FALSE(v41::engram_tables_go_resident(EngramTables::kAuto, 10 * kGiB + 1, 20 * kGiB));
  // The real tables (~189 GiB) on a 128 GiB machine stay mapped; on a 2 TiB one they go resident.
  EXPECT_FALSE(v41::engram_tables_go_resident(EngramTables::kAuto, 189 * kGiB, 120 * kGiB));
  EXPECT_TRUE(v41::engram_tables_go_resident(EngramTables::kAuto, 189 * kGiB, 1900 * kGiB));
  EXPECT_FALSE(v41::engram_tables_go_resident(EngramTables::kAuto, 1, 0));  // unknown memory
  EXPECT_FALSE(v41::engram_tables_go_resident(EngramTables::kMapped, 1, 20 * kGiB));
  EXPECT_TRUE(v41::engram_tables_go_resident(EngramTables::kResident, 189 * kGiB, 0));
}

// kMapped leaves the tables alone; kResident populates every byte of their codes and scales
// (0 only where the kernel lacks MADV_POPULATE_READ: skipped).
TEST(EngramTables, PlaceMakesTheFixtureTablesResident) {
  if (!std::filesystem::exists(kTinyFixtureA / "model.safetensors")) GTEST_SKIP() << "no fixture";
  const ModelConfig cfg = load_model_config(kTinyFixtureA);
  ASSERT_FALSE(cfg.engram_layer_ids.empty());
  const auto ckpt = open_v41_checkpoint(kTinyFixtureA, cfg, "test");
  const v41::ModelWeights<float> w = v41::bind_weights<float>(cfg, *ckpt);
  uint64_t bytes = 0;
  for (const auto& b : w.blocks) {
    if (b.engram_table) bytes += b.engram_table->weight.nbytes() + b.engram_table->scale.nbytes();
  }
  ASSERT_GT(bytes, uint64_t{0});
  EXPECT_EQ(v41::place_engram_tables(w, EngramTables::kMapped), uint64_t{0});
  const uint64_t placed = v41::place_engram_tables(w, EngramTables::kResident);
  if (placed == 0) GTEST_SKIP() << "this kernel has no MADV_POPULATE_READ";
  EXPECT_EQ(placed, bytes);
}

}  // namespace
}  // namespace di
