// Tables as users have them, end to end over HTTP against a real coordinator: a CSV with quoted
// text, a ';' separator, categorical, boolean and numeric columns, missing cells and string
// labels is stored with its column types, class names and per-split profile; the test split takes
// the train split's columns and classes (defects named by line and column, nothing stored); a
// seeded split keeps the schema and profiles each side; everything survives a restart.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "common/data/job_spec.h"
#include "common/engine/safetensors.h"
#include "worker/local_trainer.h"

#include "common/base/json_parse.h"
#include "common/base/json_text.h"
#include "tests/integration/cluster.h"
#include "tests/integration/http_test_client.h"
#include "tests/test_support.h"

using namespace pstrain;
using namespace pstrain::testing::http_test;
using namespace std::chrono_literals;

namespace {

Reply put_csv(int port, const std::string& target, const std::string& body) {
  return call(port, http::verb::put, target, body, "text/csv");
}

json::object column(const json::object& split, const std::string& name) {
  for (const json::value& c : arr(obj(split.at("table")), "columns")) {
    if (str(obj(c), "name") == name) return obj(c);
  }
  FAIL("no column " << name);
  return {};
}

// Customers: plan (text), age (numbers with NA), member (yes/no, one empty), notes (quoted text
// with the separator inside), churn (named classes). ';'-separated, CRLF line ends, a BOM.
std::string customers(int rows, int offset) {
  std::string out = "\xEF\xBB\xBFplan;age;member;notes;churn\r\n";
  const char* plans[] = {"basic", "pro", "family"};
  for (int i = offset; i < offset + rows; ++i) {
    out += std::string(plans[i % 3]) + ";";
    out += (i % 7 == 0 ? std::string("NA") : std::to_string(20 + i % 50)) + ";";
    out += (i % 11 == 0 ? std::string("") : (i % 2 ? "yes" : "no")) + std::string(";");
    out += "\"called; said \"\"later\"\"\";";
    out += (i % 3 == 1 ? "stayed" : (i % 4 == 0 ? "left" : "stayed")) + std::string("\r\n");
  }
  return out;
}

}  // namespace

TEST_CASE("tables: a CSV as users have it is stored typed and profiled, and the test split keeps its columns and classes") {
  testing::TempDir data;
  testing::ClusterOptions options;
  options.servers = 1;
  options.workers = 1;
  options.coordinator_flags = {"--data-dir", data.path()};
  testing::Cluster cluster(options);
  const int port = cluster.http_port();

  const Reply up = put_csv(port, "/v1/datasets/churn/train?label=churn", customers(300, 0));
  INFO(up.describe());
  REQUIRE(up.status == 201);
  auto check_train = [&](const json::object& d) {
    CHECK(str(d, "label") == "churn");
    const json::array names = arr(d, "class_names");
    REQUIRE(names.size() == 2);
    CHECK(names[0].as_string() == "left");
    CHECK(names[1].as_string() == "stayed");
    const json::array columns = arr(d, "columns");
    REQUIRE(columns.size() == 4);
    CHECK(str(obj(columns[0]), "type") == "categorical");
    CHECK(str(obj(columns[1]), "type") == "numeric");
    CHECK(str(obj(columns[2]), "type") == "boolean");
    CHECK(str(obj(columns[3]), "type") == "categorical");
    const json::object train = obj(obj(d.at("splits")).at("train"));
    const json::object age = column(train, "age");
    CHECK(num(age, "missing") == 43);  // i % 7 == 0 for i in [0, 300)
    CHECK(num(age, "min") == 20);
    CHECK(num(age, "max") == 69);
    const json::object plan = column(train, "plan");
    CHECK(arr(plan, "categories").size() == 3);
    CHECK(num(obj(arr(plan, "top")[0]), "count") == 100);
    CHECK(num(column(train, "member"), "missing") == 28);
    CHECK(arr(column(train, "notes"), "categories")[0].as_string() == "called; said \"later\"");
    CHECK(str(obj(train.at("table")), "separator") == ";");
    CHECK(num(train, "imbalance_ratio") == 5);  // 250 stayed / 50 left
  };
  check_train(object_of(get(port, "/v1/datasets/churn")));
  // The list carries the profile without each column's full category list.
  for (const json::value& d : arr(object_of(get(port, "/v1/datasets")), "datasets")) {
    if (str(obj(d), "name") != "churn") continue;
    const json::object plan = column(obj(obj(obj(d).at("splits")).at("train")), "plan");
    CHECK(!plan.contains("categories"));
    CHECK(num(plan, "distinct") == 3);
    CHECK(arr(plan, "top").size() == 3);
  }

  // The test split: its columns and classes are the train split's.
  auto expect = [&](const Reply& reply, unsigned status, const std::string& type, const std::string& needle) {
    INFO(reply.describe());
    check_problem(reply, status, type);
    CHECK(str(object_of(reply), "detail").find(needle) != std::string::npos);
    return object_of(reply);
  };
  json::object o = expect(put_csv(port, "/v1/datasets/churn/test?label=churn", "plan;age;member;notes;churn\nbasic;3;yes;x;stayed\npro;4;no;y;maybe\n"),
                          422, "dataset-bad-label", "'maybe' is not one of the dataset's classes (left, stayed)");
  CHECK(num(o, "line") == 3);
  CHECK(str(o, "column") == "churn");
  o = expect(put_csv(port, "/v1/datasets/churn/test?label=churn", "plan;years;member;notes;churn\nbasic;3;yes;x;stayed\n"), 422,
             "dataset-bad-header", "feature column 2 is 'years' but the dataset's other split has 'age' there");
  CHECK(str(o, "column") == "years");
  expect(put_csv(port, "/v1/datasets/churn/test?label=churn&types=age:categorical", "plan;age;member;notes;churn\nbasic;3;yes;x;stayed\n"),
         422, "dataset-bad-header", "numeric in the dataset's other split");
  // Types follow the train split even where this file alone would say otherwise (age has text
  // here: an error naming it, not a categorical column); one class is enough in a test split.
  o = expect(put_csv(port, "/v1/datasets/churn/test?label=churn", "plan;age;member;notes;churn\nbasic;young;yes;x;stayed\n"), 422,
             "dataset-not-numeric", "'young' is not a number");
  CHECK(str(o, "column") == "age");
  CHECK(obj(object_of(get(port, "/v1/datasets/churn")).at("splits")).count("test") == 0);
  const Reply test = put_csv(port, "/v1/datasets/churn/test?label=churn&sep=%3B", "plan;age;member;notes;churn\nbasic;3;;x;stayed\ngold;NA;no;y;stayed\n");
  INFO(test.describe());
  REQUIRE(test.status == 201);
  const json::object test_split = obj(obj(object_of(test).at("splits")).at("test"));
  CHECK(num(test_split, "examples") == 2);
  CHECK(arr(test_split, "class_counts")[1].to_number<double>() == 2);
  CHECK(arr(column(test_split, "plan"), "categories").size() == 2);  // this split's own: basic, gold
  CHECK(num(column(test_split, "age"), "missing") == 1);

  // A job's input is the preprocessed width: plan 3 + other, age + indicator, member + indicator,
  // notes 1 + other.
  const std::string spec = R"({"name": "churn", "dataset": {"name": "churn"},
    "model": {"input_shape": [4], "seed": 1, "layers": [{"type": "dense", "units": 2}]},
    "optimizer": {"type": "sgd", "learning_rate": 0.1},
    "training": {"global_batch_size": 32, "epochs": 1, "workers": 1, "servers": 1}})";
  o = expect(post_json(port, "/v1/jobs", spec), 422, "invalid-spec", "churn's [10] features after preprocessing");
  CHECK(str(o, "field") == "/model/input_shape");

  // A seeded split keeps the schema; each side has its own profile.
  REQUIRE(call(port, http::verb::delete_, "/v1/datasets/churn").status == 204);
  REQUIRE(put_csv(port, "/v1/datasets/churn/train?label=churn", customers(300, 0)).status == 201);
  const Reply split = call(port, http::verb::post, "/v1/datasets/churn/split", R"({"test_fraction": 0.2, "seed": 4})", "application/json");
  INFO(split.describe());
  REQUIRE(split.status == 200);
  const json::object splits = obj(object_of(split).at("splits"));
  const json::object a = column(obj(splits.at("train")), "age"), b = column(obj(splits.at("test")), "age");
  CHECK(num(a, "missing") + num(b, "missing") == 43);
  CHECK(num(obj(obj(splits.at("train")).at("table")), "rows") + num(obj(obj(splits.at("test")).at("table")), "rows") == 300);
  CHECK(arr(column(obj(splits.at("test")), "plan"), "categories").size() == 3);

  // A hard restart: the stored records (and the files they describe) come back as they were.
  cluster.restart_coordinator(true);
  json::object after;
  for (int i = 0; i < 200; ++i) {
    after = object_of(get(port, "/v1/datasets/churn"));
    if (str(after, "state") == "ready") break;
    std::this_thread::sleep_for(50ms);
  }
  REQUIRE(str(after, "state") == "ready");
  CHECK(arr(after, "class_names").size() == 2);
  const json::object train_after = obj(obj(after.at("splits")).at("train"));
  CHECK(num(column(train_after, "age"), "missing") == num(a, "missing"));

  // JSON Lines: the same table rules; a bad line is named.
  const Reply jl = call(port, http::verb::put, "/v1/datasets/events/train?label=kind",
                        "{\"x\": 1, \"tag\": \"a\", \"kind\": \"up\"}\n{\"x\": null, \"tag\": \"b\", \"kind\": \"down\"}\n",
                        "application/x-ndjson");
  INFO(jl.describe());
  REQUIRE(jl.status == 201);
  const json::object events = object_of(jl);
  CHECK(arr(events, "class_names").size() == 2);
  CHECK(num(column(obj(obj(events.at("splits")).at("train")), "x"), "missing") == 1);
  o = expect(call(port, http::verb::put, "/v1/datasets/events2/train?label=kind", "{\"x\": 1, \"kind\": \"up\"}\n[1]\n",
                  "application/x-ndjson"),
             422, "dataset-bad-record", "line 2: not a JSON object");
  CHECK(num(o, "line") == 2);
}

namespace {

// Loans: income (thousands, 15 to 6,000 with NA), age (18 to 80), region (text, one region
// deciding much), owner (yes/no, some empty) and the named class approved/declined, decided by
// income, region and owner with noise. Seeded: the same text every run.
std::string loans(int rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  const char* regions[] = {"north", "south", "east", "west", "islands"};
  std::string out = "income,age,region,owner,decision\n";
  for (int i = 0; i < rows; ++i) {
    const double income = 15 + 5985 * u(rng) * u(rng);
    const int age = 18 + static_cast<int>(62 * u(rng));
    const int region = static_cast<int>(rng() % 5);
    const bool owner = u(rng) < 0.5;
    const double score = income / 1500.0 + (region == 1 ? 1.5 : 0) + (owner ? 1.0 : 0) - 2.0 + 0.5 * (u(rng) - 0.5);
    char line[160];
    std::snprintf(line, sizeof line, "%s,%d,\"%s\",%s,%s\n", u(rng) < 0.08 ? "NA" : std::to_string(income).c_str(), age,
                  regions[region], u(rng) < 0.05 ? "" : (owner ? "yes" : "no"), score > 0 ? "approved" : "declined");
    out += line;
  }
  return out;
}

// Tagged rows: up to 3 tags of 12 ("t0|t5", some rows none), a number, a user and an item (id
// columns when uploaded with types=user:id,item:id; some missing); the label yes when the tags
// divisible by 3 outweigh the others, a user divisible by 4 adding one, with the number as noise.
std::string tagged(int rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::string out = "tags,x,user,item,label\n";
  for (int i = 0; i < rows; ++i) {
    std::string tags;
    int score = 0;
    for (int k = static_cast<int>(rng() % 4); k > 0; --k) {
      const int t = static_cast<int>(rng() % 12);
      tags += (tags.empty() ? "t" : "|t") + std::to_string(t);
      score += t % 3 == 0 ? 2 : -1;
    }
    const double x = u(rng) - 0.5;
    const int user = static_cast<int>(rng() % 100);
    if (user % 4 == 0) score += 1;
    const int item = static_cast<int>(rng() % 30);
    out += tags + "," + std::to_string(x) + "," + (i % 10 == 0 ? std::string() : "u" + std::to_string(user)) + "," +
           (i % 7 == 0 ? std::string() : "i" + std::to_string(item)) + "," + (score + x > 0 ? "yes" : "no") + "\n";
  }
  return out;
}

std::vector<float> params_of(const std::string& spec_json, const std::string& file) {
  return decode_model_state(make_param_layout(parse_job_spec(spec_json).model), file).params;
}

std::string loan_spec(int workers) {
  return R"({"name": "loans", "dataset": {"name": "loans", "shuffle_seed": 5},
    "model": {"input_shape": [11], "seed": 2, "layers": [{"type": "dense", "units": 16, "activation": "relu"},
      {"type": "dense", "units": 2}]},
    "optimizer": {"type": "adam", "learning_rate": 0.01},
    "training": {"mode": "sync", "global_batch_size": 60, "epochs": 60, "workers": )" +
         std::to_string(workers) + R"(, "servers": 2, "validation_fraction": 0.1, "class_weight": "balanced"},
    "backup": {"save_freq": "epoch"}})";
}

}  // namespace

TEST_CASE("tables: a job trains on a table with default preprocessing and balanced class weights, exactly as the standalone trainer, through a worker loss and a server loss, and predicts by field name") {
  testing::TempDir data;
  testing::ClusterOptions options;
  options.workers = 4;  // the job takes 3; the fourth keeps 3 alive after a worker loss
  options.servers = 3;  // the job takes 2; the third replaces a lost one
  options.coordinator_flags = {"--data-dir", data.path(), "--dead-after-ms", "1500", "--move-server-after-ms", "1000"};
  testing::Cluster cluster(options);
  const int port = cluster.http_port();
  REQUIRE(put_csv(port, "/v1/datasets/loans/train?label=decision", loans(600, 1)).status == 201);
  REQUIRE(put_csv(port, "/v1/datasets/loans/test?label=decision", loans(200, 2)).status == 201);

  // The input width is the preprocessed one: income and owner have missing cells (value +
  // indicator: 4), age (1), region (5 + other: 6).
  Reply wrong = post_json(port, "/v1/jobs", loan_spec(1).replace(loan_spec(1).find("[11]"), 4, "[4]"));
  check_problem(wrong, 422, "invalid-spec", "/model/input_shape");
  CHECK(str(object_of(wrong), "detail").find("loans's [11] features after preprocessing") != std::string::npos);
  Reply not_a_column = post_json(port, "/v1/jobs", loan_spec(1).substr(0, loan_spec(1).size() - 1) +
                                                        R"(, "preprocessing": {"columns": {"salary": "drop"}}})");
  check_problem(not_a_column, 422, "invalid-spec", "/preprocessing/columns/salary");

  // Without model.input_shape: the width after the job's preprocessing, shown in its record.
  const std::string bare = post_json(port, "/v1/jobs", loan_spec(1).replace(loan_spec(1).find(R"("input_shape": [11], )"), 21, "")).body;
  INFO("POST without input_shape: " << bare);
  const json::object inferred = obj(parse_json(bare));
  CHECK(to_json_text(obj(obj(inferred.at("spec")).at("model")).at("input_shape")) == "[11]");
  CHECK(call(port, http::verb::post, "/v1/jobs/" + str(inferred, "id") + "/cancel").status == 200);

  // 3 workers, calm, with a worker killed after the first epoch's backup, and with one of the
  // job's servers killed for good after the second: the same model as the standalone trainer
  // cutting each step into the same 3 slices (the cluster's exactness, DESIGN-NOTES "N workers
  // against one"), which reads the stored dataset directory and weighs the classes itself.
  const std::string spec = loan_spec(3);
  LocalTrainerOptions local;
  local.data_dir = data.path();
  local.replicas = 3;
  local.servers = 2;
  const TrainingResult standalone = train_locally(parse_job_spec(spec), local);
  std::string model_id;
  double accuracy = 0;
  for (int run = 0; run < 3; ++run) {
    const std::string id = submit(cluster, spec);
    // Kills the job's node `role`s[1] ("worker-<i>", "server-<i>") after the backup of `step`.
    const auto kill_after = [&](int step, const char* role, std::vector<testing::Process*>& nodes) {
      cluster.coordinator().wait_for_line(std::regex("job " + id + ": backup at step " + std::to_string(step) + " complete"), 60s);
      const json::array mine = arr(object_of(get(port, "/v1/jobs/" + id)), role);
      REQUIRE(mine.size() >= 2);
      const std::string name = str(obj(mine[1]), "name");
      nodes[std::stoul(name.substr(name.find('-') + 1))]->kill_hard();
    };
    if (run == 1) kill_after(9, "workers", cluster.workers());
    if (run == 2) kill_after(18, "servers", cluster.servers());
    const json::object done = wait_for_state(cluster, id, "SUCCEEDED", 240s);
    const Reply model = get(port, "/v1/jobs/" + id + "/model");
    REQUIRE(model.status == 200);
    const std::vector<float> params = params_of(spec, model.body);
    CHECK_MESSAGE(params == std::vector<float>(standalone.params.begin(), standalone.params.end()), "run ", run);
    // The model file carries the fitted preprocessing.
    uint64_t n = 0;
    std::memcpy(&n, model.body.data(), 8);
    const json::object meta = obj(json::parse(model.body.substr(8, n)).as_object().at("__metadata__"));
    const json::object pre = json::parse(str(meta, "preprocessing")).as_object();
    CHECK(arr(pre, "class_names").size() == 2);
    CHECK(arr(pre, "columns").size() == 4);
    // ... and the spec its processes trained with: "balanced" resolved to one weight per class,
    // while the job keeps the spec as submitted.
    const json::object trained = obj(json::parse(str(meta, "spec")).as_object().at("training"));
    CHECK(arr(trained, "class_weight").size() == 2);
    CHECK(str(obj(obj(object_of(get(port, "/v1/jobs/" + id)).at("spec")).at("training")), "class_weight") == "balanced");
    if (run == 1) {
      // The loss was noticed and the survivors took over its slices.
      CHECK(cluster.coordinator().log_text().find("with 2 worker(s)") != std::string::npos);
    }
    if (run == 2) CHECK(cluster.coordinator().log_text().find("did not come back; moving its shard") != std::string::npos);
    if (run == 0) accuracy = num(done, "test_accuracy");
    CHECK_MESSAGE(num(done, "test_accuracy") == accuracy, "run ", run);
    model_id = id;
  }
  CHECK(accuracy > 0.85);

  // Predictions by field name: class names, probabilities by name; evaluate applies the same steps.
  const Reply p = post_json(port, "/v1/models/" + model_id + ":predict",
                            R"({"instances": [{"income": 5000, "age": 40, "region": "south", "owner": "yes"},
                                              {"income": 20, "age": 30, "region": "north", "owner": false},
                                              {"income": null, "age": 50, "region": "atlantis", "owner": null}]})");
  INFO(p.describe());
  REQUIRE(p.status == 200);
  const json::array predictions = arr(object_of(p), "predictions");
  REQUIRE(predictions.size() == 3);
  CHECK(str(obj(predictions[0]), "class") == "approved");
  CHECK(str(obj(predictions[1]), "class") == "declined");
  const json::object probabilities = obj(obj(predictions[0]).at("probabilities"));
  CHECK(probabilities.size() == 2);
  CHECK(num(probabilities, "approved") + num(probabilities, "declined") == doctest::Approx(1.0));
  const Reply missing = post_json(port, "/v1/models/" + model_id + ":predict", R"({"instances": [{"income": 5, "age": 40, "region": "south"}]})");
  check_problem(missing, 422, "invalid-instance", "/instances/0");
  CHECK(str(object_of(missing), "detail").find("field 'owner' is missing") != std::string::npos);
  const Reply extra = post_json(port, "/v1/models/" + model_id + ":predict",
                                R"({"instances": [{"income": 5, "age": 40, "region": "south", "owner": true, "zip": 1}]})");
  check_problem(extra, 422, "invalid-instance", "/instances/0");
  const Reply ev = post_json(port, "/v1/jobs/" + model_id + "/evaluate", "{}");
  INFO(ev.describe());
  REQUIRE(ev.status == 200);
  CHECK(num(object_of(ev), "accuracy") == accuracy);
}

TEST_CASE("tables: a category as ids through a slice into an embedding trains on a cluster exactly as standalone, its workers preprocessing the stored rows they read, and predicts by field name") {
  testing::TempDir data;
  testing::ClusterOptions options;
  options.workers = 2;
  options.coordinator_flags = {"--data-dir", data.path()};
  testing::Cluster cluster(options);
  const int port = cluster.http_port();
  REQUIRE(put_csv(port, "/v1/datasets/loans/train?label=decision", loans(600, 3)).status == 201);
  REQUIRE(put_csv(port, "/v1/datasets/loans/test?label=decision", loans(200, 4)).status == 201);
  // Features: income, income_missing, age, region=(id) (slots 0-4, 5 for other), owner, owner_missing.
  const std::string spec = R"({"name": "loans-ids", "dataset": {"name": "loans", "shuffle_seed": 9},
    "model": {"input_shape": [6], "seed": 4, "layers": [
      {"name": "region", "type": "slice", "inputs": ["input"], "begin": 3, "size": 1},
      {"name": "vectors", "type": "embedding", "inputs": ["region"], "input_dim": 6, "output_dim": 3},
      {"name": "flat", "type": "flatten", "inputs": ["vectors"]},
      {"name": "income_age", "type": "slice", "inputs": ["input"], "begin": 0, "size": 3},
      {"name": "owner", "type": "slice", "inputs": ["input"], "begin": 4, "size": 2},
      {"name": "all", "type": "concatenate", "inputs": ["flat", "income_age", "owner"]},
      {"name": "hidden", "type": "dense", "units": 16, "activation": "relu", "inputs": ["all"]},
      {"type": "dense", "units": 2}]},
    "optimizer": {"type": "adam", "learning_rate": 0.01},
    "training": {"mode": "sync", "global_batch_size": 50, "epochs": 40, "workers": 2},
    "preprocessing": {"columns": {"region": {"encode": "ids"}}}})";
  Reply wide = post_json(port, "/v1/jobs", std::string(spec).replace(spec.find("[6]"), 3, "[11]"));
  check_problem(wide, 422, "invalid-spec", "/model/input_shape");
  LocalTrainerOptions local;
  local.data_dir = data.path();
  local.replicas = 2;
  const TrainingResult standalone = train_locally(parse_job_spec(spec), local);
  const std::string id = submit(cluster, spec);
  const json::object done = wait_for_state(cluster, id, "SUCCEEDED", 240s);
  const Reply model = get(port, "/v1/jobs/" + id + "/model");
  REQUIRE(model.status == 200);
  CHECK(params_of(spec, model.body) == std::vector<float>(standalone.params.begin(), standalone.params.end()));
  CHECK(num(done, "test_accuracy") > 0.85);
  // The workers read the table's rows from the store and preprocessed them themselves.
  const std::string notes = json::serialize(object_of(get(port, "/v1/jobs/" + id)).at("notes"));
  INFO(notes);
  CHECK(notes.find("0 streamed by the coordinator, 24000 read by workers from the dataset store") != std::string::npos);
  const Reply p = post_json(port, "/v1/models/" + id + ":predict",
                            R"({"instances": [{"income": 5000, "age": 40, "region": "south", "owner": "yes"},
                                              {"income": 20, "age": 30, "region": "atlantis", "owner": false}]})");
  INFO(p.describe());
  REQUIRE(p.status == 200);
  const json::array predictions = arr(object_of(p), "predictions");
  REQUIRE(predictions.size() == 2);
  CHECK(str(obj(predictions[0]), "class") == "approved");
  CHECK(str(obj(predictions[1]), "class") == "declined");
  // It exports to ONNX with its preprocessing (tests/onnx runs such an export).
  const Reply onnx = get(port, "/v1/models/" + id + "/file?format=onnx");
  CHECK(onnx.status == 200);
  CHECK(onnx.body.find("LabelEncoder") != std::string::npos);
  // A column whose name the exported graph uses itself is refused by name, not renamed silently.
  REQUIRE(put_csv(port, "/v1/datasets/clash/train?label=y", "logits,x,y\n1,2,a\n2,1,b\n3,3,a\n4,0,b\n").status == 201);
  REQUIRE(put_csv(port, "/v1/datasets/clash/test?label=y", "logits,x,y\n1,2,a\n2,1,b\n").status == 201);
  const std::string clash = submit(cluster, R"({"dataset": {"name": "clash"}, "model": {"input_shape": [2], "layers": [
      {"type": "dense", "units": 2}]}, "optimizer": {"type": "sgd", "learning_rate": 0.1},
      "training": {"global_batch_size": 2, "epochs": 1, "workers": 2}})");
  wait_for_state(cluster, clash, "SUCCEEDED", 60s);
  check_problem(get(port, "/v1/models/" + clash + "/file?format=onnx"), 422, "export-unsupported", "/preprocessing/columns/logits");
}

TEST_CASE("tables: a DLRM-style model (bottom MLP, hashed ids and a cross into sparse embedding tables, pairwise dots, top MLP) and embedding bags of a multi-valued column train on a cluster exactly as standalone, and predict unseen ids by field name") {
  testing::TempDir data;
  testing::ClusterOptions options;
  options.workers = 2;
  options.servers = 2;
  options.coordinator_flags = {"--data-dir", data.path()};
  testing::Cluster cluster(options);
  const int port = cluster.http_port();
  REQUIRE(put_csv(port, "/v1/datasets/loans/train?label=decision", loans(600, 5)).status == 201);
  REQUIRE(put_csv(port, "/v1/datasets/loans/test?label=decision", loans(200, 6)).status == 201);
  // Features: income, income_missing, age=(hash), region=(hash), owner, owner_missing, region_x_owner=(cross).
  const std::string spec = R"({"name": "loans-hashed", "dataset": {"name": "loans", "shuffle_seed": 3},
    "model": {"input_shape": [7], "seed": 8, "layers": [
      {"name": "income", "type": "slice", "inputs": ["input"], "begin": 0, "size": 2},
      {"name": "owner", "type": "slice", "inputs": ["input"], "begin": 4, "size": 2},
      {"name": "numbers", "type": "concatenate", "inputs": ["income", "owner"]},
      {"name": "bottom", "type": "dense", "units": 4, "activation": "relu", "inputs": ["numbers"]},
      {"name": "age", "type": "slice", "inputs": ["input"], "begin": 2, "size": 1},
      {"name": "age_vectors", "type": "embedding", "inputs": ["age"], "input_dim": 1000, "output_dim": 4, "sparse": true},
      {"name": "ids", "type": "slice", "inputs": ["input"], "begin": 3, "size": 1},
      {"name": "region_vectors", "type": "embedding", "inputs": ["ids"], "input_dim": 97, "output_dim": 4, "sparse": true},
      {"name": "cross", "type": "slice", "inputs": ["input"], "begin": 6, "size": 1},
      {"name": "cross_vectors", "type": "embedding", "inputs": ["cross"], "input_dim": 64, "output_dim": 4},
      {"name": "dots", "type": "dot_interaction", "inputs": ["bottom", "age_vectors", "region_vectors", "cross_vectors"]},
      {"name": "all", "type": "concatenate", "inputs": ["bottom", "dots"]},
      {"name": "hidden", "type": "dense", "units": 16, "activation": "relu", "inputs": ["all"]},
      {"type": "dense", "units": 2}]},
    "optimizer": {"type": "adagrad", "learning_rate": 0.05},
    "training": {"mode": "sync", "global_batch_size": 50, "epochs": 8, "workers": 2},
    "preprocessing": {"columns": {"age": {"encode": "hash", "num_bins": 1000}, "region": {"encode": "hash", "num_bins": 97}},
                      "crosses": [{"columns": ["region", "owner"], "num_bins": 64}]}})";
  LocalTrainerOptions local;
  local.data_dir = data.path();
  local.replicas = 2;
  const TrainingResult standalone = train_locally(parse_job_spec(spec), local);
  const std::string id = submit(cluster, spec);
  const json::object done = wait_for_state(cluster, id, "SUCCEEDED", 240s);
  const Reply model = get(port, "/v1/jobs/" + id + "/model");
  REQUIRE(model.status == 200);
  CHECK(params_of(spec, model.body) == std::vector<float>(standalone.params.begin(), standalone.params.end()));
  CHECK(num(done, "test_accuracy") > 0.8);
  const std::string notes = json::serialize(object_of(get(port, "/v1/jobs/" + id)).at("notes"));
  INFO(notes);
  CHECK(notes.find("0 streamed by the coordinator, 4800 read by workers from the dataset store") != std::string::npos);
  // Unseen ids (an age never seen, a region never seen) have bins of their own: answers, not errors.
  const Reply p = post_json(port, "/v1/models/" + id + ":predict",
                            R"({"instances": [{"income": 5000, "age": 40, "region": "south", "owner": "yes"},
                                              {"income": 20, "age": 1234567, "region": "atlantis", "owner": null}]})");
  INFO(p.describe());
  REQUIRE(p.status == 200);
  const json::array predictions = arr(object_of(p), "predictions");
  REQUIRE(predictions.size() == 2);
  CHECK(str(obj(predictions[0]), "class") == "approved");
  const Reply bad = post_json(port, "/v1/jobs", std::string(spec).replace(spec.find("\"num_bins\": 97"), 14, "\"num_bins\": 0"));
  check_problem(bad, 422, "invalid-spec", "/preprocessing/columns/region/num_bins");

  // A multi-valued column and an id column on the same cluster: each row's tags ("t3|t7", some
  // none) hashed into 3 places, a mean bag in a sparse table and a sum bag in a dense one; the user
  // (stored as its fingerprint) hashed into a sparse table; equal to standalone too.
  REQUIRE(put_csv(port, "/v1/datasets/tagged/train?label=label&types=user:id,item:id", tagged(500, 1)).status == 201);
  REQUIRE(put_csv(port, "/v1/datasets/tagged/test?label=label&types=user:id,item:id", tagged(100, 2)).status == 201);
  // Features: the tags' 3 places, tags_missing, x, user=(hash), user_missing, item=(id), item_missing.
  const std::string bags = R"({"name": "tag-bags", "dataset": {"name": "tagged", "shuffle_seed": 2},
    "model": {"input_shape": [9], "seed": 3, "layers": [
      {"name": "tags", "type": "slice", "inputs": ["input"], "begin": 0, "size": 3},
      {"name": "mean_bag", "type": "embedding", "inputs": ["tags"], "input_dim": 50, "output_dim": 4, "sparse": true, "combiner": "mean"},
      {"name": "sum_bag", "type": "embedding", "inputs": ["tags"], "input_dim": 50, "output_dim": 2, "combiner": "sum"},
      {"name": "rest", "type": "slice", "inputs": ["input"], "begin": 3, "size": 2},
      {"name": "user", "type": "slice", "inputs": ["input"], "begin": 5, "size": 1},
      {"name": "user_vector", "type": "embedding", "inputs": ["user"], "input_dim": 97, "output_dim": 2, "sparse": true, "combiner": "sum"},
      {"name": "item", "type": "slice", "inputs": ["input"], "begin": 7, "size": 1},
      {"name": "item_vector", "type": "embedding", "inputs": ["item"], "input_dim": 21, "output_dim": 2, "sparse": true, "combiner": "sum"},
      {"name": "all", "type": "concatenate", "inputs": ["mean_bag", "sum_bag", "rest", "user_vector", "item_vector"]},
      {"type": "dense", "units": 8, "activation": "relu"}, {"type": "dense", "units": 2}]},
    "optimizer": {"type": "adagrad", "learning_rate": 0.1},
    "training": {"mode": "sync", "global_batch_size": 40, "epochs": 6, "workers": 2},
    "preprocessing": {"columns": {"tags": {"encode": "hash", "num_bins": 50, "separator": "|", "max_values": 3},
                                  "user": {"encode": "hash", "num_bins": 97}, "item": {"encode": "ids", "max_categories": 20}}}})";
  const TrainingResult bags_standalone = train_locally(parse_job_spec(bags), local);
  const std::string bags_id = submit(cluster, bags);
  const json::object bags_done = wait_for_state(cluster, bags_id, "SUCCEEDED", 240s);
  const Reply bags_model = get(port, "/v1/jobs/" + bags_id + "/model");
  REQUIRE(bags_model.status == 200);
  CHECK(params_of(bags, bags_model.body) == std::vector<float>(bags_standalone.params.begin(), bags_standalone.params.end()));
  CHECK(num(bags_done, "test_accuracy") > 0.75);
  // By field name: the cell's text, or a list of its ids (an unseen tag has its bin).
  const Reply q = post_json(port, "/v1/models/" + bags_id + ":predict",
                            R"({"instances": [{"tags": "t3|t6", "x": 0.1, "user": "u8", "item": "i3"},
                                              {"tags": ["t3", "t6"], "x": 0.1, "user": "u8", "item": "i3"},
                                              {"tags": ["never-seen"], "x": -2, "user": "never-seen", "item": "never-seen"},
                                              {"tags": null, "x": 0, "user": null, "item": null}]})");
  INFO(q.describe());
  REQUIRE(q.status == 200);
  const json::array answers = arr(object_of(q), "predictions");
  REQUIRE(answers.size() == 4);
  CHECK(json::serialize(answers[0]) == json::serialize(answers[1]));
  CHECK(str(obj(answers[0]), "class") == "yes");
  // The user is an id column (its profile estimates the distinct users); nothing but hashing fits it.
  const json::object user = column(obj(obj(object_of(get(port, "/v1/datasets/tagged")).at("splits")).at("train")), "user");
  CHECK(str(user, "type") == "id");
  CHECK(num(user, "missing") == 50);
  CHECK(std::abs(num(user, "distinct_estimate") - 100) <= 5);  // 100 users, nearly all drawn
  std::string one_hot = bags;
  one_hot.replace(one_hot.find(R"("user": {"encode": "hash", "num_bins": 97})"), 42, R"("user": {"encode": "one_hot"})");
  check_problem(post_json(port, "/v1/jobs", one_hot), 422, "invalid-spec", "/preprocessing/columns/user/encode");
}
