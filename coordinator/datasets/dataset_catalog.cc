#include "coordinator/datasets/dataset_catalog.h"
#include "coordinator/datasets/dataset_catalog_parts.h"
#include "common/data/text_folders.h"

#include <sys/stat.h>

#include <boost/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <future>
#include <numeric>
#include <random>

#include "common/data/converted_split.h"
#include "common/data/dataset_manifest.h"
#include "common/base/error.h"
#include "common/base/json_text.h"
#include "common/base/log.h"
#include "common/base/sha256.h"
#include "coordinator/store/job_record.h"

namespace pstrain {
namespace fs = std::filesystem;
namespace json = boost::json;

using namespace catalog_detail;

std::string dataset_json(const DatasetRecord& record, const std::vector<std::string>& used_by) {
  json::object o = dataset_to_json(record);
  json::array jobs;
  for (const auto& id : used_by) jobs.push_back(json::string(id));
  o["used_by"] = jobs;
  o["usable"] = record.usable();
  return to_json_text(o);
}

DatasetCatalog::DatasetCatalog(Options options, KvStore& kv, JobsUsing jobs_using)
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
  for (const auto& e : kv_.scan(kKeyPrefix)) {
    if (e.corrupt) continue;
    if (auto r = dataset_from_json(e.value); r && records_.count(r->name) == 0) {
      r->indexing = true;
      records_[r->name] = std::move(*r);
    }
  }
  thread_.post([this] {
    try {
      index_all();
    } catch (const std::exception& e) {
      PSLOG(kError) << "dataset catalog: reading " << options_.data_dir << " failed: " << e.what();
    }
    {
      MutexLock lock(mutex_);
      indexed_ = true;
    }
    indexed_changed_.notify_all();
  });
}

DatasetCatalog::~DatasetCatalog() = default;

std::string DatasetCatalog::dataset_dir(const std::string& name) const {
  {
    MutexLock lock(mutex_);
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
  MutexLock lock(mutex_);
  std::vector<DatasetRecord> out;
  for (const auto& [name, r] : records_) out.push_back(r);
  return out;
}

std::optional<DatasetRecord> DatasetCatalog::get(const std::string& name) const {
  MutexLock lock(mutex_);
  const auto it = records_.find(name);
  if (it == records_.end()) return std::nullopt;
  return it->second;
}

uint64_t DatasetCatalog::generation(const std::string& name) const {
  MutexLock lock(mutex_);
  const auto it = records_.find(name);
  return it == records_.end() ? 0 : it->second.generation;
}

std::optional<DatasetInfo> DatasetCatalog::info(const std::string& name, std::string* why) const {
  MutexLock lock(mutex_);
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
  if (const TableSchema* table = r.table(); table != nullptr && table->stored_columns().empty() && table->text_columns().empty()) {
    *why = "dataset \"" + name + "\" has no feature column";
    return std::nullopt;
  }
  DatasetInfo info;
  info.name = name;
  info.num_classes = r.num_classes;
  info.target_width = r.target_width;
  info.text = r.text();
  if (!info.text) for (uint32_t d : r.shape) info.example_shape.push_back(d);
  if (const TableSchema* table = r.table()) info.table = std::make_shared<const TableSchema>(*table);
  return info;
}

bool DatasetCatalog::with_dataset(const std::string& name, std::string* why,
                                  const std::function<void(const DatasetInfo&)>& submit) {
  MutexLock use(use_mutex_);
  const std::optional<DatasetInfo> found = info(name, why);
  if (!found) return false;
  submit(*found);
  return true;
}

Split DatasetCatalog::load(const std::string& name, SplitKind kind) const {
  {
    // A job re-queued at start-up may ask before the data directory has been read.
    MutexLock lock(mutex_);
    while (!indexed_) indexed_changed_.wait(lock);
  }
  const std::optional<DatasetRecord> r = get(name);
  if (!r) throw DataError("dataset '" + name + "' is not in the catalog");
  // A built-in's IDX files are converted into shards in the uploads directory once, so that
  // workers read its examples themselves as they do an upload's.
  const DatasetInfo* builtin = r->source == "builtin" ? find_dataset(name) : nullptr;
  Split split = builtin ? load_builtin_split(options_.data_dir, *builtin, kind, uploads_dir())
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
  for (const auto& e : kv_.scan(kKeyPrefix)) {
    if (e.corrupt) continue;
    if (auto r = dataset_from_json(e.value)) stored[r->name] = std::move(*r);
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
      if (r.error.empty()) {
        json::object o = dataset_to_json(r);
        o["fingerprint"] = r.fingerprint;
        (void)kv_.put(kKeyPrefix + name, to_json_text(o), false);
      }
    }
    MutexLock lock(mutex_);
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
  MutexLock lock(mutex_);
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
    // The train split first: a text table's other splits are read with its columns and classes
    // (each file is read once).
    std::vector<std::pair<std::string, ManifestSplit>> order(m.splits.begin(), m.splits.end());
    std::stable_partition(order.begin(), order.end(), [](const auto& s) { return s.first == "train"; });
    std::optional<TableSchema> train_table;
    for (auto& [split, files] : order) {
      if (holds_text_folders(dir.string(), files)) {  // documents, read from their conversion
        const std::optional<ConvertedSplit> converted = converted_split(dir.string(), split, files);
        if (!converted) {
          throw DataError(dir.string() + ": the " + split + " split's text files could not be stored as documents in " +
                          (dir / ".pstrain-shards").string() + " (a directory this process can write is needed)");
        }
        files = converted->as_split_of(dir.string());
      }
      CountingSink sink;
      const ExampleSummary summary = stream_manifest_split(dir.string(), files, options_.limits, sink,
                                                           train_table ? &*train_table : nullptr);
      if (split == "train" && summary.table) train_table = summary.table;
      if (!r.splits.empty() && (summary.shape != r.shape || summary.dtype != r.dtype)) {
        throw DataError(dir.string() + ": the " + split + " split's examples differ in shape or dtype from the others'");
      }
      r.shape = summary.shape;
      r.dtype = summary.dtype;
      if (!r.splits.empty() && summary.target_width != r.target_width) {
        throw DataError(dir.string() + ": the " + split + " split's labels differ in kind (class labels or float "
                                                          "targets, and how many) from the others'");
      }
      r.target_width = summary.target_width;
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
    if (!m.class_names.empty()) {
      if (m.class_names.size() < classes) {
        throw DataError(dir.string() + ": class_names has " + std::to_string(m.class_names.size()) + " names but a label is " +
                        std::to_string(classes - 1));
      }
      classes = static_cast<uint32_t>(m.class_names.size());
      r.class_names = m.class_names;
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
  json::object o = dataset_to_json(record);
  o["fingerprint"] = record.fingerprint;
  if (const KvStatus status = kv_.put(kKeyPrefix + record.name, to_json_text(o), true); !status.ok()) {
    PSLOG(kWarning) << "dataset " << record.name << ": record not stored: " << status.message;
  }
  MutexLock lock(mutex_);
  record.generation = next_generation_++;
  records_[record.name] = std::move(record);
}

// --- Delete ----------------------------------------------------------------------------------

void DatasetCatalog::erase(const std::string& name, std::function<void(std::optional<CatalogError>)> done) {
  thread_.post([this, name, done = std::move(done)] { done(erase(name)); });
}

std::optional<CatalogError> DatasetCatalog::erase(const std::string& name) {
  MutexLock use(use_mutex_);
  const std::optional<DatasetRecord> r = get(name);
  if (!r) return service_error(404, "dataset-not-found", "there is no dataset '" + name + "'");
  if (r->source == "builtin") return service_error(409, "dataset-builtin", "'" + name + "' is a built-in dataset and cannot be deleted");
  {
    MutexLock lock(mutex_);
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
  (void)kv_.write({{kKeyPrefix + name, std::nullopt}}, true);
  {
    MutexLock lock(mutex_);
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
