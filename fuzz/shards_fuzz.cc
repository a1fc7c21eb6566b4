// Fuzz target: the dataset store's shard files (common/data/shard_file.h) and a split read by id
// (common/data/store_reader.h), on arbitrary bytes written as a shard file. Only DataError is an
// expected answer. What opens must be consistent: every example below examples() reads with the
// size example_size() says, every label or target reads, a fixed-size shard's runs read, and the
// reader maps the same count. run.sh gives this target -malloc_limit_mb=256: no header may make
// the reader allocate for a size the file does not hold.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "common/base/error.h"
#include "common/data/shard_file.h"
#include "common/data/store_reader.h"
#include "fuzz/fuzz_check.h"

namespace {

using pstrain::fuzz::check;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = "/tmp/pstrain-fuzz-shards-" + std::to_string(::getpid());
  static const bool made = [] { return ::mkdir(dir.c_str(), 0700) == 0 || errno == EEXIST; }();
  check(made, "a scratch directory");
  const std::string name = "x-00000.shard";
  {
    std::ofstream out(dir + "/" + name, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    const pstrain::ShardFile header(dir + "/" + name, pstrain::ShardFile::Open::kHeader);
    const pstrain::ShardFile shard(dir + "/" + name);
    check(shard.examples() == header.examples(), "the header alone says the same count");
    check(shard.bytes() == size, "the file's size");
    std::vector<uint8_t> example;
    std::vector<float> targets(shard.layout().labels == pstrain::LabelKind::kTargets ? shard.layout().target_width : 0);
    for (uint64_t i = 0; i < shard.examples() && i < 4096; ++i) {
      shard.read(i, example);
      check(example.size() == shard.example_size(i), "an example's size");
      if (shard.layout().labels == pstrain::LabelKind::kClass) shard.label(i);
      if (shard.layout().labels == pstrain::LabelKind::kTargets) shard.targets(i, targets.data());
    }
    if (!shard.layout().variable && shard.examples() > 0) {
      std::vector<uint8_t> run(shard.layout().example_bytes * std::min<uint64_t>(shard.examples(), 16));
      shard.read_run(0, std::min<uint64_t>(shard.examples(), 16), run.data());
    }
    try {
      shard.verify();
    } catch (const pstrain::DataError&) {
    }
    pstrain::StoreReader reader(dir, {name}, 1);
    check(reader.size() == shard.examples(), "the reader's count");
    if (reader.size() > 0) reader.read(reader.size() - 1, example);
  } catch (const pstrain::DataError&) {
  }
  return 0;
}
