#include "model/catalogue_check.h"

#include <algorithm>
#include <cstring>

#include "common/check.h"

namespace di {

std::string CatalogueReport::to_string(size_t max_lines) const {
  std::string out;
  size_t n = 0;
  for (const auto& p : problems) {
    if (n++ == max_lines) {
      out += fmt::format("  ... and {} more\n", problems.size() - max_lines);
      break;
    }
    out += "  " + p.message + "\n";
  }
  return out;
}

CatalogueReport check_catalogue(const Checkpoint& ckpt, const WeightCatalogue& cat) {
  CatalogueReport r;
  auto shard_of = [&](const CheckpointTensor& t) { return ckpt.shard_files().at(t.shard); };
  for (const WeightSpec& s : cat.entries()) {
    ++r.checked;
    const CheckpointTensor* t = ckpt.find(s.name);
    if (t == nullptr) {
      r.problems.push_back({CatalogueProblem::Kind::kMissing, s.name, "",
                            fmt::format("missing tensor {} (expected {} {})", s.name,
                                        dtype_name(s.dtype), s.shape)});
      continue;
    }
    if (t->dtype != s.dtype) {
      r.problems.push_back({CatalogueProblem::Kind::kDtype, s.name, shard_of(*t),
                            fmt::format("{}: tensor {} has dtype {}, expected {}", shard_of(*t),
                                        s.name, dtype_name(t->dtype), dtype_name(s.dtype))});
    }
    if (t->shape != s.shape) {
      r.problems.push_back({CatalogueProblem::Kind::kShape, s.name, shard_of(*t),
                            fmt::format("{}: tensor {} has shape {}, expected {}", shard_of(*t),
                                        s.name, t->shape, s.shape)});
    }
  }
  for (const CheckpointTensor& t : ckpt.tensors()) {
    if (cat.find(t.name) == nullptr) {
      r.problems.push_back(
          {CatalogueProblem::Kind::kExtra, t.name, shard_of(t),
           fmt::format("{}: unexpected tensor {} ({} {}) not in the {} catalogue", shard_of(t),
                       t.name, dtype_name(t.dtype), t.shape, "model")});
    }
  }
  return r;
}

void check_scale_bytes(const Checkpoint& ckpt, const WeightCatalogue& cat,
                       CatalogueReport& report) {
  for (const WeightSpec& s : cat.entries()) {
    if (s.dtype != DType::kF8E8M0) continue;
    const CheckpointTensor* t = ckpt.find(s.name);
    if (t == nullptr || t->dtype != DType::kF8E8M0) continue;
    ConstTensorView v = ckpt.view(*t);
    const auto* p = reinterpret_cast<const unsigned char*>(v.data);
    const size_t n = v.nbytes();
    report.scale_bytes_scanned += n;
    // Scan in windows and drop each window's pages afterwards: RSS stays bounded even for the
    // 3 GiB scale tables of the Engram embeddings.
    constexpr size_t kWindow = 64u << 20;
    size_t count = 0, first_idx = n;
    for (size_t w = 0; w < n; w += kWindow) {
      const size_t end = std::min(n, w + kWindow);
      const void* hit = std::memchr(p + w, 0xFF, end - w);
      if (hit != nullptr) {
        const auto h = static_cast<size_t>(static_cast<const unsigned char*>(hit) - p);
        if (count == 0) first_idx = h;
        for (size_t i = h; i < end; ++i)
          count += p[i] == 0xFF;
      }
      ckpt.release(*t, w, end - w);
    }
    if (count == 0) continue;
    const int64_t cols = t->shape.rank() >= 2 ? t->shape[t->shape.rank() - 1] : 1;
    const std::string& shard = ckpt.shard_files().at(t->shard);
    report.problems.push_back(
        {CatalogueProblem::Kind::kNanScale, s.name, shard,
         fmt::format("{}: tensor {} has {} NaN scale byte(s) (0xFF), first at [{}, {}]", shard,
                     s.name, count, static_cast<int64_t>(first_idx) / cols,
                     static_cast<int64_t>(first_idx) % cols)});
  }
}

void throw_if_problems(const CatalogueReport& report, const std::string& what) {
  if (report.ok()) return;
  throw Error(fmt::format("{}: {} problem(s) found:\n{}", what, report.problems.size(),
                          report.to_string()));
}

}  // namespace di
