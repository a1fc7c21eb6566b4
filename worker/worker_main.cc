// pstrain-worker: registers with the coordinator, waits for an assignment, trains it, and waits
// for the next. Needs no inbound port and no shared filesystem: data comes from the coordinator.
// main() turns the flags into a WorkerNodeConfig and runs the node (worker_node.h) until SIGINT or
// SIGTERM.
#include <kj/async-io.h>

#include <iostream>

#include "common/base/error.h"
#include "common/base/flags.h"
#include "common/base/process_main.h"
#include "common/rpc/rpc_util.h"
#include "worker/worker_node.h"

namespace {

pstrain::Exchange parse_exchange(const std::string& mode) {
  using pstrain::Exchange;
  if (mode == "forward") return Exchange::kForward;
  if (mode == "factored") return Exchange::kFactored;
  if (mode == "sparse") return Exchange::kSparse;
  if (mode == "dense") return Exchange::kDense;
  throw pstrain::Error("--exchange must be forward, factored, sparse or dense (got '" + mode + "')");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace pstrain;
  FlagSet flags("pstrain-worker",
                "A training worker: gets its assignment and data from the coordinator, pulls parameters\n"
                "from the parameter servers, computes gradients and pushes them back.");
  flags.add("coordinator", "PSTRAIN_COORDINATOR", "127.0.0.1:7000", "The coordinator's RPC address.");
  flags.add("threads", "PSTRAIN_THREADS", "1", "Compute threads (each takes a slice of the batch); 0: one per core.");
  flags.add("name", "PSTRAIN_NODE_NAME", "", "Name shown in the cluster view (default: host-pid).");
  flags.add("log-level", "PSTRAIN_LOG_LEVEL", "info", "debug, info, warning or error.");
  flags.add("exchange", "PSTRAIN_EXCHANGE", "forward",
            "How gradients and parameters travel: 'forward' (the servers compute the first layer's\n"
            "product for the next batch and reply with it instead of its values; and 'factored'\n"
            "besides), 'factored' (dense kernels pushed as factors where that is smaller, and 'sparse'\n"
            "besides), 'sparse' (only the first layer's rows the batch touches), or 'dense' (every\n"
            "chunk whole). The last three are for comparisons.");
  flags.add("kernel-replies", "", "bfloat16",
            "Mixed precision: how the kernels this worker reads only through bfloat16 products come\n"
            "      back from the servers: 'bfloat16' (rounded as the products round them: half the bytes,\n"
            "      the same bits) or 'float32' (for comparisons).");
  flags.add(rpc::kSecretFlag, rpc::kSecretEnv, "", rpc::kSecretHelp);
  flags.add("slow-step-ms", "", "0",
            "For tests of long steps: each step's compute also takes this long (the worker's loop busy, as\n"
            "      with a model whose steps take that long). 0: off.");
  flags.add("data-from", "PSTRAIN_DATA_FROM", "store",
            "Where the worker reads its training examples: 'store' (the dataset's shard files, when it\n"
            "      sees their directory as the coordinator names it and they are as recorded; otherwise\n"
            "      through the coordinator) or 'coordinator' (always through the coordinator).");
  flags.add_switch("check-config", "", "Validate the configuration and exit.");
  if (const auto status = parse_flags(flags, argc, argv, "pstrain-worker")) return *status;
  WorkerNodeConfig config;
  int threads = 1;  // compute threads; 0: one per core
  try {
    apply_log_level(flags);
    config.coordinator = rpc::parse_host_port(flags.get("coordinator"), 7000, "--coordinator");
    threads = static_cast<int>(flags.get_int("threads", 0, 256));
    config.session.exchange = parse_exchange(flags.get("exchange"));
    config.session.cluster = rpc::ClusterCredential::from_flag(flags.get(rpc::kSecretFlag));
    config.session.slow_step_ms = static_cast<uint32_t>(flags.get_int("slow-step-ms", 0, 3600 * 1000));
    const std::string data_from = flags.get("data-from");
    if (data_from != "store" && data_from != "coordinator") {
      throw std::invalid_argument("--data-from: '" + data_from + "' is neither 'store' nor 'coordinator'");
    }
    config.session.read_store = data_from == "store";
    const std::string kernel_replies = flags.get("kernel-replies");
    if (kernel_replies != "bfloat16" && kernel_replies != "float32") {
      throw std::invalid_argument("--kernel-replies: '" + kernel_replies + "' is neither 'bfloat16' nor 'float32'");
    }
    config.session.bf16_kernel_replies = kernel_replies == "bfloat16";
    config.name = flags.get("name").empty() ? rpc::default_node_name() : flags.get("name");
  } catch (const std::exception& e) {
    std::cerr << "pstrain-worker: " << e.what() << "\n";
    return 2;
  }
  if (flags.get_switch("check-config")) {
    std::cout << "pstrain-worker: configuration ok\n";
    return 0;
  }

  config.session.replicas = rpc::prepare_node_process(threads);
  auto io = kj::setupAsyncIo();
  run_worker_node(io, config, rpc::stop_on_signal(io.unixEventPort),
                  [](uint32_t port) { rpc::print_ready("worker", port); });
  return 0;
}
