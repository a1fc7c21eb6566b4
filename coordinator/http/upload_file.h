// A request body on its way to a file (a dataset upload, BodyPlan::kFile): two chunks of 1 MiB,
// one filled by the HTTP session while the server's upload thread writes and SHA-256-hashes the
// other. The threads meet once per MiB, not once per socket read (under load a hand-off can wait a
// scheduler slice; per 64 KiB read that cost 5x the throughput).
//
// A file that is not delivered (finish()) is removed: by abandon() on the upload thread after any
// write still queued; or, if nobody abandoned it (the server stopping: its upload thread goes
// before the event loop's handlers), when the last holder of it lets go.
//
// Thread rules: the public functions run on the session's strand; the file itself (descriptor,
// hash, first error) is touched only by tasks on the upload thread, one after another, each holding
// it alive; every continuation given here runs on the strand (posted to `strand`).
#pragma once

#include <boost/asio/any_io_executor.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/base/task_thread.h"

namespace pstrain {

class UploadFile {
 public:
  static constexpr size_t kChunkBytes = 1 << 20;

  struct Delivered {
    std::string error;  // non-empty: the file could not be written (it is removed)
    std::string path;
    uint64_t bytes = 0;
    std::string sha256;  // hex
  };

  // Creates `path` (and its directories) on the upload thread; `opened` runs when that is done
  // (writing() is true until then: the open counts as a write).
  UploadFile(TaskThread& files, boost::asio::any_io_executor strand, std::string path,
             std::function<void()> opened);
  ~UploadFile();  // posts nothing (see above)
  UploadFile(const UploadFile&) = delete;
  UploadFile& operator=(const UploadFile&) = delete;

  // The free part of the chunk being filled.
  char* space();
  size_t space_size() const;
  // `n` more bytes are in the chunk being filled.
  void filled(size_t n);
  size_t pending() const { return fill_; }  // bytes in the chunk being filled
  bool writing() const;  // the upload thread has a chunk (or the open)
  // The upload thread's first failure, or empty (read in a continuation).
  std::string error() const;

  // Gives the filled chunk to the upload thread (not while writing()) and fills the other;
  // `written` runs when the upload thread is done with it.
  void hand_over(std::function<void()> written);
  // Closes the file on the upload thread (after every chunk handed over); `done` gets the result.
  // The file is the caller's from then on unless done's error is set.
  void finish(std::function<void(Delivered)> done);
  // Removes the file on the upload thread, after any write still queued; idempotent.
  void abandon();

 private:
  struct File;
  void after_task(std::function<void()> then);

  TaskThread& files_;
  boost::asio::any_io_executor strand_;
  std::shared_ptr<File> file_;  // null once finished or abandoned
  int filling_ = 0;             // the chunk being filled (the other may be the upload thread's)
  size_t fill_ = 0;             // bytes in it
};

}  // namespace pstrain
