// Sparse embedding tables (docs/DESIGN-NOTES.md "Sparse models") in the engine and the trainer:
// the layout, the spec's checks, a step's compact rows against the dense table's gradient, and
// whole trainings against the same model with a dense table: bit for bit where the update
// semantics agree (SGD, Adagrad, and Adam under sparse_updates "dense"), and lazy Adam by hand.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "common/base/error.h"
#include "common/base/rng.h"
#include "common/data/dataset.h"
#include "common/data/job_spec.h"
#include "common/engine/model_spec.h"
#include "common/engine/nn/data_parallel_model.h"
#include "common/engine/nn/sparse_rows.h"
#include "common/engine/optim/optimizer.h"
#include "tests/synthetic_data.h"
#include "worker/local_trainer.h"

using namespace pstrain;
using namespace pstrain::testing;

namespace {

constexpr int64_t kRows = 300;

LayerSpec simple(LayerType type) {
  LayerSpec l;
  l.type = type;
  return l;
}

LayerSpec named(LayerSpec l, std::string name, std::vector<std::string> inputs) {
  l.name = std::move(name);
  l.inputs = std::move(inputs);
  return l;
}

LayerSpec dense(int64_t units, bool relu) {
  LayerSpec l = simple(LayerType::kDense);
  l.units = units;
  l.activation = relu ? Activation::kReLU : Activation::kLinear;
  return l;
}

LayerSpec slice(int64_t begin, int64_t size, std::string name) {
  LayerSpec l = simple(LayerType::kSlice);
  l.begin = begin;
  l.size = size;
  return named(l, std::move(name), {"input"});
}

// [id, id, number]: both ids through one table of kRows rows of 4 (a row each, or with a combiner
// one vector of both; -1: padding), the number beside them, into 2 classes.
ModelSpec ids_model(bool sparse, Combiner combiner = Combiner::kNone) {
  LayerSpec table = simple(LayerType::kEmbedding);
  table.input_dim = kRows;
  table.output_dim = 4;
  table.sparse = sparse;
  table.combiner = combiner;
  ModelSpec spec;
  spec.input_shape = {3};
  spec.seed = 11;
  spec.layers = {slice(0, 2, "ids"),
                 named(table, "table", {"ids"}),
                 named(simple(LayerType::kFlatten), "flat", {"table"}),
                 slice(2, 1, "number"),
                 named(simple(LayerType::kConcatenate), "both", {"flat", "number"}),
                 named(dense(8, true), "hidden", {"both"}),
                 named(dense(2, false), "out", {"hidden"})};
  return spec;
}

// Ids skewed toward the low rows (a few hot, many rare), the class from a hidden score of them;
// `padded`: a fifth of the second ids are -1 (a multi-valued column's unused place).
Split make_ids_split(const std::string& dataset, SplitKind kind, bool padded) {
  Rng rng(kind == SplitKind::kTrain ? 21 : 22);
  Examples e;
  const int count = kind == SplitKind::kTrain ? 900 : 200;
  for (int i = 0; i < count; ++i) {
    const auto id = [&] {
      const float u = rng.uniform_float(0.0f, 1.0f);
      return static_cast<float>(static_cast<int64_t>(u * u * u * kRows));
    };
    const float a = id(), x = rng.uniform_float(-1.0f, 1.0f);
    const float b = padded && i % 5 == 3 ? -1.0f : id();
    e.inputs.insert(e.inputs.end(), {a, b, x});
    const auto score = [](float id) { return id < 0 ? 0.0f : static_cast<int64_t>(id) * 7919 % 13 < 6 ? 1.0f : -1.0f; };
    e.labels.push_back(score(a) + score(b) + x > 0.0f ? 1 : 0);
  }
  return make_split(dataset, kind, as_parsed(e, {3}, Dtype::kFloat32, 2));
}
Split ids_split(const std::string& dataset, SplitKind kind) { return make_ids_split(dataset, kind, false); }
Split padded_ids_split(const std::string& dataset, SplitKind kind) { return make_ids_split(dataset, kind, true); }

JobSpec ids_job(bool sparse, OptimizerSpec optimizer, Combiner combiner = Combiner::kNone) {
  JobSpec spec;
  spec.dataset.name = "ids";
  spec.dataset.shuffle_seed = 4;
  spec.model = ids_model(sparse, combiner);
  spec.optimizer = optimizer;
  spec.training.global_batch_size = 32;
  spec.training.epochs = 3;
  return spec;
}

OptimizerSpec optimizer(OptimizerType type, float lr) {
  OptimizerSpec o;
  o.type = type;
  o.learning_rate = lr;
  return o;
}

// Trained from the dense model's initial values (a sparse table's rows draw from streams of their
// own, so the two models start apart otherwise), laid out by `spec`'s layout.
TrainingResult train(const JobSpec& spec, int replicas) {
  const ModelSpec dense_model = ids_model(false, spec.model.layers[1].combiner);
  const ParamLayout from = make_param_layout(dense_model), to = make_param_layout(spec.model);
  std::vector<float> start(from.total_size());
  glorot_uniform_init(from, dense_model.seed, start.data());
  InitialState initial;
  initial.params.assign(to.total_size(), 0.0f);
  for (const ParamInfo& p : from.params()) {
    std::copy_n(start.begin() + static_cast<std::ptrdiff_t>(p.offset), p.size,
                initial.params.begin() + static_cast<std::ptrdiff_t>(to.find(p.name)->offset));
  }
  initial.optimizer = optim::make_optimizer(spec.optimizer)->make_state(to.total_size());
  LocalTrainerOptions options;
  options.load_split = spec.model.layers[1].combiner == Combiner::kNone ? ids_split : padded_ids_split;
  options.replicas = replicas;
  options.initial = &initial;
  return train_locally(spec, options);
}

// A tensor of a trained model by name.
std::vector<float> tensor(const JobSpec& spec, const TrainingResult& r, const std::string& name) {
  const ParamLayout layout = make_param_layout(spec.model);
  const ParamInfo* p = layout.find(name);
  REQUIRE(p != nullptr);
  return {r.params.begin() + static_cast<std::ptrdiff_t>(p->offset),
          r.params.begin() + static_cast<std::ptrdiff_t>(p->offset + p->size)};
}

void check_same_model(const JobSpec& a, const TrainingResult& ra, const JobSpec& b, const TrainingResult& rb) {
  for (const std::string name : {"layers.table.embeddings", "layers.hidden.kernel", "layers.hidden.bias",
                                 "layers.out.kernel", "layers.out.bias"}) {
    CAPTURE(name);
    CHECK(tensor(a, ra, name) == tensor(b, rb, name));
  }
  REQUIRE(ra.epochs.size() == rb.epochs.size());
  for (size_t e = 0; e < ra.epochs.size(); ++e) {
    CHECK(ra.epochs[e].train_loss == rb.epochs[e].train_loss);
    CHECK(ra.epochs[e].test_loss == rb.epochs[e].test_loss);
  }
}

}  // namespace

TEST_CASE("sparse tables - laid out after every dense tensor, their rows each from their own stream") {
  const ParamLayout dense = make_param_layout(ids_model(false));
  const ParamLayout sparse = make_param_layout(ids_model(true));
  CHECK_FALSE(dense.has_sparse());
  CHECK(dense.dense_size() == dense.total_size());
  REQUIRE(sparse.has_sparse());
  CHECK(sparse.dense_count() == 4);
  CHECK(sparse.params().back().name == "layers.table.embeddings");
  CHECK(sparse.params().back().sparse);
  CHECK(sparse.params().back().offset >= sparse.dense_size());
  CHECK(sparse.total_size() - sparse.dense_size() < kRows * 4 + ParamLayout::kAlignment);
  std::vector<float> all(sparse.total_size());
  glorot_uniform_init(sparse, 5, all.data());
  const ParamInfo& t = sparse.params().back();
  std::vector<float> rows(10 * 4);
  sparse_row_init(sparse, 5, sparse.params().size() - 1, 123, 10, rows.data());
  CHECK(std::equal(rows.begin(), rows.end(), all.begin() + static_cast<std::ptrdiff_t>(t.offset + 123 * 4)));
  float largest = 0;
  for (size_t k = 0; k < t.size; ++k) largest = std::max(largest, std::abs(all[t.offset + k]));
  CHECK(largest > 0.0f);
  CHECK(largest < 0.05f);
  const std::vector<nn::SparseTable> tables = nn::sparse_tables(ids_model(true), sparse);
  REQUIRE(tables.size() == 1);
  CHECK(tables[0].columns.begin == 0);
  CHECK(tables[0].columns.size == 2);
  CHECK(tables[0].rows == kRows);
}

TEST_CASE("sparse tables - the spec: the default by size, ids from the input only, dense updates of a large table refused") {
  const auto model = [](const std::string& layers) {
    return parse_model_spec(R"({"input_shape": [3], "layers": [)" + layers +
                            R"(, {"type": "flatten"}, {"type": "dense", "units": 2}]})");
  };
  CHECK_FALSE(model(R"({"type": "embedding", "input_dim": 1000, "output_dim": 8})").layers[0].sparse);
  CHECK(model(R"({"type": "embedding", "input_dim": 1000, "output_dim": 8, "sparse": true})").layers[0].sparse);
  CHECK(model(R"({"type": "embedding", "input_dim": 16777216, "output_dim": 2})").layers[0].sparse);
  CHECK_FALSE(model(R"({"type": "embedding", "input_dim": 16777216, "output_dim": 2, "sparse": false})").layers[0].sparse);
  for (const char* layer : {R"({"type": "embedding", "input_dim": 1000, "output_dim": 8, "sparse": true})",
                            R"({"type": "embedding", "input_dim": 16777216, "output_dim": 2, "sparse": false})",
                            R"({"type": "embedding", "input_dim": 16777216, "output_dim": 2})"}) {
    const ModelSpec spec = model(layer);
    CHECK(parse_model_spec(model_spec_to_json(spec)).layers[0].sparse == spec.layers[0].sparse);
  }
  try {
    parse_model_spec(R"({"input_shape": [3], "layers": [{"type": "dense", "units": 3},
        {"type": "embedding", "input_dim": 10, "output_dim": 2, "sparse": true}, {"type": "flatten"},
        {"type": "dense", "units": 2}]})");
    FAIL("accepted");
  } catch (const SpecError& e) {
    CHECK(e.path() == "/model/layers/1/sparse");
  }
  const auto job = [](const std::string& embedding, const std::string& updates) {
    return R"({"dataset": {"name": "x"}, "model": {"input_shape": [3], "layers": [)" + embedding +
           R"(, {"type": "flatten"}, {"type": "dense", "units": 2}]}, "optimizer": {"type": "adam", "sparse_updates": )" +
           updates + R"(}, "training": {"global_batch_size": 8}})";
  };
  const std::string big = R"({"type": "embedding", "input_dim": 16777216, "output_dim": 2})";
  const std::string small = R"({"type": "embedding", "input_dim": 1000, "output_dim": 2, "sparse": true})";
  CHECK(parse_accepted_job_spec(job(small, "\"dense\"")).optimizer.sparse_updates == OptimizerSpec::SparseUpdates::kDense);
  CHECK(parse_accepted_job_spec(job_spec_to_json(parse_accepted_job_spec(job(small, "\"dense\"")))).optimizer.sparse_updates ==
        OptimizerSpec::SparseUpdates::kDense);
  CHECK(parse_accepted_job_spec(job(big, "\"lazy\"")).optimizer.sparse_updates == OptimizerSpec::SparseUpdates::kLazy);
  for (const std::string& bad : {job(big, "\"dense\""), job(small, "\"eager\"")}) {
    try {
      parse_accepted_job_spec(bad);
      FAIL("accepted");
    } catch (const SpecError& e) {
      CHECK(e.path() == "/optimizer/sparse_updates");
    }
  }
}

TEST_CASE("sparse tables - a step's compact rows carry the dense table's gradient, with 1 and 3 replicas") {
  for (const auto& [replicas, combiner] : {std::pair{1, Combiner::kNone}, std::pair{3, Combiner::kNone},
                                           std::pair{1, Combiner::kMean}, std::pair{3, Combiner::kSum}}) {
    CAPTURE(replicas);
    CAPTURE(static_cast<int>(combiner));
    const ModelSpec dense_spec = ids_model(false, combiner), sparse_spec = ids_model(true, combiner);
    nn::DataParallelModel<double> dense(dense_spec, 7, replicas), sparse(sparse_spec, 7, replicas);
    const ParamLayout& dl = dense.layout();
    const ParamLayout& sl = sparse.layout();
    std::vector<double> dp(dl.total_size()), sp(sl.total_size());
    Rng rng(3);
    for (const ParamInfo& p : dl.params()) {
      for (size_t k = 0; k < p.size; ++k) dp[p.offset + k] = rng.uniform_float(-0.5f, 0.5f);
      const ParamInfo* q = sl.find(p.name);
      std::copy_n(dp.begin() + static_cast<std::ptrdiff_t>(p.offset), p.size, sp.begin() + static_cast<std::ptrdiff_t>(q->offset));
    }
    std::vector<double> inputs = {5, 7, 0.5, 7, 299, -0.25, 5, 5, 1.0, 0, 1, 0.0, 299, 6, 0.75, 8, 7, -1, 5, 0, 0.1};
    if (combiner != Combiner::kNone) {  // padding: a second id, and both ids of an example
      inputs[1] = inputs[6] = inputs[7] = -1;
    }
    const std::vector<int32_t> labels = {0, 1, 1, 0, 1, 0, 1};
    std::vector<double> dg(dl.total_size()), sg(sl.dense_size());
    const nn::LossResult a = dense.compute_gradients(dp.data(), inputs.data(), labels.data(), 7, dg.data());
    nn::SparseStep<double> step(sparse.sparse_tables());
    step.collect(inputs.data(), 3, 7);
    CHECK(step.ids(0) == std::vector<uint32_t>{0, 1, 5, 6, 7, 8, 299});
    // Rows from a compact copy (as a worker pulls them), not from the whole table.
    std::vector<double> compact;
    const size_t table = sl.params().back().offset;
    for (const uint32_t id : step.ids(0)) compact.insert(compact.end(), sp.begin() + table + id * 4, sp.begin() + table + id * 4 + 4);
    step.point_into_compact(0, compact.data());
    sparse.use_sparse_rows(step.rows());
    const nn::LossResult b = sparse.compute_gradients(sp.data(), inputs.data(), labels.data(), 7, sg.data());
    CHECK(a.loss_sum == b.loss_sum);
    for (const ParamInfo& p : dl.params()) {
      CAPTURE(p.name);
      if (p.name == "layers.table.embeddings") {
        const std::span<double> rows = step.grads(0);
        for (uint32_t r = 0; r < kRows; ++r) {
          const auto it = std::find(step.ids(0).begin(), step.ids(0).end(), r);
          for (size_t k = 0; k < 4; ++k) {
            const double want = dg[p.offset + r * 4 + k];
            if (it == step.ids(0).end()) {
              CHECK(want == 0.0);
            } else {
              CHECK(rows[static_cast<size_t>(it - step.ids(0).begin()) * 4 + k] == want);
            }
          }
        }
        continue;
      }
      const ParamInfo* q = sl.find(p.name);
      CHECK(std::equal(dg.begin() + static_cast<std::ptrdiff_t>(p.offset), dg.begin() + static_cast<std::ptrdiff_t>(p.offset + p.size),
                       sg.begin() + static_cast<std::ptrdiff_t>(q->offset)));
    }
    // Without rows, inference reads the whole table in the parameters (a model file's) and gets
    // the same logits; a gradient needs them.
    nn::Model<double> bare(sparse_spec, 7), dense_one(dense_spec, 7);
    const auto y = bare.forward(sp.data(), inputs.data(), 7);
    const std::vector<double> logits(y.data(), y.data() + 14);
    const auto z = dense_one.forward(dp.data(), inputs.data(), 7);
    CHECK(logits == std::vector<double>(z.data(), z.data() + 14));
    std::vector<double> unused(sl.dense_size());
    CHECK_THROWS_AS(bare.compute_gradients(sp.data(), inputs.data(), labels.data(), 7, unused.data()), Error);
  }
}

TEST_CASE("sparse tables - the trainer: SGD, Adagrad and dense-semantics Adam equal a dense table bit for bit") {
  for (const int replicas : {1, 3}) {
    CAPTURE(replicas);
    OptimizerSpec adam_dense = optimizer(OptimizerType::kAdam, 0.01f);
    adam_dense.sparse_updates = OptimizerSpec::SparseUpdates::kDense;
    OptimizerSpec momentum_dense = optimizer(OptimizerType::kSgd, 0.05f);
    momentum_dense.momentum = 0.9f;
    momentum_dense.sparse_updates = OptimizerSpec::SparseUpdates::kDense;
    for (const OptimizerSpec& o : {optimizer(OptimizerType::kSgd, 0.1f), optimizer(OptimizerType::kAdagrad, 0.1f),
                                   adam_dense, momentum_dense}) {
      CAPTURE(std::string(optimizer_type_name(o.type)));
      const JobSpec d = ids_job(false, o), s = ids_job(true, o);
      const TrainingResult rd = train(d, replicas), rs = train(s, replicas);
      check_same_model(d, rd, s, rs);
      CHECK(rs.epochs.back().test_accuracy > 0.6);
    }
  }
}

TEST_CASE("sparse tables - the trainer with combiners: sum and mean bags with padding equal a dense table bit for bit") {
  for (const auto& [replicas, combiner] : {std::pair{1, Combiner::kMean}, std::pair{3, Combiner::kMean},
                                           std::pair{3, Combiner::kSum}}) {
    CAPTURE(replicas);
    CAPTURE(static_cast<int>(combiner));
    for (const OptimizerSpec& o : {optimizer(OptimizerType::kSgd, 0.1f), optimizer(OptimizerType::kAdagrad, 0.1f)}) {
      const JobSpec d = ids_job(false, o, combiner), s = ids_job(true, o, combiner);
      const TrainingResult rd = train(d, replicas), rs = train(s, replicas);
      check_same_model(d, rd, s, rs);
      CHECK(rs.epochs.back().test_accuracy > 0.6);
    }
  }
}

TEST_CASE("sparse tables - the trainer's lazy Adam: only touched rows move, with the table's step count") {
  const OptimizerSpec adam = optimizer(OptimizerType::kAdam, 0.01f);
  const JobSpec d = ids_job(false, adam), s = ids_job(true, adam);
  const TrainingResult rd = train(d, 1), rs = train(s, 1);
  // Lazy and Keras' dense Adam part ways (the untouched rows' moments), so the tables differ...
  CHECK(tensor(d, rd, "layers.table.embeddings") != tensor(s, rs, "layers.table.embeddings"));
  // ...but a row that no example has is never touched: it keeps its initial value and zero slots.
  const Split all = ids_split("ids", SplitKind::kTrain);
  std::vector<bool> seen(kRows, false);
  const float* x = reinterpret_cast<const float*>(all.examples.data());
  for (uint32_t i = 0; i < all.size; ++i) seen[static_cast<size_t>(x[i * 3])] = seen[static_cast<size_t>(x[i * 3 + 1])] = true;
  const ParamLayout layout = make_param_layout(s.model);
  const ParamLayout dense_layout = make_param_layout(d.model);
  std::vector<float> dense_initial(dense_layout.total_size()), initial(layout.total_size());
  glorot_uniform_init(dense_layout, d.model.seed, dense_initial.data());
  const ParamInfo& t = layout.params().back();
  std::copy_n(dense_initial.begin() + static_cast<std::ptrdiff_t>(dense_layout.find(t.name)->offset), t.size,
              initial.begin() + static_cast<std::ptrdiff_t>(t.offset));
  size_t unseen = 0, moved = 0;
  for (uint32_t r = 0; r < kRows; ++r) {
    const bool same = std::equal(initial.begin() + t.offset + r * 4, initial.begin() + t.offset + r * 4 + 4,
                                 rs.params.begin() + t.offset + r * 4);
    if (!seen[r]) {
      ++unseen;
      CHECK(same);
      for (const optim::Slot& slot : rs.optimizer.slots) CHECK(slot.values[t.offset + r * 4] == 0.0f);
    } else {
      moved += same ? 0 : 1;
    }
  }
  CHECK(unseen > 10);  // the skew leaves the high rows out
  CHECK(moved > 50);
  CHECK(rs.optimizer.iterations == rd.optimizer.iterations);  // one step count, advanced every step
  CHECK(rs.epochs.back().test_accuracy > 0.6);
}
