# The wire protocol between pstrain's processes (Cap'n Proto RPC over TCP).
#
# Tensors travel as Data (raw little-endian float32), not List(Float32): a Data reader is a view
# into the received message, so a receiver maps it with Eigen without copying.
@0xf3f1b12f6af56f3b;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("pstrain::proto");

enum Role {
  server @0;
  worker @1;
}

# Element types. Tensors are float32 only; a Batch's examples are float32 (used as is) or uint8
# (the worker reads value / 255): pstrain::Dtype (common/data/example_types.h).
enum DType {
  float32 @0;
  uint8 @1;
}

struct Tensor {
  dtype @0 :DType;
  shape @1 :List(UInt64);
  data @2 :Data;  # product(shape) values, little-endian
}

# One slice of one parameter tensor: the unit of placement on servers and of transfer.
struct Chunk {
  key @0 :UInt32;     # index in the job's chunk table
  param @1 :UInt32;   # index of the tensor in the model's parameter layout
  offset @2 :UInt64;  # first element of the slice inside the tensor
  size @3 :UInt64;    # elements
  server @4 :UInt32;  # index into the job's server list
  # > 0: a sparse table's piece: rows offset, offset + stride, ... of the tensor (offset < stride, size
  # their elements); chunk_plan.h.
  stride @5 :UInt32;
}

# Elements [offset, offset + size) of a chunk: float32 values, little-endian.
struct Range {
  offset @0 :UInt64;
  size @1 :UInt64;
}

# The part of one chunk a reply carries: all of it, or the ranges.
struct KeyRanges {
  union {
    whole @0 :Void;
    ranges @1 :List(Range);
  }
}

# What a server needs to hold its part of a job.
struct JobConfig {
  jobId @0 :Text;
  specJson @1 :Text;         # canonical job spec (optimizer, mode, model for the layout)
  chunks @2 :List(Chunk);    # the whole table; a server keeps the chunks with its index
  serverIndex @3 :UInt32;
  workers @4 :UInt32;        # workers of the job (async: for max_staleness)
  stepsPerEpoch @5 :UInt64;  # for `save_freq: "epoch"` backups
  minGeneration @6 :UInt64;  # pushes of older plans fail (a restarted coordinator's fresh shard)
  # The job's key for worker tokens (cluster_auth.h): with one, pull, push, pushFactors and
  # workerFinished need `token` = HMAC(workerKey, their `node`). Empty: not checked (an open
  # cluster, or an older coordinator).
  workerKey @7 :Data;
}

struct ServerStats {
  version @0 :UInt64;          # updates applied to the first chunk this server holds
  pushesApplied @1 :UInt64;
  pushesDropped @2 :UInt64;    # late pushes of sync backup-worker steps
  maxStaleness @3 :UInt64;     # async: versions between a push's base and the current one
  meanStaleness @4 :Float64;
  bytesIn @5 :UInt64;
  bytesOut @6 :UInt64;
}

interface ParameterServer {
  # Creates (or replaces) the job's shard: parameters initialised from the spec's seed,
  # fresh optimizer slots.
  configure @0 (config :JobConfig) -> ();

  # The chunk's values once its version is at least minVersion. exact: the values of version
  # minVersion itself, also when the chunk is one update past it (sync: a takeover computes on
  # the step's version after some chunks moved on); fails if the server no longer has them.
  # node, token: the caller's node id and worker token (JobConfig.workerKey).
  # withState: also the compression state (PushParams.workerState) that slice `stateOf` pushed
  # for the chunk's current version, if the chunk holds one (after a restore, the backup's);
  # otherwise workerState is empty.
  # clipped (optimizer.clipnorm / global_clipnorm, sync): the chunk's step is summed and held
  # (PushResults.held); this pull applies it with its gradient multiplied by clipFactor, and
  # waits for the new version (DESIGN-NOTES "Gradient clipping"). A pull without it waits for
  # another worker's.
  pull @1 (jobId :Text, key :UInt32, minVersion :UInt64, exact :Bool, node :UInt32, token :Data,
           withState :Bool, stateOf :UInt32, clipped :Bool, clipFactor :Float32)
      -> (version :UInt64, values :Tensor, workerState :Data);

  # A worker's gradient of the summed loss for one chunk.
  # sync: `step` is the global step (= the version the gradient was computed on); the update is
  #   applied once the step's pushes are in (sliceCount of them, or sliceCount - backup_workers),
  #   summed in slice order and divided by their total examples. The call completes after that
  #   update, returning the new values: the next step's pull rides on the push's reply.
  # async: applied at once (divided by this push's examples); baseVersion is the version the
  #   gradient was computed on, and the reply carries the latest values.
  # applied is false for a late push that a backup-worker step dropped.
  # generation: of the worker's assignment; pushes of a plan that `settle` ended fail.
  struct PushParams {
    jobId @0 :Text;
    key @1 :UInt32;
    step @2 :UInt64;
    slice @3 :UInt32;
    sliceCount @4 :UInt32;
    worker @5 :UInt32;
    examples @6 :UInt32;
    baseVersion @7 :UInt64;
    generation @8 :UInt64;
    gradient :union {
      dense @9 :Tensor;  # the whole chunk
      # Row-sparse exchange (a dense first layer on sparse inputs, DESIGN-NOTES "Sparse
      # exchange"): parts[i] over ranges[i], zero elsewhere. Ranges are sorted, disjoint and
      # inside the chunk.
      sparse :group {
        ranges @10 :List(Range);
        parts @11 :List(Data);
      }
      # training.compression "fp16": the whole chunk as IEEE binary16, little-endian (2 bytes a
      # value; common/engine/compression.h). The server sums float32.
      half @16 :Data;
      # training.compression "topk": the chunk is zero except at `indices` (strictly ascending,
      # inside the chunk), whose float32 values are `values` (4 bytes each, in index order).
      topk :group {
        indices @17 :List(UInt32);
        values @18 :Data;
      }
      # training.compression "powersgd": the chunk, as a matrix of `columns` float32 per row
      # (rows = chunk size / columns), is P Q^T: p is P, rows x rank; q is Q transposed, rank x
      # columns; both row-major float32 (common/engine/compression.h low_rank_product).
      lowRank :group {
        columns @20 :UInt32;
        rank @21 :UInt32;
        p @22 :Data;
        q @23 :Data;
      }
      # A sparse table's piece (Chunk.stride > 0; server/table_piece.h), and only there: the
      # table rows the pushing slice's batch touched (ascending, each in the piece) and their
      # gradients, rows.size() x the table's width float32, row after row. Rows not listed add
      # nothing to the step.
      tableRows :group {
        rows @25 :List(UInt32);
        values @26 :Data;
      }
      # training.compression "bf16": the whole chunk as bfloat16, little-endian (2 bytes a value,
      # round to nearest even; common/engine/compression.h). The server sums float32.
      bfloat16 @29 :Data;
    }
    # What the reply's `values` carry: the whole chunk, or only these ranges' values (none: an
    # empty reply).
    reply :union {
      whole @12 :Void;
      ranges @13 :List(Range);
      # A table piece's reply (and its only one: a piece is never sent whole): these rows'
      # values (ascending table rows, each in the piece; the worker's next batch's), in
      # PushResults.values.rows.
      tableRows @27 :List(UInt32);
    }
    node @14 :UInt32;  # the pushing node's id and its worker token (JobConfig.workerKey)
    token @15 :Data;
    # With reply.whole: the values come back as `values.half` (binary16) instead of float32.
    replyHalf @19 :Bool;
    # With reply.whole: the values come back as `values.bfloat16`, rounded as mixed precision rounds
    # a kernel for its products (common/engine/simd/kernels.h floats_to_bf16). A mixed_bfloat16
    # worker asks it for the chunks its products alone read (Model::rounded_kernels): it would
    # round them the same way, so the bits it computes with are the float32 reply's (DESIGN-NOTES
    # "bfloat16 replies"). A server that does not know the field replies float32: the union says which.
    replyBfloat16 @30 :Bool;
    # training.compression topk/powersgd, sync, on the push of a step whose next version is a
    # backup point: the pushing worker's compression state for this chunk after this push
    # (float32: the residual of the chunk, then powersgd's warm-start Q), kept in the server's
    # backup of that version and handed back by `pull` (withState) after a restore, so a
    # recovered run goes on as the uninterrupted one (DESIGN-NOTES "Gradient compression").
    workerState @24 :Data;
    # Sync, spec reduce_on_plateau: the learning rate's multiplier in the step's epoch (the same
    # in every push of a step; common/data/reduce_on_plateau.h).
    lrScale @28 :Float32 = 1.0;
  }
  struct PushResults {
    version @0 :UInt64;
    applied @1 :Bool;
    values :union {
      whole @2 :Tensor;       # for reply.whole
      parts @3 :List(Data);   # for reply.ranges: one part per range
      half @4 :Data;          # for reply.whole with replyHalf: binary16, little-endian
      bfloat16 @9 :Data;      # for reply.whole with replyBfloat16: bfloat16, little-endian
      rows @6 :Data;          # for reply.tableRows: float32, row after row in the listed order
    }
    # Sync: a version a cut (preemption, a worker joining) asked this server to back up, ahead of
    # the chunk's version; 0: none. A worker with compression state pushes it with the step
    # before that version, as for the spec's own backup points (PushParams.workerState). A cut
    # is marked before the replies of the step two ahead of it go (SyncCut), so every worker
    # learns of it in time.
    cutAt @5 :UInt64;
    # optimizer.clipnorm / global_clipnorm (sync): the step is summed but not applied; no values
    # come back. sumSquares is the summed, scaled, regularised gradient's sum of squares (float64,
    # element order; 0 for a moving statistic). The worker pulls with the clip factor (pull).
    held @7 :Bool;
    sumSquares @8 :Float64;
  }
  push @2 PushParams -> PushResults;

  # Several pushes in one message (DESIGN-NOTES "Batched pushes"): each entry is applied exactly
  # as `push` would apply it alone, and results[i] is what push would return for pushes[i]. The
  # call completes when every entry has. The entries are checked before any is applied: a
  # malformed one fails the whole call and changes nothing. At most kMaxBatchedPushes entries
  # (server/parameter_server.h).
  pushBatch @16 (pushes :List(PushParams)) -> (results :List(PushResults));

  # A sparse table piece's rows (ascending table rows, each in the piece) once its version is at
  # least minVersion: float32, row after row. A piece is never pulled whole (`pull` refuses it).
  # exact: the rows of version minVersion itself, also when the piece is one update past it (as
  # `pull`'s exact: a sync takeover; server/table_piece.h keeps the last update's rows as they
  # were); fails if the server no longer has them.
  pullRows @17 (jobId :Text, key :UInt32, minVersion :UInt64, rows :List(UInt32), node :UInt32, token :Data,
                exact :Bool) -> (version :UInt64, values :Data);

  # A worker's gradient of one dense kernel for all of the kernel's chunks on this server, as two
  # factors instead of the gradient itself (DESIGN-NOTES "Factored exchange"). The kernel is
  # [in, out] and every key's chunk holds whole rows of it; the gradient of row r is
  #   sum over examples b of inputs[r, b] * delta[b]   (delta[b]: example b's `out` values),
  # so the push carries examples * (rows + out) floats instead of rows * out.
  struct PushFactorsParams {
    jobId @0 :Text;
    # Chunks of one kernel, all on this server (each applied as if pushed alone, with the fields
    # of `push`).
    keys @1 :List(UInt32);
    step @2 :UInt64;
    slice @3 :UInt32;
    sliceCount @4 :UInt32;
    worker @5 :UInt32;
    examples @6 :UInt32;
    baseVersions @7 :List(UInt64);  # one per key
    generation @8 :UInt64;
    # examples x out float32, example after example: d(summed loss)/d(the layer's output before
    # its activation).
    delta @9 :Data;
    # The kernel rows whose inputs are sent, ascending, each inside one of the keys' chunks; a row
    # of those chunks that is not listed has a zero input in every example (zero gradient).
    rows @10 :List(UInt32);
    inputs @11 :Data;  # examples x rows.size() float32, example after example: the layer's input at `rows`
    # With next.none, what the reply's values carry: empty for whole values of every key, else one
    # entry per key. Must be empty with next.forward.
    replyRanges @12 :List(KeyRanges);
    # Forward on the servers (DESIGN-NOTES), for the first layer of a model (a dense layer on the
    # input): with `forward` the reply carries no values but the worker's next batch's partial
    # product over the keys' rows, computed on the updated values.
    next :union {
      none @13 :Void;  # the reply carries values
      forward :group {
        examples @14 :UInt32;  # of the next batch, at least 1
        # Kernel rows, ascending, each inside one of the keys' chunks: the rows whose input is
        # nonzero in some example of the next batch (the others add nothing).
        rows @15 :List(UInt32);
        inputs @16 :Data;  # examples x rows.size() float32, example after example
      }
    }
    node @17 :UInt32;  # as in PushParams
    token @18 :Data;
    lrScale @19 :Float32 = 1.0;  # as in PushParams
    # The product the server multiplies the factors out with: simd::product_bf16 (a mixed-precision
    # layer's kernel gradient, common/engine/simd/bf16_product.h) when set, else simd::product, as
    # the worker's engine would compute the gradient.
    bf16 @20 :Bool = false;
    # With next.none and no replyRanges: the keys' values come back as reply.bfloat16, as
    # PushParams.replyBfloat16 has them.
    replyBfloat16 @21 :Bool = false;
  }
  struct PushFactorsResults {
    versions @0 :List(UInt64);  # one per key
    applied @1 :Bool;
    # The server multiplied the factors out with simd::product_bf16 (it read PushParams' bf16).
    # A worker that asked for it and finds this false talks to a server that does not know the
    # field, which multiplied in float32: it fails rather than diverge from the trainer.
    productBf16 @5 :Bool = false;
    reply :union {
      # For next.none: the keys' values in key order, one part for a key replied whole, else one
      # per range.
      values @2 :List(Data);
      # For next.forward: out x examples float32, example after example: for each example b, sum
      # over the listed rows r of values[r] * inputs[r, b]; empty when next.forward.rows is.
      partial @3 :Data;
      # For replyBfloat16: each key's values whole, bfloat16 as PushResults.values.bfloat16.
      bfloat16 @4 :List(Data);
    }
  }
  pushFactors @13 PushFactorsParams -> PushFactorsResults;

  # Async: the worker will push no more (it no longer holds back others under max_staleness).
  workerFinished @3 (jobId :Text, worker :UInt32, node :UInt32, token :Data) -> ();

  # Async cut, training.compression topk/powersgd: a worker that pauses for the cut (no push of
  # its in flight) first puts its compression state for the chunks `keys` of this server:
  # states[i] is keys[i]'s, the float32 state of PushParams.workerState followed by the worker's
  # position (its steps done, uint64 little-endian, as two float32 slots). The server keeps it
  # with the chunk, opaque, until the worker puts another (the backup backupNow takes holds it),
  # and hands it back to `pull` (withState, stateOf = worker) after a restore; the worker takes
  # it only if the position is the one it resumes from. `generation`: of the worker's plan, as a
  # push's; a state of a plan a restore ended (below the fence) is dropped, so that a session's
  # late putState cannot replace the restored backup's state of the session resuming from it.
  putState @15 (jobId :Text, worker :UInt32, keys :List(UInt32), states :List(Data), node :UInt32, token :Data,
                generation :UInt64) -> ();

  # The job is over: its shard goes, and its backups (from the server's store).
  dropJob @4 (jobId :Text) -> ();
  stats @5 (jobId :Text) -> (stats :ServerStats);

  # Recovery: every chunk back to this server's backup at `version` (or, with fromScratch, to the
  # initial values and version 0). Waiting pushes and pulls fail ("rolled back"). Fails if the
  # backup is missing or corrupt, saying which.
  # Pushes of a generation below `generation` fail from then on (workers of the old plan).
  restore @6 (jobId :Text, version :UInt64, fromScratch :Bool, generation :UInt64) -> ();
  # Complete backups this server holds for the job, oldest first.
  backups @7 (jobId :Text) -> (versions :List(UInt64));
  # A cut (preemption, a worker joining): also back up at `version` (when every chunk reaches it)
  # and hold there, replacing an earlier cut's hold. Returns the highest and the lowest version
  # of the job's chunks now; a highest above `version` means the mark came too late and was not
  # set. version = 2^64-1 sets nothing and only asks, exactly like `versions`: still accepted for
  # coordinators from before `versions`, which new callers use instead.
  backupAt @8 (jobId :Text, version :UInt64) -> (currentVersion :UInt64, lowestVersion :UInt64);
  # Where the job's chunks are: the highest and the lowest version among them. Changes nothing
  # and reads no storage, so it also serves to probe whether the server answers at all.
  versions @14 (jobId :Text) -> (currentVersion :UInt64, lowestVersion :UInt64);
  # Lifts a cut's hold (the cut was abandoned).
  releaseHold @12 (jobId :Text) -> ();

  # Sync re-plan without a rollback (a lost worker's slice was taken over): hold every chunk at
  # `version`, wait until all have reached it, then fail the pushes waiting beyond it and every
  # later push of a generation below `generation` ("re-planned: get a new assignment"), and lift
  # the hold. Fails if a chunk is already past `version`.
  settle @9 (jobId :Text, version :UInt64, generation :UInt64) -> ();

  # Async cut (every worker paused, no push in flight): back up the shard as it is now, under
  # `version` (the job's steps at the cut; each chunk keeps its own version, which differ if a
  # lost worker pushed part of a step). backupDone follows once it is durable.
  backupNow @10 (jobId :Text, version :UInt64) -> ();

  # Moving a lost server's shard here: writes another server's backup of the job (the chunks of
  # the server index this server was configured with, each an encoded snapshot) into this
  # server's store, after which `restore` loads it like one of its own. In parts of at most
  # kMaxPartBytes, one call at a time, like storeReplica: `chunks` are chunks first ..
  # first + chunks.size() - 1 of `total`; the backup counts as written (complete) once the part
  # that ends at `total` is.
  adoptBackup @11 (jobId :Text, version :UInt64, chunks :List(Data), first :UInt32, total :UInt32) -> ();
}

enum Split {
  train @0;
  test @1;
  validation @2;  # the job's validation hold-out of the training split (training.validation_fraction)
}

# A worker's share of the job.
struct Assignment {
  jobId @0 :Text;
  specJson @1 :Text;
  workerIndex @2 :UInt32;     # slice index among the job's workers
  workerCount @3 :UInt32;
  chunks @4 :List(Chunk);
  servers @5 :List(Text);     # "host:port" of server i
  stepsPerEpoch @6 :UInt64;   # this worker's steps per epoch
  startEpoch @7 :UInt32;
  startStep @8 :UInt64;       # within startEpoch
  generation @9 :UInt64;      # increases with every re-plan (recovery); stale sessions end
  workerToken @10 :Data;      # to send with every pull and push (JobConfig.workerKey); may be empty
  # Sync: slices of each step this worker also computes and pushes (in their names), besides its
  # own (workerIndex): the slices of lost workers that no free worker has replaced. workerCount
  # is the job's slice count, which stays the same through losses (DESIGN-NOTES "Slices").
  extraSlices @11 :List(UInt32);
  # Where the training split is stored as shards, for a worker that sees the directory to read
  # its slices' examples itself (it then reports what it read with `served`); an empty dir: the
  # worker reads through openShard.
  trainStore @12 :StoredShards;
  testStore @13 :StoredShards;  # the same for the test split (read in blocks, nothing reported)
}

# A split's shard files (common/data/shard_file.h) as the coordinator loaded them.
struct StoredShards {
  dir @0 :Text;             # absolute, as the coordinator sees it
  files @1 :List(Text);     # in the split's order
  crcs @2 :List(UInt32);    # each shard's CRC-32C (its header's)
  examples @3 :UInt64;      # in the split
  # A table's rows, preprocessed as read (common/data/table_split.h): the job's fitted steps and
  # the schema whose category codes the rows hold, as JSON; empty: the examples as stored.
  preprocessing @4 :Text;
  table @5 :Text;
  # The training part of a validation hold-out (common/data/validation_split.h): the worker cuts
  # it (and the validation part, which it then reads too) from the shards' labels with this
  # fraction and seed; `examples` is then the shards' count. 0: the split as stored.
  holdOutFraction @6 :Float64;
  holdOutSeed @7 :UInt64;
  # A table's text columns that the preprocessing tokenizes: each column's shards of cells (row
  # i's cell is document i), read beside the rows.
  textColumns @8 :List(TextColumnShards);
}

struct TextColumnShards {
  column @0 :Text;
  files @1 :List(Text);     # in the split's order
  crcs @2 :List(UInt32);    # each shard's CRC-32C
}

struct Batch {
  epoch @0 :UInt32;
  step @1 :UInt64;            # within the epoch
  size @2 :UInt32;            # examples (may be 0: a sync step where this worker's slice is empty)
  exampleSize @3 :UInt32;     # values per example (the model's input size)
  examples @4 :Data;          # size * exampleSize values of dtype, example after example
  labels @5 :List(Int32);     # size, each in [0, the model's classes) (classification)
  indices @6 :List(UInt32);   # the examples' positions in the split (for auditing)
  dtype @7 :DType;            # of examples
  # Regression: size * the model's outputs target values, example after example (and no labels).
  targets @8 :List(Float32);
}

# A worker's data shard, read in order. Flow control is the reader's: each call asks for at
# most maxBatches, and a reader keeps a bounded number of calls in flight.
interface DataStream {
  next @0 (maxBatches :UInt32) -> (batches :List(Batch), end :Bool);
}

# A lost worker's part of one sync step, for a survivor to compute and push in its place. The
# survivor reads the slice's examples of the step as any slice's: openShard(train, the step's
# epoch, its step in the epoch, slice), which the order allows it.
struct Takeover {
  step @0 :UInt64;        # global step (the version the gradient is computed on)
  slice @1 :UInt32;       # the lost worker's slice index ...
  sliceCount @2 :UInt32;  # ... among this many
  batch @3 :Batch;        # unused (was the examples); kept so the field numbers stay
}

struct Progress {
  jobId @0 :Text;
  kind @1 :Kind;
  enum Kind {
    steps @0;        # periodic: training loss/accuracy since the last report
    evaluation @1;   # end of epoch: this worker's slice of the test split
    finished @2;     # the worker has done every step
    failed @3;       # the worker cannot go on (message says why)
    validation @4;   # end of epoch: this worker's slice of the validation hold-out (after its evaluation)
  }
  epoch @2 :UInt32;           # 0-based
  step @3 :UInt64;            # steps this worker has done in the job
  examples @4 :UInt64;
  lossSum @5 :Float64;
  correct @6 :UInt64;
  samplesPerSecond @7 :Float64;
  message @8 :Text;
  diverged @9 :Bool;          # failed: the loss became NaN or infinite (message has the figures)
  # steps: payload bytes of gradients (and factors) this worker sent, and of values it received,
  # per step since the last report (training.compression shrinks them).
  bytesPushedPerStep @10 :Float64;
  bytesPulledPerStep @11 :Float64;
  # evaluation under a regression loss: the sums its metrics come from (nn/loss.h RegressionSums).
  regression @12 :RegressionSums;
  # evaluation under a softmax loss: examples whose label is among the 5 largest outputs.
  topKCorrect @13 :UInt64;
  # evaluation under binary cross-entropy: the AUC's probability buckets (nn/loss.h BinaryScores).
  aucPositives @14 :List(Float64);
  aucNegatives @15 :List(Float64);
}

struct RegressionSums {
  values @0 :Float64;
  absError @1 :Float64;
  squaredError @2 :Float64;
  target @3 :Float64;
  targetSquared @4 :Float64;
}

interface Coordinator {
  # Nodes join the cluster. Servers give the address workers reach them on; workers get their
  # identity here (no static configuration).
  # deadAfterMs: how long the coordinator waits for a node's heartbeats before declaring it dead
  # (0 from a coordinator that does not say): a node waits that long for a heartbeat's reply
  # before it gives up on the connection, so a slow link does not make it register anew.
  # cpu: what the node computes with (common/engine/compute_threads.h describe_compute), shown in
  # /v1/cluster: sync results are bit for bit equal only among nodes of one CPU kind.
  # incarnation: a random number of the node's process; a registration with the name and
  # incarnation of a live node is that process connecting again (after a coordinator stall or a
  # broken connection), not a restart: it keeps its node id and its place in its jobs.
  register @0 (role :Role, address :Text, name :Text, cpu :Text, incarnation :UInt64)
      -> (nodeId :UInt32, heartbeatMs :UInt32, deadAfterMs :UInt32);
  # known is false when the coordinator has forgotten the node (it must register again).
  # Heartbeats come from a thread of the node's own (common/rpc/heartbeat_thread.h), whatever its
  # event loop is doing; progress is the node's count of finished work (a worker's steps, a
  # server's updates), from which the coordinator tells a live node that has stopped advancing.
  heartbeat @1 (nodeId :UInt32, progress :UInt64) -> (known :Bool);
  # Waits up to waitMs for work; has is false if none came.
  # minGeneration (with the job it refers to): the worker's session of that job broke; it wants
  # a newer plan of it.
  # incarnation: the registration's (0: not said). A node id registered by another process is
  # refused: after a coordinator restart the nodes may register in another order and get each
  # other's old ids, and a worker that asks before its own new registration is through must not
  # get the assignment of the node that now has its old id.
  getAssignment @2 (nodeId :UInt32, waitMs :UInt32, minGeneration :UInt64, brokenJobId :Text, incarnation :UInt64)
      -> (has :Bool, assignment :Assignment);
  # slice: one of the worker's extra slices (Assignment.extraSlices); -1: its own.
  openShard @3 (jobId :Text, nodeId :UInt32, split :Split, epoch :UInt32, fromStep :UInt64, slice :Int32 = -1)
      -> (stream :DataStream);
  # keepGoing is false when the job was cancelled or failed.
  reportProgress @4 (nodeId :UInt32, report :Progress) -> (keepGoing :Bool);
  # A server has durably written its backup of the job at `version`. `restorable`: the job's
  # complete backups (every server wrote them), ascending, that a recovery may roll back to; the
  # server keeps them however many newer backups it writes (a server cut off from the
  # coordinator stops completing backups while the others go on writing theirs).
  # incarnation: as getAssignment's (a backup reported under another server's id would make a
  # backup look complete that is not).
  backupDone @5 (nodeId :UInt32, jobId :Text, version :UInt64, incarnation :UInt64) -> (restorable :List(UInt64));
  # A node got SIGTERM: the coordinator makes every server of its jobs back up at the next step
  # (servers) or takes the worker out of its job (workers). Returns once that is arranged.
  preempted @6 (nodeId :UInt32) -> ();

  # Orders for a running worker; a worker keeps one call open per session (generation of its
  # assignment) and opens the next after each order. The call returns when
  # - sync: this worker must take over a lost worker's slice of a step (`takeover`), so the step
  #   completes without rolling back;
  # - async: the coordinator takes a consistent cut (`pauseCut` > 0): the worker finishes its
  #   step, then calls `paused`.
  watch @7 (nodeId :UInt32, jobId :Text, generation :UInt64) -> (takeover :Takeover, pauseCut :UInt64);
  # Async cut: this worker is between steps at (epoch, step within it; stepsDone in the job) and
  # pushes nothing until the call returns (when every server has snapshotted).
  paused @8 (nodeId :UInt32, jobId :Text, cut :UInt64, epoch :UInt32, step :UInt64, stepsDone :UInt64) -> ();
  # A server's copy of a backup it has written durably (each chunk an encoded snapshot): the
  # coordinator keeps the latest complete ones (on disk), so a lost server's shard can be restored
  # onto another server if the lost one never returns. A replica travels in parts of at most
  # kMaxPartBytes (a shard can be far over Cap'n Proto's 64 MiB message limit), one call at
  # a time: `chunks` are the replica's chunks first .. first + chunks.size() - 1 of `total`. The
  # call returns once the part is stored (flow control).
  storeReplica @9 (nodeId :UInt32, jobId :Text, version :UInt64, chunks :List(Data), first :UInt32,
                   total :UInt32) -> ();
  # Sync: the examples a worker that reads its own (Assignment.trainStore) read for `slice` at
  # steps fromStep, fromStep + 1, ... of `epoch`, as digests (common/data/example_digest.h): the
  # example ledger's record, as the coordinator keeps it for the batches it streams.
  served @10 (nodeId :UInt32, jobId :Text, generation :UInt64, epoch :UInt32, slice :UInt32, fromStep :UInt64,
              counts :List(UInt64), sums :List(UInt64)) -> ();
  # Sync, spec reduce_on_plateau: the learning rate's multiplier in `epoch` (0-based; pushed with
  # every step of it, PushParams.lrScale), once epoch - 1 is recorded (every worker evaluated it).
  learningRateScale @11 (nodeId :UInt32, jobId :Text, epoch :UInt32) -> (scale :Float32);
}
