// The linear algebra of one contact solve at fixed modes (`_unilateral._dense_solve`, whose
// formulas and cut-offs this follows): M = Lᵀ D L, factored from the leaves (a tree's M keeps its
// pattern; the XLA route's Cholesky factor from the root fills it), F = Lᵀ D^½; one substitution
// for the applied forces, every row and the sliding friction's directions; the pseudo-inverse of
// the rows that the modes close, only those that are not zero, through a basis of them (their
// Gram matrix's Cholesky factor with diagonal pivoting; the minimum-norm solution where some are
// dependent), a one-sided Jacobi SVD where that basis is ill-conditioned; the sliding contacts'
// coupling by Gauss–Jordan with partial pivoting; one substitution back.
//
// Host and device code alike (no allocation, no library call a GPU lacks): a state's work space
// is cut from one piece of memory (`ContactWork`), sized for its row and contact counts. Included
// by `_robots/kernels.cc`, whose handlers run it alone (`UkContactSolve`: the XLA route's `M` and
// rows) and in a tree's contact dynamics (`UkTreeContacts`), on a CPU and an NVIDIA GPU.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>

#ifdef __CUDACC__
#define HD __host__ __device__ inline
#else
#define HD inline
#endif

namespace contact {

// One piece of memory cut into arrays one after another (8-byte aligned); with no base it only
// counts the bytes, for the caller to allocate.
struct Bump {
  char* base;
  size_t used = 0;
  template <class X>
  HD X* take(size_t count) {
    X* p = base ? reinterpret_cast<X*>(base + used) : nullptr;
    used += (count * sizeof(X) + 7) / 8 * 8;
    return p;
  }
};

HD int imin(int a, int b) { return a < b ? a : b; }

// Σ a[k] b[k] in eight running sums: without reassociation (no -ffast-math) a single sum waits on
// each addition before the next; eight make the dense solve's reductions two vectors' chains
HD double dot(const double* a, const double* b, int n) {
  double s[8] = {};
  int k = 0;
  for (; k + 8 <= n; k += 8)
    for (int l = 0; l < 8; ++l) s[l] += a[k + l] * b[k + l];
  for (int l = 0; k < n; ++k, ++l) s[l] += a[k] * b[k];
  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

// The lower Cholesky factor `L` of the n × n `M` (row-major, from its lower triangle; the upper
// one of `L` zero); false where `M` is not positive definite.
HD bool cholesky(int n, const double* M, double* L) {
  bool positive = true;
  for (int j = 0; j < n; ++j) {
    double t = M[j * n + j] - dot(&L[j * n], &L[j * n], j);
    positive = positive && t > 0;
    double g = ::sqrt(t);
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
// nonzero at `columns[lo[c]], …, columns[hi[c] − 1]`, ascending (room for n (n − 1) / 2).
// False where M is not positive definite. (Cassie's M, 35 coordinates: 399 of the 595 entries
// below the diagonal, where a Cholesky factor from the first coordinate is full.)
HD bool factor_leaves_first(int n, const double* M, double* L, int* lo, int* hi, int* columns) {
  for (int i = 0; i < n; ++i)
    for (int j = 0; j <= i; ++j) L[i * n + j] = M[i * n + j];
  int count = 0;
  bool positive = true;
  for (int c = n - 1; c >= 0; --c) {
    double* row = &L[c * n];
    const double d = row[c];
    positive = positive && d > 0;
    lo[c] = count;
    for (int i = 0; i < c; ++i)
      if (row[i] != 0) columns[count++] = i;
    hi[c] = count;
    const int* cols = columns + lo[c];
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
// rows); a row left out is measured against the span on the rows themselves. Its arrays are cut
// for at most `most` rows of `columns` columns: the basis's coordinates and factors for at most
// as many rows as columns (Cassie standing, 123 rows of 35 columns: 569 KB a state, 878 KB
// with every factor square).
struct Pseudoinverse {
  int m = 0, n = 0, rank = 0, width = 0;  // width: Lc's row, min(m, n) ≥ rank
  enum { INDEPENDENT, DEPENDENT, SVD } route = INDEPENDENT;
  const double* B = nullptr;
  double *d, *Lc, *N, *Pt;  // lengths, coordinates in the basis, factor of Yᵀ D² Y, SVD's B⁺ᵀ
  int *order, *taken_at;
  double *U, *G, *left, *c, *residual, *YY, *W, *V, *inverse, *y;

  HD Pseudoinverse(Bump& s, int most, int columns) {
    const size_t basis = size_t(imin(most, columns)), square = size_t(most) * most, wide = size_t(most) * columns;
    d = s.take<double>(most), Lc = s.take<double>(most * basis), N = s.take<double>(basis * basis);
    Pt = s.take<double>(wide), order = s.take<int>(most), taken_at = s.take<int>(most);
    U = s.take<double>(wide), G = s.take<double>(square), left = s.take<double>(most), c = s.take<double>(most);
    residual = s.take<double>(columns), YY = s.take<double>(basis * basis), W = s.take<double>(wide);
    V = s.take<double>(square), inverse = s.take<double>(most), y = s.take<double>(most);
  }

  HD void factor(int rows, int columns, const double* rows_B, double floor, double cut, double well);

  // λ = (B Bᵀ)⁺ e, the minimum-norm multipliers, and z = Bᵀ λ = B⁺ e
  HD void solve(const double* e, double* z, double* lam) const {
    for (int k = 0; k < n; ++k) z[k] = 0.0;
    for (int a = 0; a < m; ++a) lam[a] = 0.0;
    if (route == SVD) {
      for (int a = 0; a < m; ++a)
        for (int k = 0; k < n; ++k) z[k] += Pt[a * n + k] * e[a];
      for (int a = 0; a < m; ++a)
        for (int k = 0; k < n; ++k) lam[a] += Pt[a * n + k] * z[k];
      return;
    }
    if (route == INDEPENDENT) {  // λ = D⁻¹ Ĝ⁻¹ D⁻¹ e with Ĝ = Y Yᵀ in the order taken
      for (int j = 0; j < rank; ++j) {
        double t = e[order[j]] / d[order[j]];
        for (int k = 0; k < j; ++k) t -= Lc[order[j] * width + k] * y[k];
        y[j] = t / Lc[order[j] * width + j];
      }
      for (int j = rank - 1; j >= 0; --j) {
        double t = y[j];
        for (int k = j + 1; k < rank; ++k) t -= Lc[order[k] * width + j] * y[k];
        y[j] = t / Lc[order[j] * width + j];
        lam[order[j]] = y[j] / d[order[j]];
      }
    } else {  // B Bᵀ = C Cᵀ with C = D Y: λ = C (Cᵀ C)⁻² Cᵀ e
      for (int k = 0; k < rank; ++k) {
        double t = 0;
        for (int i = 0; i < m; ++i) t += d[i] * Lc[i * width + k] * e[i];
        y[k] = t;
      }
      solve_normal(y);
      solve_normal(y);
      for (int i = 0; i < m; ++i) {
        double t = 0;
        for (int k = 0; k < rank; ++k) t += Lc[i * width + k] * y[k];
        lam[i] = d[i] * t;
      }
    }
    for (int a = 0; a < m; ++a)
      if (lam[a] != 0)
        for (int k = 0; k < n; ++k) z[k] += B[a * n + k] * lam[a];
  }

 private:
  // y ← (Yᵀ D² Y)⁻¹ y by its Cholesky factor N
  HD void solve_normal(double* y) const {
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

HD void Pseudoinverse::factor(int rows, int columns, const double* rows_B, double floor, double cut, double well) {
  m = rows, n = columns, rank = 0, width = imin(m, n), route = INDEPENDENT, B = rows_B;
  for (int i = 0; i < m * width; ++i) Lc[i] = 0.0;
  for (int i = 0; i < m; ++i) {
    d[i] = ::sqrt(dot(&B[i * n], &B[i * n], n));
    left[i] = 1.0, taken_at[i] = -1;
    for (int k = 0; k < n; ++k) U[i * n + k] = B[i * n + k] / d[i];
  }
  for (int i = 0; i < m; ++i)
    for (int j = 0; j <= i; ++j) G[i * m + j] = G[j * m + i] = dot(&U[i * n], &U[j * n], n);
  // Ĝ = Y Yᵀ, the rows taken first: Y's column j from the row taken at step j
  for (int j = 0; j < imin(m, n); ++j) {
    int best = -1;
    for (int i = 0; i < m; ++i)
      if (taken_at[i] < 0 && (best < 0 || left[i] > left[best])) best = i;
    if (best < 0 || !(left[best] > floor)) break;
    const double g = ::sqrt(left[best]);
    for (int i = 0; i < m; ++i) {
      if (taken_at[i] >= 0) continue;
      double a = i == best ? g : (G[i * m + best] - dot(&Lc[i * width], &Lc[best * width], j)) / g;
      Lc[i * width + j] = a;
      left[i] -= a * a;
    }
    taken_at[best] = j;
    order[rank++] = best;
  }
  bool exact = true;
  for (int j = 0; j < rank; ++j) {
    double g = Lc[order[j] * width + j];
    exact = exact && g * g > well;
  }
  // a row left out against the span, on the rows: Û_i − cᵀ Û_taken with Y_taken c = Y_i
  bool dependent = false;
  for (int i = 0; i < m && exact; ++i) {
    if (taken_at[i] >= 0) continue;
    dependent = true;
    for (int j = rank - 1; j >= 0; --j) {
      double t = Lc[i * width + j];
      for (int k = j + 1; k < rank; ++k) t -= Lc[order[k] * width + j] * c[k];
      c[j] = t / Lc[order[j] * width + j];
    }
    for (int k = 0; k < n; ++k) residual[k] = U[i * n + k];
    for (int j = 0; j < rank; ++j)
      for (int k = 0; k < n; ++k) residual[k] -= c[j] * U[order[j] * n + k];
    exact = dot(residual, residual, n) <= cut * cut;
  }
  if (exact && !dependent) return;
  if (exact) {  // C = D Y
    route = DEPENDENT;
    for (int i = 0; i < rank * rank; ++i) YY[i] = N[i] = 0.0;
    for (int i = 0; i < m; ++i)
      for (int a = 0; a < rank; ++a) {
        const double w = d[i] * d[i] * Lc[i * width + a];
        for (int b = 0; b <= a; ++b) YY[a * rank + b] += w * Lc[i * width + b];
      }
    cholesky(rank, YY, N);
    return;
  }
  route = SVD;
  // One-sided Jacobi on the rows: W = V B with orthogonal rows, B⁺ᵀ = Vᵀ diag(σ⁻²) W
  for (int i = 0; i < m * n; ++i) W[i] = B[i];
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < m; ++j) V[i * m + j] = i == j ? 1.0 : 0.0;
  double longest = 0;
  for (int i = 0; i < m; ++i) longest = ::fmax(longest, d[i] * d[i]);
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
        double off = ::fabs(gamma) / ::sqrt(alpha * beta);
        worst = ::fmax(worst, off);
        if (!(off > DBL_EPSILON)) continue;
        double zeta = (beta - alpha) / (2 * gamma);
        double t = (zeta >= 0 ? 1.0 : -1.0) / (::fabs(zeta) + ::hypot(1.0, zeta));
        double cs = 1 / ::hypot(1.0, t), sn = cs * t;
        for (int c = 0; c < n; ++c) {
          double x = W[a * n + c], y = W[b * n + c];
          W[a * n + c] = cs * x - sn * y, W[b * n + c] = sn * x + cs * y;
        }
        for (int c = 0; c < m; ++c) {
          double x = V[a * m + c], y = V[b * m + c];
          V[a * m + c] = cs * x - sn * y, V[b * m + c] = sn * x + cs * y;
        }
      }
    if (!(worst > DBL_EPSILON)) break;
  }
  double largest = 0;
  for (int i = 0; i < m; ++i) {
    double s = 0;
    for (int c = 0; c < n; ++c) s += W[i * n + c] * W[i * n + c];
    inverse[i] = s;
    largest = ::fmax(largest, s);
  }
  for (int i = 0; i < m; ++i) inverse[i] = inverse[i] > cut * cut * largest ? 1 / inverse[i] : 0.0;
  for (int i = 0; i < m; ++i)
    for (int c = 0; c < n; ++c) {
      double s = 0;
      for (int k = 0; k < m; ++k) s += V[k * m + i] * inverse[k] * W[k * n + c];
      Pt[i * n + c] = s;
    }
}

// A state's work space for a solve of `n` coordinates, `P` rows and `k` contacts
struct ContactWork {
  Pseudoinverse pinv;
  int *active, *column, *kept, *friction, *sliding, *row_of, *lo, *hi, *below;
  double *squares, *with_Q, *with_z, *with_slide, *L, *root, *X, *Bact, *e, *z, *v, *lam, *slide_lam, *norms, *Z,
      *Lam, *rhs, *zcol, *lcol, *A, *y;

  HD ContactWork(Bump& s, int n, int P, int k) : pinv(s, P, n) {
    const int cols = 1 + P + k;  // F⁻¹ Q, the rows, the sliding friction's directions
    active = s.take<int>(P), column = s.take<int>(P), kept = s.take<int>(P), friction = s.take<int>(k);
    sliding = s.take<int>(k), row_of = s.take<int>(P), lo = s.take<int>(n), hi = s.take<int>(n);
    below = s.take<int>(size_t(n) * n / 2);
    squares = s.take<double>(cols), with_Q = s.take<double>(cols), with_z = s.take<double>(cols);
    with_slide = s.take<double>(cols), L = s.take<double>(size_t(n) * n), root = s.take<double>(n);
    X = s.take<double>(size_t(n) * cols), Bact = s.take<double>(size_t(P) * n), e = s.take<double>(P);
    z = s.take<double>(n), v = s.take<double>(n), lam = s.take<double>(P), slide_lam = s.take<double>(k);
    norms = s.take<double>(P), Z = s.take<double>(size_t(n) * (1 + k)), Lam = s.take<double>(size_t(P) * (1 + k));
    rhs = s.take<double>(P), zcol = s.take<double>(n), lcol = s.take<double>(P), A = s.take<double>(size_t(k) * k);
    y = s.take<double>(k);
  }
};

// The bytes of `ContactWork` for `n` coordinates, `P` rows and `k` contacts
HD size_t work_bytes(int n, int P, int k) {
  Bump sizing{nullptr};
  ContactWork(sizing, n, P, k);
  return sizing.used;
}

// One state's contact solve in the work space `w`: M (n × n), Q (n), the rows R (P × n, the first
// `p` the equalities, then k normal rows and 2k tangent ones), their right-hand sides b,
// `closing` (1 where a row is imposed), the sliding friction's directions K (n × k) and `slide`
// (1 where a contact slides); results as `_unilateral._dense_solve` gives them.
HD void solve(const ContactWork& w, int n, int P, int k, int p, const double* M, const double* Q, const double* R,
              const double* b, const double* closing, const double* K, const double* slide, bool scales,
              double floor, double cut, double well, double* x, double* force, double* lam_o, double* slide_o,
              double* mobility, double* free_rate, double* health) {
  int *active = w.active, *column = w.column, *kept = w.kept, *friction = w.friction, *sliding = w.sliding;
  int *row_of = w.row_of, *lo = w.lo, *hi = w.hi, *below = w.below;
  double *squares = w.squares, *with_Q = w.with_Q, *with_z = w.with_z, *with_slide = w.with_slide, *L = w.L;
  double *root = w.root, *X = w.X, *Bact = w.Bact, *e = w.e, *z = w.z, *v = w.v, *lam = w.lam;
  double *slide_lam = w.slide_lam, *norms = w.norms, *Z = w.Z, *Lam = w.Lam, *rhs = w.rhs, *zcol = w.zcol;
  double *lcol = w.lcol, *A = w.A, *y = w.y;
  Pseudoinverse pinv = w.pinv;
  // M = Lᵀ D L = F Fᵀ with F = Lᵀ D^½, and M's symmetry to √ε (`mass_check`)
  double largest = 0, asymmetry = 0;
  for (int i = 0; i < n; ++i) {
    largest = ::fmax(largest, ::fabs(M[i * n + i]));
    for (int j = 0; j < i; ++j) {
      const double lower = M[i * n + j], upper = M[j * n + i];
      largest = ::fmax(largest, ::fmax(::fabs(lower), ::fabs(upper)));
      asymmetry = ::fmax(asymmetry, ::fabs(lower - upper));
    }
  }
  bool mass_ok = factor_leaves_first(n, M, L, lo, hi, below) && asymmetry <= ::sqrt(DBL_EPSILON) * largest;
  for (int c = 0; c < n; ++c) root[c] = ::sqrt(L[c * n + c]);  // D^½
  if (!mass_ok) {
    for (int i = 0; i < n; ++i) x[i] = force[i] = NAN;
    for (int i = 0; i < P; ++i) lam_o[i] = NAN;
    for (int i = 0; i < k; ++i) slide_o[i] = mobility[i] = free_rate[i] = NAN;
    health[0] = NAN, health[1] = 0, health[2] = NAN;
    return;
  }
  // X = F⁻¹ [Q | Rᵀ | K], of the rows only those closed (and, for the contacts' scales, the
  // normal ones), of K only the sliding contacts' columns: Lᵀ's substitution from the last
  // coordinate, then D^-½
  int cols = 1, taken = 0;  // the rows taken, in their columns' order (Cassie standing: 28 of 123)
  for (int j = 0; j < P; ++j) {
    column[j] = closing[j] != 0 || (scales && j >= p && j < p + k) ? cols++ : -1;
    if (column[j] >= 0) kept[taken++] = j;
  }
  for (int j = 0; j < k; ++j) friction[j] = slide[j] != 0 ? cols++ : -1;
  for (int i = 0; i < n; ++i) {
    double* row = &X[size_t(i) * cols];
    row[0] = Q[i];
    for (int t = 0; t < taken; ++t) row[1 + t] = R[kept[t] * n + i];
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
  for (int j = 0; j < cols; ++j) squares[j] = with_Q[j] = 0.0;
  for (int i = 0; i < n; ++i) {
    const double* row = &X[size_t(i) * cols];
    for (int j = 0; j < cols; ++j) squares[j] += row[j] * row[j], with_Q[j] += row[j] * row[0];
  }
  // the closed rows, and those of them above the cut-off (`gram_factor`'s `negligible`)
  double longest = 0;
  for (int j = 0; j < P; ++j) {
    norms[j] = closing[j] != 0 ? ::sqrt(squares[column[j]]) : 0.0;
    longest = ::fmax(longest, norms[j]);
  }
  int m = 0;
  for (int j = 0; j < P; ++j)
    if (closing[j] != 0 && norms[j] > cut * longest) active[m++] = j;
  for (int a = 0; a < m; ++a)
    for (int i = 0; i < n; ++i) Bact[a * n + i] = E(i, active[a]);
  for (int j = 0; j < P; ++j) e[j] = closing[j] != 0 ? b[j] - with_Q[column[j]] : 0.0;  // b − A M⁻¹ Q
  pinv.factor(m, n, Bact, floor, cut, well);
  // z₀ = B⁺ e, and for each sliding contact B⁺ B yᵢ (yᵢ = F⁻¹ Kᵢ)
  int ns = 0;
  for (int i = 0; i < k; ++i)
    if (slide[i] != 0) sliding[ns++] = i;
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
    pinv.solve(rhs, zcol, lcol);
    for (int i = 0; i < n; ++i) Z[i * (1 + ns) + col] = zcol[i];
    for (int a = 0; a < m; ++a) Lam[a * (1 + ns) + col] = lcol[a];
  }
  // the sliding contacts' normal forces: (I − G) λₛ = λ₀ on the sliding contacts' normal rows
  for (int j = 0; j < P; ++j) row_of[j] = -1;
  for (int a = 0; a < m; ++a) row_of[active[a]] = a;
  auto lam_at = [&](int row, int col) { return row_of[row] < 0 ? 0.0 : Lam[row_of[row] * (1 + ns) + col]; };
  for (int a = 0; a < ns; ++a) {
    for (int c = 0; c < ns; ++c) A[a * ns + c] = (a == c) - lam_at(p + sliding[a], 1 + c);
    y[a] = lam_at(p + sliding[a], 0);
  }
  double pivot = k > 0 ? 1.0 : INFINITY;
  for (int i = 0; i < ns; ++i) {
    int best = i;
    for (int r = i + 1; r < ns; ++r)
      if (::fabs(A[r * ns + i]) > ::fabs(A[best * ns + i])) best = r;
    if (best != i) {
      for (int c = 0; c < ns; ++c) {
        const double t = A[i * ns + c];
        A[i * ns + c] = A[best * ns + c], A[best * ns + c] = t;
      }
      const double t = y[i];
      y[i] = y[best], y[best] = t;
    }
    double g = A[i * ns + i];
    for (int r = 0; r < ns; ++r) {
      if (r == i) continue;
      double f = A[r * ns + i] / g;
      for (int c = 0; c < ns; ++c) A[r * ns + c] -= f * A[i * ns + c];
      y[r] -= f * y[i];
    }
  }
  for (int i = 0; i < k; ++i) slide_lam[i] = 0.0;
  for (int i = 0; i < ns; ++i) {
    double g = A[i * ns + i];
    pivot = ::fmin(pivot, ::fabs(g));
    if (g != g) pivot = NAN;
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
  for (int j = 0; j < P; ++j) lam[j] = 0.0;
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
  for (int j = 0; j < cols; ++j) with_z[j] = with_slide[j] = 0.0;
  for (int i = 0; i < n; ++i) {
    const double* row = &X[size_t(i) * cols];
    for (int j = 0; j < cols; ++j) with_z[j] += row[j] * z[i], with_slide[j] += row[j] * v[i];
  }
  double residual = 0, target_norm = 0, frobenius = 0, z_norm = dot(z, z, n);
  for (int j = 0; j < P; ++j) {
    const bool closed = closing[j] != 0;
    const double t = e[j] + (closed ? with_slide[column[j]] : 0.0), bz = closed ? with_z[column[j]] : 0.0;
    frobenius += closed ? squares[column[j]] : 0.0;
    target_norm += t * t;
    residual += (bz - t) * (bz - t);
  }
  double scale = ::sqrt(target_norm) + ::sqrt(frobenius) * ::sqrt(z_norm);
  // each contact's inverse effective mass and its rate under the applied forces alone
  for (int i = 0; i < k; ++i) {
    mobility[i] = scales ? squares[column[p + i]] : NAN;
    free_rate[i] = scales ? with_Q[column[p + i]] : NAN;
  }
  for (int j = 0; j < P; ++j) lam_o[j] = lam[j];
  for (int i = 0; i < k; ++i) slide_o[i] = slide_lam[i];
  health[0] = ::sqrt(residual) / (scale > 0 ? scale : 1.0);
  health[1] = 1.0;
  health[2] = pivot;
}

}  // namespace contact
