"""Implicit-GEMM 2D convolution in Triton, compiled ahead of time by tools/triton_compile.py.

The convolution y[b,o,i,j] = sum_{c,p,q} x[b,c,i+p,j+q] * w[o,c,p,q] (stride 1, no padding,
NCHW / OIHW / NCHW, fp32) read as a GEMM  Y[m, n] = sum_k A[m, k] * B[k, n]  with
  m = (b, i, j)  over M = B*OH*OW output pixels,
  n = o          over N = Cout,
  k = (c, p, q)  over K = Cin*Kh*Kw,
A[m, k] = x[b, c, i+p, j+q] gathered on the fly (never materialised) and B[k, n] = w[n, k], which
is w's own memory order. Every x offset splits into a row part that depends only on m and a
column part that depends only on k:
  x_off(m, k) = (b*CHW + i*W + j) + (c*HW + p*W + q),
so one program computes both vectors once per tile and adds them as a broadcast.

Accuracy (the bar is |y - y64| <= 1e-3 + 1e-3*|y64| against fp64, on every element):
  * tl.dot(..., input_precision="tf32x3") splits each operand into tf32 hi + lo parts and sums
    three tf32 products (hi*hi + hi*lo + lo*hi): about 2^-22 relative error per product, random
    in sign, where plain tf32 (2^-11) misses the bar by 60-470x. Triton 3.6 lowers it per K tile
    (seen in the TTGIR) as three tensor-core products started from zero, the tile's 16-term sum
    then added to `acc` with an ordinary fp32 add.
  * One fp32 accumulator over K = 131072 terms (the 32x32-kernel, 128-channel case) drifts: each
    add rounds by up to 2^-24 of a partial sum that grows like sqrt(k). Simulated in numpy for
    2000 sums of products of inputs uniform in [-1, 1): one fp32 accumulator over 131072
    products is off by rms 7.5e-4, max 4.5e-3 (cuDNN's fp32 sum, measured 7.5x over the bar on
    that case); over the 8192 16-term tile sums this kernel adds, rms 1.9e-4, max 1.2e-3, still
    over the 1e-3 floor of the bar. So the fp32 accumulator only ever holds one chunk of
    CHUNK = BLOCK_K*CHUNK_TILES = 256 terms (16 tile sums) and each chunk's total is folded into
    an fp64 accumulator: the accumulation error grows like sqrt(n*L) instead of n for n
    additions in chunks of L, 22x less here (rms ~1e-5), and what remains is the products'
    error (2^-22 relative, random), estimated at about a tenth of the bar. fp64 rather than a
    Kahan-compensated fp32 pair: the same registers (one fp64 = two fp32), one DADD per element
    per chunk (nothing next to the 3*256 tensor-core MACs it follows), and no reliance on the
    compiler keeping the compensation's operation order.
  * Masked lanes load 0.0, so padding rows/columns of the GEMM add exact zeros.

Offsets are int32: the C++ side (conv/algorithms/triton/triton_igemm.cc) refuses shapes where any offset a
lane can form, masked lanes included, reaches 2^31.
"""
import triton
import triton.language as tl


@triton.jit
def igemm_conv(x_ptr, w_ptr, y_ptr,  # fp32 NCHW input, OIHW filter, NCHW output
               M, N, K,  # GEMM sizes: B*OH*OW, Cout, Cin*Kh*Kw
               W, OW, OHW, HW, CHW, KW, KHW,  # image width, output width, plane sizes, Kw, Kh*Kw
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               CHUNK_TILES: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N

    b = offs_m // OHW
    pix = offs_m % OHW  # i*OW + j
    i = pix // OW
    j = pix % OW
    x_row = b * CHW + i * W + j  # offset of x[b, 0, i, j]
    w_col = offs_n * K  # offset of w[n, 0, 0, 0]

    CHUNK: tl.constexpr = BLOCK_K * CHUNK_TILES
    acc64 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float64)
    for k0 in range(0, K, CHUNK):
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for t in range(0, CHUNK_TILES):
            offs_k = k0 + t * BLOCK_K + tl.arange(0, BLOCK_K)
            mask_k = offs_k < K
            c = offs_k // KHW
            r = offs_k % KHW
            p = r // KW
            q = r % KW
            x_col = c * HW + p * W + q  # offset of x[0, c, p, q]
            a = tl.load(x_ptr + (x_row[:, None] + x_col[None, :]),
                        mask=mask_m[:, None] & mask_k[None, :], other=0.0)
            bt = tl.load(w_ptr + (w_col[None, :] + offs_k[:, None]),
                         mask=mask_k[:, None] & mask_n[None, :], other=0.0)
            acc = tl.dot(a, bt, acc, input_precision="tf32x3")
        acc64 += acc.to(tl.float64)

    y_off = (b * N * OHW + pix)[:, None] + (offs_n * OHW)[None, :]
    tl.store(y_ptr + y_off, acc64.to(tl.float32), mask=mask_m[:, None] & mask_n[None, :])


# What tools/triton_compile.py builds from this file: one artifact set per entry, written as
# <name>.cubin, <name>.ptx and <name>.json. The signature lists every parameter in order; the
# "constexpr" ones are folded into the code and are not kernel parameters at run time. Two
# tile shapes: a wide one for many output channels and a narrow one for few (N = Cout <= 32),
# where a 64-wide N tile would be mostly masked lanes. BLOCK_K = 16: with 32, ptxas spills (255
# registers; every gathered element carries its own 64-bit address); both configs compile to
# 214 and 128 registers without spills. The wide one's 5 stages take 56 KB of shared memory,
# above the 48 KB default, so it needs (and exercises) the loader's opt-in.
_SIGNATURE = {
    "x_ptr": "*fp32", "w_ptr": "*fp32", "y_ptr": "*fp32",
    "M": "i32", "N": "i32", "K": "i32",
    "W": "i32", "OW": "i32", "OHW": "i32", "HW": "i32", "CHW": "i32", "KW": "i32", "KHW": "i32",
    "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "BLOCK_K": "constexpr",
    "CHUNK_TILES": "constexpr",
}

AOT_KERNELS = [
    dict(name="igemm_conv_m128_n64", fn=igemm_conv, signature=_SIGNATURE,
         constexprs=dict(BLOCK_M=128, BLOCK_N=64, BLOCK_K=16, CHUNK_TILES=16),
         options=dict(num_warps=8, num_stages=5)),
    dict(name="igemm_conv_m64_n32", fn=igemm_conv, signature=_SIGNATURE,
         constexprs=dict(BLOCK_M=64, BLOCK_N=32, BLOCK_K=16, CHUNK_TILES=16),
         options=dict(num_warps=4, num_stages=4)),
]
