#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/check.h"
#include "deepinfer/sampling_params.h"
#include "sampling/sampler.h"

namespace di {

class ForwardTracer;

// Numeric precision of a forward: kFp32 is the normal one; kFp64 is a validation precision where
// every activation/accumulation is double while the quantisation sites and their binary32 scale
// formulas stay as the reference defines them; kBf16 runs the reference's default-dtype bf16
// semantics (fixtures README §5.3): fp32 arithmetic with every tensor the reference keeps in bf16
// rounded to bf16 where it is produced, and attention probabilities rounded before P.V.
enum class Precision { kFp32, kFp64, kBf16 };

// Which index keys a ratio-2 key owner scores against on decode steps that emit no latent
// (delta spec §5.2): its own keys (intended, default) or whatever the shared slot last held
// (the shipped reference's behaviour).
enum class IndexKeyQuirk { kIntended, kShipped };

// Where the Engram tables' rows are read from (both backends gather them on the host). kMapped:
// the checkpoint's mapping, each new page faulted in on first touch (~2-3 µs a row on a cold
// page). kResident: every page of the tables mapped in at load (MADV_POPULATE_READ; the real
// tables are ~189 GiB). kAuto: resident when the tables take at most half the memory available
// at load, else mapped.
enum class EngramTables : uint8_t { kAuto, kMapped, kResident };

struct ForwardOptions {
  Precision precision = Precision::kFp32;
  IndexKeyQuirk quirk = IndexKeyQuirk::kIntended;
  EngramTables engram_tables = EngramTables::kAuto;
};

// Opaque per-sequence state (rings, compressor tails, compressed KV and index keys per owner,
// Engram history, DSpark rings). Created by the model, owned by the caller.
class SequenceState {
 public:
  virtual ~SequenceState() = default;
  virtual int64_t num_tokens() const = 0;  // positions consumed by the backbone so far
};

// The sampling of a chunk's last position, for backends that sample where the logits are (the
// CUDA backend: only token ids and logprobs come back, not the [vocab] logits row): the inputs of
// sample_row (sampling/sampler.h); row.logits is left empty (the backend's own logits row). The
// spans must stay valid during forward().
struct ChunkSampling {
  const deepinfer::SamplingParams* params = nullptr;
  SamplerRow row;
};

// One sequence's chunk in a batched forward: the tokens continue that sequence at position
// state->num_tokens().
struct SequenceChunk {
  SequenceState* state = nullptr;
  std::span<const int64_t> token_ids;
  // [tokens] non-zero for positions inside an image span (the VL routing bias `bias_vl` is used
  // and the Engram gate is shut; the position is DEAD for n-gram hashing). Empty = all text.
  // Image features themselves come from the vision tower (not part of this API yet).
  std::span<const uint8_t> image_mask = {};
  // Also return the logits of every position of the chunk (prompt logprobs).
  bool all_logits = false;
  // Non-null: the backend may sample the chunk's last position itself (ForwardResult::sampled);
  // a backend that does not keeps returning the logits.
  const ChunkSampling* sampling = nullptr;
};

struct ForwardResult {
  // Per chunk: fp64-valued logits of the LAST position of the chunk, [vocab] (float32 runs
  // store float values widened to double). Empty for a chunk the backend sampled (unless it
  // asked for all logits).
  std::vector<std::vector<double>> logits;
  // Per chunk (or empty): set when the backend sampled the chunk's last position.
  std::vector<std::optional<SampleOutcome>> sampled;
  // Per chunk with all_logits: [tokens * vocab] row-major logits of every position (the last
  // row equals `logits`); empty otherwise.
  std::vector<std::vector<double>> all_logits;
  // Per chunk: the DSpark taps of every position of the chunk, [tokens][n_taps * hidden]
  // (empty when the model has no DSpark stages).
  std::vector<std::vector<std::vector<double>>> main_hidden;
};

struct DraftResult {
  std::vector<int64_t> draft_ids;           // [block_size]: drafts for positions p+2..
  std::vector<std::vector<double>> logits;  // [block_size][vocab], Markov bias included
  std::vector<double> confidence;           // [block_size] raw logits (no sigmoid)
};

// One sequence's DSpark drafting step (ForwardModel::dspark_steps): the arguments of dspark_step.
struct DraftRequest {
  SequenceState* state = nullptr;
  int64_t input_id = 0;
  const std::vector<double>* main_hidden_row = nullptr;
  // false: the result's logits stay empty — the drafts and confidences are all that greedy
  // verification reads, and a GPU backend then copies 5 x vocab floats less per sequence.
  bool logits = true;
};

// The forward pass of a loaded model on some backend.
class ForwardModel {
 public:
  virtual ~ForwardModel() = default;
  virtual std::unique_ptr<SequenceState> new_sequence() const = 0;
  // Runs the backbone over every chunk (a prefill chunk of any length, or one decode token).
  virtual ForwardResult forward(std::span<const SequenceChunk> chunks) = 0;
  // DSpark: seed every stage's ring with main_kv of the given positions (rows of main_hidden
  // produced by the backbone for positions [first_pos, first_pos + rows)).
  virtual void dspark_prefill(SequenceState& state,
                              const std::vector<std::vector<double>>& main_hidden_rows) = 0;
  // DSpark: one drafting step after the backbone consumed position p (= num_tokens() - 1):
  // `input_id` is the token sampled for p+1, `main_hidden_row` the taps at p.
  virtual DraftResult dspark_step(SequenceState& state, int64_t input_id,
                                  const std::vector<double>& main_hidden_row) = 0;
  // DSpark: one drafting step of each of several distinct sequences, results in request order;
  // each result is the one dspark_step gives that sequence alone (a backend may run them as one
  // batched step, never changing a sequence's result). The default runs them one by one.
  virtual std::vector<DraftResult> dspark_steps(std::span<const DraftRequest> requests) {
    for (size_t i = 0; i < requests.size(); ++i) {  // all checked before any sequence advances
      DI_CHECK(requests[i].state != nullptr && requests[i].main_hidden_row != nullptr,
               "dspark_steps: request {} lacks its state or main_hidden row", i);
      for (size_t k = 0; k < i; ++k) {
        DI_CHECK(requests[k].state != requests[i].state,
                 "dspark_steps: requests {} and {} draft the same sequence", k, i);
      }
    }
    std::vector<DraftResult> out;
    out.reserve(requests.size());
    for (const DraftRequest& r : requests) {
      out.push_back(dspark_step(*r.state, r.input_id, *r.main_hidden_row));
      if (!r.logits) out.back().logits.clear();
    }
    return out;
  }
  virtual int64_t vocab_size() const = 0;
  // Installs a tracer that receives every named intermediate of later forward and DSpark calls
  // (model/trace.h; nullptr: none). Not owned. Backends without tracing ignore it.
  virtual void set_tracer(ForwardTracer* tracer) { (void)tracer; }
};

}  // namespace di
