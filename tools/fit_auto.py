#!/usr/bin/env python3
"""Fits the "auto" choice to measured benchmark runs and reports the crossovers.

Each algorithm's EstimateSeconds is a model of its own; auto multiplies it by a per-algorithm
calibration factor, its calibration() member (next to its cost model in the
variant's own file under conv/algorithms/ or tools/lab/). This tool reads benchmark JSON files (bin/benchmark
--json_out, with the estimate_ms column), fits each factor as the geometric mean of measured /
estimated time over every case the algorithm passed, and shows, per case, the fastest passing
variant, what calibrated auto would pick, and how much slower that is.

  tools/fit_auto.py docs/data/roundN_kernelbot.json docs/data/roundN_cnn.json [--emit]
  tools/fit_auto.py --winograd docs/data/round2[4-6]_cnn*.json

--emit prints each variant's factor, to be written into its calibration(). --winograd instead fits the three
coefficients of winograd's cost model (conv/algorithms/winograd/winograd_plan.cc: bytes / B + GEMM flops / F + fixed)
to its measured times by least squares on the relative error, and prints them with each run's
fitted / measured ratio; the byte and flop counts below mirror EstimateCost there.
"""
import json
import math
import sys


def winograd_terms(c):
    """Bytes and GEMM flops of winograd on case c, as conv/algorithms/winograd/winograd_plan.cc counts them."""
    b, ci, co, h, w = c["batch"], c["in_channels"], c["out_channels"], c["height"], c["width"]
    oh, ow = h - 2, w - 2
    tiles = b * math.ceil(oh / 4) * math.ceil(ow / 4)
    u, v, m = 36 * co * ci * 8, 36 * ci * tiles * 8, 36 * co * tiles * 8
    bytes_ = 4 * (co * ci * 9 + b * ci * h * w + b * co * oh * ow) + 2 * (u + v + m)
    return bytes_, 2.0 * 36 * co * ci * tiles


def solve3(a, y):
    """x with a x = y for a 3x3 system (Gaussian elimination with partial pivoting)."""
    m = [row[:] + [yy] for row, yy in zip(a, y)]
    for i in range(3):
        p = max(range(i, 3), key=lambda r: abs(m[r][i]))
        m[i], m[p] = m[p], m[i]
        for r in range(i + 1, 3):
            f = m[r][i] / m[i][i]
            m[r] = [x - f * z for x, z in zip(m[r], m[i])]
    x = [0.0] * 3
    for i in (2, 1, 0):
        x[i] = (m[i][3] - sum(m[i][j] * x[j] for j in range(i + 1, 3))) / m[i][i]
    return x


def fit_winograd(files):
    runs = []  # (name, seconds, bytes, flops)
    for f in files:
        d = json.load(open(f))
        cases = {c["case"]: c for c in d["cases"]}
        for r in d["results"]:
            if r["variant"] == "winograd" and r.get("pass") and not r.get("error"):
                c = cases[r["case"]]
                runs.append((c["name"], r["ms"] * 1e-3) + winograd_terms(c))
    # Minimise sum ((bytes k0 + flops k1 + k2) / t - 1)^2: normal equations of the rows / t.
    rows = [[b / t, fl / t, 1 / t] for (_, t, b, fl) in runs]
    ata = [[sum(r[i] * r[j] for r in rows) for j in range(3)] for i in range(3)]
    aty = [sum(r[i] for r in rows) for i in range(3)]
    k = solve3(ata, aty)
    print(f"winograd model: {1 / k[0]:.3g} B/s, {1 / k[1]:.3g} flop/s, fixed {k[2] * 1e6:.1f} us "
          f"({len(runs)} runs)")
    for name, t, b, fl in runs:
        print(f"  {name:32s} measured {t * 1e3:.3f} ms   fitted / measured "
              f"{(b * k[0] + fl * k[1] + k[2]) / t:.3f}")


def main(argv):
    if "--winograd" in argv:
        fit_winograd([a for a in argv[1:] if not a.startswith("--")])
        return
    emit = "--emit" in argv
    files = [a for a in argv[1:] if not a.startswith("--")]
    rows = []  # (file, case name, variant, ms, estimate_ms)
    for f in files:
        d = json.load(open(f))
        names = {c["case"]: c["name"] for c in d["cases"]}
        for r in d["results"]:
            if r.get("error") or not r.get("pass"):
                continue
            est = r.get("estimate_ms")
            rows.append((f, names[r["case"]], r["variant"], r["ms"], est))
    factors = {}
    for v in sorted({r[2] for r in rows}):
        ratios = [ms / est for (_, _, var, ms, est) in rows
                  if var == v and est and est > 0 and math.isfinite(est)]
        if ratios:
            factors[v] = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
    print("calibration factors (measured / model, geometric mean):")
    for v, k in factors.items():
        print(f"  {v:24s} {k:8.3f}")
    print("\nper case: fastest passing variant vs calibrated auto")
    worst = 1.0
    cases = sorted({(r[0], r[1]) for r in rows})
    for f, name in cases:
        cand = [(var, ms, est) for (ff, nn, var, ms, est) in rows
                if ff == f and nn == name and var in factors]
        if not cand:
            continue
        best = min(cand, key=lambda c: c[1])
        pick = min(cand, key=lambda c: c[2] * factors[c[0]])
        loss = pick[1] / best[1]
        worst = max(worst, loss)
        print(f"  {name:32s} best {best[0]:22s} {best[1]:8.3f} ms   auto {pick[0]:22s} "
              f"{pick[1]:8.3f} ms   {loss:5.2f}x")
    print(f"\nworst auto / best: {worst:.2f}x")
    if emit:
        print("\ncalibration() of each variant, fitted from " + ", ".join(files) + ":")
        for v, k in factors.items():
            print(f"  {v:24s} {k:.3f}")


if __name__ == "__main__":
    main(sys.argv)
