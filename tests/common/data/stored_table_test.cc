// Tables larger than memory (table_split.h, preprocessing.h): the preprocessing is fitted in
// passes over chunks of rows, and any chunking gives the same fit bit for bit, equal to the
// statistics computed here by hand (exact medians, means and deviations over the filled values in
// example order); a table stored as shards loads as its labels and is preprocessed as it is read,
// equal bit for bit to the same table preprocessed in memory, for a hold-out and a test split too.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/base/rng.h"
#include "common/data/dataset_formats.h"
#include "common/data/dataset_manifest.h"
#include "common/data/preprocessing.h"
#include "common/data/shard_sink.h"
#include "common/data/spec_reader.h"
#include "common/data/table_split.h"
#include "common/data/validation_split.h"
#include "tests/test_support.h"

namespace pstrain {
namespace {

namespace json = boost::json;

ParsedExamples csv(const std::string& text) {
  std::istringstream in(text);
  return parse_csv(in, "t.csv");
}

std::span<const float> values(const ParsedExamples& p) {
  return {reinterpret_cast<const float*>(p.bytes.data()), p.bytes.size() / sizeof(float)};
}

// `rows` rows of four numeric columns (negative and positive, repeats, about 1 in 5 missing),
// a categorical one and a class label.
std::string random_table(Rng& rng, size_t rows) {
  std::string text = "a,b,c,d,kind,label\n";
  const char* kinds[] = {"x", "y", "z", "w"};
  for (size_t i = 0; i < rows; ++i) {
    for (int k = 0; k < 4; ++k) {
      if (rng.uniform_index(5) == 0) {
        text += "NA,";
      } else if (k == 3) {
        text += std::to_string(static_cast<int>(rng.uniform_index(6)) - 3) + ",";  // few distinct values
      } else {
        char v[32];
        std::snprintf(v, sizeof v, "%.4f,", rng.uniform_float(-50.0f, 80.0f) * static_cast<float>(k + 1));
        text += v;
      }
    }
    text += std::string(kinds[rng.uniform_index(4)]) + "," + std::to_string(i % 3) + "\n";
  }
  return text;
}

PreprocessingSpec spec_of(const std::string& text) { return read_preprocessing(json::parse(text)); }

const char* kSpec = R"({"columns": {"a": {"impute": "median", "scale": "standardize"},
                                    "b": {"impute": "mean", "scale": "minmax"},
                                    "c": {"impute": "median", "scale": "none"},
                                    "d": {"impute": "most_frequent", "scale": "standardize"},
                                    "kind": {"max_categories": 2}}})";

// Column k's present values, in row order.
std::vector<double> present(const ParsedExamples& p, size_t k) {
  const size_t width = p.shape[0];
  std::vector<double> out;
  for (size_t i = 0; i < p.size(); ++i) {
    const float v = values(p)[i * width + k];
    if (!std::isnan(v)) out.push_back(v);
  }
  return out;
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Writes `p` (a parsed table) as shards of at most `per_shard` rows with its table file, as an
// upload stores it, to `dir` as split `split`.
void write_stored(const std::string& dir, const std::string& split, const ParsedExamples& p, uint64_t per_shard,
                  DatasetManifest& m) {
  ShardLimits limits;
  limits.max_examples = per_shard;
  ShardSink sink(dir, split, limits);
  sink.begin(p.shape, p.dtype);
  sink.examples(p.bytes.data(), p.bytes.size());
  sink.labels(p.labels.data(), p.labels.size());
  ManifestSplit& s = m.splits[split];
  s.format = ManifestSplit::Format::kShards;
  for (const ShardInfo& info : sink.finish(0)) s.shards.push_back(info.file);
  s.shape = p.shape;
  s.dtype = Dtype::kFloat32;
  s.table = split + "-table.json";
  std::ofstream(dir + "/" + s.table) << table_to_json(*p.table);
}

std::vector<float> read_all(const Split& s) {
  std::vector<uint32_t> ids(s.size);
  for (uint32_t i = 0; i < s.size; ++i) ids[i] = i;
  std::vector<float> out(size_t{s.size} * s.example_size());
  s.read_examples(ids, reinterpret_cast<uint8_t*>(out.data()));
  return out;
}

}  // namespace

TEST_CASE("stored tables - the preprocessing fitted in passes over chunks is the same for any chunking, with exact statistics") {
  Rng rng(7);
  for (size_t rows : {2, 3, 9, 10, 1000, 4097}) {
    CAPTURE(rows);
    const ParsedExamples p = csv(random_table(rng, rows));
    const PreprocessingSpec spec = spec_of(kSpec);
    const FittedPreprocessing whole = fit_preprocessing(spec, *p.table, *p.table, values(p), p.size());
    const size_t width = p.shape[0];
    for (size_t chunk : {size_t{1}, size_t{7}, size_t{1000}}) {
      int passes = 0;
      const FittedPreprocessing chunked = fit_preprocessing(spec, *p.table, *p.table, [&](const RowChunk& visit) {
        ++passes;
        for (size_t first = 0; first < p.size(); first += chunk) {
          const size_t n = std::min(chunk, p.size() - first);
          visit(values(p).subspan(first * width, n * width), n);
        }
      });
      CHECK(fitted_to_json(chunked) == fitted_to_json(whole));
      CHECK(passes == 3);  // medians, then standardization
    }
    // By hand: the fills, then the scaling over the filled values (present ones in order, then fills).
    const auto column = [&](const std::string& name) {
      return *std::find_if(whole.columns.begin(), whole.columns.end(), [&](const FittedColumn& c) { return c.name == name; });
    };
    const std::vector<double> a = present(p, 0), b = present(p, 1), c = present(p, 2);
    if (!a.empty()) {
      const float fill = static_cast<float>(median_of(a));
      CHECK(column("a").fill == fill);
      double sum = 0;
      for (double v : a) sum += v;
      for (size_t i = a.size(); i < rows; ++i) sum += fill;
      const double mean = sum / static_cast<double>(rows);
      double squares = 0;
      for (double v : a) squares += (v - mean) * (v - mean);
      for (size_t i = a.size(); i < rows; ++i) squares += (fill - mean) * (fill - mean);
      const double sd = std::sqrt(squares / static_cast<double>(rows));
      CHECK(column("a").offset == static_cast<float>(mean));
      CHECK(column("a").scale == (sd > 0 ? static_cast<float>(1.0 / sd) : 1.0f));
    }
    if (!b.empty()) {
      double sum = 0;
      for (double v : b) sum += v;
      const float fill = static_cast<float>(sum / static_cast<double>(b.size()));
      double lo = *std::min_element(b.begin(), b.end()), hi = *std::max_element(b.begin(), b.end());
      if (b.size() < rows) lo = std::min<double>(lo, fill), hi = std::max<double>(hi, fill);
      CHECK(column("b").fill == fill);
      CHECK(column("b").offset == static_cast<float>(lo));
      CHECK(column("b").scale == (hi > lo ? static_cast<float>(1.0 / (hi - lo)) : 1.0f));
    }
    if (!c.empty()) CHECK(column("c").fill == static_cast<float>(median_of(c)));
  }
}

TEST_CASE("stored tables - a table stored as shards is preprocessed as it is read, bit for bit as in memory") {
  testing::TempDir dir;
  Rng rng(11);
  const ParsedExamples train = csv(random_table(rng, 2500));
  ParsedExamples test = csv(random_table(rng, 300));
  DatasetManifest m;
  write_stored(dir.path(), "train", train, 700, m);
  write_stored(dir.path(), "test", test, 700, m);
  write_manifest(dir.path(), m);

  const Split stored = load_directory_split(dir.path(), "t", SplitKind::kTrain);
  REQUIRE(stored.stored);
  CHECK(stored.examples.empty());  // the rows stay on disk
  REQUIRE(stored.table);
  CHECK(stored.labels == train.labels);
  const Split stored_test = load_directory_split(dir.path(), "t", SplitKind::kTest);
  Split memory = make_split("t", SplitKind::kTrain, ParsedExamples(train));
  memory.table = std::make_shared<const TableSchema>(*train.table);
  Split memory_test = make_split("t", SplitKind::kTest, ParsedExamples(test));
  memory_test.table = std::make_shared<const TableSchema>(*test.table);
  memory_test.num_classes = memory.num_classes;

  const PreprocessingSpec spec = spec_of(kSpec);
  const auto prepared = [&](const Split& train_split, const Split& test_split) {
    const HeldOut parts = hold_out_validation(train_split, 0.2, 3);
    return prepare_table(spec, parts.train, &parts.validation, test_split);
  };
  const PreparedTable a = prepared(memory, memory_test), b = prepared(stored, stored_test);
  CHECK(fitted_to_json(*a.fitted) == fitted_to_json(*b.fitted));
  CHECK(b.train->stored);
  CHECK(b.train->examples.empty());
  CHECK(b.train->example_size() == a.train->example_size());
  CHECK(read_all(*a.train) == read_all(*b.train));
  CHECK(read_all(*a.validation) == read_all(*b.validation));
  CHECK(read_all(*a.test) == read_all(*b.test));
  CHECK(a.train->labels == b.train->labels);
  // gather (what a batch is made of) in a random order, through the view
  std::vector<uint32_t> ids(257);
  for (uint32_t& id : ids) id = static_cast<uint32_t>(rng.uniform_index(b.train->size));
  const size_t w = a.train->example_size();
  std::vector<float> ga(ids.size() * w), gb(ids.size() * w), la(ids.size()), lb(ids.size());
  a.train->gather(ids, ga.data(), la.data());
  b.train->gather(ids, gb.data(), lb.data());
  CHECK(ga == gb);
  CHECK(la == lb);
}

}  // namespace pstrain
