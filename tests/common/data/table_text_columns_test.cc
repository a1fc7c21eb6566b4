// A table's text columns through the tokenizer (preprocessing.h FittedTextColumn): the width known
// at submit, the steps a text column takes and the errors naming the field, the features' place
// (after the other columns' and the crosses'), rows and records giving the same features, and the
// fitted form's JSON. (Fitting on stored cells, workers and the cluster: table_text_test.cc.)
#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <string>
#include <vector>

#include "common/data/dataset_formats.h"
#include "common/data/preprocessing.h"
#include "common/data/tokenizer.h"
#include "tests/common/data/preprocessing_helpers.h"

using namespace pstrain;
using namespace pstrain::testing;
namespace json = boost::json;

namespace {

struct Cells final : TextCellSink {
  std::vector<std::vector<std::string>> by_column;
  void cell(size_t k, std::string_view text) override {
    if (by_column.size() <= k) by_column.resize(k + 1);
    by_column[k].emplace_back(text);
  }
};

const std::string kReviews =
    "stars,review,city,label\n"
    "5,\"Great food, great staff!\",Oslo,pos\n"
    "1,\"Cold soup.\",Lyon,neg\n"
    "4,,Oslo,pos\n"
    "2,\"The soup was cold, the staff rude\",Lyon,neg\n";

ParsedExamples reviews(Cells& cells) {
  CsvOptions options;
  options.types["review"] = ColumnType::kText;
  options.text_cells = &cells;
  return csv(kReviews, options);
}

// The preprocessing of `spec` with the review's tokenizer fitted on its cells, as fit_on_split does.
FittedPreprocessing fitted_with_text(const std::string& spec_text, const ParsedExamples& p, const std::vector<std::string>& cells) {
  const PreprocessingSpec spec = spec_of(spec_text);
  FittedPreprocessing f = fit_preprocessing(spec, *p.table, *p.table, values(p), p.size());
  TokenizerFit fit(*text_steps(spec, "review"));
  for (const std::string& c : cells) fit.add(c);
  if (fit.needs_second_pass()) {
    for (const std::string& c : cells) fit.add_second(c);
  }
  f.text_columns.push_back({"review", std::make_shared<const FittedTokenizer>(fit.finish())});
  std::erase(f.other_columns, "review");
  return f;
}

}  // namespace

TEST_CASE("a table's text column: its tokenizer's width is known at submit, and only text columns take one") {
  Cells cells;
  const ParsedExamples p = reviews(cells);
  REQUIRE(p.table->text_columns().size() == 1);
  // stars (1) + city one-hot (2 + other): 4; the review's ids add output_sequence_length.
  CHECK(preprocessed_width(spec_of("{}"), *p.table) == 4);
  CHECK(preprocessed_width(spec_of(R"({"columns": {"review": {"text": {"max_tokens": 9, "output_sequence_length": 6}}}})"), *p.table) == 10);
  CHECK(preprocessed_width(spec_of(R"({"text": {"max_tokens": 9, "output_mode": "multi_hot"}})"), *p.table) == 13);
  CHECK(preprocessed_width(spec_of(R"({"text": {"max_tokens": 9, "output_mode": "count"}, "columns": {"review": "drop"}})"), *p.table) == 4);
  // Errors name the field.
  CHECK(width_error_path(R"({"columns": {"stars": {"text": {"max_tokens": 9, "output_mode": "count"}}}})", *p.table) == "/preprocessing/columns/stars/text");
  CHECK(width_error_path(R"({"columns": {"review": {"impute": "most_frequent"}}})", *p.table) == "/preprocessing/columns/review/impute");
  CHECK(width_error_path(R"({"columns": {"review": {"text": {"max_tokens": 9, "output_mode": "count"}, "encode": "ids"}}})", *p.table) ==
        "/preprocessing/columns/review/encode");
  CHECK(width_error_path(R"({"columns": {"review": {"text": {"max_tokens": 9, "output_mode": "count"}, "drop": true}}})", *p.table) ==
        "/preprocessing/columns/review/drop");
  CHECK(spec_error_path(R"({"categorical": {"text": {"max_tokens": 9, "output_mode": "count"}}})") == "/preprocessing/categorical/text");
  CHECK(spec_error_path(R"({"columns": {"review": {"text": {"max_tokens": 0}}}})").starts_with("/preprocessing/columns/review/text"));
  const ParsedExamples numbers = csv("a,label\n1,x\n2,y\n");
  CHECK(width_error_path(R"({"text": {"max_tokens": 9, "output_mode": "count"}})", *numbers.table) == "/preprocessing/text");
  // A table whose only features are text: a tokenizer is required.
  Cells only;
  CsvOptions options;
  options.types["note"] = ColumnType::kText;
  options.text_cells = &only;
  const ParsedExamples notes = csv("note,label\n\"late, cold\",bad\n\"warm\",good\n", options);
  CHECK(width_error_path("{}", *notes.table) == "/preprocessing/text");
  CHECK(preprocessed_width(spec_of(R"({"text": {"max_tokens": 5, "output_mode": "multi_hot"}})"), *notes.table) == 5);
  // The spec's JSON keeps the column's tokenizer.
  const PreprocessingSpec spec = spec_of(R"({"columns": {"review": {"text": {"max_tokens": 9, "ngrams": 2, "output_mode": "multi_hot"}}}})");
  CHECK(json::serialize(preprocessing_to_object(spec_of(json::serialize(preprocessing_to_object(spec))))) ==
        json::serialize(preprocessing_to_object(spec)));
}

TEST_CASE("a table's text column: its features follow the others', rows and records agree, and the fitted JSON applies the same") {
  Cells cells;
  const ParsedExamples p = reviews(cells);
  REQUIRE(cells.by_column.size() == 1);
  REQUIRE(cells.by_column[0].size() == 4);
  CHECK(cells.by_column[0][2].empty());  // a missing cell is empty text
  for (const std::string mode : {"int", "tf_idf"}) {
    INFO(mode);
    const std::string spec = R"({"columns": {"review": {"text": {"max_tokens": 8, "output_mode": ")" + mode + "\"" +
                             (mode == "int" ? R"(, "output_sequence_length": 5)" : "") + "}}}}";
    const FittedPreprocessing f = fitted_with_text(spec, p, cells.by_column[0]);
    const uint32_t tokens = mode == "int" ? 5 : 8;
    CHECK(f.table_width() == 4);
    CHECK(f.width() == 4 + tokens);
    CHECK(f.text_offset(0) == 4);
    const std::vector<std::string> names = f.feature_names();
    REQUIRE(names.size() == f.width());
    CHECK(names[4] == (mode == "int" ? "review=token 0" : "review=[UNK]"));
    // Rows: the table's features, zeros where the text goes, then each cell's tokens.
    std::vector<float> rows = apply_rows(f, p);
    for (size_t i = 0; i < p.size(); ++i) {
      for (uint32_t j = 4; j < f.width(); ++j) CHECK(rows[i * f.width() + j] == 0.0f);
      apply_text_cell(f, 0, cells.by_column[0][i], rows.data() + i * f.width());
    }
    std::vector<float> alone(tokens);
    f.text_columns[0].tokenizer->apply("Cold soup.", alone.data());
    CHECK(std::vector<float>(rows.begin() + f.width() + 4, rows.begin() + 2 * f.width()) == alone);
    // A record by field name gives row 1's features; null text is the empty cell's.
    std::vector<float> record(f.width());
    apply_preprocessing(f, json::parse(R"({"stars": 1, "review": "Cold soup.", "city": "Lyon"})").as_object(), record.data());
    CHECK(record == std::vector<float>(rows.begin() + f.width(), rows.begin() + 2 * f.width()));
    apply_preprocessing(f, json::parse(R"({"stars": 4, "review": null, "city": "Oslo"})").as_object(), record.data());
    CHECK(record == std::vector<float>(rows.begin() + 2 * f.width(), rows.begin() + 3 * f.width()));
    apply_preprocessing(f, json::parse(R"({"stars": 4, "review": "NA", "city": "Oslo"})").as_object(), record.data());
    CHECK(record == std::vector<float>(rows.begin() + 2 * f.width(), rows.begin() + 3 * f.width()));  // stored as ""
    CHECK_THROWS_WITH_AS(apply_preprocessing(f, json::parse(R"({"stars": 4, "city": "Oslo"})").as_object(), record.data()),
                         doctest::Contains("'review' is missing"), DataError);
    CHECK_THROWS_WITH_AS(apply_preprocessing(f, json::parse(R"({"stars": 4, "review": 3, "city": "Oslo"})").as_object(), record.data()),
                         doctest::Contains("field 'review'"), DataError);
    // The fitted JSON (the model file's) applies bit for bit.
    const FittedPreprocessing back = fitted_from_json(fitted_to_json(f));
    CHECK(fitted_to_json(back) == fitted_to_json(f));
    REQUIRE(back.text_columns.size() == 1);
    std::vector<float> again(back.width());
    apply_preprocessing(back, json::parse(R"({"stars": 1, "review": "Cold soup.", "city": "Lyon"})").as_object(), again.data());
    CHECK(again == std::vector<float>(rows.begin() + f.width(), rows.begin() + 2 * f.width()));
  }
}
