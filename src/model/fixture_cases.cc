#include "model/fixture_cases.h"

#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "loader/safetensors.h"

namespace di {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw Error(fmt::format("{}: {}", where, what));
}

const json& member(const json& obj, const char* name, const std::string& where) {
  if (!obj.is_object()) fail(where, "is not a JSON object");
  auto it = obj.find(name);
  if (it == obj.end()) fail(where, fmt::format("missing field '{}'", name));
  return *it;
}

std::string string_member(const json& obj, const char* name, const std::string& where) {
  const json& v = member(obj, name, where);
  if (!v.is_string()) fail(where, fmt::format("field '{}' is not a string", name));
  return v.get<std::string>();
}

std::map<std::string, std::string> string_map(const json& obj, const std::string& where) {
  if (!obj.is_object()) fail(where, "is not a JSON object");
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : obj.items()) {
    if (!v.is_string()) fail(where, fmt::format("'{}' is not a string", k));
    out[k] = v.get<std::string>();
  }
  return out;
}

std::vector<int64_t> shape_value(const json& v, const std::string& where) {
  if (!v.is_array()) fail(where, "shape is not an array");
  std::vector<int64_t> out;
  for (const json& d : v) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) fail(where, "bad shape dimension");
    out.push_back(d.get<int64_t>());
  }
  return out;
}

std::optional<double> opt_number(const json& v, const std::string& where) {
  if (v.is_null()) return std::nullopt;
  if (!v.is_number()) fail(where, "margin is neither a number nor null");
  return v.get<double>();
}

std::optional<int64_t> opt_count(const json& v, const std::string& where) {
  if (v.is_null()) return std::nullopt;
  if (!v.is_number_integer()) fail(where, "event count is neither an integer nor null");
  return v.get<int64_t>();
}

// topk_margins / quant_margins: {precision: {label: {site: series}}}, plus "explanation" and
// (quant) "summary" entries that are not precisions.
std::map<std::string, MarginTable> parse_margin_tables(const json& section,
                                                       const std::string& where) {
  std::map<std::string, MarginTable> out;
  if (!section.is_object()) fail(where, "is not a JSON object");
  for (const auto& [prec, labels] : section.items()) {
    if (prec == "explanation" || prec == "summary" || !labels.is_object()) continue;
    MarginTable& table = out[prec];
    for (const auto& [label, sites] : labels.items()) {
      if (!sites.is_object()) fail(where, fmt::format("{}.{} is not an object", prec, label));
      for (const auto& [site, s] : sites.items()) {
        const std::string w = fmt::format("{} {}.{}.{}", where, prec, label, site);
        if (!s.is_object()) fail(w, "is not an object");
        MarginSeries series;
        if (auto it = s.find("prefill"); it != s.end()) series.prefill = opt_number(*it, w);
        if (auto it = s.find("steps"); it != s.end()) {
          if (!it->is_array()) fail(w, "'steps' is not an array");
          for (const json& v : *it)
            series.steps.push_back(opt_number(v, w));
        }
        if (auto it = s.find("prefill_n_below_1e-6"); it != s.end())
          series.prefill_n_below = opt_count(*it, w);
        if (auto it = s.find("steps_n_below_1e-6"); it != s.end()) {
          if (!it->is_array()) fail(w, "'steps_n_below_1e-6' is not an array");
          for (const json& v : *it)
            series.steps_n_below.push_back(opt_count(v, w));
        }
        table[label][site] = std::move(series);
      }
    }
  }
  return out;
}

std::optional<FixtureCaseKind> parse_kind(const std::string& s) {
  if (s == "prefill") return FixtureCaseKind::kPrefill;
  if (s == "prefill_then_decode") return FixtureCaseKind::kPrefillThenDecode;
  if (s == "prefill_then_decode_batched") return FixtureCaseKind::kPrefillThenDecodeBatched;
  if (s == "greedy_generation") return FixtureCaseKind::kGreedyGeneration;
  return std::nullopt;
}

ExpectedRole split_role(const std::string& role, const std::string& key,
                        const std::vector<std::string>& behaviours) {
  for (const std::string& b : behaviours) {
    const std::string suffix = "_" + b;
    if (role.size() > suffix.size() &&
        role.compare(role.size() - suffix.size(), suffix.size(), suffix) == 0) {
      return {role, role.substr(0, role.size() - suffix.size()), b, key};
    }
  }
  return {role, role, "", key};
}

FixtureCase parse_case(const json& c, size_t index, const std::vector<std::string>& behaviours,
                       const std::string& file) {
  std::string where = fmt::format("{}: cases[{}]", file, index);
  FixtureCase fc;
  fc.name = string_member(c, "name", where);
  where = fmt::format("{}: case '{}'", file, fc.name);
  fc.kind_name = string_member(c, "kind", where);
  const auto kind = parse_kind(fc.kind_name);
  if (!kind) fail(where, fmt::format("unknown kind '{}'", fc.kind_name));
  fc.kind = *kind;
  if (auto it = c.find("description"); it != c.end() && it->is_string())
    fc.description = it->get<std::string>();
  fc.inputs = string_map(member(c, "inputs", where), where + " inputs");
  if (fc.inputs.empty()) fail(where, "has no inputs");
  const json& expected = member(c, "expected", where);
  if (!expected.is_object()) fail(where, "'expected' is not an object");
  for (const auto& [prec, roles] : expected.items()) {
    for (const auto& [role, key] : string_map(roles, where + " expected." + prec))
      fc.expected[prec].push_back(split_role(role, key, behaviours));
  }
  const json& shapes = member(c, "shapes", where);
  if (!shapes.is_object()) fail(where, "'shapes' is not an object");
  for (const auto& [key, s] : shapes.items())
    fc.shapes[key] = shape_value(s, fmt::format("{} shapes.{}", where, key));
  for (const auto& [role, key] : fc.inputs) {
    if (!fc.shapes.count(key)) fail(where, fmt::format("shapes lists no entry for '{}'", key));
  }
  for (const auto& [prec, roles] : fc.expected) {
    for (const ExpectedRole& r : roles) {
      if (!fc.shapes.count(r.key))
        fail(where, fmt::format("shapes lists no entry for '{}'", r.key));
    }
  }
  if (auto it = c.find("dspark_logit_steps"); it != c.end()) {
    if (!it->is_string()) fail(where, "'dspark_logit_steps' is not a string");
    fc.dspark_logit_steps_key = it->get<std::string>();
  }
  return fc;
}

void append_near_ties(const std::map<std::string, MarginSeries>& sites, const std::string& what,
                      MarginForward f, bool include_dspark, const NearTieThresholds& t, bool quant,
                      std::vector<std::string>& out) {
  const std::string at = f.prefill ? "prefill" : fmt::format("step {}", f.step);
  for (const auto& [site, s] : sites) {
    if (!include_dspark && site.rfind("dspark", 0) == 0) continue;
    std::optional<double> m;
    std::optional<int64_t> n;
    if (f.prefill) {
      m = s.prefill;
      n = s.prefill_n_below;
    } else if (f.step >= 0) {
      const auto k = static_cast<size_t>(f.step);
      if (k < s.steps.size()) m = s.steps[k];
      if (k < s.steps_n_below.size()) n = s.steps_n_below[k];
    }
    const double limit = quant ? t.quant : t.topk;
    if ((n && *n > 0) || (m && *m <= limit)) {
      std::string msg = fmt::format("{} {} {}", what, site, at);
      if (n && *n > 0) msg += fmt::format(": {} events < 1e-6", *n);
      if (m) msg += fmt::format("{} min {:.3g}", n && *n > 0 ? "," : ":", *m);
      out.push_back(std::move(msg));
    }
  }
}

}  // namespace

const char* fixture_case_kind_name(FixtureCaseKind kind) {
  switch (kind) {
    case FixtureCaseKind::kPrefill:
      return "prefill";
    case FixtureCaseKind::kPrefillThenDecode:
      return "prefill_then_decode";
    case FixtureCaseKind::kPrefillThenDecodeBatched:
      return "prefill_then_decode_batched";
    case FixtureCaseKind::kGreedyGeneration:
      return "greedy_generation";
  }
  return "?";
}

std::vector<ExpectedRole> FixtureCase::roles_for(const std::string& precision,
                                                 const std::string& behaviour) const {
  auto it = expected.find(precision);
  if (it == expected.end())
    throw Error(
        fmt::format("case '{}' has no expected values for precision '{}'", name, precision));
  std::vector<ExpectedRole> out;
  for (const ExpectedRole& r : it->second) {
    if (r.behaviour.empty() || r.behaviour == behaviour) out.push_back(r);
  }
  return out;
}

const ExpectedRole* FixtureCase::find_role(const std::string& precision,
                                           const std::string& behaviour,
                                           const std::string& field) const {
  auto it = expected.find(precision);
  if (it == expected.end()) return nullptr;
  for (const ExpectedRole& r : it->second) {
    if (r.field == field && (r.behaviour.empty() || r.behaviour == behaviour)) return &r;
  }
  return nullptr;
}

const std::vector<int64_t>& FixtureCase::shape_of(const std::string& key) const {
  auto it = shapes.find(key);
  if (it == shapes.end())
    throw Error(fmt::format("cases.json: case '{}' lists no shape for '{}'", name, key));
  return it->second;
}

std::vector<std::string> find_near_ties(const FixtureMargins& margins,
                                        const std::vector<std::string>& labels,
                                        const std::vector<std::string>& topk_precisions,
                                        MarginForward forward, bool include_dspark,
                                        const NearTieThresholds& thresholds, bool* label_found) {
  std::vector<std::string> out;
  bool found = false;
  auto scan = [&](const MarginTable& table, const std::string& what, bool quant) {
    for (const std::string& label : labels) {
      auto it = table.find(label);
      if (it == table.end()) continue;
      found = true;
      append_near_ties(it->second, fmt::format("{} {}", what, label), forward, include_dspark,
                       thresholds, quant, out);
      return;
    }
  };
  for (const auto& [prec, table] : margins.quant)
    scan(table, "quant " + prec, true);
  for (const std::string& prec : topk_precisions) {
    auto it = margins.topk.find(prec);
    if (it != margins.topk.end()) scan(it->second, "topk " + prec, false);
  }
  if (label_found) *label_found = found;
  return out;
}

FixtureIndex load_fixture_index(const std::filesystem::path& dir) {
  FixtureIndex idx;
  idx.dir = dir;
  idx.json_path = dir / "cases.json";
  const std::string file = idx.json_path.string();
  std::ifstream in(idx.json_path);
  if (!in) throw Error(fmt::format("{}: cannot open", file));
  json root;
  try {
    root = json::parse(in);
  } catch (const json::exception& e) {
    fail(file, fmt::format("invalid JSON: {}", e.what()));
  }
  if (!root.is_object()) fail(file, "top level is not a JSON object");
  if (auto it = root.find("fixture"); it != root.end() && it->is_string())
    idx.fixture = it->get<std::string>();
  else
    idx.fixture = dir.filename().string();
  const json& version = member(root, "format_version", file);
  if (!version.is_number_integer()) fail(file, "'format_version' is not an integer");
  idx.format_version = version.get<int64_t>();
  if (idx.format_version < 1 || idx.format_version > 2)
    fail(file, fmt::format("unsupported format_version {}", idx.format_version));
  const json& precisions = member(root, "precisions", file);
  if (!precisions.is_object()) fail(file, "'precisions' is not an object");
  for (const auto& [p, v] : precisions.items())
    idx.precisions.push_back(p);
  const json& behaviours = member(root, "behaviours", file);
  if (!behaviours.is_object()) fail(file, "'behaviours' is not an object");
  for (const auto& [b, v] : behaviours.items()) {
    // "note" and similar free-text entries are not behaviours; behaviours are named by the
    // role suffixes, so only entries that some role uses count (checked below).
    idx.behaviours.push_back(b);
  }
  const json& cases = member(root, "cases", file);
  if (!cases.is_array() || cases.empty()) fail(file, "'cases' is not a non-empty array");
  for (size_t i = 0; i < cases.size(); ++i)
    idx.cases.push_back(parse_case(cases[i], i, idx.behaviours, file));
  // Drop behaviour entries no role is suffixed with (e.g. "note").
  std::vector<std::string> used;
  for (const std::string& b : idx.behaviours) {
    bool any = false;
    for (const FixtureCase& c : idx.cases)
      for (const auto& [p, roles] : c.expected)
        for (const ExpectedRole& r : roles)
          any = any || r.behaviour == b;
    if (any) used.push_back(b);
  }
  idx.behaviours = std::move(used);
  if (auto it = root.find("topk_margins"); it != root.end())
    idx.margins.topk = parse_margin_tables(*it, file + " topk_margins");
  if (auto it = root.find("quant_margins"); it != root.end())
    idx.margins.quant = parse_margin_tables(*it, file + " quant_margins");
  return idx;
}

int64_t FixtureTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

int64_t FixtureTensor::row_stride() const {
  if (shape.empty()) return 1;
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i)
    n *= shape[i];
  return n;
}

FixtureTensors::FixtureTensors(const std::filesystem::path& path)
    : file_(std::make_unique<SafetensorsFile>(path.string())) {}
FixtureTensors::~FixtureTensors() = default;
FixtureTensors::FixtureTensors(FixtureTensors&&) noexcept = default;
FixtureTensors& FixtureTensors::operator=(FixtureTensors&&) noexcept = default;

const std::string& FixtureTensors::path() const {
  return file_->path();
}

bool FixtureTensors::contains(const std::string& key) const {
  return file_->find(key) != nullptr;
}

FixtureTensor FixtureTensors::load(const std::string& key,
                                   const std::vector<int64_t>* expected_shape) const {
  const TensorInfo* info = file_->find(key);
  if (!info) throw Error(fmt::format("{}: missing tensor '{}'", path(), key));
  FixtureTensor t;
  t.key = key;
  t.dtype = info->dtype;
  t.shape = info->shape.dims();
  if (expected_shape && *expected_shape != t.shape) {
    throw Error(fmt::format("{}: tensor '{}' has shape {} but cases.json says [{}]", path(), key,
                            info->shape, fmt::join(*expected_shape, ", ")));
  }
  const ConstTensorView v = file_->view(*info);
  const auto n = static_cast<size_t>(t.numel());
  // Data offsets need not be aligned for 8-byte elements: copy bytewise.
  switch (t.dtype) {
    case DType::kF64:
      t.values.resize(n);
      if (n) std::memcpy(t.values.data(), v.data, n * sizeof(double));
      break;
    case DType::kF32: {
      std::vector<float> f(n);
      if (n) std::memcpy(f.data(), v.data, n * sizeof(float));
      t.values.assign(f.begin(), f.end());
      break;
    }
    case DType::kI64:
      t.ids.resize(n);
      if (n) std::memcpy(t.ids.data(), v.data, n * sizeof(int64_t));
      break;
    default:
      throw Error(fmt::format("{}: tensor '{}' has dtype {}; expected F64, F32 or I64", path(), key,
                              dtype_name(t.dtype)));
  }
  return t;
}

FixtureTensor FixtureTensors::load_ids(const std::string& key, size_t rank,
                                       const std::vector<int64_t>* expected_shape) const {
  FixtureTensor t = load(key, expected_shape);
  if (!t.is_ids())
    throw Error(fmt::format("{}: tensor '{}' has dtype {}; expected I64", path(), key,
                            dtype_name(t.dtype)));
  if (t.shape.size() != rank)
    throw Error(
        fmt::format("{}: tensor '{}' has rank {}; expected {}", path(), key, t.shape.size(), rank));
  return t;
}

}  // namespace di
