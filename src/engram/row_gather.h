#pragma once

// Gather of Engram table rows into a staging buffer for the GPU (issue 8, delta spec §2): the
// tables are too large for device memory (189 GiB for V4.1-Flash), so each step's rows — known
// on the host as soon as the step's token ids are (the n-gram hashes, engram/ngram_hash.h) — are
// copied from the host-resident table into one contiguous staging buffer (pinned, for a single
// asynchronous host-to-device copy that overlaps the layers before the Engram layer).
//
// Staging layout for `n` rows of a table of `cols` values (FP8 e4m3 with one UE8M0 scale per 32):
//   bytes [0, n * cols)                       the e4m3 codes, row-major, in the order of row_ids
//   bytes [n * cols, n * cols + n * cols/32)  the UE8M0 scale bytes, row-major, same order
// so staged row i decodes to e4m3(code[i, c]) * 2^(scale[i, c / 32] - 127), exactly the table's
// row row_ids[i] (cpu::decode_rows).

#include <cstddef>
#include <cstdint>
#include <span>

#include "kernels/cpu/linear.h"

namespace di {

// Bytes of the staging buffer for n rows of `table`.
size_t engram_staging_bytes(const cpu::WeightRef& table, int64_t n);

// Copies rows row_ids of `table` (FP8 with 1 x 32 UE8M0 scales) into `staging` in the layout
// above. A row id outside the table, a table of another format or a staging buffer of another
// size is a di::Error naming it; nothing is read out of bounds.
void gather_engram_rows(const cpu::WeightRef& table, std::span<const int64_t> row_ids,
                        std::span<uint8_t> staging);

}  // namespace di
