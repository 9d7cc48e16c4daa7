// kernel_trace_diff A.csv B.csv [--steps N] [--top K]
//
// Two kernel traces of the same work (`cuda_forward_bench --kernel-trace CSV`, e.g. main and a
// branch from `scripts/gpu_ab_run.sh --trace`), compared per kernel name: launches and "from
// prev" µs per step on each side and B - A, the largest differences first (the deltas add up to
// the difference of the spans; bench/kernel_timeline.h). --steps: the decode steps the traces
// cover (the bench's --decode), default 1; --top: rows shown before the rest is summed, default
// 15. Host code only: runs here on the CSVs a device call brought back.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "kernel_timeline.h"

int main(int argc, char** argv) {
  std::string paths[2];
  int n_paths = 0;
  double steps = 1;
  long top = 15;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
      steps = std::atof(argv[++i]);
    } else if (std::strcmp(argv[i], "--top") == 0 && i + 1 < argc) {
      top = std::atol(argv[++i]);
    } else if (argv[i][0] != '-' && n_paths < 2) {
      paths[n_paths++] = argv[i];
    } else {
      n_paths = -1;
      break;
    }
  }
  if (n_paths != 2 || !(steps >= 1) || top < 1) {
    std::fprintf(stderr,
                 "usage: %s A.csv B.csv [--steps N >= 1] [--top K >= 1]\n"
                 "  (CSVs of cuda_forward_bench --kernel-trace)\n",
                 argv[0]);
    return 2;
  }
  try {
    const auto a = di::bench::summarize_kernels(di::bench::read_kernel_csv(paths[0]));
    const auto b = di::bench::summarize_kernels(di::bench::read_kernel_csv(paths[1]));
    std::printf("A = %s\nB = %s\n", paths[0].c_str(), paths[1].c_str());
    di::bench::print_kernel_diff(di::bench::diff_kernels(a, b), a, b, steps,
                                 static_cast<size_t>(top));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
