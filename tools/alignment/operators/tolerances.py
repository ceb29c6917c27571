"""Per-element rounding allowances of the operator alignment, derived from F32 rounding.

Every output and gradient passes when |microllm − pytorch| ≤ 1e-5 + 1e-5·|pytorch| +
rounding (compare.py). `rounding` is zero for the elementwise, normalization, softmax,
embedding and loss operators: microllm's CPU kernels accumulate their reductions in F64 and
PyTorch's vectorized F32 reductions stay within 1e-5 relative there (measured worst: a third
of the bound). Three operators get a term, each the first-order F32 error of one side,
doubled because each side rounds on its own (u = 2^-24, the F32 unit roundoff):

- linear: a sum of K products is off by at most λ·√K·u·Σ|terms| with probability better
  than 1 − 2·exp(−λ²/2) per element (Higham & Mary, "A new approach to probabilistic
  rounding error analysis", SIAM J. Sci. Comput. 2019); λ = 5. Σ|terms| is |x|·|W|ᵀ (+|b|)
  for out, |g|·|W| for grad_x, |g|ᵀ·|x| for grad_weight, Σ|g| for grad_bias.
- attention: each score s = Σ_d q·k/√D carries ε = (λ√D + 1)·u·Σ_d|q·k|/√D, and the softmax
  passes it on as δP_j = P_j·(δs_j − Σ_l P_l·δs_l). With large scores (the extreme kind:
  |s| ~ 100, where the last rounding of s alone is up to 6e-6) the output moves by more than 1e-5
  in any F32 implementation. The gradients follow the same chain (dP = dO·vᵀ,
  dS = P⊙(dP − Σ P·dP), dQ = dS·K/√D, dK = dSᵀ·Q/√D, dV = Pᵀ·dO); every step's bound is
  written out in attention_rounding().
- rope: the angle θ = position·inv_freq is formed in F32 on both sides (as Hugging Face
  does). inv_freq = 1/theta^(2i/D) takes two roundings (pow, divide), so two faithful
  implementations may differ by up to 2 ulp ≤ 4u relative, and each rounds the product
  once more (≤ u each): |δθ| ≤ 6u·|θ|. A pair rotated by angles δθ apart differs by
  |δθ|·‖(x_i, x_{i+D/2})‖. This only matters at large positions (θ in the thousands).
"""

from __future__ import annotations

import math

import numpy as np

from compare import Tolerance

U = 2.0 ** -24  # F32 unit roundoff
LAMBDA = 5.0  # probabilistic bound: failure probability ≤ 2·exp(−12.5) ≈ 7.5e-6 per element
SIDES = 2.0  # microllm and PyTorch each round on their own


def _abs64(a: np.ndarray) -> np.ndarray:
    return np.abs(a.astype(np.float64))


def linear_rounding(output: str, inputs: dict, grads: dict):
    x, w = _abs64(inputs["x"]), _abs64(inputs["weight"])  # (..., K), (N, K)
    if output == "out":
        k = w.shape[1] + ("bias" in inputs)
        terms = x @ w.T + (_abs64(inputs["bias"]) if "bias" in inputs else 0.0)
    else:
        g = _abs64(grads["out"])  # (..., N)
        rows_g, rows_x = g.reshape(-1, g.shape[-1]), x.reshape(-1, x.shape[-1])
        k, terms = {"grad_x": (w.shape[0], lambda: g @ w),
                    "grad_weight": (rows_g.shape[0], lambda: rows_g.T @ rows_x),
                    "grad_bias": (rows_g.shape[0], lambda: rows_g.sum(0))}[output]
        terms = terms()
    return f"2λ·u·√K·Σ|terms| (K={k}, λ={LAMBDA:g})", SIDES * LAMBDA * U * math.sqrt(k) * terms


def attention_rounding(output: str, inputs: dict, grads: dict, args: dict):
    """First-order F32 error of attention and its gradients, per element, for one side ×2.

    Per query row i and key j (per head): the score s_ij carries ε_ij = (λ√D + 1)·u·A_ij.
    Softmax: δP_ij = P_ij·((1 − P_ij)·δs_ij − Σ_{l≠j} P_il·δs_il), so
    |δP_ij| ≤ π_ij = P_ij·((1 − P_ij)·ε_ij + ē_i − P_ij·ε_ij) + (λ√S + 2)·u·P_ij with
    ē_i = Σ_l P_il·ε_il (the last term: exp and the normalizing sum). A nearly one-hot row
    is insensitive, and the bound sees it. Then, with every sum adding λ√n·u·Σ|terms|:
      out_i  = Σ_j P_ij·v_j                 Σ_j π_ij|v_j|
      dV_j   = Σ_i P_ij·dO_i                Σ_i π_ij|dO_i|            (i over T and the group)
      dP_ij  = dO_i·v_j                     ε'_ij = (λ√D + 1)·u·Σ_d|dO_i·v_j|
      Δ_i    = Σ_l P_il·dP_il               Σ_l (π_il|dP_il| + P_il·ε'_il)
      dS_ij  = P_ij·(dP_ij − Δ_i)           π_ij|dP_ij − Δ_i| + P_ij·(ε'_ij + δΔ_i) + 2u|dS_ij|
      dQ_i   = Σ_j dS_ij·k_j/√D             Σ_j δdS_ij|k_j|/√D
      dK_j   = Σ_i dS_ij·q_i/√D             Σ_i δdS_ij|q_i|/√D
    """
    q, k, v = (inputs[n].astype(np.float64) for n in ("q", "k", "v"))  # (B,H,T,D), (B,Hkv,S,D)
    H, T, D = q.shape[1:]
    Hkv, S = k.shape[1], k.shape[2]
    G = H // Hkv
    scale = args.get("scale") or 1.0 / math.sqrt(D)
    k, v = np.repeat(k, G, axis=1), np.repeat(v, G, axis=1)  # (B, H, S, D), head h reads h // G
    visible = np.ones((T, S), bool)
    if args.get("causal", True):  # queries at positions S-T..S-1
        visible = np.arange(S)[None, :] <= np.arange(S - T, S)[:, None]
    t = lambda x: np.swapaxes(x, -1, -2)
    s = np.where(visible, scale * q @ t(k), -np.inf)  # (B, H, T, S)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)  # zero where masked
    sums = lambda n: LAMBDA * math.sqrt(n) * U  # relative error of an n-term sum
    eps = (sums(D) + U) * scale * np.abs(q) @ t(np.abs(k))  # score error (B, H, T, S)
    e_bar = (p * eps).sum(-1, keepdims=True)
    pi = p * ((1 - p) * eps + e_bar - p * eps) + (sums(S) + 2 * U) * p  # |δP| bound
    group = lambda x: x.reshape(x.shape[0], Hkv, G, *x.shape[2:]).sum(2)  # (B,H,..) → (B,Hkv,..)
    rule = "first-order F32 error through the softmax, per element (tolerances.py)"
    if output == "out":
        return rule, SIDES * ((pi + sums(S) * p) @ np.abs(v))
    g = grads["out"].astype(np.float64)  # dO (B, H, T, D)
    if output == "grad_v":
        return rule, SIDES * group(t(pi + sums(G * T) * p) @ np.abs(g))
    dp = g @ t(v)  # (B, H, T, S)
    eps_dp = (sums(D) + U) * (np.abs(g) @ t(np.abs(v)))
    delta = (p * dp).sum(-1, keepdims=True)
    delta_err = (pi * np.abs(dp) + p * eps_dp + sums(S) * p * np.abs(dp)).sum(-1, keepdims=True)
    ds = p * (dp - delta)
    ds_err = pi * np.abs(dp - delta) + p * (eps_dp + delta_err) + 2 * U * np.abs(ds)
    if output == "grad_q":
        return rule, SIDES * scale * ((ds_err + sums(S) * np.abs(ds)) @ np.abs(k))
    if output == "grad_k":
        return rule, SIDES * scale * group(t(ds_err + sums(G * T) * np.abs(ds)) @ np.abs(q))
    raise ValueError(f"attention has no output '{output}'")


def rope_rounding(output: str, inputs: dict, grads: dict, args: dict):
    x = inputs["x"] if output == "out" else grads["out"]  # the rotated values (B, H, T, D)
    D = x.shape[-1]
    half = D // 2
    inv_freq = 1.0 / args["theta"] ** (np.arange(0, D, 2) / D)  # (D/2)
    theta = np.abs(inputs["positions"].astype(np.float64))[:, None] * inv_freq  # (T, D/2)
    x = x.astype(np.float64)
    pair = np.sqrt(x[..., :half] ** 2 + x[..., half:] ** 2)  # (B, H, T, D/2)
    err = 6 * U * theta * pair
    return "6u·|θ|·‖pair‖", np.concatenate([err, err], axis=-1)


def tolerance(op: str, output: str, inputs: dict, grads: dict, args: dict):
    """(Tolerance, rounding array or None) for one output of a case of microllm operator op."""
    if op == "linear":
        rule, rounding = linear_rounding(output, inputs, grads)
    elif op == "attention":
        rule, rounding = attention_rounding(output, inputs, grads, args)
    elif op == "rope":
        rule, rounding = rope_rounding(output, inputs, grads, args)
    else:
        return Tolerance(), None
    return Tolerance(rounding_rule=rule), rounding
