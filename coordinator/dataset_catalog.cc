#include "coordinator/dataset_catalog.h"

#include <sys/stat.h>

#include <boost/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <future>
#include <numeric>
#include <random>

#include "common/dataset_manifest.h"
#include "common/error.h"
#include "common/json_text.h"
#include "common/log.h"
#include "common/sha256.h"
#include "coordinator/job_store.h"

namespace pstrain {
namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

constexpr const char* kStagingDir = ".uploads";
const std::string kKeyPrefix = "dataset/";

// Only counts: the checks of a parse without keeping what it read.
class CountingSink final : public ExampleSink {
 public:
  void begin(const std::vector<uint32_t>&, ParsedExamples::Dtype) override {}
  void examples(const uint8_t*, size_t) override {}
  void labels(const int32_t*, size_t) override {}
};

// Keeps the labels only (the first pass of a split).
class LabelSink final : public ExampleSink {
 public:
  void begin(const std::vector<uint32_t>&, ParsedExamples::Dtype) override {}
  void examples(const uint8_t*, size_t) override {}
  void labels(const int32_t* l, size_t n) override { labels_.insert(labels_.end(), l, l + n); }
  std::vector<int32_t> labels_;
};

// Sends whole examples to one of two sinks by a per-example choice (the second pass of a split).
class RoutingSink final : public ExampleSink {
 public:
  RoutingSink(const std::vector<bool>& to_second, ExampleSink& first, ExampleSink& second)
      : to_second_(to_second), first_(first), second_(second) {}
  void begin(const std::vector<uint32_t>& shape, ParsedExamples::Dtype dtype) override {
    example_bytes_ = ParsedExamples::dtype_size(dtype);
    for (uint32_t d : shape) example_bytes_ *= d;
    first_.begin(shape, dtype);
    second_.begin(shape, dtype);
  }
  void examples(const uint8_t* bytes, size_t n) override {
    while (n > 0) {
      const size_t take = std::min(n, example_bytes_ - current_.size());
      current_.insert(current_.end(), bytes, bytes + take);
      bytes += take;
      n -= take;
      if (current_.size() == example_bytes_) {
        (to_second_[example_] ? second_ : first_).examples(current_.data(), current_.size());
        current_.clear();
        ++example_;
      }
    }
  }
  void labels(const int32_t* l, size_t n) override {
    for (size_t i = 0; i < n; ++i, ++label_) (to_second_[label_] ? second_ : first_).labels(l + i, 1);
  }

 private:
  const std::vector<bool>& to_second_;
  ExampleSink& first_;
  ExampleSink& second_;
  size_t example_bytes_ = 0;
  std::vector<uint8_t> current_;
  size_t example_ = 0, label_ = 0;
};

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
    splits[name] = json::object{{"examples", s.examples}, {"class_counts", counts}, {"files", files}};
  }
  json::object o{{"name", r.name}, {"source", r.source}, {"input_shape", shape}, {"dtype", dtype_name(r.dtype)},
                 {"num_classes", r.num_classes}, {"created_ms", r.created_ms}, {"splits", splits}};
  if (!r.error.empty()) o["error"] = r.error;
  o["state"] = r.indexing ? "indexing" : r.usable() ? "ready" : "unusable";
  return o;
}

std::optional<DatasetRecord> dataset_from_json(const std::string& text) {
  boost::system::error_code ec;
  const json::value v = json::parse(text, ec);
  if (ec || !v.is_object()) return std::nullopt;
  try {
    const json::object& o = v.as_object();
    DatasetRecord r;
    r.name = std::string(o.at("name").as_string());
    r.source = std::string(o.at("source").as_string());
    for (const auto& d : o.at("input_shape").as_array()) r.shape.push_back(static_cast<uint32_t>(d.as_int64()));
    r.dtype = o.at("dtype").as_string() == "uint8" ? ParsedExamples::Dtype::kUint8 : ParsedExamples::Dtype::kFloat32;
    r.num_classes = static_cast<uint32_t>(o.at("num_classes").as_int64());
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
  for (const auto& f : files) s.files.push_back(file_info(dir / f));
  return s;
}

// Every split reports a count for each of the dataset's classes.
void pad_counts(DatasetRecord& r) {
  for (auto& [name, s] : r.splits) s.class_counts.resize(std::max<size_t>(s.class_counts.size(), r.num_classes), 0);
}

ManifestSplit npy_split(const std::string& x, const std::string& y) {
  ManifestSplit s;
  s.format = ManifestSplit::Format::kNpy;
  s.x = x;
  s.y = y;
  return s;
}

}  // namespace

std::string dataset_json(const DatasetRecord& record, const std::vector<std::string>& used_by) {
  json::object o = dataset_to_json(record);
  json::array jobs;
  for (const auto& id : used_by) jobs.push_back(json::string(id));
  o["used_by"] = jobs;
  o["usable"] = record.usable();
  return to_json_text(o);
}

DatasetCatalog::DatasetCatalog(Options options, KvStore* kv, JobsUsing jobs_using)
    : options_(std::move(options)), kv_(kv), jobs_using_(std::move(jobs_using)) {
  // Every dataset known now is listed at once, "indexing" until its files are read (index_all
  // replaces these records): the built-in ones from their table, the others as stored last time.
  for (const DatasetInfo& info : known_datasets()) {
    DatasetRecord r;
    r.name = info.name;
    r.source = "builtin";
    for (int64_t d : info.example_shape) r.shape.push_back(static_cast<uint32_t>(d));
    r.num_classes = info.num_classes;
    r.indexing = true;
    records_[r.name] = std::move(r);
  }
  if (kv_ != nullptr) {
    for (const auto& e : kv_->scan(kKeyPrefix)) {
      if (e.corrupt) continue;
      if (auto r = dataset_from_json(e.value); r && records_.count(r->name) == 0) {
        r->indexing = true;
        records_[r->name] = std::move(*r);
      }
    }
  }
  thread_.post([this] {
    try {
      index_all();
    } catch (const std::exception& e) {
      PSLOG(kError) << "dataset catalog: reading " << options_.data_dir << " failed: " << e.what();
    }
    {
      std::lock_guard lock(mutex_);
      indexed_ = true;
    }
    indexed_changed_.notify_all();
  });
}

DatasetCatalog::~DatasetCatalog() = default;

std::string DatasetCatalog::dataset_dir(const std::string& name) const {
  {
    std::lock_guard lock(mutex_);
    const auto it = records_.find(name);
    if (it != records_.end() && !it->second.dir.empty()) return it->second.dir;
  }
  return (fs::path(uploads_dir()) / name).string();
}

void DatasetCatalog::wait_idle() {
  std::promise<void> done;
  thread_.post([&] { done.set_value(); });
  done.get_future().wait();
}

std::vector<DatasetRecord> DatasetCatalog::list() const {
  std::lock_guard lock(mutex_);
  std::vector<DatasetRecord> out;
  for (const auto& [name, r] : records_) out.push_back(r);
  return out;
}

std::optional<DatasetRecord> DatasetCatalog::get(const std::string& name) const {
  std::lock_guard lock(mutex_);
  const auto it = records_.find(name);
  if (it == records_.end()) return std::nullopt;
  return it->second;
}

uint64_t DatasetCatalog::generation(const std::string& name) const {
  std::lock_guard lock(mutex_);
  const auto it = records_.find(name);
  return it == records_.end() ? 0 : it->second.generation;
}

std::optional<DatasetInfo> DatasetCatalog::info(const std::string& name, std::string* why) const {
  std::lock_guard lock(mutex_);
  const auto it = records_.find(name);
  if (it == records_.end() && is_known_dataset(name)) return *find_dataset(name);  // still being indexed
  if (it == records_.end()) {
    std::string names;
    for (const auto& [n, r] : records_) {
      if (r.usable()) names += (names.empty() ? "" : ", ") + n;
    }
    *why = "\"" + name + "\" is not a dataset of this cluster (datasets: " + (names.empty() ? "none" : names) +
           "; upload one with PUT /v1/datasets/" + name + "/train)";
    return std::nullopt;
  }
  const DatasetRecord& r = it->second;
  if (r.indexing && is_known_dataset(name)) return *find_dataset(name);  // (its table entry)
  if (r.indexing) {
    *why = "dataset \"" + name + "\" is being indexed (the coordinator just started); try again in a moment";
    return std::nullopt;
  }
  if (!r.usable()) {
    *why = "dataset \"" + name + "\" cannot be used: " + (r.error.empty() ? "it has no train split" : r.error);
    return std::nullopt;
  }
  DatasetInfo info;
  info.name = name;
  info.num_classes = r.num_classes;
  for (uint32_t d : r.shape) info.example_shape.push_back(d);
  return info;
}

bool DatasetCatalog::with_dataset(const std::string& name, std::string* why,
                                  const std::function<void(const DatasetInfo&)>& submit) {
  std::lock_guard use(use_mutex_);
  const std::optional<DatasetInfo> found = info(name, why);
  if (!found) return false;
  submit(*found);
  return true;
}

Split DatasetCatalog::load(const std::string& name, SplitKind kind) const {
  {
    // A job re-queued at start-up may ask before the data directory has been read.
    std::unique_lock lock(mutex_);
    indexed_changed_.wait(lock, [&] { return indexed_; });
  }
  const std::optional<DatasetRecord> r = get(name);
  if (!r) throw DataError("dataset '" + name + "' is not in the catalog");
  Split split = r->source == "builtin" ? load_split(options_.data_dir, name, kind)
                                       : load_directory_split(r->dir, name, kind, r->num_classes);
  if (const auto it = r->splits.find(kind == SplitKind::kTrain ? "train" : "test"); it != r->splits.end()) {
    for (const DatasetFileInfo& f : it->second.files) {
      split.sha256 += (split.sha256.empty() ? "" : " ") + f.name + "=" + f.sha256;
    }
  }
  return split;
}

// --- Indexing --------------------------------------------------------------------------------

void DatasetCatalog::index_all() {
  // Leftovers of uploads that were cut off by a crash.
  // Leftovers of uploads that a crash cut off; not this process's own (an upload may already be
  // streaming: the HTTP server starts while this runs).
  std::error_code ec;
  const std::string mine = "-" + std::to_string(::getpid()) + "-";
  for (const auto& entry : fs::directory_iterator(fs::path(uploads_dir()) / kStagingDir, ec)) {
    if (entry.path().filename().string().find(mine) == std::string::npos) fs::remove_all(entry.path(), ec);
  }
  ec.clear();

  std::map<std::string, DatasetRecord> stored;
  if (kv_ != nullptr) {
    for (const auto& e : kv_->scan(kKeyPrefix)) {
      if (e.corrupt) continue;
      if (auto r = dataset_from_json(e.value)) stored[r->name] = std::move(*r);
    }
  }
  auto reuse_or_index = [&](const std::string& name, const std::string& fp, const std::string& dir,
                            const std::function<DatasetRecord()>& index) {
    const auto it = stored.find(name);
    DatasetRecord r;
    if (it != stored.end() && it->second.fingerprint == fp && it->second.error.empty()) {
      r = it->second;
      r.dir = dir;
    } else {
      r = index();
      r.fingerprint = fp;
      if (kv_ != nullptr && r.error.empty()) {
        json::object o = dataset_to_json(r);
        o["fingerprint"] = r.fingerprint;
        (void)kv_->put(kKeyPrefix + name, to_json_text(o), false);
      }
    }
    std::lock_guard lock(mutex_);
    r.generation = next_generation_++;
    records_[name] = std::move(r);
  };

  for (const DatasetInfo& info : known_datasets()) {
    std::vector<std::string> paths;
    std::string missing;
    for (SplitKind kind : {SplitKind::kTrain, SplitKind::kTest}) {
      try {
        auto [images, labels] = split_files(options_.data_dir, info, kind);
        paths.push_back(images);
        paths.push_back(labels);
      } catch (const DataError& e) {
        missing = e.what();
      }
    }
    reuse_or_index(info.name, fingerprint(paths), "", [&] {
      DatasetRecord r;
      r.name = info.name;
      r.source = "builtin";
      for (int64_t d : info.example_shape) r.shape.push_back(static_cast<uint32_t>(d));
      r.dtype = ParsedExamples::Dtype::kUint8;
      r.num_classes = info.num_classes;
      if (!missing.empty()) {
        r.error = missing;
        return r;
      }
      try {
        for (SplitKind kind : {SplitKind::kTrain, SplitKind::kTest}) {
          auto [images, labels] = split_files(options_.data_dir, info, kind);
          CountingSink sink;
          const ExampleSummary summary = stream_idx(images, labels, options_.limits, sink);
          DatasetSplitInfo s;
          s.examples = summary.examples;
          s.class_counts = summary.class_counts;
          s.files = {file_info(images), file_info(labels)};
          r.splits[kind == SplitKind::kTrain ? "train" : "test"] = std::move(s);
          r.created_ms = std::max(r.created_ms, mtime_ms(images));
        }
        pad_counts(r);
      } catch (const std::exception& e) {
        r.error = e.what();
      }
      return r;
    });
  }

  std::vector<fs::path> roots = {uploads_dir()};
  if (fs::path(options_.data_dir) != fs::path(uploads_dir())) roots.push_back(options_.data_dir);
  std::set<std::string> seen;
  for (const fs::path& root : roots) {
  if (!fs::is_directory(root, ec)) continue;  // (indexed_ is still set below)
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || !fs::exists(entry.path() / kManifestFile)) continue;
    if (!is_valid_dataset_name(name) || is_known_dataset(name) || !seen.insert(name).second) {
      PSLOG(kWarning) << "dataset directory " << entry.path().string() << " ignored: '" << name
                      << "' is not a valid dataset name, is a built-in's, or is taken by an uploaded dataset";
      continue;
    }
    std::vector<std::string> paths = {(entry.path() / kManifestFile).string()};
    try {
      for (const auto& [split, files] : read_manifest(entry.path().string()).splits) {
        for (const auto& f : files.files()) paths.push_back((entry.path() / f).string());
      }
    } catch (const DataError&) {
    }
    reuse_or_index(name, fingerprint(paths), entry.path().string(), [&] {
      std::optional<DatasetRecord> r = index_directory_at(name, entry.path().string());
      return std::move(*r);
    });
  }
  }
  std::lock_guard lock(mutex_);
  // Listed at start-up but not found now (its directory is gone): no longer a dataset.
  std::erase_if(records_, [](const auto& entry) { return entry.second.indexing; });
  PSLOG(kInfo) << "dataset catalog: " << records_.size() << " datasets (" << options_.data_dir << ", uploads in "
               << uploads_dir() << ")";
}

std::optional<DatasetRecord> DatasetCatalog::index_directory(const std::string& name, const std::string& source) {
  std::optional<DatasetRecord> r = index_directory_at(name, dataset_dir(name));
  if (r && r->source.empty()) r->source = source;
  return r;
}

std::optional<DatasetRecord> DatasetCatalog::index_directory_at(const std::string& name, const std::string& at) {
  DatasetRecord r;
  r.name = name;
  r.source = "directory";
  r.dir = at;
  const fs::path dir = at;
  try {
    const DatasetManifest m = read_manifest(dir.string());
    r.source = m.source;
    r.created_ms = m.created_ms != 0 ? m.created_ms : mtime_ms(dir / kManifestFile);
    uint32_t classes = 0;
    for (const auto& [split, files] : m.splits) {
      CountingSink sink;
      const ExampleSummary summary = stream_manifest_split(dir.string(), files, options_.limits, sink);
      if (!r.splits.empty() && (summary.shape != r.shape || summary.dtype != r.dtype)) {
        throw DataError(dir.string() + ": the " + split + " split's examples differ in shape or dtype from the others'");
      }
      r.shape = summary.shape;
      r.dtype = summary.dtype;
      classes = std::max(classes, summary.classes);
      r.splits[split] = split_info(summary, dir, files.files());
    }
    if (m.num_classes) {
      if (*m.num_classes < classes) {
        throw DataError(dir.string() + ": num_classes is " + std::to_string(*m.num_classes) + " but a label is " +
                        std::to_string(classes - 1));
      }
      classes = *m.num_classes;
    }
    r.num_classes = classes;
    pad_counts(r);
  } catch (const std::exception& e) {
    r.error = strip_dir(e.what(), fs::path(at).parent_path().string());
    r.splits.clear();
  }
  return r;
}

void DatasetCatalog::commit(DatasetRecord record) {
  if (kv_ != nullptr) {
    json::object o = dataset_to_json(record);
    o["fingerprint"] = record.fingerprint;
    const KvStatus status = kv_->put(kKeyPrefix + record.name, to_json_text(o), true);
    if (!status.ok()) {
      PSLOG(kWarning) << "dataset " << record.name << ": record not stored: " << status.message;
    }
  }
  std::lock_guard lock(mutex_);
  record.generation = next_generation_++;
  records_[record.name] = std::move(record);
}

// --- Uploads ---------------------------------------------------------------------------------

std::optional<CatalogError> DatasetCatalog::precheck(const std::string& name, const std::string& split, bool replace) const {
  if (!is_valid_dataset_name(name)) {
    return service_error(400, "invalid-dataset-name",
                         "'" + name + "' is not a valid dataset name: use 1 to 64 of a-z, 0-9, '.', '_', '-', starting "
                         "with a letter or digit",
                         "name");
  }
  if (split != "train" && split != "test") {
    return service_error(400, "invalid-split", "the split must be 'train' or 'test', not '" + split + "'", "split");
  }
  std::lock_guard lock(mutex_);
  if (busy_.count(name + "/" + split) != 0 || busy_.count(name + "/*") != 0) {
    return service_error(409, "dataset-busy", "dataset '" + name + "' is being changed by another request; retry when it is done");
  }
  const auto it = records_.find(name);
  if (it == records_.end()) return std::nullopt;
  if (it->second.source == "builtin") {
    return service_error(409, "dataset-builtin", "'" + name + "' is a built-in dataset and cannot be changed");
  }
  if (it->second.splits.count(split) != 0 && !replace) {
    return service_error(409, "dataset-exists",
                         "dataset '" + name + "' already has a " + split + " split; add ?replace=true to replace it", "replace");
  }
  return std::nullopt;
}

std::string DatasetCatalog::new_staging_path() {
  // (The HTTP server's upload thread creates the directory: no file work on the caller's thread.)
  const fs::path dir = fs::path(uploads_dir()) / kStagingDir;
  std::lock_guard lock(mutex_);
  return (dir / ("body-" + std::to_string(::getpid()) + "-" + std::to_string(next_staging_++))).string();
}

void DatasetCatalog::ingest(Upload upload, std::function<void(UploadResult)> done) {
  thread_.post([this, upload = std::move(upload), done = std::move(done)]() mutable {
    UploadResult result;
    const std::string key = upload.name + "/" + upload.split;
    if (auto e = precheck(upload.name, upload.split, upload.replace)) {
      result.error = *e;
    } else {
      {
        std::lock_guard lock(mutex_);
        busy_.insert(key);
      }
      try {
        result = ingest_now(upload);
      } catch (const DatasetFormatError& e) {
        result.error = format_error(e);
        // Name the upload as the user knows it, not by the staging file's path.
        result.error->detail = replace_all(result.error->detail, upload.body_path, upload_name(upload));
        result.error->detail = strip_dir(result.error->detail, (fs::path(uploads_dir()) / kStagingDir).string());
      } catch (const std::exception& e) {
        result.error = service_error(500, "dataset-store-failed", e.what());
      }
      std::lock_guard lock(mutex_);
      busy_.erase(key);
    }
    std::error_code ec;
    fs::remove(upload.body_path, ec);
    if (result.error) {
      PSLOG(kInfo) << "upload of " << key << " refused: " << result.error->detail;
    }
    done(std::move(result));
  });
}

DatasetCatalog::UploadResult DatasetCatalog::ingest_now(Upload& upload) {
  UploadResult result;
  PSLOG(kInfo) << "dataset " << upload.name << ": checking and converting " << upload_name(upload) << " ("
               << upload.body_bytes << " bytes received)";
  const fs::path staging = fs::path(uploads_dir()) / kStagingDir;
  const std::string uploaded_as = upload_name(upload);
  // The two halves of an IDX pair: the first waits (not visible) in the staging directory.
  std::string images_path, labels_path;
  if (upload.format == UploadFormat::kIdx) {
    const std::string pending = (staging / ("pending-" + upload.name + "-" + upload.split + "-")).string();
    const std::string mine = pending + (upload.part == UploadPart::kImages ? "images" : "labels");
    const std::string other = pending + (upload.part == UploadPart::kImages ? "labels" : "images");
    fs::rename(upload.body_path, mine);
    if (!fs::exists(other)) {
      result.status = 202;
      result.waiting_for = upload.part == UploadPart::kImages ? "labels" : "images";
      return result;
    }
    images_path = upload.part == UploadPart::kImages ? mine : other;
    labels_path = upload.part == UploadPart::kImages ? other : mine;
  }

  // Convert into a fresh staging directory.
  const fs::path work = staging / ("work-" + std::to_string(::getpid()) + "-" + std::to_string(now_ms()) + "-" +
                                   std::to_string(reinterpret_cast<uintptr_t>(&upload) % 100000));
  fs::create_directories(work);
  struct Cleanup {
    fs::path dir;
    std::vector<std::string> files;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
      for (const auto& f : files) fs::remove(f, ec);
    }
  } cleanup{work, {images_path, labels_path}};

  const std::string stamp = std::to_string(now_ms());
  const std::string x_name = upload.split + "-x-" + stamp + ".npy", y_name = upload.split + "-y-" + stamp + ".npy";
  NpyFileWriter writer((work / x_name).string(), (work / y_name).string());
  ExampleSummary summary;
  switch (upload.format) {
    case UploadFormat::kCsv: {
      std::ifstream in(upload.body_path, std::ios::binary);
      if (!in) throw Error(upload.body_path + ": cannot open: " + std::strerror(errno));
      CsvOptions options;
      options.label_column = upload.label_column;
      options.limits = options_.limits;
      summary = stream_csv(in, uploaded_as, options, writer);
      break;
    }
    case UploadFormat::kNpz:
      summary = stream_npz(upload.body_path, options_.limits, writer);
      break;
    case UploadFormat::kIdx:
      summary = stream_idx(images_path, labels_path, options_.limits, writer);
      break;
  }
  writer.finish();

  std::lock_guard use(use_mutex_);  // no job starts on the dataset while it changes
  const std::optional<DatasetRecord> existing = get(upload.name);
  DatasetRecord record;
  if (existing) {
    record = *existing;
    for (const auto& [split, s] : record.splits) {
      if (split == upload.split) continue;
      if (record.shape != summary.shape || record.dtype != summary.dtype) {
        std::string shape;
        for (uint32_t d : summary.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
        std::string theirs;
        for (uint32_t d : record.shape) theirs += (theirs.empty() ? "" : ", ") + std::to_string(d);
        CatalogError e = service_error(422, "dataset-shape-mismatch",
                                       "the uploaded " + upload.split + " split has " + std::string(dtype_name(summary.dtype)) +
                                           " examples of shape [" + shape + "] but the dataset's " + split + " split has " +
                                           std::string(dtype_name(record.dtype)) + " examples of shape [" + theirs + "]");
        result.error = e;
        return result;
      }
    }
    if (record.splits.count(upload.split) != 0) {
      const std::vector<std::string> jobs = jobs_using_ ? jobs_using_(upload.name) : std::vector<std::string>{};
      if (!jobs.empty()) {
        std::string ids;
        for (const auto& j : jobs) ids += (ids.empty() ? "" : ", ") + j;
        result.error = service_error(409, "dataset-in-use",
                                     "dataset '" + upload.name + "' is used by unfinished jobs (" + ids + "); it cannot be replaced");
        return result;
      }
      result.status = 200;
    }
  } else {
    record.name = upload.name;
    record.source = "upload";
    record.created_ms = now_ms();
  }
  record.shape = summary.shape;
  record.dtype = summary.dtype;
  const fs::path dir = dataset_dir(upload.name);
  record.dir = dir.string();

  // Move in: a new dataset is its staging directory renamed; an existing one gets the files
  // renamed in, then its manifest replaced (the old files go after that).
  DatasetManifest manifest;
  std::vector<std::string> old_files;
  if (existing) {
    manifest = read_manifest(dir.string());
    if (const auto it = manifest.splits.find(upload.split); it != manifest.splits.end()) old_files = it->second.files();
  } else {
    manifest.source = "upload";
    manifest.created_ms = record.created_ms;
  }
  manifest.splits[upload.split] = npy_split(x_name, y_name);
  manifest.num_classes.reset();
  if (existing) {
    fs::rename(work / x_name, dir / x_name);
    fs::rename(work / y_name, dir / y_name);
    write_manifest(dir.string(), manifest);
    std::error_code ec;
    for (const auto& f : old_files) {
      if (f != x_name && f != y_name) fs::remove(dir / f, ec);
    }
  } else {
    write_manifest(work.string(), manifest);
    std::error_code ec;
    fs::rename(work, dir, ec);
    if (ec) throw Error("cannot create " + dir.string() + ": " + ec.message());
  }

  PSLOG(kInfo) << "dataset " << upload.name << ": " << upload.split << " converted; hashing the stored files";
  DatasetSplitInfo s = split_info(summary, dir, {x_name, y_name});
  record.splits[upload.split] = std::move(s);
  record.num_classes = 0;
  for (const auto& [split, si] : record.splits) record.num_classes = std::max<uint32_t>(record.num_classes, static_cast<uint32_t>(si.class_counts.size()));
  pad_counts(record);
  record.error.clear();
  std::vector<std::string> paths = {(dir / kManifestFile).string()};
  for (const auto& [split, f] : manifest.splits) {
    for (const auto& name : f.files()) paths.push_back((dir / name).string());
  }
  record.fingerprint = fingerprint(paths);
  commit(record);
  result.record = get(upload.name);
  PSLOG(kInfo) << "dataset " << upload.name << ": " << upload.split << " split stored (" << summary.examples
               << " examples, " << upload.body_bytes << " bytes uploaded, sha256 " << upload.body_sha256 << ")";
  return result;
}

// --- Split -----------------------------------------------------------------------------------

void DatasetCatalog::split(const std::string& name, double test_fraction, uint64_t seed, std::function<void(SplitResult)> done) {
  thread_.post([this, name, test_fraction, seed, done = std::move(done)] {
    SplitResult result;
    {
      std::lock_guard lock(mutex_);
      if (busy_.count(name + "/train") != 0 || busy_.count(name + "/test") != 0) {
        result.error = service_error(409, "dataset-busy", "dataset '" + name + "' is being uploaded; retry when it is done");
      } else {
        busy_.insert(name + "/*");
      }
    }
    if (!result.error) {
      try {
        result = split_now(name, test_fraction, seed);
      } catch (const std::exception& e) {
        result.error = service_error(500, "dataset-split-failed", e.what());
      }
      std::lock_guard lock(mutex_);
      busy_.erase(name + "/*");
    }
    done(std::move(result));
  });
}

DatasetCatalog::SplitResult DatasetCatalog::split_now(const std::string& name, double test_fraction, uint64_t seed) {
  SplitResult result;
  const std::optional<DatasetRecord> r = get(name);
  if (!r) {
    result.error = service_error(404, "dataset-not-found", "there is no dataset '" + name + "'");
    return result;
  }
  if (r->source == "builtin") {
    result.error = service_error(409, "dataset-builtin", "'" + name + "' is a built-in dataset and already has its test split");
    return result;
  }
  if (!r->usable()) {
    result.error = service_error(409, "dataset-unusable", "dataset '" + name + "' cannot be used: " + r->error);
    return result;
  }
  if (r->splits.count("test") != 0) {
    result.error = service_error(409, "dataset-has-test-split",
                                 "dataset '" + name + "' already has a test split; delete the dataset or replace its test split");
    return result;
  }
  const fs::path dir = dataset_dir(name);
  DatasetManifest manifest = read_manifest(dir.string());
  const ManifestSplit train = manifest.splits.at("train");

  // Pass 1: the labels; then per class, a seeded shuffle picks round(fraction * count) for test.
  LabelSink labels;
  stream_manifest_split(dir.string(), train, options_.limits, labels);
  std::map<int32_t, std::vector<size_t>> by_class;
  for (size_t i = 0; i < labels.labels_.size(); ++i) by_class[labels.labels_[i]].push_back(i);
  std::vector<bool> to_test(labels.labels_.size(), false);
  std::mt19937_64 rng(seed);
  size_t test_count = 0;
  for (auto& [label, indices] : by_class) {
    std::shuffle(indices.begin(), indices.end(), rng);
    const auto take = static_cast<size_t>(std::llround(test_fraction * static_cast<double>(indices.size())));
    for (size_t i = 0; i < take && i < indices.size(); ++i) to_test[indices[i]] = true;
    test_count += std::min(take, indices.size());
  }
  if (test_count == 0 || test_count == to_test.size()) {
    result.error = service_error(422, "split-empty",
                                 "a test_fraction of " + std::to_string(test_fraction) + " of " + std::to_string(to_test.size()) +
                                     " examples leaves one side empty",
                                 "test_fraction");
    return result;
  }

  // Pass 2: every example to its side.
  const fs::path work = fs::path(uploads_dir()) / kStagingDir / ("split-" + name + "-" + std::to_string(now_ms()));
  fs::create_directories(work);
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{work};
  const std::string stamp = std::to_string(now_ms());
  const std::string names[4] = {"train-x-" + stamp + ".npy", "train-y-" + stamp + ".npy", "test-x-" + stamp + ".npy",
                                "test-y-" + stamp + ".npy"};
  NpyFileWriter train_writer((work / names[0]).string(), (work / names[1]).string());
  NpyFileWriter test_writer((work / names[2]).string(), (work / names[3]).string());
  RoutingSink router(to_test, train_writer, test_writer);
  stream_manifest_split(dir.string(), train, options_.limits, router);
  train_writer.finish();
  test_writer.finish();

  std::lock_guard use(use_mutex_);
  const std::vector<std::string> jobs = jobs_using_ ? jobs_using_(name) : std::vector<std::string>{};
  if (!jobs.empty()) {
    std::string ids;
    for (const auto& j : jobs) ids += (ids.empty() ? "" : ", ") + j;
    result.error = service_error(409, "dataset-in-use", "dataset '" + name + "' is used by unfinished jobs (" + ids + ")");
    return result;
  }
  for (const auto& n : names) fs::rename(work / n, dir / n);
  const std::vector<std::string> old_files = train.files();
  manifest.splits["train"] = npy_split(names[0], names[1]);
  manifest.splits["test"] = npy_split(names[2], names[3]);
  write_manifest(dir.string(), manifest);
  std::error_code ec;
  for (const auto& f : old_files) fs::remove(dir / f, ec);

  std::optional<DatasetRecord> record = index_directory(name, r->source);
  record->created_ms = r->created_ms;
  std::vector<std::string> paths = {(dir / kManifestFile).string()};
  for (const auto& n : names) paths.push_back((dir / n).string());
  record->fingerprint = fingerprint(paths);
  commit(*record);
  result.record = get(name);
  PSLOG(kInfo) << "dataset " << name << ": split into " << (to_test.size() - test_count) << " train and " << test_count
               << " test examples (seed " << seed << ")";
  return result;
}

// --- Delete ----------------------------------------------------------------------------------

void DatasetCatalog::erase(const std::string& name, std::function<void(std::optional<CatalogError>)> done) {
  thread_.post([this, name, done = std::move(done)] { done(erase(name)); });
}

std::optional<CatalogError> DatasetCatalog::erase(const std::string& name) {
  std::lock_guard use(use_mutex_);
  const std::optional<DatasetRecord> r = get(name);
  if (!r) return service_error(404, "dataset-not-found", "there is no dataset '" + name + "'");
  if (r->source == "builtin") return service_error(409, "dataset-builtin", "'" + name + "' is a built-in dataset and cannot be deleted");
  {
    std::lock_guard lock(mutex_);
    for (const auto& key : busy_) {
      if (key.rfind(name + "/", 0) == 0) {
        return service_error(409, "dataset-busy", "dataset '" + name + "' is being changed by another request");
      }
    }
  }
  const std::vector<std::string> jobs = jobs_using_ ? jobs_using_(name) : std::vector<std::string>{};
  if (!jobs.empty()) {
    std::string ids;
    for (const auto& j : jobs) ids += (ids.empty() ? "" : ", ") + j;
    return service_error(409, "dataset-in-use", "dataset '" + name + "' is used by unfinished jobs (" + ids + ")");
  }
  // Out of sight at once (rename), then removed.
  const fs::path staging = fs::path(uploads_dir()) / kStagingDir;
  std::error_code ec;
  fs::create_directories(staging, ec);
  const fs::path trash = staging / ("deleted-" + name + "-" + std::to_string(now_ms()));
  fs::rename(dataset_dir(name), trash, ec);
  if (ec) {  // another filesystem (a dataset dropped into the data directory): removed in place
    ec.clear();
    fs::remove_all(dataset_dir(name), ec);
  }
  if (ec) return service_error(500, "dataset-delete-failed", "cannot remove dataset '" + name + "': " + ec.message());
  if (kv_ != nullptr) (void)kv_->write({{kKeyPrefix + name, std::nullopt}}, true);
  {
    std::lock_guard lock(mutex_);
    records_.erase(name);
  }
  thread_.post([trash] {
    std::error_code ignored;
    fs::remove_all(trash, ignored);
  });
  PSLOG(kInfo) << "dataset " << name << " deleted";
  return std::nullopt;
}

}  // namespace pstrain
