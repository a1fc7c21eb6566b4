// A table's text columns through the tokenizer, end to end over HTTP with a real cluster: a CSV
// with a number, a category and a free-text review is uploaded; a job tokenizes the review
// (`preprocessing.columns.review.text`: int ids into a masked embedding beside the other columns'
// features through slices; or the table-wide `preprocessing.text`: tf_idf) with the tokenizer fitted
// on the training rows' cells (after a validation hold-out). 2 workers x 2 servers in sync, the
// workers reading the rows and the cells from the dataset store, equal the standalone 2-slice
// trainer bit for bit; the model predicts by field name with the review's text, exports to ONNX
// (the tokenizer in the metadata); bad specs and records are 422s naming the field.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "tests/integration/cluster.h"
#include "tests/integration/http_test_client.h"
#include "tests/integration/standalone_match.h"
#include "tests/test_support.h"

using namespace pstrain;
using namespace pstrain::testing::http_test;
using namespace std::chrono_literals;

namespace {

// Restaurant reviews: stars (a weak signal), city (no signal), the review's words (the signal:
// one or two of five good or five bad words among filler), some reviews empty; label pos/neg.
std::string meals(int rows, uint32_t seed) {
  const char* good[] = {"great", "tasty", "friendly", "lovely", "fresh"};
  const char* bad[] = {"cold", "rude", "stale", "slow", "dirty"};
  const char* filler[] = {"the", "soup", "waiter", "table", "night", "food", "place", "we", "had", "a", "our", "dinner"};
  const char* cities[] = {"Lyon", "Oslo", "Porto"};
  std::mt19937 rng(seed);
  std::string csv = "stars,city,review,label\n";
  for (int i = 0; i < rows; ++i) {
    const bool pos = rng() % 2 == 0;
    std::vector<std::string> words;
    for (uint32_t n = 2 + rng() % 7; n > 0; --n) words.emplace_back(filler[rng() % 12]);
    for (uint32_t n = 1 + rng() % 2; n > 0; --n) words.insert(words.begin() + rng() % (words.size() + 1), (pos ? good : bad)[rng() % 5]);
    std::string review;
    for (const std::string& w : words) review += (review.empty() ? "" : " ") + w;
    review[0] = static_cast<char>(review[0] - 'a' + 'A');
    review += i % 3 == 0 ? "!" : ".";
    if (i % 17 == 0) review.clear();
    const int stars = std::clamp<int>(static_cast<int>(pos ? 3 + rng() % 3 : 1 + rng() % 3), 1, 5);
    csv += std::to_string(stars) + "," + cities[rng() % 3] + ",\"" + review + "\"," + (pos ? "pos" : "neg") + "\n";
  }
  return csv;
}

// Features: stars, city=Lyon, city=Oslo, city=Porto, city=(other), then the review's 12 token ids.
std::string ids_spec() {
  return R"({"name": "meals-ids", "dataset": {"name": "meals", "shuffle_seed": 3},
    "preprocessing": {"columns": {"review": {"text": {"max_tokens": 30, "output_mode": "int", "output_sequence_length": 12}}}},
    "model": {"input_shape": [17], "seed": 5, "layers": [
      {"name": "numbers", "type": "slice", "inputs": ["input"], "begin": 0, "size": 5},
      {"name": "words", "type": "slice", "inputs": ["input"], "begin": 5, "size": 12},
      {"name": "vectors", "type": "embedding", "inputs": ["words"], "input_dim": 30, "output_dim": 6, "mask_zero": true},
      {"name": "pooled", "type": "global_avgpool1d", "inputs": ["vectors"]},
      {"name": "all", "type": "concatenate", "inputs": ["numbers", "pooled"]},
      {"type": "dense", "units": 8, "activation": "relu"},
      {"type": "dense", "units": 2}]},
    "optimizer": {"type": "adam", "learning_rate": 0.03},
    "training": {"mode": "sync", "global_batch_size": 40, "epochs": 6, "workers": 2, "servers": 2, "validation_fraction": 0.1}})";
}

// The table-wide tokenizer: every text column's tf_idf (20 features) after the 5 others.
std::string tf_idf_spec() {
  return R"({"name": "meals-tfidf", "dataset": {"name": "meals", "shuffle_seed": 4},
    "preprocessing": {"text": {"max_tokens": 20, "output_mode": "tf_idf"}},
    "model": {"input_shape": [25], "seed": 6, "layers": [{"type": "dense", "units": 8, "activation": "relu"}, {"type": "dense", "units": 2}]},
    "optimizer": {"type": "adam", "learning_rate": 0.03},
    "training": {"mode": "sync", "global_batch_size": 20, "epochs": 4, "workers": 2, "servers": 2}})";
}

}  // namespace

TEST_CASE("table text columns - a review column tokenized per job trains on a cluster exactly as standalone, its workers reading rows and cells from the store, and predicts by field name with the text") {
  testing::TempDir data;
  testing::ClusterOptions options;
  options.workers = 2;
  options.coordinator_flags = {"--data-dir", data.path()};
  testing::Cluster cluster(options);
  const int port = cluster.http_port();
  for (const auto& [split, rows, seed] : {std::tuple{"train", 400, 1u}, std::tuple{"test", 100, 2u}}) {
    const Reply r = call(port, http::verb::put, std::string("/v1/datasets/meals/") + split + "?label=label&types=review:text",
                         meals(rows, seed), "text/csv");
    INFO(r.describe());
    REQUIRE(r.status == 201);
  }

  // Spec defects name their field: a tokenizer on a number, other steps on text, the width.
  std::string on_number = ids_spec();
  on_number.replace(on_number.find(R"("review": {"text")"), 8, R"("stars")");
  check_problem(post_json(port, "/v1/jobs", on_number), 422, "invalid-spec", "/preprocessing/columns/stars/text");
  std::string scaled = ids_spec();
  scaled.replace(scaled.find(R"({"text")"), 1, R"({"scale": "minmax", )");
  check_problem(post_json(port, "/v1/jobs", scaled), 422, "invalid-spec", "/preprocessing/columns/review/scale");
  std::string wide = ids_spec();
  wide.replace(wide.find("[17]"), 4, "[18]");
  check_problem(post_json(port, "/v1/jobs", wide), 422, "invalid-spec", "/model/input_shape");

  LocalTrainerOptions local;
  local.data_dir = data.path();
  local.replicas = 2;
  for (const auto& [spec, accuracy] : {std::pair{ids_spec(), 0.85}, std::pair{tf_idf_spec(), 0.85}}) {
    INFO(spec);
    const testing::StandaloneMatch run = testing::run_against_standalone(cluster, spec, local);
    const std::string& id = run.id;
    CHECK(run.cluster == run.standalone);
    CHECK(num(run.done, "test_accuracy") > accuracy);
    // The model file keeps the column's fitted tokenizer; the workers read rows and cells themselves.
    CHECK(run.model_file.find(R"(\"text_columns\")") != std::string::npos);
    CHECK(run.model_file.find(R"(\"soup\")") != std::string::npos);
    const std::string notes = json::serialize(object_of(get(port, "/v1/jobs/" + id)).at("notes"));
    INFO(notes);
    CHECK(notes.find("0 streamed by the coordinator") != std::string::npos);

    const Reply p = post_json(port, "/v1/models/" + id + ":predict",
                              R"({"instances": [{"stars": 3, "city": "Oslo", "review": "Lovely tasty food, a friendly waiter!"},
                                                {"stars": 3, "city": "Lyon", "review": "Cold stale soup and a rude waiter."},
                                                {"stars": null, "city": "Rome", "review": null}]})");
    INFO(p.describe());
    REQUIRE(p.status == 200);
    const json::array predictions = arr(object_of(p), "predictions");
    REQUIRE(predictions.size() == 3);
    CHECK(str(obj(predictions[0]), "class") == "pos");
    CHECK(str(obj(predictions[1]), "class") == "neg");
    // A review that is not text, or none at all: the instance and the field named.
    const Reply number = post_json(port, "/v1/models/" + id + ":predict", R"({"instances": [{"stars": 3, "city": "Oslo", "review": 7}]})");
    check_problem(number, 422, "invalid-instances", "/instances/0");
    CHECK(number.body.find("review") != std::string::npos);
    const Reply missing = post_json(port, "/v1/models/" + id + ":predict", R"({"instances": [{"stars": 3, "city": "Oslo"}]})");
    check_problem(missing, 422, "invalid-instances", "/instances/0");
    CHECK(missing.body.find("review") != std::string::npos);
    // ONNX: the graph takes the review's tokenizer output; the tokenizer is in the metadata.
    const Reply onnx = get(port, "/v1/models/" + id + "/file?format=onnx");
    CHECK(onnx.status == 200);
    CHECK(onnx.body.find("pstrain.tokenizer.review") != std::string::npos);
  }

  // A table of text alone: a job needs a tokenizer (422 naming it), and trains with one.
  std::string notes_csv = "note,label\n";
  for (int i = 0; i < 60; ++i) notes_csv += std::string(i % 2 ? "\"late and cold, sorry " : "\"on time and warm, thanks ") + std::to_string(i) + "\"," + (i % 2 ? "bad" : "good") + "\n";
  for (const char* split : {"train", "test"}) {
    REQUIRE(call(port, http::verb::put, std::string("/v1/datasets/notes/") + split + "?label=label&types=note:text", notes_csv, "text/csv")
                .status == 201);
  }
  const std::string notes_spec = R"({"dataset": {"name": "notes"}, "model": {"input_shape": [8], "seed": 2, "layers": [{"type": "dense", "units": 2}]},
      "optimizer": {"type": "sgd", "learning_rate": 0.5}, "training": {"global_batch_size": 10, "epochs": 3, "workers": 2}})";
  check_problem(post_json(port, "/v1/jobs", notes_spec), 422, "invalid-spec", "/preprocessing/text");
  std::string with_text = notes_spec;
  with_text.insert(1, R"("preprocessing": {"text": {"max_tokens": 8, "output_mode": "multi_hot"}}, )");
  const std::string notes_job = submit(cluster, with_text);
  wait_for_state(cluster, notes_job, "SUCCEEDED", 120s);
  const Reply p = post_json(port, "/v1/models/" + notes_job + ":predict", R"({"instances": [{"note": "late and cold"}]})");
  INFO(p.describe());
  CHECK(p.status == 200);
}
