// The job spec's `early_stopping` (early_stopping.h), read strictly and written back:
//   {"monitor": "test_loss", "mode": "auto" | "min" | "max", "min_delta": 0, "patience": 0,
//    "baseline": null, "start_from_epoch": 0, "restore_best": false}
// `{}` or `true` turns it on with every default. The monitor's default (val_loss with a validation
// hold-out, else test_loss) and auto mode are resolved once the training section is read.
#include <algorithm>
#include <limits>

#include "common/data/spec_reader.h"

namespace pstrain::spec_json {

EarlyStoppingSpec read_early_stopping(const json::value& v) {
  EarlyStoppingSpec s;
  s.enabled = true;
  if (v.is_bool()) {
    s.enabled = v.as_bool();
    s.monitor.clear();
    return s;
  }
  ObjectReader r(v, "/early_stopping");
  s.monitor.clear();  // the default depends on the training section (resolved with it)
  if (const json::value* m = r.optional("monitor")) {
    s.monitor = read_string(*m, "/early_stopping/monitor");
    const auto& names = early_stopping_metrics();
    if (std::find(names.begin(), names.end(), s.monitor) == names.end()) {
      std::string known;
      for (const std::string& n : names) known += (known.empty() ? "" : ", ") + n;
      throw SpecError("/early_stopping/monitor", "\"" + s.monitor + "\" is not an epoch metric (known: " + known + ")");
    }
  }
  enum class Mode { kAuto, kMin, kMax };
  Mode mode = Mode::kAuto;
  if (const json::value* m = r.optional("mode")) {
    mode = read_enum<Mode>(*m, "/early_stopping/mode", {{"auto", Mode::kAuto}, {"min", Mode::kMin}, {"max", Mode::kMax}});
  }
  s.mode_auto = mode == Mode::kAuto;
  s.maximize = mode == Mode::kMax;  // auto: resolved with the monitor
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

}  // namespace pstrain::spec_json
