#include "common/data/dataset_manifest.h"

#include <fcntl.h>
#include <unistd.h>

#include <boost/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/base/error.h"
#include "common/base/json_parse.h"
#include "common/base/json_text.h"
#include "common/data/archive.h"
#include "common/data/converted_split.h"
#include "common/data/image_folders.h"
#include "common/data/shard_file.h"
#include "common/data/stored_examples.h"
#include "common/data/shard_sink.h"
#include "common/data/text_folders.h"

namespace pstrain {
namespace json = boost::json;
namespace {

// A file name inside the dataset directory: no directories, no way out of it.
std::string file_name(const json::value& v, const std::string& where) {
  if (!v.is_string()) throw DataError(where + " must be a string");
  std::string name(v.as_string());
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == ".." || name[0] == '.') {
    throw DataError(where + " must be a file name in the dataset's directory, not '" + name + "'");
  }
  return name;
}

std::string read_file_name(const json::object& o, const char* key, const std::string& where) {
  const auto it = o.find(key);
  if (it == o.end()) throw DataError(where + "/" + key + " is required");
  return file_name(it->value(), where + "/" + key);
}

// {"shards": [names], "shape": [dims], "dtype": "uint8" | "float32"[, "table": name]}
void read_shards_split(const json::object& o, const std::string& where, ManifestSplit& s) {
  const json::value& shards = o.at("shards");
  if (!shards.is_array()) throw DataError(where + "/shards must be a list of file names");
  for (size_t i = 0; i < shards.as_array().size(); ++i) {
    s.shards.push_back(file_name(shards.as_array()[i], where + "/shards/" + std::to_string(i)));
  }
  const auto shape = o.find("shape");
  if (shape == o.end() || !shape->value().is_array() || shape->value().as_array().empty() ||
      shape->value().as_array().size() > 3) {
    throw DataError(where + "/shape is required: one example's dimensions, 1 to 3 of them");
  }
  // (A table whose features are all text columns stores rows of no values: shape [0].)
  const int64_t least = o.contains("text_columns") ? 0 : 1;
  for (const json::value& d : shape->value().as_array()) {
    if (!d.is_int64() || d.as_int64() < least || d.as_int64() > (int64_t{1} << 24)) {
      throw DataError(where + "/shape must hold positive integers");
    }
    s.shape.push_back(static_cast<uint32_t>(d.as_int64()));
  }
  const auto dtype = o.find("dtype");
  if (dtype == o.end() || !dtype->value().is_string() ||
      (dtype->value().as_string() != "uint8" && dtype->value().as_string() != "float32")) {
    throw DataError(where + "/dtype is required: \"uint8\" or \"float32\"");
  }
  s.dtype = dtype->value().as_string() == "uint8" ? Dtype::kUint8 : Dtype::kFloat32;
  if (o.contains("table")) s.table = read_file_name(o, "table", where);
  if (const auto it = o.find("text_columns"); it != o.end()) {
    if (!it->value().is_array()) throw DataError(where + "/text_columns must be a list of {column, shards}");
    for (size_t i = 0; i < it->value().as_array().size(); ++i) {
      const std::string at = where + "/text_columns/" + std::to_string(i);
      const json::value& c = it->value().as_array()[i];
      if (!c.is_object() || !c.as_object().contains("column") || !c.at("column").is_string() || !c.as_object().contains("shards") ||
          !c.at("shards").is_array()) {
        throw DataError(at + " must be {\"column\": name, \"shards\": [file names]}");
      }
      std::vector<std::string> files;
      for (size_t k = 0; k < c.at("shards").as_array().size(); ++k) {
        files.push_back(file_name(c.at("shards").as_array()[k], at + "/shards/" + std::to_string(k)));
      }
      s.text_columns.emplace_back(std::string(c.at("column").as_string()), std::move(files));
    }
  }
}

ManifestSplit read_split(const json::value& v, const std::string& where) {
  if (!v.is_object()) throw DataError(where + " must be an object naming the split's files");
  const json::object& o = v.as_object();
  ManifestSplit s;
  auto allow = [&](std::initializer_list<const char*> keys) {
    for (const auto& field : o) {
      bool known = false;
      for (const char* k : keys) known = known || field.key() == k;
      if (!known) throw DataError(where + "/" + std::string(field.key()) + " is not a known field here");
    }
  };
  if (o.contains("x") || o.contains("y")) {
    s.format = ManifestSplit::Format::kNpy;
    s.x = read_file_name(o, "x", where);
    s.y = read_file_name(o, "y", where);
    if (o.contains("table")) s.table = read_file_name(o, "table", where);
    allow({"x", "y", "table"});
  } else if (o.contains("npz")) {
    s.format = ManifestSplit::Format::kNpz;
    s.npz = read_file_name(o, "npz", where);
    allow({"npz"});
  } else if (o.contains("csv")) {
    s.format = ManifestSplit::Format::kCsv;
    s.csv = read_file_name(o, "csv", where);
    if (const auto it = o.find("label"); it != o.end()) {
      if (!it->value().is_string() || it->value().as_string().empty()) throw DataError(where + "/label must be a column name");
      s.label = std::string(it->value().as_string());
    }
    allow({"csv", "label"});
  } else if (o.contains("jsonl")) {
    s.format = ManifestSplit::Format::kJsonl;
    s.jsonl = read_file_name(o, "jsonl", where);
    if (const auto it = o.find("label"); it != o.end()) {
      if (!it->value().is_string() || it->value().as_string().empty()) throw DataError(where + "/label must be a column name");
      s.label = std::string(it->value().as_string());
    }
    allow({"jsonl", "label"});
  } else if (o.contains("shards")) {
    s.format = ManifestSplit::Format::kShards;
    read_shards_split(o, where, s);
    allow({"shards", "shape", "dtype", "table", "text_columns"});
  } else if (o.contains("text")) {
    s.format = ManifestSplit::Format::kText;
    const json::value& shards = o.at("text");
    if (!shards.is_array()) throw DataError(where + "/text must be a list of shard file names");
    for (size_t i = 0; i < shards.as_array().size(); ++i) {
      s.shards.push_back(file_name(shards.as_array()[i], where + "/text/" + std::to_string(i)));
    }
    s.profile = read_file_name(o, "profile", where);
    allow({"text", "profile"});
  } else if (o.contains("folders")) {
    s.format = ManifestSplit::Format::kFolders;
    s.folders = read_file_name(o, "folders", where);
    if (const auto it = o.find("image_size"); it != o.end()) {
      const json::value& v = it->value();
      if (!v.is_array() || v.as_array().size() != 2 || !v.as_array()[0].is_int64() || !v.as_array()[1].is_int64() ||
          v.as_array()[0].as_int64() < 1 || v.as_array()[0].as_int64() > 4096 || v.as_array()[1].as_int64() < 1 ||
          v.as_array()[1].as_int64() > 4096) {
        throw DataError(where + "/image_size must be [height, width], each 1 to 4096");
      }
      s.image_height = static_cast<uint32_t>(v.as_array()[0].as_int64());
      s.image_width = static_cast<uint32_t>(v.as_array()[1].as_int64());
    }
    if (const auto it = o.find("color_mode"); it != o.end()) {
      const json::value& v = it->value();
      if (v == "grayscale") s.color_mode = ColorMode::kGrayscale;
      else if (v == "rgb") s.color_mode = ColorMode::kRgb;
      else if (v == "rgba") s.color_mode = ColorMode::kRgba;
      else throw DataError(where + "/color_mode must be \"grayscale\", \"rgb\" or \"rgba\"");
    }
    allow({"folders", "image_size", "color_mode"});
  } else if (o.contains("images") || o.contains("labels")) {
    s.format = ManifestSplit::Format::kIdx;
    s.images = read_file_name(o, "images", where);
    s.labels = read_file_name(o, "labels", where);
    allow({"images", "labels"});
  } else {
    throw DataError(where + " must name its files: {x, y}, {npz}, {csv[, label]}, {jsonl[, label]}, {images, labels}, "
                            "{folders[, image_size, color_mode]}, {shards, shape, dtype} or {text, profile}");
  }
  return s;
}

json::object split_to_json(const ManifestSplit& s) {
  switch (s.format) {
    case ManifestSplit::Format::kNpy: {
      json::object o{{"x", s.x}, {"y", s.y}};
      if (!s.table.empty()) o["table"] = s.table;
      return o;
    }
    case ManifestSplit::Format::kNpz: return {{"npz", s.npz}};
    case ManifestSplit::Format::kCsv: return {{"csv", s.csv}, {"label", s.label}};
    case ManifestSplit::Format::kJsonl: return {{"jsonl", s.jsonl}, {"label", s.label}};
    case ManifestSplit::Format::kIdx: return {{"images", s.images}, {"labels", s.labels}};
    case ManifestSplit::Format::kFolders: {
      json::object o{{"folders", s.folders}};
      if (s.image_height > 0) o["image_size"] = json::array{s.image_height, s.image_width};
      o["color_mode"] = s.color_mode == ColorMode::kGrayscale ? "grayscale" : s.color_mode == ColorMode::kRgb ? "rgb" : "rgba";
      return o;
    }
    case ManifestSplit::Format::kText: {
      json::array shards;
      for (const auto& f : s.shards) shards.emplace_back(f);
      return {{"text", shards}, {"profile", s.profile}};
    }
    case ManifestSplit::Format::kShards: {
      json::array shards, shape;
      for (const auto& f : s.shards) shards.emplace_back(f);
      for (uint32_t d : s.shape) shape.emplace_back(d);
      json::object o{{"shards", shards}, {"shape", shape}, {"dtype", std::string(dtype_name(s.dtype))}};
      if (!s.table.empty()) o["table"] = s.table;
      if (!s.text_columns.empty()) {
        json::array columns;
        for (const auto& [column, files] : s.text_columns) {
          json::array names;
          for (const auto& f : files) names.emplace_back(f);
          columns.push_back(json::object{{"column", column}, {"shards", std::move(names)}});
        }
        o["text_columns"] = std::move(columns);
      }
      return o;
    }
  }
  return {};
}

// A stored table's schema and profile (the file beside an .npy pair or shards), checked against
// the examples it describes.
TableSchema read_split_table(const std::string& path, const ExampleSummary& summary) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(path + ": cannot open: " + std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  TableSchema table = table_from_json(text.str(), path);
  if (table.row_width() != (summary.shape.empty() ? 0 : summary.shape[0]) || summary.shape.size() != 1) {
    throw DataError(path + ": its columns do not match the examples' shape");
  }
  return table;
}

// A shards split's text columns as its manifest names them against its table: the same columns
// in the same order, each's shards text documents without labels, one per row. Headers only (a
// column's documents are verified whole when they are read: splitting, profiling).
void check_text_columns(const std::string& dir, const ManifestSplit& split, const TableSchema* table, uint64_t rows) {
  std::vector<std::string> want;
  if (table != nullptr) {
    for (const TableColumn* c : table->text_columns()) want.push_back(c->name);
  }
  std::vector<std::string> have;
  for (const auto& [column, _] : split.text_columns) have.push_back(column);
  const std::string manifest = (std::filesystem::path(dir) / kManifestFile).string();
  if (have != want) {
    const auto list = [](const std::vector<std::string>& v) {
      std::string out;
      for (const std::string& n : v) out += (out.empty() ? "" : ", ") + n;
      return "[" + out + "]";
    };
    throw DataError(manifest + ": text_columns " + list(have) + " do not match the table's text columns " + list(want) +
                    (table == nullptr ? " (the split has no table)" : " (" + split.table + ")"));
  }
  ShardLayout documents = text_shard_layout();
  documents.labels = LabelKind::kNone;
  for (const auto& [column, files] : split.text_columns) {
    uint64_t cells = 0;
    for (const std::string& f : files) {
      const ShardFile shard((std::filesystem::path(dir) / f).string());
      if (!(shard.layout() == documents)) throw DataError(shard.path() + ": not a shard of text cells (column '" + column + "')");
      cells += shard.examples();
    }
    if (cells != rows) {
      throw DataError(manifest + ": text column '" + column + "' has " + std::to_string(cells) + " cells for " +
                      std::to_string(rows) + " rows");
    }
  }
}

}  // namespace

bool is_valid_dataset_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  auto lower_digit = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!lower_digit(name[0])) return false;
  return std::all_of(name.begin(), name.end(), [&](char c) { return lower_digit(c) || c == '.' || c == '_' || c == '-'; });
}

std::vector<std::string> ManifestSplit::files() const {
  switch (format) {
    case Format::kNpy: return table.empty() ? std::vector<std::string>{x, y} : std::vector<std::string>{x, y, table};
    case Format::kNpz: return {npz};
    case Format::kCsv: return {csv};
    case Format::kJsonl: return {jsonl};
    case Format::kIdx: return {images, labels};
    case Format::kFolders: return {};
    case Format::kText: {
      std::vector<std::string> out = shards;
      out.push_back(profile);
      return out;
    }
    case Format::kShards: {
      std::vector<std::string> out = shards;
      if (!table.empty()) out.push_back(table);
      for (const auto& [_, files] : text_columns) out.insert(out.end(), files.begin(), files.end());
      return out;
    }
  }
  return {};
}

DatasetManifest read_manifest(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / kManifestFile).string();
  std::ifstream in(path);
  if (!in) throw DataError(path + ": cannot open: " + std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  if (text.str().size() > (1 << 20)) throw DataError(path + ": larger than 1 MiB; a manifest is a few lines");
  boost::system::error_code ec;
  const json::value root = parse_json(text.str(), ec);
  if (ec) throw DataError(path + ": not valid JSON: " + ec.message());
  if (!root.is_object()) throw DataError(path + ": must be a JSON object");
  const json::object& o = root.as_object();
  DatasetManifest m;
  for (const auto& field : o) {
    const std::string key(field.key());
    const std::string where = path + ": /" + key;
    if (key == "train" || key == "test") {
      m.splits[key] = read_split(field.value(), where);
    } else if (key == "num_classes") {
      if (!field.value().is_int64() || field.value().as_int64() < 2 || field.value().as_int64() > 10000) {
        throw DataError(where + " must be an integer from 2 to 10000");
      }
      m.num_classes = static_cast<uint32_t>(field.value().as_int64());
    } else if (key == "class_names") {
      if (!field.value().is_array() || field.value().as_array().size() < 2 || field.value().as_array().size() > 10000) {
        throw DataError(where + " must be an array of 2 to 10000 names");
      }
      for (const auto& n : field.value().as_array()) {
        if (!n.is_string()) throw DataError(where + " must hold strings (class i's name at index i)");
        if (std::find(m.class_names.begin(), m.class_names.end(), n.as_string()) != m.class_names.end()) {
          throw DataError(where + " names '" + std::string(n.as_string()) + "' twice");
        }
        m.class_names.emplace_back(n.as_string());
      }
    } else if (key == "source") {
      if (!field.value().is_string()) throw DataError(where + " must be a string");
      m.source = std::string(field.value().as_string()) == "upload" ? "upload" : "directory";
    } else if (key == "created_ms") {
      if (!field.value().is_int64()) throw DataError(where + " must be an integer (Unix milliseconds)");
      m.created_ms = field.value().as_int64();
    } else {
      throw DataError(where + " is not a known field (known: train, test, num_classes, class_names, source, created_ms)");
    }
  }
  if (m.splits.count("train") == 0) throw DataError(path + ": /train is required");
  // Folder splits: the dataset's classes, from the train split's folders unless named.
  const ManifestSplit& train = m.splits.at("train");
  const bool folders = std::any_of(m.splits.begin(), m.splits.end(),
                                   [](const auto& s) { return s.second.format == ManifestSplit::Format::kFolders; });
  if (folders && m.class_names.empty()) {
    if (train.format != ManifestSplit::Format::kFolders) throw DataError(path + ": /class_names is required for a folders test split");
    const std::unique_ptr<Archive> listing = Archive::open_directory((std::filesystem::path(dir) / train.folders).string(), train.folders);
    m.class_names = find_class_folders(*listing, train.folders, {}, ExampleLimits{}).class_names;
  }
  for (auto& [_, s] : m.splits) {
    if (s.format == ManifestSplit::Format::kFolders) s.class_names = m.class_names;
  }
  return m;
}

std::string manifest_to_json(const DatasetManifest& m) {
  json::object o;
  for (const auto& [name, split] : m.splits) o[name] = split_to_json(split);
  if (m.num_classes) o["num_classes"] = *m.num_classes;
  if (!m.class_names.empty()) {
    json::array names;
    for (const auto& n : m.class_names) names.push_back(json::string(n));
    o["class_names"] = std::move(names);
  }
  o["source"] = m.source;
  if (m.created_ms != 0) o["created_ms"] = m.created_ms;
  return to_json_text(o) + "\n";
}

void write_manifest(const std::string& dir, const DatasetManifest& manifest) {
  namespace fs = std::filesystem;
  const fs::path final_path = fs::path(dir) / kManifestFile;
  const fs::path temp = fs::path(dir) / (std::string(".") + kManifestFile + ".tmp");
  const std::string text = manifest_to_json(manifest);
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(temp.string() + ": cannot create: " + std::strerror(errno));
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  const int saved = errno;
  ::close(fd);
  if (!ok) throw Error(temp.string() + ": write failed: " + std::strerror(saved));
  std::error_code ec;
  fs::rename(temp, final_path, ec);
  if (ec) throw Error(final_path.string() + ": cannot replace: " + ec.message());
}

namespace {

// The reference table's columns and classes as parse options.
void follow_reference(CsvOptions& options, const TableSchema* reference) {
  if (reference == nullptr) return;
  for (const TableColumn& c : reference->columns) options.expected_columns.emplace_back(c.name, c.type);
  options.class_names = reference->class_names;
}

class DiscardingSink final : public ExampleSink {
 public:
  void begin(const std::vector<uint32_t>&, ParsedExamples::Dtype) override {}
  void examples(const uint8_t*, size_t) override {}
  void labels(const int32_t*, size_t) override {}
  void targets(const float*, size_t) override {}
};

}  // namespace

std::shared_ptr<const TableSchema> text_train_table(const std::string& dir, const DatasetManifest& manifest,
                                                    const ExampleLimits& limits) {
  const auto it = manifest.splits.find("train");
  if (it == manifest.splits.end() ||
      (it->second.format != ManifestSplit::Format::kCsv && it->second.format != ManifestSplit::Format::kJsonl)) {
    return nullptr;
  }
  DiscardingSink sink;
  ExampleSummary summary = stream_manifest_split(dir, it->second, limits, sink);
  return summary.table ? std::make_shared<const TableSchema>(std::move(*summary.table)) : nullptr;
}

ExampleSummary stream_manifest_split(const std::string& dir, const ManifestSplit& split, const ExampleLimits& limits,
                                     ExampleSink& sink, const TableSchema* reference) {
  namespace fs = std::filesystem;
  auto at = [&](const std::string& name) { return (fs::path(dir) / name).string(); };
  switch (split.format) {
    case ManifestSplit::Format::kNpy: {
      ExampleLimits table_limits = limits;
      table_limits.allow_nan = !split.table.empty();  // a table's missing values
      ExampleSummary summary = stream_npy_pair(at(split.x), at(split.y), table_limits, sink);
      if (!split.table.empty()) summary.table = read_split_table(at(split.table), summary);
      return summary;
    }
    case ManifestSplit::Format::kShards: {
      ExampleSummary summary = stream_shards(dir, split.shards, split.shape, split.dtype, limits, sink);
      if (!split.table.empty()) summary.table = read_split_table(at(split.table), summary);
      check_text_columns(dir, split, summary.table ? &*summary.table : nullptr, summary.examples);
      return summary;
    }
    case ManifestSplit::Format::kText: return stream_text_shards(dir, split.shards, split.profile, limits, sink);
    case ManifestSplit::Format::kNpz: return stream_npz(at(split.npz), limits, sink);
    case ManifestSplit::Format::kIdx: return stream_idx(at(split.images), at(split.labels), limits, sink);
    case ManifestSplit::Format::kFolders: {
      std::unique_ptr<Archive> folder = Archive::open_directory(at(split.folders), split.folders);
      ImageFolderOptions options;
      options.color_mode = split.color_mode;
      options.height = split.image_height;
      options.width = split.image_width;
      options.class_names = split.class_names;
      options.limits = limits;
      std::vector<std::string> names;
      return stream_image_folders(*folder, split.folders, options, sink, names);
    }
    case ManifestSplit::Format::kCsv: {
      CsvOptions options;
      options.label_column = split.label;
      options.limits = limits;
      follow_reference(options, reference);
      return stream_csv(file_opener(at(split.csv)), at(split.csv), options, sink);
    }
    case ManifestSplit::Format::kJsonl: {
      CsvOptions options;
      options.label_column = split.label;
      options.limits = limits;
      follow_reference(options, reference);
      return stream_jsonl(file_opener(at(split.jsonl)), at(split.jsonl), options, sink);
    }
  }
  throw DataError(dir + ": unknown split format");
}

namespace {

// Collects a split into memory.
class ExamplesSink final : public ExampleSink {
 public:
  void begin(const std::vector<uint32_t>&, ParsedExamples::Dtype) override {}
  void examples(const uint8_t* bytes, size_t n) override { out.bytes.insert(out.bytes.end(), bytes, bytes + n); }
  void labels(const int32_t* labels, size_t n) override { out.labels.insert(out.labels.end(), labels, labels + n); }
  void targets(const float* values, size_t n) override { out.targets.insert(out.targets.end(), values, values + n); }
  ParsedExamples out;
};

}  // namespace

Split load_directory_split(const std::string& dir, const std::string& name, SplitKind kind, uint32_t num_classes) {
  const DatasetManifest manifest = read_manifest(dir);
  const char* split_name = kind == SplitKind::kTrain ? "train" : "test";
  const auto it = manifest.splits.find(split_name);
  if (it == manifest.splits.end()) {
    throw DataError("dataset '" + name + "' has no " + split_name + " split (POST /v1/datasets/" + name +
                    "/split makes one from its train split)");
  }
  // The class count: the manifest's, else the largest label + 1 over the class names.
  auto classes_of = [&](uint32_t split_classes) {
    uint32_t classes = num_classes;
    if (classes == 0) {
      classes = manifest.num_classes.value_or(std::max<uint32_t>(split_classes, static_cast<uint32_t>(manifest.class_names.size())));
    }
    if (split_classes > classes) {
      throw DataError("dataset '" + name + "': the " + split_name + " split has label " + std::to_string(split_classes - 1) +
                      ", outside its " + std::to_string(classes) + " classes");
    }
    return classes;
  };
  const ManifestSplit& stored = it->second;
  std::optional<ConvertedSplit> converted;
  if (converts_to_shards(stored)) converted = converted_split(dir, split_name, stored);
  if (!converted && holds_text_folders(dir, stored)) {  // (documents are read from their shards only)
    throw DataError("dataset '" + name + "': its " + split_name + " split's documents could not be converted to shards");
  }
  const bool text = stored.format == ManifestSplit::Format::kText || (converted && converted->text());
  if (converted || stored.format == ManifestSplit::Format::kShards || text) {
    // Stored as shards (or converted into them): the labels are loaded, the examples (a table's
    // rows, a text split's documents) stay on disk (stored_examples.h).
    const std::vector<uint32_t> documents;  // a text split: variable-size examples, no shape
    Split split = converted ? load_stored_split(converted->dir, converted->shards, text ? documents : converted->shape, converted->dtype, name, kind)
                            : load_stored_split(dir, stored.shards, text ? documents : stored.shape, stored.dtype, name, kind);
    if (!converted && !stored.table.empty()) {
      ExampleSummary shape;
      shape.shape = stored.shape;
      split.table = std::make_shared<const TableSchema>(read_split_table((std::filesystem::path(dir) / stored.table).string(), shape));
      add_text_cells(dir, stored.text_columns, split);
    }
    if (!split.regression()) {
      split.num_classes = classes_of(split.num_classes);
      if (split.num_classes > kMaxClasses) {
        throw DataError("dataset '" + name + "': " + std::to_string(split.num_classes) + " classes (at most " +
                        std::to_string(kMaxClasses) + ")");
      }
      if (manifest.class_names.size() == split.num_classes) split.class_names = manifest.class_names;
    }
    return split;
  }
  ExamplesSink sink;
  const std::shared_ptr<const TableSchema> train_table =
      kind == SplitKind::kTrain ? nullptr : text_train_table(dir, manifest, ExampleLimits{});
  const ExampleSummary summary = stream_manifest_split(dir, stored, ExampleLimits{}, sink, train_table.get());
  sink.out.shape = summary.shape;
  sink.out.dtype = summary.dtype;
  sink.out.classes = summary.classes;
  std::shared_ptr<const TableSchema> table;
  if (summary.table) table = std::make_shared<const TableSchema>(*summary.table);
  if (summary.target_width > 0) {  // regression: float targets, no classes
    sink.out.target_width = summary.target_width;
    Split split = make_split(name, kind, std::move(sink.out));
    split.table = table;
    return split;
  }
  sink.out.classes = classes_of(summary.classes);
  Split split = make_split(name, kind, std::move(sink.out));
  split.table = table;
  if (manifest.class_names.size() == split.num_classes) split.class_names = manifest.class_names;
  return split;
}

Split load_any_split(const std::string& data_dir, const std::string& name, SplitKind kind) {
  if (is_known_dataset(name)) return load_split(data_dir, name, kind);
  const std::filesystem::path dir = std::filesystem::path(data_dir) / name;
  if (!is_valid_dataset_name(name) || !std::filesystem::exists(dir / kManifestFile)) {
    throw DataError("unknown dataset '" + name + "': neither a built-in (" + known_dataset_names() + ") nor a directory " +
                    dir.string() + " with a " + kManifestFile);
  }
  return load_directory_split(dir.string(), name, kind);
}

}  // namespace pstrain
