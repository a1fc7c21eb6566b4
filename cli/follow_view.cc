#include "cli/follow_view.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace pstrain::cli {

std::string with_thousands(double value) {
  if (!std::isfinite(value)) return "-";
  const bool negative = value < 0;
  std::string digits = std::to_string(static_cast<long long>(std::llround(std::fabs(value))));
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return negative ? "-" + out : out;
}

namespace {

std::string fixed(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

// Keras-like ETA: whole seconds, then 1m05s, then 2h03m.
std::string duration(double seconds) {
  if (seconds < 60) return std::to_string(std::llround(std::ceil(seconds))) + "s";
  const long long s = std::llround(seconds);
  if (s < 3600) return std::to_string(s / 60) + "m" + (s % 60 < 10 ? "0" : "") + std::to_string(s % 60) + "s";
  return std::to_string(s / 3600) + "h" + (s % 3600 / 60 < 10 ? "0" : "") + std::to_string(s % 3600 / 60) + "m";
}

}  // namespace

std::string epoch_line(const EpochFigures& e, int64_t epochs, double seconds) {
  std::string line = "Epoch " + std::to_string(e.epoch) + "/" + std::to_string(epochs);
  if (seconds >= 0) line += " - " + fixed(seconds, 1) + "s";
  std::string val;  // Keras prints val_loss and val_<metric> after the training figures
  if (e.val_loss) val += " - val_loss: " + fixed(*e.val_loss, 4);
  if (e.val_accuracy) val += " - val_accuracy: " + fixed(*e.val_accuracy, 4);
  if (e.val_mae) val += " - val_mae: " + fixed(*e.val_mae, 4);
  if (e.test_mae) {  // regression
    return line + " - loss: " + fixed(e.train_loss, 4) + val + " - test_loss: " + fixed(e.test_loss, 4) +
           " - test_mae: " + fixed(*e.test_mae, 4) + " - test_rmse: " + fixed(e.test_rmse.value_or(0), 4) +
           " - test_r2: " + fixed(e.test_r2.value_or(0), 4) + " - " + with_thousands(e.samples_per_second) +
           " samples/s";
  }
  line += " - loss: " + fixed(e.train_loss, 4) + " - accuracy: " + fixed(e.train_accuracy, 4) + val +
          " - test_loss: " + fixed(e.test_loss, 4) + " - test_accuracy: " + fixed(e.test_accuracy, 4) + " - " +
          with_thousands(e.samples_per_second) + " samples/s";
  return line;
}

std::string progress_bar(int64_t done, int64_t total, std::optional<double> eta_seconds, std::optional<double> loss,
                         int width) {
  total = std::max<int64_t>(total, 1);
  done = std::clamp<int64_t>(done, 0, total);
  const int filled = static_cast<int>(static_cast<double>(done) / static_cast<double>(total) * width);
  std::string bar(static_cast<size_t>(width), '.');
  for (int i = 0; i < filled; ++i) bar[static_cast<size_t>(i)] = '=';
  if (filled > 0 && done < total) bar[static_cast<size_t>(filled - 1)] = '>';  // Keras: the head of the bar
  const std::string total_text = std::to_string(total);
  std::string done_text = std::to_string(done);
  if (done_text.size() < total_text.size()) done_text.insert(0, total_text.size() - done_text.size(), ' ');
  std::string line = done_text + "/" + total_text + " [" + bar + "]";
  if (eta_seconds) line += " - ETA: " + duration(std::max(0.0, *eta_seconds));
  if (loss) line += " - loss: " + fixed(*loss, 4);
  return line;
}

void FollowView::dimensions(int64_t steps_per_epoch, int64_t total_steps) {
  if (total_steps > 0) shape_.total_steps = total_steps;
  if (steps_per_epoch > 0) {
    shape_.steps_per_epoch = steps_per_epoch;
  } else if (shape_.steps_per_epoch <= 0 && shape_.epochs > 0 && shape_.total_steps % shape_.epochs == 0) {
    shape_.steps_per_epoch = shape_.total_steps / shape_.epochs;
  }
}

void FollowView::progress(int64_t steps_done, std::optional<double> loss, int64_t time_ms) {
  if (!first_progress_) first_progress_ = {time_ms, steps_done};
  if (!tty_ || shape_.steps_per_epoch <= 0) return;
  // The epoch in progress: the one after the last whole epoch done.
  // A count on an epoch's boundary is that epoch's end (N/N), not the next one's start (0/N).
  const int64_t epoch_index = std::clamp<int64_t>((steps_done - 1) / shape_.steps_per_epoch, 0,
                                                  std::max<int64_t>(shape_.epochs - 1, 0));
  const int64_t in_epoch = steps_done - epoch_index * shape_.steps_per_epoch;
  const int64_t epoch_end = (epoch_index + 1) * shape_.steps_per_epoch;
  std::optional<double> eta;
  const auto [t0, s0] = *first_progress_;
  if (steps_done > s0 && time_ms > t0) {
    const double steps_per_ms = static_cast<double>(steps_done - s0) / static_cast<double>(time_ms - t0);
    eta = static_cast<double>(epoch_end - steps_done) / steps_per_ms / 1000.0;
  }
  out_ << '\r' << progress_bar(in_epoch, shape_.steps_per_epoch, eta, loss) << "\x1b[K" << std::flush;
  bar_shown_ = true;
}

void FollowView::epoch(const EpochFigures& e) {
  if (!printed_.insert(e.epoch).second) return;
  const int64_t start = last_epoch_ms_ > 0 ? last_epoch_ms_ : shape_.started_ms;
  const double seconds = start > 0 && e.time_ms >= start ? static_cast<double>(e.time_ms - start) / 1000.0 : -1.0;
  if (e.time_ms > 0) last_epoch_ms_ = e.time_ms;
  clear_bar();
  out_ << epoch_line(e, shape_.epochs, seconds) << '\n' << std::flush;
}

void FollowView::state(const std::string& state, int64_t time_ms) {
  if (state == "RUNNING" && shape_.started_ms == 0) shape_.started_ms = time_ms;
}

void FollowView::note(const std::string& text) {
  clear_bar();
  out_ << text << '\n' << std::flush;
}

void FollowView::clear_bar() {
  if (!bar_shown_) return;
  out_ << "\r\x1b[K" << std::flush;
  bar_shown_ = false;
}

}  // namespace pstrain::cli
