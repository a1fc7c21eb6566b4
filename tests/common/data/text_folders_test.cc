// Text as datasets hold it (common/data/text_profile.h, text_folders.h): UTF-8 checked to the
// byte with its line and column, tokens as Keras' default standardization makes them, a profile
// computed by hand, and a zip and a tar of class folders of .txt files stored as documents whose
// bytes, labels and profile come back from the shards exactly; each defect a DatasetFormatError
// naming the file.
#include "common/data/text_folders.h"

#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <sstream>
#include <fstream>
#include <string>
#include <vector>

#include "common/data/shard_sink.h"
#include "common/data/text_profile.h"
#include "tests/image_files.h"
#include "tests/test_support.h"

namespace pstrain {
namespace {

using testing::ArchiveFiles;
using testing::TempDir;

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

std::vector<std::string> tokens(const std::string& text) {
  std::vector<std::string> out;
  for_each_token(text, [&](std::string_view t) { out.emplace_back(t); });
  return out;
}

struct Labels final : ExampleSink {
  std::vector<int32_t> values;
  void begin(const std::vector<uint32_t>&, Dtype) override {}
  void examples(const uint8_t*, size_t) override { FAIL("a text split gives no arrays"); }
  void labels(const int32_t* l, size_t n) override { values.insert(values.end(), l, l + n); }
};

TEST_CASE("UTF-8 is checked to the byte, with the line and column of the first bad one") {
  CHECK_FALSE(utf8_error("plain ascii\nand more"));
  CHECK_FALSE(utf8_error("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"));  // é, €, an emoji
  const auto at = [](const std::string& s) { return utf8_error(s); };
  REQUIRE(at("ab\ncd\xFF"));
  CHECK(at("ab\ncd\xFF")->offset == 5);
  CHECK(at("ab\ncd\xFF")->line == 2);
  CHECK(at("ab\ncd\xFF")->column == 3);
  CHECK(at("\xC0\xAF"));          // overlong '/'
  CHECK(at("\xED\xA0\x80"));      // a surrogate
  CHECK(at("\xF4\x90\x80\x80"));  // above U+10FFFF
  CHECK(at("ok \xE2\x82"));       // cut short
  CHECK(at("\xC3("));             // a continuation byte missing
}

TEST_CASE("Tokens are lowercased, stripped of punctuation and split on whitespace, as Keras' defaults") {
  CHECK(tokens("Hello, World! It's 2024.") == std::vector<std::string>{"hello", "world", "its", "2024"});
  CHECK(tokens("  tabs\tand\nnew-lines\r\n") == std::vector<std::string>{"tabs", "and", "newlines"});
  CHECK(tokens("Ünïcode STAYS") == std::vector<std::string>{"Ünïcode", "stays"});
  CHECK(tokens("... !!! ---").empty());
}

TEST_CASE("A text profile counts documents, tokens per document and the most frequent tokens") {
  TextProfiler p;
  p.add("the cat sat");                  // 3 tokens
  p.add("");                             // 0
  p.add("The dog. The end, the END!");   // 6
  p.add("one");                          // 1
  const TextProfile t = p.finish();
  CHECK(t.documents == 4);
  CHECK(t.bytes == 11 + 0 + 26 + 3);
  CHECK(t.tokens == 10);
  CHECK(t.min_tokens == 0);
  CHECK(t.max_tokens == 6);
  CHECK(t.mean_tokens() == doctest::Approx(2.5));
  // Buckets: 0 tokens | 1 | 2-3 | 4-7.
  CHECK(t.length_histogram == std::vector<uint64_t>{1, 1, 1, 1});
  CHECK(t.distinct_tokens == 6);
  CHECK_FALSE(t.distinct_capped);
  REQUIRE(t.top_tokens.size() == 6);
  CHECK(t.top_tokens[0] == std::pair<std::string, uint64_t>{"the", 4});
  CHECK(t.top_tokens[1] == std::pair<std::string, uint64_t>{"end", 2});
  CHECK(t.top_tokens[2].first == "cat");  // ties by token
  CHECK(text_profile_from_json(text_profile_to_json(t), "profile") == t);
  CHECK_THROWS_AS(text_profile_from_json("{\"documents\": 1}", "profile"), DataError);
}

TEST_CASE("The distinct tokens counted are capped, and the first ones keep exact counts") {
  TextProfiler p;
  std::string doc;
  for (size_t i = 0; i < kMaxDistinctTokens + 10; ++i) doc += "t" + std::to_string(i) + " ";
  p.add(doc);
  p.add("t5 t5");
  const TextProfile t = p.finish();
  CHECK(t.distinct_tokens == kMaxDistinctTokens);
  CHECK(t.distinct_capped);
  CHECK(t.top_tokens[0] == std::pair<std::string, uint64_t>{"t5", 3});
  CHECK(t.tokens == kMaxDistinctTokens + 12);
  // A long token is cut to whole characters: 'a' and 40 'é' (2 bytes each) keep 63 bytes.
  std::string long_token = "a";
  for (int i = 0; i < 40; ++i) long_token += "\xC3\xA9";
  TextProfiler q;
  q.add(long_token);
  const TextProfile u = q.finish();
  REQUIRE(u.top_tokens.size() == 1);
  CHECK(u.top_tokens[0].first.size() == 63);
  CHECK_FALSE(utf8_error(u.top_tokens[0].first));
}

TEST_CASE("Class folders of .txt files are stored as documents and read back exactly, zip and tar alike") {
  TempDir dir;
  const ArchiveFiles files = {
      {"reviews/neg/b.txt", bytes_of("Awful. Just awful.\n")},
      {"reviews/neg/a.TXT", bytes_of("Bad plot, bad acting.")},
      {"reviews/pos/x.txt", bytes_of("A delight \xE2\x80\x94 truly.")},
      {"reviews/pos/empty.txt", bytes_of("")},
      {"reviews/README.md", bytes_of("root files are ignored")},
      {"reviews/pos/.hidden.txt", bytes_of("\xFF hidden files are ignored")},
  };
  for (const char* kind : {"zip", "tar"}) {
    CAPTURE(kind);
    const std::string path = dir.path() + "/docs." + kind;
    if (std::string(kind) == "zip") testing::write_zip(path, files);
    else testing::write_tar(path, files);
    std::unique_ptr<Archive> archive = Archive::open(path, "docs.zip");
    const ClassFolders folders = find_class_folders(*archive, "docs.zip", {}, ExampleLimits{});
    REQUIRE(holds_text_files(folders));
    const std::string out = dir.path() + "/" + kind;
    std::filesystem::create_directories(out);
    ShardLimits small;
    small.max_examples = 3;  // two shards
    ShardWriter writer(out, "train", text_shard_layout(), small);
    const ExampleSummary summary = stream_text_folders(*archive, "docs.zip", folders, {}, writer);
    const std::vector<ShardInfo> shards = writer.finish();
    REQUIRE(shards.size() == 2);
    CHECK(summary.examples == 4);
    CHECK(summary.shape.empty());
    CHECK(summary.class_counts == std::vector<uint64_t>{2, 2});
    REQUIRE(summary.text);
    CHECK(summary.text->documents == 4);
    CHECK(summary.text->top_tokens[0] == std::pair<std::string, uint64_t>{"awful", 2});
    // Keras' order: class by class, paths sorted byte-wise ("a.TXT" < "b.txt"; "empty" < "x").
    const std::vector<std::string> expected = {"Bad plot, bad acting.", "Awful. Just awful.\n", "", "A delight \xE2\x80\x94 truly."};
    std::vector<std::string> got;
    std::vector<int32_t> labels;
    for (const ShardInfo& s : shards) {
      ShardFile f(out + "/" + s.file);
      for (uint64_t i = 0; i < f.examples(); ++i) {
        std::vector<uint8_t> b;
        f.read(i, b);
        got.emplace_back(b.begin(), b.end());
        labels.push_back(f.label(i));
      }
    }
    CHECK(got == expected);
    CHECK(labels == std::vector<int32_t>{0, 0, 1, 1});
    std::ofstream(out + "/profile.json") << text_profile_to_json(*summary.text);
    Labels sink;
    std::vector<std::string> names;
    for (const ShardInfo& s : shards) names.push_back(s.file);
    const ExampleSummary again = stream_text_shards(out, names, "profile.json", ExampleLimits{}, sink);
    CHECK(again.examples == 4);
    CHECK(again.class_counts == summary.class_counts);
    CHECK(sink.values == labels);
    CHECK(again.text == summary.text);
  }
}

TEST_CASE("A text split holding one class of the dataset's reads back with its counts padded") {
  TempDir dir;
  ShardWriter writer(dir.path(), "test", text_shard_layout());
  for (int i = 0; i < 3; ++i) writer.add("doc", 3, int32_t{0});
  std::vector<std::string> files;
  for (const ShardInfo& s : writer.finish()) files.push_back(s.file);
  TextProfiler p;
  for (int i = 0; i < 3; ++i) p.add("doc");
  std::ofstream(dir.path() + "/profile.json") << text_profile_to_json(p.finish());
  Labels sink;
  const ExampleSummary s = stream_text_shards(dir.path(), files, "profile.json", ExampleLimits{}, sink);
  CHECK(s.classes == 2);
  CHECK(s.class_counts == std::vector<uint64_t>{3, 0});
}

TEST_CASE("A text file that is not UTF-8, or too large, is an error naming it") {
  TempDir dir;
  const std::string path = dir.path() + "/docs.zip";
  testing::write_zip(path, {{"a/1.txt", bytes_of("fine")}, {"b/2.txt", bytes_of("line one\nli\xE9ne two")}});
  std::unique_ptr<Archive> archive = Archive::open(path, "docs.zip");
  const ClassFolders folders = find_class_folders(*archive, "docs.zip", {}, ExampleLimits{});
  ShardWriter writer(dir.path(), "train", text_shard_layout());
  try {
    stream_text_folders(*archive, "docs.zip", folders, {}, writer);
    FAIL("accepted Latin-1 text");
  } catch (const DatasetFormatError& e) {
    CHECK(e.kind() == DatasetFormatError::Kind::kBadEncoding);
    CHECK(std::string(e.what()) == "docs.zip:b/2.txt: line 2, byte 3: not UTF-8 (save the file as UTF-8)");
    CHECK(e.line() == 2);
  }
  TextFolderOptions small;
  small.max_file_bytes = 3;
  ShardWriter writer2(dir.path(), "other", text_shard_layout());
  CHECK_THROWS_WITH_AS(stream_text_folders(*archive, "docs.zip", folders, small, writer2),
                       doctest::Contains("docs.zip:a/1.txt: 4 bytes, over the cap"), DatasetFormatError);
  // A .txt beside an image is not a text dataset (the image rules then name the .txt file).
  testing::write_zip(path, {{"a/1.txt", bytes_of("fine")}, {"b/2.png", bytes_of("x")}});
  archive = Archive::open(path, "docs.zip");
  CHECK_FALSE(holds_text_files(find_class_folders(*archive, "docs.zip", {}, ExampleLimits{})));
}

}  // namespace
}  // namespace pstrain

namespace pstrain {
namespace {

struct Cells final : TextCellSink {
  std::vector<std::vector<std::string>> columns;
  void cell(size_t k, std::string_view text) override {
    if (columns.size() <= k) columns.resize(k + 1);
    columns[k].emplace_back(text);
  }
};

struct Rows final : ExampleSink {
  std::vector<uint32_t> shape;
  std::vector<float> values;
  std::vector<int32_t> label_values;
  void begin(const std::vector<uint32_t>& s, Dtype) override { shape = s; }
  void examples(const uint8_t* b, size_t n) override {
    const size_t at = values.size();
    values.resize(at + n / 4);
    if (n > 0) std::memcpy(values.data() + at, b, n);  // rows of no values come as (nullptr, 0)
  }
  void labels(const int32_t* l, size_t n) override { label_values.insert(label_values.end(), l, l + n); }
};

ExampleSummary read_csv(const std::string& text, CsvOptions options, ExampleSink& sink) {
  return stream_csv([text] { return std::make_unique<std::istringstream>(text); }, "t.csv", options, sink);
}

TEST_CASE("A CSV's free-text column is text: kept as UTF-8 cells beside the values and profiled, not a category") {
  const std::string text =
      "stars,review,city,label\n"
      "5,\"Loved it, would go again.\",Paris,pos\n"
      "1,Never again.,Paris,neg\n"
      "4,,Rome,pos\n"
      "2,The soup was cold and the staff rude.,Rome,neg\n";
  Cells cells;
  CsvOptions options;
  options.text_cells = &cells;
  Rows rows;
  const ExampleSummary s = read_csv(text, options, rows);
  REQUIRE(s.table);
  CHECK(s.table->columns[1].type == ColumnType::kText);
  CHECK(s.table->columns[2].type == ColumnType::kCategorical);  // repeated values
  CHECK(rows.shape == std::vector<uint32_t>{2});                // stars and city: the text is not a value
  CHECK(rows.values == std::vector<float>{5, 0, 1, 0, 4, 1, 2, 1});
  REQUIRE(cells.columns.size() == 1);
  CHECK(cells.columns[0] == std::vector<std::string>{"Loved it, would go again.", "Never again.", "", "The soup was cold and the staff rude."});
  const ColumnProfile& p = s.table->columns[1].profile;
  CHECK(p.missing == 1);
  REQUIRE(p.text);
  CHECK(p.text->documents == 3);
  CHECK(p.text->tokens == 5 + 2 + 8);
  CHECK(p.text->top_tokens[0] == std::pair<std::string, uint64_t>{"again", 2});
  // The schema's JSON keeps the text profile.
  const TableSchema back = table_from_json(table_to_json(*s.table), "t.json");
  CHECK(back.columns[1].type == ColumnType::kText);
  CHECK(back.columns[1].profile.text == p.text);
  CHECK(back.text_columns().size() == 1);
  CHECK(back.stored_columns().size() == 2);

  // Told: a short column read as text, a wordy one as a category.
  CsvOptions told;
  told.types = {{"city", ColumnType::kText}, {"review", ColumnType::kCategorical}};
  Rows rows2;
  const ExampleSummary t = read_csv(text, told, rows2);
  CHECK(t.table->columns[1].type == ColumnType::kCategorical);
  CHECK(t.table->columns[2].type == ColumnType::kText);
  CHECK(t.table->columns[2].profile.text->top_tokens[0] == std::pair<std::string, uint64_t>{"paris", 2});
}

TEST_CASE("A table whose only feature is text stores rows of no values, and its shards read back") {
  std::string text = "body,label\n";
  for (int i = 0; i < 50; ++i) text += "\"message number " + std::to_string(i) + ", hello\"," + (i % 2 ? "spam" : "ham") + "\n";
  TempDir dir;
  Cells cells;
  CsvOptions options;
  options.text_cells = &cells;
  ShardSink sink(dir.path(), "train");
  const ExampleSummary s = read_csv(text, options, sink);
  const std::vector<ShardInfo> shards = sink.finish();
  CHECK(s.shape == std::vector<uint32_t>{0});
  CHECK(s.examples == 50);
  CHECK(s.table->columns[0].type == ColumnType::kText);
  CHECK(cells.columns[0].size() == 50);
  std::vector<std::string> files;
  for (const ShardInfo& shard : shards) files.push_back(shard.file);
  Rows back;
  const ExampleSummary again = stream_shards(dir.path(), files, {0}, Dtype::kFloat32, ExampleLimits{}, back);
  CHECK(again.examples == 50);
  CHECK(back.label_values.size() == 50);
  CHECK(back.values.empty());
}

}  // namespace
}  // namespace pstrain
