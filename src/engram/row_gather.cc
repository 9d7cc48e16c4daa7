#include "engram/row_gather.h"

#include <cstring>

#include "common/check.h"

namespace di {
namespace {

void check_table(const cpu::WeightRef& t) {
  DI_CHECK(t.format == cpu::WeightFormat::kFp8Block && t.bn == 1 && t.bk == 32 && t.cols > 0 &&
               t.cols % 32 == 0,
           "engram gather: the table must be FP8 with 1x32 UE8M0 scales and a multiple of 32 "
           "columns (format {}, blocks {}x{}, {} columns)",
           static_cast<int>(t.format), t.bn, t.bk, t.cols);
}

}  // namespace

size_t engram_staging_bytes(const cpu::WeightRef& table, int64_t n) {
  check_table(table);
  DI_CHECK(n >= 0, "engram gather: negative row count {}", n);
  return static_cast<size_t>(n) * static_cast<size_t>(table.cols + table.cols / 32);
}

void gather_engram_rows(const cpu::WeightRef& table, std::span<const int64_t> row_ids,
                        std::span<uint8_t> staging) {
  const auto n = static_cast<int64_t>(row_ids.size());
  const size_t need = engram_staging_bytes(table, n);
  DI_CHECK(staging.size() == need, "engram gather: staging of {} bytes for {} rows, {} needed",
           staging.size(), n, need);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = row_ids[static_cast<size_t>(i)];
    DI_CHECK(r >= 0 && r < table.rows,
             "engram gather: row id {} (entry {}) outside the table of {} rows", r, i, table.rows);
  }
  const auto cols = static_cast<size_t>(table.cols);
  const size_t scols = cols / 32;
  const std::byte* codes = table.weight.data;
  const std::byte* scales = table.scale.data;
  uint8_t* out_codes = staging.data();
  uint8_t* out_scales = staging.data() + static_cast<size_t>(n) * cols;
  // Rows are independent; the copies of a large step are spread over the OpenMP threads.
#pragma omp parallel for schedule(static) if (n >= 1024)
  for (int64_t i = 0; i < n; ++i) {
    const auto r = static_cast<size_t>(row_ids[static_cast<size_t>(i)]);
    std::memcpy(out_codes + static_cast<size_t>(i) * cols, codes + r * cols, cols);
    std::memcpy(out_scales + static_cast<size_t>(i) * scols, scales + r * scols, scols);
  }
}

}  // namespace di
