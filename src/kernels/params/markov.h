#pragma once

// Params of the DSpark Markov step on the GPU (kernels/cpu/markov.h is the reference): for each
// of `rows` draft sequences b, logits row b (at logits + b * logits_stride) gets the Markov bias
// row b added in place (fp32, one rounded add per value) and its argmax (NaN never wins, the
// lower index wins ties, 0 for a row of NaNs) is written to next[b] (the next step's Markov input
// and embedding id) and to drafts[b * drafts_stride].

#include <cstdint>

namespace di {

struct MarkovStepParams {
  float* logits = nullptr;      // rows at logits + b * logits_stride, `vocab` values each
  int64_t logits_stride = 0;    // elements; 0 = vocab
  const float* bias = nullptr;  // [rows, vocab]
  int64_t* next = nullptr;      // [rows]
  int64_t* drafts = nullptr;    // optional: [rows * drafts_stride]
  int64_t drafts_stride = 1;
  int64_t rows = 0;
  int64_t vocab = 0;
};

}  // namespace di
