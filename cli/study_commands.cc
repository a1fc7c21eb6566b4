#include "cli/study_commands.h"

#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include "cli/cli_support.h"
#include "cli/follow.h"

namespace pstrain::cli {

const char* const kStudyHelp =
    "Usage: pstrain study submit STUDY.json [--follow] | list | status ID | follow ID | cancel ID\n"
    "Hyperparameter studies (docs/STUDIES.md):\n"
    "  submit STUDY.json   POST /v1/studies ('-': standard input); prints the study's id; --follow: then follow it\n"
    "  list                the studies: id, name, state, algorithm, metric, trials, best\n"
    "  status ID           the study and a line per trial: state, epochs, metric, parameters, job\n"
    "  follow ID           a line per trial as it starts, records an epoch, is paused, promoted or\n"
    "                      stopped, until the study ends; then its best trial\n"
    "  cancel ID           cancels the study and its running trials (POST /v1/studies/{id}/cancel)\n"
    "Exits as `pstrain follow` does: 0 SUCCEEDED, 1 FAILED (or an API error), 3 CANCELLED, 4 unreachable.\n";

namespace {

std::string parameters_text(const json::object& trial) {
  std::string out;
  const json::value* p = trial.if_contains("parameters");
  if (p == nullptr || !p->is_object()) return out;
  for (const auto& [key, value] : p->as_object()) {
    std::string name(key);
    name = name.substr(name.rfind('/') + 1);
    out += (out.empty() ? "" : " ") + name + "=" + (value.is_double() ? fixed(value.as_double(), 6) : json::serialize(value));
  }
  // Trailing zeros of a fixed-point figure say nothing.
  return out;
}

class StudyCommands {
 public:
  StudyCommands(const StudyInvocation& inv, HttpClient& client, std::ostream& out, std::ostream& err)
      : inv_(inv), client_(client), out_(out), err_(err) {}

  int run() {
    if (inv_.args.empty()) throw UsageError("'study' needs a sub-command: submit, list, status, follow or cancel");
    const std::string& c = inv_.args[0];
    if (c == "submit") return submit();
    if (c == "list") return list();
    if (c == "status") return status(one_id());
    if (c == "follow") return follow(one_id());
    if (c == "cancel") return cancel(one_id());
    throw UsageError("unknown study sub-command '" + c + "'");
  }

 private:
  const std::string& one_id() {
    if (inv_.args.size() != 2) throw UsageError("'study " + inv_.args[0] + "' takes one study id");
    return inv_.args[1];
  }

  int api_error(const Response& r) {
    if (inv_.json && !r.body.empty()) out_ << r.body << (r.body.back() == '\n' ? "" : "\n");
    err_ << "pstrain: " << problem_message(r) << "\n";
    return kExitFailed;
  }

  void print_body(const std::string& body) { out_ << body << (!body.empty() && body.back() == '\n' ? "" : "\n"); }

  int submit() {
    if (inv_.args.size() != 2) throw UsageError("'study submit' takes one study file");
    std::ostringstream s;
    if (inv_.args[1] == "-") {
      s << std::cin.rdbuf();
    } else {
      std::ifstream in(inv_.args[1], std::ios::binary);
      if (!in) throw UsageError("cannot read the study file '" + inv_.args[1] + "'");
      s << in.rdbuf();
    }
    const Response r = client_.request("POST", "/v1/studies", s.str(), "application/json");
    if (r.status != 201) {
      if (inv_.json) return api_error(r);
      err_ << "pstrain: the study was refused: " << problem_message(r) << "\n";
      return kExitFailed;
    }
    const auto v = parse_json(r.body);
    const std::string id = v ? text(as_object(*v), "id", "") : std::string();
    if (inv_.json) {
      print_body(r.body);
    } else {
      out_ << id << "\n" << std::flush;
    }
    return inv_.follow ? follow(id) : kExitOk;
  }

  std::optional<json::value> get(const std::string& target, int* code) {
    const Response r = client_.request("GET", target);
    if (r.status != 200) {
      *code = api_error(r);
      return std::nullopt;
    }
    auto v = parse_json(r.body);
    if (!v) *code = kExitFailed;
    return v;
  }

  static std::string best_text(const json::object& study) {
    const json::value* b = study.if_contains("best");
    if (b == nullptr || !b->is_object()) return "-";
    const json::object& o = b->as_object();
    return "trial " + text(o, "trial") + ": " + text(study, "metric") + " " + fixed(number(o, "metric"), 4) + " at " +
           text(o, "epochs") + " epochs, " + parameters_text(o) + ", model " + text(o, "model");
  }

  int list() {
    int code = kExitOk;
    const auto v = get("/v1/studies", &code);
    if (!v) return code;
    if (inv_.json) {
      print_body(json::serialize(*v));
      return kExitOk;
    }
    std::vector<std::vector<std::string>> rows = {{"ID", "NAME", "STATE", "ALGORITHM", "METRIC", "TRIALS", "BEST"}};
    const json::value* studies = as_object(*v).if_contains("studies");
    if (studies != nullptr && studies->is_array()) {
      for (const auto& s : studies->as_array()) {
        const json::object& o = as_object(s);
        const json::value* b = o.if_contains("best");
        rows.push_back({text(o, "id"), text(o, "name"), text(o, "state"), text(o, "algorithm"),
                        text(o, "metric") + " (" + text(o, "mode") + ")", text(o, "trials") + "/" + text(o, "max_trials"),
                        b != nullptr && b->is_object() ? fixed(number(b->as_object(), "metric"), 4) : "-"});
      }
    }
    out_ << table(rows);
    if (rows.size() == 1) out_ << "(no studies)\n";
    return kExitOk;
  }

  int status(const std::string& id) {
    int code = kExitOk;
    const auto v = get("/v1/studies/" + id, &code);
    if (!v) return code;
    if (inv_.json) {
      print_body(json::serialize(*v));
      return kExitOk;
    }
    const json::object& o = as_object(*v);
    out_ << "study:      " << text(o, "id") << "  " << text(o, "name") << "\n"
         << "state:      " << text(o, "state") << (text(o, "reason", "").empty() ? "" : " (" + text(o, "reason") + ")") << "\n"
         << "algorithm:  " << text(o, "algorithm") << ", " << text(o, "metric") << " (" << text(o, "mode") << ")\n"
         << "used:       " << fixed(number(o, "worker_seconds"), 0) << " worker-seconds, " << fixed(number(o, "node_seconds"), 0)
         << " node-seconds\n"
         << "best:       " << best_text(o) << "\n";
    std::vector<std::vector<std::string>> rows = {{"TRIAL", "STATE", "EPOCHS", "METRIC", "PARAMETERS", "JOB"}};
    const json::value* trials = o.if_contains("trials");
    if (trials != nullptr && trials->is_array()) {
      for (const auto& t : trials->as_array()) {
        const json::object& to = as_object(t);
        rows.push_back({text(to, "number"), text(to, "state"), text(to, "epochs"), fixed(number(to, "metric"), 4),
                        parameters_text(to), text(to, "job")});
      }
    }
    out_ << table(rows);
    return kExitOk;
  }

  // One line per change of a trial (its state, or an epoch it recorded), until the study ends.
  int follow(const std::string& id) {
    std::map<int64_t, std::string> seen;  // trial -> what was printed last
    auto unreachable_since = std::optional<std::chrono::steady_clock::time_point>();
    while (true) {
      Response r;
      try {
        r = client_.request("GET", "/v1/studies/" + id);
        unreachable_since.reset();
      } catch (const Unreachable&) {
        // A coordinator restarting: the study goes on; so does following it (for up to 30 s).
        const auto now = std::chrono::steady_clock::now();
        if (!unreachable_since) unreachable_since = now;
        if (now - *unreachable_since > std::chrono::seconds(30)) throw;
        std::this_thread::sleep_for(std::chrono::milliseconds(inv_.poll_ms));
        continue;
      }
      if (r.status != 200) return api_error(r);
      const auto v = parse_json(r.body);
      if (!v) return kExitFailed;
      const json::object& o = as_object(*v);
      const json::value* trials = o.if_contains("trials");
      if (trials != nullptr && trials->is_array()) {
        for (const auto& t : trials->as_array()) {
          const json::object& to = as_object(t);
          const int64_t n = static_cast<int64_t>(number(to, "number").value_or(-1));
          const json::value* h = to.if_contains("history");
          const size_t epochs = h != nullptr && h->is_array() ? h->as_array().size() : 0;
          std::string line = "trial " + text(to, "number") + "  " + text(to, "state");
          if (epochs > 0) {
            const json::object& last = as_object(h->as_array().back());
            const std::string metric = text(o, "metric");
            const auto figure = number(last, metric);
            line += "  epoch " + std::to_string(epochs) + "/" + text(to, "epochs") +
                    (figure ? "  " + metric + " " + fixed(figure, 4) : "");
          }
          line += "  " + parameters_text(to) + "  (job " + text(to, "job") + ")";
          if (to.if_contains("reason") != nullptr) line += "  " + text(to, "reason");
          if (seen[n] != line) {
            if (inv_.json) {
              print_body(json::serialize(to));
            } else {
              out_ << line << "\n" << std::flush;
            }
            seen[n] = line;
          }
        }
      }
      const std::string state = text(o, "state");
      if (state != "RUNNING") {
        if (!inv_.json) out_ << "study " << id << " " << state << "; best " << best_text(o) << "\n";
        return state == "SUCCEEDED" ? kExitOk : state == "CANCELLED" ? kExitCancelled : kExitFailed;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(inv_.poll_ms));
    }
  }

  int cancel(const std::string& id) {
    const Response r = client_.request("POST", "/v1/studies/" + id + "/cancel");
    if (r.status != 200) return api_error(r);
    if (inv_.json) {
      print_body(r.body);
    } else {
      out_ << "study " << id << " CANCELLED\n";
    }
    return kExitOk;
  }

  const StudyInvocation& inv_;
  HttpClient& client_;
  std::ostream& out_;
  std::ostream& err_;
};

}  // namespace

int run_study(const StudyInvocation& inv, HttpClient& client, std::ostream& out, std::ostream& err) {
  return StudyCommands(inv, client, out, err).run();
}

}  // namespace pstrain::cli
