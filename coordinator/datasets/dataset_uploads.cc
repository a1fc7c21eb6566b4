// DatasetCatalog's uploads and splits (dataset_catalog.h): staging, checks, the shards written
// for every upload, and the train/test split (stratified by class; a regression dataset's at random,
// seeded).
#include "coordinator/datasets/dataset_catalog.h"
#include "coordinator/datasets/dataset_catalog_parts.h"

#include <sys/stat.h>

#include <boost/json.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <future>
#include <numeric>
#include <random>

#include "common/data/archive.h"
#include "common/data/converted_split.h"
#include "common/data/dataset_manifest.h"
#include "common/data/image_folders.h"
#include "common/data/text_folders.h"
#include "common/data/text_profile.h"
#include "common/base/error.h"
#include "common/base/json_text.h"
#include "common/base/log.h"
#include "common/base/sha256.h"
#include "coordinator/store/job_record.h"

namespace pstrain {
namespace fs = std::filesystem;
namespace json = boost::json;
using namespace catalog_detail;

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
  MutexLock lock(mutex_);
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
  MutexLock lock(mutex_);
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
        MutexLock lock(mutex_);
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
      MutexLock lock(mutex_);
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
  // The stored form: the dataset store's shards (shard_file.h), named by split and time so that a
  // replacement's files never collide with the ones it replaces.
  ShardSink writer(work.string(), upload.split + "-" + stamp, options_.shards);
  ExampleSummary summary;
  std::vector<std::string> class_names;  // a class-folder archive's
  std::optional<std::vector<ShardInfo>> text_shards;  // a text split's (written by its own writer)
  std::vector<std::vector<ShardInfo>> text_columns;   // a table's text columns'
  switch (upload.format) {
    case UploadFormat::kCsv:
    case UploadFormat::kJsonl: {
      CsvOptions options;
      options.label_column = upload.label_column;
      options.regression = upload.regression;
      options.separator = upload.separator;
      options.types = upload.types;
      if (upload.missing) options.missing_values = *upload.missing;
      options.limits = options_.limits;
      // The dataset's other split fixes the columns, their types and the class names.
      if (const std::optional<DatasetRecord> other = get(upload.name)) {
        for (const auto& [split, s] : other->splits) {
          if (split == upload.split || !s.table) continue;
          for (const TableColumn& c : s.table->columns) options.expected_columns.emplace_back(c.name, c.type);
          options.class_names = s.table->class_names;
        }
      }
      TextColumnWriter texts(work.string(), upload.split + "-" + stamp, options_.shards);
      options.text_cells = &texts;
      summary = upload.format == UploadFormat::kCsv ? stream_csv(file_opener(upload.body_path), uploaded_as, options, writer)
                                                    : stream_jsonl(file_opener(upload.body_path), uploaded_as, options, writer);
      text_columns = texts.finish();
      break;
    }
    case UploadFormat::kNpz:
      summary = stream_npz(upload.body_path, options_.limits, writer);
      break;
    case UploadFormat::kIdx:
      summary = stream_idx(images_path, labels_path, options_.limits, writer);
      break;
    case UploadFormat::kArchive: {
      std::unique_ptr<Archive> archive = Archive::open(upload.body_path, uploaded_as);
      const auto has = [&](const char* path) {
        return std::any_of(archive->entries().begin(), archive->entries().end(), [&](const ArchiveEntry& e) { return e.path == path; });
      };
      if (Archive::looks_like_zip(upload.body_path) && has("x.npy") && has("y.npy")) {
        archive.reset();
        summary = stream_npz(upload.body_path, options_.limits, writer);
        break;
      }
      std::vector<std::string> fixed;  // the other split's classes
      if (const std::optional<DatasetRecord> other = get(upload.name)) {
        for (const auto& [split, _] : other->splits) {
          if (split != upload.split) fixed = other->class_names;
        }
      }
      const ClassFolders folders = find_class_folders(*archive, uploaded_as, fixed, options_.limits);
      if (holds_text_files(folders)) {
        ShardWriter texts(work.string(), upload.split + "-" + stamp, text_shard_layout(), options_.shards);
        TextFolderOptions options;
        options.limits = options_.limits;
        summary = stream_text_folders(*archive, uploaded_as, folders, options, texts);
        text_shards = texts.finish();
        class_names = folders.class_names;
        break;
      }
      ImageFolderOptions options;
      options.color_mode = upload.color_mode;
      options.height = upload.image_height;
      options.width = upload.image_width;
      options.limits = options_.limits;
      options.class_names = fixed;
      summary = stream_image_folders(*archive, uploaded_as, options, writer, class_names);
      break;
    }
  }
  const std::vector<ShardInfo> shards = text_shards ? *text_shards : writer.finish(summary.target_width);
  std::string table_name;  // a table's schema and profile, beside the shards
  if (summary.table) {
    table_name = upload.split + "-table-" + stamp + ".json";
    write_text_file((work / table_name).string(), table_to_json(*summary.table) + "\n");
  }
  std::string profile_name;  // a text split's profile, beside its shards
  if (summary.text) {
    profile_name = upload.split + "-text-" + stamp + ".json";
    write_text_file((work / profile_name).string(), text_profile_to_json(*summary.text) + "\n");
  }

  MutexLock use(use_mutex_);  // no job starts on the dataset while it changes
  const std::optional<DatasetRecord> existing = get(upload.name);
  DatasetRecord record;
  if (existing) {
    record = *existing;
    for (const auto& [split, s] : record.splits) {
      if (split == upload.split) continue;
      if (record.text() != summary.text.has_value()) {
        result.error = service_error(422, "dataset-shape-mismatch",
                                     "the uploaded " + upload.split + " split holds " + (summary.text ? "text documents" : "arrays") +
                                         " but the dataset's " + split + " split holds " + (record.text() ? "text documents" : "arrays"));
        return result;
      }
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
      if (!class_names.empty() && record.class_names.empty()) {
        result.error = service_error(422, "dataset-labels-mismatch",
                                     "the uploaded " + upload.split + " split's classes are folders but the dataset's " + split +
                                         " split's labels are numbers");
        return result;
      }
      if (!class_names.empty() && class_names != record.class_names) {
        // (The other split's classes changed while this one was decoded with the old ones.)
        result.error = service_error(409, "dataset-busy", "dataset '" + upload.name + "' changed its classes during the upload; retry");
        return result;
      }
      const TableSchema* theirs = s.table ? &*s.table : nullptr;
      const bool named = summary.table && !summary.table->class_names.empty();
      if (theirs && summary.table && named != !theirs->class_names.empty()) {
        result.error = service_error(422, "dataset-labels-mismatch",
                                     "the uploaded " + upload.split + " split's labels are " +
                                         (named ? "class names" : "numbers") + " but the dataset's " + split + " split's are " +
                                         (named ? "numbers" : "class names"),
                                     "label");
        return result;
      }
      if (s.target_width != summary.target_width) {
        const auto kind = [](uint32_t width) {
          return width > 0 ? std::to_string(width) + " float target(s) per example" : std::string("class labels");
        };
        result.error = service_error(422, "dataset-shape-mismatch",
                                     "the uploaded " + upload.split + " split has " + kind(summary.target_width) +
                                         " but the dataset's " + split + " split has " + kind(s.target_width));
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
  manifest.splits[upload.split] = summary.text ? text_split(shards, profile_name) : shards_split(shards, summary, table_name);
  if (summary.table) {
    const std::vector<const TableColumn*> text = summary.table->text_columns();
    for (size_t k = 0; k < text.size(); ++k) {
      std::vector<std::string> files;
      if (k < text_columns.size()) {
        for (const ShardInfo& shard : text_columns[k]) files.push_back(shard.file);
      }
      manifest.splits[upload.split].text_columns.emplace_back(text[k]->name, std::move(files));
    }
  }
  // Class names: this upload's (class folders), else the other split's, kept while one remains.
  bool other_split = false;
  for (const auto& [split, _] : manifest.splits) other_split = other_split || split != upload.split;
  if (!class_names.empty() || !other_split) {
    manifest.num_classes.reset();
    manifest.class_names = class_names;
    if (!class_names.empty()) manifest.num_classes = static_cast<uint32_t>(class_names.size());
  } else if (!manifest.class_names.empty()) {
    if (summary.classes > manifest.class_names.size()) {
      result.error = service_error(422, "dataset-bad-label",
                                   "the uploaded " + upload.split + " split has label " + std::to_string(summary.classes - 1) +
                                       " but the dataset's classes are its " + std::to_string(manifest.class_names.size()) +
                                       " class folders",
                                   "label");
      return result;
    }
    class_names = manifest.class_names;
  } else {
    manifest.num_classes.reset();
  }
  if (existing) {
    const std::vector<std::string> new_files = manifest.splits[upload.split].files();
    for (const auto& f : new_files) fs::rename(work / f, dir / f);
    write_manifest(dir.string(), manifest);
    std::error_code ec;
    for (const auto& f : old_files) {
      if (std::find(new_files.begin(), new_files.end(), f) == new_files.end()) fs::remove(dir / f, ec);
    }
  } else {
    write_manifest(work.string(), manifest);
    std::error_code ec;
    fs::rename(work, dir, ec);
    if (ec) throw Error("cannot create " + dir.string() + ": " + ec.message());
  }

  PSLOG(kInfo) << "dataset " << upload.name << ": " << upload.split << " converted; hashing the stored files";
  DatasetSplitInfo s = split_info(summary, dir, manifest.splits[upload.split].files());
  record.splits[upload.split] = std::move(s);
  record.target_width = summary.target_width;
  record.num_classes = static_cast<uint32_t>(class_names.size());
  record.class_names = class_names;
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
      MutexLock lock(mutex_);
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
      MutexLock lock(mutex_);
      busy_.erase(name + "/*");
    }
    done(std::move(result));
  });
}

namespace {
// Pass 2 of an array (or table) split: every example to its side's shards in `work`, a table's
// columns profiled per side and its text columns split the same way; `sides` get the splits.
void split_arrays(const fs::path& dir, const ManifestSplit& train, const std::optional<TableSchema>& table, size_t width,
                  const std::vector<bool>& to_test, const fs::path& work, const std::string& stamp,
                  const DatasetCatalog::Options& options, ManifestSplit sides[2]) {
  ShardSink train_writer(work.string(), "train-" + stamp, options.shards),
      test_writer(work.string(), "test-" + stamp, options.shards);
  const TableSchema no_table;
  ProfilingSink train_side(train_writer, table ? *table : no_table), test_side(test_writer, table ? *table : no_table);
  RoutingSink router(to_test, table ? static_cast<ExampleSink&>(train_side) : train_writer,
                     table ? static_cast<ExampleSink&>(test_side) : test_writer);
  if (width > 0) router.set_target_width(width);
  const ExampleSummary read = stream_manifest_split(dir.string(), train, options.limits, router);
  const std::vector<ShardInfo> train_shards = train_writer.finish(static_cast<uint32_t>(width));
  const std::vector<ShardInfo> test_shards = test_writer.finish(static_cast<uint32_t>(width));
  std::string table_names[2];
  std::optional<TextColumnsSplit> texts;  // a table's text columns, split the same way
  if (table) {
    TableSchema sides[2] = {train_side.finish(), test_side.finish()};
    if (!train.text_columns.empty()) {
      TextColumnWriter train_texts(work.string(), "train-" + stamp, options.shards), test_texts(work.string(), "test-" + stamp, options.shards);
      texts = split_text_columns(dir.string(), train.text_columns, to_test, train_texts, test_texts);
      for (int side = 0; side < 2; ++side) {
        size_t k = 0;
        for (TableColumn& c : sides[side].columns) {
          if (c.type == ColumnType::kText && k < texts->profiles[side].size()) c.profile = texts->profiles[side][k++];
        }
      }
    }
    table_names[0] = "train-table-" + stamp + ".json";
    table_names[1] = "test-table-" + stamp + ".json";
    write_text_file((work / table_names[0]).string(), table_to_json(sides[0]) + "\n");
    write_text_file((work / table_names[1]).string(), table_to_json(sides[1]) + "\n");
  }

  sides[0] = shards_split(train_shards, read, table_names[0]);
  sides[1] = shards_split(test_shards, read, table_names[1]);
  if (texts) {
    for (int side = 0; side < 2; ++side) {
      for (size_t k = 0; k < train.text_columns.size(); ++k) {
        std::vector<std::string> files;
        for (const ShardInfo& shard : texts->shards[side][k]) files.push_back(shard.file);
        sides[side].text_columns.emplace_back(train.text_columns[k].first, std::move(files));
      }
    }
  }
}

}  // namespace

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
  ManifestSplit train = manifest.splits.at("train");
  if (holds_text_folders(dir.string(), train)) {  // dropped-in documents: split their conversion
    const std::optional<ConvertedSplit> converted = converted_split(dir.string(), "train", train);
    if (!converted) {
      result.error = service_error(409, "dataset-unusable", "dataset '" + name + "': its text files could not be stored as documents");
      return result;
    }
    train = converted->as_split_of(dir.string());
  }

  // A table's schema stays; each side gets its own profile.
  std::optional<TableSchema> table;
  if (!train.table.empty()) {
    CountingSink counting;
    table = stream_manifest_split(dir.string(), train, options_.limits, counting).table;
  }

  // Pass 1: the labels; then per class, a seeded shuffle picks round(fraction * count) for test.
  // A regression dataset has no classes: one seeded shuffle of all its examples (one "class").
  LabelSink labels;
  stream_manifest_split(dir.string(), train, options_.limits, labels);
  const size_t width = r->target_width;
  const size_t examples = width > 0 ? labels.target_values_ / width : labels.labels_.size();
  std::map<int32_t, std::vector<size_t>> by_class;
  for (size_t i = 0; i < examples; ++i) by_class[width > 0 ? 0 : labels.labels_[i]].push_back(i);
  std::vector<bool> to_test(examples, false);
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
  ManifestSplit sides[2];  // the new train and test splits, their files in `work`
  if (train.format == ManifestSplit::Format::kText) {
    ShardWriter train_docs(work.string(), "train-" + stamp, text_shard_layout(), options_.shards),
        test_docs(work.string(), "test-" + stamp, text_shard_layout(), options_.shards);
    const std::array<TextProfile, 2> profiles = split_text_documents(dir.string(), train.shards, to_test, train_docs, test_docs);
    const std::string names[2] = {"train-text-" + stamp + ".json", "test-text-" + stamp + ".json"};
    for (int side = 0; side < 2; ++side) write_text_file((work / names[side]).string(), text_profile_to_json(profiles[side]) + "\n");
    sides[0] = text_split(train_docs.finish(), names[0]);
    sides[1] = text_split(test_docs.finish(), names[1]);
  } else {
    split_arrays(dir, train, table, width, to_test, work, stamp, options_, sides);
  }

  MutexLock use(use_mutex_);
  const std::vector<std::string> jobs = jobs_using_ ? jobs_using_(name) : std::vector<std::string>{};
  if (!jobs.empty()) {
    std::string ids;
    for (const auto& j : jobs) ids += (ids.empty() ? "" : ", ") + j;
    result.error = service_error(409, "dataset-in-use", "dataset '" + name + "' is used by unfinished jobs (" + ids + ")");
    return result;
  }
  const std::vector<std::string> old_files = train.files();
  manifest.splits["train"] = sides[0];
  manifest.splits["test"] = sides[1];
  for (const char* side : {"train", "test"}) {
    for (const auto& n : manifest.splits[side].files()) fs::rename(work / n, dir / n);
  }
  write_manifest(dir.string(), manifest);
  std::error_code ec;
  for (const auto& f : old_files) fs::remove(dir / f, ec);

  std::optional<DatasetRecord> record = index_directory(name, r->source);
  record->created_ms = r->created_ms;
  std::vector<std::string> paths = {(dir / kManifestFile).string()};
  for (const auto& [_, f] : manifest.splits) {
    for (const auto& n : f.files()) paths.push_back((dir / n).string());
  }
  record->fingerprint = fingerprint(paths);
  commit(*record);
  result.record = get(name);
  PSLOG(kInfo) << "dataset " << name << ": split into " << (to_test.size() - test_count) << " train and " << test_count
               << " test examples (seed " << seed << ")";
  return result;
}

}  // namespace pstrain
