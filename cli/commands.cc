#include "cli/commands.h"

#include <boost/json.hpp>

#include <cmath>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "cli/follow.h"
#include "cli/follow_view.h"
#include "cli/cli_support.h"
#include "cli/http_client.h"
#include "cli/predict_command.h"
#include "cli/study_commands.h"

namespace pstrain::cli {
namespace json = boost::json;
namespace {

constexpr const char* kDefaultUrl = "http://127.0.0.1:8080";

const char* const kUsage =
    "Usage: pstrain [--url URL] [--token TOKEN] [--cacert FILE] [--json] COMMAND [ARGS]\n"
    "\n"
    "The command-line client of a pstrain coordinator (its REST API).\n"
    "\n"
    "Commands:\n"
    "  submit SPEC.json [--follow]   submit a job spec (POST /v1/jobs); print its id; --follow: then follow it\n"
    "  list                          the jobs: id, name, state, progress, accuracy, mode, created\n"
    "  status ID                     one job's state, progress, figures and model\n"
    "  follow ID                     watch a job until it ends: a line per epoch, a progress bar on a terminal\n"
    "  cancel ID                     cancel a job (POST /v1/jobs/{id}/cancel)\n"
    "  download ID [-o FILE]         the trained model (safetensors) to FILE (default ID.safetensors)\n"
    "  export ID [--step S] [-o FILE]  the model (or checkpoint S) as ONNX to FILE (default ID.onnx)\n"
    "  predict ID FILE [--scaled]    a model's predictions for FILE's examples (.npy or .json)\n"
    "  cluster                       the registered nodes\n"
    "  study SUB-COMMAND             hyperparameter studies: submit, list, status, follow, cancel\n"
    "\n"
    "Options (anywhere on the line):\n"
    "  --url URL       the coordinator's REST API, http:// or https:// (env PSTRAIN_URL;\n"
    "                  default http://127.0.0.1:8080)\n"
    "  --token TOKEN   sent as 'Authorization: Bearer TOKEN' (env PSTRAIN_TOKEN)\n"
    "  --cacert FILE   https: trust the server certificate's CA in FILE (PEM; env PSTRAIN_CACERT;\n"
    "                  default: the system's CAs); the certificate must name the URL's host\n"
    "  --insecure      https: do not verify the server's certificate (testing only)\n"
    "  --json          print the API's JSON as is (follow: one JSON object per event line)\n"
    "  --timeout S     seconds to wait for any one answer (default 30)\n"
    "  -h, --help      this text; COMMAND --help: that command's\n"
    "\n"
    "Exit codes: 0 success (follow, submit --follow: the job SUCCEEDED), 1 the job FAILED or the API\n"
    "answered an error (its detail is printed), 2 usage error, 3 the job was CANCELLED, 4 the\n"
    "coordinator is unreachable.\n";

const std::map<std::string, std::string> kCommandHelp = {
    {"submit",
     "Usage: pstrain submit SPEC.json [--follow]\n"
     "Submits the job spec in SPEC.json ('-': standard input) with POST /v1/jobs and prints the new job's\n"
     "id (--json: the job's status as the API answers it). An invalid spec exits 1 with the API's\n"
     "message, naming the field at fault. --follow: then follows the job (see `pstrain follow --help`)\n"
     "and exits as follow does.\n"},
    {"list", "Usage: pstrain list\nThe jobs (GET /v1/jobs) as a table: id, name, state, progress, test accuracy, mode, created.\n"},
    {"status",
     "Usage: pstrain status ID\nOne job (GET /v1/jobs/{id}): state, progress, ETA, throughput, losses and accuracies,\n"
     "nodes, times, recoveries, and its model once SUCCEEDED.\n"},
    {"follow",
     "Usage: pstrain follow ID\n"
     "Watches the job until it ends, from its event stream (GET /v1/jobs/{id}/events) or, on a\n"
     "coordinator without one, by polling GET /v1/jobs/{id} (PSTRAIN_FOLLOW=poll forces polling).\n"
     "Prints a Keras-style line per epoch:\n"
     "  Epoch 2/5 - 12.3s - loss: 0.2913 - accuracy: 0.9141 - test_loss: 0.2001 - test_accuracy: 0.9402 - 23,410 samples/s\n"
     "and, when standard output is a terminal, a progress bar of the epoch redrawn in place:\n"
     "  1250/2345 [=============>................] - ETA: 7s - loss: 0.3121\n"
     "--json: one JSON object per event line, {\"id\": N, \"event\": TYPE, \"data\": {...}}.\n"
     "Exits 0 if the job SUCCEEDED, 1 if it FAILED, 3 if it was CANCELLED, 4 if the coordinator stays\n"
     "unreachable for 30 s.\n"},
    {"cancel", "Usage: pstrain cancel ID\nCancels the job (POST /v1/jobs/{id}/cancel). A job already finished exits 1.\n"},
    {"download",
     "Usage: pstrain download ID [-o FILE]\nWrites the job's trained model (GET /v1/jobs/{id}/model, safetensors) to FILE\n"
     "(default ID.safetensors), streamed as it arrives. Exits 1 if the job has no model yet.\n"},
    {"export",
     "Usage: pstrain export ID [--step STEP] [-o FILE]\nWrites the model ID (a job that SUCCEEDED, or an uploaded model with an architecture) as ONNX\n"
     "(GET /v1/models/{id}/file?format=onnx) to FILE (default ID.onnx, or ID-step-STEP.onnx); --step: the\n"
     "job's checkpoint at STEP (a number or 'latest': GET /v1/jobs/{id}/checkpoints/{step}?format=onnx).\n"
     "A model that cannot be exported exits 1 with the API's reason, naming the layer or field.\n"},
    {"predict",
     "Usage: pstrain predict ID FILE [--scaled]\n"
     "The model ID's predictions (POST /v1/models/{id}:predict, 1,024 instances per request) for the\n"
     "examples in FILE, as their dataset stores them (docs/REST.md, one input convention): an .npy of\n"
     "shape (n, ...), uint8 sent as raw bytes and float32/float64/int32/int64 as numbers (an image\n"
     "model's raw pixel values 0-255); or a .json array of instances (or {\"instances\": [...]}: table\n"
     "records by field name, nested arrays) sent as they are; '-' reads that JSON from standard input.\n"
     "--scaled: the values are already scaled as the model sees them (pixel / 255).\n"
     "Prints INSTANCE, CLASS and PROBABILITY (a regression model: VALUE) per example; --json: the\n"
     "API's {\"predictions\": [...]}. A refused instance exits 1 with the API's detail, naming its index.\n"},
    {"study", kStudyHelp},
    {"cluster", "Usage: pstrain cluster\nThe registered nodes (GET /v1/cluster): id, role, name, address, alive, job, last heartbeat.\n"},
};


// The parsed command line.
struct Invocation {
  std::string url, token, cacert, command;
  bool insecure = false, tls_option = false;  // tls_option: --cacert or --insecure on the command line
  std::vector<std::string> positional;
  bool json = false, help = false, follow = false, scaled = false;
  std::optional<std::string> output, step;
  double timeout_s = 30;
};

Invocation parse(const std::vector<std::string>& args, const Environment& env) {
  Invocation inv;
  inv.url = env.url.value_or(kDefaultUrl);
  inv.token = env.token.value_or("");
  inv.cacert = env.cacert.value_or("");
  auto value = [&](size_t& i, const std::string& name) -> std::string {
    const std::string& arg = args[i];
    if (const size_t eq = arg.find('='); eq != std::string::npos && arg.starts_with("--")) return arg.substr(eq + 1);
    if (i + 1 >= args.size()) throw UsageError(name + " needs a value");
    return args[++i];
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    const std::string name = arg.starts_with("--") ? arg.substr(0, arg.find('=')) : arg;
    if (name == "--url") {
      inv.url = value(i, "--url");
    } else if (name == "--token") {
      inv.token = value(i, "--token");
    } else if (name == "--cacert") {
      inv.cacert = value(i, "--cacert");
      inv.tls_option = true;
    } else if (name == "--insecure" || name == "-k") {
      inv.insecure = true;
      inv.tls_option = true;
    } else if (name == "--json") {
      inv.json = true;
    } else if (name == "-h" || name == "--help") {
      inv.help = true;
    } else if (name == "--follow" || name == "-f") {
      inv.follow = true;
    } else if (name == "-o" || name == "--output") {
      inv.output = value(i, "-o");
    } else if (name == "--scaled") {
      inv.scaled = true;
    } else if (name == "--step") {
      inv.step = value(i, "--step");
    } else if (name == "--timeout") {
      const std::string v = value(i, "--timeout");
      try {
        size_t used = 0;
        inv.timeout_s = std::stod(v, &used);
        if (used != v.size() || !(inv.timeout_s > 0)) throw std::invalid_argument(v);
      } catch (const std::exception&) {
        throw UsageError("--timeout must be a positive number of seconds, not '" + v + "'");
      }
    } else if (arg.size() > 1 && arg[0] == '-' && arg != "-") {
      throw UsageError("unknown option " + arg);
    } else if (inv.command.empty()) {
      inv.command = arg;
    } else {
      inv.positional.push_back(arg);
    }
  }
  return inv;
}

void expect_arguments(const Invocation& inv, size_t n, const char* what) {
  if (inv.positional.size() != n) {
    throw UsageError("'" + inv.command + "' takes " + what + " (got " + std::to_string(inv.positional.size()) +
                     " arguments)");
  }
}

class Commands {
 public:
  Commands(const Invocation& inv, const Environment& env, HttpClient& client, std::ostream& out, std::ostream& err)
      : inv_(inv), env_(env), client_(client), out_(out), err_(err) {}

  int run() {
    const std::string& c = inv_.command;
    if (c == "submit") return submit();
    if (c == "list") return list();
    if (c == "status") return status();
    if (c == "follow") return follow(one_id());
    if (c == "cancel") return cancel();
    if (c == "download") return download();
    if (c == "export") return export_onnx();
    if (c == "predict") {
      expect_arguments(inv_, 2, "a model id and a file of examples");
      return run_predict({inv_.positional[0], inv_.positional[1], inv_.json, inv_.scaled}, client_, out_, err_);
    }
    if (c == "cluster") return cluster();
    if (c == "study") return run_study({inv_.positional, inv_.json, inv_.follow}, client_, out_, err_);
    throw UsageError("unknown command '" + c + "'");
  }

 private:
  const std::string& one_id() {
    expect_arguments(inv_, 1, "one job id");
    return inv_.positional[0];
  }

  // The API's error: its message on stderr (or the problem itself with --json), exit 1.
  int api_error(const Response& r) {
    if (inv_.json && !r.body.empty()) out_ << r.body << (r.body.back() == '\n' ? "" : "\n");
    err_ << "pstrain: " << problem_message(r) << "\n";
    return kExitFailed;
  }

  // GET `target`; on 200 the parsed body (printed as is with --json), else nullopt and *code.
  std::optional<json::value> get(const std::string& target, int* code) {
    const Response r = client_.request("GET", target);
    if (r.status != 200) {
      *code = api_error(r);
      return std::nullopt;
    }
    if (inv_.json) out_ << r.body << (!r.body.empty() && r.body.back() == '\n' ? "" : "\n");
    auto v = parse_json(r.body);
    if (!v) {
      err_ << "pstrain: GET " << target << " answered something that is not JSON\n";
      *code = kExitFailed;
    }
    return v;
  }

  int submit() {
    if (inv_.positional.size() != 1) throw UsageError("'submit' takes one spec file (got " + std::to_string(inv_.positional.size()) + ")");
    const std::string& path = inv_.positional[0];
    std::string spec;
    if (path == "-") {
      std::ostringstream s;
      s << std::cin.rdbuf();
      spec = s.str();
    } else {
      std::ifstream in(path, std::ios::binary);
      if (!in) throw UsageError("cannot read the spec file '" + path + "'");
      std::ostringstream s;
      s << in.rdbuf();
      spec = s.str();
    }
    const Response r = client_.request("POST", "/v1/jobs", spec, "application/json");
    if (r.status != 201 && r.status != 200) {
      if (inv_.json) return api_error(r);
      err_ << "pstrain: the job was refused: " << problem_message(r) << "\n";
      return kExitFailed;
    }
    const auto v = parse_json(r.body);
    const std::string id = v ? text(as_object(*v), "id", "") : std::string();
    if (inv_.json) {
      out_ << r.body << (!r.body.empty() && r.body.back() == '\n' ? "" : "\n") << std::flush;
    } else {
      out_ << id << "\n" << std::flush;
    }
    if (id.empty()) {
      err_ << "pstrain: the API accepted the job but did not say its id\n";
      return kExitFailed;
    }
    return inv_.follow ? follow(id) : kExitOk;
  }

  int follow(const std::string& id) {
    FollowOptions options;
    options.json = inv_.json;
    options.tty = env_.stdout_is_tty;
    options.polling_only = env_.follow == std::optional<std::string>("poll");
    return follow_job(client_, id, options, out_, err_);
  }

  int list() {
    expect_arguments(inv_, 0, "no arguments");
    int code = kExitOk;
    const auto v = get("/v1/jobs", &code);
    if (!v || inv_.json) return code;
    std::vector<std::vector<std::string>> rows = {{"ID", "NAME", "STATE", "PROGRESS", "ACCURACY", "MODE", "CREATED"}};
    const json::value* jobs = as_object(*v).if_contains("jobs");
    if (jobs != nullptr && jobs->is_array()) {
      for (const auto& j : jobs->as_array()) {
        const json::object& o = as_object(j);
        rows.push_back({text(o, "id"), text(o, "name"), text(o, "state"), fixed(number(o, "percent"), 1) + "%",
                        fixed(number(o, "test_accuracy"), 4), text(o, "mode"), when(number(o, "submitted_at_ms"))});
      }
    }
    out_ << table(rows);
    if (rows.size() == 1) out_ << "(no jobs)\n";
    return kExitOk;
  }

  int status() {
    const std::string& id = one_id();
    int code = kExitOk;
    const auto v = get("/v1/jobs/" + id, &code);
    if (!v || inv_.json) return code;
    const json::object& o = as_object(*v);
    auto nodes = [&](const char* key) {
      const json::value* list = o.if_contains(key);
      std::string names;
      if (list == nullptr || !list->is_array()) return names;
      for (const auto& n : list->as_array()) {
        const json::object& node = as_object(n);
        const json::value* alive = node.if_contains("alive");
        const bool lost = alive != nullptr && *alive == json::value(false);
        names.append(names.empty() ? "" : ", ").append(text(node, "name", std::string("#").append(text(node, "id"))));
        names.append(lost ? " (lost)" : "");
      }
      return names;
    };
    std::vector<std::vector<std::string>> rows;
    rows.push_back({"job:", text(o, "id") + "  " + text(o, "name")});
    rows.push_back({"state:", text(o, "state") + (text(o, "reason", "").empty() ? "" : " (" + text(o, "reason") + ")")});
    rows.push_back({"mode:", text(o, "mode")});
    std::string progress = "epoch " + text(o, "epoch") + "/" + text(o, "epochs") + ", step " + text(o, "step") + "/" +
                           text(o, "total_steps") + " (" + fixed(number(o, "percent"), 1) + "%)";
    if (const auto eta = number(o, "eta_seconds")) progress += ", ETA " + fixed(eta, 0) + " s";
    rows.push_back({"progress:", progress});
    rows.push_back({"samples/s:", number(o, "samples_per_second") ? with_thousands(*number(o, "samples_per_second")) : "-"});
    rows.push_back({"train:", "loss " + fixed(number(o, "train_loss"), 4) + ", accuracy " + fixed(number(o, "train_accuracy"), 4)});
    rows.push_back({"test:", "loss " + fixed(number(o, "test_loss"), 4) + ", accuracy " + fixed(number(o, "test_accuracy"), 4)});
    rows.push_back({"workers:", nodes("workers").empty() ? "-" : nodes("workers")});
    rows.push_back({"servers:", nodes("servers").empty() ? "-" : nodes("servers")});
    rows.push_back({"created:", when(number(o, "submitted_at_ms"))});
    rows.push_back({"started:", when(number(o, "started_at_ms"))});
    rows.push_back({"finished:", when(number(o, "finished_at_ms"))});
    if (const json::value* r = o.if_contains("recoveries"); r != nullptr && r->is_object()) {
      const auto count = number(r->as_object(), "count");
      if (count && *count > 0) rows.push_back({"recoveries:", fixed(count, 0)});
    }
    if (const json::value* m = o.if_contains("model"); m != nullptr && m->is_object()) {
      rows.push_back({"model:", text(m->as_object(), "href") + " (" + with_thousands(number(m->as_object(), "bytes").value_or(0)) +
                                    " bytes, safetensors; pstrain download " + id + ")"});
    }
    out_ << table(rows);
    if (const json::value* notes = o.if_contains("notes"); notes != nullptr && notes->is_array()) {
      for (const auto& n : notes->as_array()) {
        if (n.is_string()) out_ << "note: " << n.as_string() << "\n";
      }
    }
    return kExitOk;
  }

  int cancel() {
    const std::string& id = one_id();
    const Response r = client_.request("POST", "/v1/jobs/" + id + "/cancel");
    if (r.status != 200) return api_error(r);
    if (inv_.json) {
      out_ << r.body << (!r.body.empty() && r.body.back() == '\n' ? "" : "\n");
    } else {
      const auto v = parse_json(r.body);
      out_ << "job " << id << " " << (v ? text(as_object(*v), "state", "CANCELLED") : "CANCELLED") << "\n";
    }
    return kExitOk;
  }

  int download() {
    const std::string& id = one_id();
    return fetch_file(id, "/v1/jobs/" + id + "/model", inv_.output.value_or(id + ".safetensors"), "safetensors");
  }

  int export_onnx() {
    const std::string& id = one_id();
    if (inv_.step) {
      return fetch_file(id, "/v1/jobs/" + id + "/checkpoints/" + *inv_.step + "?format=onnx",
                        inv_.output.value_or(id + "-step-" + *inv_.step + ".onnx"), "ONNX");
    }
    return fetch_file(id, "/v1/models/" + id + "/file?format=onnx", inv_.output.value_or(id + ".onnx"), "ONNX");
  }

  // Streams a download to `path`; says what was written.
  int fetch_file(const std::string& id, const std::string& target, const std::string& path, const char* format) {
    uint64_t bytes = 0;
    Response r;
    try {
      r = client_.download(target, path, &bytes);
    } catch (const Unreachable&) {
      throw;
    } catch (const std::runtime_error& e) {
      err_ << "pstrain: " << e.what() << "\n";
      return kExitFailed;
    }
    if (r.status != 200) return api_error(r);
    if (inv_.json) {
      out_ << json::serialize(json::object{{"job", id}, {"file", path}, {"bytes", bytes}}) << "\n";
    } else {
      out_ << "model of " << id << " written to " << path << " (" << with_thousands(static_cast<double>(bytes))
           << " bytes, " << format << ")\n";
    }
    return kExitOk;
  }

  int cluster() {
    expect_arguments(inv_, 0, "no arguments");
    int code = kExitOk;
    const auto v = get("/v1/cluster", &code);
    if (!v || inv_.json) return code;
    std::vector<std::vector<std::string>> rows = {{"ID", "ROLE", "NAME", "ADDRESS", "ALIVE", "JOB", "HEARTBEAT"}};
    const json::value* nodes = as_object(*v).if_contains("nodes");
    if (nodes != nullptr && nodes->is_array()) {
      for (const auto& n : nodes->as_array()) {
        const json::object& o = as_object(n);
        const auto ago = number(o, "last_heartbeat_ms_ago");
        rows.push_back({text(o, "id"), text(o, "role"), text(o, "name"), text(o, "address"),
                        text(o, "alive") == "true" ? "yes" : "no", text(o, "job"),
                        ago ? fixed(*ago / 1000.0, 1) + " s ago" : "-"});
      }
    }
    out_ << table(rows);
    if (rows.size() == 1) out_ << "(no nodes)\n";
    return kExitOk;
  }

  const Invocation& inv_;
  const Environment& env_;
  HttpClient& client_;
  std::ostream& out_;
  std::ostream& err_;
};

}  // namespace

int run_cli(const std::vector<std::string>& args, const Environment& env, std::ostream& out, std::ostream& err) {
  Invocation inv;
  try {
    inv = parse(args, env);
    if (inv.help) {
      const auto it = kCommandHelp.find(inv.command);
      out << (it != kCommandHelp.end() ? it->second : kUsage);
      return kExitOk;
    }
    if (inv.command.empty()) throw UsageError("no command given");
    if (!kCommandHelp.contains(inv.command)) throw UsageError("unknown command '" + inv.command + "'");
    if (inv.follow && inv.command != "submit" && inv.command != "study") throw UsageError("--follow goes with 'submit'");
    if (inv.output && inv.command != "download" && inv.command != "export") {
      throw UsageError("-o goes with 'download' and 'export'");
    }
    if (inv.step && inv.command != "export") throw UsageError("--step goes with 'export'");
    if (inv.scaled && inv.command != "predict") throw UsageError("--scaled goes with 'predict'");
    std::string why;
    auto url = parse_base_url(inv.url, &why);
    if (!url) throw UsageError(why);
    ClientOptions options;
    options.token = inv.token;
    options.cacert = inv.cacert;
    options.insecure = inv.insecure;
    if (!url->tls && inv.tls_option) {
      throw UsageError("--cacert and --insecure go with an https:// URL");
    }
    options.read_timeout = std::chrono::milliseconds(static_cast<int64_t>(inv.timeout_s * 1000));
    options.connect_timeout = std::min(options.connect_timeout, options.read_timeout);
    std::optional<HttpClient> made;
    try {
      made.emplace(*url, options);
    } catch (const TlsSetupError& e) {
      throw UsageError(e.what());
    }
    HttpClient& client = *made;
    try {
      return Commands(inv, env, client, out, err).run();
    } catch (const Unreachable& e) {
      out.flush();
      err << "pstrain: " << e.what() << "\n";
      return kExitUnreachable;
    }
  } catch (const UsageError& e) {
    err << "pstrain: " << e.what() << "\n";
    const auto it = kCommandHelp.find(inv.command);
    err << (it != kCommandHelp.end() ? it->second : "Run 'pstrain --help' for the commands and options.\n");
    return kExitUsage;
  }
}

}  // namespace pstrain::cli
