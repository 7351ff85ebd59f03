"""The SSD backward in chunks, in float32, emulated in numpy (issue 40; no GPU): whether a chunked CUDA backward
on the float32 units (bench/NOTES.md SSD-CUDA-v8's next step) would keep every gradient, the decay's above all,
within what the walks in double give, before any kernel is written.

One (batch row, head) of a Mamba2-like layer (the problem of bench/emu_ssd_decay_grad.py: headdim 64, dstate 128,
random x / B / C / dy in [-1, 1], dt = softplus(U(-3, 0.5)), A in [-4, -0.2]; with and without a left padding of
L / 3 steps of x = 0, with and without an initial state). The exact gradients: the recurrence's adjoint walked in
float64 (S forward, G = d loss / d S(t) backward; dx = dt G B, dB = dt G^T x, dC = S^T dy, ddt = x^T G B + A g,
g(t) = a(t) <G(t), S(t-1)>, dA = sum dt g, dinitial_state = a(0) G(0)). The chunked form in float32, chunks of
Q steps (the CUDA forward's 64), every quantity chunk-local:
  forward      Sloc(c) = sum_s w(s) dt(s) x(s) B(s)^T, Sin(c+1) = dec(c) Sin(c) + Sloc(c)
  state grads  Gout(c) (the gradient of the state leaving chunk c): Gout(last) = dfinal_state (0 here),
               Gout(c-1) = dec(c) Gout(c) + sum_t din(t) dy(t) C(t)^T
  within c     M[t,s] = (C(t) . B(s)) e(t,s) dt(s) (dy(t) . x(s)) for s <= t, e(t,s) = exp(a(s+1) + .. + a(t))
               dx(s) = dt(s) [sum_{t>=s} (C(t) . B(s)) e(t,s) dy(t) + w(s) Gout B(s)]
               dB(s) = dt(s) [sum_{t>=s} e(t,s) (dy(t) . x(s)) C(t) + w(s) Gout^T x(s)]
               dC(t) = sum_{s<=t} e(t,s) dt(s) (dy(t) . x(s)) B(s) + din(t) Sin^T dy(t)
               d a(u) = sum_{s<u<=t} M[t,s] + sum_{t>=u} din(t) dy(t) . (Sin C(t)) + sum_{s<u} w(s) dt(s) x(s)^T Gout B(s)
                        + dec <Gout, Sin>
               ddt(s) = sum_{t>=s} M[t,s] / dt(s) + w(s) x(s)^T Gout B(s) + A d a(s), dA = sum_u dt(u) d a(u)
with din(t) = exp(a(0) + .. + a(t)), w(s) = exp(a(s+1) + .. + a(Q-1)), dec = exp(a(0) + .. + a(Q-1)); the decays'
exponents as differences of prefix sums kept in double (as the CUDA forward's), everything else float32. Prints the
norm-wise relative error of each gradient against the exact one; dA's relative error with the d a sums in float32,
with them in double, with the pair matrix M's two products (C B^T, dy x^T) in double too, and with the linear terms
in double as well; the float32 walks' direct form a(t) <G(t), S(t-1)> (sums in double: v6's best float32 walks); and
cond = sum |dt g| / |dA|, the factor by which the terms' rounding is amplified in dA. In float64 throughout the
chunked form matches the exact gradients to 1e-14 (checked while writing it).

    python3 bench/emu_ssd_chunk_bwd.py [L] [seeds]     (L 512, 3 seeds: a few seconds; L 2048, 2 seeds: ~20 s)
"""
import sys

import numpy as np


def walks(x, B, C, dy, dt, a, h0, ft):
    """The adjoint walked in ft: the exact gradients (float64) or the float32 walks' direct form."""
    L, P = x.shape
    N = B.shape[1]
    f = lambda v: np.asarray(v, dtype=ft)  # noqa: E731
    x, B, C, dy, dt, a = f(x), f(B), f(C), f(dy), f(dt), f(a)
    S = f(h0).copy()
    Ss = np.empty((L + 1, P, N), ft)
    Ss[0] = S
    for t in range(L):
        S = a[t] * S + (dt[t] * x[t])[:, None] * B[t][None, :]
        Ss[t + 1] = S  # Ss[t + 1] = S(t); Ss[0] = S(-1) = h0
    out = {"y": np.einsum("tpn,tn->tp", Ss[1:], C), "hT": S}
    G = np.zeros((P, N), ft)
    out.update({k: np.empty_like(v) for k, v in (("dx", x), ("dB", B), ("dC", C))})
    g = np.empty(L, np.float64)
    dexp = np.empty(L, np.float64)
    for t in range(L - 1, -1, -1):
        G = (a[t + 1] * G if t + 1 < L else G) + dy[t][:, None] * C[t][None, :]
        out["dx"][t] = dt[t] * (G @ B[t])
        out["dB"][t] = dt[t] * (G.T @ x[t])
        out["dC"][t] = Ss[t + 1].T @ dy[t]
        dexp[t] = float(x[t] @ (G @ B[t]))
        g[t] = float(a[t]) * float(np.sum(G.astype(np.float64) * Ss[t].astype(np.float64)))  # sums in double
    out["g"] = g
    out["dexp"] = dexp
    out["dh0"] = a[0] * G
    return out


def f32mm(a, b):
    return np.asarray(a, np.float32) @ np.asarray(b, np.float32)


def chunked(x, B, C, dy, dt, A, h0, Q=64, SUMS=np.float32, pair64=False, lin64=False, mm=f32mm):
    """pair64: the decay gradient's pair matrix M from C B^T and dy x^T in double (the decays, dt, every
    other product float32); lin64: its two linear terms x^T Gout B and dy . (Sin C) in double too; mm: the
    matrix products' arithmetic (float32 by default; bench/emu_ssd_limbs.py's bf16 limbs on tensor cores).
    Also returns the forward's y and final state in the same arithmetic."""
    L, P = x.shape
    N = B.shape[1]
    f32 = np.float32
    x, B, C, dy, h0 = (np.asarray(v, f32) for v in (x, B, C, dy, h0))
    dt32 = np.asarray(dt, f32)
    a = (dt32 * f32(A)).astype(f32)
    nch = (L + Q - 1) // Q
    # forward: the state entering every chunk
    Sin = [h0.copy()]
    parts = []
    y = np.zeros((L, P), f32)
    for c in range(nch):
        s0, s1 = c * Q, min(L, (c + 1) * Q)
        ac = a[s0:s1].astype(np.float64)
        cs = np.cumsum(ac)  # prefix sums in double
        tot = cs[-1]
        din = np.exp(cs).astype(f32)
        w = np.exp(tot - cs).astype(f32)  # exp(a(s+1) + .. + a(end))
        dec = f32(np.exp(tot))
        e = np.exp(np.tril(cs[:, None] - cs[None, :])).astype(f32)  # e[t, s] for s <= t
        e = np.tril(e)
        xs, Bs, Cs, dys, dts = x[s0:s1], B[s0:s1], C[s0:s1], dy[s0:s1], dt32[s0:s1]
        Sloc = mm(((w * dts)[:, None] * xs).T, Bs)
        y[s0:s1] = mm(np.tril(mm(Cs, Bs.T) * e * dts[None, :]), xs) + din[:, None] * mm(Cs, Sin[-1].T)
        parts.append((s0, s1, din, w, dec, e, xs, Bs, Cs, dys, dts))
        Sin.append((dec * Sin[-1] + Sloc).astype(f32))
    # backward: the chunks' state gradients in reverse, then every gradient chunk-locally
    dx, dB, dC = np.zeros_like(x), np.zeros_like(B), np.zeros_like(C)
    da = np.zeros(L, SUMS)
    dexp = np.zeros(L, f32)
    Gout = np.zeros((P, N), f32)
    for c in range(nch - 1, -1, -1):
        s0, s1, din, w, dec, e, xs, Bs, Cs, dys, dts = parts[c]
        Si = Sin[c]
        CB = mm(Cs, Bs.T)  # [t, s]
        DX = mm(dys, xs.T)  # [t, s] = dy(t) . x(s)
        if pair64:
            M = np.tril((Cs.astype(np.float64) @ Bs.T.astype(np.float64)) * e * dts[None, :] * (dys.astype(np.float64) @ xs.T.astype(np.float64)))
        else:
            M = np.tril(CB * e * dts[None, :] * DX)
        dx[s0:s1] = dts[:, None] * (mm(np.tril(CB * e).T, dys) + w[:, None] * mm(Bs, Gout.T))
        dB[s0:s1] = dts[:, None] * (mm(np.tril(e * DX).T, Cs) + w[:, None] * mm(xs, Gout))
        dC[s0:s1] = mm(np.tril(e * dts[None, :] * DX), Bs) + din[:, None] * mm(dys, Si)
        lt = np.float64 if lin64 else f32
        xGB = np.einsum("sp,pn,sn->s", xs.astype(lt), Gout.astype(lt), Bs.astype(lt))  # x(s)^T Gout B(s)
        yin = din * np.einsum("tp,pn,tn->t", dys.astype(lt), Si.astype(lt), Cs.astype(lt))  # dy(t) . (din Sin C(t))
        n = s1 - s0
        # d a(u) = sum_{s<u<=t} M[t,s]: column u of the suffix sums over t of the row prefix sums over s < u;
        # the terms float32 products, their sums over s, t and the four parts in SUMS (float32 or double)
        rowpre = np.concatenate([np.zeros((n, 1), SUMS), np.cumsum(M, axis=1, dtype=SUMS)[:, :-1]], axis=1)  # sum_{s<u} M[t,s]
        pair = np.array([rowpre[u:, u].sum(dtype=SUMS) for u in range(n)], SUMS)
        sloc_term = np.concatenate([[0.0], np.cumsum((w * dts * xGB).astype(SUMS), dtype=SUMS)[:-1]]).astype(SUMS)  # sum_{s<u}
        inter = np.cumsum(yin[::-1].astype(SUMS), dtype=SUMS)[::-1]  # sum_{t>=u}
        passing = SUMS(dec) * np.sum((Gout * Si).astype(SUMS), dtype=SUMS)
        da[s0:s1] = pair + inter + sloc_term + passing
        dexp[s0:s1] = M.sum(axis=0) / np.where(dts == 0, f32(1), dts) + w * xGB
        Gout = (dec * Gout + mm((din[:, None] * dys).T, Cs)).astype(f32)
    return {"dx": dx, "dB": dB, "dC": dC, "da": da, "dexp": dexp, "dh0": Gout, "a": a, "y": y, "hT": Sin[-1]}


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    d = np.linalg.norm(b)
    return np.linalg.norm(a - b) / (d if d > 0 else 1.0)


def run(seed, L, lpad, with_h0, P=64, N=128):
    rng = np.random.default_rng(seed)
    A = float(np.float32(-rng.uniform(0.2, 4.0)))  # a float32 value, the same on both sides
    dt = np.log1p(np.exp(rng.uniform(-3, 0.5, L)))
    x = rng.uniform(-1, 1, (L, P))
    x[:lpad] = 0
    B, C, dy = rng.uniform(-1, 1, (L, N)), rng.uniform(-1, 1, (L, N)), rng.uniform(-1, 1, (L, P))
    h0 = rng.uniform(-1, 1, (P, N)) if with_h0 else np.zeros((P, N))
    # the float32 inputs both sides see (the exact walk in float64 of the same float32 values)
    x, B, C, dy, h0 = (np.asarray(v, np.float32) for v in (x, B, C, dy, h0))
    dt = np.asarray(dt, np.float32)
    a = np.exp(dt.astype(np.float64) * np.float32(A))
    ex = walks(x, B, C, dy, dt, a, h0, np.float64)
    ddt_ex = ex["dexp"] + A * ex["g"]
    dA_ex = float(np.sum(dt.astype(np.float64) * ex["g"]))
    ck = chunked(x, B, C, dy, dt, A, h0)
    ddt_ck = ck["dexp"].astype(np.float64) + A * ck["da"].astype(np.float64)
    dA_ck = float(np.sum(dt.astype(np.float64) * ck["da"].astype(np.float64)))
    dA_v = {}
    for name, kw in (("dA sums in double", {}), ("dA pair in double", {"pair64": True}),
                     ("dA pair + linear in double", {"pair64": True, "lin64": True})):
        ckd = chunked(x, B, C, dy, dt, A, h0, SUMS=np.float64, **kw)
        dA_v[name] = abs(float(np.sum(dt.astype(np.float64) * ckd["da"])) - dA_ex) / abs(dA_ex)
    w32 = walks(x, B, C, dy, dt, np.exp(np.float32(dt) * np.float32(A)).astype(np.float32), h0, np.float32)
    dA_w32 = float(np.sum(dt.astype(np.float64) * w32["g"]))
    return {
        "dx": rel(ck["dx"], ex["dx"]), "dB": rel(ck["dB"], ex["dB"]), "dC": rel(ck["dC"], ex["dC"]),
        "ddt": rel(ddt_ck, ddt_ex), "dh0": rel(ck["dh0"], ex["dh0"]), "dA": abs(dA_ck - dA_ex) / abs(dA_ex), **dA_v,
        "dA f32 walks direct": abs(dA_w32 - dA_ex) / abs(dA_ex),
        "cond": float(np.sum(np.abs(dt.astype(np.float64) * ex["g"]))) / abs(dA_ex),
    }


def main():
    L = int(sys.argv[1]) if len(sys.argv) > 1 else 512
    seeds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    worst = {}
    for seed in range(seeds):
        for lpad in (0, L // 3):
            for with_h0 in (False, True):
                r = run(seed, L, lpad, with_h0)
                print(f"seed {seed} lpad {lpad:4d} h0 {int(with_h0)}: " + "  ".join(f"{k} {v:.2g}" for k, v in r.items()))
                for k, v in r.items():
                    worst[k] = max(worst.get(k, 0.0), v)
    print(f"L {L}, worst over {seeds} seeds x 2 paddings x 2 initial states: " + "  ".join(f"{k} {v:.2g}" for k, v in worst.items()))


if __name__ == "__main__":
    main()
