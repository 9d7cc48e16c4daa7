#include "model/trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "common/check.h"
#include "common/error.h"
#include "loader/safetensors.h"
#include "loader/safetensors_writer.h"

namespace di {

int64_t TraceTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

void TraceRecorder::set_run(std::string run) {
  run_ = std::move(run);
  prefix_ = run_.empty() ? std::string() : run_ + ".";
}

void TraceRecorder::begin_chunk(size_t index, size_t count) {
  const std::string run = run_.empty() ? std::string() : run_ + ".";
  prefix_ = count > 1 ? fmt::format("{}seq{}.", run, index) : run;
}

TraceTensor& TraceRecorder::add(std::string_view name, std::vector<int64_t> shape, size_t numel) {
  TraceTensor t;
  t.name = prefix_ + std::string(name);
  t.shape = std::move(shape);
  DI_CHECK(t.numel() == static_cast<int64_t>(numel), "trace '{}': {} values for shape [{}]", t.name,
           numel, fmt::join(t.shape, ", "));
  const auto [it, inserted] = index_.emplace(t.name, tensors_.size());
  DI_CHECK(inserted, "trace '{}' recorded twice (set a new run between forwards)", t.name);
  tensors_.push_back(std::move(t));
  return tensors_.back();
}

void TraceRecorder::record(std::string_view name, std::span<const double> values,
                           std::vector<int64_t> shape) {
  add(name, std::move(shape), values.size()).values.assign(values.begin(), values.end());
}

void TraceRecorder::record_ids(std::string_view name, std::span<const int64_t> values,
                               std::vector<int64_t> shape) {
  TraceTensor& t = add(name, std::move(shape), values.size());
  t.is_ids = true;
  t.ids.assign(values.begin(), values.end());
}

const TraceTensor* TraceRecorder::find(std::string_view full_name) const {
  auto it = index_.find(std::string(full_name));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void TraceRecorder::clear() {
  tensors_.clear();
  index_.clear();
}

void TraceRecorder::write_safetensors(const std::filesystem::path& path, DType float_dtype) const {
  DI_CHECK(float_dtype == DType::kF32 || float_dtype == DType::kF64,
           "trace dump: floats are written as F32 or F64, not {}", dtype_name(float_dtype));
  std::vector<TensorSpec> specs;
  for (const TraceTensor& t : tensors_)
    specs.push_back({t.name, t.is_ids ? DType::kI64 : float_dtype, Shape(t.shape)});
  SafetensorsWriter w(path.string(), specs, {{"format", "pt"}, {"producer", "deepinfer"}});
  for (const TraceTensor& t : tensors_) {
    if (t.is_ids) {
      w.write(std::as_bytes(std::span<const int64_t>(t.ids)));
    } else if (float_dtype == DType::kF64) {
      w.write(std::as_bytes(std::span<const double>(t.values)));
    } else {
      const std::vector<float> f(t.values.begin(), t.values.end());
      w.write(std::as_bytes(std::span<const float>(f)));
    }
  }
  w.finish();
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// max |eng - ref| / std(finite ref); equal values (infinities included) agree exactly.
double rel_error(std::span<const double> eng, std::span<const double> ref) {
  double mean = 0;
  int64_t n = 0;
  for (double v : ref) {
    if (std::isfinite(v)) {
      mean += v;
      ++n;
    }
  }
  mean = n > 0 ? mean / static_cast<double>(n) : 0;
  double var = 0;
  for (double v : ref) {
    if (std::isfinite(v)) var += (v - mean) * (v - mean);
  }
  const double sd = n > 0 ? std::sqrt(var / static_cast<double>(n)) : 0;
  double max_abs = 0;
  for (size_t i = 0; i < eng.size(); ++i) {
    if (eng[i] == ref[i]) continue;
    const double d = std::fabs(eng[i] - ref[i]);
    if (!std::isfinite(d)) return kInf;
    max_abs = std::max(max_abs, d);
  }
  return sd > 0 ? max_abs / sd : max_abs;
}

// Copies of a tensor's elements: safetensors payloads need not be aligned for their dtype.
template <typename S>
std::vector<S> copy_elements(const ConstTensorView& v) {
  std::vector<S> out(static_cast<size_t>(v.shape.numel()));
  std::memcpy(out.data(), v.data, out.size() * sizeof(S));
  return out;
}

std::vector<double> reference_values(const ConstTensorView& v) {
  switch (v.dtype) {
    case DType::kF32: {
      const std::vector<float> f = copy_elements<float>(v);
      return {f.begin(), f.end()};
    }
    case DType::kF64:
      return copy_elements<double>(v);
    default:
      throw Error(fmt::format("reference dtype {} is not a float", dtype_name(v.dtype)));
  }
}

bool wanted(const std::string& name, const std::vector<std::string>& prefixes) {
  if (prefixes.empty()) return true;
  return std::any_of(prefixes.begin(), prefixes.end(),
                     [&](const std::string& p) { return name.rfind(p, 0) == 0; });
}

}  // namespace

TraceDiff compare_trace(const TraceRecorder& engine, const std::filesystem::path& reference,
                        double rel_threshold, const std::vector<std::string>& reference_prefixes) {
  const SafetensorsFile ref(reference.string());
  TraceDiff diff;
  std::set<std::string> seen;
  for (const TraceTensor& t : engine.tensors()) {
    const TensorInfo* info = ref.find(t.name);
    if (info == nullptr) {
      diff.engine_only.push_back(t.name);
      continue;
    }
    seen.insert(t.name);
    const ConstTensorView v = ref.view(*info);
    TraceDiffEntry e;
    e.name = t.name;
    e.is_ids = t.is_ids;
    e.shape_ok = v.shape.dims() == t.shape;
    if (t.is_ids) {
      if (v.dtype != DType::kI64) {
        throw Error(fmt::format("{}: '{}' is {}; the engine's ids compare with I64",
                                reference.string(), t.name, dtype_name(v.dtype)));
      }
      if (e.shape_ok) {
        const std::vector<int64_t> r = copy_elements<int64_t>(v);
        for (size_t i = 0; i < r.size(); ++i)
          e.mismatches += t.ids[i] != r[i];
      }
      e.pass = e.shape_ok && e.mismatches == 0;
    } else {
      const std::vector<double> r = reference_values(v);
      if (e.shape_ok) {
        e.raw_rel = rel_error(t.values, r);
        std::vector<double> stored = t.values;
        if (v.dtype == DType::kF32) {
          for (double& x : stored)
            x = static_cast<double>(static_cast<float>(x));
        }
        e.rel = rel_error(stored, r);
      } else {
        e.rel = e.raw_rel = kInf;
      }
      e.pass = e.shape_ok && e.rel <= rel_threshold;
      if (!(e.rel <= diff.max_rel)) {
        diff.max_rel = e.rel;
        diff.max_rel_at = e.name;
      }
      if (!(e.raw_rel <= diff.max_raw_rel)) {
        diff.max_raw_rel = e.raw_rel;
        diff.max_raw_rel_at = e.name;
      }
    }
    if (!e.pass) {
      ++diff.failures;
      if (!diff.first_failure) diff.first_failure = diff.entries.size();
    }
    diff.entries.push_back(std::move(e));
  }
  for (const TensorInfo& info : ref.tensors()) {
    if (!seen.count(info.name) && wanted(info.name, reference_prefixes))
      diff.reference_only.push_back(info.name);
  }
  return diff;
}

}  // namespace di
