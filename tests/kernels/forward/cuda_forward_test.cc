// The V4.1 forward on the CUDA backend against the CPU reference backend (Model<float>) on the
// same checkpoint, two ways:
//   - a synthetic checkpoint with the production attention dimensions (64 heads x 512, window
//     128, indexer 32 x 128, top-512, o_groups 8) and every layer role of the v41-tiny layout
//     (window-only, ratio-2 and ratio-1 owners, Reindex with the candidate pool, shared top-k,
//     Engram), a prompt long enough that the indexers really select (more visible entries than
//     top-k), prefilled in two chunks, then greedy decode steps;
//   - the tiny golden fixture (generic-dimension kernel paths): its prefill cases against the
//     fixture's fp64 logits with the fp32 rule of the fixture README.
// GPU-vs-CPU differences come from fp32 summation order (tensor-core GEMMs, split-K, attention),
// so logits are compared with a relative tolerance and greedy ids must agree unless the CPU's
// top two logits are a near-tie.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "backend/cuda/device.h"
#include "deepinfer/llm.h"
#include "engram/token_map.h"
#include "loader/safetensors.h"
#include "model/deepseek_v41/cpu_model.h"
#include "model/deepseek_v41/cuda_model.h"
#include "model/fixture_replay.h"
#include "model/synth.h"
#include "model/trace.h"
#include "tests_support/draft_pairs.h"
#include "tests_support/error_of.h"
#include "tests_support/fixture_paths.h"
#include "tests_support/logits_compare.h"
#include "tests_support/temp_dir.h"

namespace di::cuda_forward_test {
namespace {

namespace fs = std::filesystem;

using testing_support::argmax;
using testing_support::rel_err;

bool have_gpu() {
  return cuda_device_count() > 0;
}

// v41-tiny's layer layout at the production attention dimensions (small hidden size and experts
// keep the CPU reference fast).
fs::path synth_real_attention_model(const fs::path& dir) {
  nlohmann::json cfg = preset_config_json("v41-tiny");
  nlohmann::json& t = cfg.contains("text_config") ? cfg["text_config"] : cfg;
  t["hidden_size"] = 512;
  t["num_attention_heads"] = 64;
  t["head_dim"] = 512;
  t["qk_rope_head_dim"] = 64;
  t["q_lora_rank"] = 256;
  t["o_lora_rank"] = 256;
  t["o_groups"] = 8;
  t["index_n_heads"] = 32;
  t["index_head_dim"] = 128;
  t["index_topk"] = 512;
  t["sliding_window"] = 128;
  t["candidate_block_size"] = 8;
  t["candidate_topk_blocks"] = 48;
  t["moe_intermediate_size"] = 256;
  const fs::path cfg_path = dir / "config.json";
  testing::write_file(cfg_path, cfg.dump(2));
  SynthOptions o;
  o.config = cfg_path.string();
  o.vision = false;
  o.seed = 11;
  o.out = dir / "model";
  synthesize_checkpoint(o);
  return o.out;
}

// n token ids drawn uniformly from [3, vocab) (ids 0-2 are the fixtures' special tokens).
std::vector<int64_t> random_prompt(size_t n, uint64_t seed, int64_t vocab) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> tok(3, vocab - 1);
  std::vector<int64_t> ids(n);
  for (auto& id : ids)
    id = tok(rng);
  return ids;
}

CompressedTokenMap token_map_for(const fs::path& model_dir) {
  const ModelConfig cfg = load_model_config(model_dir);
  std::vector<int32_t> ids(static_cast<size_t>(cfg.vocab_size));
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] =
        static_cast<int32_t>((i * 7919) % static_cast<size_t>(cfg.engram_compressed_vocab_size));
  return CompressedTokenMap(std::move(ids), cfg.engram_compressed_vocab_size, "test map");
}

// On one checkpoint: the CPU reference at `prec`, the CPU at `ref` (a yardstick precision) and the
// GPU at `prec` with `co`.
struct ThreeModels {
  std::unique_ptr<ForwardModel> cpu, ref, gpu;
};
ThreeModels load_three(const fs::path& model_dir, Precision prec, Precision ref,
                       const CudaForwardOptions& co) {
  ForwardOptions fo;
  fo.precision = prec;
  ForwardOptions fr;
  fr.precision = ref;
  return {load_cpu_forward_model(model_dir, fo, token_map_for(model_dir)),
          load_cpu_forward_model(model_dir, fr, token_map_for(model_dir)),
          load_cuda_forward_model(model_dir, fo, co, token_map_for(model_dir))};
}

// The synthetic model is random and chaotic: wherever two fp32 runs round a value differently
// next to a quantisation boundary (FP8 / FP4 codes, top-k), they continue on different paths, so
// logits of two correct fp32 engines differ by far more than rounding. The yardstick is the CPU
// reference itself: the CUDA run's distance to the CPU fp32 run must be of the order of the CPU
// fp32 run's own distance to the fp64 run (a wrong kernel gives uncorrelated logits: rel > 1).
void run_production_dims(bool tensor_core_linears, double factor) {
  testing::TempDir dir("di-cuda-forward");
  const fs::path model_dir = synth_real_attention_model(dir.path());
  CudaForwardOptions co;
  co.tensor_core_linears = tensor_core_linears;
  auto [cpu, cpu64, gpu] = load_three(model_dir, Precision::kFp32, Precision::kFp64, co);
  // 1100 tokens: ratio-2 owners hold 550 compressed entries and ratio-1 owners 1100, more than
  // top-512; the candidate pool (48 blocks of 8 = 384 positions) restricts the Reindex layers.
  const std::vector<int64_t> prompt = random_prompt(1100, 5, cpu->vocab_size());
  auto sc = cpu->new_sequence();
  auto s64 = cpu64->new_sequence();
  auto sg = gpu->new_sequence();
  double worst_gpu = 0, worst_ref = 0;
  auto step = [&](std::span<const int64_t> ids, const std::string& what) {
    SequenceChunk cc{sc.get(), ids}, c64{s64.get(), ids}, gc{sg.get(), ids};
    const ForwardResult rc = cpu->forward({&cc, 1});
    const ForwardResult r64 = cpu64->forward({&c64, 1});
    const ForwardResult rg = gpu->forward({&gc, 1});
    for (double v : rg.logits[0])
      EXPECT_TRUE(std::isfinite(v)) << what << ": non-finite GPU logit";
    const double gpu_rel = rel_err(rg.logits[0], rc.logits[0]);
    const double ref_rel = rel_err(rc.logits[0], r64.logits[0]);
    worst_gpu = std::max(worst_gpu, gpu_rel);
    worst_ref = std::max(worst_ref, ref_rel);
    std::printf("%s: |gpu - cpu32| %.3g, |cpu32 - cpu64| %.3g\n", what.c_str(), gpu_rel, ref_rel);
    EXPECT_LE(gpu_rel, std::max(2e-3, factor * ref_rel)) << what;
    return argmax(r64.logits[0]);
  };
  size_t at = 0;
  int64_t next = 0;
  for (size_t len : {size_t{700}, size_t{400}}) {
    next = step(std::span<const int64_t>(prompt.data() + at, len),
                "prefill chunk at " + std::to_string(at));
    at += len;
  }
  for (int k = 0; k < 4; ++k) {
    const int64_t id = next;
    next = step({&id, 1}, "decode step " + std::to_string(k));
  }
  EXPECT_EQ(sg->num_tokens(), sc->num_tokens());
  std::printf(
      "CUDA (%s linears) at production attention dims: max |gpu - cpu32| %.3g, max "
      "|cpu32 - cpu64| %.3g\n",
      tensor_core_linears ? "tensor-core" : "exact-order", worst_gpu, worst_ref);
}

TEST(CudaForward, MatchesCpuAtProductionAttentionDims) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  run_production_dims(false, 3.0);
}

TEST(CudaForward, TensorCoreLinearsStayCloseToCpu) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  run_production_dims(true, 4.0);
}

fs::path fixture_dir() {
  if (const char* env = std::getenv("DI_FIXTURE_DIR")) return env;
  return testing_support::kTinyFixtureA;
}

// Every case of the tiny fixture by the README's float32 rule (first divergence only at a recorded
// quantisation / top-k near-tie), both index-key behaviours, DSpark included: what
// `deepinfer replay-fixture --backend cuda --precision fp32` prints.
TEST(CudaForward, TinyFixtureReplaysByTheFp32Rule) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const fs::path dir = fixture_dir();
  if (!fs::exists(dir / "cases.safetensors")) GTEST_SKIP() << "fixture absent: " << dir;
  for (const IndexKeyQuirk quirk : {IndexKeyQuirk::kIntended, IndexKeyQuirk::kShipped}) {
    ForwardOptions fo;
    fo.precision = Precision::kFp32;
    fo.quirk = quirk;
    auto gpu = load_cuda_forward_model(dir, fo);
    ReplayOptions ro;
    ro.precision = Precision::kFp32;
    ro.quirk = quirk;
    const ReplayReport report = replay_fixture(dir, *gpu, ro);
    EXPECT_FALSE(report.cases.empty());
    for (const CaseReport& c : report.cases) {
      EXPECT_TRUE(c.pass()) << c.name
                            << (c.comparisons.empty() || c.comparisons[0].failures.empty()
                                    ? std::string()
                                    : ": " + c.comparisons[0].failures[0]);
    }
  }
}

// The GPU drafter (CudaForwardOptions::drafter kGpu: the stage blocks, the draft-block attention,
// the head and the Markov loop on the device) is the default, which the fp32-rule replays above
// cover. Here the fixture's every case, DSpark outputs included, by the bf16 rule with it, and by
// both rules with the CPU reference drafting inside the CUDA model (drafter kCpuReference).
TEST(CudaForward, TinyFixtureDsparkOnTheGpuAndOnTheCpuReplays) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const fs::path dir = fixture_dir();
  if (!fs::exists(dir / "cases.safetensors")) GTEST_SKIP() << "fixture absent: " << dir;
  for (const auto& [prec, on_gpu] :
       {std::pair{Precision::kBf16, true}, std::pair{Precision::kFp32, false},
        std::pair{Precision::kBf16, false}}) {
    ForwardOptions fo;
    fo.precision = prec;
    CudaForwardOptions co;
    co.drafter = on_gpu ? DsparkDrafter::kGpu : DsparkDrafter::kCpuReference;
    auto gpu = load_cuda_forward_model(dir, fo, co);
    ReplayOptions ro;
    ro.precision = prec;
    const ReplayReport report = replay_fixture(dir, *gpu, ro);
    EXPECT_FALSE(report.cases.empty());
    for (const CaseReport& c : report.cases) {
      EXPECT_TRUE(c.pass()) << (prec == Precision::kFp32 ? "fp32 " : "bf16 ")
                            << (on_gpu ? "gpu drafter " : "cpu drafter ") << c.name
                            << (c.comparisons.empty() || c.comparisons[0].failures.empty()
                                    ? std::string()
                                    : ": " + c.comparisons[0].failures[0]);
    }
  }
}

// Loaded without a drafter (CudaForwardOptions::drafter kNone, as the engine loads), the model
// runs the backbone as with one, and drafting is a clear error, not a crash.
TEST(CudaForward, DraftingWithoutADrafterIsAClearError) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const fs::path dir = fixture_dir();
  if (!fs::exists(dir / "cases.safetensors")) GTEST_SKIP() << "fixture absent: " << dir;
  ForwardOptions fo;
  fo.precision = Precision::kFp32;
  CudaForwardOptions none;
  none.drafter = DsparkDrafter::kNone;
  auto bare = load_cuda_forward_model(dir, fo, none);
  auto full = load_cuda_forward_model(dir, fo);
  const std::vector<int64_t> prompt = random_prompt(12, 5, bare->vocab_size());
  auto sb = bare->new_sequence();
  auto sf = full->new_sequence();
  SequenceChunk cb{sb.get(), prompt}, cf{sf.get(), prompt};
  const ForwardResult rb = bare->forward({&cb, 1});
  const ForwardResult rf = full->forward({&cf, 1});
  EXPECT_EQ(rb.logits, rf.logits);  // the backbone does not depend on the drafter
  try {
    bare->dspark_prefill(*sb, rb.main_hidden[0]);
    ADD_FAILURE() << "dspark_prefill without a drafter did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("without its drafter"), std::string::npos) << e.what();
  }
  const DraftRequest q{sb.get(), 1, &rb.main_hidden[0].back()};
  EXPECT_THROW(bare->dspark_steps({&q, 1}), Error);
}

// The wgmma attention kernel is bf16's: asking for it in an fp32 model fails at load, naming the
// option; mma-sync loads in either precision.
TEST(CudaForward, WgmmaAttentionInFp32IsAClearError) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const fs::path dir = fixture_dir();
  if (!fs::exists(dir / "config.json")) GTEST_SKIP() << "fixture absent: " << dir;
  ForwardOptions fo;
  fo.precision = Precision::kFp32;
  CudaForwardOptions co;
  co.drafter = DsparkDrafter::kNone;
  co.attention_kernel = AttnTensorKernel::kWgmma;
  const std::string err = di::test::error_of([&] { load_cuda_forward_model(dir, fo, co); });
  EXPECT_NE(err.find("--attention-kernel wgmma"), std::string::npos) << err;
  co.attention_kernel = AttnTensorKernel::kMmaSync;
  EXPECT_NE(load_cuda_forward_model(dir, fo, co), nullptr);
}

// The GPU drafter against the CPU reference's drafter at the production attention dims (64 x 512
// heads, window 128: the tensor-core draft-block attention in bf16, the fp32 one in fp32), fed
// the same taps and input ids after a 300-token prompt (the stage rings wrapped). Yardstick as
// above: the CPU's own distance between two precisions; rows are compared while the drafts before
// them agree (the Markov bias follows the previous draft), and a draft that differs from the
// CPU's must be a near-tie by the same yardstick.
void run_dspark_production_dims(Precision prec) {
  testing::TempDir dir("di-cuda-dspark");
  const fs::path model_dir = synth_real_attention_model(dir.path());
  CudaForwardOptions co;  // the GPU drafter (the default)
  // The yardstick: fp64 for fp32, fp32 for bf16.
  auto [cpu, ref, gpu] = load_three(
      model_dir, prec, prec == Precision::kFp32 ? Precision::kFp64 : Precision::kFp32, co);
  const std::vector<int64_t> prompt = random_prompt(300, 23, cpu->vocab_size());
  auto sc = cpu->new_sequence();
  auto sr = ref->new_sequence();
  auto sg = gpu->new_sequence();
  // The backbones run on their own; every drafter gets the CPU backbone's taps.
  auto both = [&](std::span<const int64_t> ids) {
    SequenceChunk cc{sc.get(), ids}, rc{sr.get(), ids}, gc{sg.get(), ids};
    const ForwardResult r = cpu->forward({&cc, 1});
    ref->forward({&rc, 1});
    gpu->forward({&gc, 1});
    return r;
  };
  ForwardResult r = both(prompt);
  ASSERT_EQ(r.main_hidden[0].size(), prompt.size());
  cpu->dspark_prefill(*sc, r.main_hidden[0]);
  ref->dspark_prefill(*sr, r.main_hidden[0]);
  gpu->dspark_prefill(*sg, r.main_hidden[0]);
  const double floor = prec == Precision::kFp32 ? 2e-3 : 0.5;
  const double factor = prec == Precision::kFp32 ? 3.0 : 2.0;
  int64_t compared = 0;
  for (int k = 0; k < 3; ++k) {
    const int64_t id = argmax(r.logits[0]);
    r = both({&id, 1});
    const int64_t input = argmax(r.logits[0]);
    const DraftResult dc = cpu->dspark_step(*sc, input, r.main_hidden[0].back());
    const DraftResult dr = ref->dspark_step(*sr, input, r.main_hidden[0].back());
    const DraftResult dg = gpu->dspark_step(*sg, input, r.main_hidden[0].back());
    ASSERT_EQ(dg.draft_ids.size(), dc.draft_ids.size());
    ASSERT_EQ(dg.logits.size(), dc.logits.size());
    for (size_t j = 0; j < dc.draft_ids.size(); ++j) {
      for (double v : dg.logits[j])
        ASSERT_TRUE(std::isfinite(v)) << "step " << k << " row " << j;
      ASSERT_TRUE(std::isfinite(dg.confidence[j])) << "step " << k << " row " << j;
      if (j > 0 && (dg.draft_ids[j - 1] != dc.draft_ids[j - 1] ||
                    dr.draft_ids[j - 1] != dc.draft_ids[j - 1])) {
        break;  // different Markov inputs from here on
      }
      const double gpu_rel = rel_err(dg.logits[j], dc.logits[j]);
      const double ref_rel = rel_err(dr.logits[j], dc.logits[j]);
      const double conf_gpu = std::fabs(dg.confidence[j] - dc.confidence[j]);
      const double conf_ref = std::fabs(dr.confidence[j] - dc.confidence[j]);
      std::printf(
          "step %d row %zu: logits |gpu - cpu| %.3g (yardstick %.3g), confidence |gpu - cpu| "
          "%.3g (yardstick %.3g)\n",
          k, j, gpu_rel, ref_rel, conf_gpu, conf_ref);
      EXPECT_LE(gpu_rel, std::max(floor, factor * ref_rel)) << "step " << k << " row " << j;
      EXPECT_LE(conf_gpu, std::max(floor * (1.0 + std::fabs(dc.confidence[j])), factor * conf_ref))
          << "step " << k << " row " << j;
      // The greedy draft is the CPU's, or a near-tie of it: the CPU's logit at the GPU's draft
      // is within `factor` times the largest elementwise distance between the two CPU
      // precisions of the CPU's maximum (in bf16 that distance is a few tenths, and a random
      // model's top logits over 129,280 entries lie closer than that).
      double spread = 0.0;
      for (size_t v = 0; v < dc.logits[j].size(); ++v)
        spread = std::max(spread, std::fabs(double(dr.logits[j][v]) - double(dc.logits[j][v])));
      const auto at = [&](int64_t t) { return double(dc.logits[j][static_cast<size_t>(t)]); };
      if (dg.draft_ids[j] != dc.draft_ids[j]) {
        std::printf(
            "step %d row %zu: draft %lld (cpu logit %.4g) vs cpu %lld (%.4g), spread %.3g\n", k, j,
            static_cast<long long>(dg.draft_ids[j]), at(dg.draft_ids[j]),
            static_cast<long long>(dc.draft_ids[j]), at(dc.draft_ids[j]), spread);
      }
      EXPECT_GE(at(dg.draft_ids[j]), at(dc.draft_ids[j]) - factor * spread)
          << "step " << k << " row " << j;
      ++compared;
    }
  }
  EXPECT_GE(compared, 3);  // at least every step's first row
}

TEST(CudaForward, DsparkOnTheGpuMatchesTheCpuDrafterFp32) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  run_dspark_production_dims(Precision::kFp32);
}

TEST(CudaForward, DsparkOnTheGpuMatchesTheCpuDrafterBf16) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  run_dspark_production_dims(Precision::kBf16);
}

// The GPU drafter's batched step (dspark_steps): each sequence's drafts, logits and confidences
// are bitwise what it gets drafted alone — on the fixture (generic attention, fp32 exact order)
// and at the production attention dims in bf16 (tensor-core kernels) — with prompts of different
// lengths (ring partly filled, wrapped). In the second step one sequence asks for no logits: it
// gets none, and nothing else changes.
void expect_batched_drafts_bitwise(const fs::path& model_dir, Precision prec,
                                   std::optional<CompressedTokenMap> map) {
  ForwardOptions fo;
  fo.precision = prec;
  CudaForwardOptions co;  // the GPU drafter (the default)
  auto gpu = load_cuda_forward_model(model_dir, fo, co, std::move(map));
  std::vector<std::vector<int64_t>> prompts;
  for (const size_t len : {size_t{9}, size_t{200}, size_t{40}})
    prompts.push_back(random_prompt(len, 41 + len, gpu->vocab_size()));
  testing_support::DraftPairs pairs = testing_support::make_draft_pairs(*gpu, prompts);
  for (int k = 0; k < 2; ++k) {  // two drafting steps: the rings advance
    std::vector<DraftRequest> requests = pairs.requests();
    if (k == 1) requests[1].logits = false;
    const std::vector<DraftResult> together = gpu->dspark_steps(requests);
    ASSERT_EQ(together.size(), prompts.size());
    for (size_t b = 0; b < prompts.size(); ++b) {
      const DraftResult one = gpu->dspark_step(*pairs.alone[b], pairs.inputs[b], pairs.taps[b]);
      EXPECT_EQ(together[b].draft_ids, one.draft_ids) << "step " << k << " sequence " << b;
      EXPECT_EQ(together[b].confidence, one.confidence) << "step " << k << " sequence " << b;
      ASSERT_EQ(one.logits.size(), one.draft_ids.size());
      if (requests[b].logits) {
        EXPECT_TRUE(together[b].logits == one.logits) << "step " << k << " sequence " << b;
      } else {
        EXPECT_TRUE(together[b].logits.empty()) << "step " << k << " sequence " << b;
      }
    }
  }
}

TEST(CudaForward, DsparkBatchedStepsEqualEachSequenceAloneBitwise) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const fs::path dir = fixture_dir();
  if (fs::exists(dir / "cases.safetensors")) {
    expect_batched_drafts_bitwise(dir, Precision::kFp32, std::nullopt);
  }
  testing::TempDir tmp("di-cuda-dspark-batch");
  const fs::path model_dir = synth_real_attention_model(tmp.path());
  expect_batched_drafts_bitwise(model_dir, Precision::kBf16, token_map_for(model_dir));
}

// The bf16 precision (fixtures README §6.6): every case passes the first-divergence rule against
// the bf16 values, and the GPU's bf16 run is the reference's bf16 semantics rather than fp32 with
// noise: its argmaxes agree with the bf16 reference more often than the CPU fp32 engine's do (the
// CPU bf16 oracle: 71 vs 43 of 134 rows on fixture A; tests/integration/v41_forward_test.cc).
TEST(CudaForward, TinyFixtureBf16TracksTheBf16Reference) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const fs::path dir = fixture_dir();
  if (!fs::exists(dir / "cases.safetensors")) GTEST_SKIP() << "fixture absent: " << dir;
  auto top1 = [](const ReplayReport& r) {
    int64_t agree = 0;
    for (const CaseReport& c : r.cases)
      agree += c.comparisons.at(0).top1_agree;
    return agree;
  };
  ReplayOptions ro;
  ro.precision = Precision::kBf16;
  ForwardOptions fo;
  fo.precision = Precision::kBf16;
  auto gpu = load_cuda_forward_model(dir, fo);
  const ReplayReport r16 = replay_fixture(dir, *gpu, ro);
  for (const CaseReport& c : r16.cases) {
    EXPECT_TRUE(c.pass()) << c.name
                          << (c.comparisons.empty() || c.comparisons[0].failures.empty()
                                  ? std::string()
                                  : ": " + c.comparisons[0].failures[0]);
  }
  fo.precision = Precision::kFp32;
  auto cpu32 = load_cpu_forward_model(dir, fo);
  const ReplayReport r32 = replay_fixture(dir, *cpu32, ro);
  std::printf("top-1 agreement with the bf16 reference: CUDA bf16 %lld, CPU fp32 %lld\n",
              static_cast<long long>(top1(r16)), static_cast<long long>(top1(r32)));
  EXPECT_GT(top1(r16), top1(r32));
}

// The bf16 precision at the production attention dims against the CPU bf16 oracle. Both are
// chaotic (one bf16 rounding the other way flips FP8 codes downstream), so the yardstick is how
// far the CPU's own fp32 run is from its bf16 run; a wrong layout or precision mismatch gives
// uncorrelated logits (max |d| / std of several).
TEST(CudaForward, Bf16AtProductionAttentionDimsTracksTheCpuOracle) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  testing::TempDir dir("di-cuda-bf16");
  const fs::path model_dir = synth_real_attention_model(dir.path());
  auto [cpu16, cpu32, gpu16] = load_three(model_dir, Precision::kBf16, Precision::kFp32, {});
  const std::vector<int64_t> prompt = random_prompt(600, 17, gpu16->vocab_size());
  auto s16 = cpu16->new_sequence();
  auto s32 = cpu32->new_sequence();
  auto sg = gpu16->new_sequence();
  std::vector<int64_t> ids = prompt;
  for (int k = 0; k < 3; ++k) {
    SequenceChunk a{s16.get(), ids}, b{s32.get(), ids}, c{sg.get(), ids};
    const ForwardResult r16 = cpu16->forward({&a, 1});
    const ForwardResult r32 = cpu32->forward({&b, 1});
    const ForwardResult rg = gpu16->forward({&c, 1});
    for (double v : rg.logits[0])
      ASSERT_TRUE(std::isfinite(v)) << "step " << k;
    const double gpu_rel = rel_err(rg.logits[0], r16.logits[0]);
    const double ref_rel = rel_err(r32.logits[0], r16.logits[0]);
    std::printf("step %d: |gpu16 - cpu16| %.3g, |cpu32 - cpu16| %.3g\n", k, gpu_rel, ref_rel);
    EXPECT_LE(gpu_rel, std::max(0.5, 2.0 * ref_rel)) << "step " << k;
    ids = {argmax(r16.logits[0])};  // decode steps: the oracle's greedy token for all three
  }
}

// The prefill cases whose fp32 run records no near-tie agree with fp64 as tightly as the CPU's
// fp32 path (README §6.4: within 1e-4; the CPU reaches ~2e-6).
TEST(CudaForward, TinyFixturePrefillsAreTight) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const fs::path dir = fixture_dir();
  if (!fs::exists(dir / "cases.safetensors")) GTEST_SKIP() << "fixture absent: " << dir;
  SafetensorsFile cases((dir / "cases.safetensors").string());
  ForwardOptions fo;
  fo.precision = Precision::kFp32;
  auto gpu = load_cuda_forward_model(dir, fo);
  for (const char* name : {"prefill.L1", "prefill.L2", "prefill.L5", "prefill.L40"}) {
    auto ids_view = cases.view(std::string(name) + ".input_ids").as<int64_t>();
    const std::vector<int64_t> ids(ids_view.begin(), ids_view.end());
    auto st = gpu->new_sequence();
    SequenceChunk chunk{st.get(), ids};
    const ForwardResult r = gpu->forward({&chunk, 1});
    const auto expected = cases.view(std::string(name) + ".fp64.logits").as<double>();
    const double rel = rel_err(r.logits[0], expected);
    EXPECT_LE(rel, 1e-5) << name;
    EXPECT_EQ(argmax(r.logits[0]), argmax(expected)) << name;
    std::printf("%s: rel %.3g\n", name, rel);
  }
}

// The engine on the CUDA backend (continuous batching, chunked prefill; each engine step one
// batched GPU forward): greedy ids of the fixture's prompts equal the CPU fp32 backend's.
TEST(CudaForward, EngineGreedyIdsEqualTheCpuBackend) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const fs::path dir = fixture_dir();
  if (!fs::exists(dir / "cases.safetensors")) GTEST_SKIP() << "fixture absent: " << dir;
  SafetensorsFile cases((dir / "cases.safetensors").string());
  const ConstTensorView v = cases.view("greedy.prompt_ids");
  const auto data = v.as<int64_t>();
  std::vector<deepinfer::Prompt> prompts;
  for (int64_t r = 0; r < v.shape[0]; ++r) {
    prompts.emplace_back(
        std::vector<int64_t>(data.begin() + r * v.shape[1], data.begin() + (r + 1) * v.shape[1]));
  }
  testing::TempDir cache("di-cuda-engine");
  deepinfer::SamplingParams sp;
  sp.temperature = 0;
  sp.ignore_eos = true;
  sp.max_tokens = 24;
  std::vector<std::vector<int64_t>> ids[2];
  for (int b = 0; b < 2; ++b) {
    deepinfer::EngineConfig cfg;
    cfg.backend = b == 0 ? "cpu" : "cuda";
    cfg.precision = "fp32";
    cfg.cache_dir = cache.path();
    cfg.max_num_batched_tokens = 64;  // chunked prefill of the longer prompts
    deepinfer::LLM llm(dir, cfg);
    for (const deepinfer::RequestOutput& o : llm.generate(prompts, sp)) {
      ASSERT_EQ(o.error, "") << cfg.backend;
      ids[b].push_back(o.outputs[0].token_ids);
    }
  }
  ASSERT_EQ(ids[0].size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(ids[1][i], ids[0][i]) << "prompt " << i;
}

// The engine samples on the GPU by default (the GPU sampler over the device logits, only ids and
// logprobs copied back): the same tokens and logprobs as copying the logits back and sampling
// them on the host, across greedy, temperature / top-p / top-k / min-p, penalties, min_tokens and
// logprobs, with chunked prefill and requests of different parameters in one batch.
TEST(CudaForward, EngineSamplesOnTheGpuAsOnTheHost) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const fs::path dir = fixture_dir();
  if (!fs::exists(dir / "config.json")) GTEST_SKIP() << "fixture absent: " << dir;
  std::vector<deepinfer::Prompt> prompts;
  std::vector<deepinfer::SamplingParams> params;
  std::mt19937_64 rng(5);
  for (int i = 0; i < 12; ++i) {
    std::vector<int64_t> ids(static_cast<size_t>(3 + (i * 37) % 90));
    for (auto& id : ids)
      id = 3 + static_cast<int64_t>(rng() % 1000);
    prompts.emplace_back(std::move(ids));
    deepinfer::SamplingParams sp;
    sp.max_tokens = 20;
    sp.seed = 100 + i;
    sp.temperature = i % 4 == 0 ? 0.0 : 0.6 + 0.1 * (i % 5);
    if (i % 3 == 1) sp.top_p = 0.85;
    if (i % 3 == 2) sp.top_k = 30;
    if (i % 5 == 3) sp.min_p = 0.02;
    if (i % 4 == 1) sp.logprobs = 3 + i % 4;
    if (i % 6 == 5) {
      sp.repetition_penalty = 1.2;
      sp.frequency_penalty = 0.3;
      sp.presence_penalty = 0.1;
    }
    if (i == 7) sp.min_tokens = 10;
    params.push_back(sp);
  }
  testing::TempDir cache("di-cuda-sampling");
  std::vector<deepinfer::RequestOutput> outs[2];
  for (int b = 0; b < 2; ++b) {
    deepinfer::EngineConfig cfg;
    cfg.backend = "cuda";
    cfg.precision = "bf16";
    cfg.cache_dir = cache.path();
    cfg.max_num_batched_tokens = 96;  // chunked prefill
    cfg.backend_sampling = b == 1;
    deepinfer::LLM llm(dir, cfg);
    outs[b] = llm.generate(prompts, params);
  }
  ASSERT_EQ(outs[0].size(), prompts.size());
  ASSERT_EQ(outs[1].size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto& h = outs[0][i].outputs[0];
    const auto& g = outs[1][i].outputs[0];
    ASSERT_EQ(outs[0][i].error, "") << i;
    ASSERT_EQ(outs[1][i].error, "") << i;
    EXPECT_EQ(g.token_ids, h.token_ids) << "request " << i;
    ASSERT_EQ(g.logprobs.size(), h.logprobs.size()) << i;
    for (size_t k = 0; k < h.logprobs.size(); ++k) {
      ASSERT_EQ(g.logprobs[k].size(), h.logprobs[k].size()) << i << " position " << k;
      for (const auto& [tok, lp] : h.logprobs[k]) {
        ASSERT_TRUE(g.logprobs[k].contains(tok)) << i << " position " << k << " token " << tok;
        EXPECT_NEAR(g.logprobs[k].at(tok).logprob, lp.logprob, 1e-9) << i << " position " << k;
        EXPECT_EQ(g.logprobs[k].at(tok).rank, lp.rank) << i << " position " << k;
      }
    }
    EXPECT_NEAR(g.cumulative_logprob, h.cumulative_logprob, 1e-8) << i;
  }
}

// The chunks of one forward call run as one batched step, each sequence with its own arithmetic
// (row-wise kernels, per-row page tables, exact-order linears): a sequence's logits and DSpark
// taps are bitwise the same alone and in any batch: prefill chunks of different lengths together,
// a step mixing a prefill with decodes, batched decodes in another order, a sequence alone again.
TEST(CudaForward, BatchedStepsEqualEachSequenceAloneBitwise) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  testing::TempDir dir("di-cuda-batch");
  const fs::path model_dir = synth_real_attention_model(dir.path());
  ForwardOptions fo;
  fo.precision = Precision::kFp32;
  auto gpu = load_cuda_forward_model(model_dir, fo, {}, token_map_for(model_dir));
  std::mt19937_64 rng(9);
  std::uniform_int_distribution<int64_t> tok(3, gpu->vocab_size() - 1);
  auto tokens = [&](size_t n) {
    std::vector<int64_t> v(n);
    for (auto& id : v)
      id = tok(rng);
    return v;
  };
  // Per sequence: a prompt, then three decode tokens (teacher-forced).
  const std::vector<std::vector<int64_t>> prompts = {tokens(700), tokens(129), tokens(5)};
  const std::vector<std::vector<int64_t>> steps = {tokens(3), tokens(3), tokens(3)};
  using Out = std::pair<std::vector<double>, std::vector<std::vector<double>>>;  // logits, taps
  std::vector<std::vector<Out>> alone(3);
  for (size_t q = 0; q < 3; ++q) {
    auto st = gpu->new_sequence();
    SequenceChunk c{st.get(), prompts[q]};
    ForwardResult r = gpu->forward({&c, 1});
    alone[q].emplace_back(r.logits[0], r.main_hidden[0]);
    for (int64_t id : steps[q]) {
      SequenceChunk d{st.get(), std::span<const int64_t>(&id, 1)};
      r = gpu->forward({&d, 1});
      alone[q].emplace_back(r.logits[0], r.main_hidden[0]);
    }
  }
  std::vector<std::unique_ptr<SequenceState>> st;
  for (int q = 0; q < 3; ++q)
    st.push_back(gpu->new_sequence());
  std::vector<size_t> done(3, 0);  // forwards of each sequence so far
  // Each batched step: (sequence, its next forward) in the listed order.
  const std::vector<std::vector<size_t>> schedule = {{0, 1}, {2, 0, 1}, {0, 1, 2}, {2, 1, 0}, {2}};
  for (size_t k = 0; k < schedule.size(); ++k) {
    std::vector<SequenceChunk> chunks;
    for (size_t q : schedule[k]) {
      const size_t f = done[q];
      const std::span<const int64_t> ids =
          f == 0 ? std::span<const int64_t>(prompts[q])
                 : std::span<const int64_t>(steps[q]).subspan(f - 1, 1);
      chunks.push_back({st[q].get(), ids});
    }
    const ForwardResult r = gpu->forward(chunks);
    for (size_t j = 0; j < schedule[k].size(); ++j) {
      const size_t q = schedule[k][j];
      const Out& want = alone[q][done[q]];
      EXPECT_EQ(r.logits[j], want.first) << "step " << k << ", sequence " << q;
      EXPECT_EQ(r.main_hidden[j], want.second) << "step " << k << ", sequence " << q << " taps";
      ++done[q];
    }
  }
  for (size_t q = 0; q < 3; ++q) {
    EXPECT_EQ(done[q], alone[q].size()) << q;
    EXPECT_EQ(st[q]->num_tokens(), static_cast<int64_t>(prompts[q].size() + 3)) << q;
  }
}

// The device cache is a fixed pool of pages: a sequence that does not fit fails with an error
// naming the cache, the pool keeps working, and a finished sequence's pages come back.
TEST(CudaForward, KvCachePoolFullIsAnErrorAndPagesComeBack) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  testing::TempDir dir("di-cuda-pool");
  const fs::path model_dir = synth_real_attention_model(dir.path());
  ForwardOptions fo;
  fo.precision = Precision::kFp32;
  CudaForwardOptions co;
  co.kv_cache_bytes = 4u << 20;  // 64 pages of 64 KiB
  auto gpu = load_cuda_forward_model(model_dir, fo, co, token_map_for(model_dir));
  std::vector<int64_t> ids(600, 7);
  {
    auto st = gpu->new_sequence();
    const std::vector<int64_t> huge(20000, 7);
    SequenceChunk c{st.get(), huge};
    try {
      gpu->forward({&c, 1});
      ADD_FAILURE() << "no error for a sequence larger than the cache";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("KV cache is full"), std::string::npos) << e.what();
    }
    EXPECT_EQ(st->num_tokens(), 0);
  }
  // Far more sequences in turn than the pool holds at once: each returns its pages.
  std::vector<double> first;
  for (int k = 0; k < 40; ++k) {
    auto st = gpu->new_sequence();
    SequenceChunk c{st.get(), ids};
    const ForwardResult r = gpu->forward({&c, 1});
    if (k == 0) first = r.logits[0];
    EXPECT_EQ(r.logits[0], first) << "sequence " << k;  // same prompt, same logits
  }
}

}  // namespace
}  // namespace di::cuda_forward_test
