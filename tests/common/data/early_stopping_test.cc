// Early stopping's rule (common/data/early_stopping.h) against sequences worked by hand with Keras'
// EarlyStopping (Keras 3: wait counts up before the comparison, min_delta is subtracted from the
// improvement, the first looked-at epoch is always an improvement, no stop at epoch 0), and the
// spec's `early_stopping` refused field by field.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "common/base/error.h"
#include "common/data/early_stopping.h"
#include "common/data/job_spec.h"
#include "tests/common/data/spec_refusal.h"

using namespace pstrain;
using testing::refused;

namespace {

EarlyStoppingSpec rule(const std::string& monitor, int64_t patience, double min_delta = 0) {
  EarlyStoppingSpec s;
  s.enabled = true;
  s.monitor = monitor;
  s.maximize = metric_is_maximized(monitor);
  s.patience = patience;
  s.min_delta = min_delta;
  return s;
}

std::vector<std::optional<double>> seq(std::initializer_list<double> v) { return {v.begin(), v.end()}; }

}  // namespace

TEST_CASE("early stopping: loss, patience 0 - stops at the first epoch that does not improve") {
  const auto d = decide_early_stopping(rule("test_loss", 0), seq({0.9, 0.7, 0.8, 0.5}));
  REQUIRE(d.stopped_epoch);
  CHECK(*d.stopped_epoch == 2);
  CHECK(*d.best_epoch == 1);
  CHECK(*d.best == 0.7);
  CHECK(d.wait == 1);
}

TEST_CASE("early stopping: patience 2 counts epochs since the best, an improvement resets it") {
  // 1.0 best; 1.1 wait 1; 0.9 best (wait 0); 0.95 wait 1; 0.91 wait 2 -> stop after epoch 4.
  const auto d = decide_early_stopping(rule("test_loss", 2), seq({1.0, 1.1, 0.9, 0.95, 0.91, 0.1}));
  REQUIRE(d.stopped_epoch);
  CHECK(*d.stopped_epoch == 4);
  CHECK(*d.best_epoch == 2);
  EarlyStoppingSpec best = rule("test_loss", 2);
  CHECK(*d.model_epoch(best) == 4);
  best.restore_best = true;
  CHECK(*d.model_epoch(best) == 2);
}

TEST_CASE("early stopping: min_delta - a gain smaller than it is no improvement") {
  // accuracy (max): 0.80 best; 0.805 is not > 0.80 + 0.01: wait 1 -> stop (patience 1).
  const auto d = decide_early_stopping(rule("test_accuracy", 1, 0.01), seq({0.80, 0.805, 0.9}));
  REQUIRE(d.stopped_epoch);
  CHECK(*d.stopped_epoch == 1);
  CHECK(*d.best_epoch == 0);
  // Gains larger than min_delta: no stop.
  const auto go = decide_early_stopping(rule("test_accuracy", 1, 0.01), seq({0.80, 0.82, 0.84}));
  CHECK_FALSE(go.stopped_epoch);
  CHECK(*go.best_epoch == 2);
  CHECK(go.wait == 0);
}

TEST_CASE("early stopping: the first epoch never stops, start_from_epoch skips epochs, missing figures too") {
  CHECK_FALSE(decide_early_stopping(rule("test_loss", 0), seq({0.5})).stopped_epoch);
  EarlyStoppingSpec late = rule("test_loss", 0);
  late.start_from_epoch = 2;
  // Epochs 0 and 1 are not looked at; 2 is the first (best), 3 does not improve -> stop at 3.
  const auto d = decide_early_stopping(late, seq({0.1, 0.05, 0.9, 0.95}));
  REQUIRE(d.stopped_epoch);
  CHECK(*d.stopped_epoch == 3);
  CHECK(*d.best_epoch == 2);
  const auto gaps = decide_early_stopping(rule("test_loss", 0), {std::nullopt, 0.5, std::nullopt, 0.4});
  CHECK_FALSE(gaps.stopped_epoch);
  CHECK(*gaps.best_epoch == 3);
}

TEST_CASE("early stopping: baseline - improvements that do not beat it keep the count going") {
  EarlyStoppingSpec s = rule("test_accuracy", 1);
  s.baseline = 0.9;
  // 0.5 best but below the baseline: wait stays 1; epoch 1: 0.6 best, wait 2 (not reset) ... Keras:
  // wait += 1 then improvement without beating the baseline returns before the patience check,
  // so it stops at the first epoch that does not improve at all.
  const auto d = decide_early_stopping(s, seq({0.5, 0.6, 0.55}));
  REQUIRE(d.stopped_epoch);
  CHECK(*d.stopped_epoch == 2);
  CHECK(*d.best_epoch == 1);
  CHECK(d.wait == 3);
}

TEST_CASE("early stopping: auto mode maximizes accuracies, AUC and R^2, minimizes the rest, NaN never improves") {
  CHECK(metric_is_maximized("test_accuracy"));
  CHECK(metric_is_maximized("train_accuracy"));
  CHECK(metric_is_maximized("test_top5_accuracy"));
  CHECK(metric_is_maximized("test_auc"));
  CHECK(metric_is_maximized("test_r2"));
  CHECK_FALSE(metric_is_maximized("test_loss"));
  CHECK_FALSE(metric_is_maximized("test_mae"));
  CHECK_FALSE(metric_is_maximized("test_rmse"));
  const auto d = decide_early_stopping(rule("test_loss", 0), seq({0.5, std::nan("")}));
  REQUIRE(d.stopped_epoch);
  CHECK(*d.stopped_epoch == 1);
  CHECK(*d.best_epoch == 0);
}

namespace {

std::string spec_with(const std::string& early, const std::string& mode = "sync", const std::string& extra = "") {
  return R"({"dataset": {"name": "mnist10k"}, "model": {"input_shape": [784], "layers": [{"type": "dense", "units": 10}]},
    "optimizer": {"type": "sgd"}, "training": {"mode": ")" + mode + R"(", "global_batch_size": 100, "epochs": 3},
    "early_stopping": )" + early + extra + "}";
}

}  // namespace

TEST_CASE("early stopping spec: defaults, backups at epoch ends, the canonical text round-trips") {
  const JobSpec s = parse_job_spec(spec_with(R"({"monitor": "test_accuracy", "patience": 2, "restore_best": true})"));
  CHECK(s.early_stopping.enabled);
  CHECK(s.early_stopping.maximize);
  CHECK(s.early_stopping.patience == 2);
  CHECK(s.early_stopping.restore_best);
  CHECK(s.backup.frequency == BackupSpec::Frequency::kEpoch);
  const JobSpec again = parse_job_spec(job_spec_to_json(s));
  CHECK(job_spec_to_json(again) == job_spec_to_json(s));
  CHECK(again.early_stopping.monitor == "test_accuracy");
  const JobSpec plain = parse_job_spec(spec_with("true"));
  CHECK(plain.early_stopping.monitor == "test_loss");
  CHECK_FALSE(plain.early_stopping.maximize);
  const JobSpec min = parse_job_spec(spec_with(R"({"monitor": "test_accuracy", "mode": "min", "baseline": 0.5})"));
  CHECK_FALSE(min.early_stopping.maximize);
  CHECK(*min.early_stopping.baseline == 0.5);
  CHECK_FALSE(parse_job_spec(spec_with("false")).early_stopping.enabled);
}

TEST_CASE("early stopping spec: every bad value is refused naming its field") {
  refused(spec_with(R"({"monitor": "validation_loss"})"), "/early_stopping/monitor", "not an epoch metric");
  refused(spec_with(R"({"mode": "up"})"), "/early_stopping/mode", "\"auto\"");
  refused(spec_with(R"({"patience": -1})"), "/early_stopping/patience", "");
  refused(spec_with(R"({"min_delta": -0.1})"), "/early_stopping/min_delta", "");
  refused(spec_with(R"({"start_from_epoch": 1.5})"), "/early_stopping/start_from_epoch", "");
  refused(spec_with(R"({"restore_best": "yes"})"), "/early_stopping/restore_best", "boolean");
  refused(spec_with(R"({"patiense": 3})"), "/early_stopping/patiense", "");
  refused(spec_with("3"), "/early_stopping", "object");
  refused(spec_with("{}", "async"), "/early_stopping", "sync");
  refused(spec_with("{}", "sync", R"(, "backup": {"save_freq": 10})"), "/backup/save_freq", "early_stopping");
  refused(spec_with("{}", "sync", R"(, "checkpoint": {"keep": 0})"), "/checkpoint/keep", "early_stopping");
  refused(spec_with(R"({"monitor": "test_mae"})"), "/early_stopping/monitor", "regression figure");
  refused(spec_with(R"({"monitor": "test_auc"})"), "/early_stopping/monitor", "binary_cross_entropy");
  refused(spec_with(R"({"monitor": "val_loss"})"), "/early_stopping/monitor", "validation_fraction");
}

namespace {

std::string with_validation(const std::string& fraction, const std::string& early = "true") {
  return R"({"dataset": {"name": "mnist10k"}, "model": {"input_shape": [784], "layers": [{"type": "dense", "units": 10}]},
    "optimizer": {"type": "sgd"}, "training": {"global_batch_size": 100, "validation_fraction": )" + fraction +
         R"(}, "early_stopping": )" + early + "}";
}

}  // namespace

TEST_CASE("validation_fraction spec: early stopping watches val_loss by default, bad fractions refused") {
  const JobSpec s = parse_job_spec(with_validation("0.2"));
  CHECK(s.training.validation_fraction == 0.2);
  CHECK(s.early_stopping.monitor == "val_loss");
  CHECK_FALSE(s.early_stopping.maximize);
  CHECK(parse_job_spec(job_spec_to_json(s)).training.validation_fraction == 0.2);
  CHECK(parse_job_spec(with_validation("0.2", R"({"monitor": "val_accuracy"})")).early_stopping.maximize);
  refused(with_validation("-0.1"), "/training/validation_fraction", "");
  refused(with_validation("0.95"), "/training/validation_fraction", "");
  refused(with_validation("\"half\""), "/training/validation_fraction", "number");
  refused(with_validation("0.2", R"({"monitor": "val_mae"})"), "/early_stopping/monitor", "regression figure");
}
