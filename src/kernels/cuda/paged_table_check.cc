#include "kernels/cuda/paged_table_check.h"

#include "common/check.h"

namespace di {

void check_paged_table(const char* op, const PagedTable& t, int32_t entry_bytes,
                       int64_t entries_needed) {
  DI_CHECK(t.entry_bytes == entry_bytes, "{}: table entry_bytes {} (expected {})", op,
           t.entry_bytes, entry_bytes);
  DI_CHECK(t.pool != nullptr && t.pages != nullptr, "{}: null table pool/pages", op);
  DI_CHECK(t.entries_per_page > 0 &&
               static_cast<int64_t>(t.entries_per_page) * t.entry_bytes <= t.page_bytes,
           "{}: {} entries of {} B do not fit a {}-byte page", op, t.entries_per_page,
           t.entry_bytes, t.page_bytes);
  DI_CHECK(t.pages_stride > 0, "{}: pages_stride must be positive, got {}", op, t.pages_stride);
  // 528 and 288 are multiples of 16 and 68 of 4: 16-byte aligned pages keep every entry start
  // aligned for the vector accesses of the kernels.
  DI_CHECK(t.page_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(t.pool) % 16 == 0,
           "{}: pool and page_bytes ({}) must be 16-byte aligned", op, t.page_bytes);
  const int64_t held = static_cast<int64_t>(t.pages_stride) * t.entries_per_page;
  DI_CHECK(entries_needed <= held, "{}: {} entries addressed, a row's {} pages hold {}", op,
           entries_needed, t.pages_stride, held);
}

}  // namespace di
