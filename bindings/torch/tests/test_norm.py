"""selscan's gated RMS norm (selscan::norm_fwd / norm_bwd, selscan_torch.norm): the op against a float64
composition written here from selscan.h's >>norm-api, its gradients against float64 autograd of that
composition, every gate mode, dtype, weight or none, z a slice of a wider tensor (the layer's z in zxbcdt),
its refusals in the caller's words (eager and fake), torch.compile, the double-backward path."""
import pytest
import torch

import selscan_torch  # noqa: F401  (registers the ops)
from selscan_torch import norm as snorm
from _common import DEVICES, GTOL32, TOL32, lowp_tol, rel_err

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
MODES = ["before", "after", "none"]  # the gate after the norm (norm_before_gate), inside it, no z


def ref64(y, z, w, gs, eps, before):
    """>>norm-api in float64 (differentiable)."""
    y = y.double()
    s = None if z is None else z.double() * torch.sigmoid(z.double())
    u = y * s if s is not None and not before else y
    ug = u.unflatten(-1, (-1, gs))
    n = (ug * torch.rsqrt(ug.square().mean(-1, keepdim=True) + eps)).flatten(-2)
    out = n * (w.double() if w is not None else 1.0)
    return out * s if s is not None and before else out


def inputs(seed, dtype, device, batch=2, L=7, dim=24, mode="before", weight=True, wide_z=True):
    g = torch.Generator().manual_seed(seed)
    y = (torch.randn(batch, L, dim, generator=g) * 2).to(dtype).to(device)
    z = None
    if mode != "none":
        zx = (torch.randn(batch, L, 3 * dim, generator=g) * 2).to(dtype).to(device)
        z = zx[:, :, dim:2 * dim] if wide_z else zx[:, :, :dim].contiguous()  # a slice, as the layer's
    w = (torch.rand(dim, generator=g) + 0.5).to(device) if weight else None
    dout = torch.randn(batch, L, dim, generator=g).to(dtype).to(device)
    return y, z, w, dout


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("gs", [1, 8, 24])
@pytest.mark.parametrize("weight", [True, False])
def test_op_and_gradients_against_float64(device, dtype, mode, gs, weight):
    y, z, w, dout = inputs(3 + gs, dtype, device, mode=mode, weight=weight)
    assert z is None or not z.is_contiguous()
    before = mode == "before"
    eps = 1e-2 if gs == 1 else 1e-5  # (a group of one channel: n = +-1 and a flat loss unless eps is large)
    leaves = [t.detach().requires_grad_() if t is not None else None for t in (y, z, w)]
    out = snorm.gated_rms_norm(leaves[0], leaves[1], leaves[2], eps, gs, before)
    assert out.dtype == dtype and out.shape == y.shape
    r64 = [t.detach().double().requires_grad_() if t is not None else None for t in (y, z, w)]
    ref = ref64(r64[0], r64[1], r64[2], gs, eps, before)
    # out: the op computes in float32 and rounds once to dtype (k = 1)
    assert rel_err(out, ref) <= lowp_tol(dtype, TOL32, 1), rel_err(out, ref)
    want = [t for t in leaves if t is not None]
    got = torch.autograd.grad(out, want, dout)
    exp = torch.autograd.grad(ref, [t for t in r64 if t is not None], dout.double())
    for name, a, b, t in zip(("dy", "dz", "dweight")[:len(got)] if z is not None else ("dy", "dweight"), got, exp, want):
        assert a.dtype == t.dtype, name
        # dy, dz rounded once to dtype (k = 1); dweight float32, summed over rows in float32
        assert rel_err(a, b) <= lowp_tol(a.dtype, GTOL32, 1), (name, rel_err(a, b))


@pytest.mark.parametrize("device", DEVICES)
def test_dweight_deterministic_and_weight_dtype(device):
    """dweight bitwise the same every call; a bfloat16 weight's gradient comes back in bfloat16."""
    y, z, w, dout = inputs(11, torch.bfloat16, device, batch=3, L=50, dim=48)
    wb = w.to(torch.bfloat16).requires_grad_()
    res = []
    for _ in range(2):
        out = snorm.gated_rms_norm(y, z, wb, 1e-5, 16, True)
        res.append(torch.autograd.grad(out, wb, dout)[0])
    assert res[0].dtype == torch.bfloat16 and torch.equal(res[0], res[1])


@pytest.mark.parametrize("device", DEVICES)
def test_leading_shapes_and_float64(device):
    """A 2-D (tokens, dim) y (a decode step's) and a 4-D one give the 3-D call's values; float64 goes
    through float32 (the op's math) and comes back float64."""
    y, z, w, _ = inputs(13, torch.float32, device)
    want = snorm.gated_rms_norm(y, z, w, 1e-5, 8, False)
    got2 = snorm.gated_rms_norm(y.reshape(14, 24), z.reshape(14, 24), w, 1e-5, 8, False)
    got4 = snorm.gated_rms_norm(y.reshape(1, 2, 7, 24), z.reshape(1, 2, 7, 24), w, 1e-5, 8, False)
    assert got2.shape == (14, 24) and torch.equal(got2.reshape(want.shape), want)
    assert got4.shape == (1, 2, 7, 24) and torch.equal(got4.reshape(want.shape), want)
    got64 = snorm.gated_rms_norm(y.double(), z.double(), w, 1e-5, 8, False)
    assert got64.dtype == torch.float64 and torch.equal(got64.float(), want)


def test_op_refusals_name_the_argument():
    y, z, w, dout = inputs(17, torch.float32, "cpu")
    op = torch.ops.selscan.norm_fwd
    with pytest.raises(ValueError, match="argument 'group_size'.*does not divide dim"):
        op(y, z, w, 7, 1e-5, True)
    with pytest.raises(ValueError, match="argument 'eps'"):
        op(y, z, w, 8, -1.0, True)
    with pytest.raises(ValueError, match="argument 'eps'"):
        op(y, z, w, 8, float("nan"), True)
    with pytest.raises(ValueError, match="argument 'z'"):
        op(y, z[:, :3], w, 8, 1e-5, True)
    with pytest.raises(ValueError, match="argument 'weight'"):
        op(y, z, w[:8], 8, 1e-5, True)
    with pytest.raises(TypeError, match="argument 'z'"):
        op(y, z.half(), w, 8, 1e-5, True)
    with pytest.raises(TypeError, match="argument 'weight'"):
        op(y, z, w.half(), 8, 1e-5, True)
    with pytest.raises(ValueError, match="argument 'dout'"):
        torch.ops.selscan.norm_bwd(y, z, w, dout[:1], 8, 1e-5, True, [1, 1, 1])
    # the fake kernels refuse in the same words (meta tensors)
    ym, zm, wm = (t.to("meta") for t in (y, z, w))
    with pytest.raises(ValueError, match="argument 'group_size'"):
        op(ym, zm, wm, 7, 1e-5, True)
    assert op(ym, zm, wm, 8, 1e-5, True).shape == y.shape


def test_refusal_leaves_no_output_and_empty_calls():
    """An empty problem: an empty out, zero gradients."""
    y = torch.zeros(0, 5, 8)
    out = torch.ops.selscan.norm_fwd(y, None, None, 4, 1e-5, False)
    assert out.shape == y.shape
    g = torch.ops.selscan.norm_bwd(y, None, torch.ones(8), y, 4, 1e-5, False, [1, 0, 1])
    assert g[0].shape == y.shape and torch.equal(g[2], torch.zeros(8))


def test_compiles_fullgraph():
    """torch.compile sees the ops whole (fake kernels), its gradients bitwise eager's (the same ops)."""
    y, z, w, dout = inputs(19, torch.float32, "cpu")
    y.requires_grad_(), w.requires_grad_()

    def f(y, z, w):
        return (snorm.gated_rms_norm(y, z, w, 1e-5, 8, True) * dout).sum()

    want = torch.autograd.grad(f(y, z, w), [y, w])
    torch._dynamo.reset()
    got = torch.autograd.grad(torch.compile(f, backend="aot_eager", fullgraph=True)(y, z, w), [y, w])
    assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_double_backward_through_the_composition():
    """create_graph=True: the gradients are differentiable again (the composition differentiated), their
    values the op's to rounding, the second derivative the float64 one's."""
    y, z, w, dout = inputs(23, torch.float32, "cpu", mode="after")
    y64 = y.double().requires_grad_()
    y.requires_grad_(), w.requires_grad_()
    gy, gw = torch.autograd.grad(snorm.gated_rms_norm(y, z, w, 1e-5, 8, False), [y, w], dout, create_graph=True)
    plain = torch.autograd.grad(snorm.gated_rms_norm(y, z, w, 1e-5, 8, False), [y, w], dout)
    assert rel_err(gy, plain[0]) <= GTOL32 and rel_err(gw, plain[1]) <= GTOL32
    second = torch.autograd.grad(gw.square().sum(), y)[0]
    g64 = torch.autograd.grad(ref64(y64, z, w.detach(), 8, 1e-5, False), [y64], dout.double(), create_graph=True)[0]
    w64 = w.detach().double().requires_grad_()
    gw64 = torch.autograd.grad(ref64(y64, z, w64, 8, 1e-5, False), w64, dout.double(), create_graph=True)[0]
    s64 = torch.autograd.grad(gw64.square().sum(), y64)[0]
    assert g64 is not None and rel_err(second, s64) <= 1e-4, rel_err(second, s64)


def test_nan_in_one_group_stays_there():
    y, z, w, _ = inputs(29, torch.float32, "cpu")
    y[0, 3, 5] = float("nan")
    out = snorm.gated_rms_norm(y, z, w, 1e-5, 8, True)
    bad = out.isnan()
    assert bad[0, 3, :8].all() and bad.sum() == 8


def test_cpu_parts_bitwise_across_threads():
    """The CPU op's parts on the intra-op pool: out and every gradient bitwise the one-thread result (dweight's
    sums in 64-row blocks, then the blocks in order, whatever the thread count), across blocks (L 301) and with
    batch rows only (L 1)."""
    for shape in [(2, 301, 48), (9, 1, 48)]:
        g = torch.Generator().manual_seed(31)
        y, z = torch.randn(*shape, generator=g), torch.randn(*shape, generator=g)
        w, dout = torch.rand(48, generator=g), torch.randn(*shape, generator=g)
        threads = torch.get_num_threads()
        res = []
        try:
            for n in (1, max(2, threads)):
                torch.set_num_threads(n)
                out = torch.ops.selscan.norm_fwd(y, z, w, 16, 1e-5, False)
                res.append([out, *torch.ops.selscan.norm_bwd(y, z, w, dout, 16, 1e-5, False, [1, 1, 1])])
        finally:
            torch.set_num_threads(threads)
        assert all(torch.equal(a, b) for a, b in zip(*res))
        assert rel_err(res[1][0], ref64(y, z, w, 16, 1e-5, False)) <= TOL32


def test_gated_rms_norm_argument_rules():
    """gated_rms_norm's own rules (a hostile review's finds): what it folds or casts before the op is refused in
    its words, naming the argument and the shapes the caller passed; dim 0 and group_size 0 work at any rank."""
    G = snorm.gated_rms_norm
    y = torch.randn(2, 3, 8)
    with pytest.raises(ValueError, match="argument 'y'"):
        G(torch.tensor(1.0), None, None, 1e-5, 1, True)
    for bad in (torch.ones(2, 3, 8, dtype=torch.int32), torch.ones(2, 3, 8, dtype=torch.bool),
                torch.ones(2, 3, 8, dtype=torch.complex64)):
        with pytest.raises(TypeError, match="argument 'y'"):
            G(bad, None, None, 1e-5, 4, True)
        with pytest.raises(TypeError, match="argument 'z'"):
            G(y, bad, None, 1e-5, 4, True)
    with pytest.raises(TypeError, match="argument 'weight'"):
        G(y, None, torch.ones(8, dtype=torch.int64), 1e-5, 4, True)
    with pytest.raises(ValueError, match=r"argument 'z'.*\(2, 3, 2, 8\).*\(12, 8\)"):
        G(torch.randn(2, 3, 2, 8), torch.randn(12, 8), None, 1e-5, 4, True)
    for kw, name in ((dict(norm_before_gate="False"), "norm_before_gate"), (dict(group_size=4.7), "group_size"),
                     (dict(group_size="4"), "group_size"), (dict(group_size=True), "group_size"),
                     (dict(group_size=None), "group_size"), (dict(eps=True), "eps"), (dict(eps="a"), "eps")):
        args = dict(eps=1e-5, group_size=4, norm_before_gate=True) | kw
        with pytest.raises(TypeError, match=f"argument '{name}'"):
            G(y, y, None, **args)
    for shape in ((2, 3, 4, 0), (0,), (3, 0)):  # empty: y's shape back
        assert G(torch.randn(*shape), None, None, 1e-5, 0, True).shape == shape
    # group_size 0 (dim) through the double backward's composition
    yg = torch.randn(2, 3, 8, dtype=torch.float64).float().requires_grad_()
    g0, = torch.autograd.grad(G(yg, None, None, 1e-5, 0, True).sum() ** 2, yg, create_graph=True)
    g8, = torch.autograd.grad(G(yg, None, None, 1e-5, 8, True).sum() ** 2, yg, create_graph=True)
    assert torch.equal(g0, g8)
