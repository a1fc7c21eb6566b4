#include "cli/follow.h"

#include <boost/json.hpp>

#include <optional>
#include <thread>

#include "cli/follow_view.h"
#include "cli/sse_parser.h"
#include "common/base/json_parse.h"

namespace pstrain::cli {
namespace json = boost::json;
namespace {

std::optional<double> number(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || !v->is_number()) return std::nullopt;
  return v->to_number<double>();
}
double number_or(const json::object& o, std::string_view key, double fallback) {
  return number(o, key).value_or(fallback);
}
std::string text(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : std::string();
}
std::optional<json::object> parse_object(std::string_view body) {
  boost::system::error_code ec;
  json::value v = pstrain::parse_json(body, ec);
  if (ec || !v.is_object()) return std::nullopt;
  return std::move(v.as_object());
}
int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool finished(const std::string& state) { return state == "SUCCEEDED" || state == "FAILED" || state == "CANCELLED"; }

int exit_code_of(const std::string& state) {
  if (state == "SUCCEEDED") return kExitOk;
  if (state == "CANCELLED") return kExitCancelled;
  return kExitFailed;
}

EpochFigures epoch_of(const json::object& o) {
  EpochFigures e;
  e.epoch = static_cast<int64_t>(number_or(o, "epoch", 0));
  e.train_loss = number_or(o, "train_loss", 0);
  e.train_accuracy = number_or(o, "train_accuracy", 0);
  e.test_loss = number_or(o, "test_loss", 0);
  e.test_accuracy = number_or(o, "test_accuracy", 0);
  if (o.contains("test_mae")) {
    e.test_mae = number_or(o, "test_mae", 0);
    e.test_rmse = number_or(o, "test_rmse", 0);
    e.test_r2 = number_or(o, "test_r2", 0);
  }
  if (o.contains("val_loss")) e.val_loss = number_or(o, "val_loss", 0);
  if (o.contains("val_accuracy")) e.val_accuracy = number_or(o, "val_accuracy", 0);
  if (o.contains("val_mae")) e.val_mae = number_or(o, "val_mae", 0);
  e.samples_per_second = number_or(o, "samples_per_second", 0);
  e.time_ms = static_cast<int64_t>(number_or(o, "time_ms", 0));
  return e;
}

// One follow session: the job's shape, the view, and the final state once known.
class Follower {
 public:
  Follower(HttpClient& client, std::string id, const FollowOptions& options, std::ostream& out, std::ostream& err)
      : client_(client), id_(std::move(id)), options_(options), out_(out), err_(err) {}

  int run();

 private:
  enum class StreamResult { kEnded, kNoRoute, kRefused };
  // The job's status; nullopt and *code set if the API refused (unknown job, ...).
  std::optional<json::object> status(int* code);
  StreamResult stream(int* code);
  int poll();
  // `raw`: the data as the stream sent it (printed as is with --json); empty for polled events.
  void event(const std::string& type, const json::object& data, const std::string& sse_id,
             std::string_view raw = {});
  void print_json(const std::string& type, const json::object& data, const std::string& sse_id,
                  std::string_view raw);
  int finish();
  // Retries `attempt` (which throws Unreachable) for options_.reconnect_for.
  template <typename F>
  auto retrying(F&& attempt);

  HttpClient& client_;
  std::string id_;
  FollowOptions options_;
  std::ostream& out_;
  std::ostream& err_;
  std::optional<FollowView> view_;
  std::string final_state_, reason_;
  std::optional<double> last_test_accuracy_;
  std::optional<double> last_test_mae_, last_test_r2_;  // regression jobs
};

template <typename F>
auto Follower::retrying(F&& attempt) {
  auto deadline = std::chrono::steady_clock::now() + options_.reconnect_for;
  for (int failures = 0;; ++failures) {
    try {
      return attempt();
    } catch (const Unreachable& e) {
      if (std::chrono::steady_clock::now() >= deadline) throw;
      // A stream cut once (a proxy, a restart) is resumed quietly; say so when it goes on failing.
      if (failures > 0) {
        if (view_) view_->clear_bar();
        err_ << "pstrain: " << e.what() << "; retrying\n" << std::flush;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(failures == 0 ? 200 : 1000));
    }
  }
}

std::optional<json::object> Follower::status(int* code) {
  const Response r = client_.request("GET", "/v1/jobs/" + id_);
  if (r.status != 200) {
    err_ << "pstrain: " << problem_message(r) << "\n";
    *code = kExitFailed;
    return std::nullopt;
  }
  auto o = parse_object(r.body);
  if (!o) {
    err_ << "pstrain: GET /v1/jobs/" << id_ << " answered something that is not a JSON object\n";
    *code = kExitFailed;
  }
  return o;
}

int Follower::run() {
  int code = kExitOk;
  // The first request is not retried: an unreachable coordinator is reported at once.
  const auto first = status(&code);
  if (!first) return code;
  JobShape shape;
  shape.id = id_;
  shape.epochs = static_cast<int64_t>(number_or(*first, "epochs", 0));
  shape.steps_per_epoch = static_cast<int64_t>(number_or(*first, "steps_per_epoch", 0));
  shape.total_steps = static_cast<int64_t>(number_or(*first, "total_steps", 0));
  shape.started_ms = static_cast<int64_t>(number_or(*first, "started_at_ms", 0));
  view_.emplace(out_, options_.tty && !options_.json, shape);
  if (!options_.polling_only) {
    switch (stream(&code)) {
      case StreamResult::kEnded:
        return finish();
      case StreamResult::kRefused:
        return code;
      case StreamResult::kNoRoute:
        break;
    }
  }
  return poll();
}

// The event stream, reconnecting with Last-Event-ID until the final state has arrived.
Follower::StreamResult Follower::stream(int* code) {
  SseParser parser([&](const SseEvent& e) {
    auto data = parse_object(e.data);
    if (!data) return;
    event(e.type, *data, e.id, e.data);
  });
  while (final_state_.empty()) {
    const Response r = retrying([&] {
      // Each attempt resumes after the last event received, by the previous attempts too.
      std::vector<std::pair<std::string, std::string>> headers = {{"Accept", "text/event-stream"}};
      if (!parser.last_event_id().empty()) headers.emplace_back("Last-Event-ID", parser.last_event_id());
      // Keep-alives come every 15 s: 45 s of silence is a dead connection. Once the final state
      // is here, the rest of the stream (its end) is not waited for, and a cut is no loss.
      try {
        return client_.stream("/v1/jobs/" + id_ + "/events", headers, std::chrono::seconds(45),
                              [&](std::string_view bytes) {
                                parser.feed(bytes);
                                return final_state_.empty();
                              });
      } catch (const Unreachable&) {
        if (final_state_.empty()) throw;
        return Response{200, "text/event-stream", ""};
      }
    });
    if (r.status == 404 || r.status == 405) {
      const auto problem = parse_object(r.body);
      const std::string type = problem ? text(*problem, "type") : std::string();
      // The route is missing (a coordinator older than the event stream); not an unknown job.
      if (type.find("job-not-found") == std::string::npos) return StreamResult::kNoRoute;
    }
    if (r.status != 200) {
      err_ << "pstrain: " << problem_message(r) << "\n";
      *code = kExitFailed;
      return StreamResult::kRefused;
    }
    if (!final_state_.empty()) break;
    // Closed before the end (a restarting coordinator, a proxy): resume after the last event.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  return StreamResult::kEnded;
}

void Follower::print_json(const std::string& type, const json::object& data, const std::string& sse_id,
                          std::string_view raw) {
  // {"id":N,"event":TYPE,"data":DATA} with DATA as received: numbers keep the API's own form.
  json::object head;
  if (!sse_id.empty()) {
    const bool numeric = sse_id.size() < 19 && sse_id.find_first_not_of("0123456789") == std::string::npos;
    head["id"] = numeric ? json::value(std::stoll(sse_id)) : json::value(sse_id);
  }
  head["event"] = type;
  std::string line = json::serialize(head);
  line.pop_back();  // the closing brace
  line += ",\"data\":";
  line += raw.empty() ? json::serialize(data) : std::string(raw);
  line += "}";
  out_ << line << '\n' << std::flush;
}

void Follower::event(const std::string& type, const json::object& data, const std::string& sse_id,
                     std::string_view raw) {
  if (options_.json) print_json(type, data, sse_id, raw);
  const int64_t time_ms = static_cast<int64_t>(number_or(data, "time_ms", 0));
  if (type == "state") {
    const std::string state = text(data, "state");
    if (!options_.json) view_->state(state, time_ms);
    if (finished(state)) {
      final_state_ = state;
      reason_ = text(data, "reason");
    } else if (!options_.json && state == "RECOVERING") {
      view_->note("job " + id_ + " RECOVERING" + (text(data, "reason").empty() ? "" : ": " + text(data, "reason")));
    }
  } else if (type == "progress") {
    if (!options_.json) {
      view_->dimensions(0, static_cast<int64_t>(number_or(data, "total_steps", 0)));
      view_->progress(static_cast<int64_t>(number_or(data, "steps_done", 0)), number(data, "loss"),
                      time_ms > 0 ? time_ms : now_ms());
    }
  } else if (type == "epoch") {
    last_test_accuracy_ = number(data, "test_accuracy");
    last_test_mae_ = number(data, "test_mae");
    last_test_r2_ = number(data, "test_r2");
    if (!options_.json) view_->epoch(epoch_of(data));
  } else if (type == "recovery" && !options_.json) {
    view_->note("recovery " + std::to_string(static_cast<int64_t>(number_or(data, "recoveries", 0))) + ": " +
                text(data, "detail"));
  } else if (type == "warning" && !options_.json) {
    view_->note("warning: " + text(data, "detail"));
  } else if (type == "node" && !options_.json && text(data, "change") == "lost") {
    view_->note(text(data, "role") + " " + text(data, "name") + " lost");
  }
}

// Polling: the job's status every poll_interval; its metrics when an epoch may have ended.
int Follower::poll() {
  std::string last_state;
  int64_t last_step = -1;
  std::string epoch_key;  // (epoch, test_loss) as last seen: a change means new epoch figures
  size_t epochs_seen = 0;
  while (true) {
    int code = kExitOk;
    const auto s = retrying([&] { return status(&code); });
    if (!s) return code;
    const std::string state = text(*s, "state");
    const int64_t now = now_ms();
    if (state != last_state) {
      json::object data{{"job", id_}, {"state", state}, {"reason", text(*s, "reason")}, {"time_ms", now}};
      if (state == "RUNNING" && number(*s, "started_at_ms")) {
        data["time_ms"] = static_cast<int64_t>(number_or(*s, "started_at_ms", 0));
      }
      if (!finished(state)) event("state", data, "");
      last_state = state;
    }
    const int64_t step = static_cast<int64_t>(number_or(*s, "step", 0));
    if (step != last_step && !finished(state)) {
      json::object data{{"job", id_},
                        {"epoch", number_or(*s, "epoch", 0)},
                        {"steps_done", step},
                        {"total_steps", number_or(*s, "total_steps", 0)},
                        {"samples_per_second", number_or(*s, "samples_per_second", 0)},
                        {"time_ms", now}};
      if (const auto loss = number(*s, "train_loss")) data["loss"] = *loss;
      if (!options_.json) {
        view_->dimensions(static_cast<int64_t>(number_or(*s, "steps_per_epoch", 0)),
                          static_cast<int64_t>(number_or(*s, "total_steps", 0)));
      }
      event("progress", data, "");
      last_step = step;
    }
    const json::value* test_loss = s->if_contains("test_loss");
    const std::string key = std::to_string(number_or(*s, "epoch", 0)) + "/" +
                            (test_loss != nullptr ? json::serialize(*test_loss) : std::string("null"));
    if (key != epoch_key || finished(state)) {
      epoch_key = key;
      const Response m = retrying([&] { return client_.request("GET", "/v1/jobs/" + id_ + "/metrics"); });
      if (const auto metrics = m.status == 200 ? parse_object(m.body) : std::nullopt) {
        const json::value* epochs = metrics->if_contains("epochs");
        if (epochs != nullptr && epochs->is_array()) {
          const json::array& list = epochs->as_array();
          for (size_t i = epochs_seen; i < list.size(); ++i) {
            if (!list[i].is_object()) continue;
            json::object data = list[i].as_object();
            data["job"] = id_;
            event("epoch", data, "");
          }
          epochs_seen = std::max(epochs_seen, list.size());
        }
      }
    }
    if (finished(state)) {
      json::object data{{"job", id_}, {"state", state}, {"reason", text(*s, "reason")},
                        {"time_ms", static_cast<int64_t>(number_or(*s, "finished_at_ms", static_cast<double>(now)))}};
      event("state", data, "");
      if (const auto accuracy = number(*s, "test_accuracy")) last_test_accuracy_ = accuracy;
      if (const auto mae = number(*s, "test_mae")) last_test_mae_ = mae;
      if (const auto r2 = number(*s, "test_r2")) last_test_r2_ = r2;
      return finish();
    }
    std::this_thread::sleep_for(options_.poll_interval);
  }
}

int Follower::finish() {
  if (!options_.json) {
    view_->clear_bar();
    std::string line = "job " + id_ + " " + final_state_;
    if (final_state_ == "SUCCEEDED" && last_test_mae_) {
      char figures[96];
      std::snprintf(figures, sizeof figures, ": final test MAE %.4f, R^2 %.4f", *last_test_mae_,
                    last_test_r2_.value_or(0.0));
      line += figures;
    } else if (final_state_ == "SUCCEEDED" && last_test_accuracy_) {
      char accuracy[32];
      std::snprintf(accuracy, sizeof accuracy, "%.4f", *last_test_accuracy_);
      line += ": final test accuracy " + std::string(accuracy);
    } else if (!reason_.empty()) {
      line += ": " + reason_;
    }
    out_ << line << '\n' << std::flush;
  }
  return exit_code_of(final_state_);
}

}  // namespace

int follow_job(HttpClient& client, const std::string& id, const FollowOptions& options, std::ostream& out,
               std::ostream& err) {
  return Follower(client, id, options, out, err).run();
}

}  // namespace pstrain::cli
