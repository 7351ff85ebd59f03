"""Training the tiny MambaVision classifier on scikit-learn's bundled 8x8 digits (no download).

Used by tests/test_learning.py and examples/tf_train_digits.py. Needs scikit-learn (load_digits).
"""

import time

import numpy as np
import tensorflow as tf

from .mamba_vision import digits_classifier

keras = tf.keras


def load_digits_patches(seed=0, test_fraction=0.2, patch=2):
    """The 1797 8x8 digits as sequences of (8 / patch)^2 patches of patch*patch pixels in [0, 1],
    row-major (a 16-step sequence of 4 values for patch 2), split at random (seed) into train and
    held-out test sets. Returns (x_train, y_train), (x_test, y_test), float32 / int32."""
    from sklearn.datasets import load_digits

    d = load_digits()
    img = (d.images / 16.0).astype(np.float32)  # (n, 8, 8)
    n, g = img.shape[0], 8 // patch
    x = img.reshape(n, g, patch, g, patch).transpose(0, 1, 3, 2, 4).reshape(n, g * g, patch * patch)
    y = d.target.astype(np.int32)
    perm = np.random.default_rng(seed).permutation(n)
    n_test = int(round(n * test_fraction))
    te, tr = perm[:n_test], perm[n_test:]
    return (x[tr], y[tr]), (x[te], y[te])


def train_digits(scan_impl="op", policy="float32", epochs=12, batch_size=32, learning_rate=3e-3, seed=0, dim=32,
                 depth=2, verbose=True, log=print):
    """Trains digits_classifier (scan_impl "op": the selscan op, "tf": the tf.scan baseline) under
    the Keras dtype policy `policy` ("float32", "mixed_bfloat16", "mixed_float16") with Adam and a
    fixed seed. Returns a dict: per-epoch train loss, held-out accuracy and ms per training step;
    steady_ms_per_step, the median over the epochs after the first (which traces), best_ms_per_step
    their minimum, steady_cpu_ms_per_step the median CPU time (all threads) per step; the final
    held-out accuracy; the model."""
    old = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(policy)
    try:
        keras.utils.set_random_seed(seed)
        (xtr, ytr), (xte, yte) = load_digits_patches(seed)
        model = digits_classifier(seq_len=xtr.shape[1], patch_dim=xtr.shape[2], dim=dim, depth=depth,
                                  scan_impl=scan_impl)
        opt = keras.optimizers.Adam(learning_rate)
        if policy == "mixed_float16":
            opt = keras.mixed_precision.LossScaleOptimizer(opt)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        variables = model.trainable_variables

        @tf.function(jit_compile=False, reduce_retracing=True)
        def step(x, y):
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                loss = loss_fn(y, logits)
                scaled = opt.scale_loss(loss) if hasattr(opt, "scale_loss") else loss
            grads = tape.gradient(scaled, variables)
            opt.apply_gradients(zip(grads, variables))
            return loss

        @tf.function(jit_compile=False, reduce_retracing=True)
        def predict(x):
            return tf.argmax(model(x, training=False), axis=-1, output_type=tf.int32)

        rng = np.random.default_rng(seed + 1)
        n = xtr.shape[0]
        hist = {"loss": [], "test_acc": [], "ms_per_step": [], "cpu_ms_per_step": [], "epoch_s": []}
        for ep in range(epochs):
            perm = rng.permutation(n)
            t0, c0 = time.perf_counter(), time.process_time()
            losses = []
            for i in range(0, n - batch_size + 1, batch_size):  # whole batches only: one trace
                idx = perm[i:i + batch_size]
                losses.append(step(tf.constant(xtr[idx]), tf.constant(ytr[idx])))
            losses = [float(v) for v in losses]
            dt, dc = time.perf_counter() - t0, time.process_time() - c0
            acc = float(np.mean(predict(tf.constant(xte)).numpy() == yte))
            hist["loss"].append(float(np.mean(losses)))
            hist["test_acc"].append(acc)
            hist["ms_per_step"].append(1e3 * dt / len(losses))
            hist["cpu_ms_per_step"].append(1e3 * dc / len(losses))
            hist["epoch_s"].append(dt)
            if verbose:
                log("  %-3s %-15s epoch %2d  loss %.4f  held-out acc %.4f  %6.2f ms/step (CPU time %6.2f ms/step)" %
                    (scan_impl, policy, ep + 1, hist["loss"][-1], acc, hist["ms_per_step"][-1],
                     hist["cpu_ms_per_step"][-1]))
        steady = hist["ms_per_step"][1:] or hist["ms_per_step"]
        hist["steady_ms_per_step"] = float(np.median(steady))
        hist["best_ms_per_step"] = float(np.min(steady))
        hist["steady_cpu_ms_per_step"] = float(np.median(hist["cpu_ms_per_step"][1:] or hist["cpu_ms_per_step"]))
        hist["final_test_acc"] = hist["test_acc"][-1]
        hist["model"] = model
        hist["n_train"], hist["n_test"] = int(xtr.shape[0]), int(xte.shape[0])
        return hist
    finally:
        keras.mixed_precision.set_global_policy(old)
