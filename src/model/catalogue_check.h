#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loader/checkpoint.h"
#include "model/weight_catalogue.h"

namespace di {

struct CatalogueProblem {
  enum class Kind { kMissing, kExtra, kDtype, kShape, kNanScale };
  Kind kind = Kind::kMissing;
  std::string tensor;
  std::string shard;  // shard file holding the tensor ("" when missing)
  std::string message;
};

struct CatalogueReport {
  std::vector<CatalogueProblem> problems;
  uint64_t checked = 0;  // catalogue entries examined
  uint64_t scale_bytes_scanned = 0;
  bool ok() const { return problems.empty(); }
  // Every problem, one per line (capped at `max_lines`, then "... and N more").
  std::string to_string(size_t max_lines = 200) const;
};

// Compares a checkpoint with the catalogue: every missing, extra, mis-typed or mis-shaped tensor
// is reported, each naming its shard file. Reads headers only.
CatalogueReport check_catalogue(const Checkpoint& ckpt, const WeightCatalogue& cat);

// Scans the payload of every E8M0 scale tensor of the catalogue for 0xFF (NaN) bytes and appends
// one problem per affected tensor (with the count and the first index). Reads those bytes.
void check_scale_bytes(const Checkpoint& ckpt, const WeightCatalogue& cat, CatalogueReport& report);

// Throws di::Error with report.to_string() when the report has problems.
void throw_if_problems(const CatalogueReport& report, const std::string& what);

}  // namespace di
