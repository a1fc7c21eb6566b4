#include "common/data/shard_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include "common/base/crc32c.h"
#include "common/base/error.h"

namespace pstrain {
namespace {

constexpr size_t kHeaderBytes = 64;
constexpr char kMagic[8] = {'P', 'S', 'S', 'H', 'A', 'R', 'D', '1'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kVariableFlag = 1;
constexpr uint32_t kMaxTargetWidth = 1u << 20;
constexpr size_t kWriteBuffer = size_t{1} << 20;

template <typename T>
void put(uint8_t* at, T value) {
  std::memcpy(at, &value, sizeof(T));
}
template <typename T>
T get(const uint8_t* at) {
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
}

std::string errno_text() { return std::strerror(errno); }

// a * b + c without overflow, or false.
bool mul_add(uint64_t a, uint64_t b, uint64_t c, uint64_t* out) {
  uint64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return false;
  return !__builtin_add_overflow(product, c, out);
}

}  // namespace

uint64_t ShardLayout::label_bytes() const {
  switch (labels) {
    case LabelKind::kNone: return 0;
    case LabelKind::kClass: return sizeof(int32_t);
    case LabelKind::kTargets: return uint64_t{target_width} * sizeof(float);
  }
  return 0;
}

// --- Writing ---

ShardWriter::ShardWriter(std::string dir, std::string prefix, ShardLayout layout, ShardLimits limits)
    : dir_(std::move(dir)), prefix_(std::move(prefix)), layout_(layout), limits_(limits) {
  // (0 bytes: rows of no values, a table whose features are all text columns.)
  if (!layout_.variable && layout_.example_bytes % dtype_size(layout_.dtype) != 0) {
    throw DataError("shard layout: a fixed-size example must be a whole number of " +
                    std::string(dtype_name(layout_.dtype)) + " values, not " + std::to_string(layout_.example_bytes) +
                    " bytes");
  }
  if (layout_.labels == LabelKind::kTargets && (layout_.target_width == 0 || layout_.target_width > kMaxTargetWidth)) {
    throw DataError("shard layout: regression targets need 1 to " + std::to_string(kMaxTargetWidth) +
                    " values per example");
  }
  if (limits_.max_examples == 0) throw DataError("shard limits: at least one example per shard");
}

ShardWriter::~ShardWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void ShardWriter::add(const void* example, size_t bytes, int32_t label) {
  with_labels();
  if (layout_.labels != LabelKind::kClass) throw DataError(dir_ + ": this split has no class labels");
  add_example(example, bytes);
  labels_.resize(labels_.size() + sizeof(int32_t));
  put(labels_.data() + labels_.size() - sizeof(int32_t), label);
}

void ShardWriter::add(const void* example, size_t bytes, const float* targets) {
  with_labels();
  if (layout_.labels != LabelKind::kTargets) throw DataError(dir_ + ": this split has no regression targets");
  add_example(example, bytes);
  const auto* p = reinterpret_cast<const uint8_t*>(targets);
  labels_.insert(labels_.end(), p, p + layout_.label_bytes());
}

void ShardWriter::add(const void* example, size_t bytes) {
  with_labels();
  if (layout_.labels != LabelKind::kNone) throw DataError(dir_ + ": every example of this split needs a label");
  add_example(example, bytes);
}

void ShardWriter::with_labels() {
  if (labels_mode_ == Labels::kAfter) throw DataError(dir_ + ": labels given with some examples and not others");
  labels_mode_ = Labels::kWithExamples;
}

void ShardWriter::add_unlabelled(const void* example, size_t bytes) {
  if (labels_mode_ == Labels::kWithExamples) throw DataError(dir_ + ": labels given with some examples and not others");
  labels_mode_ = Labels::kAfter;
  add_example(example, bytes);
}

void ShardWriter::add_example(const void* example, size_t bytes) {
  if (!layout_.variable && bytes != layout_.example_bytes) {
    throw DataError(dir_ + ": example " + std::to_string(examples_) + " has " + std::to_string(bytes) +
                    " bytes; every example of this split has " + std::to_string(layout_.example_bytes));
  }
  // A new shard when this example would pass a bound (a single example larger than max_bytes
  // gets a shard of its own).
  if (fd_ >= 0 && (shard_examples_ >= limits_.max_examples || data_bytes_ + bytes > limits_.max_bytes)) close_shard();
  if (fd_ < 0) open_shard();
  if (layout_.variable) offsets_.push_back(data_bytes_);
  write(example, bytes);
  data_bytes_ += bytes;
  ++shard_examples_;
  ++examples_;
}

void ShardWriter::open_shard() {
  char name[32];
  std::snprintf(name, sizeof name, "-%05zu.shard", shards_.size() + unsealed_.size());
  path_ = dir_ + "/" + prefix_ + name;
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw DataError(path_ + ": cannot create: " + errno_text());
  shard_examples_ = 0;
  data_bytes_ = 0;
  crc_ = 0;
  offsets_.clear();
  labels_.clear();
  // The header's place; written last, once its figures and CRC are known.
  const uint8_t zeros[kHeaderBytes] = {};
  buffer_.assign(zeros, zeros + kHeaderBytes);
}

void ShardWriter::write(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  crc_ = crc32c_extend(crc_, p, n);
  if (buffer_.size() + n > kWriteBuffer) flush();
  if (n >= kWriteBuffer) {
    // Large examples go straight to the file.
    for (size_t done = 0; done < n;) {
      const ssize_t w = ::write(fd_, p + done, n - done);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) throw DataError(path_ + ": cannot write: " + errno_text());
      done += static_cast<size_t>(w);
    }
    return;
  }
  buffer_.insert(buffer_.end(), p, p + n);
}

void ShardWriter::flush() {
  for (size_t done = 0; done < buffer_.size();) {
    const ssize_t w = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) throw DataError(path_ + ": cannot write: " + errno_text());
    done += static_cast<size_t>(w);
  }
  buffer_.clear();
}

void ShardWriter::close_shard() {
  // (The header's zeros went through buffer_ but not into the CRC: it covers what follows them.)
  if (layout_.variable) {
    offsets_.push_back(data_bytes_);
    write(offsets_.data(), offsets_.size() * sizeof(uint64_t));
  }
  if (labels_mode_ == Labels::kAfter) {
    flush();
    if (::close(fd_) != 0) throw DataError(path_ + ": cannot write: " + errno_text());
    fd_ = -1;
    unsealed_.push_back({path_, shard_examples_, data_bytes_, crc_});
    if (streamed_labels_ > 0) seal_waiting();
    return;
  }
  write(labels_.data(), labels_.size());
  flush();
  const int fd = fd_;
  fd_ = -1;
  seal(fd, path_, shard_examples_, data_bytes_, crc_);
}

void ShardWriter::seal(int fd, const std::string& path, uint64_t examples, uint64_t data_bytes, uint32_t crc) {
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  uint8_t header[kHeaderBytes] = {};
  std::memcpy(header, kMagic, sizeof kMagic);
  put<uint32_t>(header + 8, kVersion);
  put<uint32_t>(header + 12, layout_.variable ? kVariableFlag : 0);
  put<uint64_t>(header + 16, examples);
  put<uint64_t>(header + 24, layout_.variable ? 0 : layout_.example_bytes);
  put<uint64_t>(header + 32, data_bytes);
  put<uint8_t>(header + 40, static_cast<uint8_t>(layout_.dtype));
  put<uint8_t>(header + 41, static_cast<uint8_t>(layout_.labels));
  put<uint32_t>(header + 44, layout_.target_width);
  put<uint32_t>(header + 48, crc);
  if (::pwrite(fd, header, kHeaderBytes, 0) != static_cast<ssize_t>(kHeaderBytes)) {
    throw DataError(path + ": cannot write its header: " + errno_text());
  }
  if (::fdatasync(fd) != 0) throw DataError(path + ": cannot sync: " + errno_text());
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw DataError(path + ": cannot stat: " + errno_text());
  shards_.push_back({path.substr(path.rfind('/') + 1), examples, static_cast<uint64_t>(st.st_size), crc});
}

std::vector<ShardInfo> ShardWriter::finish_labels(LabelKind kind, uint32_t target_width, const void* labels,
                                                  size_t bytes) {
  if (kind == LabelKind::kTargets && (target_width == 0 || target_width > kMaxTargetWidth)) {
    throw DataError(dir_ + ": regression targets need 1 to " + std::to_string(kMaxTargetWidth) + " values per example");
  }
  if (streamed_labels_ > 0) {  // the labels came through add_labels()
    if (kind != LabelKind::kClass || bytes != 0) throw DataError(dir_ + ": labels both streamed and given at the end");
    if (fd_ >= 0) close_shard();
    if (streamed_labels_ != examples_ || sealed_unsealed_ != unsealed_.size()) {
      throw DataError(dir_ + ": " + std::to_string(streamed_labels_) + " labels for " + std::to_string(examples_) + " examples");
    }
    unsealed_.clear();
    sealed_unsealed_ = 0;
    return shards_;
  }
  if (fd_ >= 0) close_shard();
  // (Shards closed so far wait for their labels whatever the layout said: the kind is known now.)
  layout_.labels = kind;
  layout_.target_width = kind == LabelKind::kTargets ? target_width : 0;
  const uint64_t per_example = layout_.label_bytes();
  if (labels_mode_ == Labels::kWithExamples || bytes != examples_ * per_example) {
    throw DataError(dir_ + ": " + std::to_string(bytes / std::max<uint64_t>(per_example, 1)) + " labels for " +
                    std::to_string(examples_) + " examples");
  }
  const auto* p = static_cast<const uint8_t*>(labels);
  for (const Unsealed& shard : unsealed_) {
    const uint64_t n = shard.examples * per_example;
    write_labels_and_seal(shard, p, n);
    p += n;
  }
  unsealed_.clear();
  return shards_;
}

void ShardWriter::write_labels_and_seal(const Unsealed& shard, const uint8_t* labels, uint64_t n) {
  const int fd = ::open(shard.path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) throw DataError(shard.path + ": cannot reopen: " + errno_text());
  const off_t end = ::lseek(fd, 0, SEEK_END);
  for (uint64_t done = 0; done < n;) {
    const ssize_t w = ::pwrite(fd, labels + done, n - done, end + static_cast<off_t>(done));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      ::close(fd);
      throw DataError(shard.path + ": cannot write: " + errno_text());
    }
    done += static_cast<uint64_t>(w);
  }
  seal(fd, shard.path, shard.examples, shard.data_bytes, crc32c_extend(shard.crc, labels, n));
}

void ShardWriter::add_labels(const int32_t* labels, size_t n) {
  if (labels_mode_ == Labels::kWithExamples) throw DataError(dir_ + ": labels given with some examples and not others");
  if (streamed_labels_ + n > examples_) {
    throw DataError(dir_ + ": " + std::to_string(streamed_labels_ + n) + " labels for " + std::to_string(examples_) +
                    " examples so far");
  }
  labels_mode_ = Labels::kAfter;
  layout_.labels = LabelKind::kClass;
  layout_.target_width = 0;
  streamed_labels_ += n;
  const auto* p = reinterpret_cast<const uint8_t*>(labels);
  size_t bytes = n * sizeof(int32_t);
  // Shards waiting for labels take theirs from the caller's buffer (through pending_labels_ only
  // for a shard whose labels come in several calls); the rest (the open shard's) wait.
  while (sealed_unsealed_ < unsealed_.size() && bytes > 0) {
    const Unsealed& shard = unsealed_[sealed_unsealed_];
    const uint64_t need = shard.examples * sizeof(int32_t);
    if (pending_labels_.empty() && bytes >= need) {
      write_labels_and_seal(shard, p, need);
    } else {
      const size_t take = static_cast<size_t>(std::min<uint64_t>(need - pending_labels_.size(), bytes));
      pending_labels_.insert(pending_labels_.end(), p, p + take);
      p += take;
      bytes -= take;
      if (pending_labels_.size() < need) break;
      write_labels_and_seal(shard, pending_labels_.data(), need);
      pending_labels_.clear();
      ++sealed_unsealed_;
      continue;
    }
    p += need;
    bytes -= need;
    ++sealed_unsealed_;
  }
  pending_labels_.insert(pending_labels_.end(), p, p + bytes);
}

void ShardWriter::seal_waiting() {
  size_t used = 0;
  for (; sealed_unsealed_ < unsealed_.size(); ++sealed_unsealed_) {
    const Unsealed& shard = unsealed_[sealed_unsealed_];
    const uint64_t n = shard.examples * sizeof(int32_t);
    if (pending_labels_.size() - used < n) break;
    write_labels_and_seal(shard, pending_labels_.data() + used, n);
    used += n;
  }
  pending_labels_.erase(pending_labels_.begin(), pending_labels_.begin() + static_cast<std::ptrdiff_t>(used));
}

std::vector<ShardInfo> ShardWriter::finish() {
  if (fd_ >= 0) close_shard();
  if (!unsealed_.empty()) throw DataError(dir_ + ": " + std::to_string(examples_) + " examples wait for their labels");
  return shards_;
}

// --- Reading ---

ShardFile::ShardFile(std::string path, Open open) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw DataError(path_ + ": cannot open: " + errno_text());
  // A constructor that throws runs no destructor: the descriptor is closed here unless kept (the
  // fuzz target ran out of descriptors on invalid files before this).
  struct Closer {
    int& fd;
    bool keep = false;
    ~Closer() {
      if (!keep) {
        ::close(fd);
        fd = -1;
      }
    }
  } closer{fd_};
  struct stat st {};
  if (::fstat(fd_, &st) != 0) throw DataError(path_ + ": cannot stat: " + errno_text());
  file_bytes_ = static_cast<uint64_t>(st.st_size);
  auto bad = [this](const std::string& why) { return DataError(path_ + ": not a valid shard file: " + why); };
  if (file_bytes_ < kHeaderBytes) throw bad("shorter than its header");
  uint8_t header[kHeaderBytes];
  pread_all(header, kHeaderBytes, 0);
  if (std::memcmp(header, kMagic, sizeof kMagic) != 0) throw bad("no PSSHARD1 signature");
  if (get<uint32_t>(header + 8) != kVersion) throw bad("version " + std::to_string(get<uint32_t>(header + 8)));
  const uint32_t flags = get<uint32_t>(header + 12);
  if ((flags & ~kVariableFlag) != 0) throw bad("unknown flags");
  layout_.variable = (flags & kVariableFlag) != 0;
  examples_ = get<uint64_t>(header + 16);
  layout_.example_bytes = get<uint64_t>(header + 24);
  data_bytes_ = get<uint64_t>(header + 32);
  const uint8_t dtype = get<uint8_t>(header + 40), labels = get<uint8_t>(header + 41);
  if (dtype > static_cast<uint8_t>(Dtype::kFloat32)) throw bad("unknown dtype " + std::to_string(dtype));
  if (labels > static_cast<uint8_t>(LabelKind::kTargets)) throw bad("unknown label kind " + std::to_string(labels));
  layout_.dtype = static_cast<Dtype>(dtype);
  layout_.labels = static_cast<LabelKind>(labels);
  layout_.target_width = get<uint32_t>(header + 44);
  crc_ = get<uint32_t>(header + 48);
  if (layout_.labels == LabelKind::kTargets && (layout_.target_width == 0 || layout_.target_width > kMaxTargetWidth)) {
    throw bad("a target width of " + std::to_string(layout_.target_width));
  }
  uint64_t data = 0;
  if (layout_.variable) {
    if (layout_.example_bytes != 0) throw bad("variable-size examples with a fixed size");
    data = data_bytes_;
  } else if (layout_.example_bytes % dtype_size(layout_.dtype) != 0 ||
             !mul_add(examples_, layout_.example_bytes, 0, &data) || data != data_bytes_) {
    throw bad("its example size and count do not match its data");
  }
  // header + data + offsets + labels must be the file.
  uint64_t size = 0, offsets = 0;
  if (layout_.variable && !mul_add(examples_ + 1, sizeof(uint64_t), 0, &offsets)) throw bad("too many examples");
  if (examples_ > file_bytes_ || !mul_add(examples_, layout_.label_bytes(), kHeaderBytes + offsets, &size) ||
      __builtin_add_overflow(size, data, &size) || size != file_bytes_) {
    throw bad("its header says " + std::to_string(examples_) + " examples, which do not fill its " +
              std::to_string(file_bytes_) + " bytes");
  }
  if (open == Open::kHeader) return;  // (closed by `closer`)
  if (layout_.variable) {
    offsets_.resize(examples_ + 1);
    pread_all(offsets_.data(), offsets, kHeaderBytes + data_bytes_);
    if (offsets_.front() != 0 || offsets_.back() != data_bytes_) throw bad("its offsets do not span its data");
    for (uint64_t i = 0; i < examples_; ++i) {
      if (offsets_[i] > offsets_[i + 1]) throw bad("its offsets are not in order at example " + std::to_string(i));
    }
  }
  labels_at_ = kHeaderBytes + data_bytes_ + offsets;
  if (open == Open::kWhole) {
    labels_.resize(examples_ * layout_.label_bytes());
    pread_all(labels_.data(), labels_.size(), labels_at_);
    labels_held_ = true;
  }
  closer.keep = true;
}

ShardFile::~ShardFile() {
  if (fd_ >= 0) ::close(fd_);
}

void ShardFile::pread_all(void* out, size_t n, uint64_t offset) const {
  auto* p = static_cast<uint8_t*>(out);
  for (size_t done = 0; done < n;) {
    const ssize_t r = ::pread(fd_, p + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw DataError(path_ + ": cannot read: " + errno_text());
    if (r == 0) throw DataError(path_ + ": ends early (truncated while open?)");
    done += static_cast<size_t>(r);
  }
}

void ShardFile::readable() const {
  if (fd_ < 0) throw DataError(path_ + ": opened for its header only");
}

uint64_t ShardFile::example_size(uint64_t i) const {
  readable();
  if (i >= examples_) throw DataError(path_ + ": no example " + std::to_string(i) + " (of " + std::to_string(examples_) + ")");
  return layout_.variable ? offsets_[i + 1] - offsets_[i] : layout_.example_bytes;
}

void ShardFile::read(uint64_t i, std::vector<uint8_t>& out) const {
  const uint64_t n = example_size(i);
  out.resize(n);
  pread_all(out.data(), n, kHeaderBytes + (layout_.variable ? offsets_[i] : i * layout_.example_bytes));
}

void ShardFile::read_run(uint64_t first, uint64_t count, uint8_t* out) const {
  readable();
  if (layout_.variable) throw DataError(path_ + ": a run of examples needs fixed-size examples");
  if (first > examples_ || count > examples_ - first) {
    throw DataError(path_ + ": examples " + std::to_string(first) + " + " + std::to_string(count) + " are past its " +
                    std::to_string(examples_));
  }
  pread_all(out, count * layout_.example_bytes, kHeaderBytes + first * layout_.example_bytes);
}

int32_t ShardFile::label(uint64_t i) const {
  readable();
  if (layout_.labels != LabelKind::kClass) throw DataError(path_ + ": its examples have no class labels");
  if (i >= examples_) throw DataError(path_ + ": no example " + std::to_string(i));
  if (labels_held_) return get<int32_t>(labels_.data() + i * sizeof(int32_t));
  uint8_t bytes[sizeof(int32_t)];
  pread_all(bytes, sizeof bytes, labels_at_ + i * sizeof(int32_t));
  return get<int32_t>(bytes);
}

void ShardFile::read_label_run(uint64_t first, uint64_t count, uint8_t* out) const {
  readable();
  if (layout_.labels == LabelKind::kNone) throw DataError(path_ + ": its examples have no labels or targets");
  if (first > examples_ || count > examples_ - first) {
    throw DataError(path_ + ": no examples " + std::to_string(first) + ".." + std::to_string(first + count) + " (of " +
                    std::to_string(examples_) + ")");
  }
  const uint64_t width = layout_.label_bytes();
  if (labels_held_) {
    std::memcpy(out, labels_.data() + first * width, count * width);
  } else {
    pread_all(out, count * width, labels_at_ + first * width);
  }
}

void ShardFile::targets(uint64_t i, float* out) const {
  readable();
  if (layout_.labels != LabelKind::kTargets) throw DataError(path_ + ": its examples have no regression targets");
  if (i >= examples_) throw DataError(path_ + ": no example " + std::to_string(i));
  if (labels_held_) {
    std::memcpy(out, labels_.data() + i * layout_.label_bytes(), layout_.label_bytes());
  } else {
    pread_all(out, layout_.label_bytes(), labels_at_ + i * layout_.label_bytes());
  }
}

void ShardFile::verify() const {
  readable();
  std::vector<uint8_t> block(std::min<uint64_t>(kWriteBuffer, file_bytes_ - kHeaderBytes));
  uint32_t crc = 0;
  for (uint64_t at = kHeaderBytes; at < file_bytes_;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(block.size(), file_bytes_ - at));
    pread_all(block.data(), n, at);
    crc = crc32c_extend(crc, block.data(), n);
    at += n;
  }
  if (crc != crc_) throw DataError(path_ + ": checksum mismatch (the file is damaged)");
}

void ShardFile::verify_after_data(uint32_t data_crc) const {
  readable();
  if (!labels_held_) throw DataError(path_ + ": verified after its data only when opened whole");
  uint32_t crc = crc32c_extend(data_crc, offsets_.data(), offsets_.size() * sizeof(uint64_t));
  crc = crc32c_extend(crc, labels_.data(), labels_.size());
  if (crc != crc_) throw DataError(path_ + ": checksum mismatch (the file is damaged)");
}

}  // namespace pstrain
