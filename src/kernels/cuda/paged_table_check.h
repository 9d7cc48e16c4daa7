#pragma once

// Host-side validation of a PagedTable (kernels/params/kv_cache.h) shared by the launchers that
// read or write the paged KV cache: entry size, non-null pool and page ids, entries that fit a
// page, 16-byte aligned pool and pages (entries are accessed with up to 16-byte vectors), and
// optionally that a row's pages hold every entry the kernel may address. di::Error naming `op`.

#include <cstdint>

#include "kernels/params/kv_cache.h"

namespace di {

// entries_needed > 0: the largest entry count per batch row the kernel may address.
void check_paged_table(const char* op, const PagedTable& t, int32_t entry_bytes,
                       int64_t entries_needed = 0);

}  // namespace di
