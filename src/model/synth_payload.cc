#include "model/synth_payload.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "common/bf16.h"
#include "common/check.h"
#include "common/fp8.h"

namespace di {

namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

constexpr size_t kTable = 65536;

// e2m1 code of a value already in grid units (|x| <= 6), round to nearest, ties to even code.
uint8_t e2m1_code(double x) {
  static constexpr std::array<double, 8> kGrid{0, 0.5, 1, 1.5, 2, 3, 4, 6};
  const uint8_t sign = x < 0 ? 8 : 0;
  double a = std::min(std::fabs(x), 6.0);
  uint8_t best = 0;
  for (uint8_t c = 1; c < 8; ++c) {
    double d = std::fabs(a - kGrid[c]), db = std::fabs(a - kGrid[best]);
    if (d < db || (d == db && c % 2 == 0)) best = c;
  }
  return static_cast<uint8_t>(best | sign);
}

}  // namespace

Xoshiro256::Xoshiro256(uint64_t seed) {
  for (auto& w : s_)
    w = splitmix64(seed);
}

uint64_t Xoshiro256::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Xoshiro256::uniform() {
  return static_cast<double>(next() >> 11) * 0x1.0p-53;
}

double Xoshiro256::normal() {
  double u1 = uniform();
  double u2 = uniform();
  if (u1 < 1e-300) u1 = 1e-300;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

SynthTables::SynthTables() : fp8_weight_(kTable), fp4_pair_(kTable) {
  Xoshiro256 rng(0x5EED0F8ull);
  // FP8 weights in units of their block scale: Gaussian with the block amax near 448, as the
  // quantiser's pow2 scale leaves it (|max| in (224, 448]).
  for (auto& b : fp8_weight_) {
    double x = std::clamp(rng.normal() * 120.0, -448.0, 448.0);
    b = e4m3_from_double(x);
  }
  // FP4 expert weights in units of their 1x32 scale: Gaussian with block amax in (3, 6].
  for (auto& b : fp4_pair_) {
    uint8_t lo = e2m1_code(rng.normal() * 1.7);
    uint8_t hi = e2m1_code(rng.normal() * 1.7);
    b = static_cast<uint8_t>(lo | (hi << 4));
  }
}

const std::vector<uint8_t>& SynthTables::e8m0(uint8_t center) {
  auto it = e8m0_.find(center);
  if (it != e8m0_.end()) return it->second;
  std::vector<uint8_t> t(kTable);
  Xoshiro256 rng(0xE8E0ull + center);
  for (auto& b : t) {
    double v = std::round(center + rng.normal() * 0.8);
    b = static_cast<uint8_t>(std::clamp(v, 1.0, 254.0));
  }
  return e8m0_.emplace(center, std::move(t)).first->second;
}

const std::vector<uint16_t>& SynthTables::bf16(float mean, float std) {
  auto key = std::make_pair(mean, std);
  auto it = bf16_.find(key);
  if (it != bf16_.end()) return it->second;
  std::vector<uint16_t> t(kTable);
  Xoshiro256 rng(fnv1a64("bf16") ^ std::hash<float>{}(mean) ^ (std::hash<float>{}(std) << 1));
  for (auto& h : t)
    h = bf16_from_float(static_cast<float>(mean + rng.normal() * std));
  return bf16_.emplace(key, std::move(t)).first->second;
}

const std::vector<float>& SynthTables::f32(float mean, float std) {
  auto key = std::make_pair(mean, std);
  auto it = f32_.find(key);
  if (it != f32_.end()) return it->second;
  std::vector<float> t(kTable);
  Xoshiro256 rng(fnv1a64("f32") ^ std::hash<float>{}(mean) ^ (std::hash<float>{}(std) << 1));
  for (auto& f : t)
    f = static_cast<float>(mean + rng.normal() * std);
  return f32_.emplace(key, std::move(t)).first->second;
}

PayloadGenerator::PayloadGenerator(const WeightSpec& spec, uint64_t run_seed, SynthTables& tables,
                                   int64_t n_experts)
    : rng_(run_seed ^ fnv1a64(spec.name)) {
  const std::string& n = spec.name;
  auto ends_with = [&](std::string_view suf) {
    return n.size() >= suf.size() && n.compare(n.size() - suf.size(), suf.size(), suf) == 0;
  };
  switch (spec.dtype) {
    case DType::kF8E4M3:
      bytes_ = &tables.fp8_weight();
      break;
    case DType::kF8E8M0:
      // Typical magnitudes: dense FP8 weights ~2^-12 per unit, FP4 experts ~2^-9, Engram
      // rows ~2^-7.
      bytes_ = &tables.e8m0(n.find(".experts.") != std::string::npos      ? 118
                            : n.find("engram.embed") != std::string::npos ? 120
                                                                          : 115);
      break;
    case DType::kI8:
      bytes_ = &tables.fp4_pair();
      break;
    case DType::kBF16: {
      kind_ = Kind::kBf16;
      const bool norm = spec.shape.rank() == 1 &&
                        (ends_with("norm.weight") || n.find("norm") != std::string::npos);
      if (norm) {
        halves_ = &tables.bf16(1.0f, 0.05f);
      } else if (ends_with(".bias") || n.rfind("image_", 0) == 0) {
        halves_ = &tables.bf16(0.0f, 0.01f);
      } else {
        halves_ = &tables.bf16(0.0f, 0.02f);
      }
      break;
    }
    case DType::kF32:
      kind_ = Kind::kF32;
      if (ends_with("attn_sink")) {
        floats_ = &tables.f32(0.0f, 1.0f);
      } else if (ends_with("_scale")) {
        floats_ = &tables.f32(0.5f, 0.05f);
      } else if (ends_with("_base")) {
        floats_ = &tables.f32(0.0f, 0.1f);
      } else {
        floats_ = &tables.f32(0.0f, 0.02f);
      }
      break;
    case DType::kI64:
      DI_CHECK(ends_with("tid2eid") && spec.shape.rank() == 2,
               "synth: no generator for I64 tensor {}", n);
      kind_ = Kind::kTid2eid;
      row_len_ = spec.shape[1];
      // tid2eid rows pick distinct experts of that block's router.
      n_experts_ = n_experts;
      DI_CHECK(n_experts_ >= row_len_, "synth: {} needs at least {} experts", n, row_len_);
      break;
    default:
      DI_FAIL("synth: no generator for dtype {} (tensor {})", dtype_name(spec.dtype), n);
  }
}

void PayloadGenerator::fill(std::span<std::byte> out) {
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  const size_t n = out.size();
  switch (kind_) {
    case Kind::kByteTable: {
      const uint8_t* t = bytes_->data();
      size_t i = 0;
      for (; i + 4 <= n; i += 4) {
        uint64_t r = rng_.next();
        p[i] = t[r & 0xFFFF];
        p[i + 1] = t[(r >> 16) & 0xFFFF];
        p[i + 2] = t[(r >> 32) & 0xFFFF];
        p[i + 3] = t[r >> 48];
      }
      for (; i < n; ++i)
        p[i] = t[rng_.next() & 0xFFFF];
      break;
    }
    case Kind::kBf16: {
      DI_CHECK(n % 2 == 0, "synth: bf16 chunk of odd size");
      const uint16_t* t = halves_->data();
      for (size_t i = 0; i < n; i += 2) {
        uint16_t h = t[rng_.next() & 0xFFFF];
        std::memcpy(p + i, &h, 2);
      }
      break;
    }
    case Kind::kF32: {
      DI_CHECK(n % 4 == 0, "synth: f32 chunk size not a multiple of 4");
      const float* t = floats_->data();
      for (size_t i = 0; i < n; i += 4) {
        float f = t[rng_.next() & 0xFFFF];
        std::memcpy(p + i, &f, 4);
      }
      break;
    }
    case Kind::kTid2eid: {
      DI_CHECK(n % 8 == 0, "synth: i64 chunk size not a multiple of 8");
      const int64_t experts = n_experts_;
      for (size_t i = 0; i < n; i += 8) {
        const auto j = static_cast<int64_t>(element_ % static_cast<uint64_t>(row_len_));
        if (j == 0) {
          // A row of distinct expert ids (rejection sampling; rows are short).
          row_.clear();
          while (static_cast<int64_t>(row_.size()) < row_len_) {
            auto e = static_cast<int64_t>(rng_.next() % static_cast<uint64_t>(experts));
            if (std::find(row_.begin(), row_.end(), e) == row_.end()) row_.push_back(e);
          }
        }
        std::memcpy(p + i, &row_[static_cast<size_t>(j)], 8);
        ++element_;
      }
      break;
    }
  }
}

}  // namespace di
