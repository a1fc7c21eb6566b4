// Text as users have it, end to end over HTTP with a real cluster: a .zip (train) and a .tar
// (test) of class folders of .txt files upload as documents, listed with dtype "string" and a
// profile computed by hand here (documents, tokens per document, top tokens) that survives a
// coordinator restart; a job on them without a tokenizer is a 422 saying why; a file that is not UTF-8 is a 422
// naming the file and line, and stores nothing. The same folders dropped into the data directory
// are converted once into documents and listed with the same profile.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/image_files.h"
#include "tests/integration/cluster.h"
#include "tests/integration/http_test_client.h"
#include "tests/integration/text_fixtures.h"
#include "tests/test_support.h"

using namespace pstrain;
using namespace pstrain::testing::http_test;
using namespace std::chrono_literals;

namespace {

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }


Reply put(int port, const std::string& target, const std::string& body, const std::string& type) {
  return call(port, http::verb::put, target, body, type);
}

// Reviews in two classes: class "neg" documents say "bad" 2 times each, "pos" ones "good" 3 times.
testing::ArchiveFiles reviews(int per_class, const std::string& root) {
  testing::ArchiveFiles files;
  for (int i = 0; i < per_class; ++i) {
    files.push_back({root + "neg/" + std::to_string(1000 + i) + ".txt", bytes_of("Bad, bad film number " + std::to_string(i) + ".")});
    files.push_back({root + "pos/" + std::to_string(1000 + i) + ".txt", bytes_of("Good! Good, GOOD \xE2\x98\x85 film.\n")});
  }
  return files;
}

// Documents in the "meals" table's review column (its second), in split `side`.
double review_documents(int port, const char* side) {
  const json::object splits = obj(object_of(get(port, "/v1/datasets/meals")).at("splits"));
  const json::object table = obj(obj(splits.at(side)).at("table"));
  return num(obj(obj(arr(table, "columns")[1]).at("text")), "documents");
}

}  // namespace

TEST_CASE("text datasets - class folders of .txt files upload as profiled documents, and jobs on them and bad UTF-8 are 422s") {
  testing::TempDir data;
  testing::Cluster cluster({.coordinator_flags = {"--data-dir", data.path()}});
  int port = cluster.http_port();

  Reply r = put(port, "/v1/datasets/reviews/train", testing::archive_of(reviews(30, "aclImdb/"), true), "application/zip");
  INFO("PUT reviews/train -> " << r.describe());
  REQUIRE(r.status == 201);
  r = put(port, "/v1/datasets/reviews/test", testing::archive_of(reviews(5, ""), false), "application/x-tar");
  INFO("PUT reviews/test -> " << r.describe());
  REQUIRE(r.status == 201);

  const auto check_record = [&] {
    const json::object record = object_of(get(port, "/v1/datasets/reviews"));
    CHECK(str(record, "dtype") == "string");
    CHECK(json::serialize(record.at("input_shape")) == "[]");
    CHECK(json::serialize(record.at("class_names")) == R"(["neg","pos"])");
    const json::object train = obj(obj(record.at("splits")).at("train"));
    CHECK(json::serialize(train.at("class_counts")) == "[30,30]");
    const json::object text = obj(train.at("text"));
    CHECK(num(text, "documents") == 60);
    // neg: "bad bad film number i" (5 tokens); pos: "good good good ★ film" (5 tokens).
    CHECK(num(text, "tokens") == 300);
    const json::object per = obj(text.at("tokens_per_document"));
    CHECK(num(per, "min") == 5);
    CHECK(num(per, "max") == 5);
    CHECK(json::serialize(per.at("histogram")) ==
          R"([{"at_most":0,"documents":0},{"at_most":1,"documents":0},{"at_most":3,"documents":0},{"at_most":7,"documents":60}])");
    // good 90, bad 60, film 60, number 30, ★ 30, then the numbers 0..29 once each.
    const std::string top = json::serialize(text.at("top_tokens"));
    CHECK(top.rfind(R"([["good",90],["bad",60],["film",60],["number",30],["★",30],["0",1])", 0) == 0);
    CHECK(num(text, "distinct_tokens") == 5 + 30);
    CHECK(num(obj(obj(obj(record.at("splits")).at("test")).at("text")), "documents") == 10);
  };
  check_record();

  // A job on text without a tokenizer: a 422 that says why, naming the field (text_jobs_test
  // trains on documents).
  r = call(port, http::verb::post, "/v1/jobs", R"({"dataset": {"name": "reviews"},
      "model": {"input_shape": [4], "layers": [{"type": "dense", "units": 2}]},
      "optimizer": {"type": "sgd", "learning_rate": 0.1}, "training": {"global_batch_size": 8, "epochs": 1}})",
           "application/json");
  check_problem(r, 422, "a job on a text dataset without a tokenizer", "/preprocessing/text");
  CHECK(r.body.find("holds text documents") != std::string::npos);
  // Documents split per class at random (seeded), each side profiled on its own documents.
  r = put(port, "/v1/datasets/docs/train", testing::archive_of(reviews(20, ""), true), "application/zip");
  REQUIRE(r.status == 201);
  r = call(port, http::verb::post, "/v1/datasets/docs/split", R"({"test_fraction": 0.25, "seed": 5})", "application/json");
  INFO("split docs -> " << r.describe());
  REQUIRE(r.status == 200);
  {
    const json::object splits = obj(object_of(get(port, "/v1/datasets/docs")).at("splits"));
    CHECK(json::serialize(obj(splits.at("train")).at("class_counts")) == "[15,15]");
    CHECK(json::serialize(obj(splits.at("test")).at("class_counts")) == "[5,5]");
    CHECK(num(obj(obj(splits.at("train")).at("text")), "documents") == 30);
    CHECK(num(obj(obj(splits.at("test")).at("text")), "tokens") == 50);
    // The pos documents are all alike: each side's "good" count is 3 per pos document.
    CHECK(json::serialize(obj(obj(splits.at("test")).at("text")).at("top_tokens")).rfind(R"([["good",15],["bad",10],["film",10])", 0) == 0);
  }
  check_problem(call(port, http::verb::post, "/v1/datasets/docs/split", R"({"test_fraction": 0.2})", "application/json"), 409,
                "splitting twice", "");

  // Not UTF-8 (Latin-1 'é' on line 2): a 422 naming the file and line; nothing stored.
  testing::ArchiveFiles latin = reviews(2, "");
  latin.push_back({"pos/latin1.txt", bytes_of("first line\ncaf\xE9 au lait")});
  r = put(port, "/v1/datasets/latin/train", testing::archive_of(latin, true), "application/zip");
  check_problem(r, 422, "Latin-1 text", "");
  CHECK(str(object_of(r), "type").find("dataset-bad-encoding") != std::string::npos);
  CHECK(r.body.find("train.zip:pos/latin1.txt: line 2, byte 4: not UTF-8") != std::string::npos);
  CHECK(get(port, "/v1/datasets/latin").status == 404);
  // A text split beside an array split: refused.
  r = put(port, "/v1/datasets/reviews/test?replace=true", testing::archive_of({{"a/1.png", bytes_of("not text")}, {"b/1.png", bytes_of("x")}}, true),
          "application/zip");
  CHECK(r.status == 422);

  // A CSV with a free-text column: the column is text (profiled, kept beside the values), a job
  // without a tokenizer trains on the other columns; a table of text alone is listed, and a job on
  // it without a tokenizer is refused (table_text_test.cc trains with one).
  std::string csv = "stars,review,label\n";
  std::string jsonl;
  for (int i = 0; i < 40; ++i) {
    const bool pos = i % 2 == 0;
    const std::string review = pos ? "Great food, friendly staff number " + std::to_string(i) : "Cold soup and a rude waiter number " + std::to_string(i);
    csv += std::to_string(pos ? 4 + i % 2 : 1 + i % 2) + ",\"" + review + "\"," + (pos ? "pos" : "neg") + "\n";
    jsonl += R"({"body": ")" + review + R"(", "label": ")" + (pos ? "pos" : "neg") + "\"}\n";
  }
  r = put(port, "/v1/datasets/meals/train", csv, "text/csv");
  INFO("PUT meals/train -> " << r.describe());
  REQUIRE(r.status == 201);
  const auto check_meals = [&] {
    const json::object meals = object_of(get(port, "/v1/datasets/meals"));
    CHECK(json::serialize(meals.at("columns")) == R"([{"name":"stars","type":"numeric"},{"name":"review","type":"text"}])");
    CHECK(json::serialize(meals.at("input_shape")) == "[1]");
    const json::object review = obj(arr(obj(obj(obj(meals.at("splits")).at("train")).at("table")), "columns")[1]);
    CHECK(num(obj(review.at("text")), "documents") > 0);
    CHECK(json::serialize(obj(review.at("text")).at("top_tokens")).rfind(R"([["number",)", 0) == 0);
  };
  check_meals();
  CHECK(review_documents(port, "train") == 40);
  r = call(port, http::verb::post, "/v1/datasets/meals/split", R"({"test_fraction": 0.25, "seed": 3})", "application/json");
  INFO("split meals -> " << r.describe());
  REQUIRE(r.status == 200);
  CHECK(review_documents(port, "train") == 30);  // each side's text column profiled on its own rows
  CHECK(review_documents(port, "test") == 10);
  const std::string meals_job = submit(cluster, R"({"dataset": {"name": "meals", "shuffle_seed": 1},
      "model": {"input_shape": [1], "seed": 1, "layers": [{"type": "dense", "units": 2}]},
      "optimizer": {"type": "sgd", "learning_rate": 0.1}, "training": {"global_batch_size": 8, "epochs": 1}})");
  wait_for_state(cluster, meals_job, "SUCCEEDED", 120s);
  r = put(port, "/v1/datasets/notes/train", jsonl, "application/x-ndjson");
  INFO("PUT notes/train -> " << r.describe());
  REQUIRE(r.status == 201);
  CHECK(json::serialize(object_of(get(port, "/v1/datasets/notes")).at("input_shape")) == "[0]");
  r = call(port, http::verb::post, "/v1/jobs", R"({"dataset": {"name": "notes"},
      "model": {"input_shape": [4], "layers": [{"type": "dense", "units": 2}]},
      "optimizer": {"type": "sgd", "learning_rate": 0.1}, "training": {"global_batch_size": 8, "epochs": 1}})",
           "application/json");
  check_problem(r, 422, "a job on a table of text alone without a tokenizer", "/preprocessing/text");
  CHECK(r.body.find("only features are text columns") != std::string::npos);

  // The record and its profile survive a coordinator restart.
  cluster.restart_coordinator(true);
  port = cluster.http_port();
  for (int i = 0; i < 100 && str(object_of(get(port, "/v1/datasets/reviews")), "state") != "ready"; ++i) std::this_thread::sleep_for(100ms);
  check_record();
  check_meals();
  // A split uploaded after the restart still matches the stored record's kind (documents).
  r = put(port, "/v1/datasets/reviews/test?replace=true", testing::archive_of(reviews(3, ""), true), "application/zip");
  INFO("PUT reviews/test after the restart -> " << r.describe());
  CHECK(r.status == 200);
  // A preprocessing step on a text column is refused naming it.
  r = call(port, http::verb::post, "/v1/jobs", R"({"dataset": {"name": "meals"}, "preprocessing": {"columns": {"review": {"impute": "mean"}}},
      "model": {"input_shape": [1], "layers": [{"type": "dense", "units": 2}]},
      "optimizer": {"type": "sgd", "learning_rate": 0.1}, "training": {"global_batch_size": 8, "epochs": 1}})",
           "application/json");
  check_problem(r, 422, "preprocessing a text column", "/preprocessing/columns/review/impute");
}

TEST_CASE("text datasets - a dropped-in folder of class folders of .txt files is listed and profiled as an upload of them is") {
  testing::TempDir data;
  std::string dir = data.path() + "/notes";
  const auto write_files = [&](const std::string& root, int per_class) {
    for (const auto& [path, bytes] : reviews(per_class, root + "/")) {
      std::filesystem::create_directories(std::filesystem::path(dir + "/" + path).parent_path());
      std::ofstream(dir + "/" + path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                               static_cast<std::streamsize>(bytes.size()));
    }
  };
  write_files("train", 12);
  write_files("test", 4);
  std::ofstream(dir + "/dataset.json") << R"({"train": {"folders": "train"}, "test": {"folders": "test"}})";
  const std::string notes_dir = dir;
  dir = data.path() + "/memos";
  write_files("docs", 6);
  std::ofstream(dir + "/dataset.json") << R"({"train": {"folders": "docs"}})";
  dir = notes_dir;
  testing::Cluster cluster({.coordinator_flags = {"--data-dir", data.path()}});
  int port = cluster.http_port();
  const auto check_record = [&] {
    json::object record;
    for (int i = 0; i < 100; ++i) {
      record = object_of(get(port, "/v1/datasets/notes"));
      if (str(record, "state") == "ready") break;
      std::this_thread::sleep_for(100ms);
    }
    INFO(json::serialize(record));
    CHECK(str(record, "dtype") == "string");
    CHECK(json::serialize(record.at("class_names")) == R"(["neg","pos"])");
    const json::object splits = obj(record.at("splits"));
    CHECK(json::serialize(obj(splits.at("train")).at("class_counts")) == "[12,12]");
    const json::object text = obj(obj(splits.at("train")).at("text"));
    CHECK(num(text, "documents") == 24);
    CHECK(num(text, "tokens") == 120);
    CHECK(json::serialize(text.at("top_tokens")).rfind(R"([["good",36],["bad",24],["film",24],["number",12])", 0) == 0);
    CHECK(num(obj(obj(splits.at("test")).at("text")), "documents") == 8);
  };
  check_record();
  // Converted once into documents' shards beside the files, reused after a restart.
  std::vector<std::string> conversions;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/.pstrain-shards")) conversions.push_back(e.path().filename().string());
  std::sort(conversions.begin(), conversions.end());
  REQUIRE(conversions.size() == 2);
  CHECK(conversions[0].rfind("test-", 0) == 0);
  CHECK(conversions[1].rfind("train-", 0) == 0);
  const auto stamp = std::filesystem::last_write_time(dir + "/.pstrain-shards/" + conversions[1] + "/dataset.json");
  // A job trains on the dropped-in documents (read from their conversion), its input inferred
  // from the tokenizer's width.
  const std::string job = submit(cluster, R"({"dataset": {"name": "notes"},
      "preprocessing": {"text": {"max_tokens": 8, "output_mode": "multi_hot"}},
      "model": {"layers": [{"type": "dense", "units": 2}]},
      "optimizer": {"type": "sgd", "learning_rate": 0.5}, "training": {"global_batch_size": 8, "epochs": 5}})");
  const json::object done = wait_for_state(cluster, job, "SUCCEEDED", 60s);
  CHECK(json::serialize(obj(obj(done.at("spec")).at("model")).at("input_shape")) == "[8]");
  CHECK(num(done, "test_accuracy") == 1.0);  // "good" and "bad" are in the vocabulary
  // A dropped-in text dataset without a test split splits like an upload.
  Reply split = call(port, http::verb::post, "/v1/datasets/memos/split", R"({"test_fraction": 0.5, "seed": 2})", "application/json");
  INFO("split memos -> " << split.describe());
  REQUIRE(split.status == 200);
  const json::object memos = obj(object_of(get(port, "/v1/datasets/memos")).at("splits"));
  CHECK(json::serialize(obj(memos.at("train")).at("class_counts")) == "[3,3]");
  CHECK(json::serialize(obj(memos.at("test")).at("class_counts")) == "[3,3]");
  CHECK(num(obj(obj(memos.at("test")).at("text")), "documents") == 6);
  cluster.restart_coordinator(true);
  port = cluster.http_port();
  check_record();
  CHECK(std::filesystem::last_write_time(dir + "/.pstrain-shards/" + conversions[1] + "/dataset.json") == stamp);
}
