"""Trains the tiny MambaVision classifier on scikit-learn's 8x8 digits with the selscan op and with
the pure-TensorFlow mixer (the same layer, scan as a tf.scan), printing the training curves and the
time per step; then times one mixer's forward + backward at a MambaVision-like size.

    pip install --no-build-isolation ./bindings/tf scikit-learn
    python examples/tf_train_digits.py [--epochs 15] [--policy float32 mixed_bfloat16] [--no-bench | --bench-only]
"""

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import selscan_tf  # noqa: E402
from selscan_tf.digits import train_digits  # noqa: E402


def bench_mixer(batch, L, d_model, policy, reps=20):
    """Forward + backward (all weight gradients) of one MambaVisionMixer (the block's configuration:
    d_state 8, d_conv 3, expand 1), op vs tf.scan, in a tf.function: {impl: (best wall ms, median
    wall ms, median CPU ms over all threads)} of `reps` calls."""
    old = tf.keras.mixed_precision.global_policy()
    tf.keras.mixed_precision.set_global_policy(policy)
    try:
        x = tf.random.stateless_normal((batch, L, d_model), seed=[1, 2])
        out = {}
        layers = {}
        for impl in ("op", "tf"):
            m = selscan_tf.MambaVisionMixer(d_model, d_state=8, d_conv=3, expand=1, scan_impl=impl)
            m.build(x.shape)
            if impl == "tf":
                for a, b in zip(m.weights, layers["op"].weights):
                    a.assign(b)
            layers[impl] = m

            @tf.function(jit_compile=False)
            def step(v, m=m):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_sum(tf.cast(m(v, training=True), tf.float32) ** 2)
                return loss, tape.gradient(loss, m.trainable_variables)

            step(x)
            ts, cs = [], []
            for _ in range(reps):
                t0, c0 = time.perf_counter(), time.process_time()
                loss, g = step(x)
                _ = float(loss)
                ts.append(time.perf_counter() - t0)
                cs.append(time.process_time() - c0)
            out[impl] = (1e3 * float(np.min(ts)), 1e3 * float(np.median(ts)), 1e3 * float(np.median(cs)))
        return out
    finally:
        tf.keras.mixed_precision.set_global_policy(old)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--policy", nargs="+", default=["float32", "mixed_bfloat16"])
    ap.add_argument("--impl", nargs="+", default=["op", "tf"])
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--bench-only", action="store_true")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    print("TensorFlow %s, %d CPU threads (intra-op), op library %s" % (
        tf.__version__, os.cpu_count() or 0, selscan_tf.LIBRARY_PATH))
    res = {}
    for policy in ([] if args.bench_only else args.policy):
        for impl in args.impl:
            print("training: scan_impl=%s, policy=%s" % (impl, policy))
            t0 = time.time()
            h = train_digits(impl, policy, epochs=args.epochs)
            res[(impl, policy)] = h
            print("  -> held-out accuracy %.4f, %.2f ms/step (median of epochs 2-%d), %.1f s in all" % (
                h["final_test_acc"], h["steady_ms_per_step"], args.epochs, time.time() - t0))
    if res:
        summary(res, args)
    if not args.no_bench:
        bench(args)


def summary(res, args):
    print("\nsummary (digits, batch 32, 16 patches of 4 pixels, dim 32, 2 blocks; epochs 2-%d)" % args.epochs)
    print("%-16s %-4s %9s %16s %14s %16s" % ("policy", "scan", "accuracy", "ms/step median", "ms/step best",
                                            "CPU ms/step med"))
    for (impl, policy), h in res.items():
        print("%-16s %-4s %9.4f %16.2f %14.2f %16.2f" % (policy, impl, h["final_test_acc"], h["steady_ms_per_step"],
                                                        h["best_ms_per_step"], h["steady_cpu_ms_per_step"]))
    for policy in args.policy:
        if ("op", policy) in res and ("tf", policy) in res:
            o, t = res[("op", policy)], res[("tf", policy)]
            print("%s: op vs tf.scan mixer, training step: %.2fx (median wall), %.2fx (best wall), %.2fx (CPU time)" % (
                policy, t["steady_ms_per_step"] / o["steady_ms_per_step"], t["best_ms_per_step"] / o["best_ms_per_step"],
                t["steady_cpu_ms_per_step"] / o["steady_cpu_ms_per_step"]))


def bench(args):
    print("\none mixer, forward + backward in a tf.function, %d calls (d_state 8, d_conv 3, expand 1): "
          "best wall / median wall / median CPU ms" % args.reps)
    for batch, L, d in ((8, 196, 128), (8, 1024, 64)):
        for policy in ("float32",):
            t = bench_mixer(batch, L, d, policy, reps=args.reps)
            o, f = t["op"], t["tf"]
            print("  batch %d, L %4d, d_model %3d, %s: op %.2f / %.2f / %.2f ms, tf.scan %.2f / %.2f / %.2f ms"
                  " -> %.1fx / %.1fx / %.1fx" % (batch, L, d, policy, *o, *f, f[0] / o[0], f[1] / o[1], f[2] / o[2]))


if __name__ == "__main__":
    main()
