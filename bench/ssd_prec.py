#!/usr/bin/env python
"""Precision emulation (CPU) of Mamba-2 SSD chunked backward on bf16 tensor cores.

Variants (bench/NOTES.md, "SSD-CUDA rebuild, the operands' precision on bf16 tensor cores"):
  R   float64 reference: per-step recurrence, gradients by float64 autograd (checked at start-up on a
      smaller shape against the float64 chunked form; big runs use that float64 chunked backward,
      whose forward is checked against the recurrence every run; --ref autograd for the slow way).
  X   current selscan: every float operand split into tf32 hi + tf32 lo (3 mma), Q=64.
  T   "Triton-like": mamba_ssm's casts (bf16 one rounding where it casts, fp32 states / cumsum /
      accumulators, gated dout stored bf16, forward y stored bf16 for dz), Q=256.
  S1  every float operand of every product rounded once to bf16 (Q=256 and Q=64).
  S2  every float operand split into bf16 hi + bf16 lo, hi*hi + hi*lo + lo*hi (Q=256, 64).
  S3  the chosen mix (split only where needed).
All non-product arithmetic (exp, cumsum, decays, state passing, reductions) is float32.
A product = torch.matmul in float32 of the bf16-rounded parts: the products of bf16 values
are exact in fp32; the fp32 accumulation order differs from mma's (an approximation).
"""
import argparse, math, sys, time
import numpy as np
import torch

torch.set_num_threads(2)

# ----------------------------------------------------------------------------------------
# rounding (exact RNE by bit manipulation of float32)

def bf16r(v):
    """round float32 tensor to the nearest bf16 (ties to even); returns float32."""
    if v.dtype == torch.float64:
        return bf16r(v.float()).double()
    u = v.contiguous().view(torch.int32)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & -65536
    return u.view(torch.float32)


def tf32r(v):
    """round float32 to the nearest tf32 (10 mantissa bits, ties to even)."""
    u = v.contiguous().view(torch.int32)
    u = (u + 0xFFF + ((u >> 13) & 1)) & -8192
    return u.view(torch.float32)


OPERANDS = ['Bw', 'h', 'W', 'g', 'ge', 'dh', 'CBL', 'V']
OPDESC = {
    'Bw':  "B o exp(cs_last-cs) o dt  (chunk state  x^T (B o w), fwd + bwd recompute)",
    'h':   "inter-chunk state h_in    (y_off = C h^T; dC_off = g h)",
    'W':   "CB o L o dt               (y_diag = W x, forward only)",
    'g':   "gated dout  dout o silu(z) (dx_intra, dC_off, dy x^T; exact bf16 if z=None)",
    'ge':  "g o exp(cs)               (chunk dstate  (g o e^cs)^T C)",
    'dh':  "dstates (grad of h_out)   (dx_state = B dh^T; dB_state = x dh)",
    'CBL': "(CB o L)^T                (dx_intra = (CB o L)^T g)",
    'V':   "(g x^T) o L o dt          (dB_intra = V^T C; dC_intra = V B)",
}


class Prec:
    """mode per float operand: 'f' (no rounding), 'r' (one rounding), 's' (hi+lo split)."""

    def __init__(self, name, Q, modes, rnd=bf16r, g_store=False, y_store=False, dtype=torch.float32):
        self.name, self.Q, self.rnd, self.dtype = name, Q, rnd, dtype
        self.modes = dict(modes)
        self.g_store, self.y_store = g_store, y_store

    def parts(self, v, op):
        m = 'e' if op is None else self.modes[op]
        if m in ('e', 'f'):
            return [v]
        hi = self.rnd(v)
        if m == 'r':
            return [hi]
        return [hi, self.rnd(v - hi)]

    def mm(self, a, opa, b, opb):
        pa, pb = self.parts(a, opa), self.parts(b, opb)
        out = None
        for i, x in enumerate(pa):
            for j, y in enumerate(pb):
                if i + j > 1:   # hi*hi + hi*lo + lo*hi (no lo*lo)
                    continue
                r = torch.matmul(x, y)
                out = r if out is None else out + r
        return out


# ----------------------------------------------------------------------------------------
# chunked forward + hand-written backward (precision-parametrized)

def chunked(inp, pr, gated=True):
    """inp: dict of float64 tensors. Returns dict of float64 results (y, grads)."""
    dty = pr.dtype
    f = lambda k: inp[k].to(dty)
    x, dt_raw, bias, A, B, C, D, z, dout = (f(k) for k in ['x', 'dt_raw', 'dt_bias', 'A', 'B', 'C', 'D', 'z', 'dout'])
    Bt, H, L, P = x.shape
    N = B.shape[-1]
    Q = pr.Q
    nc = L // Q
    # dt, dA cumsum (fp32)
    dtp = dt_raw + bias[None, :, None]                       # (Bt,H,L)
    dt = torch.nn.functional.softplus(dtp)
    a = dt * A[None, :, None]
    dtc = dt.view(Bt, H, nc, Q)
    cs = torch.cumsum(a.view(Bt, H, nc, Q), -1)              # inclusive, within chunk
    csl = cs[..., -1:]
    xc = x.view(Bt, H, nc, Q, P)
    Bc = B.view(Bt, 1, nc, Q, N)
    Cc = C.view(Bt, 1, nc, Q, N)
    tril = torch.tril(torch.ones(Q, Q, dtype=torch.bool))
    Lm = torch.exp(torch.clamp(cs[..., :, None] - cs[..., None, :], max=0.0))
    Lm = torch.where(tril, Lm, torch.zeros((), dtype=dty))  # (Bt,H,nc,Q,Q)  L[t,s]
    wdec = torch.exp(torch.clamp(csl - cs, max=0.0))          # exp(cs_last - cs_s)
    ecs = torch.exp(cs)                                       # exp(cs_t)
    # ---- forward
    CB = pr.mm(Cc, None, Bc.transpose(-1, -2), None)         # (Bt,1,nc,Q,Q) exact operands
    Bw = Bc * (wdec * dtc)[..., None]                        # (Bt,H,nc,Q,N)
    S = pr.mm(xc.transpose(-1, -2), None, Bw, 'Bw')          # (Bt,H,nc,P,N)
    hin = torch.zeros(Bt, H, nc + 1, P, N, dtype=dty)
    for c in range(nc):
        hin[:, :, c + 1] = torch.exp(csl[:, :, c, 0])[..., None, None] * hin[:, :, c] + S[:, :, c]
    hh = hin[:, :, :nc]                                      # state entering each chunk
    y_off = pr.mm(Cc, None, hh.transpose(-1, -2), 'h') * ecs[..., None]
    W = CB * Lm * dtc[..., None, :]
    y_diag = pr.mm(W, 'W', xc, None)
    y = (y_off + y_diag).reshape(Bt, H, L, P) + D[None, :, None, None] * x
    # ---- backward
    sz = torch.sigmoid(z)
    y_used = pr.rnd(y) if pr.y_store else y
    if gated:
        dz = dout * y_used * sz * (1 + z * (1 - sz))
        g = dout * z * sz
    else:                       # z=None: g = dout is exact bf16
        dz = torch.zeros_like(z)
        g = dout
    dD = (g * x).sum((0, 2, 3))
    if pr.g_store:
        g = pr.rnd(g)
    dx = D[None, :, None, None] * g
    gc = g.view(Bt, H, nc, Q, P)
    # chunk-local dstates
    ge = gc * ecs[..., None]
    dSloc = pr.mm(ge.transpose(-1, -2), 'ge', Cc, None)      # (Bt,H,nc,P,N)
    # state passing backward (fp32)
    dH = torch.zeros(Bt, H, nc + 1, P, N, dtype=dty)
    dcsl = torch.zeros(Bt, H, nc, dtype=dty)
    for c in range(nc - 1, -1, -1):
        e = torch.exp(csl[:, :, c, 0])
        dcsl[:, :, c] = e * (hin[:, :, c] * dH[:, :, c + 1]).sum((-1, -2))
        dH[:, :, c] = dSloc[:, :, c] + e[..., None, None] * dH[:, :, c + 1]
    dS = dH[:, :, 1:]                                        # grad of each chunk's end state
    # dx
    acc = pr.mm(Bc, None, dS.transpose(-1, -2), 'dh') * wdec[..., None]
    CBLt = (CB * Lm).transpose(-1, -2)
    acc = acc + pr.mm(CBLt, 'CBL', gc, 'g')
    dx = dx + (acc * dtc[..., None]).reshape(Bt, H, L, P)
    ddt_dir = (acc * xc).sum(-1)                              # (Bt,H,nc,Q)
    # dB (state part), ddA "next"
    dB_st = pr.mm(xc, None, dS, 'dh') * (wdec * dtc)[..., None]  # (Bt,H,nc,Q,N)
    Ks = (dB_st * Bc).sum(-1)                                 # grad wrt (cs_last - cs_s)
    # dC (off part), ddA "prev"
    dC_off = pr.mm(gc, 'g', hh, 'h') * ecs[..., None]
    Jt = (dC_off * Cc).sum(-1)                                # grad wrt cs_t
    # intra: dCB, V
    GX = pr.mm(gc, 'g', xc.transpose(-1, -2), None)           # (Bt,H,nc,Q,Q)
    V = GX * Lm * dtc[..., None, :]
    R = V * CB                                                # grad wrt (cs_t - cs_s)
    dB_in = pr.mm(V.transpose(-1, -2), 'V', Cc, None)
    dC_in = pr.mm(V, 'V', Bc, None)
    dB = (dB_st + dB_in).sum(1).reshape(Bt, L, N)
    dC = (dC_off + dC_in).sum(1).reshape(Bt, L, N)
    # d a_r
    excl = torch.cumsum(Ks, -1) - Ks                          # sum_{s<r} K_s
    rinc = torch.flip(torch.cumsum(torch.flip(Jt, [-1]), -1), [-1])  # sum_{t>=r} J_t
    Fx = torch.cumsum(R, -1) - R                              # F[t,r] = sum_{s<r} R[t,s]
    Fx = torch.where(tril, Fx, torch.zeros((), dtype=dty))
    intra = Fx.sum(-2)                                        # sum_{t>=r}
    da = excl + rinc + intra + dcsl[..., None]
    ddt = ddt_dir + A[None, :, None, None] * da               # grad wrt dt (after softplus)
    dA = (da * dtc).sum((0, 2, 3))
    ddt_raw = (ddt.reshape(Bt, H, L) * torch.sigmoid(dtp))    # grad wrt dt_raw
    dbias = ddt_raw.sum((0, 2))
    res = dict(y=y, dx=dx, dB=dB, dC=dC, ddt=ddt_raw, dA=dA, dD=dD, dz=dz, dbias=dbias)
    return {k: v.double() for k, v in res.items()}


# ----------------------------------------------------------------------------------------
# float64 reference: per-step recurrence + autograd

def reference(inp, gated=True):
    t = {k: v.clone().requires_grad_(k not in ('dout',)) for k, v in inp.items()}
    x, dt_raw, bias, A, B, C, D, z, dout = (t[k] for k in ['x', 'dt_raw', 'dt_bias', 'A', 'B', 'C', 'D', 'z', 'dout'])
    Bt, H, L, P = x.shape
    N = B.shape[-1]
    dt = torch.nn.functional.softplus(dt_raw + bias[None, :, None])
    decay = torch.exp(dt * A[None, :, None])
    h = torch.zeros(Bt, H, P, N, dtype=torch.float64)
    ys = []
    for s in range(L):
        h = decay[:, :, s, None, None] * h + (dt[:, :, s, None] * x[:, :, s])[..., None] * B[:, None, s, None, :]
        ys.append((h * C[:, None, s, None, :]).sum(-1))
    y = torch.stack(ys, 2) + D[None, :, None, None] * x
    out = y * z * torch.sigmoid(z) if gated else y
    (out * dout).sum().backward()
    return dict(y=y.detach(), dx=x.grad, dB=B.grad, dC=C.grad, ddt=dt_raw.grad, dA=A.grad,
                dD=D.grad, dz=z.grad if gated else torch.zeros_like(z), dbias=bias.grad)


def recurrence_forward(inp, gated=True):
    """float64 per-step recurrence, forward only (no autograd): returns y (pre-gate)."""
    x, dt_raw, bias, A, B, C, D = (inp[k] for k in ['x', 'dt_raw', 'dt_bias', 'A', 'B', 'C', 'D'])
    Bt, H, L, P = x.shape
    N = B.shape[-1]
    dt = torch.nn.functional.softplus(dt_raw + bias[None, :, None])
    decay = torch.exp(dt * A[None, :, None])
    h = torch.zeros(Bt, H, P, N, dtype=torch.float64)
    y = torch.empty_like(x)
    dtx = dt[..., None] * x
    for s in range(L):
        h.mul_(decay[:, :, s, None, None]).add_(dtx[:, :, s, :, None] * B[:, None, s, None, :])
        y[:, :, s] = (h * C[:, None, s, None, :]).sum(-1)
    return y + D[None, :, None, None] * x


def reference_fast(inp, gated=True):
    """float64 reference for the big runs: gradients from the float64 chunked form (Q=64) whose
    gradients were checked against autograd of the recurrence at start-up; its forward is checked
    here against the per-step recurrence."""
    out = chunked(inp, Prec('f64', 64, modes_all('f'), rnd=lambda v: v, dtype=torch.float64), gated)
    y_rec = recurrence_forward(inp, gated)
    d = ((out['y'] - y_rec).abs().max() / y_rec.abs().max()).item()
    assert d < 1e-12, d
    out['y'] = y_rec
    return out, d


# ----------------------------------------------------------------------------------------
# inputs

def make_inputs(seed, case, Bt, H, L, P, N):
    g = torch.Generator().manual_seed(seed)
    rn = lambda *s: torch.randn(*s, generator=g, dtype=torch.float32)
    bf = lambda v: bf16r(v)
    x, B, C, z, dout = bf(rn(Bt, H, L, P)), bf(rn(Bt, L, N)), bf(rn(Bt, L, N)), bf(rn(Bt, H, L, P)), bf(rn(Bt, H, L, P))
    D = rn(H)
    if case == 'typical':
        dt_raw = bf(rn(Bt, H, L) - 4.0)                      # dt ~ softplus(N(-4,1)): ~0.002..0.13
        dt_bias = 0.1 * rn(H)
        A = -torch.exp(torch.rand(H, generator=g) * math.log(16.0))   # A in [-16,-1]
    elif case == 'long':
        dt_raw = bf(0.5 * rn(Bt, H, L) - 6.0)                # dt ~ 0.001..0.006
        dt_bias = 0.05 * rn(H)
        A = -torch.exp(0.1 * rn(H))                          # A near -1
    elif case == 'fast':
        dt_raw = bf(0.05 * rn(Bt, H, L) + math.log(math.expm1(0.1)))  # dt ~ 0.1
        dt_bias = torch.zeros(H)
        A = torch.full((H,), -16.0)
    else:
        raise ValueError(case)
    inp = dict(x=x, dt_raw=dt_raw, dt_bias=dt_bias, A=A, B=B, C=C, D=D, z=z, dout=dout)
    return {k: v.double() for k, v in inp.items()}


# ----------------------------------------------------------------------------------------
# metrics

GRADS = ['y', 'dx', 'dB', 'dC', 'dz', 'ddt', 'dA', 'dD', 'dbias']
SCALARS = {'dA', 'dD', 'dbias'}


def metrics(est, ref):
    est, ref = est.double().flatten(), ref.double().flatten()
    if ref.abs().max() == 0:
        return float('nan'), float('nan')
    err = (est - ref).abs()
    m1 = (err.max() / ref.abs().max()).item()
    if ref.numel() <= 64:
        m2 = (err / ref.abs()).max().item()          # per-head relative error, worst head
    else:
        floor = ref.pow(2).mean().sqrt()             # relative error, |ref| floored at rms(ref)
        rel = err / torch.maximum(ref.abs(), floor)
        m2 = torch.quantile(rel[torch.randperm(rel.numel(), generator=torch.Generator().manual_seed(0))[:4_000_000]]
                            if rel.numel() > 4_000_000 else rel, 0.999).item()
    return m1, m2


# ----------------------------------------------------------------------------------------
# variants and cost

def modes_all(m):
    return {o: m for o in OPERANDS}


def mma_cost(pr, Q, P, N, gated=True):
    """relative tensor-core work per chunk-head (MACs of all products incl. split passes)."""
    def npart(op):
        if op is None:
            return 1
        if op == 'g' and not gated:
            return 1
        return 2 if pr.modes[op] == 's' else 1

    def passes(a, b):
        na, nb = npart(a), npart(b)
        return sum(1 for i in range(na) for j in range(nb) if i + j <= 1)
    QPN, QQP2, QQN2 = Q * P * N, Q * Q * P / 2, Q * Q * N / 2
    prods = [  # (operand a, operand b, MACs)
        (None, None, QQN2),      # CB = C B^T
        (None, 'Bw', QPN),       # x^T (B o w)
        (None, 'h', QPN),        # C h^T
        ('W', None, QQP2),       # W x
        ('ge', None, QPN),       # (g e^cs)^T C
        (None, 'dh', QPN),       # B dh^T
        ('CBL', 'g', QQP2),      # (CB o L)^T g
        (None, 'dh', QPN),       # x dh
        ('g', 'h', QPN),         # g h
        ('g', None, QQP2),       # g x^T
        ('V', None, QQN2),       # V^T C
        ('V', None, QQN2),       # V B
    ]
    return sum(passes(a, b) * m for a, b, m in prods)


def variants(s3_modes):
    r, s = modes_all('r'), modes_all('s')
    v = [
        Prec('X  tf32x3 Q64 (current)', 64, s, rnd=tf32r),
        Prec('T  Triton-like Q256', 256, r, g_store=True, y_store=True),
        Prec('S1 bf16x1 Q256', 256, r),
        Prec('S1 bf16x1 Q64', 64, r),
        Prec('S2 bf16x3 Q256', 256, s),
        Prec('S2 bf16x3 Q64', 64, s),
    ]
    if s3_modes is not None:
        tag = '+'.join(o for o, m in s3_modes.items() if m == 's')
        v += [Prec(f'S3 split {tag} Q256', 256, s3_modes), Prec(f'S3 split {tag} Q64', 64, s3_modes)]
    return v


# S3: split only these operands (decided from the sensitivity sweep: bench/NOTES.md)
S3_SPLIT = ['Bw', 'W', 'g', 'dh']


def s3_modes(split=None):
    m = modes_all('r')
    for o in (S3_SPLIT if split is None else split):
        m[o] = 's'
    return m


# ----------------------------------------------------------------------------------------

def fmt(v):
    return f"{v:8.1e}"


def print_table(title, rows, col_names, file=sys.stdout):
    print(f"\n{title}", file=file)
    w = max(len(r[0]) for r in rows) + 2
    print(" " * w + "".join(f"{c:>9}" for c in col_names), file=file)
    for name, vals in rows:
        print(f"{name:<{w}}" + "".join(" " + fmt(v) for v in vals), file=file)


def run(args):
    if args.quick:
        Bt, H, L, P, N, seeds = 1, 2, 512, 32, 64, [0]
    else:
        Bt, H, L, P, N, seeds = args.batch, args.heads, args.L, args.P, args.N, list(range(args.seeds))
    cases = args.cases.split(',')
    gated = not args.no_z
    print(f"gate z: {'yes (out = y*silu(z))' if gated else 'no (z=None, dout exact bf16)'}")
    print(f"shapes: batch {Bt}, heads {H}, L {L}, P {P}, N {N}; seeds {seeds}; cases {cases}")
    t0 = time.time()
    # validation of the hand-written chunked backward in float64
    inp = make_inputs(123, 'typical', 1, 2, 256 if args.quick else 512, P, N)
    ref = reference(inp, gated)
    for Q in (64, 128):
        out = chunked(inp, Prec('f64', Q, modes_all('f'), rnd=lambda v: v, dtype=torch.float64), gated)
        worst = max(metrics(out[k], ref[k])[0] for k in GRADS if k != 'dz' or gated)
        print(f"float64 chunked (Q={Q}) vs float64 autograd recurrence: worst max|err|/max|ref| = {worst:.1e}")
        assert worst < 1e-10, "chunked backward does not match autograd"
    vs = variants(s3_modes(args.s3.split(',') if args.s3 else None))
    if args.sweep:
        base_r, base_s = modes_all('r'), modes_all('s')
        for Q in (256, 64):
            for o in OPERANDS:
                m = dict(base_r); m[o] = 's'
                vs.append(Prec(f"sweep Q{Q} S1+split[{o}]", Q, m))
            for o in OPERANDS:
                m = dict(base_s); m[o] = 'r'
                vs.append(Prec(f"sweep Q{Q} S2-round[{o}]", Q, m))
    results = {}   # (case, vname) -> list over seeds of {grad: (m1, m2)}
    for case in cases:
        for seed in seeds:
            ts = time.time()
            inp = make_inputs(seed, case, Bt, H, L, P, N)
            if args.ref == 'autograd':
                ref, dy = reference(inp, gated), 0.0
            else:
                ref, dy = reference_fast(inp, gated)
            tr = time.time() - ts
            rb = {k: metrics(bf16r(ref[k].float()).double(), ref[k]) for k in GRADS}
            results.setdefault((case, 'bf16(ref) rounding floor'), []).append(rb)
            for pr in vs:
                if pr.Q > L:
                    continue
                out = chunked(inp, pr, gated)
                results.setdefault((case, pr.name), []).append({k: metrics(out[k], ref[k]) for k in GRADS})
            print(f"  case {case} seed {seed}: reference {tr:.1f}s (chunked-f64 vs recurrence fwd {dy:.0e}), variants {time.time() - ts - tr:.1f}s", flush=True)
    names = ['bf16(ref) rounding floor'] + [pr.name for pr in vs]
    # tensor-core MACs per token, relative to all-one-rounding at Q=256 (tf32 mma runs at half the
    # bf16 rate on H100, so X's bf16-equivalent cost is twice the number shown)
    s1_256 = mma_cost(Prec('', 256, modes_all('r')), 256, P, N, gated) / 256
    costs = {pr.name: mma_cost(pr, pr.Q, P, N, gated) / pr.Q / s1_256 for pr in vs}
    for case in cases:
        for mi, mname in enumerate(['max|err|/max|ref|', 'p99.9 rel err (|ref| floored at rms; dA,dD,dbias: worst head)']):
            rows = []
            for n in names:
                if (case, n) not in results:
                    continue
                rs = results[(case, n)]
                rows.append((n, [max(r[k][mi] for r in rs) for k in GRADS]))
            print_table(f"[{case}] {mname}, worst of {len(seeds)} seed(s)", rows, GRADS)
    print("\ntensor-core MACs per token relative to S1 (all one rounding) at Q=256 (X: tf32 mma, half rate):")
    for pr in vs:
        if not pr.name.startswith('sweep'):
            print(f"  {pr.name:<28} {costs[pr.name]:.2f}")
    print(f"\ntotal time {time.time() - t0:.0f}s")


if __name__ == '__main__':
    ap = argparse.ArgumentParser()
    ap.add_argument('--quick', action='store_true', help='small shape, one seed (< 1 min)')
    ap.add_argument('--sweep', action='store_true', help='also the one-operand-at-a-time sweep')
    ap.add_argument('--batch', type=int, default=1)
    ap.add_argument('--heads', type=int, default=4)
    ap.add_argument('--L', type=int, default=2048)
    ap.add_argument('--P', type=int, default=64)
    ap.add_argument('--N', type=int, default=128)
    ap.add_argument('--seeds', type=int, default=3)
    ap.add_argument('--s3', default='', help='comma list of operands to split in S3 (default: %s)' % ','.join(S3_SPLIT))
    ap.add_argument('--ref', default='chunked', choices=['chunked', 'autograd'],
                    help="reference gradients: float64 chunked backward (checked at start-up against float64 autograd "
                         "of the recurrence, forward checked per run against the recurrence) or autograd of the "
                         "recurrence at full size (slow)")
    ap.add_argument('--no-z', action='store_true', help='no gate: z=None, g = dout exact bf16')
    ap.add_argument('--cases', default='typical,long,fast')
    run(ap.parse_args())
