#include "common/data/dataset_formats.h"

#include <doctest/doctest.h>
#include <zip.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>

#include "common/data/dataset.h"
#include "tests/test_support.h"

using pstrain::CsvOptions;
using pstrain::DatasetFormatError;
using pstrain::ExampleLimits;
using pstrain::NpyArray;
using pstrain::ParsedExamples;
using pstrain::parse_csv;
using pstrain::read_npy;
using pstrain::read_npz;
using pstrain::Split;
using pstrain::SplitKind;
using pstrain::make_split;
using pstrain::testing::TempDir;
using Kind = DatasetFormatError::Kind;

namespace {

std::vector<float> floats_of(const ParsedExamples& p) {
  std::vector<float> v(p.bytes.size() / sizeof(float));
  std::memcpy(v.data(), p.bytes.data(), v.size() * sizeof(float));
  return v;
}

ParsedExamples csv(const std::string& text, const CsvOptions& options = {}) {
  std::istringstream in(text);
  return parse_csv(in, "t.csv", options);
}

struct Failure {
  Kind kind = Kind::kUnreadable;
  uint64_t line = 0;
  std::string column;
  std::string message;  // "" when nothing was thrown
};

template <typename F>
Failure failure_of(F&& f) {
  try {
    f();
  } catch (const DatasetFormatError& e) {
    return {e.kind(), e.line(), e.column(), e.what()};
  }
  return {};
}

Failure csv_failure(const std::string& text, const CsvOptions& options = {}) {
  return failure_of([&] { csv(text, options); });
}

// The bytes of an .npy file (format 1.0, or 2.0 with `version` 2), header padded as numpy pads it.
std::string npy(const std::string& descr, const std::string& shape, const std::string& data,
                bool fortran = false, int version = 1) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
                     ", 'shape': " + shape + ", }";
  const size_t prefix = version == 1 ? 10 : 12;
  while ((prefix + dict.size() + 1) % 64 != 0) dict += ' ';
  dict += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(version);
  out += '\0';
  const uint32_t len = static_cast<uint32_t>(dict.size());
  out += static_cast<char>(len & 0xff);
  out += static_cast<char>((len >> 8) & 0xff);
  if (version != 1) {
    out += static_cast<char>((len >> 16) & 0xff);
    out += static_cast<char>((len >> 24) & 0xff);
  }
  return out + dict + data;
}

template <typename T>
std::string raw(std::initializer_list<T> values) {
  std::string s(values.size() * sizeof(T), '\0');
  std::memcpy(s.data(), std::data(values), s.size());
  return s;
}

// Writes a zip archive of `entries` (name, contents), deflated when `compress`.
void write_zip(const std::string& path, const std::vector<std::pair<std::string, std::string>>& entries,
               bool compress = false) {
  int error = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &error);
  REQUIRE(z != nullptr);
  for (const auto& [name, data] : entries) {
    zip_source_t* src = zip_source_buffer(z, data.data(), data.size(), 0);
    REQUIRE(src != nullptr);
    zip_int64_t index = zip_file_add(z, name.c_str(), src, ZIP_FL_OVERWRITE);
    REQUIRE(index >= 0);
    REQUIRE(zip_set_file_compression(z, static_cast<zip_uint64_t>(index), compress ? ZIP_CM_DEFLATE : ZIP_CM_STORE,
                                     0) == 0);
  }
  REQUIRE(zip_close(z) == 0);
}

const std::string kGoodX = npy("<f4", "(2, 3)", raw<float>({1, 2, 3, 4, 5, 6}));
const std::string kGoodY = npy("<i8", "(2,)", raw<int64_t>({1, 0}));

Failure npz_failure(const std::vector<std::pair<std::string, std::string>>& entries,
                    const ExampleLimits& limits = {}) {
  TempDir dir;
  write_zip(dir.file("d.npz"), entries);
  return failure_of([&] { read_npz(dir.file("d.npz"), limits); });
}

}  // namespace

TEST_CASE("parse_csv reads a header, float features in header order and integer labels") {
  ParsedExamples p = csv("a,label,b\n1.5,0,-2\n 3 ,2, 4e-1\r\n\n+5,1,0\n");
  CHECK(p.shape == std::vector<uint32_t>{2});
  CHECK(p.dtype == ParsedExamples::Dtype::kFloat32);
  CHECK(p.size() == 3);
  CHECK(p.example_values() == 2);
  CHECK(floats_of(p) == std::vector<float>{1.5f, -2.f, 3.f, 0.4f, 5.f, 0.f});
  CHECK(p.labels == std::vector<int32_t>{0, 2, 1});
  CHECK(p.classes == 3);
}

TEST_CASE("parse_csv: a label column with a fraction is a regression dataset's targets, and whole numbers when asked") {
  ParsedExamples p = csv("a,label\n1,0.5\n2,3\n3,-1.25e2\n");
  CHECK(p.target_width == 1);
  CHECK(p.classes == 0);
  CHECK(p.labels.empty());
  CHECK(p.targets == std::vector<float>{0.5f, 3.0f, -125.0f});
  CHECK(p.size() == 3);
  // Whole numbers ("1.0" too) are classes, unless the options say regression.
  ParsedExamples whole = csv("a,label\n1,1.0\n2,0\n");
  CHECK(whole.target_width == 0);
  CHECK(whole.labels == std::vector<int32_t>{1, 0});
  CsvOptions options;
  options.regression = true;
  ParsedExamples counts = csv("a,label\n1,7\n2,-3\n", options);
  CHECK(counts.target_width == 1);
  CHECK(counts.targets == std::vector<float>{7.0f, -3.0f});
  // A split of them keeps the targets.
  const Split split = make_split("counts", SplitKind::kTrain, std::move(counts));
  CHECK(split.regression());
  CHECK(split.target_size() == 1);
  std::vector<float> x(2), t(2);
  const std::vector<uint32_t> order = {1, 0};
  split.gather(order, x.data(), t.data());
  CHECK(t == std::vector<float>{-3.0f, 7.0f});
  CHECK(x == std::vector<float>{2.0f, 1.0f});
}

TEST_CASE("read_npz: float32 y of shape (n,) or (n, k) is a regression dataset's targets") {
  TempDir dir;
  write_zip(dir.file("r.npz"), {{"x.npy", kGoodX}, {"y.npy", npy("<f4", "(2, 2)", raw<float>({0.5f, -1, 2, 1e6f}))}});
  ParsedExamples p = read_npz(dir.file("r.npz"));
  CHECK(p.target_width == 2);
  CHECK(p.targets == std::vector<float>{0.5f, -1, 2, 1e6f});
  CHECK(p.size() == 2);
  CHECK(p.classes == 0);
  write_zip(dir.file("r1.npz"), {{"x.npy", kGoodX}, {"y.npy", npy("<f4", "(2,)", raw<float>({3.5f, 4}))}});
  CHECK(read_npz(dir.file("r1.npz")).target_width == 1);
  // x and y must agree on the examples.
  write_zip(dir.file("r3.npz"), {{"x.npy", kGoodX}, {"y.npy", npy("<f4", "(3,)", raw<float>({3.5f, 4, 5}))}});
  CHECK(failure_of([&] { read_npz(dir.file("r3.npz")); }).kind == Kind::kLengthMismatch);
}

TEST_CASE("parse_csv takes the label column the options name, and needs no trailing newline") {
  CsvOptions options;
  options.label_column = "species";
  ParsedExamples p = csv("species,x\n1,0.25\n0,0.5", options);
  CHECK(floats_of(p) == std::vector<float>{0.25f, 0.5f});
  CHECK(p.labels == std::vector<int32_t>{1, 0});
  CHECK(p.classes == 2);
  // A UTF-8 byte order mark is not part of the first column's name.
  CHECK(csv("\xEF\xBB\xBFlabel,x\n1,2\n0,3\n").labels == std::vector<int32_t>{1, 0});
  // Classes need not all appear: K is max label + 1.
  CHECK(csv("x,label\n1,0\n2,4\n").classes == 5);
}

TEST_CASE("parse_csv names the line and column of every defect") {
  SUBCASE("ragged row") {
    Failure f = csv_failure("a,b,label\n1,2,0\n1,2\n");
    CHECK(f.kind == Kind::kRaggedRow);
    CHECK(f.line == 3);
    CHECK(f.message == "t.csv: line 3 has 2 fields, the header has 3");
  }
  SUBCASE("a cell that does not fit the type the column was given") {
    CsvOptions options;
    options.types = {{"b", pstrain::ColumnType::kNumeric}};
    Failure f = csv_failure("a,b,label\n1,2,0\n1,abc,1\n", options);
    CHECK(f.kind == Kind::kNotNumeric);
    CHECK(f.line == 3);
    CHECK(f.column == "b");
    CHECK(f.message == "t.csv: line 3, column 'b' (2): 'abc' is not a number (the column is numeric)");
    options.types = {{"b", pstrain::ColumnType::kBoolean}};
    Failure boolean = csv_failure("a,b,label\n1,yes,0\n1,2,1\n", options);
    CHECK(boolean.kind == Kind::kNotNumeric);
    CHECK(boolean.line == 3);
    options.types = {{"zzz", pstrain::ColumnType::kNumeric}};
    Failure unknown = csv_failure("a,b,label\n1,2,0\n", options);
    CHECK(unknown.kind == Kind::kBadHeader);
    CHECK(unknown.column == "zzz");
  }
  SUBCASE("empty file, blank lines only, header only") {
    CHECK(csv_failure("").kind == Kind::kEmpty);
    CHECK(csv_failure("\n \n").kind == Kind::kEmpty);
    Failure f = csv_failure("a,label\n");
    CHECK(f.kind == Kind::kEmpty);
    CHECK(f.message == "t.csv: the file has a header and no data rows");
  }
  SUBCASE("missing label column, or no feature column") {
    Failure f = csv_failure("a,b\n1,2\n");
    CHECK(f.kind == Kind::kMissingLabelColumn);
    CHECK(f.message == "t.csv: the header has no label column 'label'");
    CHECK(csv_failure("label\n1\n").kind == Kind::kBadHeader);
    CHECK(csv_failure("a,,label\n1,2,0\n").kind == Kind::kBadHeader);
  }
  SUBCASE("duplicate column names") {
    Failure f = csv_failure("a,b,a,label\n1,2,3,0\n");
    CHECK(f.kind == Kind::kDuplicateColumn);
    CHECK(f.column == "a");
    CHECK(f.line == 1);
    CHECK(f.message == "t.csv: line 1: columns 1 and 3 are both named 'a'");
  }
  SUBCASE("labels that are missing or negative class numbers") {
    Failure f = csv_failure("a,label\n1,0\n2,NA\n");
    CHECK(f.kind == Kind::kBadLabel);
    CHECK(f.line == 3);
    CHECK(f.column == "label");
    CHECK(f.message == "t.csv: line 3, column 'label' (2): the label is missing ('NA')");
    Failure negative = csv_failure("a,label\n1,0\n2,-1\n");
    CHECK(negative.kind == Kind::kBadLabel);
    CHECK(negative.message == "t.csv: line 3, column 'label' (2): label -1 is not in [0, 10000)");
    CHECK(csv_failure("a,label\n1,\n").kind == Kind::kBadLabel);
    CsvOptions options;
    options.limits.max_classes = 3;
    CHECK(csv_failure("a,label\n1,3\n", options).kind == Kind::kBadLabel);
    CHECK(csv("a,label\n1,2\n", options).classes == 3);
  }
  SUBCASE("fewer than two classes") {
    Failure f = csv_failure("a,label\n1,0\n2,0\n");
    CHECK(f.kind == Kind::kTooFewClasses);
  }
  SUBCASE("NaN, infinity and values beyond float32") {
    for (const char* cell : {"inf", "-inf", "infinity", "1e39"}) {
      Failure f = csv_failure(std::string("a,b,label\n1,2,0\n3,") + cell + ",1\n");
      CHECK_MESSAGE(f.kind == Kind::kNonFinite, cell);
      CHECK(f.line == 3);
      CHECK(f.column == "b");
    }
    // Tiny values round to float's zero instead of failing.
    CHECK(floats_of(csv("a,label\n1e-60,0\n1,1\n"))[0] == 0.f);
  }
  SUBCASE("malformed quoting") {
    Failure after = csv_failure("a,label\n\"1\"x,0\n");
    CHECK(after.kind == Kind::kQuotedField);
    CHECK(after.line == 2);
    Failure open = csv_failure("a,label\n1,0\n\"2,1\n3,0\n");
    CHECK(open.kind == Kind::kQuotedField);
    CHECK(open.line == 3);
    CHECK(open.message == "t.csv: line 3: a quoted field is not closed before the end of the file");
  }
  SUBCASE("size caps") {
    CsvOptions options;
    options.limits.max_examples = 2;
    CHECK(csv("a,label\n1,0\n2,1\n", options).size() == 2);
    Failure rows = csv_failure("a,label\n1,0\n2,1\n3,1\n", options);
    CHECK(rows.kind == Kind::kTooLarge);
    CHECK(rows.line == 4);
    options = {};
    options.max_columns = 3;
    CHECK(csv_failure("a,b,c,label\n1,2,3,0\n", options).kind == Kind::kTooLarge);
    options = {};
    options.max_line_bytes = 8;
    CHECK(csv("a,label\r\n1234,0\r\n5678,1\r\n", options).size() == 2);
    Failure line = csv_failure("a,label\n1234567,0\n", options);
    CHECK(line.kind == Kind::kTooLarge);
    CHECK(line.line == 2);
    options = {};
    options.limits.max_bytes = 8;  // one row of two floats
    CHECK(csv_failure("a,b,label\n1,2,0\n3,4,1\n", options).kind == Kind::kTooLarge);
  }
}

TEST_CASE("format_error_kind_name gives stable names") {
  CHECK(pstrain::format_error_kind_name(Kind::kRaggedRow) == "ragged_row");
  CHECK(pstrain::format_error_kind_name(Kind::kNotNumeric) == "not_numeric");
  CHECK(pstrain::format_error_kind_name(Kind::kTrailingData) == "trailing_data");
}

TEST_CASE("read_npy reads hand-written .npy bytes, versions 1 and 2") {
  for (int version : {1, 2}) {
    std::istringstream in(npy("<i4", "(2, 2)", raw<int32_t>({7, -1, 3, 9}), false, version));
    NpyArray a = read_npy(in, "a.npy");
    CHECK(a.dtype == NpyArray::Dtype::kInt32);
    CHECK(a.shape == std::vector<uint64_t>{2, 2});
    std::vector<int32_t> v(4);
    std::memcpy(v.data(), a.bytes.data(), 16);
    CHECK(v == std::vector<int32_t>{7, -1, 3, 9});
  }
  std::istringstream scalar(npy("|u1", "()", "\x05"));
  NpyArray s = read_npy(scalar, "s.npy");
  CHECK(s.shape.empty());
  CHECK(s.bytes == std::vector<uint8_t>{5});
}

TEST_CASE("read_npy rejects malformed files") {
  auto npy_failure = [](const std::string& bytes, const ExampleLimits& limits = {}) {
    std::istringstream in(bytes);
    return failure_of([&] { read_npy(in, "a.npy", limits); });
  };
  CHECK(npy_failure("PK\x03\x04 not numpy").kind == Kind::kBadNpyHeader);
  CHECK(npy_failure("\x93NUM").kind == Kind::kTruncated);
  Failure dtype = npy_failure(npy("<f8", "(1,)", raw<double>({1})));
  CHECK(dtype.kind == Kind::kBadDtype);
  CHECK(dtype.message == "a.npy: unsupported dtype '<f8' (accepted: |u1, <i4, <i8, <f4)");
  CHECK(npy_failure(npy(">f4", "(1,)", raw<float>({1}))).kind == Kind::kBadDtype);
  CHECK(npy_failure(npy("<f4", "(2, 2)", raw<float>({1, 2, 3, 4}), true)).kind == Kind::kFortranOrder);
  Failure truncated = npy_failure(npy("<f4", "(2, 2)", raw<float>({1, 2, 3})));
  CHECK(truncated.kind == Kind::kTruncated);
  CHECK(truncated.message == "a.npy: truncated array data: 12 of 16 bytes present");
  CHECK(npy_failure(npy("<f4", "(1,)", raw<float>({1, 2}))).kind == Kind::kTrailingData);
  CHECK(npy_failure(npy("<f4", "(2, 'x')", "")).kind == Kind::kBadNpyHeader);
  // A claimed size beyond the cap (or overflowing 64 bits) fails before any allocation.
  CHECK(npy_failure(npy("<f4", "(100000000000, 100000000000)", "")).kind == Kind::kTooLarge);
  ExampleLimits small;
  small.max_bytes = 15;
  CHECK(npy_failure(npy("<f4", "(2, 2)", raw<float>({1, 2, 3, 4})), small).kind == Kind::kTooLarge);
  // Missing key.
  std::string no_shape = "\x93NUMPY\x01";
  no_shape += '\0';
  std::string dict = "{'descr': '<f4', 'fortran_order': False}\n";
  no_shape += static_cast<char>(dict.size());
  no_shape += '\0';
  CHECK(npy_failure(no_shape + dict).kind == Kind::kBadNpyHeader);
}

TEST_CASE("read_npz reads x and y from stored and deflated archives") {
  TempDir dir;
  for (bool compress : {false, true}) {
    write_zip(dir.file("d.npz"), {{"x.npy", kGoodX}, {"y.npy", kGoodY}, {"notes.txt", "ignored"}}, compress);
    ParsedExamples p = read_npz(dir.file("d.npz"));
    CHECK(p.dtype == ParsedExamples::Dtype::kFloat32);
    CHECK(p.shape == std::vector<uint32_t>{3});
    CHECK(floats_of(p) == std::vector<float>{1, 2, 3, 4, 5, 6});
    CHECK(p.labels == std::vector<int32_t>{1, 0});
    CHECK(p.classes == 2);
  }
  // uint8 images, rank 4, with uint8 labels.
  std::string x4 = npy("|u1", "(2, 1, 2, 2)", "\x01\x02\x03\x04\x05\x06\x07\x08");
  write_zip(dir.file("u8.npz"), {{"x.npy", x4}, {"y.npy", npy("|u1", "(2,)", "\x03\x01")}});
  ParsedExamples u = read_npz(dir.file("u8.npz"));
  CHECK(u.dtype == ParsedExamples::Dtype::kUint8);
  CHECK(u.shape == std::vector<uint32_t>{1, 2, 2});
  CHECK(u.bytes == std::vector<uint8_t>{1, 2, 3, 4, 5, 6, 7, 8});
  CHECK(u.labels == std::vector<int32_t>{3, 1});
  CHECK(u.classes == 4);
  // Rank 3 is (n, h, w) with one channel; <i4 labels.
  write_zip(dir.file("r3.npz"), {{"x.npy", npy("|u1", "(2, 1, 2)", "\x01\x02\x03\x04")},
                                 {"y.npy", npy("<i4", "(2,)", raw<int32_t>({0, 1}))}});
  ParsedExamples r3 = read_npz(dir.file("r3.npz"));
  CHECK(r3.shape == std::vector<uint32_t>{1, 2, 1});
  CHECK(r3.labels == std::vector<int32_t>{0, 1});
}

TEST_CASE("read_npz reads the archives NumPy itself writes") {
  TempDir dir;
  // Debian's interpreter, explicitly: deploy/setup.sh installs python3-numpy for it, and a python3
  // earlier on PATH (pyenv, a virtualenv) may lack NumPy.
  const std::string command = std::string("/usr/bin/python3 ") + PSTRAIN_WRITE_NPZ_SCRIPT + " " + dir.path();
  REQUIRE_MESSAGE(std::system(command.c_str()) == 0, "failed: " << command);

  ParsedExamples f = read_npz(dir.file("numpy_float.npz"));
  CHECK(f.dtype == ParsedExamples::Dtype::kFloat32);
  CHECK(f.shape == std::vector<uint32_t>{2, 2, 1});
  std::vector<float> expected;
  for (int i = 0; i < 12; ++i) expected.push_back(static_cast<float>(i) / 4);
  CHECK(floats_of(f) == expected);
  CHECK(f.labels == std::vector<int32_t>{0, 2, 1});
  CHECK(f.classes == 3);

  ParsedExamples u = read_npz(dir.file("numpy_uint8.npz"));
  CHECK(u.dtype == ParsedExamples::Dtype::kUint8);
  CHECK(u.shape == std::vector<uint32_t>{2, 1, 3});
  std::vector<uint8_t> bytes;
  for (int i = 0; i < 12; ++i) bytes.push_back(static_cast<uint8_t>(i * 20));
  CHECK(u.bytes == bytes);
  CHECK(u.labels == std::vector<int32_t>{1, 0});
}

TEST_CASE("read_npz names each defect") {
  SUBCASE("missing x or y") {
    Failure f = npz_failure({{"x.npy", kGoodX}});
    CHECK(f.kind == Kind::kMissingArray);
    CHECK(f.message.find("has no 'y.npy'") != std::string::npos);
    CHECK(npz_failure({{"y.npy", kGoodY}}).kind == Kind::kMissingArray);
  }
  SUBCASE("not a zip, or no file") {
    TempDir dir;
    std::ofstream(dir.file("bad.npz")) << "plain text";
    CHECK(failure_of([&] { read_npz(dir.file("bad.npz")); }).kind == Kind::kUnreadable);
    CHECK(failure_of([&] { read_npz(dir.file("absent.npz")); }).kind == Kind::kUnreadable);
  }
  SUBCASE("wrong dtype") {
    CHECK(npz_failure({{"x.npy", npy("<i4", "(2, 1)", raw<int32_t>({1, 2}))}, {"y.npy", kGoodY}}).kind ==
          Kind::kBadDtype);
    // Float y is a regression dataset's targets; they must be finite and of shape (n,) or (n, k).
    Failure y = npz_failure({{"x.npy", kGoodX}, {"y.npy", npy("<f4", "(2,)", raw<float>({1, NAN}))}});
    CHECK(y.kind == Kind::kNonFinite);
    CHECK(y.message.find("y.npy: target 0 of example 1 is NaN") != std::string::npos);
    CHECK(npz_failure({{"x.npy", kGoodX}, {"y.npy", npy("<f4", "(2, 1, 1)", raw<float>({1, 0}))}}).kind ==
          Kind::kBadRank);
  }
  SUBCASE("wrong rank") {
    CHECK(npz_failure({{"x.npy", npy("<f4", "(2,)", raw<float>({1, 2}))}, {"y.npy", kGoodY}}).kind ==
          Kind::kBadRank);
    CHECK(npz_failure({{"x.npy", npy("|u1", "(2, 1, 1, 1, 1)", "\x01\x02")}, {"y.npy", kGoodY}}).kind ==
          Kind::kBadRank);
    CHECK(npz_failure({{"x.npy", kGoodX}, {"y.npy", npy("<i8", "(2, 1)", raw<int64_t>({1, 0}))}}).kind ==
          Kind::kBadRank);
  }
  SUBCASE("fortran order") {
    Failure f = npz_failure({{"x.npy", npy("<f4", "(2, 3)", raw<float>({1, 2, 3, 4, 5, 6}), true)},
                             {"y.npy", kGoodY}});
    CHECK(f.kind == Kind::kFortranOrder);
    CHECK(f.message.find("x.npy: fortran_order is True") != std::string::npos);
  }
  SUBCASE("x and y lengths differ") {
    Failure f = npz_failure({{"x.npy", kGoodX}, {"y.npy", npy("<i8", "(3,)", raw<int64_t>({1, 0, 1}))}});
    CHECK(f.kind == Kind::kLengthMismatch);
    CHECK(f.message.find("x holds 2 examples, y holds 3 labels") != std::string::npos);
  }
  SUBCASE("truncated data") {
    Failure f = npz_failure({{"x.npy", npy("<f4", "(2, 3)", raw<float>({1, 2, 3, 4, 5}))}, {"y.npy", kGoodY}});
    CHECK(f.kind == Kind::kTruncated);
    CHECK(f.message.find("x.npy: truncated array data: 20 of 24 bytes") != std::string::npos);
  }
  SUBCASE("NaN or infinity in float x") {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float inf = std::numeric_limits<float>::infinity();
    Failure f = npz_failure({{"x.npy", npy("<f4", "(2, 3)", raw<float>({1, 2, 3, 4, nan, 6}))}, {"y.npy", kGoodY}});
    CHECK(f.kind == Kind::kNonFinite);
    CHECK(f.message.find("x.npy: example 1, value 1 is NaN") != std::string::npos);
    CHECK(npz_failure({{"x.npy", npy("<f4", "(2, 3)", raw<float>({1, 2, -inf, 4, 5, 6}))}, {"y.npy", kGoodY}})
              .kind == Kind::kNonFinite);
  }
  SUBCASE("labels out of range, or a single class") {
    Failure f = npz_failure({{"x.npy", kGoodX}, {"y.npy", npy("<i8", "(2,)", raw<int64_t>({1, -3}))}});
    CHECK(f.kind == Kind::kBadLabel);
    CHECK(f.message.find("y.npy: example 1: label -3 is not in [0, 10000)") != std::string::npos);
    CHECK(npz_failure({{"x.npy", kGoodX}, {"y.npy", npy("<i8", "(2,)", raw<int64_t>({1, 10000}))}}).kind ==
          Kind::kBadLabel);
    CHECK(npz_failure({{"x.npy", kGoodX}, {"y.npy", npy("<i8", "(2,)", raw<int64_t>({0, 0}))}}).kind ==
          Kind::kTooFewClasses);
  }
  SUBCASE("absurd sizes") {
    // A header claiming a huge x fails on the cap, not on allocation.
    Failure f = npz_failure({{"x.npy", npy("<f4", "(2, 4000000000)", "")}, {"y.npy", kGoodY}});
    CHECK(f.kind == Kind::kTooLarge);
    ExampleLimits limits;
    limits.max_examples = 1;
    CHECK(npz_failure({{"x.npy", kGoodX}, {"y.npy", kGoodY}}, limits).kind == Kind::kTooLarge);
  }
}

// Regression (fuzz/datasets_fuzz.cc): a header's claim within the cap is not allocated before the
// bytes are there. An upload's cap is 2 GiB, so an .npz of a few hundred bytes whose y.npy claimed
// 2 GiB cost 2 GiB of zeroed memory before it was found truncated; with a cap beyond any machine's
// memory the old code threw std::bad_alloc instead of a DatasetFormatError.
TEST_CASE("read_npy and read_npz find a claimed size truncated without allocating it") {
  ExampleLimits vast;
  vast.max_bytes = uint64_t{1} << 46;  // 64 TiB
  std::istringstream in(npy("|u1", "(17592186044416,)", "\x01\x02\x03"));
  Failure f = failure_of([&] { read_npy(in, "a.npy", vast); });
  CHECK(f.kind == Kind::kTruncated);
  CHECK(f.message == "a.npy: truncated array data: 3 of 17592186044416 bytes present");

  // y's header is read before x (its length checks x's) and its values after x, in pieces: a
  // vast claim fails on the example cap from its header, a short y is truncated.
  Failure y = npz_failure({{"x.npy", kGoodX}, {"y.npy", npy("<i8", "(268435456,)", raw<int64_t>({1, 0}))}});
  CHECK(y.kind == Kind::kTooLarge);
  Failure short_y = npz_failure({{"x.npy", kGoodX}, {"y.npy", npy("<i8", "(2,)", raw<int64_t>({1}))}});
  CHECK(short_y.kind == Kind::kTruncated);
  CHECK(short_y.message.find("y.npy: truncated array data: 8 of 16 bytes present") != std::string::npos);
}

TEST_CASE("read_npz streams a long y after x, in pieces: every label in order, a bad one named by its index") {
  const size_t n = 200'003;  // more than three pieces of y
  std::vector<uint8_t> x(n);
  std::vector<int32_t> y(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = static_cast<uint8_t>(i * 7);
    y[i] = static_cast<int32_t>((i * 13) % 5);
  }
  const auto bytes_of = [](const std::vector<int32_t>& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int32_t));
  };
  TempDir dir;
  const std::string xs = npy("|u1", "(" + std::to_string(n) + ", 1)", std::string(x.begin(), x.end()));
  write_zip(dir.file("long.npz"), {{"x.npy", xs}, {"y.npy", npy("<i4", "(" + std::to_string(n) + ",)", bytes_of(y))}});
  const ParsedExamples p = read_npz(dir.file("long.npz"));
  CHECK(p.labels == y);
  CHECK(p.bytes == x);
  CHECK(p.classes == 5);
  y[150'001] = -1;
  write_zip(dir.file("bad.npz"), {{"x.npy", xs}, {"y.npy", npy("<i4", "(" + std::to_string(n) + ",)", bytes_of(y))}});
  const Failure f = failure_of([&] { read_npz(dir.file("bad.npz")); });
  CHECK(f.kind == Kind::kBadLabel);
  CHECK(f.message.find("y.npy: example 150001: label -1") != std::string::npos);
}

// Regression (fuzz/datasets_fuzz.cc, ASan stack-use-after-scope): the zip entry reader kept a
// reference to its name, a temporary; a read error (here the CRC check at the end of x.npy, whose
// last byte is changed after the archive was written) built its message from the dangling name.
TEST_CASE("read_npz names the entry whose data fails its CRC check") {
  TempDir dir;
  write_zip(dir.file("d.npz"), {{"x.npy", kGoodX}, {"y.npy", kGoodY}});
  std::string archive;
  {
    std::ifstream in(dir.file("d.npz"), std::ios::binary);
    archive.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t at = archive.find(kGoodX);
  REQUIRE(at != std::string::npos);
  archive[at + kGoodX.size() - 1] ^= 0x01;  // the last float's top byte: 6.0f becomes 24.0f
  std::ofstream(dir.file("d.npz"), std::ios::binary | std::ios::trunc) << archive;
  Failure f = failure_of([&] { read_npz(dir.file("d.npz")); });
  CHECK(f.kind == Kind::kUnreadable);
  CHECK(f.message.find("d.npz:x.npy: cannot read") != std::string::npos);
}
