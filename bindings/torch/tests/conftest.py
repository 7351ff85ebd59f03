"""pytest's configuration of the selscan_torch tests: the gpu_full marker (make test-gpu leaves its
tests to make test-gpu-full; every other run, CI's CPU run included, runs them)."""


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu_full: a long case the GPU gate's quick run (make test-gpu) leaves out")
