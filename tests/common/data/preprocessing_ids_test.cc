// Ids in a table's preprocessing (preprocessing.h encode "hash", crosses): bins pinned to values
// the Python client computes (clients/python/pstrain/ids.py), unseen ids in their own bins, a
// missing value as the empty string's id, a number as the integer at or below it, a record by
// field name equal to the stored row, multi-valued cells, the fitted JSON, the width known at submit, and the spec's
// errors naming their field.
#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <sstream>

#include "common/data/dataset_formats.h"
#include "common/data/id_hash.h"
#include "common/data/preprocessing.h"
#include "tests/common/data/preprocessing_helpers.h"

using namespace pstrain;
using namespace pstrain::testing;
namespace json = boost::json;

namespace {

// user: string ids; item: integer ids; plan: a category; score: a number.
const std::string kTable =
    "user,item,plan,score,label\n"
    "u1,7,pro,0.5,a\n"
    "u2,-0.5,,1.5,b\n"
    ",7.9,pro,2.5,a\n";

const char* kSpec = R"({"columns": {"user": {"encode": "hash", "num_bins": 1000},
                                     "item": {"encode": "hash", "num_bins": 50, "indicator": false},
                                     "plan": "drop", "score": {"scale": "none"}},
                         "crosses": [{"columns": ["user", "plan"], "num_bins": 64}]})";

}  // namespace

TEST_CASE("hashed columns and a cross: bins of fingerprints, as the Python client computes them") {
  const ParsedExamples p = csv(kTable);
  const PreprocessingSpec spec = spec_of(kSpec);
  const FittedPreprocessing f = fit_preprocessing(spec, *p.table, *p.table, values(p), p.size());
  // user (hash + indicator: a missing user), item (hash), score, the cross.
  REQUIRE(f.width() == 2 + 1 + 1 + 1);
  CHECK(preprocessed_width(spec, *p.table) == f.width());
  CHECK(f.feature_names() == std::vector<std::string>{"user=(hash)", "user_missing", "item=(hash)", "score", "user_x_plan=(cross)"});
  const std::vector<float> rows = apply_rows(f, p);
  // Known answers from pstrain.ids: fingerprint("u1") % 1000 = 425, ("u2") 355, ("") 421;
  // fingerprint(7) % 50 = 4, (-1) 15; cross(fp("u1"), fp("pro")) % 64 = 22, cross(fp("u2"), fp("")) 8.
  CHECK(std::vector<float>(rows.begin(), rows.begin() + 5) == std::vector<float>{425, 0, 4, 0.5f, 22});
  CHECK(std::vector<float>(rows.begin() + 5, rows.begin() + 10) == std::vector<float>{355, 0, 15, 1.5f, 8});
  CHECK(rows[10] == 421);  // a missing user: the empty string's bin
  CHECK(rows[11] == 1);
  CHECK(rows[12] == 4);  // 7.9: the integer at or below it, 7
  CHECK(rows[14] == static_cast<float>(fingerprint_bin(cross_fingerprint(kMissingIdFingerprint, string_fingerprint("pro")), 64)));

  // Records by field name give the stored rows' features; an unseen id has its own bin.
  std::vector<float> out(f.width());
  apply_preprocessing(f, json::parse(R"({"user": "u2", "item": -0.5, "plan": null, "score": 1.5})").as_object(), out.data());
  CHECK(out == std::vector<float>(rows.begin() + 5, rows.begin() + 10));
  apply_preprocessing(f, json::parse(R"({"user": null, "item": "7.9", "plan": "pro", "score": 2.5})").as_object(), out.data());
  CHECK(out == std::vector<float>(rows.begin() + 10, rows.begin() + 15));
  apply_preprocessing(f, json::parse(R"({"user": "zz-new", "item": 7, "plan": "gold", "score": 0})").as_object(), out.data());
  CHECK(out[0] == 26);  // pstrain.ids: fingerprint("zz-new") % 1000
  CHECK(out[1] == 0);
  CHECK(out[4] == static_cast<float>(fingerprint_bin(cross_fingerprint(string_fingerprint("zz-new"), string_fingerprint("gold")), 64)));

  // The fitted form's JSON applies bit for bit as the original.
  const FittedPreprocessing back = fitted_from_json(fitted_to_json(f));
  CHECK(back.crosses.size() == 1);
  CHECK(apply_rows(back, p) == rows);
  // The spec's JSON form reads back as the same steps.
  CHECK(json::serialize(preprocessing_to_object(read_preprocessing(preprocessing_to_object(spec)))) ==
        json::serialize(preprocessing_to_object(spec)));
}

TEST_CASE("a categorical type hashed by default, another split's codes: the same bins by name") {
  const ParsedExamples train = csv("c,x,label\nb,1,a\na,2,b\n");
  const ParsedExamples test = csv("c,x,label\nz,1,a\nb,2,b\n");  // its own codes: b is 0 here
  const PreprocessingSpec spec = spec_of(R"({"categorical": {"encode": "hash", "num_bins": 7}})");
  const FittedPreprocessing f = fit_preprocessing(spec, *train.table, *train.table, values(train), train.size());
  const std::vector<float> rows = apply_rows(f, test);
  CHECK(rows[0] == static_cast<float>(string_fingerprint("z") % 7));
  CHECK(rows[2] == static_cast<float>(string_fingerprint("b") % 7));
}

TEST_CASE("an id column: the bins a categorical column's names give, crossed, by field name, hashed or dropped") {
  CsvOptions ids;
  ids.types = {{"user", ColumnType::kId}};
  const ParsedExamples as_ids = csv(kTable, ids);
  const ParsedExamples as_categories = csv(kTable);
  REQUIRE(as_ids.table->columns[0].type == ColumnType::kId);
  CHECK(as_ids.table->row_width() == 5);
  const PreprocessingSpec spec = spec_of(kSpec);
  const FittedPreprocessing f = fit_preprocessing(spec, *as_ids.table, *as_ids.table, values(as_ids), as_ids.size());
  const FittedPreprocessing g = fit_preprocessing(spec, *as_categories.table, *as_categories.table, values(as_categories), as_categories.size());
  CHECK(preprocessed_width(spec, *as_ids.table) == f.width());
  CHECK(f.feature_names() == g.feature_names());
  const std::vector<float> rows = apply_rows(f, as_ids);
  CHECK(rows == apply_rows(g, as_categories));  // 425 for u1, 421 for the missing user, the cross
  CHECK(rows[0] == 425);
  CHECK(rows[11] == 1);
  std::vector<float> out(f.width());
  apply_preprocessing(f, json::parse(R"({"user": "u2", "item": -0.5, "plan": null, "score": 1.5})").as_object(), out.data());
  CHECK(out == std::vector<float>(rows.begin() + 5, rows.begin() + 10));
  apply_preprocessing(f, json::parse(R"({"user": "zz-new", "item": 7, "plan": "gold", "score": 0})").as_object(), out.data());
  CHECK(out[0] == 26);  // pstrain.ids: fingerprint("zz-new") % 1000
  apply_preprocessing(f, json::parse(R"({"user": 12, "item": 7, "plan": "gold", "score": 0})").as_object(), out.data());
  CHECK(out[0] == static_cast<float>(fingerprint_bin(string_fingerprint("12"), 1000)));  // an id is its text
  CHECK_THROWS_AS(apply_preprocessing(f, json::parse(R"({"user": [1], "item": 7, "plan": "gold", "score": 0})").as_object(), out.data()),
                  DataError);
  CHECK(apply_rows(fitted_from_json(fitted_to_json(f)), as_ids) == rows);

  const TableSchema& t = *as_ids.table;
  CHECK(width_error_path("{}", t) == "/preprocessing/columns/user");  // no default: hash or drop
  CHECK(width_error_path(R"({"columns": {"user": {"encode": "one_hot"}}})", t) == "/preprocessing/columns/user/encode");
  CHECK(width_error_path(R"({"columns": {"user": {"encode": "hash", "num_bins": 9, "separator": "|", "max_values": 2}}})", t) ==
        "/preprocessing/columns/user/separator");
  CHECK(width_error_path(R"({"columns": {"user": {"encode": "hash"}}})", t) == "/preprocessing/columns/user/num_bins");
  CHECK(width_error_path(R"({"columns": {"user": "drop"}})", t) == "(accepted)");
  CHECK(width_error_path(R"({"categorical": {"encode": "hash", "num_bins": 10}})", t) == "(accepted)");
  CHECK(width_error_path(R"({"columns": {"user": {"encode": "ids", "max_categories": 5, "impute": "most_frequent"}}})", t) ==
        "/preprocessing/columns/user/impute");
}

TEST_CASE("an id column looked up: the most frequent ids of the training rows, every other id and a missing one in the last slot") {
  CsvOptions ids;
  ids.types = {{"user", ColumnType::kId}};
  const ParsedExamples p = csv("user,x,label\na,1,0\nb,2,1\na,3,0\nc,4,1\n,5,0\na,6,1\nb,7,0\n", ids);
  const PreprocessingSpec spec = spec_of(R"({"columns": {"user": {"encode": "ids", "max_categories": 2}, "x": {"scale": "none"}}})");
  const FittedPreprocessing f = fit_preprocessing(spec, *p.table, *p.table, values(p), p.size());
  REQUIRE(f.columns[0].vocabulary.size() == 2);  // a (3 times) and b (twice), sorted by fingerprint
  const bool a_first = string_fingerprint("a") < string_fingerprint("b");
  const float a = a_first ? 0 : 1, b = a_first ? 1 : 0;
  CHECK(f.feature_names() == std::vector<std::string>{"user=(id)", "user_missing", "x"});
  CHECK(preprocessed_width(spec, *p.table) == 3);
  const std::vector<float> rows = apply_rows(f, p);
  CHECK(rows == std::vector<float>{a, 0, 1, b, 0, 2, a, 0, 3, 2, 0, 4, 2, 1, 5, a, 0, 6, b, 0, 7});
  std::vector<float> out(f.width());
  apply_preprocessing(f, json::parse(R"({"user": "b", "x": 7})").as_object(), out.data());
  CHECK(out == std::vector<float>{b, 0, 7});
  apply_preprocessing(f, json::parse(R"({"user": "never-seen", "x": 1})").as_object(), out.data());
  CHECK(out == std::vector<float>{2, 0, 1});
  apply_preprocessing(f, json::parse(R"({"user": null, "x": 1})").as_object(), out.data());
  CHECK(out == std::vector<float>{2, 1, 1});
  const FittedPreprocessing back = fitted_from_json(fitted_to_json(f));
  CHECK(back.columns[0].vocabulary == f.columns[0].vocabulary);
  CHECK(apply_rows(back, p) == rows);
  CHECK_THROWS_AS(fitted_from_json(std::string(fitted_to_json(f)).replace(fitted_to_json(f).find("\"vocabulary\":["), 14, "\"vocabulary\":[281474976710655,")),
                  DataError);  // not sorted
}

TEST_CASE("hashing and crosses: spec errors name their field") {
  const ParsedExamples p = csv("user,item,member,label\nu1,7,yes,a\nu2,8,no,b\n");
  auto path = [&](const std::string& text) { return width_error_path(text, *p.table); };
  CHECK(path(R"({"columns": {"member": {"encode": "hash", "num_bins": 4}}})") == "/preprocessing/columns/member/encode");
  CHECK(path(R"({"columns": {"item": {"encode": "hash", "num_bins": 4, "scale": "minmax"}}})") == "/preprocessing/columns/item/scale");
  CHECK(path(R"({"columns": {"item": {"encode": "hash", "num_bins": 4, "impute": "mean"}}})") == "/preprocessing/columns/item/impute");
  CHECK(path(R"({"crosses": [{"columns": ["user", "nope"], "num_bins": 4}]})") == "/preprocessing/crosses/0/columns/1");
  CHECK(path(R"({"crosses": [{"columns": ["user", "user"], "num_bins": 4}]})") == "/preprocessing/crosses/0/columns/1");
  CHECK(path(R"({"crosses": [{"columns": ["user", "item"], "num_bins": 4}, {"columns": ["item", "user"], "num_bins": 4, "name": "user_x_item"}]})") ==
        "/preprocessing/crosses/1/name");
  CHECK(path(R"({"crosses": [{"columns": ["user", "item"], "num_bins": 4}]})") == "(accepted)");
  CHECK(spec_error_path(R"({"columns": {"user": {"encode": "hash"}}})") == "/preprocessing/columns/user/num_bins");
  CHECK(spec_error_path(R"({"columns": {"user": {"encode": "hash", "num_bins": 16777217}}})") == "/preprocessing/columns/user/num_bins");
  CHECK(spec_error_path(R"({"columns": {"user": {"encode": "ids", "num_bins": 9}}})") == "/preprocessing/columns/user/num_bins");
  CHECK(spec_error_path(R"({"crosses": [{"columns": ["user"], "num_bins": 4}]})") == "/preprocessing/crosses/0/columns");
  CHECK(spec_error_path(R"({"crosses": [{"columns": ["user", "item"]}]})") == "/preprocessing/crosses/0/num_bins");
  CHECK(spec_error_path(R"({"crosses": [{"columns": ["user", "item"], "num_bins": 4, "bins": 3}]})") == "/preprocessing/crosses/0/bins");
  CHECK(spec_error_path(R"({"crosses": {"columns": ["user", "item"]}})") == "/preprocessing/crosses");
}

TEST_CASE("a multi-valued column: each cell's pieces hashed into max_values places, -1 for padding") {
  // tags: pieces split on '|', trimmed; a missing cell; more pieces than places.
  const ParsedExamples p = csv("tags,x,label\ndrama|comedy,1,a\n,2,b\na | b |c|drama,3,a\n|,4,b\n");
  const PreprocessingSpec spec = spec_of(R"({"columns": {"tags": {"encode": "hash", "num_bins": 100, "separator": "|", "max_values": 3}},
                                             "numeric": {"scale": "none"}})");
  const FittedPreprocessing f = fit_preprocessing(spec, *p.table, *p.table, values(p), p.size());
  REQUIRE(f.width() == 3 + 1 + 1);  // the places, the indicator (a missing cell), x
  CHECK(preprocessed_width(spec, *p.table) == f.width());
  CHECK(f.feature_names() == std::vector<std::string>{"tags=(hash 0)", "tags=(hash 1)", "tags=(hash 2)", "tags_missing", "x"});
  // Known answers from pstrain.ids: fingerprint(t) % 100 for drama 0, comedy 80, a 36, b 31, c 96.
  const std::vector<float> rows = apply_rows(f, p);
  CHECK(rows == std::vector<float>{0, 80, -1, 0, 1, /**/ -1, -1, -1, 1, 2, /**/ 36, 31, 96, 0, 3, /**/ -1, -1, -1, 1, 4});
  // Records: the cell's text or a list of its ids give the stored rows' features.
  std::vector<float> out(f.width());
  apply_preprocessing(f, json::parse(R"({"tags": ["drama", "comedy"], "x": 1})").as_object(), out.data());
  CHECK(out == std::vector<float>(rows.begin(), rows.begin() + 5));
  apply_preprocessing(f, json::parse(R"({"tags": "drama | comedy", "x": 1})").as_object(), out.data());
  CHECK(out == std::vector<float>(rows.begin(), rows.begin() + 5));
  apply_preprocessing(f, json::parse(R"({"tags": [" drama", "", "comedy\t"], "x": 1})").as_object(), out.data());
  CHECK(out == std::vector<float>(rows.begin(), rows.begin() + 5));  // a list's ids trimmed as pieces are
  for (const char* none : {R"({"tags": null, "x": 2})", R"({"tags": [], "x": 2})", R"({"tags": "", "x": 2})"}) {
    apply_preprocessing(f, json::parse(none).as_object(), out.data());
    CHECK(out == std::vector<float>(rows.begin() + 5, rows.begin() + 10));
  }
  apply_preprocessing(f, json::parse(R"({"tags": ["new", "a", "b", "c"], "x": 0})").as_object(), out.data());
  CHECK(std::vector<float>(out.begin(), out.begin() + 3) == std::vector<float>{98, 36, 31});  // unseen "new" too
  CHECK_THROWS_AS(apply_preprocessing(f, json::parse(R"({"tags": [{"a": 1}], "x": 0})").as_object(), out.data()), DataError);
  CHECK_THROWS_AS(apply_preprocessing(f, json::parse(R"({"tags": true, "x": 0})").as_object(), out.data()), DataError);
  // The fitted JSON keeps the places and the separator; the spec's JSON reads back.
  CHECK(apply_rows(fitted_from_json(fitted_to_json(f)), p) == rows);
  CHECK(json::serialize(preprocessing_to_object(read_preprocessing(preprocessing_to_object(spec)))) ==
        json::serialize(preprocessing_to_object(spec)));
  // Errors name the field.
  auto path = [&](const std::string& text) { return width_error_path(text, *p.table); };
  CHECK(path(R"({"columns": {"tags": {"encode": "hash", "num_bins": 9, "separator": "|"}}})") == "/preprocessing/columns/tags/max_values");
  CHECK(path(R"({"columns": {"tags": {"encode": "hash", "num_bins": 9, "max_values": 2}}})") == "/preprocessing/columns/tags/separator");
  CHECK(path(R"({"columns": {"tags": {"separator": "|", "max_values": 2}}})") == "/preprocessing/columns/tags/separator");
  CHECK(path(R"({"columns": {"x": {"encode": "hash", "num_bins": 9, "separator": "|", "max_values": 2}}})") == "/preprocessing/columns/x/separator");
  CHECK(path(R"({"columns": {"tags": {"encode": "hash", "num_bins": 9, "separator": "|", "max_values": 2}},
                 "crosses": [{"columns": ["x", "tags"], "num_bins": 4}]})") == "/preprocessing/crosses/0/columns/1");
  CHECK(spec_error_path(R"({"columns": {"tags": {"encode": "hash", "num_bins": 9, "separator": "|", "max_values": 257}}})") ==
        "/preprocessing/columns/tags/max_values");
  CHECK(spec_error_path(R"({"columns": {"tags": {"encode": "hash", "num_bins": 9, "separator": "", "max_values": 2}}})") ==
        "/preprocessing/columns/tags/separator");
  CHECK(spec_error_path(R"({"categorical": {"encode": "hash", "num_bins": 9, "separator": "|"}})") == "/preprocessing/categorical/separator");
}
