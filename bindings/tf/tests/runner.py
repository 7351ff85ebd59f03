"""The TensorFlow tests' runner: each test is a plain function (raises on failure, may return a
short info string); prints one line a test and ends with "N passed, M failed" (tests/run.sh's
summary format). Returns the process exit status."""
import sys
import time
import traceback


def raises(fn, *needles, types=None):
    """fn() must raise one of `types` (default: TensorFlow's InvalidArgumentError, ValueError or
    TypeError) whose message holds every needle; returns the message."""
    if types is None:
        import tensorflow as tf

        types = (tf.errors.InvalidArgumentError, ValueError, TypeError)
    try:
        fn()
    except types as e:
        msg = str(e)
        for n in needles:
            assert n in msg, "message lacks %r: %s" % (n, msg[:500])
        return msg
    raise AssertionError("no error raised (wanted %s)" % (needles,))


def run_tests(tests, width=28):
    t_all = time.time()
    passed = failed = 0
    for fn in tests:
        t0 = time.time()
        try:
            info = fn()
            passed += 1
            print("ok    %-*s %6.2fs%s" % (width, fn.__name__, time.time() - t0, "  (%s)" % info if info else ""))
        except Exception:  # noqa: BLE001
            failed += 1
            print("FAIL  %-*s %6.2fs" % (width, fn.__name__, time.time() - t0))
            traceback.print_exc(limit=6)
        sys.stdout.flush()
    print("total %.1fs" % (time.time() - t_all))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0
