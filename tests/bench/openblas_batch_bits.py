#!/usr/bin/python3
# Whether OpenBLAS gives an example the same bits whatever the batch it is multiplied in: one
# product of 128 examples against two of 64 (and the first 37), on dense layers' shapes, through
# numpy (Debian's numpy calls the same libblas/libopenblas the engine links). Prints, per shape
# (out, in), whether each part's rows equal the whole product's. docs/BENCHMARKS.md ("seventeenth
# session") has its results; DESIGN-NOTES "Batch parallelism" the conclusion.
#   OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 /usr/bin/python3 tests/bench/openblas_batch_bits.py t1
import numpy as np, sys
rng=np.random.default_rng(1)
res=[]
for (out,inn) in [(700,784),(500,700),(10,500),(128,21632),(2048,2048),(333,777)]:
    W=rng.standard_normal((inn,out)).astype(np.float32)  # [in,out] row-major
    X=rng.standard_normal((128,inn)).astype(np.float32)  # batch rows
    Y=X@W
    Ya=X[:64]@W; Yb=X[64:]@W
    Y37=X[:37]@W
    res.append((out,inn, np.array_equal(Y[:64],Ya), np.array_equal(Y[64:],Yb), np.array_equal(Y[:37],Y37)))
print(sys.argv[1], res)
