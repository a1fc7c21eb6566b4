// Reading a spec's JSON strictly, with errors naming the field by its JSON pointer (SpecError):
// what the job spec's and the model's parsers share (job_spec_json.cc, model_spec_json.cc).
// Boost.JSON appears only here and in those parsers.
//
// Thread rules: pure functions; an ObjectReader belongs to one caller.
#pragma once

#include <boost/json.hpp>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>

#include "common/base/error.h"
#include "common/data/job_spec.h"

namespace pstrain::spec_json {
namespace json = boost::json;

// JSON pointer escaping of one key (RFC 6901).
std::string escape_key(std::string_view key);
// "a string", "an integer", ... (for messages).
std::string kind_of(const json::value& v);
std::optional<int64_t> as_integer(const json::value& v);
int64_t read_int(const json::value& v, const std::string& path, int64_t min, int64_t max);
double read_number(const json::value& v, const std::string& path, double min, double max, bool min_open);
std::string read_string(const json::value& v, const std::string& path);
// The JSON text of a spec (at most 32 levels deep); else a kMalformed SpecError "<what> is not
// valid JSON: ...".
json::value parse_spec_text(std::string_view text, const std::string& what);

template <typename Enum>
Enum read_enum(const json::value& v, const std::string& path,
               std::initializer_list<std::pair<const char*, Enum>> choices) {
  const std::string s = v.is_string() ? std::string(v.as_string()) : std::string();
  std::string names;
  for (const auto& [name, value] : choices) {
    if (s == name) return value;
    names += names.empty() ? "" : ", ";
    names += std::string("\"") + name + "\"";
  }
  if (!v.is_string()) throw SpecError(path, "must be one of " + names + ", not " + kind_of(v));
  throw SpecError(path, "must be one of " + names + ", not \"" + s + "\"");
}

// Walks one JSON object: hands out fields by name and, at the end, rejects every field nobody
// asked for, so a typo ("learning_rat") is an error instead of a silently ignored setting.
class ObjectReader {
 public:
  ObjectReader(const json::value& v, std::string path) : path_(std::move(path)) {
    if (!v.is_object()) throw SpecError(path_.empty() ? "/" : path_, "must be an object, not " + kind_of(v));
    object_ = &v.as_object();
  }

  std::string field_path(std::string_view key) const { return path_ + "/" + escape_key(key); }

  const json::value* optional(std::string_view key) {
    known_.insert(std::string(key));
    const auto it = object_->find(key);
    if (it == object_->end()) return nullptr;
    return &it->value();
  }

  const json::value& required(std::string_view key) {
    const json::value* v = optional(key);
    if (v == nullptr) throw SpecError(field_path(key), "is required");
    return *v;
  }

  int64_t integer(std::string_view key, int64_t min, int64_t max, int64_t fallback) {
    const json::value* v = optional(key);
    return v ? read_int(*v, field_path(key), min, max) : fallback;
  }

  float number(std::string_view key, double min, double max, bool min_open, float fallback);

  bool boolean(std::string_view key, bool fallback) {
    const json::value* v = optional(key);
    if (v == nullptr) return fallback;
    if (!v->is_bool()) throw SpecError(field_path(key), "must be a boolean, not " + kind_of(*v));
    return v->as_bool();
  }
  void finish() const;

 private:
  std::string path_;
  const json::object* object_;
  std::set<std::string> known_;
};

// The model part of a spec (model_spec_json.cc): "/model" read strictly, and written back.
ModelSpec read_model_spec(const json::value& v);
json::object model_spec_to_object(const ModelSpec& model);
// The job spec's `loss`: a name, or {"type": name, "label_smoothing": s}.
LossSpec read_loss(const json::value& v);
json::value loss_to_value(const LossSpec& loss);
// The job spec's `early_stopping` (early_stopping_json.cc), read strictly and written back.
EarlyStoppingSpec read_early_stopping(const json::value& v);
json::object early_stopping_to_object(const EarlyStoppingSpec& spec);
// The rules across sections (job_spec_rules.cc), in this order once every section is read: batch
// norm's ghost batches from the training section; early stopping's and the plateau rule's
// monitors and modes, and what they need (sync, epoch backups, a constant rate); gradient
// clipping's refusals.
void resolve_ghost_batches(JobSpec& spec);
void resolve_early_stopping(JobSpec& spec);
void resolve_reduce_on_plateau(JobSpec& spec);
void check_gradient_clipping(const JobSpec& spec);

// The job spec's `reduce_on_plateau` (early_stopping_json.cc too), read strictly and written back.
ReduceOnPlateauSpec read_reduce_on_plateau(const json::value& v);
json::object reduce_on_plateau_to_object(const ReduceOnPlateauSpec& spec);
// The training section's `class_weight` (class_weight.cc), read strictly and written back.
ClassWeightSpec read_class_weight(const json::value& v);
json::value class_weight_to_value(const ClassWeightSpec& spec);

}  // namespace pstrain::spec_json
