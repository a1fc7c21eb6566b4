#include "coordinator/http/upload_file.h"

#include <boost/asio/post.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "common/base/sha256.h"

namespace pstrain {

// Shared by the strand (chunk memory being filled) and the upload thread's tasks (the descriptor,
// hash and error, and the chunk handed over); the chunks live as long as a task may read one.
struct UploadFile::File {
  std::string path;
  int fd = -1;
  Sha256 hash;
  uint64_t bytes = 0;
  std::string error;   // the first failure
  bool done = false;   // delivered or removed: nothing left to clean up
  bool writing = false;  // (the strand's) a task has a chunk or the open; cleared before its continuation
  std::array<std::vector<char>, 2> chunks;

  ~File() {
    if (fd >= 0) ::close(fd);
    if (!done) {  // (the upload thread had gone: the server is stopping)
      std::error_code ignored;
      std::filesystem::remove(path, ignored);
    }
  }
  void remove() {
    if (fd >= 0) ::close(fd);
    fd = -1;
    std::error_code ignored;
    std::filesystem::remove(path, ignored);
    done = true;
  }
};

UploadFile::UploadFile(TaskThread& files, boost::asio::any_io_executor strand, std::string path,
                       std::function<void()> opened)
    : files_(files), strand_(std::move(strand)), file_(std::make_shared<File>()) {
  file_->path = std::move(path);
  for (auto& chunk : file_->chunks) chunk.resize(kChunkBytes);
  file_->writing = true;
  files_.post([file = file_] {
    std::error_code ignored;
    std::filesystem::create_directories(std::filesystem::path(file->path).parent_path(), ignored);
    file->fd = ::open(file->path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (file->fd < 0) file->error = file->path + ": " + std::strerror(errno);
  });
  after_task(std::move(opened));
}

// No task is posted here: at the server's end the upload thread is gone before the event loop's
// handlers (and so this) are destroyed. The File removes itself when its last holder lets go.
UploadFile::~UploadFile() = default;

char* UploadFile::space() { return file_->chunks[filling_].data() + fill_; }
size_t UploadFile::space_size() const { return kChunkBytes - fill_; }
void UploadFile::filled(size_t n) { fill_ += n; }
std::string UploadFile::error() const { return file_ ? file_->error : std::string(); }

bool UploadFile::writing() const { return file_ && file_->writing; }

void UploadFile::hand_over(std::function<void()> written) {
  file_->writing = true;
  const size_t n = fill_;
  const char* data = file_->chunks[filling_].data();
  files_.post([file = file_, data, n] {
    if (!file->error.empty() || n == 0) return;
    for (size_t done = 0; done < n;) {
      const ssize_t w = ::write(file->fd, data + done, n - done);
      if (w < 0) {
        if (errno == EINTR) continue;
        file->error = std::strerror(errno);
        break;
      }
      done += static_cast<size_t>(w);
    }
    file->hash.update(data, n);
    file->bytes += n;
  });
  after_task(std::move(written));
  filling_ ^= 1;
  fill_ = 0;
}

// Runs `then` on the strand once the upload thread has done what was posted before.
void UploadFile::after_task(std::function<void()> then) {
  files_.post([strand = strand_, file = file_, then = std::move(then)]() mutable {
    boost::asio::post(strand, [file = std::move(file), then = std::move(then)] {
      file->writing = false;
      then();
    });
  });
}

void UploadFile::finish(std::function<void(Delivered)> done) {
  files_.post([strand = strand_, file = std::exchange(file_, nullptr), done = std::move(done)]() mutable {
    if (file->fd >= 0 && ::close(file->fd) != 0 && file->error.empty()) file->error = std::strerror(errno);
    file->fd = -1;
    Delivered out{file->error, file->path, file->bytes, file->hash.hex()};
    if (!out.error.empty()) {
      file->remove();
    } else {
      file->done = true;
    }
    boost::asio::post(strand, [out = std::move(out), done = std::move(done)]() mutable { done(std::move(out)); });
  });
}

void UploadFile::abandon() {
  if (!file_) return;
  files_.post([file = std::exchange(file_, nullptr)] { file->remove(); });
}

}  // namespace pstrain
