// Sync N workers equal the standalone trainer with the job's N slices, bit for bit, over random
// jobs (issue 33, item 5): global batches of 17 to 257, 1 to 4 workers, 1 or 2 servers, training
// sets that leave a partial last batch (and uneven slices: 43/43/42), SGD, momentum or Adam, and
// every exchange (dense, row-sparse, factored, forward; small chunks go in batched pushes), and
// hidden activations drawn from every one the engine has, and half of them a cosine learning-rate
// schedule with warm-up, half a layer_norm between the hidden layers, half a residual block (a
// dense layer whose output is added to the first hidden layer's: a value two layers read), half a
// dropout before the output layer (masks from the examples' indices); every other trial's servers
// also offer same-host sockets (common/rpc/same_host.h), the rest serve by TCP alone. The
// trial's seed is printed; PSTRAIN_SLICES_TRIALS sets how many (CI: 6). And the same with each
// training.compression (fp16, bf16, topk, powersgd): one drawn trial each, the trainer standing in
// for the compressed pushes (worker/local_compression.h).
//
// And one step of N slices against one slice of the whole batch: the same step to rounding
// (1e-6). Over an epoch the two drift apart, by design: the kernel gradients are summed in another
// order, and a pre-activation that rounding puts on the other side of a ReLU's zero then changes
// an example's gradient by a whole term (docs/DESIGN-NOTES.md, "Exactness on every CPU").
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "common/data/dataset.h"
#include "common/data/job_spec.h"
#include "common/rpc/same_host.h"
#include "tests/coordinator/inprocess_cluster.h"
#include "tests/synthetic_data.h"
#include "common/engine/nn/onednn_conv.h"
#include "worker/local_trainer.h"

using namespace pstrain;
using namespace std::chrono_literals;

namespace {

// "blobs-30": 30 float32 features in `classes` classes (testing::separable_features); `examples`
// training examples (test: 300). classes 0: a regression dataset of the same features with two
// targets each (a linear one and a product of two features); multi_label: the same two as 0/1
// labels (their signs).
SplitLoader blobs(uint32_t examples, uint32_t classes, bool multi_label = false) {
  return [examples, classes, multi_label](const std::string& dataset, SplitKind kind) {
    Rng rng(11);
    std::vector<float> w((classes > 0 ? classes : 3) * 30);
    for (float& v : w) v = rng.uniform_float(-1.0f, 1.0f);
    const testing::Examples train = testing::separable_features(rng, w, static_cast<int>(examples));
    const testing::Examples test = testing::separable_features(rng, w, 300);
    const testing::Examples& e = kind == SplitKind::kTrain ? train : test;
    if (classes > 0) return make_split(dataset, kind, testing::as_parsed(e, {30}, Dtype::kFloat32, classes));
    ParsedExamples p = testing::as_parsed(e, {30}, Dtype::kFloat32, 0);
    p.labels.clear();
    p.target_width = 2;
    for (size_t i = 0; i + 30 <= e.inputs.size(); i += 30) {
      float linear = 0;
      for (size_t k = 0; k < 10; ++k) linear += 0.3f * e.inputs[i + k];
      const float product = e.inputs[i] * e.inputs[i + 1];
      p.targets.push_back(multi_label ? (linear > 0 ? 1.0f : 0.0f) : linear);
      p.targets.push_back(multi_label ? (product > 0 ? 1.0f : 0.0f) : product);
    }
    return make_split(dataset, kind, std::move(p));
  };
}

struct Trial {
  int workers, servers;
  int64_t batch;
  uint32_t examples;
  OptimizerType optimizer;
  bool momentum;
  Exchange exchange;
  Activation hidden1, hidden2;  // the hidden layers' activations (issue 35: every one stays exact)
  bool cosine;                  // a cosine schedule with warm-up instead of a constant rate
  bool layer_norm;              // a layer_norm between the hidden layers
  bool residual;                // h1 + dense(h1) before the second hidden layer
  bool dropout;                 // a dropout (rate 0.3) before the output layer
  LossSpec loss;                // sparse; categorical smoothed by 0.1; binary (2 classes, 1 output);
                                // mse, mae, huber (delta 0.5) on two float targets
  bool multi_label = false;     // binary: two labels per example (a dataset of float targets)
  int64_t ghost;                // > 0: a batch_norm after the first hidden layer, ghost batches of this
  float weight_decay = 0.0f;    // the optimizer's decoupled weight decay
  bool l2 = false;              // an L2 regularizer (0.001) on the first hidden layer's kernel
  bool same_host = false;       // servers with a same-host socket: not drawn, every other trial
};

Trial draw(Rng& rng) {
  Trial t;
  t.workers = 1 + static_cast<int>(rng.uniform_index(4));
  t.servers = 1 + static_cast<int>(rng.uniform_index(2));
  t.batch = 17 + static_cast<int64_t>(rng.uniform_index(241));
  t.examples = static_cast<uint32_t>(3 * t.batch + 1 + rng.uniform_index(static_cast<uint64_t>(t.batch - 1)));
  const uint64_t o = rng.uniform_index(3);
  t.optimizer = o == 2 ? OptimizerType::kAdam : OptimizerType::kSgd;
  t.momentum = o == 1;
  const Exchange exchanges[] = {Exchange::kDense, Exchange::kSparse, Exchange::kFactored, Exchange::kForward};
  t.exchange = exchanges[rng.uniform_index(4)];
  const Activation first[] = {Activation::kReLU, Activation::kTanh, Activation::kGelu};
  const Activation any[] = {Activation::kReLU,    Activation::kSigmoid, Activation::kTanh,
                            Activation::kSoftmax, Activation::kGelu,    Activation::kElu,
                            Activation::kLeakyReLU, Activation::kSwish};
  t.hidden1 = first[rng.uniform_index(3)];
  t.hidden2 = any[rng.uniform_index(8)];
  t.cosine = rng.uniform_index(2) == 1;
  t.layer_norm = rng.uniform_index(2) == 1;
  t.residual = rng.uniform_index(2) == 1;
  t.dropout = rng.uniform_index(2) == 1;
  const LossType losses[] = {LossType::kSparseCategoricalCrossEntropy, LossType::kCategoricalCrossEntropy,
                             LossType::kBinaryCrossEntropy, LossType::kMeanSquaredError,
                             LossType::kMeanAbsoluteError, LossType::kHuber};
  t.loss.type = losses[rng.uniform_index(6)];
  if (t.loss.type == LossType::kCategoricalCrossEntropy) t.loss.label_smoothing = 0.1f;
  if (t.loss.type == LossType::kHuber) t.loss.delta = 0.5f;
  t.multi_label = t.loss.type == LossType::kBinaryCrossEntropy && rng.uniform_index(2) == 1;
  // batch_norm needs the batch to split evenly over the workers: half the trials round it to a
  // multiple of the workers and use ghost batches of a half or a whole worker's share.
  t.ghost = 0;
  if (rng.uniform_index(2) == 1) {
    t.batch = (t.batch + 2 * t.workers - 1) / (2 * t.workers) * (2 * t.workers);
    t.examples = static_cast<uint32_t>(3 * t.batch + 1 + rng.uniform_index(static_cast<uint64_t>(t.batch - 1)));
    t.ghost = t.batch / t.workers / (rng.uniform_index(2) == 1 ? 2 : 1);
  }
  // The update's own terms, which the trainer computes inside its update and the servers in
  // separate passes (DESIGN-NOTES "The step's tail in one pass").
  t.weight_decay = rng.uniform_index(2) == 1 ? 0.004f : 0.0f;
  t.l2 = rng.uniform_index(2) == 1;
  return t;
}

uint32_t classes_of(const Trial& t) {
  if (is_regression(t.loss) || t.multi_label) return 0;
  return t.loss.type == LossType::kBinaryCrossEntropy ? 2 : 3;
}

JobSpec job_of(const Trial& t) {
  JobSpec spec;
  spec.name = "slices";
  spec.dataset.name = "blobs-30";
  spec.dataset.shuffle_seed = 9;
  spec.model.input_shape = {30};
  spec.model.seed = 4;
  LayerSpec h1, h2, out;
  h1.units = 48;
  h1.activation = t.hidden1;
  h1.l2 = t.l2 ? 0.001f : 0.0f;
  h2.units = 24;
  h2.activation = t.hidden2;
  out.units = is_regression(t.loss) || t.multi_label ? 2 : loss_outputs(t.loss, classes_of(t));
  spec.loss = t.loss;
  spec.model.layers = {h1, h2, out};
  if (t.layer_norm) {
    LayerSpec norm;
    norm.type = LayerType::kLayerNorm;
    spec.model.layers.insert(spec.model.layers.begin() + 1, norm);
  }
  if (t.ghost > 0) {
    LayerSpec norm;
    norm.type = LayerType::kBatchNorm;
    norm.momentum = 0.9f;
    norm.virtual_batch_size = t.ghost;
    spec.model.layers.insert(spec.model.layers.begin() + 1, norm);
  }
  if (t.residual) {
    LayerSpec r, add;
    r.units = 48;
    r.activation = t.hidden2;
    r.name = "r";
    add.type = LayerType::kAdd;
    add.inputs = {"h1", "r"};
    spec.model.layers[0].name = "h1";
    spec.model.layers.insert(spec.model.layers.end() - 2, {r, add});
  }
  if (t.dropout) {
    LayerSpec drop;
    drop.type = LayerType::kDropout;
    drop.rate = 0.3f;
    spec.model.layers.insert(spec.model.layers.end() - 1, drop);
  }
  spec.optimizer.type = t.optimizer;
  spec.optimizer.learning_rate = t.optimizer == OptimizerType::kAdam ? 0.005f : 0.1f;
  if (t.momentum) spec.optimizer.momentum = 0.9f;
  spec.optimizer.weight_decay = t.weight_decay;
  if (t.cosine) {  // warm up from 0 over 2 steps, then decay to a tenth over 3
    LearningRateSchedule& s = spec.optimizer.schedule;
    s.kind = LearningRateSchedule::Kind::kCosineDecay;
    s.initial_learning_rate = 0.0;
    s.warmup_steps = 2;
    s.warmup_target = spec.optimizer.learning_rate;
    s.decay_steps = 3;
    s.alpha = 0.1;
  }
  spec.training.mode = TrainingMode::kSync;
  spec.training.global_batch_size = t.batch;
  spec.training.epochs = 1;
  spec.training.servers = t.servers;
  spec.training.workers = t.workers;
  return spec;
}

// A trial's job trained on a cluster of its shape and by the trainer with its slices and servers.
struct Compared {
  LocalTrainerOptions options;  // the trainer's (for further runs of the same job)
  TrainingResult local;
  size_t differ = 0;  // parameters in which the two ended apart
};
Compared cluster_against_trainer(const Trial& t, const JobSpec& spec, const SplitLoader& load) {
  std::vector<float> distributed;
  const uint64_t same_host_before = rpc::same_host_connections();
  {
    testing::InProcessCluster cluster({.servers = t.servers, .workers = t.workers, .load_split = load,
                                       .exchange = t.exchange, .same_host = t.same_host});
    const std::string id = cluster.submit(spec);
    const JobRecord r = cluster.wait_finished(id, 120s);
    REQUIRE_MESSAGE(r.state == JobState::kSucceeded, cluster.describe(id));
    distributed = cluster.final_params(id);
  }
  // The transport the trial names is the one its workers used (where the host allows the path:
  // not with net.ipv4.ip_nonlocal_bind set).
  const bool path = !rpc::same_host_candidates("127.0.0.1:1").empty();
  CHECK((rpc::same_host_connections() > same_host_before) == (t.same_host && path));
  Compared c;
  c.options.load_split = load;
  c.options.replicas = t.workers;
  c.options.servers = static_cast<uint32_t>(t.servers);
  c.local = train_locally(spec, c.options);
  REQUIRE(distributed.size() == c.local.params.size());
  for (size_t k = 0; k < distributed.size(); ++k) c.differ += distributed[k] != c.local.params[k];
  return c;
}

const char* exchange_name(Exchange e) {
  switch (e) {
    case Exchange::kDense: return "dense";
    case Exchange::kSparse: return "sparse";
    case Exchange::kFactored: return "factored";
    case Exchange::kForward: return "forward";
  }
  return "?";
}

}  // namespace

TEST_CASE("sync N workers equal the trainer's N slices bit for bit, over random batches, splits, optimizers, exchanges") {
  const char* env = std::getenv("PSTRAIN_SLICES_TRIALS");
  const int trials = env != nullptr ? std::atoi(env) : 6;
  const uint64_t seed = 20261127;
  MESSAGE("seed " << seed << ", " << trials << " trials");
  Rng rng(seed);
  for (int i = 0; i < trials; ++i) {
    Trial t = draw(rng);
    t.same_host = i % 2 == 0;  // both transports carry the same bits
    const JobSpec spec = job_of(t);
    CAPTURE(i);
    CAPTURE(t.workers);
    CAPTURE(t.servers);
    CAPTURE(t.batch);
    CAPTURE(t.examples);
    CAPTURE(static_cast<int>(t.optimizer));
    CAPTURE(t.momentum);
    const std::string exchange = exchange_name(t.exchange);
    CAPTURE(exchange);
    const std::string activations = std::string(activation_name(t.hidden1)) + ", " + activation_name(t.hidden2) +
                                    (t.multi_label ? ", multi-label" : "") + (t.cosine ? ", cosine schedule" : "") + (t.layer_norm ? ", layer_norm" : "") + (t.residual ? ", residual" : "") + (t.dropout ? ", dropout" : "") + ", " + loss_type_name(t.loss.type) +
                                    (t.ghost > 0 ? ", batch_norm ghost " + std::to_string(t.ghost) : "") +
                                    (t.weight_decay > 0 ? ", weight decay" : "") + (t.l2 ? ", l2" : "") +
                                    (t.examples % t.batch < static_cast<uint32_t>(t.workers) ? ", last batch under the workers" : "") +
                                    (t.same_host ? ", same-host sockets" : ", by TCP");
    CAPTURE(activations);
    const SplitLoader load = blobs(t.examples, classes_of(t), t.multi_label);
    Compared compared = cluster_against_trainer(t, spec, load);
    LocalTrainerOptions& options = compared.options;
    const size_t differ = compared.differ;
    MESSAGE("trial " << i << ": " << t.workers << " worker(s) x " << t.servers << " server(s), batch " << t.batch << ", "
                     << t.examples << " examples, " << std::string(exchange_name(t.exchange)) << ", " << activations << ": " << differ
                     << " parameters differ from the trainer's");
    CHECK(differ == 0);

    // One step: N slices against the whole batch.
    options.max_steps = 1;
    const TrainingResult n_slices = train_locally(spec, options);
    options.replicas = 1;
    const TrainingResult one = train_locally(spec, options);
    double worst = 0;
    for (size_t k = 0; k < one.params.size(); ++k) {
      worst = std::max(worst, static_cast<double>(std::abs(one.params[k] - n_slices.params[k])));
    }
    CHECK(worst <= 1e-6);
  }
}

TEST_CASE("with each compression (fp16, bf16, topk, powersgd) sync N workers equal the trainer's N slices bit for bit") {
  // The trainer stands in for the compressed pushes (worker/local_compression.h): each slice's
  // gradient as the servers decode it, topk's and powersgd's residuals kept per slice.
  const uint64_t seed = 20261206;
  MESSAGE("seed " << seed);
  Rng rng(seed);
  for (const CompressionKind kind :
       {CompressionKind::kFp16, CompressionKind::kBf16, CompressionKind::kTopk, CompressionKind::kPowerSgd}) {
    Trial t = draw(rng);
    while (t.workers < 2) t = draw(rng);  // slices to keep apart
    t.exchange = Exchange::kDense;        // a compressed job's exchange
    // A last batch of one example: every worker but one has an empty slice and still pushes (a
    // topk or powersgd residual), as the trainer's empty slices do.
    t.examples = static_cast<uint32_t>(3 * t.batch + 1);
    JobSpec spec = job_of(t);
    spec.training.compression.kind = kind;
    spec.training.compression.fraction = 0.2f;
    spec.training.compression.rank = 2;
    spec = parse_job_spec(job_spec_to_json(spec));
    const std::string kind_name = compression_kind_name(kind);
    CAPTURE(kind_name);
    CAPTURE(t.workers);
    CAPTURE(t.servers);
    CAPTURE(t.batch);
    CAPTURE(t.examples);
    const SplitLoader load = blobs(t.examples, classes_of(t), t.multi_label);
    Compared compared = cluster_against_trainer(t, spec, load);
    LocalTrainerOptions& options = compared.options;
    const TrainingResult& local = compared.local;
    const size_t differ = compared.differ;
    MESSAGE(kind_name << ": " << t.workers << " workers x " << t.servers << " server(s), batch " << t.batch << ", "
                      << t.examples << " examples" << std::string(t.ghost > 0 ? ", batch_norm" : "") << ": " << differ
                      << " parameters differ from the trainer's");
    CHECK(differ == 0);
    // And the trainer without compression ends elsewhere (the stand-in is not a no-op).
    JobSpec plain = spec;
    plain.training.compression = {};
    const TrainingResult uncompressed = train_locally(plain, options);
    CHECK(uncompressed.params != local.params);
  }
}

TEST_CASE("in mixed_bfloat16 sync N workers equal the trainer's N slices bit for bit, over every exchange") {
  // The dense layers' forward and input-gradient products in bfloat16 where the CPU has them
  // (onednn_matmul.h; else float32, and the case is the float one again); their kernel gradients
  // simd::product_bf16's, which the factored exchange's servers multiply out alike (the push says
  // which product).
  const uint64_t seed = 20261207;
  MESSAGE("seed " << seed << std::string(nn::onednn_bf16() ? ", bfloat16 products" : ", no bfloat16 here: float32"));
  Rng rng(seed);
  // The factored exchange factors a kernel only where its factors are at most a third of it
  // (worker/factor_plan.h), which the random batches rarely are: two more factored trials with 4
  // examples per worker, where the hidden kernels go as factors and the servers multiply out the
  // bfloat16 product (one server, then two holding parts of the kernels).
  std::vector<Trial> trials;
  for (const Exchange exchange : {Exchange::kDense, Exchange::kSparse, Exchange::kFactored, Exchange::kForward}) {
    trials.push_back(draw(rng));
    trials.back().exchange = exchange;
  }
  for (const int servers : {1, 2}) {
    Trial t = draw(rng);
    t.exchange = Exchange::kFactored;
    t.workers = 2;
    t.servers = servers;
    t.batch = 8;
    t.examples = 29;
    t.ghost = 0;
    trials.push_back(t);
  }
  for (const Trial& t : trials) {
    const Exchange exchange = t.exchange;
    JobSpec spec = job_of(t);
    spec.precision = Precision::kMixedBfloat16;
    spec = parse_job_spec(job_spec_to_json(spec));
    const std::string exchange_text = exchange_name(exchange);
    CAPTURE(exchange_text);
    CAPTURE(t.workers);
    CAPTURE(t.servers);
    CAPTURE(t.batch);
    const SplitLoader load = blobs(t.examples, classes_of(t), t.multi_label);
    Compared compared = cluster_against_trainer(t, spec, load);
    LocalTrainerOptions& options = compared.options;
    const TrainingResult& local = compared.local;
    const size_t differ = compared.differ;
    MESSAGE(exchange_text << ": " << t.workers << " worker(s) x " << t.servers << " server(s), batch " << t.batch
                          << ": " << differ << " parameters differ from the trainer's");
    CHECK(differ == 0);
    if (nn::onednn_bf16()) {  // and bfloat16 changed the run
      JobSpec full = spec;
      full.precision = Precision::kFloat32;
      CHECK(train_locally(full, options).params != local.params);
    }
  }
}

