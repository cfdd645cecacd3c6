// The linear algebra of one contact solve at fixed modes (`_unilateral._dense_solve`, whose
// formulas and cut-offs this follows), for a batch of states in one XLA FFI call, one state
// after another: M = Lᵀ D L, factored from the leaves (a tree's M keeps its pattern; the XLA
// route's Cholesky factor from the root fills it), F = Lᵀ D^½; one substitution for the applied
// forces, every row and the sliding friction's directions; the pseudo-inverse of the rows that
// the modes close, only those that are not zero, through a basis of them (their Gram matrix's
// Cholesky factor with diagonal pivoting; the minimum-norm solution where some are dependent),
// a one-sided Jacobi SVD where that basis is ill-conditioned; the sliding contacts' coupling by
// Gauss–Jordan with partial pivoting; one substitution back. Built and called by `_native.py`
// and `_unilateral.py`.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr double NaN = std::numeric_limits<double>::quiet_NaN();
constexpr double EPS = std::numeric_limits<double>::epsilon();

// Σ a[k] b[k] in eight running sums: without reassociation (no -ffast-math) a single sum waits on
// each addition before the next; eight make the dense solve's reductions two vectors' chains
inline double dot(const double* a, const double* b, int n) {
  double s[8] = {};
  int k = 0;
  for (; k + 8 <= n; k += 8)
    for (int l = 0; l < 8; ++l) s[l] += a[k + l] * b[k + l];
  for (int l = 0; k < n; ++k, ++l) s[l] += a[k] * b[k];
  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

// The lower Cholesky factor `L` of the n × n `M` (row-major, from its lower triangle; the upper
// one of `L` zero); false where `M` is not positive definite.
bool cholesky(int n, const double* M, double* L) {
  bool positive = true;
  for (int j = 0; j < n; ++j) {
    double t = M[j * n + j] - dot(&L[j * n], &L[j * n], j);
    positive = positive && t > 0;
    double g = std::sqrt(t);
    L[j * n + j] = g;
    for (int i = j + 1; i < n; ++i) {
      double u = M[i * n + j] - dot(&L[i * n], &L[j * n], j);
      L[i * n + j] = u / g;
    }
    for (int i = 0; i < j; ++i) L[i * n + j] = 0;
  }
  return positive;
}

// M = Lᵀ D L with L unit lower triangular, eliminated from the last coordinate to the first
// (MuJoCo's `mj_factorM`): the mass matrix of a tree whose coordinates come after their
// ancestors keeps its pattern (no fill-in), and what is zero is skipped. L's strict lower
// triangle and D on its diagonal in `L` (row-major, n × n); row c's columns where L may be
// nonzero at `columns[lo[c]], …, columns[hi[c] − 1]`, ascending. False where M is not positive
// definite. (Cassie's M, 35 coordinates: 399 of the 595 entries below the diagonal, where a
// Cholesky factor from the first coordinate is full.)
bool factor_leaves_first(int n, const double* M, double* L, int* lo, int* hi, std::vector<int>& columns) {
  for (int i = 0; i < n; ++i)
    for (int j = 0; j <= i; ++j) L[i * n + j] = M[i * n + j];
  columns.clear();
  bool positive = true;
  for (int c = n - 1; c >= 0; --c) {
    double* row = &L[c * n];
    const double d = row[c];
    positive = positive && d > 0;
    lo[c] = int(columns.size());
    for (int i = 0; i < c; ++i)
      if (row[i] != 0) columns.push_back(i);
    hi[c] = int(columns.size());
    const int* cols = columns.data() + lo[c];
    // the rows above take c's elimination at c's columns (fill where new, met when they come)
    for (int a = 0; a < hi[c] - lo[c]; ++a) {
      const double t = row[cols[a]] / d;
      double* target = &L[cols[a] * n];
      for (int b = 0; b <= a; ++b) target[cols[b]] -= t * row[cols[b]];
    }
    for (int a = 0; a < hi[c] - lo[c]; ++a) row[cols[a]] /= d;
  }
  return positive;
}

// The pseudo-inverse of the rows `B` (m × n, row-major, each longer than the cut-off), factored
// once and applied to right-hand sides: `floor` is the squared distance under which a row counts
// as in the span of those taken (`rank_tolerance`), `cut` is `negligible`, `well`
// `WELL_CONDITIONED`. The basis of the rows comes from a Cholesky factorization of their
// row-normalised Gram matrix with diagonal pivoting (at each step the row farthest from the span
// of those taken: `_linalg._pivoted_qr`'s choice, at a third of its cost on Cassie's 25 closed
// rows); a row left out is measured against the span on the rows themselves.
struct Pseudoinverse {
  int m = 0, n = 0, rank = 0;
  enum { INDEPENDENT, DEPENDENT, SVD } route = INDEPENDENT;
  const double* B = nullptr;
  std::vector<double> d, Lc, N, Pt;  // lengths, coordinates in the basis, factor of Yᵀ D² Y, SVD's B⁺ᵀ
  std::vector<int> order;
  // work space, kept from one state to the next: allocating it per state cost a tenth of a
  // contact solve on Cassie
  std::vector<double> U, G, left, c, residual, YY, W, V, inverse;
  std::vector<int> taken_at;
  mutable std::vector<double> y;

  void factor(int rows, int columns, const double* rows_B, double floor, double cut, double well);

  // λ = (B Bᵀ)⁺ e, the minimum-norm multipliers, and z = Bᵀ λ = B⁺ e
  void solve(const double* e, double* z, double* lam) const {
    std::fill(z, z + n, 0.0);
    std::fill(lam, lam + m, 0.0);
    if (route == SVD) {
      for (int a = 0; a < m; ++a)
        for (int k = 0; k < n; ++k) z[k] += Pt[a * n + k] * e[a];
      for (int a = 0; a < m; ++a)
        for (int k = 0; k < n; ++k) lam[a] += Pt[a * n + k] * z[k];
      return;
    }
    y.resize(rank);
    if (route == INDEPENDENT) {  // λ = D⁻¹ Ĝ⁻¹ D⁻¹ e with Ĝ = Y Yᵀ in the order taken
      for (int j = 0; j < rank; ++j) {
        double t = e[order[j]] / d[order[j]];
        for (int k = 0; k < j; ++k) t -= Lc[order[j] * m + k] * y[k];
        y[j] = t / Lc[order[j] * m + j];
      }
      for (int j = rank - 1; j >= 0; --j) {
        double t = y[j];
        for (int k = j + 1; k < rank; ++k) t -= Lc[order[k] * m + j] * y[k];
        y[j] = t / Lc[order[j] * m + j];
        lam[order[j]] = y[j] / d[order[j]];
      }
    } else {  // B Bᵀ = C Cᵀ with C = D Y: λ = C (Cᵀ C)⁻² Cᵀ e
      for (int k = 0; k < rank; ++k) {
        double t = 0;
        for (int i = 0; i < m; ++i) t += d[i] * Lc[i * m + k] * e[i];
        y[k] = t;
      }
      solve_normal(y.data());
      solve_normal(y.data());
      for (int i = 0; i < m; ++i) {
        double t = 0;
        for (int k = 0; k < rank; ++k) t += Lc[i * m + k] * y[k];
        lam[i] = d[i] * t;
      }
    }
    for (int a = 0; a < m; ++a)
      if (lam[a] != 0)
        for (int k = 0; k < n; ++k) z[k] += B[a * n + k] * lam[a];
  }

 private:
  // y ← (Yᵀ D² Y)⁻¹ y by its Cholesky factor N
  void solve_normal(double* y) const {
    for (int j = 0; j < rank; ++j) {
      double t = y[j];
      for (int k = 0; k < j; ++k) t -= N[j * rank + k] * y[k];
      y[j] = t / N[j * rank + j];
    }
    for (int j = rank - 1; j >= 0; --j) {
      double t = y[j];
      for (int k = j + 1; k < rank; ++k) t -= N[k * rank + j] * y[k];
      y[j] = t / N[j * rank + j];
    }
  }
};

void Pseudoinverse::factor(int rows, int columns, const double* rows_B, double floor, double cut, double well) {
  m = rows, n = columns, rank = 0, route = INDEPENDENT, B = rows_B;
  d.assign(m, 0.0), Lc.assign(size_t(m) * m, 0.0), order.clear();
  U.resize(size_t(m) * n), G.resize(size_t(m) * m), left.assign(m, 1.0), taken_at.assign(m, -1);
  for (int i = 0; i < m; ++i) {
    d[i] = std::sqrt(dot(&B[i * n], &B[i * n], n));
    for (int k = 0; k < n; ++k) U[i * n + k] = B[i * n + k] / d[i];
  }
  for (int i = 0; i < m; ++i)
    for (int j = 0; j <= i; ++j) G[i * m + j] = G[j * m + i] = dot(&U[i * n], &U[j * n], n);
  // Ĝ = Y Yᵀ, the rows taken first: Y's column j from the row taken at step j
  for (int j = 0; j < std::min(m, n); ++j) {
    int best = -1;
    for (int i = 0; i < m; ++i)
      if (taken_at[i] < 0 && (best < 0 || left[i] > left[best])) best = i;
    if (best < 0 || !(left[best] > floor)) break;
    const double g = std::sqrt(left[best]);
    for (int i = 0; i < m; ++i) {
      if (taken_at[i] >= 0) continue;
      double a = i == best ? g : (G[i * m + best] - dot(&Lc[i * m], &Lc[best * m], j)) / g;
      Lc[i * m + j] = a;
      left[i] -= a * a;
    }
    taken_at[best] = j;
    order.push_back(best);
  }
  rank = int(order.size());
  bool exact = true;
  for (int j = 0; j < rank; ++j) {
    double g = Lc[order[j] * m + j];
    exact = exact && g * g > well;
  }
  // a row left out against the span, on the rows: Û_i − cᵀ Û_taken with Y_taken c = Y_i
  bool dependent = false;
  c.resize(rank), residual.resize(n);
  for (int i = 0; i < m && exact; ++i) {
    if (taken_at[i] >= 0) continue;
    dependent = true;
    for (int j = rank - 1; j >= 0; --j) {
      double t = Lc[i * m + j];
      for (int k = j + 1; k < rank; ++k) t -= Lc[order[k] * m + j] * c[k];
      c[j] = t / Lc[order[j] * m + j];
    }
    std::copy(&U[i * n], &U[i * n] + n, residual.begin());
    for (int j = 0; j < rank; ++j)
      for (int k = 0; k < n; ++k) residual[k] -= c[j] * U[order[j] * n + k];
    exact = dot(residual.data(), residual.data(), n) <= cut * cut;
  }
  if (exact && !dependent) return;
  if (exact) {  // C = D Y
    route = DEPENDENT;
    YY.assign(size_t(rank) * rank, 0.0);
    N.assign(size_t(rank) * rank, 0.0);
    for (int i = 0; i < m; ++i)
      for (int a = 0; a < rank; ++a) {
        const double w = d[i] * d[i] * Lc[i * m + a];
        for (int b = 0; b <= a; ++b) YY[a * rank + b] += w * Lc[i * m + b];
      }
    cholesky(rank, YY.data(), N.data());
    return;
  }
  route = SVD;
  Pt.assign(size_t(m) * n, 0.0);
  // One-sided Jacobi on the rows: W = V B with orthogonal rows, B⁺ᵀ = Vᵀ diag(σ⁻²) W
  W.assign(B, B + size_t(m) * n), V.assign(size_t(m) * m, 0.0);
  for (int i = 0; i < m; ++i) V[i * m + i] = 1.0;
  double longest = 0;
  for (int i = 0; i < m; ++i) longest = std::max(longest, d[i] * d[i]);
  double shortest = cut * cut * longest;
  for (int sweep = 0; sweep < 30; ++sweep) {
    double worst = 0;
    for (int a = 0; a < m - 1; ++a)
      for (int b = a + 1; b < m; ++b) {
        double alpha = 0, beta = 0, gamma = 0;
        for (int c = 0; c < n; ++c) {
          alpha += W[a * n + c] * W[a * n + c];
          beta += W[b * n + c] * W[b * n + c];
          gamma += W[a * n + c] * W[b * n + c];
        }
        if (!(alpha > shortest && beta > shortest)) continue;
        double off = std::fabs(gamma) / std::sqrt(alpha * beta);
        worst = std::max(worst, off);
        if (!(off > EPS)) continue;
        double zeta = (beta - alpha) / (2 * gamma);
        double t = (zeta >= 0 ? 1.0 : -1.0) / (std::fabs(zeta) + std::hypot(1.0, zeta));
        double cs = 1 / std::hypot(1.0, t), sn = cs * t;
        for (int c = 0; c < n; ++c) {
          double x = W[a * n + c], y = W[b * n + c];
          W[a * n + c] = cs * x - sn * y, W[b * n + c] = sn * x + cs * y;
        }
        for (int c = 0; c < m; ++c) {
          double x = V[a * m + c], y = V[b * m + c];
          V[a * m + c] = cs * x - sn * y, V[b * m + c] = sn * x + cs * y;
        }
      }
    if (!(worst > EPS)) break;
  }
  inverse.resize(m);
  double largest = 0;
  for (int i = 0; i < m; ++i) {
    double s = 0;
    for (int c = 0; c < n; ++c) s += W[i * n + c] * W[i * n + c];
    inverse[i] = s;
    largest = std::max(largest, s);
  }
  for (int i = 0; i < m; ++i) inverse[i] = inverse[i] > cut * cut * largest ? 1 / inverse[i] : 0.0;
  for (int i = 0; i < m; ++i)
    for (int c = 0; c < n; ++c) {
      double s = 0;
      for (int k = 0; k < m; ++k) s += V[k * m + i] * inverse[k] * W[k * n + c];
      Pt[i * n + c] = s;
    }
}

}  // namespace

// One state's contact solve (the FFI handler's per state, and `kernels.cc`'s contact dynamics):
// M (n × n), Q (n), the rows R (P × n, the first `p` the equalities, then k normal rows and 2k
// tangent ones), their right-hand sides b, `closing` (1 where a row is imposed), the sliding
// friction's directions K (n × k) and `slide` (1 where a contact slides); results as
// `_unilateral._dense_solve` gives them.
void ukjax_contact_solve_state(int n, int P, int k, int p, const double* M, const double* Q, const double* R,
                               const double* b, const double* closing, const double* K, const double* slide,
                               bool scales, double floor, double cut, double well, double* x, double* force,
                               double* lam_o, double* slide_o, double* mobility, double* free_rate, double* health) {
  // the work space, kept by each thread from one call to the next (a simulation calls this
  // for one state at a time)
  static thread_local Pseudoinverse pinv;
  static thread_local std::vector<int> active, column, kept, friction, sliding, row_of, lo, hi, below;
  static thread_local std::vector<double> squares, with_Q, with_z, with_slide, L, root, X, Bact, e, z, v, lam, slide_lam, norms, Z, Lam, rhs, zcol, lcol, A, y;
  L.resize(size_t(n) * n), root.resize(n), lo.resize(n), hi.resize(n);
  e.resize(P), column.resize(P), friction.resize(k), row_of.resize(P);
  z.resize(n), v.resize(n), lam.resize(P), slide_lam.resize(k), norms.resize(P), zcol.resize(n);
  // M = Lᵀ D L = F Fᵀ with F = Lᵀ D^½, and M's symmetry to √ε (`mass_check`)
  double largest = 0, asymmetry = 0;
  for (int i = 0; i < n; ++i) {
    largest = std::max(largest, std::fabs(M[i * n + i]));
    for (int j = 0; j < i; ++j) {
      const double lower = M[i * n + j], upper = M[j * n + i];
      largest = std::max(largest, std::max(std::fabs(lower), std::fabs(upper)));
      asymmetry = std::max(asymmetry, std::fabs(lower - upper));
    }
  }
  bool mass_ok = factor_leaves_first(n, M, L.data(), lo.data(), hi.data(), below) && asymmetry <= std::sqrt(EPS) * largest;
  for (int c = 0; c < n; ++c) root[c] = std::sqrt(L[c * n + c]);  // D^½
  if (!mass_ok) {
    std::fill(x, x + n, NaN), std::fill(force, force + n, NaN), std::fill(lam_o, lam_o + P, NaN);
    std::fill(slide_o, slide_o + k, NaN), std::fill(mobility, mobility + k, NaN);
    std::fill(free_rate, free_rate + k, NaN);
    health[0] = NaN, health[1] = 0, health[2] = NaN;
    return;
  }
  // X = F⁻¹ [Q | Rᵀ | K], of the rows only those closed (and, for the contacts' scales, the
  // normal ones), of K only the sliding contacts' columns: Lᵀ's substitution from the last
  // coordinate, then D^-½
  int cols = 1;
  kept.clear();  // the rows taken, in their columns' order (Cassie standing: 28 of 123)
  for (int j = 0; j < P; ++j) {
    column[j] = closing[j] != 0 || (scales && j >= p && j < p + k) ? cols++ : -1;
    if (column[j] >= 0) kept.push_back(j);
  }
  for (int j = 0; j < k; ++j) friction[j] = slide[j] != 0 ? cols++ : -1;
  X.resize(size_t(n) * cols);
  for (int i = 0; i < n; ++i) {
    double* row = &X[size_t(i) * cols];
    row[0] = Q[i];
    for (size_t t = 0; t < kept.size(); ++t) row[1 + t] = R[kept[t] * n + i];
    for (int j = 0; j < k; ++j)
      if (friction[j] >= 0) row[friction[j]] = K[i * k + j];
  }
  for (int c = n - 1; c >= 0; --c) {
    const double* done = &X[size_t(c) * cols];
    for (int a = lo[c]; a < hi[c]; ++a) {
      const double l = L[c * n + below[a]];
      double* row = &X[size_t(below[a]) * cols];
      for (int j = 0; j < cols; ++j) row[j] -= l * done[j];
    }
  }
  for (int i = 0; i < n; ++i) {
    double* row = &X[size_t(i) * cols];
    for (int j = 0; j < cols; ++j) row[j] /= root[i];
  }
  auto E = [&](int i, int j) { return X[size_t(i) * cols + column[j]]; };  // (A F⁻ᵀ)ᵀ, where kept
  auto Y = [&](int i, int j) { return X[size_t(i) * cols + friction[j]]; };  // F⁻¹ K, sliding only
  // each column's squared length and its product with F⁻¹ Q, summed over X's rows (in vector
  // code: a column of X is strided)
  squares.assign(cols, 0.0), with_Q.assign(cols, 0.0);
  for (int i = 0; i < n; ++i) {
    const double* row = &X[size_t(i) * cols];
    for (int j = 0; j < cols; ++j) squares[j] += row[j] * row[j], with_Q[j] += row[j] * row[0];
  }
  // the closed rows, and those of them above the cut-off (`gram_factor`'s `negligible`)
  double longest = 0;
  std::fill(norms.begin(), norms.end(), 0.0);
  for (int j = 0; j < P; ++j) {
    if (closing[j] == 0) continue;
    norms[j] = std::sqrt(squares[column[j]]);
    longest = std::max(longest, norms[j]);
  }
  active.clear();
  for (int j = 0; j < P; ++j)
    if (closing[j] != 0 && norms[j] > cut * longest) active.push_back(j);
  const int m = int(active.size());
  Bact.assign(size_t(m) * n, 0.0);
  for (int a = 0; a < m; ++a)
    for (int i = 0; i < n; ++i) Bact[a * n + i] = E(i, active[a]);
  for (int j = 0; j < P; ++j) e[j] = closing[j] != 0 ? b[j] - with_Q[column[j]] : 0.0;  // b − A M⁻¹ Q
  pinv.factor(m, n, Bact.data(), floor, cut, well);
  // z₀ = B⁺ e, and for each sliding contact B⁺ B yᵢ (yᵢ = F⁻¹ Kᵢ)
  sliding.clear();
  for (int i = 0; i < k; ++i)
    if (slide[i] != 0) sliding.push_back(i);
  const int ns = int(sliding.size());
  Z.assign(size_t(n) * (1 + ns), 0.0), Lam.assign(size_t(m) * (1 + ns), 0.0), rhs.resize(m), lcol.resize(m);
  for (int col = 0; col <= ns; ++col) {
    for (int a = 0; a < m; ++a) {
      if (col == 0) {
        rhs[a] = e[active[a]];
      } else {
        double t = 0;
        for (int i = 0; i < n; ++i) t += Bact[a * n + i] * Y(i, sliding[col - 1]);
        rhs[a] = t;
      }
    }
    pinv.solve(rhs.data(), zcol.data(), lcol.data());
    for (int i = 0; i < n; ++i) Z[i * (1 + ns) + col] = zcol[i];
    for (int a = 0; a < m; ++a) Lam[a * (1 + ns) + col] = lcol[a];
  }
  // the sliding contacts' normal forces: (I − G) λₛ = λ₀ on the sliding contacts' normal rows
  std::fill(row_of.begin(), row_of.end(), -1);
  for (int a = 0; a < m; ++a) row_of[active[a]] = a;
  auto lam_at = [&](int row, int col) { return row_of[row] < 0 ? 0.0 : Lam[row_of[row] * (1 + ns) + col]; };
  A.resize(size_t(ns) * ns), y.resize(ns);
  for (int a = 0; a < ns; ++a) {
    for (int c = 0; c < ns; ++c) A[a * ns + c] = (a == c) - lam_at(p + sliding[a], 1 + c);
    y[a] = lam_at(p + sliding[a], 0);
  }
  double pivot = k > 0 ? 1.0 : std::numeric_limits<double>::infinity();
  for (int i = 0; i < ns; ++i) {
    int best = i;
    for (int r = i + 1; r < ns; ++r)
      if (std::fabs(A[r * ns + i]) > std::fabs(A[best * ns + i])) best = r;
    if (best != i) {
      for (int c = 0; c < ns; ++c) std::swap(A[i * ns + c], A[best * ns + c]);
      std::swap(y[i], y[best]);
    }
    double g = A[i * ns + i];
    for (int r = 0; r < ns; ++r) {
      if (r == i) continue;
      double f = A[r * ns + i] / g;
      for (int c = 0; c < ns; ++c) A[r * ns + c] -= f * A[i * ns + c];
      y[r] -= f * y[i];
    }
  }
  std::fill(slide_lam.begin(), slide_lam.end(), 0.0);
  for (int i = 0; i < ns; ++i) {
    double g = A[i * ns + i];
    pivot = std::min(pivot, std::fabs(g));
    if (g != g) pivot = NaN;
    slide_lam[sliding[i]] = y[i] / g;
  }
  // z, λ, the force F (z − Y λₛ) and q̈ = F⁻ᵀ (F⁻¹ Q + z − Y λₛ)
  for (int i = 0; i < n; ++i) {
    double t = Z[i * (1 + ns)], u = 0;
    for (int c = 0; c < ns; ++c) {
      t += Z[i * (1 + ns) + 1 + c] * slide_lam[sliding[c]];
      u += Y(i, sliding[c]) * slide_lam[sliding[c]];
    }
    z[i] = t, v[i] = t - u;
  }
  std::fill(lam.begin(), lam.end(), 0.0);
  for (int a = 0; a < m; ++a) {
    double t = Lam[a * (1 + ns)];
    for (int c = 0; c < ns; ++c) t += Lam[a * (1 + ns) + 1 + c] * slide_lam[sliding[c]];
    lam[active[a]] = t;
  }
  for (int i = 0; i < n; ++i) force[i] = root[i] * v[i];
  for (int c = 0; c < n; ++c)
    for (int a = lo[c]; a < hi[c]; ++a) force[below[a]] += L[c * n + below[a]] * root[c] * v[c];
  for (int c = 0; c < n; ++c) {
    double t = (X[size_t(c) * cols] + v[c]) / root[c];
    for (int a = lo[c]; a < hi[c]; ++a) t -= L[c * n + below[a]] * x[below[a]];
    x[c] = t;
  }
  // as `uk_solve` measures it: B z against e with the sliding friction's share in it, B's
  // columns against z and Y λₛ summed over X's rows (vector code, as above)
  for (int i = 0; i < n; ++i) {
    double t = 0;
    for (int c = 0; c < ns; ++c) t += Y(i, sliding[c]) * slide_lam[sliding[c]];
    v[i] = t;  // Y λₛ (v is spent)
  }
  with_z.assign(cols, 0.0), with_slide.assign(cols, 0.0);
  for (int i = 0; i < n; ++i) {
    const double* row = &X[size_t(i) * cols];
    for (int j = 0; j < cols; ++j) with_z[j] += row[j] * z[i], with_slide[j] += row[j] * v[i];
  }
  double residual = 0, target_norm = 0, frobenius = 0, z_norm = dot(z.data(), z.data(), n);
  for (int j = 0; j < P; ++j) {
    const bool kept = closing[j] != 0;
    const double t = e[j] + (kept ? with_slide[column[j]] : 0.0), bz = kept ? with_z[column[j]] : 0.0;
    frobenius += kept ? squares[column[j]] : 0.0;
    target_norm += t * t;
    residual += (bz - t) * (bz - t);
  }
  double scale = std::sqrt(target_norm) + std::sqrt(frobenius) * std::sqrt(z_norm);
  // each contact's inverse effective mass and its rate under the applied forces alone
  for (int i = 0; i < k; ++i) {
    if (!scales) {
      mobility[i] = free_rate[i] = NaN;
      continue;
    }
    mobility[i] = squares[column[p + i]], free_rate[i] = with_Q[column[p + i]];
  }
  std::copy(lam.begin(), lam.end(), lam_o);
  std::copy(slide_lam.begin(), slide_lam.end(), slide_o);
  health[0] = std::sqrt(residual) / (scale > 0 ? scale : 1.0);
  health[1] = 1.0;
  health[2] = pivot;
}

static ffi::Error UkContactSolveImpl(ffi::Buffer<ffi::F64> Mb, ffi::Buffer<ffi::F64> Qb, ffi::Buffer<ffi::F64> Rb,
                                     ffi::Buffer<ffi::F64> bb, ffi::Buffer<ffi::F64> closing_b,
                                     ffi::Buffer<ffi::F64> Kb, ffi::Buffer<ffi::F64> slide_b, int64_t p_eq,
                                     int64_t scales, double floor, double cut, double well,
                                     ffi::ResultBuffer<ffi::F64> x_out,
                                     ffi::ResultBuffer<ffi::F64> force_out, ffi::ResultBuffer<ffi::F64> lam_out,
                                     ffi::ResultBuffer<ffi::F64> slide_out, ffi::ResultBuffer<ffi::F64> mobility_out,
                                     ffi::ResultBuffer<ffi::F64> free_out, ffi::ResultBuffer<ffi::F64> health_out) {
  const int n = int(Qb.dimensions().back());
  const int P = int(bb.dimensions().back());
  const int k = int(slide_b.dimensions().back());
  const int64_t batch = int64_t(Qb.element_count()) / std::max(n, 1);
  for (int64_t s = 0; s < batch; ++s)
    ukjax_contact_solve_state(n, P, k, int(p_eq), Mb.typed_data() + s * n * n, Qb.typed_data() + s * n,
                              Rb.typed_data() + s * P * n, bb.typed_data() + s * P, closing_b.typed_data() + s * P,
                              Kb.typed_data() + s * n * k, slide_b.typed_data() + s * k, scales != 0, floor, cut,
                              well, x_out->typed_data() + s * n, force_out->typed_data() + s * n,
                              lam_out->typed_data() + s * P, slide_out->typed_data() + s * k,
                              mobility_out->typed_data() + s * k, free_out->typed_data() + s * k,
                              health_out->typed_data() + s * 3);
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(UkContactSolve, UkContactSolveImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Attr<int64_t>("p")
                                  .Attr<int64_t>("scales")
                                  .Attr<double>("floor")
                                  .Attr<double>("cut")
                                  .Attr<double>("well")
                                  .Ret<ffi::Buffer<ffi::F64>>()
                                  .Ret<ffi::Buffer<ffi::F64>>()
                                  .Ret<ffi::Buffer<ffi::F64>>()
                                  .Ret<ffi::Buffer<ffi::F64>>()
                                  .Ret<ffi::Buffer<ffi::F64>>()
                                  .Ret<ffi::Buffer<ffi::F64>>()
                                  .Ret<ffi::Buffer<ffi::F64>>());
