#include "coordinator/datasets/dataset_catalog_parts.h"

#include "common/data/archive.h"

#include <fstream>
#include <sys/stat.h>

#include <boost/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <future>
#include <numeric>
#include <random>

#include "common/base/error.h"
#include "common/base/json_parse.h"
#include "common/base/json_text.h"
#include "common/base/log.h"
#include "common/base/sha256.h"
#include "common/data/dataset_manifest.h"
#include "coordinator/store/job_record.h"

namespace pstrain::catalog_detail {

CatalogError format_error(const DatasetFormatError& e) {
  std::string kind(format_error_kind_name(e.kind()));
  std::replace(kind.begin(), kind.end(), '_', '-');
  CatalogError out = service_error(e.kind() == DatasetFormatError::Kind::kTooLarge ? 413 : 422, "dataset-" + kind, e.what());
  out.line = e.line();
  out.column = e.column();
  return out;
}

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  if (from.empty()) return text;
  for (size_t at = 0; (at = text.find(from, at)) != std::string::npos; at += to.size()) text.replace(at, from.size(), to);
  return text;
}

// An upload as its messages name it: "train.csv", "train.npz", "train/images".
std::string upload_name(const DatasetCatalog::Upload& u) {
  switch (u.format) {
    case DatasetCatalog::UploadFormat::kCsv: return u.split + ".csv";
    case DatasetCatalog::UploadFormat::kNpz: return u.split + ".npz";
    case DatasetCatalog::UploadFormat::kJsonl: return u.split + ".jsonl";
    case DatasetCatalog::UploadFormat::kArchive: return u.split + (Archive::looks_like_zip(u.body_path) ? ".zip" : ".tar");
    case DatasetCatalog::UploadFormat::kIdx: break;
  }
  return u.split + (u.part == DatasetCatalog::UploadPart::kImages ? "/images" : "/labels");
}

int64_t mtime_ms(const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return int64_t{st.st_mtim.tv_sec} * 1000 + st.st_mtim.tv_nsec / 1000000;
}

// A file's path shown to users: relative to the staging or data directory, never the server's layout.
std::string strip_dir(std::string message, const std::string& dir) {
  const std::string prefix = dir + "/";
  for (size_t at; (at = message.find(prefix)) != std::string::npos;) message.erase(at, prefix.size());
  return message;
}

// Names, sizes and mtimes of the files (and the manifest): equal fingerprints mean the files did
// not change, so a stored record still describes them.
std::string fingerprint(const std::vector<std::string>& paths) {
  std::string f;
  for (const auto& p : paths) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) {
      f += p + ":missing;";
      continue;
    }
    f += p + ":" + std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
         std::to_string(st.st_mtim.tv_nsec) + ";";
  }
  return f;
}

json::object dataset_to_json(const DatasetRecord& r) {
  json::array shape;
  for (uint32_t d : r.shape) shape.push_back(d);
  json::object splits;
  for (const auto& [name, s] : r.splits) {
    json::array counts, files;
    for (uint64_t c : s.class_counts) counts.push_back(c);
    for (const auto& f : s.files) files.push_back(json::object{{"name", f.name}, {"bytes", f.bytes}, {"sha256", f.sha256}});
    json::object split{{"examples", s.examples}, {"class_counts", counts}, {"files", files}};
    // Class imbalance: the largest class over the smallest present one, and the classes absent.
    uint64_t most = 0, least = UINT64_MAX, absent = 0;
    for (uint64_t c : s.class_counts) {
      if (c == 0) {
        ++absent;
        continue;
      }
      most = std::max(most, c);
      least = std::min(least, c);
    }
    if (most > 0) {
      split["imbalance_ratio"] = round_to(static_cast<double>(most) / static_cast<double>(least), 3);
      split["absent_classes"] = absent;
    }
    if (s.table) split["table"] = parse_json(table_to_json(*s.table));
    if (s.text) split["text"] = parse_json(text_profile_to_json(*s.text));
    splits[name] = std::move(split);
  }
  json::object o{{"name", r.name}, {"source", r.source}, {"input_shape", shape}, {"dtype", r.text() ? "string" : dtype_name(r.dtype)},
                 {"num_classes", r.num_classes}, {"created_ms", r.created_ms}, {"splits", splits}};
  if (r.target_width > 0) {
    o["task"] = "regression";
    o["targets"] = r.target_width;
  } else {
    o["task"] = "classification";
  }
  if (const TableSchema* table = r.table()) {
    json::array names, columns;
    for (const std::string& n : table->class_names) names.push_back(json::string(n));
    for (const TableColumn& c : table->columns) columns.push_back(json::object{{"name", c.name}, {"type", column_type_name(c.type)}});
    o["label"] = table->label;
    o["columns"] = std::move(columns);
    if (!names.empty()) o["class_names"] = std::move(names);
  } else if (!r.class_names.empty()) {
    json::array names;
    for (const std::string& n : r.class_names) names.push_back(json::string(n));
    o["class_names"] = std::move(names);
  }
  if (!r.error.empty()) o["error"] = r.error;
  o["state"] = r.indexing ? "indexing" : r.usable() ? "ready" : "unusable";
  return o;
}

std::optional<DatasetRecord> dataset_from_json(const std::string& text) {
  boost::system::error_code ec;
  const json::value v = parse_json(text, ec);
  if (ec || !v.is_object()) return std::nullopt;
  try {
    const json::object& o = v.as_object();
    DatasetRecord r;
    r.name = std::string(o.at("name").as_string());
    r.source = std::string(o.at("source").as_string());
    for (const auto& d : o.at("input_shape").as_array()) r.shape.push_back(static_cast<uint32_t>(d.as_int64()));
    // ("string": text documents, stored as bytes; text() tells them by their splits' profiles.)
    r.dtype = o.at("dtype").as_string() == "float32" ? ParsedExamples::Dtype::kFloat32 : ParsedExamples::Dtype::kUint8;
    r.num_classes = static_cast<uint32_t>(o.at("num_classes").as_int64());
    if (const auto it = o.find("targets"); it != o.end()) r.target_width = static_cast<uint32_t>(it->value().as_int64());
    if (const auto it = o.find("class_names"); it != o.end() && !o.contains("columns")) {
      for (const auto& n : it->value().as_array()) r.class_names.emplace_back(n.as_string());
    }
    r.created_ms = o.at("created_ms").as_int64();
    for (const auto& [name, sv] : o.at("splits").as_object()) {
      const json::object& so = sv.as_object();
      DatasetSplitInfo s;
      s.examples = static_cast<uint64_t>(so.at("examples").as_int64());
      for (const auto& c : so.at("class_counts").as_array()) s.class_counts.push_back(static_cast<uint64_t>(c.as_int64()));
      for (const auto& f : so.at("files").as_array()) {
        const json::object& fo = f.as_object();
        s.files.push_back({std::string(fo.at("name").as_string()), static_cast<uint64_t>(fo.at("bytes").as_int64()),
                           std::string(fo.at("sha256").as_string())});
      }
      if (const auto t = so.find("table"); t != so.end()) s.table = table_from_json(json::serialize(t->value()), "stored record");
      if (const auto t = so.find("text"); t != so.end()) s.text = text_profile_from_json(json::serialize(t->value()), "stored record");
      r.splits[std::string(name)] = std::move(s);
    }
    if (const auto it = o.find("fingerprint"); it != o.end()) r.fingerprint = std::string(it->value().as_string());
    return r;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

DatasetFileInfo file_info(const fs::path& path) {
  return {path.filename().string(), static_cast<uint64_t>(fs::file_size(path)), sha256_file(path.string())};
}

// The split's statistics from a summary and its files.
DatasetSplitInfo split_info(const ExampleSummary& summary, const fs::path& dir, const std::vector<std::string>& files) {
  DatasetSplitInfo s;
  s.examples = summary.examples;
  s.class_counts = summary.class_counts;
  s.target_width = summary.target_width;
  s.table = summary.table;
  s.text = summary.text;
  for (const auto& f : files) s.files.push_back(file_info(dir / f));
  return s;
}

// Every split reports a count for each of the dataset's classes.
void pad_counts(DatasetRecord& r) {
  for (auto& [name, s] : r.splits) s.class_counts.resize(std::max<size_t>(s.class_counts.size(), r.num_classes), 0);
}

ManifestSplit shards_split(const std::vector<ShardInfo>& shards, const ExampleSummary& summary, const std::string& table) {
  ManifestSplit s;
  s.format = ManifestSplit::Format::kShards;
  for (const ShardInfo& shard : shards) s.shards.push_back(shard.file);
  s.shape = summary.shape;
  s.dtype = summary.dtype;
  s.table = table;
  return s;
}

ManifestSplit text_split(const std::vector<ShardInfo>& shards, const std::string& profile) {
  ManifestSplit s;
  s.format = ManifestSplit::Format::kText;
  for (const ShardInfo& shard : shards) s.shards.push_back(shard.file);
  s.profile = profile;
  return s;
}

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.flush();
  if (!out) throw Error(path + ": cannot write");
}

}  // namespace pstrain::catalog_detail
