// Round 27 experiment, kept with its output (docs/data/logs/round27_cublaslt_dgemm.txt); not built
// by Bazel. Built and run by hand: nvcc -O2 -std=c++17 -arch=sm_90a -o lt_dgemm lt_dgemm.cu
// -lcublasLt -lcublas && ./lt_dgemm
// Experiment (not part of the library): winograd's 36 batched DGEMMs, cuBLAS's default kernel
// against every cuBLASLt heuristic candidate, in both orientations.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <vector>
#define CK(x) do { auto e = (x); if ((int)e != 0) { printf("error %d at %s:%d\n", (int)e, __FILE__, __LINE__); return 1; } } while (0)
int main() {
  struct S { int b, c, h; } shapes[] = {{32,64,56},{32,128,28},{32,256,14},{32,512,9},{1,128,256},{64,32,33}};
  cublasHandle_t h; CK(cublasCreate(&h));
  cublasLtHandle_t lt; CK(cublasLtCreate(&lt));
  void* ws; size_t wsb = 64 << 20; CK(cudaMalloc(&ws, wsb));
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  for (auto s : shapes) {
    const int out = s.h - 2, tiles = (out + 3) / 4, T = s.b * tiles * tiles, C = s.c, P = 36;
    double *u, *v, *m;
    CK(cudaMalloc(&u, 8ull * P * C * C)); CK(cudaMalloc(&v, 8ull * P * C * T)); CK(cudaMalloc(&m, 8ull * P * C * T));
    cudaMemset(u, 0x3f, 8ull * P * C * C); cudaMemset(v, 0x3f, 8ull * P * C * T);
    const double one = 1, zero = 0;
    auto time = [&](auto f) { for (int i = 0; i < 3; ++i) f(); cudaEventRecord(e0); for (int i = 0; i < 20; ++i) f(); cudaEventRecord(e1); cudaEventSynchronize(e1); float ms; cudaEventElapsedTime(&ms, e0, e1); return ms / 20 * 1000; };
    float base1 = time([&] { cublasDgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, T, C, C, &one, v, T, (long long)C * T, u, C, (long long)C * C, &zero, m, T, (long long)C * T, P); });
    float base2 = time([&] { cublasDgemmStridedBatched(h, CUBLAS_OP_T, CUBLAS_OP_T, C, T, C, &one, u, C, (long long)C * C, v, T, (long long)C * T, &zero, m, C, (long long)C * T, P); });
    printf("shape b%d c%d h%d T=%d: cublas NN %.1f us, TT %.1f us (%.1f GFLOP)\n", s.b, s.c, s.h, T, base1, base2, 2.0 * P * C * C * T / 1e9);
    for (int orient = 0; orient < 2; ++orient) {
      cublasLtMatmulDesc_t d; CK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_64F, CUDA_R_64F));
      cublasOperation_t op = orient ? CUBLAS_OP_T : CUBLAS_OP_N;
      CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &op, sizeof(op)));
      CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &op, sizeof(op)));
      // A, B, C layouts (rows x cols as stored, column-major).
      int ar = orient ? C : T, ac = C, br = orient ? T : C, bc = orient ? C : C;
      if (orient) { ar = C; ac = C; br = T; bc = C; } else { ar = T; ac = C; br = C; bc = C; }
      const double* A = orient ? u : v; const double* B = orient ? v : u;
      long long sa = orient ? (long long)C * C : (long long)C * T, sb = orient ? (long long)C * T : (long long)C * C;
      int cr = orient ? C : T, cc = orient ? T : C;
      cublasLtMatrixLayout_t la, lb, lc;
      CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_64F, ar, ac, ar));
      CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_64F, br, bc, br));
      CK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_64F, cr, cc, cr));
      long long sc = (long long)C * T;
      for (auto [l, st] : {std::pair{la, sa}, {lb, sb}, {lc, sc}}) {
        CK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &P, sizeof(P)));
        CK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &st, sizeof(st)));
      }
      cublasLtMatmulPreference_t pref; CK(cublasLtMatmulPreferenceCreate(&pref));
      CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb)));
      cublasLtMatmulHeuristicResult_t r[32]; int n = 0;
      CK(cublasLtMatmulAlgoGetHeuristic(lt, d, la, lb, lc, lc, pref, 32, r, &n));
      float best = 1e9; int bi = -1;
      for (int i = 0; i < n; ++i) {
        float t = time([&] { cublasLtMatmul(lt, d, &one, A, la, B, lb, &zero, m, lc, m, lc, &r[i].algo, ws, wsb, 0); });
        if (cudaGetLastError() != cudaSuccess) continue;
        int tile = 0, splitk = 0; size_t w;
        cublasLtMatmulAlgoConfigGetAttribute(&r[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile), &w);
        cublasLtMatmulAlgoConfigGetAttribute(&r[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof(splitk), &w);
        printf("   %s algo %2d tile %3d splitk %2d ws %8zu: %.1f us\n", orient ? "TT" : "NN", i, tile, splitk, r[i].workspaceSize, t);
        if (t < best) { best = t; bi = i; }
      }
      printf("  %s best of %d heuristics: %.1f us (#%d)\n", orient ? "TT" : "NN", n, best, bi);
    }
    cudaFree(u); cudaFree(v); cudaFree(m);
  }
  return 0;
}
