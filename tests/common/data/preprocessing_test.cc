// A table's preprocessing (preprocessing.h, table_split.h): hand-computed fits for every step,
// the width known at submit equal to the fitted one, records by field name equal to stored rows,
// another split's category codes mapped by name, statistics from the training rows only, the
// fitted form's JSON, and the spec's errors naming their field.
#include "common/data/preprocessing.h"

#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <cmath>
#include <sstream>

#include "common/data/dataset_formats.h"
#include "common/data/job_spec.h"
#include "common/data/spec_reader.h"
#include "common/data/table_split.h"
#include "tests/common/data/preprocessing_helpers.h"

using namespace pstrain;
using namespace pstrain::testing;
namespace json = boost::json;

namespace {

const std::string kTable =
    "age,plan,member,label\n"
    "1,pro,yes,a\n"
    "2,basic,no,b\n"
    "NA,pro,,a\n"
    "5,family,yes,b\n"
    "2,,no,a\n";

}  // namespace

TEST_CASE("default preprocessing: numeric mean and standardize, categories one-hot with other, indicators where data is missing") {
  const ParsedExamples p = csv(kTable);
  const PreprocessingSpec spec;  // nothing said: the defaults
  const FittedPreprocessing f = fit_preprocessing(spec, *p.table, *p.table, values(p), p.size());
  REQUIRE(f.columns.size() == 3);
  // age: fill = mean(1, 2, 5, 2) = 2.5; standardized over 1, 2, 2.5, 5, 2 (mean 2.5, population std).
  const double mean = 2.5;
  const double var = ((1 - mean) * (1 - mean) + (2 - mean) * (2 - mean) + 0 + (5 - mean) * (5 - mean) + (2 - mean) * (2 - mean)) / 5;
  CHECK(f.columns[0].fill == 2.5f);
  CHECK(f.columns[0].offset == 2.5f);
  CHECK(f.columns[0].scale == static_cast<float>(1.0 / std::sqrt(var)));
  CHECK(f.columns[0].indicator);
  // plan: categories by name, missing -> the most frequent (pro), an indicator.
  CHECK(f.columns[1].categories == std::vector<std::string>{"basic", "family", "pro"});
  CHECK(f.columns[1].fill_category == 2);
  CHECK(f.columns[1].indicator);
  // member: boolean, missing -> the most frequent (0 and 1 tie at 2: the smaller, 0).
  CHECK(f.columns[2].fill == 0.0f);
  CHECK(f.columns[2].scale == 1.0f);
  CHECK(f.width() == 2 + 5 + 2);
  CHECK(preprocessed_width(spec, *p.table) == f.width());
  CHECK(f.feature_names() == std::vector<std::string>{"age", "age_missing", "plan=basic", "plan=family", "plan=pro", "plan=(other)",
                                                      "plan_missing", "member", "member_missing"});
  const std::vector<float> rows = apply_rows(f, p);
  const float s = f.columns[0].scale;
  // Row 3 (age NA, plan pro, member missing): age filled, both indicators set.
  const std::vector<float> third(rows.begin() + 18, rows.begin() + 27);
  CHECK(third == std::vector<float>{(2.5f - 2.5f) * s, 1, 0, 0, 1, 0, 0, 0, 1});
  // Row 5 (plan missing): the most frequent category and its indicator.
  const std::vector<float> fifth(rows.begin() + 36, rows.begin() + 45);
  CHECK(fifth == std::vector<float>{(2.0f - 2.5f) * s, 0, 0, 0, 1, 0, 1, 0, 0});
}

TEST_CASE("per-column steps: minmax, median, constant, a cap on categories, dropped columns") {
  const ParsedExamples p = csv(
      "x,c,d,label\n"
      "10,a,1,0\n"
      "20,a,2,1\n"
      "NA,b,3,0\n"
      "40,c,4,1\n"
      "30,b,5,0\n"
      "0,a,6,1\n");
  const PreprocessingSpec spec = spec_of(R"({"numeric": {"scale": "minmax", "impute": "median"},
      "columns": {"c": {"max_categories": 2, "indicator": false}, "d": "drop",
                  "x": {"indicator": false}}})");
  const FittedPreprocessing f = fit_preprocessing(spec, *p.table, *p.table, values(p), p.size());
  // x: median of 10, 20, 40, 30, 0 = 20; min 0, max 40 over the filled values.
  CHECK(f.columns[0].fill == 20.0f);
  CHECK(f.columns[0].offset == 0.0f);
  CHECK(f.columns[0].scale == 1.0f / 40);
  CHECK_FALSE(f.columns[0].indicator);
  // c: the 2 most frequent (a 3, b 2), then other (c).
  CHECK(f.columns[1].categories == std::vector<std::string>{"a", "b"});
  CHECK(f.columns[2].dropped);
  CHECK(f.width() == 1 + 3);
  CHECK(preprocessed_width(spec, *p.table) == 4);
  const std::vector<float> rows = apply_rows(f, p);
  CHECK(std::vector<float>(rows.begin() + 8, rows.begin() + 16) == std::vector<float>{0.5f, 0, 1, 0, 1.0f, 0, 0, 1});
  // Constant imputation of a numeric column.
  const PreprocessingSpec constant = spec_of(R"({"columns": {"x": {"impute": "constant", "fill_value": -1, "scale": "none"}}})");
  const FittedPreprocessing g = fit_preprocessing(constant, *p.table, *p.table, values(p), p.size());
  CHECK(g.columns[0].fill == -1.0f);
  CHECK(apply_rows(g, p)[2 * g.width()] == -1.0f);
}

TEST_CASE("a record by field name gives the stored row's features, unseen categories go to other") {
  const ParsedExamples p = csv(kTable);
  const FittedPreprocessing f = fit_preprocessing(PreprocessingSpec{}, *p.table, *p.table, values(p), p.size());
  const std::vector<float> rows = apply_rows(f, p);
  std::vector<float> out(f.width());
  apply_preprocessing(f, json::parse(R"({"age": null, "plan": "pro", "member": null})").as_object(), out.data());
  CHECK(out == std::vector<float>(rows.begin() + 18, rows.begin() + 27));
  apply_preprocessing(f, json::parse(R"({"age": "2", "plan": null, "member": "No", "label": "a"})").as_object(), out.data());
  CHECK(out == std::vector<float>(rows.begin() + 36, rows.begin() + 45));
  apply_preprocessing(f, json::parse(R"({"age": 1, "plan": "gold", "member": true})").as_object(), out.data());
  CHECK(std::vector<float>(out.begin() + 2, out.begin() + 7) == std::vector<float>{0, 0, 0, 1, 0});  // other, not missing
  CHECK(out[7] == 1.0f);
  for (const char* bad : {R"({"age": 1, "plan": "pro"})", R"({"age": 1, "plan": "pro", "member": true, "extra": 1})",
                          R"({"age": "old", "plan": "pro", "member": true})", R"({"age": 1, "plan": [1], "member": true})",
                          R"({"age": 1, "plan": "pro", "member": "maybe"})"}) {
    CHECK_THROWS_AS(apply_preprocessing(f, json::parse(bad).as_object(), out.data()), DataError);
  }
}

TEST_CASE("categories as ids: one feature, the slot in name order, other and missing as one-hot would place them") {
  const ParsedExamples p = csv(kTable);
  const PreprocessingSpec spec = spec_of(R"({"columns": {"plan": {"encode": "ids", "indicator": false}}})");
  const FittedPreprocessing f = fit_preprocessing(spec, *p.table, *p.table, values(p), p.size());
  CHECK(f.columns[1].ids);
  CHECK(f.width() == 2 + 1 + 2);
  CHECK(preprocessed_width(spec, *p.table) == f.width());
  CHECK(f.feature_names()[2] == "plan=(id)");
  // plan: pro, basic, pro, family, missing (-> most frequent: pro) as slots of basic, family, pro.
  const std::vector<float> rows = apply_rows(f, p);
  std::vector<float> ids;
  for (size_t i = 0; i < p.size(); ++i) ids.push_back(rows[i * f.width() + 2]);
  CHECK(ids == std::vector<float>{2, 0, 2, 1, 2});
  std::vector<float> out(f.width());
  apply_preprocessing(f, json::parse(R"({"age": 1, "plan": "gold", "member": true})").as_object(), out.data());
  CHECK(out[2] == 3.0f);  // unseen: other, the last id
  const FittedPreprocessing back = fitted_from_json(fitted_to_json(f));
  CHECK(apply_rows(back, p) == rows);
  auto width_path = [&](const std::string& text) { return width_error_path(text, *p.table); };
  CHECK(width_path(R"({"columns": {"age": {"encode": "ids"}}})") == "/preprocessing/columns/age/encode");
  CHECK_THROWS_AS(spec_of(R"({"numeric": {"encode": "ids"}})"), SpecError);
  CHECK_THROWS_AS(spec_of(R"({"categorical": {"encode": "hash"}})"), SpecError);
}

TEST_CASE("another split's category codes are mapped by name, and statistics come from the training rows only") {
  const ParsedExamples train = csv("x,plan,label\n1,pro,0\n3,basic,1\n5,pro,0\n");
  // The test split has its own vocabulary (family, pro: pro is code 1 here, 2... in train terms by name).
  CsvOptions options;
  options.expected_columns = {{"x", ColumnType::kNumeric}, {"plan", ColumnType::kCategorical}};
  std::istringstream in("x,plan,label\n1000,pro,0\n-1000,family,1\n");
  const ParsedExamples test = parse_csv(in, "test.csv", options);
  const FittedPreprocessing f = fit_preprocessing(PreprocessingSpec{}, *train.table, *train.table, values(train), train.size());
  // Fitted on train alone: the test split's extreme values change nothing.
  CHECK(f.columns[0].offset == 3.0f);
  const std::vector<float> rows = apply_rows(f, test);
  REQUIRE(f.width() == 1 + 3);
  CHECK(std::vector<float>(rows.begin() + 1, rows.begin() + 4) == std::vector<float>{0, 1, 0});  // pro
  CHECK(std::vector<float>(rows.begin() + 5, rows.begin() + 8) == std::vector<float>{0, 0, 1});  // family: other
}

TEST_CASE("prepare_table fits on the training part and applies to every split") {
  auto split_of = [](const std::string& text, SplitKind kind) {
    std::istringstream in(text);
    ParsedExamples p = parse_csv(in, "t.csv");
    auto table = std::make_shared<const TableSchema>(*p.table);
    Split s = make_split("t", kind, std::move(p));
    s.table = table;
    return s;
  };
  const Split train = split_of("x,label\n0,0\n2,1\n4,0\n", SplitKind::kTrain);
  const Split test = split_of("x,label\n100,1\n2,0\n", SplitKind::kTest);
  const PreparedTable prepared = prepare_table(PreprocessingSpec{}, train, nullptr, test);
  CHECK(prepared.fitted->columns[0].offset == 2.0f);
  CHECK(prepared.test->shape == Shape{1});
  CHECK(prepared.test->table == nullptr);
  CHECK(prepared.test->labels == std::vector<int32_t>{1, 0});
  const float* x = reinterpret_cast<const float*>(prepared.test->examples.data());
  CHECK(x[1] == 0.0f);
  CHECK(x[0] == (100.0f - 2.0f) * prepared.fitted->columns[0].scale);
}

TEST_CASE("the fitted form's JSON applies bit for bit as the original") {
  const ParsedExamples p = csv("a,b,c,label\n0.1,x,true,0\n0.7,y,false,1\nNA,z,,0\n1e-3,x,yes,1\n");
  const FittedPreprocessing f = fit_preprocessing(spec_of(R"({"numeric": {"scale": "minmax"}})"), *p.table, *p.table, values(p), p.size());
  const FittedPreprocessing back = fitted_from_json(fitted_to_json(f));
  CHECK(fitted_to_json(back) == fitted_to_json(f));
  CHECK(apply_rows(back, p) == apply_rows(f, p));
  CHECK_THROWS_AS(fitted_from_json("{}"), DataError);
  CHECK_THROWS_AS(fitted_from_json(R"({"label":"l","class_names":[],"columns":[{"name":"a","type":"categorical","indicator":false,"categories":["b","a"],"fill_category":0}]})"),
                  DataError);
}

TEST_CASE("preprocessing spec errors name their field") {
  auto path_of = [](const std::string& text) {
    try {
      spec_of(text);
    } catch (const SpecError& e) {
      return e.path();
    }
    return std::string("(accepted)");
  };
  CHECK(path_of(R"({"numeric": {"scale": "zscore"}})") == "/preprocessing/numeric/scale");
  CHECK(path_of(R"({"numeric": {"max_categories": 3}})") == "/preprocessing/numeric/max_categories");
  CHECK(path_of(R"({"numeric": {"impute": "mean", "fill_value": 1}})") == "/preprocessing/numeric/fill_value");
  CHECK(path_of(R"({"categorical": {"max_categories": 0}})") == "/preprocessing/categorical/max_categories");
  CHECK(path_of(R"({"numeric": {"drop": true}})") == "/preprocessing/numeric/drop");
  CHECK(path_of(R"({"columns": {"a": "keep"}})") == "/preprocessing/columns/a");
  CHECK(path_of(R"({"extra": 1})") == "/preprocessing/extra");
  const ParsedExamples p = csv(kTable);
  auto width_path = [&](const std::string& text) { return width_error_path(text, *p.table); };
  CHECK(width_path(R"({"columns": {"zz": {"indicator": false}}})") == "/preprocessing/columns/zz");
  CHECK(width_path(R"({"columns": {"plan": {"scale": "minmax"}}})") == "/preprocessing/columns/plan/scale");
  CHECK(width_path(R"({"columns": {"age": {"max_categories": 2}}})") == "/preprocessing/columns/age/max_categories");
  CHECK(width_path(R"({"columns": {"age": "drop", "plan": "drop", "member": "drop"}})") == "/preprocessing");
}

TEST_CASE("a job spec keeps its preprocessing section through its JSON form") {
  const std::string text = R"({"dataset": {"name": "churn"}, "model": {"input_shape": [9], "layers": [{"type": "dense", "units": 2}]},
    "optimizer": {"type": "sgd", "learning_rate": 0.1}, "training": {"global_batch_size": 8, "epochs": 1},
    "preprocessing": {"numeric": {"scale": "minmax", "impute": "median"}, "columns": {"plan": {"max_categories": 5}, "notes": "drop"}}})";
  const JobSpec spec = parse_job_spec(text);
  CHECK(spec.preprocessing.given);
  const JobSpec again = parse_job_spec(job_spec_to_json(spec));
  CHECK(json::serialize(preprocessing_to_object(again.preprocessing)) == json::serialize(preprocessing_to_object(spec.preprocessing)));
  CHECK(again.preprocessing.columns.at("notes").drop);
}
