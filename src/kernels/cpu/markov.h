#pragma once

// One step of the DSpark Markov loop (delta spec §4.2 step 3, reference `forward_spec`) for one
// draft row: the Markov bias of the previous token is added to the row's logits in place
// (logits[v] += bias[v], one rounded add per value), then the greedy draft is the argmax with the
// lower index winning ties. NaN values never win; a row of NaNs gives 0. The GPU op
// (kernels/cuda/dspark/markov.cuh) computes the same bits.

#include <cstdint>

namespace di::cpu {

template <typename T>
int64_t markov_bias_argmax(T* logits, const T* bias, int64_t vocab);

}  // namespace di::cpu
