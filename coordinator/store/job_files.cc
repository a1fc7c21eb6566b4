#include "coordinator/store/job_files.h"

#include <algorithm>
#include <future>
#include <memory>

namespace pstrain {
namespace {

std::string padded(uint64_t n) { return key_number(n, 12); }
std::string model_prefix(const std::string& id) { return "model/" + id + "/"; }
std::string checkpoint_prefix(const std::string& id, int64_t step) {
  return "checkpoint/" + id + "/" + key_number(static_cast<uint64_t>(step), 16) + "/";
}

}  // namespace

void JobFiles::write_model_piece(const std::string& id, size_t index, std::string piece, std::function<void()> written) {
  // One call per piece (the writer then batches a few at a time: no batch the size of the model),
  // moved into its queue: once written, no copy of the piece is left in memory.
  writer_.enqueue({{model_prefix(id) + padded(index), std::move(piece)}}, false, std::move(written));
}

KvStore::Write JobFiles::end_of_model(const std::string& id, size_t pieces) const {
  return {model_prefix(id) + padded(pieces), std::nullopt};
}

std::optional<std::string> JobFiles::model(const std::string& id, int64_t bytes) const {
  writer_.flush();
  std::string first;
  if (!kv_.get(model_prefix(id) + padded(0), &first).ok()) {
    // Models stored before they were cut into pieces: one value.
    std::string whole;
    if (!kv_.get("job/" + id + "/model", &whole).ok() || static_cast<int64_t>(whole.size()) != bytes) return std::nullopt;
    return whole;
  }
  return read_pieces(model_prefix(id), bytes);
}

std::optional<StoredFile> JobFiles::model_pieces(const std::string& id, int64_t bytes) const {
  writer_.flush();
  std::string first;
  if (!kv_.get(model_prefix(id) + padded(0), &first).ok()) {
    std::string whole;
    if (!kv_.get("job/" + id + "/model", &whole).ok()) return std::nullopt;
    auto shared = std::make_shared<const std::string>(std::move(whole));
    StoredFile f;
    f.bytes = static_cast<int64_t>(shared->size());
    f.read_piece = [shared](size_t i) -> std::optional<std::string> {
      if (i > 0) return std::nullopt;
      return *shared;
    };
    return f;
  }
  return pieces_under(model_prefix(id), bytes);
}

void JobFiles::write_checkpoint_piece(const std::string& id, int64_t step, size_t index, std::string piece) {
  std::promise<void> written;
  std::future<void> done = written.get_future();
  writer_.enqueue({{checkpoint_prefix(id, step) + padded(index), std::move(piece)}}, false,
                  [&written] { written.set_value(); });
  done.wait();
}

KvStore::Write JobFiles::end_of_checkpoint(const std::string& id, int64_t step, size_t pieces) const {
  return {checkpoint_prefix(id, step) + padded(pieces), std::nullopt};
}

std::optional<std::string> JobFiles::checkpoint(const std::string& id, int64_t step, int64_t bytes) const {
  writer_.flush();
  return read_pieces(checkpoint_prefix(id, step), bytes);
}

std::optional<StoredFile> JobFiles::checkpoint_pieces(const std::string& id, int64_t step, int64_t bytes) const {
  writer_.flush();
  return pieces_under(checkpoint_prefix(id, step), bytes);
}

void JobFiles::erase_checkpoint(const std::string& id, int64_t step) {
  std::vector<KvStore::Write> deletes;
  for (std::string& key : kv_.keys(checkpoint_prefix(id, step))) deletes.push_back({std::move(key), std::nullopt});
  if (!deletes.empty()) writer_.enqueue(std::move(deletes), false);
}

std::optional<std::string> JobFiles::read_pieces(const std::string& prefix, int64_t bytes) const {
  std::string out, piece;
  out.reserve(static_cast<size_t>(std::max<int64_t>(bytes, 0)));
  for (size_t i = 0; kv_.get(prefix + padded(i), &piece).ok(); ++i) out += piece;
  if (static_cast<int64_t>(out.size()) != bytes) return std::nullopt;
  return out;
}

StoredFile JobFiles::pieces_under(const std::string& prefix, int64_t bytes) const {
  StoredFile f;
  f.bytes = bytes;
  f.read_piece = [kv = &kv_, prefix](size_t i) -> std::optional<std::string> {
    std::string piece;
    if (!kv->get(prefix + padded(i), &piece).ok()) return std::nullopt;
    return piece;
  };
  return f;
}

}  // namespace pstrain
