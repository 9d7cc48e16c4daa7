#include "kernels/cpu/markov.h"

#include <cmath>

#include "common/check.h"

namespace di::cpu {

template <typename T>
int64_t markov_bias_argmax(T* logits, const T* bias, int64_t vocab) {
  DI_CHECK(vocab > 0, "markov_bias_argmax: vocab {} must be positive", vocab);
  int64_t best = -1;
  for (int64_t v = 0; v < vocab; ++v) {
    logits[v] += bias[v];
    if (std::isnan(logits[v])) continue;
    if (best < 0 || logits[v] > logits[best]) best = v;  // strict: the lower index keeps a tie
  }
  return best < 0 ? 0 : best;
}

template int64_t markov_bias_argmax<float>(float*, const float*, int64_t);
template int64_t markov_bias_argmax<double>(double*, const double*, int64_t);

}  // namespace di::cpu
