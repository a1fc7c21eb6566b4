// ParameterServerImpl's backup and lifecycle RPCs (parameter_server.h): restore, the backups it
// holds, holds and releases, adoption of another server's backup, settle, dropJob, stats.
#include "server/parameter_server.h"
#include "server/server_rpc_helpers.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <map>
#include <optional>

#include "common/base/error.h"
#include "common/base/log.h"
#include "common/engine/compression.h"
#include "common/rpc/message_limits.h"
#include "common/rpc/rpc_util.h"

namespace pstrain {

using namespace server_rpc;

void ParameterServerImpl::backup_written(const std::string& job_id, uint64_t) {
  const auto it = jobs_.find(job_id);
  if (it != jobs_.end()) it->second->shard->release_durability_hold();
}

kj::Promise<void> ParameterServerImpl::restore(RestoreContext context) {
  const auto params = context.getParams();
  const std::string job_id = rpc::to_string(params.getJobId());
  Job& job = find(params.getJobId());
  job.shard->holds().reject_below(params.getGeneration());
  const uint64_t ticket = ++job.restores;
  if (params.getFromScratch()) {
    job.shard->reset();
    PSLOG(kInfo) << "job " << job_id << ": rolled back to the initial parameters";
    return forget_backups_after(job_id, 0);
  }
  KJ_REQUIRE(store_ != nullptr, "this server keeps no backups (no data directory)");
  const uint64_t version = params.getVersion();
  const bool exact_versions = job.shard->mode() == TrainingMode::kSync;
  auto loaded = store_->run([job_id, version, exact_versions](BackupStore& backups) {
    LoadedBackup out;
    out.chunks = backups.load(job_id, version, &out.error, exact_versions);
    return out;
  });
  // The shard may have moved on while the backup was read (pushes of the new plan cannot have
  // come yet, but the coordinator's next word can): apply only if this restore is still the
  // newest word on the job.
  std::weak_ptr<Job> weak = jobs_.at(job_id);
  const uint64_t fence = job.shard->holds().min_generation();
  return loaded.then([this, weak, job_id, version, ticket, fence](LoadedBackup loaded) {
    auto job = weak.lock();
    KJ_REQUIRE(job != nullptr && !job->dropped, "the job was dropped or reconfigured while its backup was read",
               job_id, version);
    KJ_REQUIRE(job->restores == ticket, "a newer restore of the job came in while its backup was read", job_id,
               version);
    KJ_REQUIRE(job->shard->holds().min_generation() == fence, "a newer plan of the job came in while its backup was read",
               job_id, version, fence, job->shard->holds().min_generation());
    if (!loaded.chunks) {
      PSLOG(kWarning) << "job " << job_id << ": cannot restore: " << loaded.error;
      KJ_FAIL_REQUIRE("backup unusable", loaded.error);
    }
    for (uint32_t key : job->shard->keys()) {
      KJ_REQUIRE(loaded.chunks->count(key) != 0 && (*loaded.chunks)[key].values.size() == job->shard->chunk(key).size(),
                 "backup does not match the job's chunks", key);
    }
    job->shard->restore(*loaded.chunks);
    PSLOG(kInfo) << "job " << job_id << ": restored the backup at step " << version;
    return forget_backups_after(job_id, version);
  });
}

kj::Promise<void> ParameterServerImpl::forget_backups_after(const std::string& job_id, uint64_t version) {
  // Backups past the restored step belong to the timeline the rollback abandoned: a later
  // recovery must not pick one of them. (Queued after the restore's read and before any backup
  // of the new timeline, so it deletes exactly the abandoned ones.)
  if (store_ == nullptr) return kj::READY_NOW;
  return store_->run([job_id, version](BackupStore& backups) { return backups.erase_after(job_id, version); })
      .then([job_id, version](KvStatus status) {
        if (!status.ok()) {
          PSLOG(kWarning) << "job " << job_id << ": could not delete backups after step " << version << ": "
                          << status.message;
        }
      });
}

kj::Promise<void> ParameterServerImpl::backups(BackupsContext context) {
  if (store_ == nullptr) return kj::READY_NOW;  // an empty list
  const std::string job_id = rpc::to_string(context.getParams().getJobId());
  return store_->run([job_id](BackupStore& backups) { return backups.versions(job_id); })
      .then([context](std::vector<uint64_t> versions) mutable {
        auto list = context.getResults().initVersions(static_cast<unsigned>(versions.size()));
        for (size_t i = 0; i < versions.size(); ++i) list.set(static_cast<unsigned>(i), versions[i]);
      });
}

kj::Promise<void> ParameterServerImpl::backupAt(BackupAtContext context) {
  Job& job = find(context.getParams().getJobId());
  const uint64_t version = context.getParams().getVersion();
  if (version != UINT64_MAX) {  // 2^64-1: only asks, like `versions` (coordinators from before it)
    job.extra_backup_points.insert(version);
    if (!job.shard->backup_and_hold_at(version)) job.extra_backup_points.erase(version);  // too late
  }
  set_version_range(*job.shard, context.getResults());
  return kj::READY_NOW;
}

kj::Promise<void> ParameterServerImpl::versions(VersionsContext context) {
  set_version_range(*find(context.getParams().getJobId()).shard, context.getResults());
  return kj::READY_NOW;
}

kj::Promise<void> ParameterServerImpl::releaseHold(ReleaseHoldContext context) {
  find(context.getParams().getJobId()).shard->release_hold();
  return kj::READY_NOW;
}

kj::Promise<void> ParameterServerImpl::backupNow(BackupNowContext context) {
  const std::string job_id = rpc::to_string(context.getParams().getJobId());
  Job& job = find(context.getParams().getJobId());
  KJ_REQUIRE(store_ != nullptr, "this server keeps no backups (no data directory)");
  store_->write_backup(job_id, context.getParams().getVersion(), job.shard->snapshot_each());
  return kj::READY_NOW;
}

kj::Promise<void> ParameterServerImpl::adoptBackup(AdoptBackupContext context) {
  const auto params = context.getParams();
  const std::string job_id = rpc::to_string(params.getJobId());
  Job& job = find(params.getJobId());
  KJ_REQUIRE(store_ != nullptr, "this server keeps no backups (no data directory)");
  // Each blob is checked (it decodes into one of this server's chunks) and written as it came.
  std::vector<uint32_t> keys;
  std::vector<std::string> blobs;
  for (capnp::Data::Reader data : params.getChunks()) {
    std::string blob(reinterpret_cast<const char*>(data.begin()), data.size());
    const auto chunk = decode_snapshot(blob);
    KJ_REQUIRE(chunk.has_value(), "a chunk of the backup does not decode");
    KJ_REQUIRE(job.shard->holds(chunk->key) && chunk->values.size() == job.shard->chunk(chunk->key).size(),
               "the backup does not match this server's chunks", chunk->key);
    keys.push_back(chunk->key);
    blobs.push_back(std::move(blob));
  }
  const size_t first = params.getFirst(), total = params.getTotal();
  KJ_REQUIRE(total == job.shard->keys().size(), "the backup does not cover this server's chunks", total,
             job.shard->keys().size());
  KJ_REQUIRE(!blobs.empty() && first + blobs.size() <= total, "a part of the backup outside its chunks", first,
             blobs.size(), total);
  const uint64_t version = params.getVersion();
  // The part that ends the backup also writes its `complete` marker: only then can `restore` use
  // it (restore checks that every chunk is there).
  const std::optional<size_t> complete = first + blobs.size() == total ? std::optional<size_t>(total) : std::nullopt;
  return store_
      ->run([job_id, version, keys = std::move(keys), blobs = std::move(blobs), complete](BackupStore& backups) {
        return backups.write_part(job_id, version, keys, blobs, complete);
      })
      .then([job_id, version, complete](KvStatus status) {
        KJ_REQUIRE(status.ok(), "could not write the adopted backup", status.message);
        if (complete) {
          PSLOG(kInfo) << "job " << job_id << ": adopted a backup at step " << version << " (" << *complete << " chunks)";
        }
      });
}

kj::Promise<void> ParameterServerImpl::settle(SettleContext context) {
  const std::string job_id = rpc::to_string(context.getParams().getJobId());
  Job& job = find(context.getParams().getJobId());
  const uint64_t version = context.getParams().getVersion();
  KJ_REQUIRE(job.shard->mode() == TrainingMode::kSync, "settle is for sync jobs");
  for (uint32_t key : job.shard->keys()) {
    KJ_REQUIRE(job.shard->chunk(key).version <= version, "a chunk is already past the step to settle at", key,
               job.shard->chunk(key).version, version);
  }
  const uint64_t settle = job.shard->holds().settle_from(version);
  const uint64_t rollbacks = job.shard->holds().rollbacks();
  kj::Vector<kj::Promise<void>> reached;
  for (uint32_t key : job.shard->keys()) {
    auto paf = kj::newPromiseAndFulfiller<uint64_t>();
    auto shared = share(kj::mv(paf.fulfiller));
    job.shard->pull(key, version, [shared](uint64_t v) { shared.fulfill(v); });
    reached.add(paf.promise.ignoreResult());
  }
  std::weak_ptr<Job> weak = jobs_.at(job_id);
  const uint64_t generation = context.getParams().getGeneration();
  return kj::joinPromises(reached.releaseAsArray()).then([weak, job_id, version, generation, rollbacks, settle] {
    auto job = weak.lock();
    KJ_REQUIRE(job != nullptr && !job->dropped, "job was dropped");
    // A rollback since (a second loss during the takeover) made this settle moot; the pulls it
    // waited on only fired because the new plan trained past `version`.
    KJ_REQUIRE(job->shard->holds().rollbacks() == rollbacks, "the job was rolled back meanwhile; not settling");
    // A settle of a coordinator that has died (its call lives on here) must not act on a newer plan.
    KJ_REQUIRE(job->shard->holds().settles() == settle, "a newer settle replaced this one");
    job->shard->abort_waiting_and_release_hold(generation);
    PSLOG(kInfo) << "job " << job_id << ": settled at step " << version << " for a re-plan";
  });
}

kj::Promise<void> ParameterServerImpl::dropJob(DropJobContext context) {
  const std::string job_id = rpc::to_string(context.getParams().getJobId());
  if (const auto it = jobs_.find(job_id); it != jobs_.end()) {
    if (it->second->shard != nullptr) {
      const ShardStats& s = it->second->shard->stats();
      PSLOG(kInfo) << "job " << job_id << ": dropped; pushes applied " << s.pushes_applied << ", dropped "
                   << s.pushes_dropped << ", async staleness mean "
                   << (s.async_pushes ? s.staleness_sum / static_cast<double>(s.async_pushes) : 0.0) << " max "
                   << s.max_staleness;
    }
    retire(it->second);
    jobs_.erase(it);
  }
  // The job is over (its checkpoints, if any, are the coordinator's): its backups go too, like
  // the directory of Keras' BackupAndRestore when training ends. Queued after every backup
  // write of the job, so none is left behind.
  // The reply does not wait for it (the store thread may be busy with a long write).
  if (store_ == nullptr) return kj::READY_NOW;
  store_->run([job_id](BackupStore& backups) { return backups.erase_job(job_id); })
      .then([job_id](KvStatus status) {
        if (!status.ok()) {
          PSLOG(kWarning) << "job " << job_id << ": could not delete its backups: " << status.message;
        }
      })
      .detach([job_id](kj::Exception&& e) {
        PSLOG(kWarning) << "job " << job_id << ": could not delete its backups: " << e.getDescription().cStr();
      });
  return kj::READY_NOW;
}

void ParameterServerImpl::retire(std::shared_ptr<Job> job) {
  // Calls waiting on the shard fail now ("job was dropped"), as they did when the shard was freed.
  job->dropped = true;
  job->shard->abandon();
  prune_retired();
  retired_.emplace_back(std::chrono::steady_clock::now(), std::move(job));
}

void ParameterServerImpl::prune_retired() {
  const auto now = std::chrono::steady_clock::now();
  std::erase_if(retired_, [&](const auto& r) { return now - r.first > std::chrono::minutes(1); });
}

kj::Promise<void> ParameterServerImpl::stats(StatsContext context) {
  Job& job = find(context.getParams().getJobId());
  const ShardStats& s = job.shard->stats();
  auto out = context.getResults().initStats();
  const auto keys = job.shard->keys();
  out.setVersion(keys.empty() ? 0 : job.shard->chunk(keys.front()).version);
  out.setPushesApplied(s.pushes_applied);
  out.setPushesDropped(s.pushes_dropped);
  out.setMaxStaleness(s.max_staleness);
  out.setMeanStaleness(s.async_pushes ? s.staleness_sum / static_cast<double>(s.async_pushes) : 0.0);
  out.setBytesIn(job.bytes_in);
  out.setBytesOut(job.bytes_out);
  return kj::READY_NOW;
}

}  // namespace pstrain
