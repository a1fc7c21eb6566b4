// CSV tables as users have them (dataset_formats.h stream_csv, csv_records.h, table_schema.h):
// RFC 4180 quoting, separators, byte order marks and line ends; inferred and given column types;
// missing values; class names; the profile; the schema's JSON.
#include "common/data/csv_records.h"
#include "common/data/dataset_formats.h"
#include "common/data/table_schema.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/data/dataset.h"
#include "common/data/dataset_manifest.h"
#include "common/data/id_hash.h"
#include "tests/test_support.h"

using pstrain::ColumnType;
using pstrain::CsvOptions;
using pstrain::CsvRecords;
using pstrain::DatasetFormatError;
using pstrain::ParsedExamples;
using pstrain::TableSchema;
using Kind = DatasetFormatError::Kind;

namespace {

ParsedExamples csv(const std::string& text, const CsvOptions& options = {}) {
  std::istringstream in(text);
  return pstrain::parse_csv(in, "t.csv", options);
}

std::vector<float> floats_of(const ParsedExamples& p) {
  std::vector<float> v(p.bytes.size() / sizeof(float));
  std::memcpy(v.data(), p.bytes.data(), v.size() * sizeof(float));
  return v;
}

std::vector<std::vector<std::string>> records(const std::string& text, char separator, std::vector<uint64_t>* lines = nullptr) {
  std::istringstream in(text);
  CsvRecords r(in, "t.csv", separator, 1 << 20);
  std::vector<std::string_view> fields;
  std::vector<std::vector<std::string>> out;
  while (r.next(fields)) {
    out.emplace_back(fields.begin(), fields.end());
    if (lines) lines->push_back(r.line());
  }
  return out;
}

Kind failure_kind(const std::string& text, const CsvOptions& options = {}, uint64_t* line = nullptr, std::string* column = nullptr) {
  try {
    csv(text, options);
  } catch (const DatasetFormatError& e) {
    if (line) *line = e.line();
    if (column) *column = e.column();
    return e.kind();
  }
  FAIL("no error");
  return Kind::kUnreadable;
}

}  // namespace

TEST_CASE("CSV records follow RFC 4180: quotes, doubled quotes, separators and line breaks inside quotes") {
  std::vector<uint64_t> lines;
  const auto r = records("a,b,c\r\n\"x, y\",\"say \"\"hi\"\"\",\"two\nlines\"\r\n  plain  , \"q\" ,\r\n\n\"\",z,\n", ',', &lines);
  REQUIRE(r.size() == 4);
  CHECK(r[0] == std::vector<std::string>{"a", "b", "c"});
  CHECK(r[1] == std::vector<std::string>{"x, y", "say \"hi\"", "two\nlines"});
  CHECK(r[2] == std::vector<std::string>{"plain", "q", ""});
  CHECK(r[3] == std::vector<std::string>{"", "z", ""});
  // Each record's first line, counting the line break inside the quoted field and the blank line.
  CHECK(lines == std::vector<uint64_t>{1, 2, 4, 6});
  // A lone CR ends a record too; a quote inside an unquoted field is an ordinary character.
  CHECK(records("a;b\rc;5\"\r", ';') == std::vector<std::vector<std::string>>{{"a", "b"}, {"c", "5\""}});
  // Tabs separate and are kept inside fields when the tab is the separator.
  CHECK(records("a\tb\n x \t\n", '\t') == std::vector<std::vector<std::string>>{{"a", "b"}, {"x", ""}});
  // A byte order mark is skipped; UTF-8 text is kept as it is; other bytes are an error naming the line.
  CHECK(records("\xEF\xBB\xBF" "a,b\n", ',') == std::vector<std::vector<std::string>>{{"a", "b"}});
  CHECK(records("caf\xC3\xA9,\xE2\x82\xAC\n", ',') == std::vector<std::vector<std::string>>{{"caf\xC3\xA9", "\xE2\x82\xAC"}});
  for (const char* bad : {"\xEF" "a,b\n", "a\nx,caf\xE9\n", "a\n\xC0\xAF\n", "a\n\xED\xA0\x80\n"}) {
    try {
      records(bad, ',');
      FAIL("accepted ", bad);
    } catch (const DatasetFormatError& e) {
      CHECK(e.kind() == Kind::kBadEncoding);
      CHECK(e.line() == (bad[0] == '\xEF' ? 1u : 2u));
    }
  }
}

TEST_CASE("the separator is detected from the header line, outside quotes") {
  auto detect = [](const std::string& text) {
    std::istringstream in(text);
    return pstrain::detect_csv_separator(in, 1 << 20);
  };
  CHECK(detect("a,b,c\n1;2;3;4;5\n") == ',');
  CHECK(detect("a;b;c\n") == ';');
  CHECK(detect("a\tb\tc\n") == '\t');
  CHECK(detect("\"x;y;z\",b\n") == ',');
  CHECK(detect("single\n") == ',');
  // A semicolon file with decimal commas, as European spreadsheets write it.
  const ParsedExamples p = csv("height;weight;label\n\"1,5\";2;0\n3;4;1\n");
  CHECK(p.table->separator == ';');
  CHECK(p.table->columns[0].type == ColumnType::kCategorical);  // "1,5" is not a number
  CHECK(floats_of(csv("x\ty\tlabel\n1\t2\t0\n3\t4\t1\n")) == std::vector<float>{1, 2, 3, 4});
}

TEST_CASE("column types are inferred from the whole file, categories get sorted codes, missing cells are NaN") {
  const ParsedExamples p = csv(
      "plan,age,member,label\n"
      "pro,31,yes,0\n"
      "basic,NA,No,1\n"
      "family,45.5,,1\n"
      "pro,?,TRUE,0\n"
      ",20,false,1\n");
  REQUIRE(p.table);
  const TableSchema& t = *p.table;
  REQUIRE(t.columns.size() == 3);
  CHECK(t.columns[0].type == ColumnType::kCategorical);
  CHECK(t.columns[0].categories == std::vector<std::string>{"basic", "family", "pro"});
  CHECK(t.columns[1].type == ColumnType::kNumeric);
  CHECK(t.columns[2].type == ColumnType::kBoolean);
  CHECK(t.rows == 5);
  CHECK(t.needs_preprocessing());
  const std::vector<float> v = floats_of(p);
  REQUIRE(v.size() == 15);
  const float nan = std::nanf("");
  const std::vector<float> expected = {2, 31, 1, 0, nan, 0, 1, 45.5f, nan, 2, nan, 1, nan, 20, 0};
  for (size_t i = 0; i < v.size(); ++i) {
    CHECK_MESSAGE((std::isnan(expected[i]) ? std::isnan(v[i]) : v[i] == expected[i]), "value ", i);
  }
  // The profile: missing counts, numeric moments (sample std), most frequent categories.
  CHECK(t.columns[0].profile.missing == 1);
  CHECK(t.columns[0].profile.top == std::vector<std::pair<std::string, uint64_t>>{{"pro", 2}, {"basic", 1}, {"family", 1}});
  CHECK(t.columns[1].profile.missing == 2);
  CHECK(t.columns[1].profile.min == 20);
  CHECK(t.columns[1].profile.max == 45.5);
  CHECK(t.columns[1].profile.mean == doctest::Approx((31 + 45.5 + 20) / 3.0));
  const double m = (31 + 45.5 + 20) / 3.0;
  CHECK(t.columns[1].profile.std == doctest::Approx(std::sqrt(((31 - m) * (31 - m) + (45.5 - m) * (45.5 - m) + (20 - m) * (20 - m)) / 2)));
  CHECK(t.columns[2].profile.missing == 1);
  CHECK(t.columns[2].profile.top == std::vector<std::pair<std::string, uint64_t>>{{"false", 2}, {"true", 2}});
  // A purely numeric table needs no preprocessing and reads as before.
  CHECK_FALSE(csv("a,label\n1,0\n2,1\n").table->needs_preprocessing());
}

TEST_CASE("types given by name override inference: numbers as categories, a column ignored") {
  CsvOptions options;
  options.types = {{"zip", ColumnType::kCategorical}, {"id", ColumnType::kIgnored}};
  const ParsedExamples p = csv("id,zip,x,label\n1,10115,0.5,0\n2,80331,1.5,1\n3,10115,2.5,1\n", options);
  CHECK(p.shape == std::vector<uint32_t>{2});
  CHECK(p.table->columns[0].type == ColumnType::kIgnored);
  CHECK(p.table->columns[1].categories == std::vector<std::string>{"10115", "80331"});
  CHECK(floats_of(p) == std::vector<float>{0, 0.5f, 1, 1.5f, 0, 2.5f});
  CHECK(p.table->stored_columns().size() == 2);
  // The label's type cannot be set, and a table must keep a feature.
  options.types = {{"label", ColumnType::kNumeric}};
  CHECK(failure_kind("a,label\n1,0\n2,1\n", options) == Kind::kBadHeader);
  options.types = {{"a", ColumnType::kIgnored}};
  CHECK(failure_kind("a,label\n1,0\n2,1\n", options) == Kind::kBadHeader);
  // Missing values can be named: here "-" is missing and "" is not a number.
  CsvOptions missing;
  missing.missing_values = {"-"};
  CHECK(std::isnan(floats_of(csv("a,label\n-,0\n2,1\n", missing))[0]));
}

TEST_CASE("string labels become classes with their names, sorted, and another split's names are kept") {
  const ParsedExamples p = csv("x,species\n1,setosa\n2,virginica\n3,versicolor\n4,setosa\n", [] {
    CsvOptions o;
    o.label_column = "species";
    return o;
  }());
  CHECK(p.table->class_names == std::vector<std::string>{"setosa", "versicolor", "virginica"});
  CHECK(p.labels == std::vector<int32_t>{0, 2, 1, 0});
  CHECK(p.classes == 3);
  CHECK(csv("x,label\n1,yes\n2,no\n").labels == std::vector<int32_t>{1, 0});
  // A test split takes the train split's names: fewer classes are fine, unknown ones are not.
  CsvOptions fixed;
  fixed.class_names = {"no", "yes"};
  CHECK(csv("x,label\n1,yes\n2,yes\n", fixed).labels == std::vector<int32_t>{1, 1});
  uint64_t line = 0;
  std::string column;
  CHECK(failure_kind("x,label\n1,yes\n2,maybe\n", fixed, &line, &column) == Kind::kBadLabel);
  CHECK(line == 3);
  CHECK(column == "label");
  // One name is too few classes.
  CHECK(failure_kind("x,label\n1,a\n2,a\n") == Kind::kTooFewClasses);
}

TEST_CASE("a real-world file: quoted fields with commas, text columns, NA, as penguins_raw.csv has them") {
  // The first rows of palmerpenguins' penguins_raw.csv (r-cran-palmerpenguins), shortened.
  const std::string text =
      "studyName,Sample Number,Species,Stage,Clutch Completion,Culmen Length (mm),Body Mass (g),Sex,Comments\n"
      "PAL0708,1,Adelie Penguin (Pygoscelis adeliae),\"Adult, 1 Egg Stage\",Yes,39.1,3750,MALE,Not enough blood for isotopes.\n"
      "PAL0708,2,Adelie Penguin (Pygoscelis adeliae),\"Adult, 1 Egg Stage\",Yes,39.5,3800,FEMALE,NA\n"
      "PAL0708,4,Adelie Penguin (Pygoscelis adeliae),\"Adult, 1 Egg Stage\",Yes,NA,NA,NA,Adult not sampled.\n"
      "PAL0809,5,Gentoo penguin (Pygoscelis papua),\"Adult, 1 Egg Stage\",No,46.1,4500,FEMALE,\"Nest never observed with full clutch.\"\n";
  CsvOptions options;
  options.label_column = "Species";
  const ParsedExamples p = csv(text, options);
  const TableSchema& t = *p.table;
  CHECK(t.class_names == std::vector<std::string>{"Adelie Penguin (Pygoscelis adeliae)", "Gentoo penguin (Pygoscelis papua)"});
  CHECK(p.labels == std::vector<int32_t>{0, 0, 0, 1});
  REQUIRE(t.columns.size() == 8);
  CHECK(t.columns[2].name == "Stage");
  CHECK(t.columns[2].categories == std::vector<std::string>{"Adult, 1 Egg Stage"});
  CHECK(t.columns[3].type == ColumnType::kBoolean);
  CHECK(t.columns[4].type == ColumnType::kNumeric);
  CHECK(t.columns[4].profile.missing == 1);
  CHECK(t.columns[6].categories == std::vector<std::string>{"FEMALE", "MALE"});
  CHECK(t.columns[7].profile.missing == 1);
}

TEST_CASE("a table schema survives its JSON form") {
  const ParsedExamples p = csv("plan,age,member,label\npro,31,yes,a\nbasic,NA,no,b\n");
  const std::string text = pstrain::table_to_json(*p.table);
  const TableSchema back = pstrain::table_from_json(text, "t.json");
  CHECK(pstrain::table_to_json(back) == text);  // (31 parses back exactly; not every double does in Boost 1.81)
  CHECK(back.class_names == std::vector<std::string>{"a", "b"});
  CHECK(back.columns[0].categories == std::vector<std::string>{"basic", "pro"});
  CHECK(back.columns[1].profile.missing == 1);
  CHECK_THROWS_AS(pstrain::table_from_json("{\"separator\": \",\"}", "t.json"), pstrain::DataError);
  CHECK_THROWS_AS(pstrain::table_from_json("not json", "t.json"), pstrain::DataError);
}

TEST_CASE("a string column with more distinct values than a category may have is an id (its fingerprint), refused when told categorical") {
  std::string text = "user,x,label\n";
  const uint32_t n = pstrain::kMaxCategories + 2;  // 65,537 present ids, one missing
  for (uint32_t i = 0; i < n; ++i) text += (i == 7 ? std::string() : "u" + std::to_string(i)) + ",1," + std::to_string(i % 2) + "\n";
  const ParsedExamples read = csv(text);
  CHECK(read.shape == std::vector<uint32_t>{3});  // the id's two values, then x
  REQUIRE(read.table);
  const pstrain::TableColumn& user = read.table->columns[0];
  CHECK(user.type == ColumnType::kId);
  CHECK(read.table->row_width() == 3);
  CHECK(user.profile.missing == 1);
  // HyperLogLog's estimate of the 65,537 present ids: within 3% (its standard error is 0.8%).
  CHECK(std::abs(static_cast<double>(user.profile.distinct_estimate) - (n - 1)) < 0.03 * (n - 1));
  const std::vector<float> values = floats_of(read);
  for (const uint32_t i : {0u, 1u, 12345u, n - 1}) {
    uint64_t fingerprint = 0;
    REQUIRE(pstrain::fingerprint_from_values(values[i * 3], values[i * 3 + 1], &fingerprint));
    CHECK(fingerprint == pstrain::string_fingerprint("u" + std::to_string(i)));
    CHECK(values[i * 3 + 2] == 1.0f);
  }
  CHECK(std::isnan(values[7 * 3]));
  CHECK(std::isnan(values[7 * 3 + 1]));
  // The schema's JSON keeps the type and the estimate.
  const TableSchema back = pstrain::table_from_json(pstrain::table_to_json(*read.table), "t.json");
  CHECK(back.columns[0].type == ColumnType::kId);
  CHECK(back.columns[0].profile.distinct_estimate == user.profile.distinct_estimate);

  CsvOptions categorical;
  categorical.types = {{"user", ColumnType::kCategorical}};
  std::string column;
  CHECK(failure_kind(text, categorical, nullptr, &column) == Kind::kTooLarge);
  CHECK(column == "user");
  CsvOptions as_text;
  as_text.types = {{"user", ColumnType::kText}};
  CHECK(csv(text, as_text).shape == std::vector<uint32_t>{1});
  CsvOptions ignore;
  ignore.types = {{"user", ColumnType::kIgnored}};
  CHECK(csv(text, ignore).shape == std::vector<uint32_t>{1});
}

TEST_CASE("free text stays text whatever its count of distinct values, and a few ids told id are ids") {
  std::string text = "review,plan,label\n";
  for (uint32_t i = 0; i < 40; ++i) text += "this was review number " + std::to_string(i) + ",p" + std::to_string(i % 3) + "," + std::to_string(i % 2) + "\n";
  CHECK(csv(text).table->columns[0].type == ColumnType::kText);
  CHECK(csv(text).table->columns[1].type == ColumnType::kCategorical);
  CsvOptions ids;
  ids.types = {{"plan", ColumnType::kId}};
  const ParsedExamples read = csv(text, ids);
  CHECK(read.table->columns[1].type == ColumnType::kId);
  CHECK(read.table->columns[1].profile.distinct_estimate == 3);
  const std::vector<float> values = floats_of(read);
  uint64_t fingerprint = 0;
  REQUIRE(pstrain::fingerprint_from_values(values[2 * 2], values[2 * 2 + 1], &fingerprint));
  CHECK(fingerprint == pstrain::string_fingerprint("p2"));
}

TEST_CASE("JSON Lines: keys in first-seen order, absent or null as missing, the same types and labels as CSV") {
  std::istringstream in(
      "{\"plan\": \"pro\", \"age\": 31, \"member\": true, \"label\": \"a\"}\n"
      "\n"
      "{\"age\": null, \"plan\": \"basic\", \"label\": \"b\", \"extra\": 2.5}\r\n"
      "{\"plan\": \"pro\", \"age\": 1e2, \"member\": false, \"label\": \"a\", \"extra\": 7}\n");
  const ParsedExamples p = pstrain::parse_jsonl(in, "t.jsonl");
  const TableSchema& t = *p.table;
  REQUIRE(t.columns.size() == 4);
  CHECK(t.columns[0].name == "plan");
  CHECK(t.columns[0].type == ColumnType::kCategorical);
  CHECK(t.columns[1].type == ColumnType::kNumeric);
  CHECK(t.columns[2].type == ColumnType::kBoolean);
  CHECK(t.columns[3].name == "extra");
  CHECK(t.class_names == std::vector<std::string>{"a", "b"});
  const std::vector<float> v = floats_of(p);
  REQUIRE(v.size() == 12);
  CHECK(v[0] == 1);  // pro
  CHECK(v[1] == 31);
  CHECK(std::isnan(v[3]));   // extra absent
  CHECK(std::isnan(v[5]));   // age null
  CHECK(std::isnan(v[6]));   // member absent
  CHECK(v[7] == 2.5f);
  CHECK(v[9] == 100);
  CHECK(p.labels == std::vector<int32_t>{0, 1, 0});
  auto kind_line = [](const std::string& text) {
    std::istringstream s(text);
    try {
      pstrain::parse_jsonl(s, "t.jsonl");
    } catch (const DatasetFormatError& e) {
      return std::make_pair(e.kind(), e.line());
    }
    return std::make_pair(Kind::kUnreadable, uint64_t{0});
  };
  CHECK(kind_line("{\"a\": 1, \"label\": 0}\n[1, 2]\n") == std::make_pair(Kind::kBadRecord, uint64_t{2}));
  CHECK(kind_line("{\"a\": 1, \"label\": 0}\n{\"a\": {\"b\": 1}, \"label\": 1}\n") == std::make_pair(Kind::kBadRecord, uint64_t{2}));
  CHECK(kind_line("{\"a\": 1, \"label\": 0}\n{\"a\": 2, \"label\": \n") == std::make_pair(Kind::kBadRecord, uint64_t{2}));
  CHECK(kind_line("{\"a\": 1}\n").first == Kind::kMissingLabelColumn);
  CHECK(kind_line("").first == Kind::kEmpty);
  // A list of ids is one cell joined by '|' ([] missing); lists of other things are refused.
  CHECK(kind_line("{\"a\": [\"x\"], \"label\": 0}\n{\"a\": [\"x|y\"], \"label\": 1}\n") == std::make_pair(Kind::kBadRecord, uint64_t{2}));
  CHECK(kind_line("{\"a\": [1.5], \"label\": 0}\n") == std::make_pair(Kind::kBadRecord, uint64_t{1}));
  CHECK(kind_line("{\"a\": [[1]], \"label\": 0}\n") == std::make_pair(Kind::kBadRecord, uint64_t{1}));
}

TEST_CASE("JSON Lines: a list of ids is one cell, its items joined by '|', the same as the CSV cell") {
  std::istringstream in(
      "{\"tags\": [\"drama\", 7], \"label\": 0}\n"
      "{\"tags\": [], \"label\": 1}\n"
      "{\"tags\": [\"comedy\"], \"label\": 1}\n"
      "{\"tags\": \"drama|7\", \"label\": 0}\n");
  const ParsedExamples p = pstrain::parse_jsonl(in, "t.jsonl");
  REQUIRE(p.table->columns.size() == 1);
  CHECK(p.table->columns[0].type == ColumnType::kCategorical);
  CHECK(p.table->columns[0].categories == std::vector<std::string>{"comedy", "drama|7"});
  CHECK(p.table->columns[0].profile.missing == 1);
  const std::vector<float> v = floats_of(p);
  REQUIRE(v.size() == 4);
  CHECK(v[0] == 1);
  CHECK(std::isnan(v[1]));
  CHECK(v[2] == 0);
  CHECK(v[3] == 1);
}

TEST_CASE("a column that turns to text after numbers gets every value as a category, and labels too") {
  // Numbers are not collected while a column looks numeric (the parse's hot path); a later text
  // cell makes the parser collect the column again from the start.
  const ParsedExamples p = csv("a,b,label\n1,2,0\n3,4,1\nx,5,0\n7,8,one\n1,9,1\n");
  REQUIRE(p.table);
  CHECK(p.table->columns[0].type == ColumnType::kCategorical);
  CHECK(p.table->columns[0].categories == std::vector<std::string>{"1", "3", "7", "x"});
  CHECK(p.table->class_names == std::vector<std::string>{"0", "1", "one"});
  CHECK(floats_of(p) == std::vector<float>{0, 2, 1, 4, 3, 5, 2, 8, 0, 9});
  CHECK(p.labels == std::vector<int32_t>{0, 1, 0, 2, 1});
  // Told categorical: collected from the first row, no further pass needed.
  CsvOptions told;
  told.types = {{"b", ColumnType::kCategorical}};
  CHECK(csv("a,b,label\n1,2,0\n3,10,1\n", told).table->columns[1].categories == std::vector<std::string>{"10", "2"});
}

TEST_CASE("a dataset directory of text tables: the test split takes the train split's columns and classes") {
  pstrain::testing::TempDir dir;
  const std::string d = dir.path() + "/shop";
  std::filesystem::create_directories(d);
  std::ofstream(d + "/dataset.json") << R"({"train": {"csv": "train.csv", "label": "y"}, "test": {"jsonl": "test.jsonl", "label": "y"}})";
  std::ofstream(d + "/train.csv") << "size,colour,y\n1,red,a\n2,blue,b\n3,red,c\n4,,a\n";
  std::ofstream(d + "/test.jsonl") << "{\"size\": 5, \"colour\": \"green\", \"y\": \"c\"}\n{\"size\": 6, \"colour\": \"red\", \"y\": \"a\"}\n";
  const pstrain::Split train = pstrain::load_directory_split(d, "shop", pstrain::SplitKind::kTrain);
  const pstrain::Split test = pstrain::load_directory_split(d, "shop", pstrain::SplitKind::kTest);
  REQUIRE(train.table);
  REQUIRE(test.table);
  CHECK(train.table->class_names == std::vector<std::string>{"a", "b", "c"});
  CHECK(test.labels == std::vector<int32_t>{2, 0});  // c and a as the train split numbers them
  CHECK(test.num_classes == 3);
  CHECK(test.table->columns[1].categories == std::vector<std::string>{"green", "red"});  // its own categories
  // A test file whose columns differ is refused naming the column.
  std::ofstream(d + "/test.jsonl") << "{\"length\": 5, \"colour\": \"green\", \"y\": \"c\"}\n";
  try {
    pstrain::load_directory_split(d, "shop", pstrain::SplitKind::kTest);
    FAIL("accepted");
  } catch (const DatasetFormatError& e) {
    CHECK(e.kind() == Kind::kBadHeader);
  }
}
