// The U-K acceleration of B states in one XLA FFI call, the batch the minor axis: MuJoCo's
// sparse M = Lᵀ D L following the elimination tree (parents), then the constraint force
// through the Gram matrix of W = D^{-1/2} L⁻ᵀ Aᵀ (rows normalised, pivots at or below
// `floor` dropped), as benchmarks/batch_last.py's lane_solve. Every scalar step is a loop over
// a chunk of lanes that the compiler vectorizes. A measurement prototype, not library code.
#include <cmath>
#include <cstdint>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

constexpr int C = 32;  // lanes per chunk (8: 8.9, 16: 6.3, 32: 4.5, 64: 5.0 µs per Cassie solve, first version)

static ffi::Error UkLanesImpl(ffi::Buffer<ffi::F64> M, ffi::Buffer<ffi::F64> Q, ffi::Buffer<ffi::F64> A,
                              ffi::Buffer<ffi::F64> b, ffi::Buffer<ffi::S64> parents, double floor,
                              ffi::ResultBuffer<ffi::F64> out) {
  const auto dims = A.dimensions();  // (p, n, B)
  const int64_t p = dims[0], n = dims[1], B = dims[2];
  if (B % C) return ffi::Error::InvalidArgument("the batch must be a multiple of 32");
  const double* m = M.typed_data();
  const double* q = Q.typed_data();
  const double* a = A.typed_data();
  const double* bb = b.typed_data();
  const int64_t* par = parents.typed_data();
  double* x_out = out->typed_data();
  std::vector<std::vector<int>> anc(n);
  for (int k = 0; k < n; ++k)
    for (int64_t j = par[k]; j >= 0; j = par[j]) anc[k].push_back(int(j));
  std::vector<double> w(n * n * C), x(n * C), W(p * n * C), G(p * p * C), r(p * C), s(p * C), z(n * C), D(n * C);
  auto E = [&](int i, int j) { return &w[(i * n + j) * C]; };
  for (int64_t b0 = 0; b0 < B; b0 += C) {
    for (int k = 0; k < n; ++k) {
      for (int l = 0; l < C; ++l) E(k, k)[l] = m[(k * n + k) * B + b0 + l];
      for (int j : anc[k])
        for (int l = 0; l < C; ++l) E(k, j)[l] = m[(k * n + j) * B + b0 + l];
    }
    // M = Lᵀ D L, leaves first (mj_factorM)
    for (int k = n - 1; k >= 0; --k) {
      double* dk = E(k, k);
      const auto& ak = anc[k];
      for (size_t ai = 0; ai < ak.size(); ++ai) {
        int i = ak[ai];
        double tmp[C];
        for (int l = 0; l < C; ++l) tmp[l] = E(k, i)[l] / dk[l];
        for (int l = 0; l < C; ++l) E(i, i)[l] -= tmp[l] * E(k, i)[l];
        for (size_t aj = ai + 1; aj < ak.size(); ++aj) {
          int j = ak[aj];
          for (int l = 0; l < C; ++l) E(i, j)[l] -= tmp[l] * E(k, j)[l];
        }
      }
      for (int i : ak)
        for (int l = 0; l < C; ++l) E(k, i)[l] /= dk[l];
      for (int l = 0; l < C; ++l) D[k * C + l] = dk[l];
    }
    // y ↦ L⁻ᵀ y (leaves first) and y ↦ L⁻¹ y (root first), on one vector of lanes
    auto solve_transposed = [&](double* y) {
      for (int k = n - 1; k >= 0; --k)
        for (int i : anc[k])
          for (int l = 0; l < C; ++l) y[i * C + l] -= E(k, i)[l] * y[k * C + l];
    };
    auto solve = [&](double* y) {
      for (int k = 0; k < n; ++k)
        for (int i : anc[k])
          for (int l = 0; l < C; ++l) y[k * C + l] -= E(k, i)[l] * y[i * C + l];
    };
    for (int k = 0; k < n; ++k)
      for (int l = 0; l < C; ++l) x[k * C + l] = q[k * B + b0 + l];
    solve_transposed(x.data());
    for (int k = 0; k < n * C; ++k) x[k] /= D[k];
    solve(x.data());
    if (p) {
      for (int k = 0; k < n * C; ++k) z[k] = 1.0 / std::sqrt(D[k]);  // D^{-1/2}
      for (int i = 0; i < p; ++i) {
        double* wi = &W[i * n * C];
        for (int k = 0; k < n; ++k)
          for (int l = 0; l < C; ++l) wi[k * C + l] = a[(i * n + k) * B + b0 + l];
        solve_transposed(wi);
        for (int k = 0; k < n * C; ++k) wi[k] *= z[k];
      }
      for (int i = 0; i < p; ++i) {
        for (int l = 0; l < C; ++l) r[i * C + l] = bb[i * B + b0 + l];
        for (int k = 0; k < n; ++k)
          for (int l = 0; l < C; ++l) r[i * C + l] -= a[(i * n + k) * B + b0 + l] * x[k * C + l];
        for (int j = 0; j <= i; ++j) {
          double g[C] = {};
          for (int k = 0; k < n; ++k)
            for (int l = 0; l < C; ++l) g[l] += W[(i * n + k) * C + l] * W[(j * n + k) * C + l];
          for (int l = 0; l < C; ++l) G[(i * p + j) * C + l] = G[(j * p + i) * C + l] = g[l];
        }
      }
      // normalise, then LDLᵀ of the Gram matrix with the pivots at or below `floor` dropped
      double largest[C] = {};
      for (int i = 0; i < p; ++i)
        for (int l = 0; l < C; ++l) largest[l] = std::fmax(largest[l], G[(i * p + i) * C + l]);
      const double tiny = std::pow(10.0 * double(p) * 2.220446049250313e-16, 2);
      for (int i = 0; i < p; ++i)
        for (int l = 0; l < C; ++l) {
          double gi = G[(i * p + i) * C + l];
          s[i * C + l] = gi > tiny * largest[l] ? std::sqrt(gi) : 0.0;
        }
      for (int i = 0; i < p; ++i)
        for (int j = 0; j < p; ++j)
          for (int l = 0; l < C; ++l) {
            double si = s[i * C + l], sj = s[j * C + l];
            G[(i * p + j) * C + l] = (si > 0 && sj > 0) ? G[(i * p + j) * C + l] / (si * sj) : 0.0;
          }
      for (int i = 0; i < p; ++i)
        for (int l = 0; l < C; ++l) r[i * C + l] = s[i * C + l] > 0 ? r[i * C + l] / s[i * C + l] : 0.0;
      std::vector<double> inv(p * C);
      for (int j = 0; j < p; ++j) {
        for (int l = 0; l < C; ++l) {
          double pivot = G[(j * p + j) * C + l];
          inv[j * C + l] = pivot > floor ? 1.0 / pivot : 0.0;
        }
        // the rows below the pivot take their update from column j as it stood (the lower
        // triangle is kept: G[k][j] for k > j), and then hold L's column in its place
        for (int i = p - 1; i > j; --i) {
          double col[C];
          for (int l = 0; l < C; ++l) col[l] = G[(i * p + j) * C + l] * inv[j * C + l];
          for (int k = j + 1; k <= i; ++k)
            for (int l = 0; l < C; ++l) G[(i * p + k) * C + l] -= col[l] * G[(k * p + j) * C + l];
          for (int l = 0; l < C; ++l) G[(i * p + j) * C + l] = col[l];
        }
      }
      for (int i = 0; i < p; ++i)
        for (int j = 0; j < i; ++j)
          for (int l = 0; l < C; ++l) r[i * C + l] -= G[(i * p + j) * C + l] * r[j * C + l];
      for (int i = 0; i < p * C; ++i) r[i] *= inv[i];
      for (int i = p - 1; i >= 0; --i)
        for (int j = i + 1; j < p; ++j)
          for (int l = 0; l < C; ++l) r[i * C + l] -= G[(j * p + i) * C + l] * r[j * C + l];
      for (int i = 0; i < p; ++i)
        for (int l = 0; l < C; ++l) r[i * C + l] = s[i * C + l] > 0 ? r[i * C + l] / s[i * C + l] : 0.0;
      // q̈ = x + L⁻¹ D^{-1/2} W λ (z holds D^{-1/2})
      for (int k = 0; k < n; ++k)
        for (int l = 0; l < C; ++l) {
          double sum = 0.0;
          for (int i = 0; i < p; ++i) sum += W[(i * n + k) * C + l] * r[i * C + l];
          z[k * C + l] *= sum;
        }
      solve(z.data());
      for (int k = 0; k < n * C; ++k) x[k] += z[k];
    }
    for (int k = 0; k < n; ++k)
      for (int l = 0; l < C; ++l) x_out[k * B + b0 + l] = x[k * C + l];
  }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(UkLanes, UkLanesImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::S64>>()
                                  .Attr<double>("floor")
                                  .Ret<ffi::Buffer<ffi::F64>>());
