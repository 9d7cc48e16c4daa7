#include "engram/hash_params.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "engram/token_map.h"
#include "loader/safetensors.h"
#include "unit/engram/engram_test_util.h"

namespace di {
namespace {

using testing::engram_error_of;
using testing::engram_fixture_dir;
using testing::engram_fixture_present;
using testing::has_substr;

std::vector<int64_t> tensor_i64(const SafetensorsFile& st, const std::string& name) {
  ConstTensorView v = st.view(name);
  EXPECT_EQ(v.dtype, DType::kI64) << name;
  // Trace tensors are not 8-byte aligned in the file: copy rather than view.
  std::vector<int64_t> out(v.nbytes() / sizeof(int64_t));
  std::memcpy(out.data(), v.data, out.size() * sizeof(int64_t));
  return out;
}

TEST(EngramMultipliers, ReleaseValues) {
  // Delta spec §2.3 (released model, compressed vocab 99,092).
  ModelConfig cfg = load_model_config_file(std::string(DI_SOURCE_DIR) + "/configs/v41-flash.json");
  ASSERT_EQ(cfg.engram_layer_ids, (std::vector<int64_t>{1, 14}));
  std::vector<int64_t> m = compute_engram_multipliers(
      cfg.engram_layer_ids, cfg.engram_max_ngram_size, cfg.engram_compressed_vocab_size);
  EXPECT_EQ(m,
            (std::vector<int64_t>{76632096046245, 4839876093313, 35959672319349, 73987337458391,
                                  67716810739261, 51510806800915, 30921347202721, 82619226485591}));
}

TEST(EngramMultipliers, OddAndBelowOverflowBound) {
  std::vector<int64_t> layers = {0, 1, 2, 3, 40};
  std::vector<int64_t> m = compute_engram_multipliers(layers, 4, 99092);
  ASSERT_EQ(m.size(), 20u);
  for (int64_t v : m) {
    EXPECT_EQ(v % 2, 1);
    EXPECT_LE(v, INT64_MAX / 99092);  // (C - 1) * v cannot overflow
  }
}

TEST(EngramMultipliers, FixtureTensorsMatch) {
  if (!engram_fixture_present()) GTEST_SKIP() << "fixture not present";
  ModelConfig cfg = load_model_config(engram_fixture_dir());
  CompressedTokenMap map =
      CompressedTokenMap::load(engram_fixture_dir(), cfg.engram_compressed_vocab_size);
  EngramHashParams p = make_engram_hash_params(cfg, map);
  SafetensorsFile st((engram_fixture_dir() / kEngramTokenMapFile).string());
  EXPECT_EQ(p.multipliers, tensor_i64(st, "hash_multipliers"));
  EXPECT_EQ(st.view("hash_multipliers").shape, (Shape{p.num_layers(), p.max_ngram}));
  EXPECT_EQ(p.primes, tensor_i64(st, "hash_primes"));
  EXPECT_EQ(p.offsets, tensor_i64(st, "hash_offsets"));
  EXPECT_EQ(p.columns, 6);
  EXPECT_EQ(p.pad_compressed_id, 2);
  EXPECT_EQ(p.layer_ids, (std::vector<int64_t>{1, 4}));
}

TEST(EngramHashParams, PadIsMappedThroughTheTokenMap) {
  ModelConfig cfg = load_model_config_file(std::string(DI_SOURCE_DIR) + "/configs/v41-flash.json");
  // A toy map over the release's compressed vocab: raw id i -> (i * 7) % C.
  const int64_t c = cfg.engram_compressed_vocab_size;
  std::vector<int32_t> ids(16);
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = static_cast<int32_t>((i * 7) % c);
  CompressedTokenMap map(ids, c, "toy");
  cfg.engram_pad_token_id = 3;
  EngramHashParams p = make_engram_hash_params(cfg, map);
  EXPECT_EQ(p.pad_compressed_id, 21);
  EXPECT_EQ(p.columns, 24);
  EXPECT_EQ(p.primes.size(), 48u);
  EXPECT_EQ(p.prime(0, 0), 16000057);
  EXPECT_EQ(p.prime(1, 23), 16000889);
  EXPECT_EQ(p.offset(1, 0), 0);
  EXPECT_EQ(p.offset(0, 1), 16000057);
}

TEST(EngramHashParams, RejectsMismatchedCompressedVocab) {
  ModelConfig cfg = load_model_config_file(std::string(DI_SOURCE_DIR) + "/configs/v41-flash.json");
  CompressedTokenMap map(std::vector<int32_t>{0, 1, 2, 3}, 4, "small-map");
  std::string msg = engram_error_of([&] { make_engram_hash_params(cfg, map); });
  EXPECT_TRUE(has_substr(msg, "small-map"));
  EXPECT_TRUE(has_substr(msg, "engram_compressed_vocab_size is 99092"));
}

TEST(EngramHashParams, RejectsPadOutsideTheTokenMap) {
  ModelConfig cfg = load_model_config_file(std::string(DI_SOURCE_DIR) + "/configs/v41-flash.json");
  CompressedTokenMap map(std::vector<int32_t>{0, 1}, cfg.engram_compressed_vocab_size, "two");
  std::string msg = engram_error_of([&] { make_engram_hash_params(cfg, map); });
  EXPECT_TRUE(has_substr(msg, "token id 2"));
}

}  // namespace
}  // namespace di
