#!/usr/bin/env python3
"""TensorFlow's Fashion-MNIST tutorial against a pstrain cluster: the data, the tutorial's CNN
fitted with a progress bar, an evaluation on the test split, and predictions for a few test
images by name.

Usage: fashion_mnist.py [--url URL] [--upload] [--epochs N] [--idx-dir DIR]
  --upload   read the official Fashion-MNIST files (--idx-dir, default Debian's
             /usr/share/datasets/fashion-mnist) into NumPy arrays and upload them as dataset
             "fashion-upload" (needs NumPy); without it, the built-in dataset "fashion"
PSTRAIN_URL and PSTRAIN_TOKEN are read as by the CLI."""
import argparse
import gzip
import os
import struct

import pstrain

CLASS_NAMES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
               "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]


def read_idx(path):
    import numpy as np
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url")
    p.add_argument("--upload", action="store_true")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--idx-dir", default="/usr/share/datasets/fashion-mnist")
    a = p.parse_args()
    client = pstrain.Client(a.url)

    dataset = "fashion"
    test_images = test_labels = None
    if a.upload or os.path.isdir(a.idx_dir):
        test_images = read_idx(os.path.join(a.idx_dir, "t10k-images-idx3-ubyte.gz"))[..., None]
        test_labels = read_idx(os.path.join(a.idx_dir, "t10k-labels-idx1-ubyte.gz"))
    if a.upload:
        train_images = read_idx(os.path.join(a.idx_dir, "train-images-idx3-ubyte.gz"))[..., None]
        train_labels = read_idx(os.path.join(a.idx_dir, "train-labels-idx1-ubyte.gz"))
        dataset = "fashion-upload"
        record = client.datasets.upload(dataset, train=(train_images, train_labels), test=(test_images, test_labels),
                                        replace=True)
        print(f"uploaded {dataset}: {record['splits']['train']['examples']} train and "
              f"{record['splits']['test']['examples']} test images {record['input_shape']}")

    # The tutorial's CNN (deploy/jobs/fashion-cnn.json), trained with Adam on batches of 64.
    spec = {
        "name": "fashion-tutorial", "dataset": {"name": dataset, "shuffle_seed": 1},
        "model": {"input_shape": [28, 28, 1], "seed": 1, "layers": [
            {"type": "conv2d", "filters": 32, "kernel_size": 3, "activation": "relu"}, {"type": "maxpool2d"},
            {"type": "conv2d", "filters": 64, "kernel_size": 3, "activation": "relu"}, {"type": "maxpool2d"},
            {"type": "flatten"}, {"type": "dense", "units": 64, "activation": "relu"}, {"type": "dense", "units": 10}]},
        "loss": "sparse_softmax_cross_entropy", "optimizer": {"type": "adam"},
        "training": {"global_batch_size": 64, "epochs": a.epochs},
    }
    job = client.jobs.submit(spec)
    print(f"job {job.id}")
    job.follow()

    evaluation = job.model.evaluate(split="test")
    print(f"test loss {evaluation['loss']:.4f}, test accuracy {evaluation['accuracy']:.4f}")

    if test_images is not None:
        predictions = job.model.predict(test_images[:5])
        for i, p in enumerate(predictions):
            print(f"image {i}: predicted {CLASS_NAMES[p['class']]} ({max(p['probabilities']):.2f}), "
                  f"is {CLASS_NAMES[int(test_labels[i])]}")
    path = job.model.download(f"{job.id}.onnx", format="onnx")
    print(f"model as ONNX: {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
