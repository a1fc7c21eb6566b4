// Backup reports that do not get through: a server's report of a durable backup is lost when the
// connection to the coordinator is torn down while backupDone is in flight (a coordinator that
// stalled long enough for the node to give up on the connection). The reporter sends it again
// after the link's next registration, unless the coordinator refused it or the store no longer
// holds the backup. A coordinator of the test's own plays the coordinator's part: it can hold a
// backupDone unanswered and forget the node, as a stalled coordinator does.
#include <doctest/doctest.h>
#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/rpc/coordinator_link.h"
#include "common/rpc/rpc_util.h"
#include "server/backup_report.h"
#include "tests/server/store_fixture.h"

using namespace pstrain;

namespace {

struct Heard {
  int registrations = 0;
  std::vector<uint64_t> replicas;  // version of each replica's first part
  std::vector<uint64_t> done;      // version of each backupDone, answered or not
  int lose = 0;         // the next `lose` backupDones are held unanswered (stalled)
  bool refuse = false;  // the next backupDone is refused
  bool forget = false;  // heartbeats say "unknown": the node registers again
};

class TestCoordinator final : public proto::Coordinator::Server {
 public:
  explicit TestCoordinator(Heard& heard) : heard_(heard) {}

 protected:
  kj::Promise<void> register_(RegisterContext context) override {
    ++heard_.registrations;
    heard_.forget = false;
    context.getResults().setNodeId(1);
    context.getResults().setHeartbeatMs(50);
    context.getResults().setDeadAfterMs(5000);
    return kj::READY_NOW;
  }
  kj::Promise<void> heartbeat(HeartbeatContext context) override {
    context.getResults().setKnown(!heard_.forget);
    return kj::READY_NOW;
  }
  kj::Promise<void> storeReplica(StoreReplicaContext context) override {
    if (context.getParams().getFirst() == 0) heard_.replicas.push_back(context.getParams().getVersion());
    return kj::READY_NOW;
  }
  kj::Promise<void> backupDone(BackupDoneContext context) override {
    heard_.done.push_back(context.getParams().getVersion());
    if (std::exchange(heard_.refuse, false)) KJ_FAIL_REQUIRE("unknown job", context.getParams().getJobId());
    if (heard_.lose > 0) {
      --heard_.lose;
      // Stalled: no answer, and the node is forgotten, so it drops this connection (and with it
      // the call) and registers again on a new one.
      heard_.forget = true;
      return kj::NEVER_DONE;
    }
    context.getResults().initRestorable(1).set(0, context.getParams().getVersion());
    return kj::READY_NOW;
  }

 private:
  Heard& heard_;
};

std::vector<ChunkSnapshot> backup_of(uint64_t version) {
  std::vector<ChunkSnapshot> chunks(3);
  for (uint32_t key = 0; key < chunks.size(); ++key) {
    chunks[key].key = key;
    chunks[key].version = version;
    chunks[key].values.assign(64, static_cast<float>(version + key));
  }
  return chunks;
}

// A server's reporting side (its store thread, link and reporter) against the test's coordinator.
struct ReportFixture {
  testing::TempDir dir;
  kj::AsyncIoContext io = kj::setupAsyncIo();
  kj::WaitScope& ws = io.waitScope;
  std::unique_ptr<KvStore> kv = testing::open_kv(dir);
  BackupStore backups{*kv};
  Heard heard;
  capnp::TwoPartyServer server{kj::heap<TestCoordinator>(heard)};
  kj::Own<kj::ConnectionReceiver> listener =
      io.provider->getNetwork().parseAddress("127.0.0.1", 0).wait(ws)->listen();
  rpc::ClusterCredential open;
  rpc::AuthRefusals refusals;
  rpc::ListenerAuth auth{open, io.provider->getTimer(), refusals, "test coordinator"};
  kj::Promise<void> serving = rpc::serve(server, *listener, auth).eagerlyEvaluate(nullptr);
  BackupReporter reporter;
  StoreThread store{backups, [this](const std::string& job, uint64_t version, const KvStatus& status, double) {
                      CHECK(status.ok());
                      return reporter.written(job, version);
                    }};
  rpc::CoordinatorLink link{*io.provider, {"127.0.0.1", listener->getPort()}, proto::Role::SERVER, "127.0.0.1:1",
                            "server-0"};

  ReportFixture() {
    reporter.attach(link, store);
    link.on_registered([this](uint32_t) { reporter.registered(); });
    link.start().wait(ws);
  }
  // Turns the loop until `done` holds (at most 20 s).
  bool until(const std::function<bool()>& done) {
    for (int i = 0; i < 2000 && !done(); ++i) io.provider->getTimer().afterDelay(10 * kj::MILLISECONDS).wait(ws);
    return done();
  }
  // Turns the loop for `ms` milliseconds.
  void idle(int ms) { io.provider->getTimer().afterDelay(ms * kj::MILLISECONDS).wait(ws); }
};

}  // namespace

TEST_CASE("backup report - one lost with its connection is sent again after the next registration") {
  ReportFixture f;
  REQUIRE(f.heard.registrations == 1);
  f.heard.lose = 1;
  f.store.write_backup("job", 5, backup_of(5));
  // Lost, then again on the new connection: the replica and backupDone both.
  REQUIRE_MESSAGE(f.until([&] { return f.heard.done.size() >= 2; }), "backupDone heard " << f.heard.done.size());
  CHECK(f.heard.registrations == 2);
  CHECK(f.heard.done == std::vector<uint64_t>{5, 5});
  CHECK(f.heard.replicas == std::vector<uint64_t>{5, 5});
  f.idle(300);
  CHECK(f.reporter.unreported().empty());
  CHECK(f.heard.done.size() == 2);
}

TEST_CASE("backup report - one lost on every try is given up after kAttempts reports") {
  ReportFixture f;
  f.heard.lose = BackupReporter::kAttempts;
  f.store.write_backup("job", 6, backup_of(6));
  REQUIRE(f.until([&] { return f.heard.done.size() == static_cast<size_t>(BackupReporter::kAttempts); }));
  // After the last try's connection goes, the node registers once more and sends nothing.
  REQUIRE(f.until([&] { return f.heard.registrations == 1 + BackupReporter::kAttempts; }));
  f.idle(300);
  CHECK(f.heard.done == std::vector<uint64_t>(BackupReporter::kAttempts, 6));
  CHECK(f.reporter.unreported().empty());
}

TEST_CASE("backup report - one the coordinator refused is not sent again") {
  ReportFixture f;
  f.heard.refuse = true;
  f.store.write_backup("job", 7, backup_of(7));
  REQUIRE(f.until([&] { return f.heard.done.size() == 1; }));
  f.idle(100);
  CHECK(f.reporter.unreported().empty());
  // A later registration sends nothing.
  f.heard.forget = true;
  REQUIRE(f.until([&] { return f.heard.registrations == 2; }));
  f.idle(300);
  CHECK(f.heard.done == std::vector<uint64_t>{7});
}

TEST_CASE("backup report - a lost one the store no longer holds (a rollback deleted it) is not sent again") {
  ReportFixture f;
  f.store.write_backup("job", 3, backup_of(3));
  REQUIRE(f.until([&] { return f.heard.done.size() == 1; }));
  // The report of step 9 is lost; the node cannot register again until the test lets it (the
  // coordinator stops accepting connections: the node's new connection waits in the listen
  // backlog, which is what drops the old one and with it the call), and a rollback to step 3
  // deletes the backup at 9.
  f.heard.lose = 1;
  f.serving = kj::NEVER_DONE;
  f.store.write_backup("job", 9, backup_of(9));
  REQUIRE(f.until([&] { return !f.reporter.unreported().empty(); }));
  CHECK(f.reporter.unreported().at("job").version == 9);
  CHECK(f.store.run([](BackupStore& b) { return b.erase_after("job", 3); }).wait(f.ws).ok());
  f.serving = rpc::serve(f.server, *f.listener, f.auth).eagerlyEvaluate(nullptr);
  REQUIRE(f.until([&] { return f.heard.registrations == 2; }));
  f.idle(300);
  CHECK(f.heard.done == std::vector<uint64_t>{3, 9});
  CHECK(f.heard.replicas == std::vector<uint64_t>{3, 9});
  CHECK(f.reporter.unreported().empty());
}

TEST_CASE("backup report - one written while the link is down is reported after registering") {
  ReportFixture f;
  f.heard.forget = true;  // the link drops its connection, and stays down while no one accepts
  f.serving = kj::NEVER_DONE;
  REQUIRE(f.until([&] { return !f.link.connected(); }));
  f.store.write_backup("job", 4, backup_of(4));
  REQUIRE(f.until([&] { return !f.reporter.unreported().empty(); }));
  CHECK(f.heard.done.empty());
  f.serving = rpc::serve(f.server, *f.listener, f.auth).eagerlyEvaluate(nullptr);
  REQUIRE(f.until([&] { return f.heard.done.size() == 1; }));
  CHECK(f.heard.done == std::vector<uint64_t>{4});
  CHECK(f.heard.replicas == std::vector<uint64_t>{4});
}

TEST_CASE("backup report - after a rollback, the new timeline's backup replaces a lost one of a higher step") {
  ReportFixture f;
  f.heard.lose = 1;
  f.serving = kj::NEVER_DONE;
  f.store.write_backup("job", 9, backup_of(9));
  REQUIRE(f.until([&] { return !f.reporter.unreported().empty(); }));
  // Rolled back to step 3 while the link is down; the new timeline writes its steps 5 and 6.
  CHECK(f.store.run([](BackupStore& b) { return b.erase_after("job", 3); }).wait(f.ws).ok());
  f.store.write_backup("job", 5, backup_of(5));
  f.store.write_backup("job", 6, backup_of(6));
  REQUIRE(f.until([&] { return f.reporter.unreported().at("job").version == 6; }));
  f.serving = rpc::serve(f.server, *f.listener, f.auth).eagerlyEvaluate(nullptr);
  REQUIRE(f.until([&] { return f.heard.done.size() == 2; }));
  f.idle(300);
  CHECK(f.heard.done == std::vector<uint64_t>{9, 6});
  CHECK(f.reporter.unreported().empty());
  // Nothing stays pinned (5 was written while the link was down and never reported): once
  // kKeep newer backups are in, each reported before the next (so the one the coordinator last
  // named restorable is among them), the store holds those alone.
  for (uint64_t v = 7; v < 7 + BackupStore::kKeep; ++v) {
    f.store.write_backup("job", v, backup_of(v));
    REQUIRE(f.until([&] { return f.heard.done.size() == v - 4; }));
    // The reply's restorable list has reached the store (the test's coordinator names {v}).
    REQUIRE(f.until([&] {
      return f.store.run([](BackupStore& b) { return b.restorable("job"); }).wait(f.ws) == std::vector<uint64_t>{v};
    }));
  }
  const std::vector<uint64_t> held = f.store.run([](BackupStore& b) { return b.versions("job"); }).wait(f.ws);
  CHECK(held.size() == BackupStore::kKeep);
  CHECK(held.front() == 7);
}
