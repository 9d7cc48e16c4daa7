// Host-side regrouping of wo_a's FP8 codes into the GPU's tiled order (kernels/params/wo_a.h).

#include <cstring>

#include "common/check.h"
#include "kernels/cuda/wo_a/wo_a.cuh"

namespace di {

void pack_wo_a_weight(const uint8_t* src, int64_t rows, int64_t group_width, uint8_t* dst) {
  DI_CHECK(rows > 0 && group_width > 0 && rows % kWoATile == 0 && group_width % kWoATile == 0,
           "pack_wo_a_weight: wo_a [{}, {}] needs rows and columns that are multiples of {}", rows,
           group_width, kWoATile);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < group_width; c += kWoATile)
      std::memcpy(dst + wo_a_code_offset(r, c, group_width), src + r * group_width + c, kWoATile);
}

}  // namespace di
