"""Learning test (make test-tf): the tiny MambaVision classifier (patch embedding, 2
MambaVisionBlocks on the selscan op, LayerNorm, mean pool, linear head) trained on scikit-learn's
bundled 8x8 digits (1437 train / 360 held out, fixed seed), float32 and mixed_bfloat16 (bfloat16
compute, float32 variables). Passes when the held-out accuracy reaches MIN_ACC. Prints the curve.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402,F401

from selscan_tf.digits import train_digits  # noqa: E402
from runner import run_tests  # noqa: E402

MIN_ACC = 0.90
EPOCHS = 15


def check(policy):
    h = train_digits("op", policy, epochs=EPOCHS, seed=0)
    acc = h["final_test_acc"]
    assert h["loss"][-1] < 0.25 * h["loss"][0], "loss did not fall: %s" % h["loss"]
    assert acc >= MIN_ACC, "held-out accuracy %.4f < %.2f" % (acc, MIN_ACC)
    return "held-out accuracy %.4f after %d epochs, %.2f ms/step" % (acc, EPOCHS, h["steady_ms_per_step"])


def test_digits_float32():
    return check("float32")


def test_digits_mixed_bfloat16():
    return check("mixed_bfloat16")


TESTS = [test_digits_float32, test_digits_mixed_bfloat16]


def main():
    return run_tests(TESTS, width=28)


if __name__ == "__main__":
    sys.exit(main())
