// The job spec's `early_stopping` (early_stopping.h) and `reduce_on_plateau`
// (reduce_on_plateau.h), read strictly and written back:
//   early_stopping: {"monitor": "test_loss", "mode": "auto" | "min" | "max", "min_delta": 0,
//    "patience": 0, "baseline": null, "start_from_epoch": 0, "restore_best": false}
//   reduce_on_plateau: {"monitor", "mode", "factor": 0.1, "patience": 10, "min_delta": 1e-4,
//    "cooldown": 0, "min_lr": 0} (Keras' defaults)
// `{}` or `true` turns either on with every default. The monitor's default (val_loss with a
// validation hold-out, else test_loss) and auto mode are resolved once the training section is read.
#include <algorithm>
#include <limits>

#include "common/data/spec_reader.h"

namespace pstrain::spec_json {
namespace {

// `monitor` and `mode` of the object `r` reads (at `path`); the monitor empty when not given.
void read_monitor(ObjectReader& r, const std::string& path, std::string& monitor, bool& mode_auto, bool& maximize) {
  monitor.clear();  // the default depends on the training section (resolved with it)
  if (const json::value* m = r.optional("monitor")) {
    monitor = read_string(*m, path + "/monitor");
    const auto& names = early_stopping_metrics();
    if (std::find(names.begin(), names.end(), monitor) == names.end()) {
      std::string known;
      for (const std::string& n : names) known += (known.empty() ? "" : ", ") + n;
      throw SpecError(path + "/monitor", "\"" + monitor + "\" is not an epoch metric (known: " + known + ")");
    }
  }
  enum class Mode { kAuto, kMin, kMax };
  Mode mode = Mode::kAuto;
  if (const json::value* m = r.optional("mode")) {
    mode = read_enum<Mode>(*m, path + "/mode", {{"auto", Mode::kAuto}, {"min", Mode::kMin}, {"max", Mode::kMax}});
  }
  mode_auto = mode == Mode::kAuto;
  maximize = mode == Mode::kMax;  // auto: resolved with the monitor
}

}  // namespace

EarlyStoppingSpec read_early_stopping(const json::value& v) {
  EarlyStoppingSpec s;
  s.enabled = true;
  if (v.is_bool()) {
    s.enabled = v.as_bool();
    s.monitor.clear();
    return s;
  }
  ObjectReader r(v, "/early_stopping");
  read_monitor(r, "/early_stopping", s.monitor, s.mode_auto, s.maximize);
  constexpr double kHuge = std::numeric_limits<double>::max();
  if (const json::value* d = r.optional("min_delta")) s.min_delta = read_number(*d, "/early_stopping/min_delta", 0, kHuge, false);
  s.patience = r.integer("patience", 0, 100000, 0);
  if (const json::value* b = r.optional("baseline"); b != nullptr && !b->is_null()) {
    s.baseline = read_number(*b, "/early_stopping/baseline", -kHuge, kHuge, false);
  }
  s.start_from_epoch = r.integer("start_from_epoch", 0, 100000, 0);
  s.restore_best = r.boolean("restore_best", false);
  r.finish();
  return s;
}

json::object early_stopping_to_object(const EarlyStoppingSpec& s) {
  json::object o{{"monitor", s.monitor},
                 {"mode", s.mode_auto ? "auto" : (s.maximize ? "max" : "min")},
                 {"min_delta", s.min_delta},
                 {"patience", s.patience},
                 {"start_from_epoch", s.start_from_epoch},
                 {"restore_best", s.restore_best}};
  if (s.baseline) o["baseline"] = *s.baseline;
  return o;
}

ReduceOnPlateauSpec read_reduce_on_plateau(const json::value& v) {
  ReduceOnPlateauSpec s;
  s.enabled = true;
  if (v.is_bool()) {
    s.enabled = v.as_bool();
    return s;
  }
  const std::string path = "/reduce_on_plateau";
  ObjectReader r(v, path);
  read_monitor(r, path, s.monitor, s.mode_auto, s.maximize);
  constexpr double kHuge = std::numeric_limits<double>::max();
  if (const json::value* f = r.optional("factor")) {
    s.factor = read_number(*f, path + "/factor", 0, 1, true);
    if (s.factor >= 1.0) throw SpecError(path + "/factor", "must be below 1 (it reduces the learning rate)");
  }
  s.patience = r.integer("patience", 0, 100000, 10);
  if (const json::value* d = r.optional("min_delta")) s.min_delta = read_number(*d, path + "/min_delta", 0, kHuge, false);
  s.cooldown = r.integer("cooldown", 0, 100000, 0);
  if (const json::value* m = r.optional("min_lr")) s.min_lr = read_number(*m, path + "/min_lr", 0, kHuge, false);
  r.finish();
  return s;
}

json::object reduce_on_plateau_to_object(const ReduceOnPlateauSpec& s) {
  return {{"monitor", s.monitor}, {"mode", s.mode_auto ? "auto" : (s.maximize ? "max" : "min")},
          {"factor", s.factor},   {"patience", s.patience},
          {"min_delta", s.min_delta}, {"cooldown", s.cooldown},
          {"min_lr", s.min_lr}};
}

}  // namespace pstrain::spec_json
