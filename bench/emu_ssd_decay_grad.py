"""The CUDA SSD backward's decay gradient in other number formats, emulated in numpy (issue 40; no GPU):
what the backward's walks would give in float32 instead of double, per form of the decay's gradient.

One (batch row, head) of a Mamba2-like layer (headdim 64, dstate 128, random x / B / C / dy in [-1, 1],
dt = softplus(U(-3, 0.5)), A in [-4, -0.2]; with and without a left padding of L / 3 steps of x = 0):
the walks S (forward) and G (reverse) in float64 or float32; the per-step sums r(t) = <dy C^T, S(t)>,
w(t) = dt <x B^T, G(t)>, q(t) = <G(t), S(t)> accumulated in double from those states (as the kernels
sum them); then the decay's gradient g(t) = a(t) <G(t), S(t-1)> by
  suffix          q(t) = r(t) + q(t+1) - w(t+1) over the whole sequence, g = q - w (the kernels' form)
  direct          a(t) <G(t), S(t-1)> itself (needs both walks' states at once: none of the kernels has)
  chunks K sfx    the suffix form restarted at each K-step chunk's last step from q taken directly there
  chunks K mixed  the same with the prefix form g(t) = g(t-1) + w(t-1) - r(t-1) (restarted at each
                  chunk's first step) in the first half of each chunk
and prints each one's relative error of dA = sum_t dt(t) g(t) against the float64 exact value.

    python3 bench/emu_ssd_decay_grad.py [L] [seeds]     (L 512, 3 seeds: ~3 s; L 2048, 2 seeds: ~15 s)
"""
import sys
import numpy as np

def run(seed, L=2048, P=64, N=128, K=(32, 64, 256), lpad=0):
    rng = np.random.default_rng(seed)
    A = -rng.uniform(0.2, 4.0)
    raw = rng.uniform(-3, 0.5, L)
    dt = np.log1p(np.exp(raw))
    x = rng.uniform(-1, 1, (L, P)); x[:lpad] = 0
    B = rng.uniform(-1, 1, (L, N)); C = rng.uniform(-1, 1, (L, N)); dy = rng.uniform(-1, 1, (L, P))
    a = np.exp(dt * A)
    out = {}
    for name, ft in (("f64", np.float64), ("f32", np.float32)):
        f = lambda v: np.asarray(v, dtype=ft)
        S = np.zeros((P, N), ft); Ss = np.empty((L, P, N), ft)
        xf, Bf, Cf, dyf, af, dtf = f(x), f(B), f(C), f(dy), f(a), f(dt)
        for t in range(L):
            S = af[t] * S + (dtf[t] * xf[t])[:, None] * Bf[t][None, :]
            Ss[t] = S
        G = np.zeros((P, N), ft); Gs = np.empty((L, P, N), ft)
        for t in range(L - 1, -1, -1):
            G = (af[t + 1] * G if t + 1 < L else G) + dyf[t][:, None] * Cf[t][None, :]
            Gs[t] = G
        out[name] = (Ss, Gs)
    S64, G64 = out["f64"]
    Sprev = np.concatenate([np.zeros((1, P, N)), S64[:-1]])
    g_exact = a * np.einsum("tpn,tpn->t", G64, Sprev)
    dA_exact = np.sum(dt * g_exact)
    res = {}
    def sums(Ss, Gs):  # per-step r and w from the walks' states (accumulated in double, as the kernels do)
        Sd, Gd = Ss.astype(np.float64), Gs.astype(np.float64)
        r = np.einsum("tp,tpn,tn->t", dy, Sd, C)
        w = dt * np.einsum("tp,tpn,tn->t", x, Gd, B)
        q = np.einsum("tpn,tpn->t", Gd, Sd)
        return r, w, q
    def suffix(r, w, restart_q=None, Kc=None):
        g = np.empty(L); q = 0.0
        for t in range(L - 1, -1, -1):
            if t == L - 1:
                q = r[t]
            elif Kc and (t + 1) % Kc == 0:  # t the last step of a chunk: q(t) direct
                q = restart_q[t]
            else:
                q = r[t] + q - w[t + 1]
            g[t] = q - w[t]
        return g
    def prefix(r, w, q, Kc):
        g = np.empty(L)
        for t in range(L):
            g[t] = q[t] - w[t] if t % Kc == 0 else g[t - 1] + w[t - 1] - r[t - 1]
        return g
    for name in ("f64", "f32"):
        r, w, q = sums(*out[name])
        res[f"{name} walks, suffix"] = np.sum(dt * suffix(r, w))
        if name == "f32":
            Ss, Gs = out[name]
            Sp = np.concatenate([np.zeros((1, P, N)), Ss[:-1].astype(np.float64)])
            res["f32 walks, direct"] = np.sum(dt * a * np.einsum("tpn,tpn->t", Gs.astype(np.float64), Sp))
            for k in K:
                gs, gp = suffix(r, w, q, k), prefix(r, w, q, k)
                near = (np.arange(L) % k) < k // 2
                res[f"f32 chunks {k} sfx"] = np.sum(dt * gs)
                res[f"f32 chunks {k} mixed"] = np.sum(dt * np.where(near, gp, gs))
    return dA_exact, {k: abs(v - dA_exact) / abs(dA_exact) for k, v in res.items()}

if __name__ == "__main__":
    L = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
    worst = {}
    for seed in range(int(sys.argv[2]) if len(sys.argv) > 2 else 4):
        for lpad in (0, L // 3):
            ex, errs = run(seed, L=L, lpad=lpad)
            print(seed, lpad, f"dA {ex:.4g}", "  ".join(f"{k}: {v:.1e}" for k, v in errs.items()), flush=True)
            for k, v in errs.items():
                worst[k] = max(worst.get(k, 0), v)
    print("worst:", "  ".join(f"{k}: {v:.1e}" for k, v in worst.items()))
