"""bindings/tf/README.md's two Python snippets (MambaVision's mixer; the op-level API), run as written, make
test-tf. A newcomer's walk (twenty-eighth session) found both failing as pasted (undefined inputs, shapes that
contradicted each other): what a user copies must run. Plain Python: one line per test and `N passed, N failed`.

Each snippet runs in a namespace of its own; the results are then checked against what the README says of them
(the op-level snippet's packed call against separate calls from each sequence's h0 row, the loader's stand-in
weights in the mixer)."""

import os
import re
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import tensorflow as tf  # noqa: E402

from selscan_tf import selective_scan  # noqa: E402
from runner import run_tests  # noqa: E402

README = os.path.join(os.path.dirname(HERE), "README.md")


def _snippet(after):
    """The first ```python block after the line `after` in the README."""
    text = open(README, encoding="utf-8").read()
    i = text.index(after)
    m = re.compile(r"```python\n(.*?)```", re.S).search(text, i)
    assert m, "README.md has no python block after %r" % after
    return m.group(1)


def _run(after):
    ns = {"__name__": "readme_snippet"}
    policy = tf.keras.mixed_precision.global_policy()
    try:
        exec(compile(_snippet(after), README, "exec"), ns)
    finally:
        tf.keras.mixed_precision.set_global_policy(policy)  # (the mixer's snippet ends on mixed_bfloat16)
    return ns


def test_mamba_vision_snippet():
    ns = _run("## MambaVision's mixer")
    mixer, x = ns["mixer"], ns["x"]
    assert ns["y"].shape == x.shape == (2, 196, 320), ns["y"].shape
    # the stand-in's values (0.01 everywhere, A_log and D among them) are the mixer's weights now
    for v in mixer.trainable_variables:
        assert np.all(v.numpy() == np.float32(0.01)), v.name
    y = mixer(x)
    assert y.shape == x.shape and bool(tf.reduce_all(tf.math.is_finite(y)))


def test_op_level_snippet():
    ns = _run("The op-level API")
    u, delta, A, B, C, h0 = (ns[k] for k in ("u", "delta", "A", "B", "C", "h0"))
    batch, L, dim, N = ns["batch"], ns["L"], ns["dim"], ns["N"]
    assert ns["y"].shape == (batch, L, dim) and ns["h_last"].shape == (batch, dim, N)
    assert ns["out"].shape == (batch, dim) and ns["state"].shape == (batch, dim, N)
    for k in ("y", "h_last", "yp", "hp", "out", "state"):  # (a first version's negative delta overflowed to inf)
        assert bool(tf.reduce_all(tf.math.is_finite(ns[k]))), k
    # the packed call (cu_seqlens [0, 5, 12] over batch row 0): each sequence as a call of its own from its h0 row
    yp, hp = ns["yp"], ns["hp"]
    for s, (t0, t1) in enumerate(((0, 5), (5, 12))):
        ys, hs = selective_scan(u[:1, t0:t1], delta[:1, t0:t1], A, B[:1, t0:t1], C[:1, t0:t1], h0=h0[s:s + 1],
                                return_last_state=True)
        # float32 both ways, the same kernels on the same steps: equal to a few ulps of the largest value
        tol = 1e-6 * float(tf.reduce_max(tf.abs(ys)))
        assert float(tf.reduce_max(tf.abs(yp[:, t0:t1] - ys))) <= tol, s
        assert float(tf.reduce_max(tf.abs(hp[s] - hs[0]))) <= 1e-6 * float(tf.reduce_max(tf.abs(hs))), s


TESTS = [test_mamba_vision_snippet, test_op_level_snippet]


def main():
    return run_tests(TESTS, width=28)


if __name__ == "__main__":
    sys.exit(main())
