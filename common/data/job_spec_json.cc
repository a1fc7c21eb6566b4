// JSON <-> JobSpec (the model part: model_spec_json.cc). Boost.JSON stays inside the spec parsers:
// the rest of the project sees typed structs.
#include <boost/json.hpp>

#include <cmath>
#include <limits>
#include <set>
#include <sstream>

#include "common/engine/compression.h"
#include "common/data/dataset.h"
#include "common/data/dataset_manifest.h"
#include "common/base/error.h"
#include "common/data/job_spec.h"
#include "common/data/spec_reader.h"
#include "common/engine/optim/schedule.h"

namespace pstrain {
namespace json = boost::json;
using namespace spec_json;
namespace {

constexpr int64_t kIntMax = std::numeric_limits<int64_t>::max();

// `optimizer.learning_rate` as an object: a schedule (common/engine/optim/schedule.h), Keras'
// names and fields.
LearningRateSchedule read_schedule(const json::value& v, const std::string& path) {
  using Kind = LearningRateSchedule::Kind;
  ObjectReader r(v, path);
  LearningRateSchedule s;
  s.kind = read_enum<Kind>(r.required("schedule"), r.field_path("schedule"),
                           {{"exponential_decay", Kind::kExponentialDecay},
                            {"piecewise_constant", Kind::kPiecewiseConstant},
                            {"cosine_decay", Kind::kCosineDecay}});
  auto rate = [&](std::string_view key, bool zero_ok) {
    return read_number(r.required(key), r.field_path(key), 0.0, 1e3, !zero_ok);
  };
  switch (s.kind) {
    case Kind::kConstant: break;
    case Kind::kExponentialDecay:
      s.initial_learning_rate = rate("initial_learning_rate", false);
      s.decay_steps = read_int(r.required("decay_steps"), r.field_path("decay_steps"), 1, kIntMax);
      s.decay_rate = read_number(r.required("decay_rate"), r.field_path("decay_rate"), 0.0, 1e3, true);
      s.staircase = r.boolean("staircase", false);
      break;
    case Kind::kPiecewiseConstant: {
      const json::value& bounds = r.required("boundaries");
      const json::value& values = r.required("values");
      if (!bounds.is_array() || bounds.as_array().empty()) {
        throw SpecError(r.field_path("boundaries"), "must be a non-empty array of steps");
      }
      for (size_t i = 0; i < bounds.as_array().size(); ++i) {
        const std::string at = r.field_path("boundaries") + "/" + std::to_string(i);
        s.boundaries.push_back(read_int(bounds.as_array()[i], at, 0, kIntMax));
        if (i > 0 && s.boundaries[i] <= s.boundaries[i - 1]) throw SpecError(at, "must be above the boundary before it");
      }
      if (!values.is_array() || values.as_array().size() != s.boundaries.size() + 1) {
        throw SpecError(r.field_path("values"), "must be an array of " + std::to_string(s.boundaries.size() + 1) +
                                                    " rates (one more than the boundaries)");
      }
      for (size_t i = 0; i < values.as_array().size(); ++i) {
        s.values.push_back(read_number(values.as_array()[i], r.field_path("values") + "/" + std::to_string(i), 0.0,
                                       1e3, true));
      }
      break;
    }
    case Kind::kCosineDecay:
      s.initial_learning_rate = rate("initial_learning_rate", true);
      s.decay_steps = read_int(r.required("decay_steps"), r.field_path("decay_steps"), 1, kIntMax);
      if (const json::value* a = r.optional("alpha")) s.alpha = read_number(*a, r.field_path("alpha"), 0.0, 1.0, false);
      s.warmup_steps = r.integer("warmup_steps", 0, kIntMax, 0);
      if (const json::value* t = r.optional("warmup_target")) {
        s.warmup_target = read_number(*t, r.field_path("warmup_target"), 0.0, 1e3, true);
      }
      if (s.warmup_steps > 0 && !s.warmup_target) {
        throw SpecError(r.field_path("warmup_target"),
                        "is required with warmup_steps: the rate the warm-up reaches (it starts at "
                        "initial_learning_rate), as in Keras");
      }
      if (s.warmup_target && s.warmup_steps == 0) {
        throw SpecError(r.field_path("warmup_steps"), "must be at least 1 with a warmup_target");
      }
      if (!s.warmup_target && s.initial_learning_rate == 0) {
        throw SpecError(r.field_path("initial_learning_rate"), "must be greater than 0 without a warm-up");
      }
      break;
  }
  r.finish();
  return s;
}

json::object schedule_to_object(const LearningRateSchedule& s) {
  using Kind = LearningRateSchedule::Kind;
  json::object o{{"schedule", schedule_kind_name(s.kind)}};
  switch (s.kind) {
    case Kind::kConstant: break;
    case Kind::kExponentialDecay:
      o["initial_learning_rate"] = s.initial_learning_rate;
      o["decay_steps"] = s.decay_steps;
      o["decay_rate"] = s.decay_rate;
      o["staircase"] = s.staircase;
      break;
    case Kind::kPiecewiseConstant: {
      json::array bounds, values;
      for (const int64_t b : s.boundaries) bounds.push_back(b);
      for (const double v : s.values) values.push_back(v);
      o["boundaries"] = std::move(bounds);
      o["values"] = std::move(values);
      break;
    }
    case Kind::kCosineDecay:
      o["initial_learning_rate"] = s.initial_learning_rate;
      o["decay_steps"] = s.decay_steps;
      o["alpha"] = s.alpha;
      if (s.warmup_target) {
        o["warmup_steps"] = s.warmup_steps;
        o["warmup_target"] = *s.warmup_target;
      }
      break;
  }
  return o;
}

OptimizerSpec read_optimizer(const json::value& v) {
  ObjectReader r(v, "/optimizer");
  OptimizerSpec o;
  o.type = read_enum<OptimizerType>(r.required("type"), "/optimizer/type",
                                    {{"sgd", OptimizerType::kSgd},
                                     {"adam", OptimizerType::kAdam},
                                     {"adamw", OptimizerType::kAdamW},
                                     {"adagrad", OptimizerType::kAdagrad},
                                     {"rmsprop", OptimizerType::kRmsprop}});
  const float default_lr = o.type == OptimizerType::kSgd ? 0.01f : 0.001f;
  if (const json::value* lr = r.optional("learning_rate"); lr != nullptr && lr->is_object()) {
    o.schedule = read_schedule(*lr, "/optimizer/learning_rate");
    o.learning_rate = optim::learning_rate_at(o, 0);
  } else {
    o.learning_rate = r.number("learning_rate", 0.0, 1e3, true, default_lr);
  }
  switch (o.type) {
    case OptimizerType::kSgd:
      o.momentum = r.number("momentum", 0.0, 1.0, false, 0.0f);
      if (o.momentum >= 1.0f) throw SpecError("/optimizer/momentum", "must be below 1");
      if (const json::value* n = r.optional("nesterov")) {
        if (!n->is_bool()) throw SpecError("/optimizer/nesterov", "must be a boolean, not " + kind_of(*n));
        o.nesterov = n->as_bool();
      }
      break;
    case OptimizerType::kAdam:
    case OptimizerType::kAdamW:
      o.beta_1 = r.number("beta_1", 0.0, 1.0, false, 0.9f);
      o.beta_2 = r.number("beta_2", 0.0, 1.0, false, 0.999f);
      if (o.beta_1 >= 1.0f) throw SpecError("/optimizer/beta_1", "must be below 1");
      if (o.beta_2 >= 1.0f) throw SpecError("/optimizer/beta_2", "must be below 1");
      o.epsilon = r.number("epsilon", 0.0, 1.0, true, 1e-7f);
      break;
    case OptimizerType::kAdagrad:
      o.initial_accumulator_value = r.number("initial_accumulator_value", 0.0, 1e6, false, 0.1f);
      o.epsilon = r.number("epsilon", 0.0, 1.0, true, 1e-7f);
      break;
    case OptimizerType::kRmsprop:
      o.rho = r.number("rho", 0.0, 1.0, false, 0.9f);
      if (o.rho >= 1.0f) throw SpecError("/optimizer/rho", "must be below 1");
      o.momentum = r.number("momentum", 0.0, 1.0, false, 0.0f);
      if (o.momentum >= 1.0f) throw SpecError("/optimizer/momentum", "must be below 1");
      o.epsilon = r.number("epsilon", 0.0, 1.0, true, 1e-7f);
      o.centered = r.boolean("centered", false);
      break;
  }
  o.weight_decay = r.number("weight_decay", 0.0, 1.0, false, o.type == OptimizerType::kAdamW ? 0.004f : 0.0f);
  o.clipnorm = r.number("clipnorm", 0.0, 1e30, true, 0.0f);
  o.global_clipnorm = r.number("global_clipnorm", 0.0, 1e30, true, 0.0f);
  if (o.clipnorm > 0.0f && o.global_clipnorm > 0.0f) {
    throw SpecError("/optimizer/global_clipnorm", "clipnorm and global_clipnorm cannot both be set (Keras' rule)");
  }
  if (const json::value* u = r.optional("sparse_updates")) {
    o.sparse_updates = read_enum<OptimizerSpec::SparseUpdates>(
        *u, "/optimizer/sparse_updates",
        {{"lazy", OptimizerSpec::SparseUpdates::kLazy}, {"dense", OptimizerSpec::SparseUpdates::kDense}});
  }
  r.finish();
  return o;
}

// `training.compression`: a kind's name, or {"kind": name, "fraction": f} (topk only) or
// {"kind": "powersgd", "rank": r}.
CompressionSpec read_compression(const json::value& v) {
  const std::string path = "/training/compression";
  CompressionSpec c;
  const std::initializer_list<std::pair<const char*, CompressionKind>> kinds = {
      {"none", CompressionKind::kNone},
      {"fp16", CompressionKind::kFp16},
      {"bf16", CompressionKind::kBf16},
      {"topk", CompressionKind::kTopk},
      {"powersgd", CompressionKind::kPowerSgd}};
  if (v.is_string()) {
    c.kind = read_enum<CompressionKind>(v, path, kinds);
    return c;
  }
  if (!v.is_object()) throw SpecError(path, "must be a string or an object, not " + kind_of(v));
  ObjectReader r(v, path);
  c.kind = read_enum<CompressionKind>(r.required("kind"), path + "/kind", kinds);
  if (r.optional("fraction") != nullptr && c.kind != CompressionKind::kTopk) {
    throw SpecError(path + "/fraction", "only applies to \"topk\"");
  }
  if (r.optional("rank") != nullptr && c.kind != CompressionKind::kPowerSgd) {
    throw SpecError(path + "/rank", "only applies to \"powersgd\"");
  }
  c.fraction = r.number("fraction", 0.0, 1.0, true, 0.01f);
  c.rank = static_cast<uint32_t>(r.integer("rank", 1, static_cast<int64_t>(kMaxPowerSgdRank), 4));
  r.finish();
  return c;
}

TrainingSpec read_training(const json::value& v) {
  ObjectReader r(v, "/training");
  TrainingSpec t;
  if (const json::value* m = r.optional("mode")) {
    t.mode = read_enum<TrainingMode>(*m, "/training/mode", {{"sync", TrainingMode::kSync}, {"async", TrainingMode::kAsync}});
  }
  t.global_batch_size = read_int(r.required("global_batch_size"), "/training/global_batch_size", 1, 65536);
  t.epochs = r.integer("epochs", 1, 100000, 1);
  t.workers = r.integer("workers", 1, 256, 1);
  t.servers = r.integer("servers", 1, 64, 1);
  t.max_staleness = r.integer("max_staleness", 0, 1000000, -1);
  t.backup_workers = r.integer("backup_workers", 0, 255, 0);
  if (const json::value* f = r.optional("validation_fraction")) {
    t.validation_fraction = read_number(*f, "/training/validation_fraction", 0, 0.9, false);
  }
  t.metrics_every_steps = r.integer("metrics_every_steps", 1, 1000000, 10);
  if (const json::value* w = r.optional("class_weight")) t.class_weight = read_class_weight(*w);
  if (const json::value* c = r.optional("compression")) t.compression = read_compression(*c);
  const json::value* async_lr = r.optional("async_lr");
  if (async_lr != nullptr) {
    t.async_lr = read_enum<AsyncLr>(*async_lr, "/training/async_lr",
                                    {{"constant", AsyncLr::kConstant},
                                     {"staleness", AsyncLr::kStaleness},
                                     {"batch_staleness", AsyncLr::kBatchStaleness}});
  }
  if (const json::value* d = r.optional("on_divergence")) {
    t.on_divergence = read_enum<OnDivergence>(*d, "/training/on_divergence",
                                              {{"warn", OnDivergence::kWarn}, {"fail", OnDivergence::kFail}});
  }
  r.finish();
  if (t.global_batch_size < t.workers) {
    throw SpecError("/training/global_batch_size", "must be at least /training/workers (" +
                                                       std::to_string(t.workers) + ") so every worker gets examples");
  }
  if (t.backup_workers >= t.workers) {
    throw SpecError("/training/backup_workers", "must be smaller than /training/workers");
  }
  if (t.mode == TrainingMode::kSync && t.max_staleness >= 0) {
    throw SpecError("/training/max_staleness", "only applies to async mode");
  }
  if (t.mode == TrainingMode::kSync && async_lr != nullptr) {
    throw SpecError("/training/async_lr", "only applies to async mode");
  }
  if (t.mode == TrainingMode::kAsync && t.backup_workers > 0) {
    throw SpecError("/training/backup_workers", "only applies to sync mode");
  }
  return t;
}

BackupSpec read_backup(const json::value& v) {
  ObjectReader r(v, "/backup");
  BackupSpec b;
  if (const json::value* f = r.optional("save_freq")) {
    if (f->is_string() && f->as_string() == "epoch") {
      b.frequency = BackupSpec::Frequency::kEpoch;
    } else if (as_integer(*f)) {
      b.frequency = BackupSpec::Frequency::kSteps;
      b.steps = read_int(*f, "/backup/save_freq", 1, kIntMax);
    } else {
      throw SpecError("/backup/save_freq", "must be \"epoch\" or a positive integer (steps)");
    }
  }
  r.finish();
  return b;
}

CheckpointSpec read_checkpoint(const json::value& v) {
  ObjectReader r(v, "/checkpoint");
  CheckpointSpec c;
  c.keep = r.integer("keep", 0, 1000, c.keep);
  r.finish();
  return c;
}

InitFromSpec read_init_from(const json::value& v) {
  ObjectReader r(v, "/init_from");
  InitFromSpec i;
  const json::value* job = r.optional("job");
  const json::value* model = r.optional("model");
  if ((job == nullptr) == (model == nullptr)) throw SpecError("/init_from", "must name either a \"job\" or a \"model\"");
  i.source = job != nullptr ? InitFromSpec::Source::kJob : InitFromSpec::Source::kModel;
  const std::string path = job != nullptr ? "/init_from/job" : "/init_from/model";
  i.id = read_string(job != nullptr ? *job : *model, path);
  if (i.id.empty() || i.id.size() > 200) throw SpecError(path, "must be a job or model id");
  if (const json::value* c = r.optional("checkpoint")) {
    if (model != nullptr) throw SpecError("/init_from/checkpoint", "applies to a job; a model has one state");
    if (c->is_string() && c->as_string() == "latest") {
      i.checkpoint.reset();
    } else if (as_integer(*c)) {
      i.checkpoint = read_int(*c, "/init_from/checkpoint", 0, kIntMax);
    } else {
      throw SpecError("/init_from/checkpoint", "must be a step (a non-negative integer) or \"latest\"");
    }
  }
  if (const json::value* o = r.optional("optimizer_state")) {
    if (!o->is_bool()) throw SpecError("/init_from/optimizer_state", "must be a boolean, not " + kind_of(*o));
    i.optimizer_state = o->as_bool();
  }
  r.finish();
  return i;
}

DatasetSpec read_dataset(const json::value& v) {
  ObjectReader r(v, "/dataset");
  DatasetSpec d;
  d.name = read_string(r.required("name"), "/dataset/name");
  if (const json::value* p = r.optional("shard_policy")) {
    d.shard_policy = read_enum<ShardPolicy>(*p, "/dataset/shard_policy",
                                            {{"DATA", ShardPolicy::kData}, {"FILE", ShardPolicy::kFile}, {"OFF", ShardPolicy::kOff}});
  }
  d.shuffle_seed = static_cast<uint64_t>(r.integer("shuffle_seed", 0, kIntMax, 0));
  d.shuffle_window = static_cast<uint64_t>(
      r.integer("shuffle_window", 1, int64_t{0xFFFFFFFF}, static_cast<int64_t>(kDefaultShuffleWindow)));
  r.finish();
  return d;
}

}  // namespace

const char* shard_policy_name(ShardPolicy policy) {
  switch (policy) {
    case ShardPolicy::kData: return "DATA";
    case ShardPolicy::kFile: return "FILE";
    case ShardPolicy::kOff: return "OFF";
  }
  return "?";
}

const char* compression_kind_name(CompressionKind kind) {
  switch (kind) {
    case CompressionKind::kNone: return "none";
    case CompressionKind::kFp16: return "fp16";
    case CompressionKind::kBf16: return "bf16";
    case CompressionKind::kTopk: return "topk";
    case CompressionKind::kPowerSgd: return "powersgd";
  }
  return "none";
}

const char* training_mode_name(TrainingMode mode) { return mode == TrainingMode::kSync ? "sync" : "async"; }

const char* async_lr_name(AsyncLr lr) {
  switch (lr) {
    case AsyncLr::kConstant: return "constant";
    case AsyncLr::kStaleness: return "staleness";
    case AsyncLr::kBatchStaleness: return "batch_staleness";
  }
  return "staleness";
}
const char* precision_name(Precision p) { return p == Precision::kMixedBfloat16 ? "mixed_bfloat16" : "float32"; }

const char* on_divergence_name(OnDivergence action) { return action == OnDivergence::kWarn ? "warn" : "fail"; }

JobSpec parse_accepted_job_spec(std::string_view json_text) {
  const json::value root = parse_spec_text(json_text, "body");

  ObjectReader r(root, "");
  JobSpec spec;
  if (const json::value* n = r.optional("name")) {
    spec.name = read_string(*n, "/name");
    if (spec.name.size() > 200) throw SpecError("/name", "must be at most 200 characters");
  }
  if (const json::value* p = r.optional("precision")) {
    spec.precision = read_enum<Precision>(*p, "/precision", {{"float32", Precision::kFloat32}, {"mixed_bfloat16", Precision::kMixedBfloat16}});
  }
  spec.dataset = read_dataset(r.required("dataset"));
  spec.model = read_model_spec(r.required("model"));
  if (const json::value* l = r.optional("loss")) spec.loss = read_loss(*l);
  spec.optimizer = read_optimizer(r.required("optimizer"));
  spec.training = read_training(r.required("training"));
  if (const json::value* b = r.optional("backup")) spec.backup = read_backup(*b);
  if (const json::value* c = r.optional("checkpoint")) spec.checkpoint = read_checkpoint(*c);
  if (const json::value* i = r.optional("init_from")) spec.init_from = read_init_from(*i);
  if (const json::value* e = r.optional("early_stopping")) spec.early_stopping = read_early_stopping(*e);
  if (const json::value* p = r.optional("reduce_on_plateau")) spec.reduce_on_plateau = read_reduce_on_plateau(*p);
  if (const json::value* p = r.optional("preprocessing")) spec.preprocessing = read_preprocessing(*p);
  r.finish();
  if (spec.optimizer.sparse_updates == OptimizerSpec::SparseUpdates::kDense) {
    for (size_t i = 0; i < spec.model.layers.size(); ++i) {
      const LayerSpec& l = spec.model.layers[i];
      if (l.type == LayerType::kEmbedding && l.sparse && l.input_dim * l.output_dim > kSparseTableDefault) {
        throw SpecError("/optimizer/sparse_updates",
                        "\"dense\" updates every row of every table each step; layer " + std::to_string(i) +
                            "'s table has " + std::to_string(l.input_dim * l.output_dim) +
                            " parameters, over the 2^24 that allows (use \"lazy\")");
      }
    }
  }
  check_gradient_clipping(spec);
  if (spec.training.class_weight.kind == ClassWeightSpec::Kind::kList) spec.loss.class_weights = spec.training.class_weight.list;
  resolve_ghost_batches(spec);
  resolve_early_stopping(spec);
  resolve_reduce_on_plateau(spec);
  return spec;
}

JobSpec parse_job_spec(std::string_view json_text) {
  JobSpec spec = parse_accepted_job_spec(json_text);
  validate_job_spec(spec);
  return spec;
}

JobSpec parse_job_spec(std::string_view json_text, const std::vector<DatasetInfo>& datasets) {
  JobSpec spec = parse_accepted_job_spec(json_text);
  validate_job_spec(spec, datasets);
  return spec;
}

void validate_job_spec(const JobSpec& spec) {
  if (!is_valid_dataset_name(spec.dataset.name)) {
    throw SpecError("/dataset/name", "\"" + spec.dataset.name +
                                         "\" is not a dataset name (1 to 64 of a-z, 0-9, '.', '_', '-', starting with a "
                                         "letter or digit)");
  }
  if (const DatasetInfo* d = find_dataset(spec.dataset.name)) check_spec_against_dataset(spec, *d);
}

void validate_job_spec(const JobSpec& spec, const std::vector<DatasetInfo>& datasets) {
  std::string names;
  for (const auto& d : datasets) {
    if (d.name == spec.dataset.name) return check_spec_against_dataset(spec, d);
    names += (names.empty() ? "" : ", ") + d.name;
  }
  throw SpecError("/dataset/name", "\"" + spec.dataset.name + "\" is not a known dataset (known: " + names + ")");
}

std::string job_spec_to_json(const JobSpec& spec) {
  json::object optimizer{{"type", optimizer_type_name(spec.optimizer.type)},
                         {"learning_rate", spec.optimizer.learning_rate}};
  if (spec.optimizer.schedule.kind != LearningRateSchedule::Kind::kConstant) {
    optimizer["learning_rate"] = schedule_to_object(spec.optimizer.schedule);
  }
  switch (spec.optimizer.type) {
    case OptimizerType::kSgd:
      optimizer["momentum"] = spec.optimizer.momentum;
      optimizer["nesterov"] = spec.optimizer.nesterov;
      break;
    case OptimizerType::kAdam:
    case OptimizerType::kAdamW:
      optimizer["beta_1"] = spec.optimizer.beta_1;
      optimizer["beta_2"] = spec.optimizer.beta_2;
      optimizer["epsilon"] = spec.optimizer.epsilon;
      break;
    case OptimizerType::kAdagrad:
      optimizer["initial_accumulator_value"] = spec.optimizer.initial_accumulator_value;
      optimizer["epsilon"] = spec.optimizer.epsilon;
      break;
    case OptimizerType::kRmsprop:
      optimizer["rho"] = spec.optimizer.rho;
      optimizer["momentum"] = spec.optimizer.momentum;
      optimizer["epsilon"] = spec.optimizer.epsilon;
      optimizer["centered"] = spec.optimizer.centered;
      break;
  }
  if (spec.optimizer.weight_decay != 0.0f || spec.optimizer.type == OptimizerType::kAdamW) {
    optimizer["weight_decay"] = spec.optimizer.weight_decay;
  }
  if (spec.optimizer.sparse_updates == OptimizerSpec::SparseUpdates::kDense) optimizer["sparse_updates"] = "dense";
  if (spec.optimizer.clipnorm > 0.0f) optimizer["clipnorm"] = spec.optimizer.clipnorm;
  if (spec.optimizer.global_clipnorm > 0.0f) optimizer["global_clipnorm"] = spec.optimizer.global_clipnorm;
  const auto& t = spec.training;
  json::object training{{"mode", training_mode_name(t.mode)},
                        {"global_batch_size", t.global_batch_size},
                        {"epochs", t.epochs},
                        {"workers", t.workers},
                        {"servers", t.servers},
                        {"metrics_every_steps", t.metrics_every_steps}};
  if (t.max_staleness >= 0) training["max_staleness"] = t.max_staleness;
  if (t.backup_workers > 0) training["backup_workers"] = t.backup_workers;
  // Only when on: a spec written before compression existed keeps its canonical text.
  if (t.compression.kind != CompressionKind::kNone) {
    json::object compression{{"kind", compression_kind_name(t.compression.kind)}};
    if (t.compression.kind == CompressionKind::kTopk) compression["fraction"] = t.compression.fraction;
    if (t.compression.kind == CompressionKind::kPowerSgd) compression["rank"] = t.compression.rank;
    training["compression"] = std::move(compression);
  }
  // Only where they differ from their defaults (a spec written before they existed keeps its
  // canonical text); async_lr only in async mode, where it applies.
  if (t.mode == TrainingMode::kAsync && t.async_lr != TrainingSpec{}.async_lr) training["async_lr"] = async_lr_name(t.async_lr);
  if (t.on_divergence != TrainingSpec{}.on_divergence) training["on_divergence"] = on_divergence_name(t.on_divergence);
  if (t.validation_fraction > 0) training["validation_fraction"] = t.validation_fraction;
  if (t.class_weight.kind != ClassWeightSpec::Kind::kNone) training["class_weight"] = class_weight_to_value(t.class_weight);
  json::object backup;
  if (spec.backup.frequency == BackupSpec::Frequency::kEpoch) backup["save_freq"] = "epoch";
  if (spec.backup.frequency == BackupSpec::Frequency::kSteps) backup["save_freq"] = spec.backup.steps;

  json::object dataset{{"name", spec.dataset.name},
                       {"shard_policy", shard_policy_name(spec.dataset.shard_policy)},
                       {"shuffle_seed", spec.dataset.shuffle_seed}};
  if (spec.dataset.shuffle_window != kDefaultShuffleWindow) dataset["shuffle_window"] = spec.dataset.shuffle_window;
  json::object root{
      {"name", spec.name},
      {"dataset", std::move(dataset)},
      {"model", model_spec_to_object(spec.model)},
      {"loss", loss_to_value(spec.loss)},
      {"optimizer", std::move(optimizer)},
      {"training", std::move(training)},
      {"backup", std::move(backup)},
  };
  // Only where they differ from their defaults: a spec written before they existed keeps its
  // canonical text.
  if (spec.precision != Precision::kFloat32) root["precision"] = precision_name(spec.precision);
  if (spec.early_stopping.enabled) root["early_stopping"] = early_stopping_to_object(spec.early_stopping);
  if (spec.reduce_on_plateau.enabled) root["reduce_on_plateau"] = reduce_on_plateau_to_object(spec.reduce_on_plateau);
  if (spec.preprocessing.given) root["preprocessing"] = preprocessing_to_object(spec.preprocessing);
  if (spec.checkpoint.keep != CheckpointSpec{}.keep) root["checkpoint"] = json::object{{"keep", spec.checkpoint.keep}};
  if (spec.init_from.source != InitFromSpec::Source::kNone) {
    json::object init{{spec.init_from.source == InitFromSpec::Source::kJob ? "job" : "model", spec.init_from.id}};
    if (spec.init_from.source == InitFromSpec::Source::kJob) {
      if (spec.init_from.checkpoint) init["checkpoint"] = *spec.init_from.checkpoint;
      else init["checkpoint"] = "latest";
    }
    init["optimizer_state"] = spec.init_from.optimizer_state;
    root["init_from"] = std::move(init);
  }
  return json::serialize(root);
}

}  // namespace pstrain
