#include "coordinator/study/study_spec.h"

#include <cmath>
#include <cstdio>

#include "common/base/error.h"
#include "common/base/json_parse.h"
#include "common/base/rng.h"
#include "common/data/spec_reader.h"

namespace pstrain {
namespace {

using namespace spec_json;

constexpr int64_t kMaxTrials = 10000;
constexpr int64_t kMaxIntRange = 100000;  // values an `int` parameter may take in a grid

// RFC 6901 reference tokens; throws for text that is not a pointer.
std::vector<std::string> pointer_tokens(const std::string& pointer, const std::string& path) {
  if (pointer.empty() || pointer[0] != '/') throw SpecError(path, "must be a JSON pointer into the spec, starting with '/'");
  std::vector<std::string> tokens;
  std::string token;
  for (size_t i = 1; i <= pointer.size(); ++i) {
    if (i == pointer.size() || pointer[i] == '/') {
      tokens.push_back(token);
      token.clear();
    } else if (pointer[i] == '~') {
      const char next = i + 1 < pointer.size() ? pointer[i + 1] : '\0';
      if (next != '0' && next != '1') throw SpecError(path, "has a '~' not followed by 0 or 1 (RFC 6901)");
      token += next == '0' ? '~' : '/';
      ++i;
    } else {
      token += pointer[i];
    }
  }
  return tokens;
}

// Sets `pointer` in `root` to `value`: every token but the last must name an existing member or
// array element; the last adds or replaces an object's member, or replaces an array element.
void set_pointer(json::value& root, const std::string& pointer, json::value value, const std::string& path) {
  const auto tokens = pointer_tokens(pointer, path);
  json::value* at = &root;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const bool last = i + 1 == tokens.size();
    const std::string& t = tokens[i];
    if (at->is_object()) {
      auto& o = at->as_object();
      if (last) {
        o[t] = std::move(value);
        return;
      }
      auto* next = o.if_contains(t);
      if (next == nullptr) throw SpecError(path, "names '" + t + "', which the spec does not have");
      at = next;
    } else if (at->is_array()) {
      auto& a = at->as_array();
      char* end = nullptr;
      const unsigned long index = std::strtoul(t.c_str(), &end, 10);
      if (t.empty() || *end != '\0' || index >= a.size()) {
        throw SpecError(path, "has '" + t + "' where the spec has an array of " + std::to_string(a.size()));
      }
      if (last) {
        a[index] = std::move(value);
        return;
      }
      at = &a[index];
    } else {
      throw SpecError(path, "goes through '" + t + "', inside a " + kind_of(*at) + " of the spec");
    }
  }
}

std::string number_text(double v) {
  return json::serialize(json::value(v));
}

SearchParam read_param(const std::string& pointer, const json::value& v, const std::string& path) {
  SearchParam p;
  p.pointer = pointer;
  pointer_tokens(pointer, path);
  ObjectReader r(v, path);
  const std::vector<std::pair<const char*, SearchParam::Kind>> kinds = {
      {"choice", SearchParam::Kind::kChoice},
      {"uniform", SearchParam::Kind::kUniform},
      {"loguniform", SearchParam::Kind::kLogUniform},
      {"int", SearchParam::Kind::kInt}};
  int found = 0;
  for (const auto& [name, kind] : kinds) {
    const json::value* d = r.optional(name);
    if (d == nullptr) continue;
    ++found;
    p.kind = kind;
    const std::string at = r.field_path(name);
    if (!d->is_array()) throw SpecError(at, "must be an array, not " + kind_of(*d));
    const auto& a = d->as_array();
    if (kind == SearchParam::Kind::kChoice) {
      if (a.empty() || a.size() > 1000) throw SpecError(at, "must have 1 to 1000 values");
      for (const auto& c : a) p.choices.push_back(json::serialize(c));
      continue;
    }
    if (a.size() != 2) throw SpecError(at, "must be [low, high]");
    if (kind == SearchParam::Kind::kInt) {
      const auto lo = as_integer(a[0]), hi = as_integer(a[1]);
      if (!lo || !hi) throw SpecError(at, "must be two integers");
      if (*lo > *hi) throw SpecError(at, "must have low <= high");
      if (*hi - *lo >= kMaxIntRange) throw SpecError(at, "spans more than " + std::to_string(kMaxIntRange) + " values");
      p.lo = static_cast<double>(*lo);
      p.hi = static_cast<double>(*hi);
      continue;
    }
    if (!a[0].is_number() || !a[1].is_number()) throw SpecError(at, "must be two numbers");
    p.lo = a[0].to_number<double>();
    p.hi = a[1].to_number<double>();
    if (!std::isfinite(p.lo) || !std::isfinite(p.hi) || !(p.lo < p.hi)) throw SpecError(at, "must have low < high");
    if (kind == SearchParam::Kind::kLogUniform && p.lo <= 0) throw SpecError(at, "must have low > 0");
  }
  r.finish();
  if (found != 1) throw SpecError(path, "must have exactly one of \"choice\", \"uniform\", \"loguniform\", \"int\"");
  return p;
}

// The values a parameter is checked at: every choice, or the ends of its range.
std::vector<std::string> probe_values(const SearchParam& p) {
  switch (p.kind) {
    case SearchParam::Kind::kChoice: return p.choices;
    case SearchParam::Kind::kInt:
      return {std::to_string(static_cast<int64_t>(p.lo)), std::to_string(static_cast<int64_t>(p.hi))};
    default: return {number_text(p.lo), number_text(p.hi)};
  }
}

int64_t dimension_size(const SearchParam& p) {
  if (p.kind == SearchParam::Kind::kChoice) return static_cast<int64_t>(p.choices.size());
  if (p.kind == SearchParam::Kind::kInt) return static_cast<int64_t>(p.hi - p.lo) + 1;
  return 0;
}

std::string grid_value(const SearchParam& p, int64_t i) {
  if (p.kind == SearchParam::Kind::kChoice) return p.choices[static_cast<size_t>(i)];
  return std::to_string(static_cast<int64_t>(p.lo) + i);
}

double unit_draw(Rng& rng) { return static_cast<double>(rng.next_u64() >> 11) * 0x1.0p-53; }

}  // namespace

const std::vector<std::string> kStudyMetrics = {
    "train_loss", "train_accuracy", "test_loss", "test_accuracy", "test_mae", "test_rmse", "test_r2",
    "test_top5_accuracy", "test_auc", "val_loss", "val_accuracy", "val_mae", "val_rmse", "val_r2",
    "val_top5_accuracy", "val_auc"};

std::vector<int64_t> asha_rungs(const AshaSpec& asha) {
  std::vector<int64_t> rungs;
  for (int64_t e = asha.min_epochs; e < asha.max_epochs; e *= asha.reduction_factor) rungs.push_back(e);
  rungs.push_back(asha.max_epochs);
  return rungs;
}

int64_t grid_size(const StudySpec& spec) {
  int64_t n = 1;
  for (const auto& p : spec.search_space) {
    const int64_t d = dimension_size(p);
    if (d == 0) return 0;
    n = n > kMaxTrials ? n : n * d;
  }
  return n;
}

std::vector<std::string> trial_values(const StudySpec& spec, int64_t number) {
  std::vector<std::string> values(spec.search_space.size());
  if (spec.algorithm == StudyAlgorithm::kGrid || (spec.algorithm == StudyAlgorithm::kAsha && spec.asha.grid)) {
    // ASHA visits the grid in a seeded random order: in the grid's own order (sorted by each
    // parameter) later trials would keep beating earlier ones and nearly all be promoted.
    int64_t rest = number;
    if (spec.algorithm == StudyAlgorithm::kAsha) {
      rest = epoch_order(static_cast<uint32_t>(grid_size(spec)), spec.seed, 0)[static_cast<size_t>(number)];
    }
    for (size_t i = spec.search_space.size(); i-- > 0;) {
      const int64_t d = dimension_size(spec.search_space[i]);
      values[i] = grid_value(spec.search_space[i], rest % d);
      rest /= d;
    }
    return values;
  }
  for (size_t i = 0; i < spec.search_space.size(); ++i) {
    const SearchParam& p = spec.search_space[i];
    Rng rng(mix_seed(mix_seed(spec.seed, static_cast<uint64_t>(number)), i));
    switch (p.kind) {
      case SearchParam::Kind::kChoice: values[i] = p.choices[rng.uniform_index(p.choices.size())]; break;
      case SearchParam::Kind::kInt:
        values[i] = std::to_string(static_cast<int64_t>(p.lo) +
                                   static_cast<int64_t>(rng.uniform_index(static_cast<uint64_t>(p.hi - p.lo) + 1)));
        break;
      case SearchParam::Kind::kUniform: values[i] = number_text(p.lo + (p.hi - p.lo) * unit_draw(rng)); break;
      case SearchParam::Kind::kLogUniform:
        values[i] = number_text(std::exp(std::log(p.lo) + (std::log(p.hi) - std::log(p.lo)) * unit_draw(rng)));
        break;
    }
  }
  return values;
}

std::string trial_job_spec(const StudySpec& spec, const std::vector<std::string>& values, int64_t number,
                           int64_t epochs) {
  json::value root = parse_json(spec.spec_json);
  for (size_t i = 0; i < spec.search_space.size(); ++i) {
    const auto& p = spec.search_space[i];
    set_pointer(root, p.pointer, parse_json(values[i]), "/search_space/" + escape_key(p.pointer));
  }
  auto& o = root.as_object();
  o["name"] = spec.name + " trial " + std::to_string(number);
  if (epochs > 0) {
    auto* training = o.if_contains("training");
    if (training == nullptr || !training->is_object()) throw SpecError("/spec/training", "is required for ASHA");
    training->as_object()["epochs"] = epochs;
  }
  return json::serialize(root);
}

StudySpec parse_study_spec(const std::string& text, const std::function<void(const std::string&)>& check_spec) {
  const json::value v = parse_spec_text(text, "the study");
  ObjectReader r(v, "");
  StudySpec s;
  s.name = r.optional("name") ? read_string(*r.optional("name"), "/name") : "study";
  if (s.name.empty() || s.name.size() > 200) throw SpecError("/name", "must have 1 to 200 characters");
  const json::value& spec = r.required("spec");
  if (!spec.is_object()) throw SpecError("/spec", "must be a job spec (an object), not " + kind_of(spec));
  s.spec_json = json::serialize(spec);
  const json::value& space = r.required("search_space");
  if (!space.is_object() || space.as_object().empty()) {
    throw SpecError("/search_space", "must be an object with at least one JSON pointer");
  }
  for (const auto& [key, d] : space.as_object()) {
    s.search_space.push_back(read_param(std::string(key), d, "/search_space/" + escape_key(key)));
  }
  if (const auto* a = r.optional("algorithm")) {
    s.algorithm = read_enum<StudyAlgorithm>(*a, "/algorithm",
                            {{"grid", StudyAlgorithm::kGrid}, {"random", StudyAlgorithm::kRandom}, {"asha", StudyAlgorithm::kAsha}});
  }
  if (const auto* m = r.optional("metric")) {
    s.metric = read_string(*m, "/metric");
    bool known = false;
    for (const auto& name : kStudyMetrics) known = known || name == s.metric;
    if (!known) throw SpecError("/metric", "must be an epoch figure (test_accuracy, val_loss, ...), not \"" + s.metric + "\"");
  }
  const bool higher_better = s.metric.find("accuracy") != std::string::npos || s.metric.find("auc") != std::string::npos ||
                             s.metric.find("_r2") != std::string::npos;
  s.maximize = r.optional("mode") ? read_enum<bool>(*r.optional("mode"), "/mode", {{"max", true}, {"min", false}}) : higher_better;
  s.seed = static_cast<uint64_t>(r.integer("seed", 0, int64_t{1} << 53, 0));
  // The template's epochs: ASHA's top rung unless given.
  int64_t spec_epochs = 0;
  if (const auto* t = spec.as_object().if_contains("training"); t != nullptr && t->is_object()) {
    if (const auto* e = t->as_object().if_contains("epochs"); e != nullptr && as_integer(*e)) spec_epochs = *as_integer(*e);
  }
  if (const auto* a = r.optional("asha")) {
    if (s.algorithm != StudyAlgorithm::kAsha) throw SpecError("/asha", "is only for \"algorithm\": \"asha\"");
    ObjectReader ar(*a, "/asha");
    s.asha.min_epochs = ar.integer("min_epochs", 1, 100000, 1);
    s.asha.max_epochs = ar.integer("max_epochs", 1, 100000, spec_epochs);
    s.asha.reduction_factor = ar.integer("reduction_factor", 2, 100, 3);
    s.asha.grid = ar.boolean("grid", false);
    ar.finish();
  } else {
    s.asha.max_epochs = spec_epochs;
  }
  if (s.algorithm == StudyAlgorithm::kAsha && s.asha.max_epochs < s.asha.min_epochs) {
    throw SpecError("/asha/max_epochs", "must be at least min_epochs (" + std::to_string(s.asha.min_epochs) + ")");
  }
  const int64_t grid = grid_size(s);
  const bool on_grid = s.algorithm == StudyAlgorithm::kGrid || (s.algorithm == StudyAlgorithm::kAsha && s.asha.grid);
  if (on_grid) {
    for (const auto& p : s.search_space) {
      if (dimension_size(p) == 0) {
        throw SpecError("/search_space/" + escape_key(p.pointer), "is a continuous range: a grid takes \"choice\" or \"int\"");
      }
    }
    if (grid > kMaxTrials) throw SpecError("/search_space", "makes a grid of more than " + std::to_string(kMaxTrials) + " points");
  }
  s.max_trials = r.integer("max_trials", 1, kMaxTrials, on_grid ? grid : 10);
  if (on_grid && s.max_trials > grid) {
    throw SpecError("/max_trials", "is more than the grid's " + std::to_string(grid) + " points");
  }
  s.max_concurrent_trials = r.integer("max_concurrent_trials", 1, 1000, 4);
  r.finish();

  // The template, then each parameter at each probe value with the others at their first.
  const int64_t epochs = s.algorithm == StudyAlgorithm::kAsha ? s.asha.max_epochs : 0;
  std::vector<std::string> base;
  for (const auto& p : s.search_space) base.push_back(probe_values(p)[0]);
  const std::string base_job = trial_job_spec(s, base, 0, epochs);
  try {
    check_spec(base_job);
  } catch (const SpecError& e) {
    // A parameter's first value, or the template itself.
    for (size_t i = 0; i < s.search_space.size(); ++i) {
      const std::string& at = s.search_space[i].pointer;
      if (e.path() == at || e.path().rfind(at + "/", 0) == 0) {
        throw SpecError("/search_space/" + escape_key(at), "makes an invalid job spec with " + base[i] + ": " + e.what());
      }
    }
    throw SpecError("/spec" + e.path(), e.detail());
  }
  for (size_t i = 0; i < s.search_space.size(); ++i) {
    const std::string path = "/search_space/" + escape_key(s.search_space[i].pointer);
    for (const auto& value : probe_values(s.search_space[i])) {
      auto values = base;
      values[i] = value;
      const std::string job = trial_job_spec(s, values, 0, epochs);
      try {
        check_spec(job);
      } catch (const SpecError& e) {
        throw SpecError(path, "makes an invalid job spec with " + value + ": " + e.what());
      }
    }
  }
  return s;
}

std::string study_spec_to_json(const StudySpec& s) {
  json::object space;
  for (const auto& p : s.search_space) {
    json::array a;
    if (p.kind == SearchParam::Kind::kChoice) {
      for (const auto& c : p.choices) a.push_back(parse_json(c));
    } else if (p.kind == SearchParam::Kind::kInt) {
      a = {static_cast<int64_t>(p.lo), static_cast<int64_t>(p.hi)};
    } else {
      a = {p.lo, p.hi};
    }
    const char* kind = p.kind == SearchParam::Kind::kChoice    ? "choice"
                       : p.kind == SearchParam::Kind::kInt     ? "int"
                       : p.kind == SearchParam::Kind::kUniform ? "uniform"
                                                               : "loguniform";
    space[p.pointer] = json::object{{kind, std::move(a)}};
  }
  const char* algorithm = s.algorithm == StudyAlgorithm::kGrid ? "grid" : s.algorithm == StudyAlgorithm::kRandom ? "random" : "asha";
  json::object o{{"name", s.name},
                 {"spec", parse_json(s.spec_json)},
                 {"search_space", std::move(space)},
                 {"algorithm", algorithm},
                 {"metric", s.metric},
                 {"mode", s.maximize ? "max" : "min"},
                 {"max_trials", s.max_trials},
                 {"max_concurrent_trials", s.max_concurrent_trials},
                 {"seed", s.seed}};
  if (s.algorithm == StudyAlgorithm::kAsha) {
    o["asha"] = json::object{{"min_epochs", s.asha.min_epochs},
                             {"max_epochs", s.asha.max_epochs},
                             {"reduction_factor", s.asha.reduction_factor}};
    if (s.asha.grid) o["asha"].as_object()["grid"] = true;
  }
  return json::serialize(o);
}

}  // namespace pstrain
