#include "progress.h"

#include <unistd.h>

#include <cstdio>
#include <string>

#include "common/logging.h"

namespace di::cli {

Progress::Progress(int64_t total, bool enabled)
    : total_(total),
      enabled_(enabled),
      tty_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

Progress::~Progress() {
  finish();
}

void Progress::update(int64_t done, int64_t input_tokens, int64_t output_tokens) {
  done_ = done;
  input_ = input_tokens;
  output_ = output_tokens;
  const auto now = std::chrono::steady_clock::now();
  const double since = std::chrono::duration<double>(now - last_draw_).count();
  if (since >= (tty_ ? 0.1 : 5.0)) draw(false);
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  draw(true);
}

namespace {

std::string clock_text(double seconds) {
  const auto s = static_cast<int64_t>(seconds);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", static_cast<long>(s / 3600),
                  static_cast<long>(s / 60 % 60), static_cast<long>(s % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%02ld:%02ld", static_cast<long>(s / 60),
                  static_cast<long>(s % 60));
  }
  return buf;
}

}  // namespace

void Progress::draw(bool final) {
  if (!enabled_ || total_ <= 0) return;
  last_draw_ = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(last_draw_ - start_).count();
  const double rate = elapsed > 0 ? static_cast<double>(done_) / elapsed : 0.0;
  const double in_tps = elapsed > 0 ? static_cast<double>(input_) / elapsed : 0.0;
  const double out_tps = elapsed > 0 ? static_cast<double>(output_) / elapsed : 0.0;
  const double frac = static_cast<double>(done_) / static_cast<double>(total_);
  const double remaining = rate > 0 ? static_cast<double>(total_ - done_) / rate : 0.0;
  if (!tty_) {
    DI_LOG_INFO(
        "Processed prompts: {}/{} [{}<{}, {:.2f}it/s, est. speed input: {:.1f} toks/s, "
        "output: {:.1f} toks/s]",
        done_, total_, clock_text(elapsed), clock_text(remaining), rate, in_tps, out_tps);
    return;
  }
  constexpr int kWidth = 10;
  static const char* const kEighths[] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
  const double cells = frac * kWidth;
  const int full = static_cast<int>(cells);
  std::string bar;
  for (int i = 0; i < full && i < kWidth; ++i)
    bar += "█";
  if (full < kWidth) {
    bar += kEighths[static_cast<int>((cells - full) * 8)];
    for (int i = full + 1; i < kWidth; ++i)
      bar += " ";
  }
  std::fprintf(stderr,
               "\rProcessed prompts: %3d%%|%s| %ld/%ld [%s<%s, %.2fit/s, est. speed input: %.1f "
               "toks/s, output: %.1f toks/s]%s",
               static_cast<int>(frac * 100), bar.c_str(), static_cast<long>(done_),
               static_cast<long>(total_), clock_text(elapsed).c_str(),
               clock_text(remaining).c_str(), rate, in_tps, out_tps, final ? "\n" : "");
  std::fflush(stderr);
}

}  // namespace di::cli
