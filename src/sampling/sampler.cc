#include "sampling/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <optional>

#include "common/check.h"
#include "sampling/philox.h"

namespace di {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Max of a row ignoring NaN, and whether it holds a NaN. One pass over the float bits as
// order-preserving integers (negative floats' magnitude bits flipped), which the compiler
// vectorises; a float max with NaN semantics it does not. NaN rows take a scalar second pass.
struct RowMax {
  float max = kNegInf;
  bool has_nan = false;
};
RowMax scan_max(std::span<const float> values) {
  int32_t key_max = INT32_MIN;
  uint32_t nan = 0;
  for (const float v : values) {
    const auto bits = std::bit_cast<int32_t>(v);
    const int32_t key = bits ^ ((bits >> 31) & INT32_MAX);  // monotone in v for non-NaN v
    nan |= static_cast<uint32_t>((bits & INT32_MAX) > 0x7f800000);
    key_max = key > key_max ? key : key_max;
  }
  RowMax r;
  r.has_nan = nan != 0;
  if (!r.has_nan) {
    r.max = std::bit_cast<float>(key_max ^ ((key_max >> 31) & INT32_MAX));
    if (values.empty()) r.max = kNegInf;
    return r;
  }
  for (const float v : values)
    r.max = v > r.max ? v : r.max;
  return r;
}

int64_t first_index_of(std::span<const float> values, float v) {
  const auto it = std::find(values.begin(), values.end(), v);
  return it == values.end() ? -1 : static_cast<int64_t>(it - values.begin());
}

// argmax_i w_i / E_i over the offered tokens, w_i = exp(d_i), E_i = -log(u_i), ties -> lower id.
//
// Most tokens are rejected without exp or log: E_i >= 1 - u_i >= 2^(len_i - 33), where len_i is
// the bit length of ~bits_i (1 - u_i = (~bits_i + 0.5) * 2^-32), so w_i / E_i < leader whenever
// d_i < log(0.99 * leader) + (len_i - 33) * ln 2. The 0.99 absorbs every rounding (exp, log, the
// division, this threshold), so a rejected token's computed score is strictly below the leader's
// and the winner is exactly the one an exhaustive race picks.
class ExponentialRace {
 public:
  ExponentialRace(uint64_t seed, int64_t position)
      : key_(noise_key(seed)), position_(static_cast<uint64_t>(position)) {
    std::fill(skip_below_, skip_below_ + kBitLengths, -std::numeric_limits<double>::infinity());
  }

  // d = z - z_max (<= 0, finite).
  void offer(int64_t id, double d) {
    const uint32_t bits = lane_bits(static_cast<uint64_t>(id));
    const uint32_t inv = ~bits;
    const int len = inv == 0 ? 0 : 32 - std::countl_zero(inv);
    if (d < skip_below_[len]) return;
    const double score = std::exp(d) / -std::log(uniform_from_bits(bits));
    if (best_id_ < 0 || score > best_score_ || (score == best_score_ && id < best_id_)) {
      best_score_ = score;
      best_id_ = id;
      const double base = std::log(0.99 * score);
      for (int l = 0; l < kBitLengths; ++l)
        skip_below_[l] = base + (l - 33) * kLn2;
    }
  }
  int64_t winner() const { return best_id_; }

 private:
  static constexpr int kBitLengths = 33;
  static constexpr double kLn2 = 0.69314718055994530942;

  // One Philox call serves the 4 lanes of a group; tokens arrive in id order.
  uint32_t lane_bits(uint64_t lane) {
    if ((lane >> 2) != cached_group_) {
      cached_group_ = lane >> 2;
      block_ = philox4x32(noise_counter(NoiseStream::kSample, position_, lane), key_);
    }
    return block_.v[lane & 3];
  }

  Philox4x32Key key_;
  uint64_t position_;
  uint64_t cached_group_ = ~uint64_t{0};
  Philox4x32Counter block_{};
  double skip_below_[kBitLengths];
  double best_score_ = 0;
  int64_t best_id_ = -1;
};

// The filters keep a prefix of the total order (z desc, id asc): min_p a prefix by value, top_k
// the first k, top_p the shortest prefix reaching the mass. A prefix is given by its last token.
struct Cut {
  float z;
  int32_t id;
  bool keeps(float zi, int32_t i) const { return zi > z || (zi == z && i <= id); }
};

struct RanksBefore {
  const float* z;
  bool operator()(int32_t a, int32_t b) const { return z[a] > z[b] || (z[a] == z[b] && a < b); }
};

// Eligible tokens (finite z, passing min_p) histogrammed by d = z - z_max in buckets of 1/64 nat
// (bucket 0 holds the max; the last bucket everything below -64): the top_k and top_p cuts cost
// O(vocab) plus sorting one bucket, instead of sorting the vocabulary.
constexpr int kBuckets = 4096;
constexpr double kBucketsPerNat = 64;
int bucket_of(double d) {
  const double b = -d * kBucketsPerNat;
  return b >= kBuckets - 1 ? kBuckets - 1 : static_cast<int>(b);
}

class CutFinder {
 public:
  CutFinder(std::span<const float> z, double z_max, double log_min_p, SamplerScratch& s)
      : z_(z), z_max_(z_max), log_min_p_(log_min_p), s_(s) {}

  // min_p: p_i < min_p * p_max  <=>  z_i - z_max < log(min_p).
  bool eligible(size_t i, double& d) const {
    d = static_cast<double>(z_[i]) - z_max_;  // exact
    return z_[i] != kNegInf && d >= log_min_p_;
  }

  std::optional<Cut> find(int64_t top_k, double top_p) {
    const bool with_mass = top_p < 1.0;
    s_.bucket_count.assign(kBuckets, 0);
    s_.bucket_mass.assign(with_mass ? kBuckets : 0, 0.0);
    int64_t eligible_count = 0;
    for (size_t i = 0; i < z_.size(); ++i) {
      double d;
      if (!eligible(i, d)) continue;
      const auto b = static_cast<size_t>(bucket_of(d));
      ++s_.bucket_count[b];
      if (with_mass) s_.bucket_mass[b] += std::exp(d);
      ++eligible_count;
    }

    // top_k: the bucket where the count reaches k, then the right token inside it.
    std::optional<Cut> cut;
    int k_bucket = kBuckets;                 // buckets before it are kept entirely
    std::vector<int32_t>& k_tail = s_.tail;  // kept tokens of k_bucket, in rank order
    k_tail.clear();
    if (top_k > 0 && top_k < eligible_count) {
      int64_t before = 0;
      k_bucket = 0;
      while (before + s_.bucket_count[static_cast<size_t>(k_bucket)] < top_k) {
        before += s_.bucket_count[static_cast<size_t>(k_bucket++)];
      }
      const std::vector<int32_t>& ids = gather_sorted(k_bucket);
      k_tail.assign(ids.begin(), ids.begin() + (top_k - before));
      cut = cut_at(k_tail.back());
    }
    if (!with_mass) return cut;

    // top_p over what top_k kept. Mass is summed bucket by bucket from the top (each bucket in id
    // order, the partial top_k bucket in rank order): the same sequence for the total and for the
    // running prefix, so top_p -> 1 keeps everything.
    double total = 0;
    for (int b = 0; b < k_bucket; ++b)
      total += s_.bucket_mass[static_cast<size_t>(b)];
    for (const int32_t id : k_tail)
      total += weight(id);
    const double target = top_p * total;
    double mass = 0;
    for (int b = 0; b < k_bucket; ++b) {
      const double m = s_.bucket_mass[static_cast<size_t>(b)];
      if (m == 0 || mass + m < target) {
        mass += m;
        continue;
      }
      const std::vector<int32_t>& ids = gather_sorted(b);
      for (const int32_t id : ids) {
        mass += weight(id);
        if (mass >= target) return cut_at(id);
      }
      return cut_at(ids.back());  // the in-bucket sum rounded below the bucket's mass
    }
    for (const int32_t id : k_tail) {
      mass += weight(id);
      if (mass >= target) return cut_at(id);
    }
    return cut;  // rounding: keep everything top_k kept
  }

 private:
  double weight(int32_t id) const {
    return std::exp(static_cast<double>(z_[static_cast<size_t>(id)]) - z_max_);
  }
  Cut cut_at(int32_t id) const { return Cut{z_[static_cast<size_t>(id)], id}; }

  // The eligible tokens of one bucket in rank order, in a buffer reused by the next call.
  const std::vector<int32_t>& gather_sorted(int bucket) {
    std::vector<int32_t>& ids = s_.candidates;
    ids.clear();
    for (size_t i = 0; i < z_.size(); ++i) {
      double d;
      if (eligible(i, d) && bucket_of(d) == bucket) ids.push_back(static_cast<int32_t>(i));
    }
    std::sort(ids.begin(), ids.end(), RanksBefore{z_.data()});
    return ids;
  }

  std::span<const float> z_;
  double z_max_;
  double log_min_p_;
  SamplerScratch& s_;
};

// z: [vocab] logits after penalties and temperature; z_max finite.
int64_t draw(const deepinfer::SamplingParams& p, std::span<const float> z, double z_max,
             uint64_t seed, int64_t position, SamplerScratch& scratch) {
  const double log_min_p =
      p.min_p > 0 ? std::log(p.min_p) : -std::numeric_limits<double>::infinity();
  CutFinder finder(z, z_max, log_min_p, scratch);
  std::optional<Cut> cut;
  const bool top_k_active = p.top_k > 0 && static_cast<size_t>(p.top_k) < z.size();
  if (top_k_active || p.top_p < 1.0) cut = finder.find(top_k_active ? p.top_k : 0, p.top_p);

  ExponentialRace race(seed, position);
  for (size_t i = 0; i < z.size(); ++i) {
    double d;
    if (!finder.eligible(i, d)) continue;
    if (cut && !cut->keeps(z[i], static_cast<int32_t>(i))) continue;
    race.offer(static_cast<int64_t>(i), d);
  }
  return race.winner();
}

}  // namespace

int64_t argmax_lowest_id(std::span<const float> values) {
  return first_index_of(values, scan_max(values).max);
}

SampleResult sample_row(const deepinfer::SamplingParams& params, const SamplerRow& row,
                        SamplerScratch& scratch) {
  const size_t vocab = row.logits.size();
  DI_CHECK(vocab > 0 && vocab <= size_t{INT32_MAX}, "bad vocabulary size {}", vocab);
  DI_CHECK(row.position >= 0, "position must be >= 0, got {}", row.position);

  SampleResult result;
  const bool greedy = params.greedy();
  const bool penalties = has_penalties(params);
  const bool scaled = !greedy && params.temperature != 1.0;

  // The values the sampler works on: the raw logits, or a processed copy.
  std::span<const float> x = row.logits;
  if (row.suppress_stop_tokens || penalties || scaled) {
    scratch.values.assign(row.logits.begin(), row.logits.end());
    std::span<float> v(scratch.values);
    if (row.suppress_stop_tokens) suppress_stop_tokens(v, row.eos_ids, params.stop_token_ids);
    if (penalties) apply_penalties(v, params, row.prompt_ids, row.output_ids, scratch.penalties);
    if (scaled) {
      const auto t = static_cast<float>(params.temperature);  // vLLM divides in float32
      for (float& e : v)
        e /= t;
    }
    x = v;
  }

  const RowMax m = scan_max(x);
  DI_CHECK(!m.has_nan, "logits row contains NaN");
  DI_CHECK(m.max > kNegInf, "every token of the row is -inf (all suppressed?)");
  if (greedy) {
    result.token_id = first_index_of(x, m.max);
  } else {
    DI_CHECK(std::isfinite(m.max), "logits overflow to +inf after temperature {}",
             params.temperature);
    result.token_id = draw(params, x, m.max, row.seed, row.position, scratch);
  }
  DI_CHECK(result.token_id >= 0, "sampler found no candidate");

  if (params.logprobs) {
    result.logprobs = compute_row_logprobs(row.logits, result.token_id, *params.logprobs);
  }
  return result;
}

SampleResult sample_row(const deepinfer::SamplingParams& params, const SamplerRow& row) {
  SamplerScratch scratch;
  return sample_row(params, row, scratch);
}

}  // namespace di
