// loader_bench MODEL_DIR [--repeat N] [--verify-scales]
// Times open + catalogue validation (+ the inspect accounting) of a checkpoint directory and
// reports peak RSS. Zero-copy means RSS stays far below the checkpoint size: only headers are
// read (and the E8M0 scale payloads with --verify-scales).

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "common/error.h"
#include "config/model_config.h"
#include "loader/checkpoint.h"
#include "model/catalogue_check.h"
#include "model/model_stats.h"
#include "model/weight_catalogue.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL_DIR [--repeat N] [--verify-scales]\n", argv[0]);
    return 2;
  }
  std::string dir = argv[1];
  int repeat = 3;
  bool verify_scales = false;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) repeat = std::atoi(argv[++i]);
    if (std::strcmp(argv[i], "--verify-scales") == 0) verify_scales = true;
  }
  try {
    double best = 1e30, total = 0;
    uint64_t tensors = 0, bytes = 0, scanned = 0;
    for (int r = 0; r < repeat; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      const di::ModelConfig cfg = di::load_model_config(dir);
      const di::WeightCatalogue cat = di::build_weight_catalogue(cfg);
      const di::Checkpoint ckpt = di::Checkpoint::open(dir);
      di::CatalogueReport rep = di::check_catalogue(ckpt, cat);
      if (verify_scales) di::check_scale_bytes(ckpt, cat, rep);
      di::throw_if_problems(rep, dir);
      const di::StateBytes st = di::compute_state_bytes(cfg, cat.plan());
      const di::EpPlan ep = di::plan_expert_parallel(cat, 8);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::min(best, s);
      total += s;
      tensors = ckpt.num_tensors();
      bytes = ckpt.total_bytes();
      scanned = rep.scale_bytes_scanned;
      (void)st;
      (void)ep;
    }
    struct rusage ru {};
    getrusage(RUSAGE_SELF, &ru);
    std::printf("checkpoint: %s\n", dir.c_str());
    std::printf("tensors: %llu  payload: %s  scale bytes scanned: %s\n",
                static_cast<unsigned long long>(tensors), di::format_bytes(bytes).c_str(),
                di::format_bytes(scanned).c_str());
    std::printf("open+validate+inspect: best %.3f s, mean %.3f s over %d run(s)\n", best,
                total / repeat, repeat);
    std::printf("peak RSS: %.1f MB\n", static_cast<double>(ru.ru_maxrss) / 1024.0);
    return 0;
  } catch (const di::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
