"""What the selscan_torch test files share (imported as `_common`: pytest puts this folder on
sys.path): the devices tested, the tolerances against the float64 reference, the scaled error,
and the scan's random inputs."""
import pytest
import torch

import selscan_torch as st

HAS_CUDA = torch.cuda.is_available() and st.has_cuda_kernels()
DEVICES = ["cpu"] + (["cuda"] if HAS_CUDA else [])
cuda_only = pytest.mark.skipif(not HAS_CUDA, reason="needs a GPU and the CUDA kernels")
# max |out - ref| / max |ref| for outputs (TOL) and gradients (GTOL), by dtype
TOL = {torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 2.5e-2}
GTOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 5e-2}


def rel_err(a, b):
    """max |a - b| over max |b| (scaled error, robust to tiny entries); tensors or numpy arrays."""
    a = a.detach().double().cpu() if torch.is_tensor(a) else torch.as_tensor(a).double()
    b = b.detach().double().cpu() if torch.is_tensor(b) else torch.as_tensor(b).double()
    assert a.shape == b.shape, (a.shape, b.shape)
    if b.numel() == 0:
        return 0.0
    return ((a - b).abs().max() / b.abs().max().clamp(min=1e-30)).item()


def scan_inputs(g, batch, dim, L, N, bc="var3", G=2, dtype=torch.float32, D=True, z=True, bias=True, h0_rows=None,
                a_offset=0.3, device="cpu"):
    """selective_scan_fn's inputs by argument name, drawn from the generator g (always in this
    order: u, delta, A, D, z, delta_bias, h0, B, C). A = -(U[0, 1) + a_offset); bc: "fixed" ((dim, N)
    float32), "var3" ((batch, N, L)) or else (batch, G, N, L); h0 (h0_rows, dim, N) unless
    h0_rows is None."""

    def r(*shape, scale=1.0, dt=dtype):
        return (torch.randn(*shape, generator=g) * scale).to(dt).to(device)

    x = dict(
        u=r(batch, dim, L),
        delta=r(batch, dim, L, scale=0.5),
        A=(-(torch.rand(dim, N, generator=g) + a_offset)).to(device),
        D=r(dim, dt=torch.float32) if D else None,
        z=r(batch, dim, L) if z else None,
        delta_bias=r(dim, scale=0.3, dt=torch.float32) if bias else None,
        h0=r(h0_rows, dim, N, dt=torch.float32) if h0_rows is not None else None,
    )
    if bc == "fixed":
        x["B"], x["C"] = r(dim, N, dt=torch.float32), r(dim, N, dt=torch.float32)
    elif bc == "var3":
        x["B"], x["C"] = r(batch, N, L), r(batch, N, L)
    else:
        x["B"], x["C"] = r(batch, G, N, L), r(batch, G, N, L)
    return x


def make_inputs(batch=2, dim=8, L=37, N=5, bc="var3", G=2, dtype=torch.float32, device="cpu", D=True, z=True,
                bias=True, h0=False, seed=0, n_seqs=None):
    """scan_inputs from a fresh generator seeded with seed; h0 (n_seqs or batch rows) where h0."""
    rows = n_seqs if n_seqs is not None else batch
    return scan_inputs(torch.Generator().manual_seed(seed), batch, dim, L, N, bc, G, dtype, D, z, bias,
                       rows if h0 else None, device=device)
