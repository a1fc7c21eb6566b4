// Tables as users have them, end to end over HTTP against a real coordinator: a CSV with quoted
// text, a ';' separator, categorical, boolean and numeric columns, missing cells and string
// labels is stored with its column types, class names and per-split profile; the test split takes
// the train split's columns and classes (defects named by line and column, nothing stored); a
// seeded split keeps the schema and profiles each side; everything survives a restart.
#include <doctest/doctest.h>

#include <string>
#include <thread>

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
  };
  check_train(object_of(get(port, "/v1/datasets/churn")));

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

  // A job cannot train on categories and missing values as stored: a clear refusal naming them.
  const std::string spec = R"({"name": "churn", "dataset": {"name": "churn"},
    "model": {"input_shape": [4], "seed": 1, "layers": [{"type": "dense", "units": 2}]},
    "optimizer": {"type": "sgd", "learning_rate": 0.1},
    "training": {"global_batch_size": 32, "epochs": 1, "workers": 1, "servers": 1}})";
  o = expect(post_json(port, "/v1/jobs", spec), 422, "invalid-spec", "categorical columns or missing values (plan, age, member, notes)");
  CHECK(str(o, "field") == "/dataset/name");

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
}
