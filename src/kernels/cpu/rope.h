#pragma once

// Rotary embedding tables of the reference (`precompute_freqs_cis`): rope_dim/2 frequencies
// base^(-2i/rope_dim), with YaRN when original_seq_len > 0 (dims beyond the training context
// divided by `factor`, a linear ramp between the beta_fast and beta_slow corrected dims).
// Pairs (x[2i], x[2i+1]) are complex numbers multiplied by exp(j * pos * freq_i).

#include <cstdint>
#include <vector>

namespace di::cpu {

struct RopeParams {
  int64_t rope_dim = 64;
  double base = 10000.0;
  int64_t original_seq_len = 0;  // 0 disables YaRN
  double factor = 1.0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
};

// Frequencies computed like the reference in precision T (float: binary32 arithmetic as torch
// does in float32; double: everything float64).
template <typename T>
std::vector<T> rope_frequencies(const RopeParams& p);

template <typename T>
class RopeTable {
 public:
  explicit RopeTable(const RopeParams& p);
  // Rotates x[0 .. rope_dim) (the RoPE tail of a vector) at position `pos`; inverse conjugates.
  void apply(T* x, int64_t pos, bool inverse = false) const;
  int64_t rope_dim() const { return rope_dim_; }
  const std::vector<T>& freqs() const { return freqs_; }

 private:
  int64_t rope_dim_;
  std::vector<T> freqs_;
};

}  // namespace di::cpu
