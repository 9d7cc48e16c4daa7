// The V4.1 cache writers on the GPU (kernels/cuda/kv_write) against the CPU reference composed as
// model/deepseek_v41/attention.cc does it (cpu::rms_norm, cpu::RopeTable<float>, cpu::linear, the
// fake-quant simulations) and packed with cpu::kv_pack, at real dimensions (512 / 128, window 128,
// RoPE 64 with the real config's plain and YaRN tables, eps 1e-20). Four sequences run through
// mixed batches: prefill chunks of odd lengths and odd starts (the ratio-2 group split across
// chunks, carried in the state), a chunk longer than the window, decode steps, shuffled row order,
// fp32 and bf16 inputs. The caches are real paged pools with shuffled page ids, poisoned: every
// byte outside the written entries (page slack, unused pages, the ring block never written) must
// keep the poison, and every written entry is checked against a host mirror after each step.
//
// Tolerance. The kernels follow the CPU's fp32 operation order exactly (kernels/params/kv_write.h),
// so the bytes are expected identical. The exceptions are the transcendentals: RoPE cos/sin and the
// ratio-2 softmax exp are computed in double and rounded once on the GPU, while glibc's cosf/sinf/
// expf misround a small fraction of arguments (~1% of RoPE angles, dense_ops rope test); a one-ulp
// difference then propagates (through the norm, to the whole ratio-2 row) and can move a value
// across a rounding boundary of the e4m3 / e2m1 grid (probability ~2^-20 / ~2^-22 per value) or a
// scale across a power of two / e4m3 step. So: every decoded value within one quantisation step of
// the reference (the grid step at the larger of the two magnitudes, with the larger scale), and
// >= 99.9% of the entry bytes of each format bitwise identical (expected: all, or all but a few).
// Pre-RoPE latents: ratio 1 bitwise (no transcendental before them); ratio 2 within
// 1e-5 * (|x| + 1) (one exp ulp moves the pooled row and so its norm by ~1e-7 relative). The
// carried ratio-2 state is copies of the inputs: bitwise. The plan (host) is additionally checked
// without a GPU by emulating its work items on the CPU.

#include "kernels/cuda/kv_write/kv_write.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "common/bf16.h"
#include "common/dtype.h"
#include "common/fp8.h"
#include "core/tensor_view.h"
#include "kernels/cpu/kv_pack.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/rope.h"
#include "kernels/dense_ops/dense_ops_test_util.h"

namespace di {
namespace {

using namespace dense_test;  // NOLINT

constexpr double kEps = 1e-20;  // rms_norm_eps of configs/v41-flash.json
constexpr int kWindow = 128;
constexpr int kSeqs = 4;
constexpr int kRopeOffset = kKvDim - kKvRopeDim;
constexpr uint8_t kPoison = 0xA5;

cpu::RopeParams plain_rope() {  // layers 0-1 and DSpark: theta 10000, no YaRN
  cpu::RopeParams p;
  p.rope_dim = kKvRopeDim;
  p.base = 10000.0;
  return p;
}

cpu::RopeParams yarn_rope() {  // layers 2-39: compress_rope_theta 160000 with the config's YaRN
  cpu::RopeParams p;
  p.rope_dim = kKvRopeDim;
  p.base = 160000.0;
  p.original_seq_len = 65536;
  p.factor = 16;
  p.beta_fast = 32;
  p.beta_slow = 1;
  return p;
}

// ---------------------------------------------------------------------------------------------
// Entry formats: packing through the reference's simulation, decoding, one quantisation step.

enum class Format { kSwa, kComp, kIndex };

int entry_bytes(Format f) {
  return f == Format::kSwa ? kSwaEntryBytes : f == Format::kComp ? kCompEntryBytes : kIndexKeyBytes;
}
int entry_values(Format f) {
  return f == Format::kIndex ? kIndexDim : kKvDim;
}

// cpu::pack_* of v, checked against the in-place simulation the reference runs at that site
// (unpack(pack(v)) must equal it bit for bit: the packer is the simulation).
std::vector<uint8_t> pack(Format f, std::vector<float> v) {
  std::vector<uint8_t> out(static_cast<size_t>(entry_bytes(f)));
  std::vector<float> sim = v;
  std::vector<float> back(v.size());
  if (f == Format::kSwa) {
    cpu::pack_swa_entry(v, out);
    cpu::act_quant_e4m3<float>(sim, kSwaScaleBlock);
    cpu::unpack_swa_entry(out, back);
  } else if (f == Format::kComp) {
    cpu::pack_comp_entry(v, out);
    cpu::fp4_quant_e4m3<float>(sim, kCompScaleBlock);
    cpu::unpack_comp_entry(out, back);
  } else {
    cpu::pack_index_key(v, out);
    cpu::fp4_quant_ue8m0<float>(sim, kIndexScaleBlock);
    cpu::unpack_index_key(out, back);
  }
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(float_bits(back[i]), float_bits(sim[i])) << "packer vs simulation at " << i;
  }
  return out;
}

// Decoded values and the scale of each value's block.
void decode(Format f, std::span<const uint8_t> e, std::vector<float>& v, std::vector<float>& s) {
  const int n = entry_values(f);
  v.resize(static_cast<size_t>(n));
  s.resize(static_cast<size_t>(n));
  if (f == Format::kSwa) {
    cpu::unpack_swa_entry(e, v);
  } else if (f == Format::kComp) {
    cpu::unpack_comp_entry(e, v);
  } else {
    cpu::unpack_index_key(e, v);
  }
  for (int d = 0; d < n; ++d) {
    const auto i = static_cast<size_t>(d);
    if (f == Format::kSwa) {
      s[i] = e8m0_to_float(e[static_cast<size_t>(kKvDim + d / kSwaScaleBlock)]);
    } else if (f == Format::kComp) {
      s[i] = e4m3_to_float(e[static_cast<size_t>(kKvDim / 2 + d / kCompScaleBlock)]);
    } else {
      s[i] = e8m0_to_float(e[static_cast<size_t>(kIndexDim / 2 + d / kIndexScaleBlock)]);
    }
  }
}

// The grid step of the element format at |v| (scale s): e4m3 has 3 mantissa bits and subnormal
// steps of 2^-9; e2m1's grid is {0, .5, 1, 1.5, 2, 3, 4, 6}.
double grid_step(Format f, float v, float s) {
  if (!(s > 0.0f) || !std::isfinite(s)) return 0.0;
  const double q = std::fabs(static_cast<double>(v)) / s;
  if (f == Format::kSwa) {
    const int e = q > 0 ? std::max(static_cast<int>(std::floor(std::log2(q))), -6) : -6;
    return std::ldexp(static_cast<double>(s), e - 3);
  }
  return static_cast<double>(s) * (q < 2 ? 0.5 : q < 4 ? 1.0 : 2.0);
}

struct Stats {
  int64_t bytes = 0;
  int64_t identical = 0;
  int64_t entries = 0;
};

// ---------------------------------------------------------------------------------------------
// A poisoned paged pool on the device with shuffled page ids and its host mirror.

class PagedPool {
 public:
  PagedPool(Format f, int32_t entries_per_page, int slack, int64_t entries_per_seq, uint64_t seed,
            cudaStream_t stream)
      : format_(f) {
    table_.entry_bytes = entry_bytes(f);
    table_.entries_per_page = entries_per_page;
    table_.page_bytes = static_cast<int64_t>(entries_per_page) * table_.entry_bytes + slack;
    table_.pages_stride =
        static_cast<int32_t>((entries_per_seq + entries_per_page - 1) / entries_per_page);
    const int32_t used = kSeqs * table_.pages_stride;
    const int32_t total = used + 5;  // five pages nobody owns
    std::vector<int32_t> perm(static_cast<size_t>(total));
    std::iota(perm.begin(), perm.end(), 0);
    std::mt19937_64 rng(seed);
    std::shuffle(perm.begin(), perm.end(), rng);
    pages_.assign(perm.begin(), perm.begin() + used);
    mirror_.assign(static_cast<size_t>(total * table_.page_bytes), kPoison);
    written_.assign(mirror_.size(), 0);
    pool_d_ = DeviceBuffer(mirror_.size(), "kv_write test pool");
    pool_d_.fill_async(kPoison, stream);
    pages_d_ = upload(pages_, stream, "kv_write test pages");
    table_.pool = pool_d_.as<uint8_t>();
    table_.pages = pages_d_.as<int32_t>();
  }

  const PagedTable& device() const { return table_; }

  // Records the bytes entry e of batch row `seq` must hold from now on.
  void expect(int32_t seq, int64_t e, const std::vector<uint8_t>& bytes) {
    const size_t off = offset(seq, e);
    std::copy(bytes.begin(), bytes.end(), mirror_.begin() + static_cast<std::ptrdiff_t>(off));
    std::fill_n(written_.begin() + static_cast<std::ptrdiff_t>(off), bytes.size(), uint8_t{1});
    entries_[{seq, e}] = off;
    fresh_.push_back(off);
  }

  // The whole pool against the mirror: poison outside the written entries, every entry decoded
  // within one quantisation step; the bytes of the entries written since the last check are
  // counted (identical or not) into `st`.
  void check(const char* what, cudaStream_t stream, Stats& st) {
    SCOPED_TRACE(what);
    const std::vector<uint8_t> got = download<uint8_t>(pool_d_, mirror_.size(), stream);
    int64_t clobbered = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (written_[i] == 0 && got[i] != kPoison) {
        if (clobbered++ < 5) ADD_FAILURE() << "byte " << i << " outside the entries changed";
      }
    }
    EXPECT_EQ(clobbered, 0);
    std::vector<float> gv, gs, ev, es;
    const auto n = static_cast<size_t>(entry_bytes(format_));
    for (const auto& [key, off] : entries_) {
      const std::span<const uint8_t> g(got.data() + off, n);
      const std::span<const uint8_t> e(mirror_.data() + off, n);
      decode(format_, g, gv, gs);
      decode(format_, e, ev, es);
      for (size_t d = 0; d < gv.size(); ++d) {
        const double tol =
            std::max(grid_step(format_, gv[d], gs[d]), grid_step(format_, ev[d], es[d]));
        ASSERT_LE(std::fabs(static_cast<double>(gv[d]) - ev[d]), tol)
            << "seq " << key.first << " entry " << key.second << " value " << d << ": gpu " << gv[d]
            << " (scale " << gs[d] << ") vs cpu " << ev[d] << " (scale " << es[d] << ")";
      }
    }
    std::sort(fresh_.begin(), fresh_.end());
    fresh_.erase(std::unique(fresh_.begin(), fresh_.end()), fresh_.end());
    for (const size_t off : fresh_) {
      for (size_t i = 0; i < n; ++i)
        st.identical += got[off + i] == mirror_[off + i];
      st.bytes += static_cast<int64_t>(n);
      ++st.entries;
    }
    fresh_.clear();
  }

 private:
  // The shared addressing helper on the host copy of the page ids, relative to the mirror.
  size_t offset(int32_t seq, int64_t e) const {
    PagedTable host = table_;
    uint8_t* base = const_cast<uint8_t*>(mirror_.data());
    host.pool = base;
    host.pages = pages_.data();
    return static_cast<size_t>(paged_entry(host, seq, e) - base);
  }

  Format format_;
  PagedTable table_;
  std::vector<int32_t> pages_;
  std::vector<uint8_t> mirror_;
  std::vector<uint8_t> written_;
  std::map<std::pair<int32_t, int64_t>, size_t> entries_;
  std::vector<size_t> fresh_;  // offsets of the entries written since the last check
  DeviceBuffer pool_d_;
  DeviceBuffer pages_d_;
};

// ---------------------------------------------------------------------------------------------
// The reference sites (attention.cc / Model::compress), one row at a time.

// Window kv before its act_quant (the packer quantises): kv_norm, RoPE at pos.
std::vector<float> ref_window(const float* x, const std::vector<float>& w,
                              const cpu::RopeTable<float>& rope, int64_t pos) {
  std::vector<float> v(x, x + kKvDim);
  cpu::rms_norm<float>(v.data(), 1, kKvDim, w.data(), kEps);
  rope.apply(v.data() + kRopeOffset, pos);
  return v;
}

// The compressed entry's values before fp4 quantisation: RoPE of the latent at group * ratio.
std::vector<float> ref_comp(std::vector<float> latent, const cpu::RopeTable<float>& rope,
                            int64_t pos) {
  rope.apply(latent.data() + kRopeOffset, pos);
  return latent;
}

// Index key before fp4: k_norm(wk . latent), RoPE on the last 64 at group * ratio.
std::vector<float> ref_index_key(const std::vector<float>& latent, const cpu::WeightRef& wk,
                                 const std::vector<float>& knorm, const cpu::RopeTable<float>& rope,
                                 int64_t pos) {
  std::vector<float> k(kIndexDim);
  cpu::linear<float>(latent.data(), 1, wk, k.data());
  cpu::rms_norm<float>(k.data(), 1, kIndexDim, knorm.data(), kEps);
  rope.apply(k.data() + (kIndexDim - kKvRopeDim), pos);
  return k;
}

// Model<float>::compress's ratio-2 tail: slots by position parity, score initialised to -inf.
struct Tail {
  std::vector<float> kv = std::vector<float>(2 * kKvDim, 0.0f);
  std::vector<float> score = std::vector<float>(2 * kKvDim, -INFINITY);
};

// Feeds one row (position pos) into the tail; returns true and the normed latent of group pos / 2
// when the row completes it. The pooling is Model<float>::compress's loop, verbatim in order.
bool ref_ratio2_row(Tail& t, const float* kv, const float* score, int64_t pos,
                    const std::vector<float>& norm, std::vector<float>& latent) {
  const int64_t ratio = 2, hd = kKvDim;
  const int64_t slot = pos % ratio;
  std::copy_n(kv, hd, t.kv.begin() + slot * hd);
  std::copy_n(score, hd, t.score.begin() + slot * hd);
  if ((pos + 1) % ratio != 0) return false;
  latent.assign(static_cast<size_t>(hd), 0.0f);
  for (int64_t d = 0; d < hd; ++d) {
    float mx = -INFINITY;
    for (int64_t s = 0; s < ratio; ++s)
      mx = std::max(mx, t.score[static_cast<size_t>(s * hd + d)]);
    float den = 0;
    for (int64_t s = 0; s < ratio; ++s)
      den += std::exp(t.score[static_cast<size_t>(s * hd + d)] - mx);
    float acc = 0;
    for (int64_t s = 0; s < ratio; ++s) {
      const float p = std::exp(t.score[static_cast<size_t>(s * hd + d)] - mx) / den;
      acc += t.kv[static_cast<size_t>(s * hd + d)] * p;
    }
    latent[static_cast<size_t>(d)] = acc;
  }
  if (!norm.empty()) cpu::rms_norm<float>(latent.data(), 1, hd, norm.data(), kEps);
  return true;
}

// ---------------------------------------------------------------------------------------------
// Batches: per step, (sequence, chunk length) pairs; rows get consecutive positions per sequence.

struct Batch {
  std::vector<int32_t> seq;
  std::vector<int64_t> pos;
  std::vector<int64_t> seq_end;  // [kSeqs] one past the last position in this batch
};

Batch make_batch(const std::vector<std::pair<int32_t, int64_t>>& chunks,
                 std::vector<int64_t>& next_pos, std::mt19937_64& rng) {
  Batch b;
  b.seq_end.assign(kSeqs, 0);
  for (const auto& [s, len] : chunks) {
    for (int64_t i = 0; i < len; ++i) {
      b.seq.push_back(s);
      b.pos.push_back(next_pos[static_cast<size_t>(s)]++);
    }
    b.seq_end[static_cast<size_t>(s)] = next_pos[static_cast<size_t>(s)];
  }
  // Rows in a random order: the kernels and the plan may not assume sorted batches.
  std::vector<size_t> perm(b.seq.size());
  std::iota(perm.begin(), perm.end(), size_t{0});
  std::shuffle(perm.begin(), perm.end(), rng);
  Batch out = b;
  for (size_t i = 0; i < perm.size(); ++i) {
    out.seq[i] = b.seq[perm[i]];
    out.pos[i] = b.pos[perm[i]];
  }
  return out;
}

// Indices of the batch rows sorted by (sequence, position): the order the CPU processes them.
std::vector<size_t> cpu_order(const Batch& b) {
  std::vector<size_t> o(b.seq.size());
  std::iota(o.begin(), o.end(), size_t{0});
  std::sort(o.begin(), o.end(), [&](size_t x, size_t y) {
    return std::pair(b.seq[x], b.pos[x]) < std::pair(b.seq[y], b.pos[y]);
  });
  return o;
}

// Random rows with a few special ones: zeros (norm of a zero row, amax floors), huge and tiny
// magnitudes (the norm removes them; the input load must not overflow or flush).
std::vector<float> make_rows(size_t rows, uint64_t seed, bool bf16) {
  std::vector<float> x = random_normal(rows * kKvDim, seed, 1.0f);
  if (rows > 3) {
    std::fill_n(x.begin(), kKvDim, 0.0f);
    for (int i = 0; i < kKvDim; ++i) {
      x[static_cast<size_t>(kKvDim + i)] *= 1e3f;
      x[static_cast<size_t>(2 * kKvDim + i)] *= 1e-6f;
    }
  }
  if (bf16) x = from_bf16(to_bf16(x));
  return x;
}

DeviceBuffer upload_act(const std::vector<float>& x, bool bf16, cudaStream_t stream) {
  return bf16 ? upload(to_bf16(x), stream) : upload(x, stream);
}

std::vector<float> norm_weight(size_t n, uint64_t seed) {
  std::vector<float> w = random_normal(n, seed, 0.1f);
  for (float& v : w)
    v += 1.0f;
  return w;
}

// Decode steps and prefill chunks: odd lengths, odd starts (seq 0 after 37 tokens, seq 3 after 9),
// a 137-token chunk (> window: only its last 128 rows reach the ring), 2-token chunks.
const std::vector<std::vector<std::pair<int32_t, int64_t>>>& schedule() {
  static const std::vector<std::vector<std::pair<int32_t, int64_t>>> s = {
      {{0, 37}, {1, 13}, {2, 1}},        {{0, 1}, {1, 137}, {2, 1}, {3, 5}},
      {{0, 1}, {1, 1}, {2, 75}, {3, 1}}, {{0, 1}, {1, 1}, {2, 1}, {3, 1}},
      {{0, 1}, {1, 1}, {2, 1}, {3, 1}},  {{2, 1}, {3, 1}},
      {{3, 31}, {0, 1}, {2, 2}},         {{1, 2}, {3, 1}, {0, 3}},
      {{0, 1}, {1, 1}, {2, 1}, {3, 1}},
  };
  return s;
}

// ---------------------------------------------------------------------------------------------
// Host-only: the plan's work items, emulated on the CPU, reproduce Model::compress's pooling and
// tail state for random chunkings (runs without a GPU).

TEST(KvWritePlan, Ratio2WorkEmulationMatchesReferenceTail) {
  std::mt19937_64 rng(7);
  const int64_t dim = kKvDim;
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<int64_t> next(kSeqs, 0);
    std::vector<Tail> ref(kSeqs), emu(kSeqs);
    std::vector<int32_t> state_rows = {3, 0, 2, 1};  // a permuted state pool
    for (int step = 0; step < 12; ++step) {
      std::vector<std::pair<int32_t, int64_t>> chunks;
      for (int32_t s = 0; s < kSeqs; ++s) {
        if (rng() % 4 == 0) continue;
        chunks.push_back({s, static_cast<int64_t>(1 + rng() % (step % 3 == 0 ? 9 : 2))});
      }
      const Batch b = make_batch(chunks, next, rng);
      const size_t rows = b.seq.size();
      const auto kv = random_normal(rows * kKvDim, rng(), 1.0f);
      const auto score = random_normal(rows * kKvDim, rng(), 2.0f);
      const CompressorPlan plan = plan_compressor(2, b.seq, b.pos, state_rows);
      // Reference: rows in position order per sequence.
      std::map<std::pair<int32_t, int64_t>, std::vector<float>> want;
      std::vector<float> latent;
      for (size_t r : cpu_order(b)) {
        Tail& t = ref[static_cast<size_t>(b.seq[r])];
        if (ref_ratio2_row(t, kv.data() + r * kKvDim, score.data() + r * kKvDim, b.pos[r], {},
                           latent)) {
          want[{b.seq[r], b.pos[r] / 2}] = latent;
        }
      }
      // Emulation of compress_ratio2_kernel's work items (pooling without the norm).
      ASSERT_EQ(plan.groups(), static_cast<int64_t>(want.size()));
      std::vector<int> tails(kSeqs, 0);
      for (const Ratio2Work& w : plan.work) {
        ASSERT_EQ(w.state_row, state_rows[static_cast<size_t>(w.seq)]);
        Tail& t = emu[static_cast<size_t>(w.seq)];
        if (w.row_odd >= 0 && w.row_even < 0) {
          // The CTA reading the carried slot must be the one rewriting it (no race on the GPU).
          ASSERT_GE(w.tail_last, 0) << "carried read of seq " << w.seq << " without its tail";
        }
        if (w.row_odd >= 0) {
          ASSERT_EQ(plan.group_seq[static_cast<size_t>(w.latent_row)], w.seq);
          ASSERT_EQ(plan.group_index[static_cast<size_t>(w.latent_row)], w.group);
          Tail g = t;  // slot 0 from the row or the carried state, slot 1 from the odd row
          if (w.row_even >= 0) {
            std::copy_n(kv.data() + w.row_even * dim, dim, g.kv.begin());
            std::copy_n(score.data() + w.row_even * dim, dim, g.score.begin());
          }
          const float* kv1 = kv.data() + w.row_odd * dim;
          const float* s1 = score.data() + w.row_odd * dim;
          ASSERT_TRUE(ref_ratio2_row(g, kv1, s1, 2 * w.group + 1, {}, latent));
          const auto it = want.find({w.seq, w.group});
          ASSERT_NE(it, want.end()) << "group " << w.group << " of seq " << w.seq;
          for (int64_t d = 0; d < dim; ++d) {
            ASSERT_EQ(float_bits(latent[static_cast<size_t>(d)]),
                      float_bits(it->second[static_cast<size_t>(d)]));
          }
        }
        if (w.tail_last >= 0) {
          ++tails[static_cast<size_t>(w.seq)];
          const auto put = [&](int32_t row, int slot) {
            std::copy_n(kv.data() + row * dim, dim, t.kv.begin() + slot * dim);
            std::copy_n(score.data() + row * dim, dim, t.score.begin() + slot * dim);
          };
          put(w.tail_last, w.tail_last_slot);
          if (w.tail_prev >= 0) put(w.tail_prev, 1 - w.tail_last_slot);
        }
      }
      for (int32_t s = 0; s < kSeqs; ++s) {
        const bool present = std::find(b.seq.begin(), b.seq.end(), s) != b.seq.end();
        ASSERT_EQ(tails[static_cast<size_t>(s)], present ? 1 : 0) << "seq " << s;
        ASSERT_EQ(emu[static_cast<size_t>(s)].kv, ref[static_cast<size_t>(s)].kv);
        ASSERT_EQ(emu[static_cast<size_t>(s)].score, ref[static_cast<size_t>(s)].score);
      }
    }
  }
}

TEST(KvWritePlan, RejectsGapsAndDuplicates) {
  const std::vector<int32_t> state = {0, 1};
  const std::vector<int32_t> seq = {0, 0};
  EXPECT_THROW(plan_compressor(2, seq, std::vector<int64_t>{4, 6}, state), Error);
  EXPECT_THROW(plan_compressor(2, seq, std::vector<int64_t>{4, 4}, state), Error);
  EXPECT_THROW(plan_compressor(3, seq, std::vector<int64_t>{4, 5}, state), Error);
  EXPECT_NO_THROW(plan_compressor(2, seq, std::vector<int64_t>{5, 4}, state));
}

// The launchers' checks run on the host before any CUDA call (no GPU needed): wrong entry
// formats, nothing to write, bad ratio.
TEST(KvWriteLaunchers, RejectInvalidParams) {
  alignas(16) static const float row[kKvDim] = {};
  alignas(16) static uint8_t pool[64] = {};
  static const int32_t pages[1] = {0};
  PagedTable t;
  t.pool = pool;
  t.pages = pages;
  t.pages_stride = 1;
  t.entries_per_page = 1;
  t.page_bytes = 1024;
  t.entry_bytes = kCompEntryBytes;  // not an SWA entry
  SwaWriteParams s;
  s.x = row;
  s.rows = 1;
  s.table = t;
  EXPECT_THROW(swa_write(s, nullptr), Error);
  s.table.entry_bytes = kSwaEntryBytes;
  s.write_ring = false;  // and no chunk_entries
  EXPECT_THROW(swa_write(s, nullptr), Error);
  CompressRatio1Params c;
  c.x = row;
  c.rows = 1;
  c.table = t;
  c.table.entry_bytes = kIndexKeyBytes;
  EXPECT_THROW(compress_ratio1(c, nullptr), Error);
  c.table.entry_bytes = kCompEntryBytes;
  c.table.page_bytes = 1000;  // not 16-byte aligned
  EXPECT_THROW(compress_ratio1(c, nullptr), Error);
  IndexKeyParams k;
  k.table = t;
  k.table.entry_bytes = kIndexKeyBytes;
  k.ratio = 0;
  EXPECT_THROW(index_key_write(k, nullptr), Error);
}

// ---------------------------------------------------------------------------------------------
// GPU parity over the schedule: window KV (two layers of the SWA table, plain/fp32 and YaRN/bf16),
// the ratio-1 owner (compressor + index keys) and a ratio-2 owner (compressor + index keys).

class KvWriteTest : public ::testing::Test {
 protected:
  void SetUp() override { DI_REQUIRE_GPU(); }
};

TEST_F(KvWriteTest, MatchesCpuReferenceOverPrefillAndDecode) {
  Stream stream;
  const cudaStream_t st = stream.get();
  std::mt19937_64 rng(2026);
  const cpu::RopeTable<float> plain(plain_rope()), yarn(yarn_rope());
  const DeviceBuffer plain_d = upload(plain.freqs(), st), yarn_d = upload(yarn.freqs(), st);

  const std::vector<float> kv_norm_a = norm_weight(kKvDim, 11), kv_norm_b = norm_weight(kKvDim, 12);
  const std::vector<float> comp_norm1 = norm_weight(kKvDim, 13),
                           comp_norm2 = norm_weight(kKvDim, 14);
  const std::vector<float> k_norm1 = norm_weight(kIndexDim, 15),
                           k_norm2 = norm_weight(kIndexDim, 16);
  const std::vector<uint16_t> wk1 = to_bf16(random_normal(size_t{kIndexDim} * kKvDim, 17, 0.05f));
  const std::vector<uint16_t> wk2 = to_bf16(random_normal(size_t{kIndexDim} * kKvDim, 18, 0.05f));
  const auto wk_ref = [](const std::vector<uint16_t>& w) {
    ConstTensorView v{reinterpret_cast<const std::byte*>(w.data()), DType::kBF16,
                      Shape{kIndexDim, kKvDim}};
    return cpu::dense_weight(v, "indexer.wk");
  };
  const cpu::WeightRef wk1_ref = wk_ref(wk1), wk2_ref = wk_ref(wk2);
  const DeviceBuffer kv_norm_a_d = upload(kv_norm_a, st), kv_norm_b_d = upload(kv_norm_b, st);
  const DeviceBuffer comp_norm1_d = upload(comp_norm1, st), comp_norm2_d = upload(comp_norm2, st);
  const DeviceBuffer k_norm1_d = upload(k_norm1, st), k_norm2_d = upload(k_norm2, st);
  const DeviceBuffer wk1_d = upload(wk1, st), wk2_d = upload(wk2, st);

  // Tables: SWA with three ring blocks (block 1 never written: must stay poisoned), the owners'
  // compressed KV and index keys. Pages with slack bytes past the last entry.
  constexpr int32_t kBlocks = 3;
  PagedPool swa(Format::kSwa, 16, 32, kBlocks * kWindow, 101, st);
  PagedPool comp1(Format::kComp, 32, 16, 256, 102, st);
  PagedPool comp2(Format::kComp, 16, 48, 128, 103, st);
  PagedPool idx1(Format::kIndex, 64, 48, 256, 104, st);
  PagedPool idx2(Format::kIndex, 16, 64, 128, 105, st);

  // Ratio-2 state pool: sequence s at row state_rows[s], initialised like the CPU tail.
  const std::vector<int32_t> state_rows = {2, 0, 3, 1};
  std::vector<Tail> tails(kSeqs);
  std::vector<float> state0(kSeqs * kRatio2StateFloats);
  for (int32_t s = 0; s < kSeqs; ++s) {
    float* p = state0.data() + state_rows[static_cast<size_t>(s)] * kRatio2StateFloats;
    std::copy(tails[0].kv.begin(), tails[0].kv.end(), p);
    std::copy(tails[0].score.begin(), tails[0].score.end(), p + 2 * kKvDim);
  }
  DeviceBuffer state_d = upload(state0, st);

  Stats swa_st, chunk_st, comp1_st, comp2_st, idx1_st, idx2_st;
  int64_t latent2_exact = 0, latent2_values = 0;
  std::vector<int64_t> next_pos(kSeqs, 0);
  int step = 0;
  for (const auto& chunks : schedule()) {
    SCOPED_TRACE("step " + std::to_string(step));
    const Batch b = make_batch(chunks, next_pos, rng);
    const auto rows = static_cast<int64_t>(b.seq.size());
    const auto nrows = static_cast<size_t>(rows);
    const bool bf2 = step % 2 == 1;  // ratio-2 inputs alternate fp32 / bf16 across the carry
    const auto xa = make_rows(nrows, 1000 + 10 * step, false);
    const auto xb = make_rows(nrows, 1001 + 10 * step, true);
    const auto x1 = make_rows(nrows, 1002 + 10 * step, false);
    const auto kv2 = make_rows(nrows, 1003 + 10 * step, bf2);
    const auto score2 = make_rows(nrows, 1004 + 10 * step, bf2);
    const DeviceBuffer seq_d = upload(b.seq, st), pos_d = upload(b.pos, st);
    const DeviceBuffer end_d = upload(b.seq_end, st);
    const DeviceBuffer xa_d = upload_act(xa, false, st), xb_d = upload_act(xb, true, st);
    const DeviceBuffer x1_d = upload_act(x1, false, st);
    const DeviceBuffer kv2_d = upload_act(kv2, bf2, st), score2_d = upload_act(score2, bf2, st);
    DeviceBuffer chunk_d = poisoned<uint8_t>(nrows * kSwaEntryBytes, st);
    DeviceBuffer latent1_d = poisoned<float>(nrows * kKvDim, st);

    // Window KV: layer A = ring block 0 (plain RoPE, fp32) in the prefill order of kv_write.h
    // (call 0: chunk entries only; call 1: the ring), layer B = block 2 (YaRN, bf16 storage) in
    // one call (call 2).
    for (int call = 0; call < 3; ++call) {
      SwaWriteParams p;
      p.x = call < 2 ? xa_d.data() : xb_d.data();
      p.norm_weight = (call < 2 ? kv_norm_a_d : kv_norm_b_d).as<float>();
      p.freqs = (call < 2 ? plain_d : yarn_d).as<float>();
      p.seq = seq_d.as<int32_t>();
      p.positions = pos_d.as<int64_t>();
      p.seq_end = end_d.as<int64_t>();
      p.table = swa.device();
      p.chunk_entries = call == 0 ? chunk_d.as<uint8_t>() : nullptr;
      p.write_ring = call != 0;
      p.rows = rows;
      p.ring_block = call == 2 ? 2 : 0;
      p.window = kWindow;
      p.eps = static_cast<float>(kEps);
      p.precision = call < 2 ? ActPrecision::kF32 : ActPrecision::kBF16;
      if (call == 0) p.table = PagedTable{};  // not used without the ring write
      swa_write(p, st);
    }
    // Ratio-1 owner.
    const CompressorPlan plan1 = plan_compressor(1, b.seq, b.pos, {});
    {
      CompressRatio1Params p;
      p.x = x1_d.data();
      p.norm_weight = comp_norm1_d.as<float>();
      p.freqs = yarn_d.as<float>();
      p.seq = seq_d.as<int32_t>();
      p.positions = pos_d.as<int64_t>();
      p.latent = latent1_d.as<float>();
      p.table = comp1.device();
      p.rows = rows;
      p.eps = static_cast<float>(kEps);
      compress_ratio1(p, st);
      IndexKeyParams k;
      k.latent = latent1_d.as<float>();
      k.wk = wk1_d.as<uint16_t>();
      k.norm_weight = k_norm1_d.as<float>();
      k.freqs = yarn_d.as<float>();
      k.seq = seq_d.as<int32_t>();
      k.group = pos_d.as<int64_t>();
      k.table = idx1.device();
      k.groups = plan1.groups();
      k.ratio = 1;
      k.eps = static_cast<float>(kEps);
      index_key_write(k, st);
    }
    // Ratio-2 owner.
    const CompressorPlan plan2 = plan_compressor(2, b.seq, b.pos, state_rows);
    const DeviceBuffer work_d = upload(plan2.work, st);
    const DeviceBuffer gseq_d = upload(plan2.group_seq, st), gidx_d = upload(plan2.group_index, st);
    DeviceBuffer latent2_d = poisoned<float>(static_cast<size_t>(plan2.groups()) * kKvDim, st);
    {
      CompressRatio2Params p;
      p.kv = kv2_d.data();
      p.score = score2_d.data();
      p.norm_weight = comp_norm2_d.as<float>();
      p.freqs = yarn_d.as<float>();
      p.work = work_d.as<Ratio2Work>();
      p.state = state_d.as<float>();
      p.latent = latent2_d.as<float>();
      p.table = comp2.device();
      p.works = static_cast<int64_t>(plan2.work.size());
      p.eps = static_cast<float>(kEps);
      p.precision = bf2 ? ActPrecision::kBF16 : ActPrecision::kF32;
      compress_ratio2(p, st);
      IndexKeyParams k;
      k.latent = latent2_d.as<float>();
      k.wk = wk2_d.as<uint16_t>();
      k.norm_weight = k_norm2_d.as<float>();
      k.freqs = yarn_d.as<float>();
      k.seq = gseq_d.as<int32_t>();
      k.group = gidx_d.as<int64_t>();
      k.table = idx2.device();
      k.groups = plan2.groups();
      k.ratio = 2;
      k.eps = static_cast<float>(kEps);
      index_key_write(k, st);
    }

    // CPU reference, rows in (sequence, position) order.
    std::vector<uint8_t> chunk_want(nrows * kSwaEntryBytes);
    std::map<std::pair<int32_t, int64_t>, std::vector<float>> latent2_want;
    std::vector<float> latent;
    for (size_t r : cpu_order(b)) {
      const int32_t s = b.seq[r];
      const int64_t pos = b.pos[r];
      const bool to_ring = pos >= b.seq_end[static_cast<size_t>(s)] - kWindow;
      const auto ea = pack(Format::kSwa, ref_window(xa.data() + r * kKvDim, kv_norm_a, plain, pos));
      std::copy(ea.begin(), ea.end(),
                chunk_want.begin() + static_cast<std::ptrdiff_t>(r) * kSwaEntryBytes);
      if (to_ring) {
        swa.expect(s, 0 * kWindow + pos % kWindow, ea);
        swa.expect(s, 2 * kWindow + pos % kWindow,
                   pack(Format::kSwa, ref_window(xb.data() + r * kKvDim, kv_norm_b, yarn, pos)));
      }
      // Ratio 1: latent = comp_norm(kv); entry at the position; key from the latent.
      std::vector<float> l1(x1.begin() + static_cast<std::ptrdiff_t>(r) * kKvDim,
                            x1.begin() + static_cast<std::ptrdiff_t>(r + 1) * kKvDim);
      cpu::rms_norm<float>(l1.data(), 1, kKvDim, comp_norm1.data(), kEps);
      comp1.expect(s, pos, pack(Format::kComp, ref_comp(l1, yarn, pos)));
      idx1.expect(s, pos, pack(Format::kIndex, ref_index_key(l1, wk1_ref, k_norm1, yarn, pos)));
      // Ratio 2.
      if (ref_ratio2_row(tails[static_cast<size_t>(s)], kv2.data() + r * kKvDim,
                         score2.data() + r * kKvDim, pos, comp_norm2, latent)) {
        const int64_t g = pos / 2;
        comp2.expect(s, g, pack(Format::kComp, ref_comp(latent, yarn, 2 * g)));
        idx2.expect(s, g,
                    pack(Format::kIndex, ref_index_key(latent, wk2_ref, k_norm2, yarn, 2 * g)));
        latent2_want[{s, g}] = latent;
      }
    }
    // Ratio-1 latents in row order, bitwise (no transcendental before them).
    const std::vector<float> latent1 = download<float>(latent1_d, nrows * kKvDim, st);
    for (size_t r = 0; r < nrows; ++r) {
      std::vector<float> l1(x1.begin() + static_cast<std::ptrdiff_t>(r) * kKvDim,
                            x1.begin() + static_cast<std::ptrdiff_t>(r + 1) * kKvDim);
      cpu::rms_norm<float>(l1.data(), 1, kKvDim, comp_norm1.data(), kEps);
      for (int d = 0; d < kKvDim; ++d) {
        ASSERT_EQ(float_bits(latent1[r * kKvDim + static_cast<size_t>(d)]),
                  float_bits(l1[static_cast<size_t>(d)]))
            << "ratio-1 latent row " << r << " value " << d;
      }
    }
    // Ratio-2 latents in plan order, within 1e-5 * (|x| + 1) (the exp may differ by an ulp).
    const std::vector<float> latent2 =
        download<float>(latent2_d, static_cast<size_t>(plan2.groups()) * kKvDim, st);
    ASSERT_EQ(static_cast<size_t>(plan2.groups()), latent2_want.size());
    for (size_t g = 0; g < latent2_want.size(); ++g) {
      const auto& want = latent2_want.at({plan2.group_seq[g], plan2.group_index[g]});
      for (int d = 0; d < kKvDim; ++d) {
        const float got = latent2[g * kKvDim + static_cast<size_t>(d)];
        const float w = want[static_cast<size_t>(d)];
        ASSERT_LE(std::fabs(static_cast<double>(got) - w), 1e-5 * (std::fabs(w) + 1.0))
            << "ratio-2 latent of group " << plan2.group_index[g] << " seq " << plan2.group_seq[g]
            << " value " << d;
        latent2_exact += float_bits(got) == float_bits(w);
        ++latent2_values;
      }
    }
    // The carried ratio-2 state: copies of the inputs, bitwise the CPU's tails.
    const std::vector<float> state = download<float>(state_d, state0.size(), st);
    for (int32_t s = 0; s < kSeqs; ++s) {
      const float* p = state.data() + state_rows[static_cast<size_t>(s)] * kRatio2StateFloats;
      const Tail& t = tails[static_cast<size_t>(s)];
      for (size_t i = 0; i < t.kv.size(); ++i) {
        ASSERT_EQ(float_bits(p[i]), float_bits(t.kv[i])) << "state kv of seq " << s << " at " << i;
        ASSERT_EQ(float_bits(p[2 * kKvDim + i]), float_bits(t.score[i]))
            << "state score of seq " << s << " at " << i;
      }
    }
    // The chunk copy of layer A: every row's entry, row order.
    {
      const std::vector<uint8_t> got = download<uint8_t>(chunk_d, chunk_want.size(), st);
      std::vector<float> gv, gs, ev, es;
      for (size_t r = 0; r < nrows; ++r) {
        const std::span<const uint8_t> g(got.data() + r * kSwaEntryBytes, kSwaEntryBytes);
        const std::span<const uint8_t> e(chunk_want.data() + r * kSwaEntryBytes, kSwaEntryBytes);
        for (int i = 0; i < kSwaEntryBytes; ++i)
          chunk_st.identical += g[static_cast<size_t>(i)] == e[static_cast<size_t>(i)];
        chunk_st.bytes += kSwaEntryBytes;
        decode(Format::kSwa, g, gv, gs);
        decode(Format::kSwa, e, ev, es);
        for (size_t d = 0; d < gv.size(); ++d) {
          ASSERT_LE(std::fabs(static_cast<double>(gv[d]) - ev[d]),
                    std::max(grid_step(Format::kSwa, gv[d], gs[d]),
                             grid_step(Format::kSwa, ev[d], es[d])))
              << "chunk entry of row " << r << " value " << d;
        }
      }
    }
    swa.check("swa", st, swa_st);
    comp1.check("comp ratio 1", st, comp1_st);
    comp2.check("comp ratio 2", st, comp2_st);
    idx1.check("index keys ratio 1", st, idx1_st);
    idx2.check("index keys ratio 2", st, idx2_st);
    if (HasFatalFailure()) return;
    ++step;
  }

  const auto fraction = [](const Stats& s) {
    return s.bytes == 0 ? 0.0 : static_cast<double>(s.identical) / static_cast<double>(s.bytes);
  };
  const std::pair<const char*, const Stats*> all[] = {
      {"swa", &swa_st},           {"swa_chunk", &chunk_st},   {"comp_ratio1", &comp1_st},
      {"comp_ratio2", &comp2_st}, {"index_ratio1", &idx1_st}, {"index_ratio2", &idx2_st}};
  for (const auto& [name, s] : all) {
    EXPECT_GT(s->bytes, 0) << name;
    EXPECT_GE(fraction(*s), 0.999)
        << name << ": " << s->identical << " of " << s->bytes << " bytes identical";
    RecordProperty(std::string(name) + "_identical_fraction", std::to_string(fraction(*s)));
    std::fprintf(stderr, "[kv_write] %-13s %lld / %lld bytes identical (%.6f)\n", name,
                 static_cast<long long>(s->identical), static_cast<long long>(s->bytes),
                 fraction(*s));
  }
  std::fprintf(stderr, "[kv_write] ratio-2 latents: %lld / %lld values bitwise equal\n",
               static_cast<long long>(latent2_exact), static_cast<long long>(latent2_values));
}

}  // namespace
}  // namespace di
