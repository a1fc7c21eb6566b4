#include "coordinator/store/model_catalog.h"

#include <boost/json.hpp>

#include <algorithm>
#include <charconv>
#include <memory>

#include "common/base/error.h"
#include "common/base/json_parse.h"
#include "common/base/json_text.h"
#include "common/base/log.h"

namespace pstrain {
namespace json = boost::json;

namespace {

constexpr std::string_view kKeyPrefix = "upload/";
// The next id's number, so that a deleted model's id is never given again (outside kKeyPrefix).
constexpr std::string_view kNextKey = "uploads-next";

std::string record_key(uint64_t n) { return std::string(kKeyPrefix) + key_number(n, 12) + "/record"; }
std::string piece_prefix(uint64_t n) { return std::string(kKeyPrefix) + key_number(n, 12) + "/file/"; }
std::string piece_key(uint64_t n, size_t i) { return piece_prefix(n) + key_number(i, 8); }

// The number of id "model-<n>", or nullopt.
std::optional<uint64_t> id_number(std::string_view id) {
  if (!id.starts_with(ModelCatalog::kIdPrefix)) return std::nullopt;
  id.remove_prefix(ModelCatalog::kIdPrefix.size());
  uint64_t n = 0;
  const auto [end, ec] = std::from_chars(id.data(), id.data() + id.size(), n);
  if (ec != std::errc() || end != id.data() + id.size() || n == 0 || id.front() == '0') return std::nullopt;
  return n;
}

std::string to_json(const UploadedModel& m) {
  json::array tensors;
  for (const SafetensorsTensor& t : m.tensors) {
    json::array shape;
    for (int64_t d : t.shape) shape.push_back(d);
    tensors.push_back(json::object{{"name", t.name}, {"dtype", t.dtype}, {"shape", std::move(shape)}});
  }
  return to_json_text(json::object{{"id", m.id},
                                   {"name", m.name},
                                   {"created_ms", m.created_ms},
                                   {"bytes", m.bytes},
                                   {"sha256", m.sha256},
                                   {"tensors", std::move(tensors)},
                                   {"model", m.model_json}});
}

std::optional<UploadedModel> from_json(std::string_view text) {
  boost::system::error_code ec;
  const json::value v = parse_json(text, ec);
  if (ec || !v.is_object()) return std::nullopt;
  try {
    const json::object& o = v.as_object();
    UploadedModel m;
    m.id = json::value_to<std::string>(o.at("id"));
    m.name = json::value_to<std::string>(o.at("name"));
    m.created_ms = o.at("created_ms").to_number<int64_t>();
    m.bytes = o.at("bytes").to_number<int64_t>();
    m.sha256 = json::value_to<std::string>(o.at("sha256"));
    m.model_json = json::value_to<std::string>(o.at("model"));
    for (const json::value& t : o.at("tensors").as_array()) {
      SafetensorsTensor tensor;
      tensor.name = json::value_to<std::string>(t.at("name"));
      tensor.dtype = json::value_to<std::string>(t.at("dtype"));
      for (const json::value& d : t.at("shape").as_array()) tensor.shape.push_back(d.to_number<int64_t>());
      m.tensors.push_back(std::move(tensor));
    }
    return m;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

ModelCatalog::ModelCatalog(KvStore& kv) : kv_(kv) {
  std::map<uint64_t, bool> numbers;  // every number with a key; true: it has a readable record
  for (const std::string& key : kv_.keys(std::string(kKeyPrefix))) {
    uint64_t n = 0;
    const char* begin = key.data() + kKeyPrefix.size();
    std::from_chars(begin, key.data() + key.size(), n);
    numbers.emplace(n, false);
    if (!key.ends_with("/record")) continue;  // the file's pieces are not read here
    std::string value;
    const std::optional<UploadedModel> m = kv_.get(key, &value).ok() ? from_json(value) : std::nullopt;
    const auto number = m ? id_number(m->id) : std::nullopt;
    if (!number || *number != n) {
      PSLOG(kWarning) << "model catalog: the record at " << key << " is unreadable; ignored";
      continue;
    }
    numbers[n] = true;
    models_.emplace(n, std::move(*m));
  }
  if (std::string next; kv_.get(std::string(kNextKey), &next).ok()) {
    uint64_t n = 0;
    std::from_chars(next.data(), next.data() + next.size(), n);
    next_ = std::max(next_, n);
  }
  for (const auto& [n, has_record] : numbers) {
    next_ = std::max(next_, n + 1);
    // Pieces of an upload that a crash cut off before its record.
    if (!has_record && !kv_.erase_prefix(std::string(kKeyPrefix) + key_number(n, 12) + "/", false).ok()) {
      PSLOG(kWarning) << "model catalog: could not remove the leftovers of upload " << n;
    }
  }
}

UploadedModel ModelCatalog::add(UploadedModel record, std::string_view file) {
  uint64_t n = 0;
  {
    MutexLock lock(mutex_);
    n = next_++;
  }
  record.id = std::string(kIdPrefix) + std::to_string(n);
  record.bytes = static_cast<int64_t>(file.size());
  if (record.name.empty()) record.name = record.id;
  const size_t pieces = std::max<size_t>(1, (file.size() + kMaxModelPieceBytes - 1) / kMaxModelPieceBytes);
  for (size_t i = 0; i < pieces; ++i) {
    const std::string_view piece = file.substr(std::min(file.size(), i * kMaxModelPieceBytes), kMaxModelPieceBytes);
    if (const KvStatus s = kv_.put(piece_key(n, i), piece, false); !s.ok()) {
      throw Error("could not store uploaded model " + record.id + ": " + s.message);
    }
  }
  if (const KvStatus s = kv_.write({{record_key(n), to_json(record)}, {std::string(kNextKey), std::to_string(n + 1)}}, true);
      !s.ok()) {
    throw Error("could not store uploaded model " + record.id + ": " + s.message);
  }
  MutexLock lock(mutex_);
  models_[n] = record;
  return record;
}

std::optional<UploadedModel> ModelCatalog::get(const std::string& id) const {
  const auto n = id_number(id);
  if (!n) return std::nullopt;
  MutexLock lock(mutex_);
  const auto it = models_.find(*n);
  if (it == models_.end()) return std::nullopt;
  return it->second;
}

std::vector<UploadedModel> ModelCatalog::list() const {
  MutexLock lock(mutex_);
  std::vector<UploadedModel> out;
  for (const auto& [n, m] : models_) out.push_back(m);
  return out;
}

std::optional<std::string> ModelCatalog::file(const std::string& id) const {
  const auto n = id_number(id);
  if (!n) return std::nullopt;
  int64_t bytes = 0;
  {
    MutexLock lock(mutex_);
    const auto it = models_.find(*n);
    if (it == models_.end()) return std::nullopt;
    bytes = it->second.bytes;
  }
  std::string out, piece;
  out.reserve(static_cast<size_t>(bytes));
  for (size_t i = 0; kv_.get(piece_key(*n, i), &piece).ok(); ++i) out += piece;
  if (static_cast<int64_t>(out.size()) != bytes) return std::nullopt;
  return out;
}

std::optional<StoredFile> ModelCatalog::file_pieces(const std::string& id) const {
  const auto n = id_number(id);
  if (!n) return std::nullopt;
  StoredFile f;
  {
    MutexLock lock(mutex_);
    const auto it = models_.find(*n);
    if (it == models_.end()) return std::nullopt;
    f.bytes = it->second.bytes;
  }
  f.read_piece = [kv = &kv_, n = *n](size_t i) -> std::optional<std::string> {
    std::string piece;
    if (!kv->get(piece_key(n, i), &piece).ok()) return std::nullopt;
    return piece;
  };
  return f;
}

bool ModelCatalog::erase(const std::string& id) {
  const auto n = id_number(id);
  if (!n) return false;
  {
    MutexLock lock(mutex_);
    if (models_.erase(*n) == 0) return false;
  }
  // The record first (synced): a crash before the pieces are gone leaves pieces without a
  // record, which the next start removes.
  if (!kv_.write({{record_key(*n), std::nullopt}}, true).ok() ||
      !kv_.erase_prefix(std::string(kKeyPrefix) + key_number(*n, 12) + "/", false).ok()) {
    PSLOG(kWarning) << "model catalog: could not delete the stored files of " << id;
  }
  return true;
}

}  // namespace pstrain
