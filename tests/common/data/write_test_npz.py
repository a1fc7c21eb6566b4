#!/usr/bin/python3
"""Writes the reference .npz files of dataset_formats_test with NumPy itself.

Usage: write_test_npz.py DIR
  DIR/numpy_float.npz  savez_compressed: x float32 (3, 2, 2) = arange(12) / 4, y int64 [0, 2, 1]
  DIR/numpy_uint8.npz  savez (stored):   x uint8 (2, 2, 1, 3) = arange(12) * 20, y int32 [1, 0]
"""
import os
import sys

import numpy as np

out = sys.argv[1]
np.savez_compressed(os.path.join(out, "numpy_float.npz"),
                    x=(np.arange(12, dtype=np.float32) / 4).reshape(3, 2, 2),
                    y=np.array([0, 2, 1], dtype=np.int64))
np.savez(os.path.join(out, "numpy_uint8.npz"),
         x=(np.arange(12, dtype=np.uint8) * 20).reshape(2, 2, 1, 3),
         y=np.array([1, 0], dtype=np.int32))
