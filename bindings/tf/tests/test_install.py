"""The op's binary fits the TensorFlow major.minor it was compiled against (its C++ ABI): the
package's import compares the _build.py setup.py writes next to the op with the running TensorFlow
and names a mismatch instead of failing on an undefined symbol (make wheel-tf; make test-tf installs
that wheel with no compiler on the PATH)."""

import os
import shutil
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import tensorflow as tf  # noqa: E402

import selscan_tf  # noqa: E402
from runner import run_tests  # noqa: E402

PKG = os.path.dirname(os.path.abspath(selscan_tf.__file__))


def _import_with_build_info(text):
    """Imports a copy of the installed package whose _build.py is `text` (None: none); returns the
    finished process."""
    tmp = tempfile.mkdtemp()
    try:
        dst = os.path.join(tmp, "selscan_tf")
        shutil.copytree(PKG, dst, ignore=shutil.ignore_patterns("__pycache__"))
        b = os.path.join(dst, "_build.py")
        if text is None:
            if os.path.exists(b):
                os.remove(b)
        else:
            with open(b, "w") as f:
                f.write(text)
        env = {k: v for k, v in os.environ.items() if k != "SELSCAN_TF_OPS"}
        env["PYTHONPATH"] = tmp
        return subprocess.run([sys.executable, "-c", "import selscan_tf; print(selscan_tf.LIBRARY_PATH)"], env=env,
                              capture_output=True, text=True, cwd=tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_import_refuses_another_tensorflow_minor():
    r = _import_with_build_info("TENSORFLOW = '1.0.0'\nTENSORFLOW_MAJOR_MINOR = (1, 0)\n")
    assert r.returncode != 0
    want = "ImportError: selscan_tf was built against TensorFlow 1.0.0, and this is TensorFlow " + tf.__version__
    assert want in r.stderr, r.stderr[-800:]


def test_import_takes_its_own_tensorflow():
    mm = tuple(int(v) for v in tf.__version__.split(".")[:2])
    r = _import_with_build_info("TENSORFLOW = %r\nTENSORFLOW_MAJOR_MINOR = %r\n" % (tf.__version__, mm))
    assert r.returncode == 0, r.stderr[-800:]


def test_build_info_next_to_the_op():
    """The installed package (pip's build of setup.py) carries the TensorFlow it was compiled against."""
    from selscan_tf import _build

    assert tuple(_build.TENSORFLOW_MAJOR_MINOR) == tuple(int(v) for v in tf.__version__.split(".")[:2])
    return "built against TensorFlow %s" % _build.TENSORFLOW


if __name__ == "__main__":
    sys.exit(run_tests([v for k, v in sorted(globals().items()) if k.startswith("test_") and callable(v)]))
