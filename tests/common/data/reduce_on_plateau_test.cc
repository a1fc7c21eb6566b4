// reduce_on_plateau's rule (common/data/reduce_on_plateau.h) against sequences worked by hand with
// Keras 3's ReduceLROnPlateau (wait counts up before the comparison with patience, min_delta is
// subtracted from the improvement, cooldown epochs reset wait and count down first, min_lr
// floors the rate and stops further reductions), and the spec's `reduce_on_plateau` refused field
// by field.
#include <doctest/doctest.h>

#include <string>

#include "common/base/error.h"
#include "common/data/job_spec.h"
#include "tests/common/data/spec_refusal.h"
#include "common/data/reduce_on_plateau.h"

using namespace pstrain;
using testing::refused;

namespace {

ReduceOnPlateauSpec rule(int64_t patience, double factor, int64_t cooldown = 0, double min_lr = 0, bool maximize = false) {
  ReduceOnPlateauSpec s;
  s.enabled = true;
  s.monitor = maximize ? "test_accuracy" : "test_loss";
  s.maximize = maximize;
  s.patience = patience;
  s.factor = factor;
  s.min_delta = 0;
  s.cooldown = cooldown;
  s.min_lr = min_lr;
  return s;
}

std::vector<std::optional<double>> seq(std::initializer_list<double> v) { return {v.begin(), v.end()}; }

}  // namespace

TEST_CASE("reduce_on_plateau: patience counts epochs without improvement, then the rate drops by the factor") {
  // Loss 1.0 (best), 1.1 (wait 1), 1.2 (wait 2 >= 2: reduce, wait 0), 0.9 (best), 0.95 (wait 1),
  // 0.97 (wait 2: reduce again).
  const auto s = plateau_lr_scales(rule(2, 0.5), 0.1f, seq({1.0, 1.1, 1.2, 0.9, 0.95, 0.97}));
  REQUIRE(s.size() == 7);
  CHECK(s[0] == 1.0f);
  CHECK(s[1] == 1.0f);
  CHECK(s[2] == 1.0f);
  CHECK(s[3] == 0.5f);  // epoch 3 (0-based) trains at half the rate
  CHECK(s[4] == 0.5f);
  CHECK(s[5] == 0.5f);
  CHECK(s[6] == 0.25f);
}

TEST_CASE("reduce_on_plateau: cooldown, min_delta, min_lr, max mode and epochs without a figure") {
  // patience 0, cooldown 2: every epoch without improvement reduces, but not while cooling down.
  // Keras counts the cooldown down before it looks, so the epoch after a drop is skipped and the
  // next one (its count reaching 0) may drop again.
  auto s = plateau_lr_scales(rule(0, 0.5, 2), 1.0f, seq({1, 2, 2, 2, 2}));
  CHECK(s == std::vector<float>{1, 1, 0.5f, 0.5f, 0.25f, 0.25f});
  // min_delta: 0.95 is not an improvement on 1.0 by 0.1.
  ReduceOnPlateauSpec d = rule(0, 0.1);
  d.min_delta = 0.1;
  s = plateau_lr_scales(d, 1.0f, seq({1.0, 0.95}));
  CHECK(s.back() == 0.1f);
  // min_lr 0.3 on a rate of 1: 0.5, then 0.3 (floored), then no further change.
  s = plateau_lr_scales(rule(0, 0.5, 0, 0.3), 1.0f, seq({1, 2, 2, 2}));
  CHECK(s == std::vector<float>{1, 1, 0.5f, 0.3f, 0.3f});
  // max: an accuracy that stops rising.
  s = plateau_lr_scales(rule(1, 0.5, 0, 0, true), 1.0f, seq({0.5, 0.6, 0.6}));
  CHECK(s == std::vector<float>{1, 1, 1, 0.5f});
  // An epoch without a figure changes nothing.
  s = plateau_lr_scales(rule(0, 0.5), 1.0f, {1.0, std::nullopt, 2.0});
  CHECK(s == std::vector<float>{1, 1, 1, 0.5f});
  // The scale of a rate that is not a power of two: the float rate's product, as Keras' float32 lr.
  s = plateau_lr_scales(rule(0, 0.1), 0.003f, seq({1, 2}));
  CHECK(s.back() == static_cast<float>(static_cast<double>(static_cast<float>(0.003 * 0.1)) / static_cast<double>(0.003f)));
}

namespace {

std::string spec_with(const std::string& plateau, const std::string& mode = "sync", const std::string& extra = "",
                      const std::string& lr = "0.1") {
  return R"({"dataset": {"name": "mnist10k"}, "model": {"input_shape": [784], "layers": [{"type": "dense", "units": 10}]},
    "optimizer": {"type": "sgd", "learning_rate": )" + lr + R"(}, "training": {"mode": ")" + mode +
         R"(", "global_batch_size": 100, "epochs": 3)" + extra + R"(}, "reduce_on_plateau": )" + plateau + "}";
}

}  // namespace

TEST_CASE("reduce_on_plateau spec: Keras' defaults, the monitor's default, the canonical text round-trips") {
  const JobSpec plain = parse_job_spec(spec_with("true"));
  const ReduceOnPlateauSpec& p = plain.reduce_on_plateau;
  CHECK(p.enabled);
  CHECK(p.monitor == "test_loss");
  CHECK_FALSE(p.maximize);
  CHECK(p.factor == 0.1);
  CHECK(p.patience == 10);
  CHECK(p.min_delta == 1e-4);
  CHECK(p.cooldown == 0);
  CHECK(p.min_lr == 0);
  CHECK(parse_job_spec(spec_with("{}", "sync", R"(, "validation_fraction": 0.1)")).reduce_on_plateau.monitor == "val_loss");
  const JobSpec s = parse_job_spec(
      spec_with(R"({"monitor": "test_accuracy", "factor": 0.5, "patience": 2, "cooldown": 1, "min_lr": 0.001})"));
  CHECK(s.reduce_on_plateau.maximize);
  const JobSpec again = parse_job_spec(job_spec_to_json(s));
  CHECK(again.reduce_on_plateau.factor == 0.5);
  CHECK(again.reduce_on_plateau.patience == 2);
  CHECK(again.reduce_on_plateau.cooldown == 1);
  CHECK(again.reduce_on_plateau.min_lr == 0.001);
  CHECK(again.reduce_on_plateau.maximize);
  CHECK(job_spec_to_json(again) == job_spec_to_json(s));
  CHECK_FALSE(parse_job_spec(spec_with("false")).reduce_on_plateau.enabled);
}

TEST_CASE("reduce_on_plateau spec: bad fields are refused by name") {
  refused(spec_with(R"({"factor": 1.0})"), "/reduce_on_plateau/factor", "below 1");
  refused(spec_with(R"({"factor": 0})"), "/reduce_on_plateau/factor", "");
  refused(spec_with(R"({"patience": -1})"), "/reduce_on_plateau/patience", "");
  refused(spec_with(R"({"monitor": "val_loss"})"), "/reduce_on_plateau/monitor", "validation_fraction");
  refused(spec_with(R"({"monitor": "loss"})"), "/reduce_on_plateau/monitor", "not an epoch metric");
  refused(spec_with(R"({"mode": "up"})"), "/reduce_on_plateau/mode", "");
  refused(spec_with(R"({"cooldown": 1, "speed": 2})"), "/reduce_on_plateau/speed", "");
  refused(spec_with("{}", "async"), "/reduce_on_plateau", "sync");
  refused(spec_with("{}", "sync", "", R"({"schedule": "exponential_decay", "initial_learning_rate": 0.1, "decay_steps": 10, "decay_rate": 0.9})"),
          "/reduce_on_plateau", "schedule");
  refused(spec_with(R"({"monitor": "test_mae"})"), "/reduce_on_plateau/monitor", "regression");
  // Resuming a run: the rule's standing would need the source job's epochs.
  refused(spec_with("{}") .substr(0, spec_with("{}").size() - 1) + R"(, "init_from": {"job": "job-1", "optimizer_state": true}})",
          "/reduce_on_plateau", "resume");
  parse_job_spec(spec_with("{}").substr(0, spec_with("{}").size() - 1) + R"(, "init_from": {"job": "job-1"}})");  // fine-tuning
}
