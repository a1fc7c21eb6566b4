// What `pstrain follow` prints, Keras-style: one line per epoch
//   Epoch 2/5 - 12.3s - loss: 0.2913 - accuracy: 0.9141 - test_loss: 0.2001 - test_accuracy: 0.9402 - 23,410 samples/s
// and, on a terminal only, a progress bar of the current epoch redrawn in place with '\r':
//   1250/2345 [=============>................] - ETA: 7s - loss: 0.3121
// Fed by either source (the event stream or polling), in the same terms. Pure formatting plus an
// ostream: no I/O of its own, no clock (times come in as arguments). One owner, no threads.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <set>
#include <string>

namespace pstrain::cli {

// The job's dimensions, from GET /v1/jobs/{id}.
struct JobShape {
  std::string id;
  int64_t epochs = 0;
  int64_t steps_per_epoch = 0;
  int64_t total_steps = 0;
  int64_t started_ms = 0;  // 0: not started
};

struct EpochFigures {
  int64_t epoch = 0;  // 1-based
  double train_loss = 0, train_accuracy = 0, test_loss = 0, test_accuracy = 0, samples_per_second = 0;
  // Regression jobs: the test split's MAE, RMSE and R^2 (shown instead of the accuracies).
  std::optional<double> test_mae, test_rmse, test_r2;
  // The validation hold-out's (training.validation_fraction), when the job has one.
  std::optional<double> val_loss, val_accuracy, val_mae;
  int64_t time_ms = 0;  // when it was recorded
};

// "23,410" (rounded to an integer).
std::string with_thousands(double value);
// The epoch line (no newline); `seconds` < 0 leaves the duration out.
std::string epoch_line(const EpochFigures& e, int64_t epochs, double seconds);
// "done/total [====>.....] - ETA: 7s - loss: 0.3121" with a bar of `width` characters.
std::string progress_bar(int64_t done, int64_t total, std::optional<double> eta_seconds, std::optional<double> loss,
                         int width = 30);

class FollowView {
 public:
  FollowView(std::ostream& out, bool tty, JobShape shape) : out_(out), tty_(tty), shape_(std::move(shape)) {}

  // The job's dimensions once known (a PENDING job has no steps per epoch yet); 0 keeps a value,
  // and the steps per epoch follow from the total when not given.
  void dimensions(int64_t steps_per_epoch, int64_t total_steps);
  // A progress report: `steps_done` job-wide steps at `time_ms` (the report's clock).
  void progress(int64_t steps_done, std::optional<double> loss, int64_t time_ms);
  // An epoch's figures: printed once per epoch number, however often it arrives.
  void epoch(const EpochFigures& e);
  // A state change; the job's start time is taken from RUNNING when not known yet.
  void state(const std::string& state, int64_t time_ms);
  // A line of its own (a recovery, a lost node).
  void note(const std::string& text);
  // Clears the bar (before the final lines).
  void clear_bar();

  int64_t epochs_printed() const { return static_cast<int64_t>(printed_.size()); }

 private:
  std::ostream& out_;
  bool tty_;
  JobShape shape_;
  std::set<int64_t> printed_;
  int64_t last_epoch_ms_ = 0;        // time of the last epoch printed (the next one's start)
  bool bar_shown_ = false;
  std::optional<std::pair<int64_t, int64_t>> first_progress_;  // (time_ms, steps_done) seen first
};

}  // namespace pstrain::cli
