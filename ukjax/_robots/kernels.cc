// The whole U-K acceleration of a rigid-body tree for B states in one XLA FFI call, the batch
// the minor axis (`UkTree`): kinematics (hinge, slide, ball and free joints), M by composite
// bodies, the bias forces by recursive Newton–Euler, joint damping, springs and armature, the
// quaternions' norm rows folded in as `RigidBodyTree.dynamics` folds them, `connect` rows as
// `Connect._rows` writes them (Baumgarte-stabilized), the fixed tendons' armature, and what the
// caller evaluates (forces applied from outside, further constraint rows) added; then the U-K
// solve (`uk_solve`). The library's formulas, in world-frame spatial vectors. Built and called
// by `kernels.py`, which checks that a system is made only of what this file and the caller
// model, and hands it the tree's structure as index tables (`Section`). Also the tree's
// acceleration under joint limits and plane contacts in given modes (`UkTreeContacts`), and the
// contact solve at fixed modes alone (`UkContactSolve`), both on `_contact_solve.h`.
//
// One source, three builds, all computing a member with `solve<T>` (or `dynamics<T>`: M and Q alone, with
// the kinematics and motion behind them; or, T a double, `tree_contacts` or `ContactSolve`):
// - for a CPU, chunks of C lanes (`UKJAX_LANES`), the rest in chunks of TAIL: T is `Lanes<C>`
//   (`Lanes<TAIL>`), C (TAIL) states side by side, a loop the compiler vectorizes;
// - for a CPU, one lane: T is `double`, the members one after another, each with its work space
//   laid out as on a GPU (`Carver`, `slices`), so that the CPU's tests run the GPU's code and
//   layout;
// - for an NVIDIA GPU (`UKJAX_CUDA`, built with nvcc): T is `double`, one thread per member,
//   neighbouring threads reading neighbouring doubles.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "../_contact_solve.h"  // the contact solve, and `HD`: host and device code
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

// Lanes per chunk: a batch runs in chunks of `C` lanes, and what is left in chunks of `TAIL`
// (`members`), so that a small batch is padded to a multiple of `TAIL`, not of `C`
// (`benchmarks/arm_batches.py`). `C` 1 is the build for one state at a time.
#ifndef UKJAX_LANES
#define UKJAX_LANES 32
#endif
constexpr int C = UKJAX_LANES;
constexpr int TAIL = C < 8 ? C : 8;

// the scalar operations the algorithm needs, on one double ...
HD double lsin(double a) { return ::sin(a); }
HD double lcos(double a) { return ::cos(a); }
HD double lsqrt(double a) { return ::sqrt(a); }
HD double lmax(double a, double b) { return ::fmax(a, b); }
HD double select_gt(double a, double b, double x, double y) { return a > b ? x : y; }  // a > b ? x : y
HD double unhealthy(double d) { return d > 0 && d < INFINITY ? 0.0 : 1.0; }
// value k of member `member` in a (B, width) array, the batch first as `vmap` holds it
HD void load(double& x, const double* p, int64_t member, int64_t width, int64_t k) { x = p[member * width + k]; }
HD void store(double x, double* p, int64_t member, int64_t width, int64_t k) { p[member * width + k] = x; }

// ... and on W lanes, W states side by side, a loop the compiler vectorizes. The operations are
// friends defined in the class: functions, not templates, so that a double converts to lanes in
// them (`x + 1.0`) as it would to a double.
template <int W>
struct Lanes {
  double x[W];
  Lanes() = default;
  Lanes(double a) {
    for (int l = 0; l < W; ++l) x[l] = a;
  }
#define LANEWISE(expression)                       \
  Lanes r;                                         \
  for (int l = 0; l < W; ++l) r.x[l] = expression; \
  return r
  friend Lanes operator+(const Lanes& a, const Lanes& b) { LANEWISE(a.x[l] + b.x[l]); }
  friend Lanes operator-(const Lanes& a, const Lanes& b) { LANEWISE(a.x[l] - b.x[l]); }
  friend Lanes operator*(const Lanes& a, const Lanes& b) { LANEWISE(a.x[l] * b.x[l]); }
  friend Lanes operator*(double a, const Lanes& b) { LANEWISE(a * b.x[l]); }
  friend Lanes operator/(const Lanes& a, const Lanes& b) { LANEWISE(a.x[l] / b.x[l]); }
  friend Lanes& operator+=(Lanes& a, const Lanes& b) {
    for (int l = 0; l < W; ++l) a.x[l] += b.x[l];
    return a;
  }
  friend Lanes& operator-=(Lanes& a, const Lanes& b) {
    for (int l = 0; l < W; ++l) a.x[l] -= b.x[l];
    return a;
  }
  friend Lanes lsin(const Lanes& a) { LANEWISE(std::sin(a.x[l])); }
  friend Lanes lcos(const Lanes& a) { LANEWISE(std::cos(a.x[l])); }
  friend Lanes lsqrt(const Lanes& a) { LANEWISE(std::sqrt(a.x[l])); }
  friend Lanes lmax(const Lanes& a, const Lanes& b) { LANEWISE(std::fmax(a.x[l], b.x[l])); }
  friend Lanes select_gt(const Lanes& a, const Lanes& b, const Lanes& x, const Lanes& y) {
    LANEWISE(a.x[l] > b.x[l] ? x.x[l] : y.x[l]);
  }
  friend Lanes unhealthy(const Lanes& d) { LANEWISE(::unhealthy(d.x[l])); }
#undef LANEWISE
  // a chunk's lanes are the members from `member` on
  friend void load(Lanes& x, const double* p, int64_t member, int64_t width, int64_t k) {
    for (int l = 0; l < W; ++l) x.x[l] = p[(member + l) * width + k];
  }
  friend void store(const Lanes& x, double* p, int64_t member, int64_t width, int64_t k) {
    for (int l = 0; l < W; ++l) p[(member + l) * width + k] = x.x[l];
  }
};

template <class T>
struct V3 {
  T v[3];
};
template <class T>
struct M3 {
  T m[3][3];
};
template <class T>
HD V3<T> vconst(const double* a) {
  return {T(a[0]), T(a[1]), T(a[2])};
}
template <class T>
HD V3<T> zero3() {
  return {T(0.0), T(0.0), T(0.0)};
}
template <class T>
HD M3<T> mconst(const double* a) {
  M3<T> r;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) r.m[i][j] = T(a[3 * i + j]);
  return r;
}
template <class T>
HD M3<T> eye() {
  M3<T> r;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) r.m[i][j] = T(i == j ? 1.0 : 0.0);
  return r;
}
template <class T>
HD V3<T> operator+(const V3<T>& a, const V3<T>& b) {
  return {a.v[0] + b.v[0], a.v[1] + b.v[1], a.v[2] + b.v[2]};
}
template <class T>
HD V3<T> operator-(const V3<T>& a, const V3<T>& b) {
  return {a.v[0] - b.v[0], a.v[1] - b.v[1], a.v[2] - b.v[2]};
}
template <class S, class T>  // S: T or a double
HD V3<T> operator*(const S& s, const V3<T>& a) {
  return {s * a.v[0], s * a.v[1], s * a.v[2]};
}
template <class T>
HD T dot(const V3<T>& a, const V3<T>& b) {
  return a.v[0] * b.v[0] + a.v[1] * b.v[1] + a.v[2] * b.v[2];
}
template <class T>
HD V3<T> cross(const V3<T>& a, const V3<T>& b) {
  return {a.v[1] * b.v[2] - a.v[2] * b.v[1], a.v[2] * b.v[0] - a.v[0] * b.v[2], a.v[0] * b.v[1] - a.v[1] * b.v[0]};
}
template <class T>
HD V3<T> mv(const M3<T>& A, const V3<T>& x) {
  V3<T> r;
  for (int i = 0; i < 3; ++i) r.v[i] = A.m[i][0] * x.v[0] + A.m[i][1] * x.v[1] + A.m[i][2] * x.v[2];
  return r;
}
template <class T>
HD V3<T> mtv(const M3<T>& A, const V3<T>& x) {  // Aᵀ x
  V3<T> r;
  for (int i = 0; i < 3; ++i) r.v[i] = A.m[0][i] * x.v[0] + A.m[1][i] * x.v[1] + A.m[2][i] * x.v[2];
  return r;
}
template <class T>
HD M3<T> mm(const M3<T>& A, const M3<T>& B) {
  M3<T> r;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) r.m[i][j] = A.m[i][0] * B.m[0][j] + A.m[i][1] * B.m[1][j] + A.m[i][2] * B.m[2][j];
  return r;
}
template <class T>
HD M3<T> mmt(const M3<T>& A, const M3<T>& B) {  // A Bᵀ
  M3<T> r;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) r.m[i][j] = A.m[i][0] * B.m[j][0] + A.m[i][1] * B.m[j][1] + A.m[i][2] * B.m[j][2];
  return r;
}
template <class T>
HD M3<T> madd(const M3<T>& A, const M3<T>& B) {
  M3<T> r;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) r.m[i][j] = A.m[i][j] + B.m[i][j];
  return r;
}

// a twist (ω, v) or a wrench (n, f) about the world origin
template <class T>
struct S6 {
  V3<T> a, b;
};
template <class T>
HD S6<T> s6add(const S6<T>& x, const S6<T>& y) {
  return {x.a + y.a, x.b + y.b};
}
template <class T>
HD T s6dot(const S6<T>& x, const S6<T>& y) {
  return dot(x.a, y.a) + dot(x.b, y.b);
}
template <class T>
HD S6<T> motion_cross(const S6<T>& V, const S6<T>& S) {
  return {cross(V.a, S.a), cross(V.a, S.b) + cross(V.b, S.a)};
}
template <class T>
HD S6<T> force_cross(const S6<T>& V, const S6<T>& F) {
  return {cross(V.a, F.a) + cross(V.b, F.b), cross(V.a, F.b)};
}
template <class T>
struct Inertia {
  T m;
  V3<T> h;
  M3<T> I;
};
template <class T>
HD S6<T> apply(const Inertia<T>& J, const S6<T>& S) {
  return {mv(J.I, S.a) + cross(J.h, S.b), J.m * S.b + cross(S.a, J.h)};
}

template <class T>
HD M3<T> quaternion_matrix(T w, T x, T y, T z) {
  T norm = lsqrt(w * w + x * x + y * y + z * z);
  w = w / norm, x = x / norm, y = y / norm, z = z / norm;
  M3<T> R;
  T one = T(1.0);
  R.m[0][0] = one - 2.0 * (y * y + z * z), R.m[0][1] = 2.0 * (x * y - w * z), R.m[0][2] = 2.0 * (x * z + w * y);
  R.m[1][0] = 2.0 * (x * y + w * z), R.m[1][1] = one - 2.0 * (x * x + z * z), R.m[1][2] = 2.0 * (y * z - w * x);
  R.m[2][0] = 2.0 * (x * z - w * y), R.m[2][1] = 2.0 * (y * z + w * x), R.m[2][2] = one - 2.0 * (x * x + y * y);
  return R;
}
// E(u) (3 × 4), ω = 2 E(u) u̇ in the body frame
template <class T>
HD void rate_map(const T& w, const T& x, const T& y, const T& z, T E[3][4]) {
  T zero = T(0.0);
  E[0][0] = zero - x, E[0][1] = w, E[0][2] = z, E[0][3] = zero - y;
  E[1][0] = zero - y, E[1][1] = zero - z, E[1][2] = w, E[1][3] = x;
  E[2][0] = zero - z, E[2][1] = y, E[2][2] = zero - x, E[2][3] = w;
}

// An array of a member's work space: element k at p[k × s] (s = 1 for a chunk of lanes, B on
// the GPU's layout, p offset by the member)
template <class X>
struct Arr {
  X* p;
  int64_t s;
  HD X& operator[](int64_t k) const { return p[k * s]; }
  HD Arr from(int64_t k) const { return {p + k * s, s}; }
};

// Cuts a work space into arrays for one member (`offset`) of `stride`; with no base it only
// counts the bytes, for the caller to allocate.
struct Carver {
  char* base;
  int64_t stride, offset;
  size_t used = 0;
  template <class X>
  HD Arr<X> take(int64_t count) {
    Arr<X> a{base ? reinterpret_cast<X*>(base + used) + offset : nullptr, stride};
    used += size_t(count) * size_t(stride) * sizeof(X);
    return a;
  }
};

// The tree's structure, one int64 buffer of sections that `kernels.py` writes (`_structure`):
// its first `SECTIONS + 1` entries are where each section starts and where the last ends.
enum Section {
  PARENTS,          // per body: its parent (-1: the world)
  JOINT_BODY,       // per joint: its body, kind (`Kind`), first coordinate and first dof
  JOINT_KIND,
  JOINT_COORD,
  JOINT_DOF,
  CONNECT_BODIES,   // per connect: its two bodies (-1: the world)
  COORD_BODY,       // per coordinate: its body
  FREE_BODY,        // per body: 1 where a free joint moves it
  QUATERNIONS,      // the first coordinate of each quaternion
  TREE_START,       // per coordinate (n + 1 starts): its ancestors in the coordinates' tree,
  TREE,             // nearest first (M's pattern)
  SOLVE_START,      // the same in the tree M is factored on: the coordinates' tree, or the chain
  SOLVE,            // 0 ← 1 ← … where tendons couple branches
  MOVING_START,     // per body (b + 1 starts): the coordinates that move it, in order
  MOVING,
  BEFORE_START,     // per coordinate (n + 1 starts): its own body's coordinates whose motion
  BEFORE,           // comes before its own, in order
  LOOP_START,       // per connect (k + 1 starts): the coordinates that move either of its
  LOOP,             // bodies, in order (its rows' nonzero columns)
  LOOP_SIDES,       // per entry of LOOP: 1 where its coordinate moves the first body, + 2 the second
  ROWS_START,       // per row of the norms and the connects (their count + 1 starts): the
  ROWS,             // columns its rows of A and of W = L⁻ᵀ Aᵀ can be nonzero on, ascending
  PAIRS_START,      // per pair of those rows, i ≥ j, a lower triangle's entries by rows: the
  PAIRS,            // places in row i's and row j's columns of each column both have, ascending
  SECTIONS
};
enum Kind { HINGE = 0, SLIDE = 1, BALL = 2, FREE = 3 };

struct Args {
  const int64_t* structure;
  int b, J, k, tendons, r, n, p;
  const double *body_pos, *body_rot, *mass, *com, *inertia, *axis, *anchor, *reference, *armature, *damping,
      *stiffness, *spring_ref, *gravity, *connect_anchors, *tendon_coef, *tendon_arm, *gains;
  const double *qpos, *qvel, *applied, *rows_A, *rows_b;
  double alpha, beta, floor, zero_row;
  double *qacc, *force, *health;  // the solve's results
  double *mass_matrix, *forces;   // the dynamics' (`UkTreeDynamics`), and the kinematics and
  double *rotations, *positions, *twists, *velocities, *biases;  // motion it computed them from

  HD const int64_t* section(int s) const { return structure + structure[s]; }
  HD int size(int s) const { return int(structure[s + 1] - structure[s]); }
};

// The columns row i of A and W can be nonzero on, ascending (the norms' and the connects' rows
// their own, closed under M's factor's ancestors, the caller's rows all n), and where W's row
// starts: W keeps only those columns, so its products and the Gram matrix skip the zeros
struct Rows {
  const int64_t *start, *columns, *pair_start, *pairs;
  int own, n;
  HD explicit Rows(const Args& a)
      : start(a.section(ROWS_START)), columns(a.section(ROWS)), pair_start(a.section(PAIRS_START)),
        pairs(a.section(PAIRS)), own(a.size(ROWS_START) - 1), n(a.n) {}
  HD int count(int i) const { return i < own ? int(start[i + 1] - start[i]) : n; }
  HD int column(int i, int t) const { return i < own ? int(columns[start[i] + t]) : t; }
  HD int64_t at(int i) const { return i < own ? start[i] : start[own] + int64_t(i - own) * n; }
  // Wᵢ·Wⱼ (i ≥ j) on the columns both rows have, in W's rows `wi` and `wj`, ascending
  template <class T>
  HD T overlap(int i, int j, Arr<T> wi, Arr<T> wj) const {
    T sum = T(0.0);
    if (i < own) {
      for (int64_t t = pair_start[i * (i + 1) / 2 + j]; t < pair_start[i * (i + 1) / 2 + j + 1]; t += 2)
        sum += wi[pairs[t]] * wj[pairs[t + 1]];
    } else if (j < own) {
      for (int t = 0; t < count(j); ++t) sum += wi[column(j, t)] * wj[t];
    } else {
      for (int c = 0; c < n; ++c) sum += wi[c] * wj[c];
    }
    return sum;
  }
};

// A member's work space
template <class T>
struct Work {
  Arr<M3<T>> Rw;
  Arr<V3<T>> pw;
  Arr<S6<T>> S, Vb, Ab, wrench;
  Arr<Inertia<T>> Ic;
  Arr<T> q, qd, Q, bvec, E, A, x, f, D, z, u, r, e, s, inv, W, G;

  HD Work(Carver& c, const Args& a) {
    int b = a.b, n = a.n, p = a.p;
    Rw = c.take<M3<T>>(b), pw = c.take<V3<T>>(b);
    S = c.take<S6<T>>(n), Vb = c.take<S6<T>>(b), Ab = c.take<S6<T>>(b), wrench = c.take<S6<T>>(b);
    Ic = c.take<Inertia<T>>(b);
    q = c.take<T>(n), qd = c.take<T>(n), Q = c.take<T>(n), bvec = c.take<T>(p);
    E = c.take<T>(int64_t(n) * n), A = c.take<T>(int64_t(p) * n);
    x = c.take<T>(n), f = c.take<T>(n), D = c.take<T>(n), z = c.take<T>(n), u = c.take<T>(n);
    r = c.take<T>(p), e = c.take<T>(p), s = c.take<T>(p), inv = c.take<T>(p);
    W = c.take<T>(int64_t(p) * n), G = c.take<T>(int64_t(p) * p);  // W's rows packed (`Rows`), at most p × n
  }
};

// The U-K solve of one member (or chunk): `M = Lᵀ D L` following the elimination tree, leaves
// first (MuJoCo's `mj_factorM`, in place on M's pattern in E), then the constraint force through
// the Gram matrix of W = D^{-1/2} L⁻ᵀ Aᵀ: rows whose squared norm is at or below `zero_row` times
// the largest left out, the others normalised, pivots at or below `floor` dropped. Results: q̈
// in x, the constraint force Aᵀλ in f, and `uk_solve`'s diagnostics: `inconsistency` (‖B z − e‖
// over ‖e‖ + ‖B‖‖z‖ with B = A L⁻ᵀ, whose norms W's share) and `fault`, 1 where M is not
// positive definite.
template <class T>
HD void uk_solve(const Args& a, const Work<T>& w, T& inconsistency, T& fault) {
  const int n = a.n, p = a.p;
  const int64_t *start = a.section(SOLVE_START), *anc = a.section(SOLVE);
  Arr<T> E = w.E, x = w.x, f = w.f, D = w.D, z = w.z, u = w.u, r = w.r, e = w.e, s = w.s, inv = w.inv, W = w.W,
         G = w.G, A = w.A;
  auto Mx = [&](int i, int j) -> T& { return E[int64_t(i) * n + j]; };
  for (int c = n - 1; c >= 0; --c) {
    T dk = Mx(c, c);
    for (int64_t ai = start[c]; ai < start[c + 1]; ++ai) {
      // row c's later entries, which this update reads, are divided by dk after it
      int i = int(anc[ai]);
      T mci = Mx(c, i), tmp = mci / dk;
      Mx(i, i) -= tmp * mci;
      for (int64_t aj = ai + 1; aj < start[c + 1]; ++aj) Mx(i, int(anc[aj])) -= tmp * Mx(c, int(anc[aj]));
      Mx(c, i) = tmp;
    }
    D[c] = dk;
  }
  fault = T(0.0);
  for (int c = 0; c < n; ++c) fault = lmax(fault, unhealthy(D[c]));
  // L⁻ᵀ y from column c down (all columns, or a row's: their ancestors are among them)
  auto transposed_from = [&](Arr<T> y, int c) {
    T yc = y[c];
    for (int64_t ai = start[c]; ai < start[c + 1]; ++ai) y[anc[ai]] -= Mx(c, int(anc[ai])) * yc;
  };
  auto solve_L = [&](Arr<T> y) {
    for (int c = 0; c < n; ++c) {
      T yc = y[c];
      for (int64_t ai = start[c]; ai < start[c + 1]; ++ai) yc -= Mx(c, int(anc[ai])) * y[anc[ai]];
      y[c] = yc;
    }
  };
  for (int c = 0; c < n; ++c) x[c] = w.Q[c];
  for (int c = n - 1; c >= 0; --c) transposed_from(x, c);
  for (int c = 0; c < n; ++c) x[c] = x[c] / D[c];
  solve_L(x);
  for (int c = 0; c < n; ++c) f[c] = T(0.0);
  inconsistency = T(0.0);
  if (!p) return;
  const Rows rows(a);
  for (int c = 0; c < n; ++c) z[c] = T(1.0) / lsqrt(D[c]);  // D^{-1/2}
  for (int i = 0; i < p; ++i) {
    const int count = rows.count(i);
    Arr<T> wi = W.from(rows.at(i)), Ai = A.from(int64_t(i) * n);
    // L⁻ᵀ Aᵢᵀ in u, on the row's columns: their ancestors are among them
    T ri = w.bvec[i];
    for (int t = 0; t < count; ++t) {
      int c = rows.column(i, t);
      T aic = Ai[c];
      u[c] = aic;
      ri -= aic * x[c];
    }
    for (int t = count - 1; t >= 0; --t) transposed_from(u, rows.column(i, t));
    for (int t = 0; t < count; ++t) wi[t] = u[rows.column(i, t)] * z[rows.column(i, t)];
    r[i] = e[i] = ri;
    for (int j = 0; j <= i; ++j) G[i * p + j] = rows.overlap(i, j, wi, W.from(rows.at(j)));
  }
  T largest = T(0.0), frobenius = T(0.0);  // ‖B‖²
  for (int i = 0; i < p; ++i) frobenius += G[i * p + i], largest = lmax(largest, G[i * p + i]);
  for (int i = 0; i < p; ++i) {
    T gi = G[i * p + i];
    s[i] = select_gt(gi, a.zero_row * largest, lsqrt(gi), T(0.0));
    inv[i] = select_gt(s[i], T(0.0), T(1.0) / s[i], T(0.0));  // N⁻¹, zero for a zero row
  }
  for (int i = 0; i < p; ++i) {
    r[i] = r[i] * inv[i];
    for (int j = 0; j <= i; ++j) G[i * p + j] = G[i * p + j] * inv[i] * inv[j];  // the lower triangle, all that is read
  }
  for (int j = 0; j < p; ++j) {
    T pivot = G[j * p + j];
    inv[j] = select_gt(pivot, T(a.floor), T(1.0) / pivot, T(0.0));
    for (int i = p - 1; i > j; --i) {
      T col = G[i * p + j] * inv[j];
      for (int m = j + 1; m <= i; ++m) G[i * p + m] -= col * G[m * p + j];
      G[i * p + j] = col;
    }
  }
  for (int i = 0; i < p; ++i) {
    T ri = r[i];
    for (int j = 0; j < i; ++j) ri -= G[i * p + j] * r[j];
    r[i] = ri;
  }
  for (int i = 0; i < p; ++i) r[i] = r[i] * inv[i];
  for (int i = p - 1; i >= 0; --i) {
    T ri = r[i];
    for (int j = i + 1; j < p; ++j) ri -= G[j * p + i] * r[j];
    r[i] = ri;
  }
  for (int i = 0; i < p; ++i) r[i] = select_gt(s[i], T(0.0), r[i] / s[i], T(0.0));
  for (int c = 0; c < n; ++c) u[c] = T(0.0);
  for (int i = 0; i < p; ++i) {
    Arr<T> wi = W.from(rows.at(i)), Ai = A.from(int64_t(i) * n);
    T ri = r[i];
    for (int t = 0; t < rows.count(i); ++t) {
      int c = rows.column(i, t);
      u[c] += wi[t] * ri;
      f[c] += Ai[c] * ri;
    }
  }
  T znorm = T(0.0), rnorm = T(0.0), enorm = T(0.0);
  for (int c = 0; c < n; ++c) znorm += u[c] * u[c], z[c] = u[c] * z[c];
  for (int i = 0; i < p; ++i) {
    Arr<T> wi = W.from(rows.at(i));
    T Bz = T(0.0);
    for (int t = 0; t < rows.count(i); ++t) Bz += wi[t] * u[rows.column(i, t)];
    rnorm += (Bz - e[i]) * (Bz - e[i]), enorm += e[i] * e[i];
  }
  T scale = lsqrt(enorm) + lsqrt(frobenius * znorm);
  inconsistency = lsqrt(rnorm) / select_gt(scale, T(0.0), scale, T(1.0));
  solve_L(z);
  for (int c = 0; c < n; ++c) x[c] += z[c];
}

// The equations of motion of the member (or the chunk of members) from `member` in the work
// space: M (its lower triangle in E) and Q with the quaternions' norm rows folded in, and the
// rows A, b of the norms, the connects and the caller's
template <class T>
HD void assemble(const Args& a, const Work<T>& w, int64_t member) {
  const int b = a.b, J = a.J, k = a.k, n = a.n, r = a.r;
  const int64_t *par = a.section(PARENTS), *jb = a.section(JOINT_BODY), *jk = a.section(JOINT_KIND),
                *jc = a.section(JOINT_COORD), *jd = a.section(JOINT_DOF), *cb = a.section(CONNECT_BODIES),
                *cbody = a.section(COORD_BODY), *free = a.section(FREE_BODY), *nquat = a.section(QUATERNIONS),
                *tree_start = a.section(TREE_START), *tree = a.section(TREE),
                *moving_start = a.section(MOVING_START), *moving = a.section(MOVING),
                *before_start = a.section(BEFORE_START), *before = a.section(BEFORE);
  const int nq = a.size(QUATERNIONS);
  const double ga = a.gains[0], gb = a.gains[1];
  Arr<T> q = w.q, qd = w.qd, Qf = w.Q, bvec = w.bvec, E = w.E, A = w.A;
  auto Mx = [&](int i, int j) -> T& { return E[int64_t(i) * n + j]; };
  const V3<T> zero = zero3<T>();

  for (int c = 0; c < n; ++c) load(q[c], a.qpos, member, n, c), load(qd[c], a.qvel, member, n, c);
  // parents first: each body's frame in its parent's, its joints applied in order, and its
  // coordinates' twists from the frame after their joint; then its spatial inertia about the
  // origin, its twist and its acceleration at q̈ = 0 (recursive Newton–Euler, gravity as an
  // upward acceleration of the base), and the wrench that takes
  const V3<T> up = vconst<T>(a.gravity);
  // read in place, not copied: with lanes each is kilobytes (`Lanes`)
  const M3<T> identity = eye<T>();
  const S6<T> still = {zero, zero};
  for (int i = 0; i < b; ++i) {
    const M3<T>& Rp = par[i] >= 0 ? w.Rw[par[i]] : identity;
    M3<T> Rl = free[i] ? identity : mconst<T>(a.body_rot + 9 * i);
    const V3<T>& pp = par[i] >= 0 ? w.pw[par[i]] : zero;
    V3<T> pl = free[i] ? zero : vconst<T>(a.body_pos + 3 * i);
    for (int j = 0; j < J; ++j) {
      if (jb[j] != i) continue;
      int c = int(jc[j]);
      M3<T> R;
      V3<T> t;
      V3<T> ax = vconst<T>(a.axis + 3 * j), o = vconst<T>(a.anchor + 3 * j);
      if (jk[j] == HINGE) {
        T th = q[c] - T(a.reference[c]), sn = lsin(th), cs = T(1.0) - lcos(th);
        M3<T> K;
        T nil = T(0.0);
        K.m[0][0] = nil, K.m[0][1] = nil - ax.v[2], K.m[0][2] = ax.v[1];
        K.m[1][0] = ax.v[2], K.m[1][1] = nil, K.m[1][2] = nil - ax.v[0];
        K.m[2][0] = nil - ax.v[1], K.m[2][1] = ax.v[0], K.m[2][2] = nil;
        M3<T> K2 = mm(K, K);
        R = eye<T>();
        for (int u = 0; u < 3; ++u)
          for (int v = 0; v < 3; ++v) R.m[u][v] += sn * K.m[u][v] + cs * K2.m[u][v];
        t = o - mv(R, o);
      } else if (jk[j] == SLIDE) {
        R = eye<T>();
        t = (q[c] - T(a.reference[c])) * ax;
      } else if (jk[j] == BALL) {
        R = quaternion_matrix(q[c], q[c + 1], q[c + 2], q[c + 3]);
        t = o - mv(R, o);
      } else {
        R = quaternion_matrix(q[c + 3], q[c + 4], q[c + 5], q[c + 6]);
        t = {q[c], q[c + 1], q[c + 2]};
      }
      pl = pl + mv(Rl, t);
      Rl = mm(Rl, R);
      M3<T> Rj = mm(Rp, Rl);  // the joint's frame in the world's
      V3<T> pj = pp + mv(Rp, pl), aw = mv(Rj, ax), ow = jk[j] == FREE ? pj : pj + mv(Rj, o);
      if (jk[j] == HINGE) w.S[c] = {aw, cross(ow, aw)};
      if (jk[j] == SLIDE) w.S[c] = {zero, aw};
      if (jk[j] == BALL || jk[j] == FREE) {
        int u0 = jk[j] == FREE ? c + 3 : c;
        if (jk[j] == FREE)
          for (int d = 0; d < 3; ++d) {
            double unit[3] = {0, 0, 0};
            unit[d] = 1;
            w.S[c + d] = {zero, vconst<T>(unit)};
          }
        T Em[3][4];
        rate_map(q[u0], q[u0 + 1], q[u0 + 2], q[u0 + 3], Em);
        for (int col = 0; col < 4; ++col) {
          V3<T> om = 2.0 * mv(Rj, V3<T>{Em[0][col], Em[1][col], Em[2][col]});
          w.S[u0 + col] = {om, cross(ow, om)};
        }
      }
    }
    const M3<T> Rw = par[i] < 0 ? Rl : mm(Rp, Rl);
    const V3<T> pw = par[i] < 0 ? pl : pp + mv(Rp, pl), cm = pw + mv(Rw, vconst<T>(a.com + 3 * i));
    w.Rw[i] = Rw, w.pw[i] = pw;
    M3<T> I = mmt(mm(Rw, mconst<T>(a.inertia + 9 * i)), Rw);
    T cc = dot(cm, cm);
    for (int u = 0; u < 3; ++u)
      for (int v = 0; v < 3; ++v) I.m[u][v] += a.mass[i] * ((u == v ? cc : T(0.0)) - cm.v[u] * cm.v[v]);
    const Inertia<T> Ib = {T(a.mass[i]), a.mass[i] * cm, I};
    w.Ic[i] = Ib;
    const S6<T>& V = par[i] >= 0 ? w.Vb[par[i]] : still;
    S6<T> A0 = par[i] >= 0 ? w.Ab[par[i]] : still;
    S6<T> Vbody = V;
    auto motion = [&](int c) {
      const S6<T>& Sc = w.S[c];
      return S6<T>{qd[c] * Sc.a, qd[c] * Sc.b};
    };
    for (int c = 0; c < n; ++c) {
      if (cbody[c] != i) continue;
      S6<T> earlier = V, mc = motion(c);
      for (int64_t t = before_start[c]; t < before_start[c + 1]; ++t) earlier = s6add(earlier, motion(int(before[t])));
      A0 = s6add(A0, motion_cross(earlier, mc));
      Vbody = s6add(Vbody, mc);
    }
    w.Vb[i] = Vbody, w.Ab[i] = A0;
    w.wrench[i] = s6add(apply(Ib, S6<T>{A0.a, A0.b - up}), force_cross(Vbody, apply(Ib, Vbody)));
  }
  // composite inertias and the subtrees' wrenches (children after parents)
  for (int i = b - 1; i >= 0; --i)
    if (par[i] >= 0) {
      Inertia<T>& P = w.Ic[par[i]];
      const Inertia<T>& Ci = w.Ic[i];
      P.m += Ci.m, P.h = P.h + Ci.h, P.I = madd(P.I, Ci.I);
      w.wrench[par[i]] = s6add(w.wrench[par[i]], w.wrench[i]);
    }
  // M on the tree's pattern, plus the tendons' armature a cᵀc (the caller cleared E: the
  // solve's pattern, or all of it for M's output), and the bias forces
  for (int j = 0; j < n; ++j) {
    const S6<T>& Sj = w.S[j];
    const S6<T> F = apply(w.Ic[cbody[j]], Sj);
    Mx(j, j) = s6dot(Sj, F);
    for (int64_t t = tree_start[j]; t < tree_start[j + 1]; ++t) Mx(j, int(tree[t])) = s6dot(w.S[tree[t]], F);
    T outside;
    load(outside, a.applied, member, n, j);
    Qf[j] = outside - s6dot(Sj, w.wrench[cbody[j]]);
  }
  // armature and damping per degree of freedom, springs on hinges and slides
  for (int j = 0; j < J; ++j) {
    int c = int(jc[j]), d = int(jd[j]);
    if (jk[j] == HINGE || jk[j] == SLIDE) {
      Mx(c, c) += T(a.armature[d]);
      Qf[c] -= a.damping[d] * qd[c] + a.stiffness[c] * (q[c] - T(a.spring_ref[c]));
      continue;
    }
    if (jk[j] == FREE) {
      for (int e = 0; e < 3; ++e) Mx(c + e, c + e) += T(a.armature[d + e]), Qf[c + e] -= a.damping[d + e] * qd[c + e];
      c += 3, d += 3;
    }
    T Em[3][4];
    rate_map(q[c], q[c + 1], q[c + 2], q[c + 3], Em);
    for (int u = 0; u < 4; ++u)
      for (int v = 0; v <= u; ++v) {
        T add = T(0.0);
        for (int e = 0; e < 3; ++e) add += 4.0 * a.armature[d + e] * Em[e][u] * Em[e][v];
        Mx(c + u, c + v) += add;
      }
    for (int u = 0; u < 4; ++u) {
      T force = T(0.0);
      for (int e = 0; e < 3; ++e) {
        T rate = Em[e][0] * qd[c] + Em[e][1] * qd[c + 1] + Em[e][2] * qd[c + 2] + Em[e][3] * qd[c + 3];
        force += 4.0 * a.damping[d + e] * Em[e][u] * rate;
      }
      Qf[c + u] -= force;
    }
  }
  for (int t = 0; t < a.tendons; ++t)
    for (int i = 0; i < n; ++i)
      for (int j = 0; j <= i; ++j) Mx(i, j) += T(a.tendon_arm[t] * a.tendon_coef[t * n + i] * a.tendon_coef[t * n + j]);
  // rows: the quaternions' norms (folded into M and Q), the connects, then the further ones
  const Rows rows(a);
  for (int i = 0; i < rows.own; ++i)  // the caller's rows are written whole below
    for (int t = 0; t < rows.count(i); ++t) A[int64_t(i) * n + rows.column(i, t)] = T(0.0);
  for (int row = 0; row < nq; ++row) {
    int c = int(nquat[row]);
    T uu = T(0.0), uud = T(0.0), udud = T(0.0), trace = T(0.0);
    for (int e = 0; e < 4; ++e)
      uu += q[c + e] * q[c + e], uud += q[c + e] * qd[c + e], udud += qd[c + e] * qd[c + e], trace += Mx(c + e, c + e);
    T gamma = 0.25 * trace;
    T rhs = T(0.0) - 2.0 * udud - a.alpha * (2.0 * uud) - a.beta * (uu - T(1.0));
    for (int u = 0; u < 4; ++u) {
      A[int64_t(row) * n + c + u] = 2.0 * q[c + u];
      Qf[c + u] += 2.0 * gamma * rhs * q[c + u];
      for (int v = 0; v <= u; ++v) Mx(c + u, c + v) += 4.0 * gamma * q[c + u] * q[c + v];
    }
    bvec[row] = rhs;
  }
  const int64_t *loop_start = a.section(LOOP_START), *loop = a.section(LOOP), *sides = a.section(LOOP_SIDES);
  for (int e = 0; e < k; ++e) {
    // each end: position, velocity Jacobian columns and the rates at q̈ = 0, on the columns
    // that move either end (the rows are zero elsewhere)
    V3<T> xe[2], bias[2], om = zero, alpha1 = zero;
    M3<T> R1 = eye<T>();
    for (int side = 0; side < 2; ++side) {
      int body = int(cb[2 * e + side]);
      V3<T> local = vconst<T>(a.connect_anchors + 6 * e + 3 * side);
      if (body < 0) {
        xe[side] = local, bias[side] = zero;
        continue;
      }
      xe[side] = w.pw[body] + mv(w.Rw[body], local);
      const S6<T>&V = w.Vb[body], &Acc = w.Ab[body];
      V3<T> vel = V.b + cross(V.a, xe[side]);
      bias[side] = Acc.b + cross(Acc.a, xe[side]) + cross(V.a, vel);
      if (side == 0) R1 = w.Rw[body], om = V.a, alpha1 = Acc.a;
    }
    // each column's velocity Jacobians at the two ends (zero where it moves neither) and the
    // first end's angular one, into the rows; Φ̇ = A q̇ as they go
    V3<T> rv = xe[0] - xe[1], rd = zero, phid = zero;
    for (int64_t t = loop_start[e]; t < loop_start[e + 1]; ++t) {
      int c = int(loop[t]), moves = int(sides[t]);
      const S6<T>& Sc = w.S[c];
      V3<T> j0 = moves & 1 ? Sc.b + cross(Sc.a, xe[0]) : zero, j1 = moves & 2 ? Sc.b + cross(Sc.a, xe[1]) : zero;
      rd = rd + qd[c] * (j0 - j1);
      V3<T> col = mtv(R1, (j0 - j1) + cross(rv, moves & 1 ? Sc.a : zero));
      for (int u = 0; u < 3; ++u) A[int64_t(nq + 3 * e + u) * n + c] = col.v[u], phid.v[u] += col.v[u] * qd[c];
    }
    V3<T> bb = bias[0] - bias[1] + cross(rv, alpha1) - 2.0 * cross(om, rd) + cross(om, cross(om, rv));
    V3<T> rhs = mtv(R1, bb), phi = mtv(R1, rv);  // Φ
    for (int u = 0; u < 3; ++u) bvec[nq + 3 * e + u] = T(0.0) - rhs.v[u] - ga * phid.v[u] - gb * phi.v[u];
  }
  for (int e = 0; e < r; ++e) {
    int row = nq + 3 * k + e;
    load(bvec[row], a.rows_b, member, r, e);
    for (int c = 0; c < n; ++c) load(A[int64_t(row) * n + c], a.rows_A, member, int64_t(r) * n, int64_t(e) * n + c);
  }
}

// The solve of the member (or the chunk of members) from `member` into the (B, n), (B, n) and
// (B, 2) outputs
template <class T>
HD void solve(const Args& a, const Work<T>& w, int64_t member) {
  // M's entries that the factor reads: its diagonal and the solve's pattern
  const int n = a.n;
  const int64_t *start = a.section(SOLVE_START), *anc = a.section(SOLVE);
  for (int c = 0; c < n; ++c) {
    w.E[int64_t(c) * n + c] = T(0.0);
    for (int64_t t = start[c]; t < start[c + 1]; ++t) w.E[int64_t(c) * n + anc[t]] = T(0.0);
  }
  assemble(a, w, member);
  T inconsistency, fault;
  uk_solve(a, w, inconsistency, fault);
  for (int c = 0; c < n; ++c) store(w.x[c], a.qacc, member, n, c), store(w.f[c], a.force, member, n, c);
  store(inconsistency, a.health, member, 2, 0), store(fault, a.health, member, 2, 1);
}

// M and Q of the member (or the chunk) into the (B, n, n) and (B, n) outputs, as
// `RigidBodyTree.dynamics` gives them, and what they were computed from, as `Kinematics` and
// `algorithms.motion` give it: the bodies' frames (B, b, 3, 3) and (B, b, 3), the coordinates'
// twists (B, n, 6), the bodies' twists and accelerations at q̈ = 0 without gravity (B, b, 6)
template <class T>
HD void dynamics(const Args& a, const Work<T>& w, int64_t member) {
  const int n = a.n, b = a.b;
  for (int64_t e = 0; e < int64_t(n) * n; ++e) w.E[e] = T(0.0);  // M whole, zero off its pattern
  assemble(a, w, member);
  for (int i = 0; i < n; ++i) {
    store(w.Q[i], a.forces, member, n, i);
    for (int j = 0; j < n; ++j)
      store(w.E[int64_t(i > j ? i : j) * n + (i > j ? j : i)], a.mass_matrix, member, int64_t(n) * n, int64_t(i) * n + j);
  }
  auto six = [&](const S6<T>& x, double* out, int width, int at) {
    for (int u = 0; u < 3; ++u) store(x.a.v[u], out, member, width, 6 * at + u), store(x.b.v[u], out, member, width, 6 * at + 3 + u);
  };
  for (int i = 0; i < b; ++i) {
    for (int u = 0; u < 3; ++u) {
      store(w.pw[i].v[u], a.positions, member, 3 * b, 3 * i + u);
      for (int v = 0; v < 3; ++v) store(w.Rw[i].m[u][v], a.rotations, member, 9 * b, 9 * i + 3 * u + v);
    }
    six(w.Vb[i], a.velocities, 6 * b, i), six(w.Ab[i], a.biases, 6 * b, i);
  }
  for (int c = 0; c < n; ++c) six(w.S[c], a.twists, 6 * n, c);
}

// the handlers' arguments; the rows' count `p` is an attribute, for the structure lives where
// the states do, out of a GPU handler's reach
#define UKJAX_TREE_INPUTS                                                                                          \
  ffi::Buffer<ffi::S64> structure, ffi::Buffer<ffi::F64> body_pos, ffi::Buffer<ffi::F64> body_rot,                 \
      ffi::Buffer<ffi::F64> mass, ffi::Buffer<ffi::F64> com, ffi::Buffer<ffi::F64> inertia,                       \
      ffi::Buffer<ffi::F64> axis, ffi::Buffer<ffi::F64> anchor, ffi::Buffer<ffi::F64> reference,                  \
      ffi::Buffer<ffi::F64> armature, ffi::Buffer<ffi::F64> damping, ffi::Buffer<ffi::F64> stiffness,             \
      ffi::Buffer<ffi::F64> spring_ref, ffi::Buffer<ffi::F64> gravity, ffi::Buffer<ffi::F64> connect_anchors,     \
      ffi::Buffer<ffi::F64> tendon_coef, ffi::Buffer<ffi::F64> tendon_arm, ffi::Buffer<ffi::F64> gains,           \
      ffi::Buffer<ffi::F64> qpos, ffi::Buffer<ffi::F64> qvel, ffi::Buffer<ffi::F64> applied,                      \
      ffi::Buffer<ffi::F64> rows_A, ffi::Buffer<ffi::F64> rows_b, double alpha, double beta, double floor,        \
      double zero_row, int64_t p, int64_t space
#define UKJAX_TREE_SOLVED \
  ffi::ResultBuffer<ffi::F64> qacc, ffi::ResultBuffer<ffi::F64> force, ffi::ResultBuffer<ffi::F64> health

// The handlers' input buffers and attributes in `Args`
static Args arguments(UKJAX_TREE_INPUTS) {
  Args a;
  a.structure = structure.typed_data();
  a.b = int(body_pos.dimensions()[0]), a.J = int(axis.dimensions()[0]), a.k = int(connect_anchors.dimensions()[0]);
  a.tendons = int(tendon_arm.dimensions()[0]), a.r = int(rows_b.dimensions()[1]), a.n = int(qpos.dimensions()[1]);
  a.p = int(p);
  a.body_pos = body_pos.typed_data(), a.body_rot = body_rot.typed_data(), a.mass = mass.typed_data();
  a.com = com.typed_data(), a.inertia = inertia.typed_data(), a.axis = axis.typed_data();
  a.anchor = anchor.typed_data(), a.reference = reference.typed_data(), a.armature = armature.typed_data();
  a.damping = damping.typed_data(), a.stiffness = stiffness.typed_data(), a.spring_ref = spring_ref.typed_data();
  a.gravity = gravity.typed_data(), a.connect_anchors = connect_anchors.typed_data();
  a.tendon_coef = tendon_coef.typed_data(), a.tendon_arm = tendon_arm.typed_data(), a.gains = gains.typed_data();
  a.qpos = qpos.typed_data(), a.qvel = qvel.typed_data(), a.applied = applied.typed_data();
  a.rows_A = rows_A.typed_data(), a.rows_b = rows_b.typed_data();
  a.alpha = alpha, a.beta = beta, a.floor = floor, a.zero_row = zero_row;
  a.qacc = a.force = a.health = a.mass_matrix = a.forces = nullptr;
  a.rotations = a.positions = a.twists = a.velocities = a.biases = nullptr;
  return a;
}

#define UKJAX_TREE_CALL                                                                                            \
  structure, body_pos, body_rot, mass, com, inertia, axis, anchor, reference, armature, damping, stiffness,       \
      spring_ref, gravity, connect_anchors, tendon_coef, tendon_arm, gains, qpos, qvel, applied, rows_A, rows_b,   \
      alpha, beta, floor, zero_row, p, space

// the handlers' binding: the structure, 22 float64 buffers and the attributes, then the results
// (a binding cannot be copied or moved outside XLA's own code: it is taken by reference and
// each step returned as XLA builds it)
template <int N, class Binding>
auto f64_buffers(Binding&& binding) {
  if constexpr (N == 1)
    return std::move(binding).template Arg<ffi::Buffer<ffi::F64>>();
  else
    return f64_buffers<N - 1>(std::move(binding).template Arg<ffi::Buffer<ffi::F64>>());
}
// ... and N float64 results
template <int N, class Binding>
auto f64_results(Binding&& binding) {
  if constexpr (N == 1)
    return std::move(binding).template Ret<ffi::Buffer<ffi::F64>>();
  else
    return f64_results<N - 1>(std::move(binding).template Ret<ffi::Buffer<ffi::F64>>());
}
#define UKJAX_TREE_BINDING(binding)                        \
  f64_buffers<22>(binding.Arg<ffi::Buffer<ffi::S64>>())    \
      .Attr<double>("alpha")                               \
      .Attr<double>("beta")                                \
      .Attr<double>("floor")                               \
      .Attr<double>("zero_row")                            \
      .Attr<int64_t>("p")                                  \
      .Attr<int64_t>("space")
#define UKJAX_TREE_SOLVED_BINDING(binding) f64_results<3>(UKJAX_TREE_BINDING(binding))

// The members in the GPU's layout take a work space of at most `space` bytes: the batch runs in
// slices of `slice` members (all of them where they fit), and a slice in tiles of `TILE`
// members, a warp's, each tile's work space in one piece: value k of the i-th member of a slice
// at `k × TILE + i mod TILE` in tile `i / TILE`, then each member's `extra` bytes of its own (the
// contact solve's, whose arrays a member reads whole). (Laid out `k × slice + i`, a member's
// values lay a slice's width apart, 256 KiB at 32 768 members: Cassie's solve of 131 072 members
// took 39.7 ms on an H200 against 34.6 in tiles, of 32 768 members 6.9 against 6.7.)
constexpr int64_t TILE = 32;
struct Slices {
  int64_t slice;
  size_t work, extra, tile, bytes;  // a tile's work spaces, a member's extra bytes, a tile's bytes, the slice's
  // the work space of the i-th member of a slice that starts at `space`, and its extra bytes
  HD Carver carver(char* space, int64_t i) const { return {space + size_t(i / TILE) * tile, TILE, i % TILE}; }
  HD char* own(char* space, int64_t i) const { return space + size_t(i / TILE) * tile + work + size_t(i % TILE) * extra; }
};
// ... with `work` bytes of work space a tile (none for the contact solve alone)
static Slices slices(size_t work, int64_t B, int64_t space, size_t extra) {
  const size_t tile = work + TILE * extra;
  const int64_t tiles = std::max<int64_t>(1, std::min<int64_t>((B + TILE - 1) / TILE, space / int64_t(tile)));
  const int64_t slice = std::min(B, tiles * TILE);
  return {slice, work, extra, tile, size_t((slice + TILE - 1) / TILE) * tile};
}
static Slices slices(const Args& a, int64_t B, int64_t space, size_t extra) {
  // sized without the structure, which a GPU's handler cannot read (it lives where the states
  // do): the CPU's build in this layout then fails as the GPU's would where sizing reads it
  Args unread = a;
  unread.structure = nullptr;
  Carver sizing{nullptr, TILE, 0};
  Work<double>(sizing, unread);
  return slices(sizing.used, B, space, extra);
}

enum ContactKind { LOWER_LIMIT = 0, UPPER_LIMIT = 1, PLANE = 2 };
enum Mode { OPEN = 0, SLIDING = 1, STICKING = 2 };

// A tree's contacts and their modes per member, and the results of its contact dynamics
// (`UkTreeContacts`): per contact its `ContactKind` and its coordinate or body (`index`, -1 the
// world) and `data`, `width` a contact: a limit's bound, or a sphere's centre in its body,
// radius, the plane's normal and offset and its two tangents; friction; per member each
// contact's mode, sliding direction and friction weight, and its speed `rest`.
struct Contacts {
  int k, width;
  const int64_t* index;
  const double *data, *mu, *mode, *direction, *weight, *rest;
  double rank_floor, cut, well, pivot_floor, slow_turn;
  double *normal, *tangent, *rate, *gap, *slip, *health;
};

// A member's arrays for its contact dynamics, `n` coordinates, `P` rows and `k` contacts: what
// it hands the contact solve, what that returns, and the solve's work space
struct ContactScratch {
  contact::ContactWork solve;
  double *M, *Q, *R, *rhs, *bias_n, *closing, *K, *slide, *direction, *root, *lam, *slide_lam, *unused;

  HD ContactScratch(contact::Bump& s, int n, int P, int k) : solve(s, n, P, k) {
    M = s.take<double>(size_t(n) * n), Q = s.take<double>(n), R = s.take<double>(size_t(P) * n);
    rhs = s.take<double>(P), bias_n = s.take<double>(k), closing = s.take<double>(P);
    K = s.take<double>(size_t(n) * k), slide = s.take<double>(k), direction = s.take<double>(2 * k);
    root = s.take<double>(k), lam = s.take<double>(P), slide_lam = s.take<double>(k), unused = s.take<double>(2 * k);
  }
};
static size_t scratch_bytes(int n, int P, int k) {
  contact::Bump sizing{nullptr};
  ContactScratch(sizing, n, P, k);
  return sizing.used;
}

// A tree's acceleration under its equality rows and its contacts in given modes, of member `m`
// (`kernels.in_modes`: `_stepping.solve_in_modes` for a tree with joint limits and spheres on
// planes fixed in the world): M, Q and the equality rows as `dynamics` and `solve` assemble
// them; each contact's rows in closed form, as `JointLimits.contact_rows` and
// `PlaneContacts.contact_rows` write them; the sliding directions turned as `sliding_now` turns
// them; then the contact solve, as `solve_modes` does it without the contacts' scales. Results:
// q̈, the constraint force, the contacts' normal and tangential forces, the normal rows' rates
// `A q̈ − b`, the gaps and slips, and (inconsistency, 1 where M is positive definite, 1 where the
// sliding contacts' normal forces are solvable).
HD void tree_contacts(const Args& a, const Contacts& c, const Work<double>& w, const ContactScratch& s, int64_t m) {
  const int n = a.n, k = c.k;
  const int pe = a.p, P = pe + 3 * k;  // the equality rows (the norms', the connects', the caller's), then the contacts'
  const int64_t *moving_start = a.section(MOVING_START), *moving = a.section(MOVING);
  double *M = s.M, *R = s.R, *rhs = s.rhs, *bias_n = s.bias_n, *closing = s.closing, *K = s.K, *slide = s.slide;
  double *direction = s.direction, *root = s.root, *lam = s.lam, *slide_lam = s.slide_lam;
  for (int64_t e = 0; e < int64_t(n) * n; ++e) w.E[e] = 0.0;
  assemble(a, w, m);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) M[i * n + j] = w.E[int64_t(i > j ? i : j) * n + (i > j ? j : i)];
  for (int i = 0; i < n; ++i) s.Q[i] = w.Q[i];
  for (int64_t e = 0; e < int64_t(P) * n; ++e) R[e] = 0.0;
  const Rows rows(a);
  for (int row = 0; row < pe; ++row) {
    for (int t = 0; t < rows.count(row); ++t) R[row * n + rows.column(row, t)] = w.A[int64_t(row) * n + rows.column(row, t)];
    rhs[row] = w.bvec[row], closing[row] = 1.0;
  }
  const double *mode = c.mode + m * k, *weight = c.weight + m * k;
  double *gap = c.gap + m * k, *slip = c.slip + m * 2 * k;
  // each contact's normal row, then its two tangent rows, their right-hand sides, its gap and slip
  for (int i = 0; i < k; ++i) {
    double *An = &R[size_t(pe + i) * n], *At = &R[size_t(pe + k + 2 * i) * n];
    const double* d = c.data + i * c.width;
    const int kind = int(c.index[2 * i]), id = int(c.index[2 * i + 1]);
    double bt[2] = {0.0, 0.0};
    if (kind != PLANE) {
      const double sign = kind == LOWER_LIMIT ? 1.0 : -1.0;
      An[id] = sign, gap[i] = sign * (w.q[id] - d[0]), bias_n[i] = 0.0;
    } else {
      const V3<double> centre = vconst<double>(d), normal = vconst<double>(d + 4);
      const V3<double> tangents[2] = {vconst<double>(d + 8), vconst<double>(d + 11)};
      const double radius = d[3];
      V3<double> x = centre, bias = zero3<double>(), alpha = zero3<double>();
      if (id >= 0) {
        x = w.pw[id] + mv(w.Rw[id], centre);
        const S6<double> V = w.Vb[id], Acc = w.Ab[id];
        bias = Acc.b + cross(Acc.a, x) + cross(V.a, V.b + cross(V.a, x)), alpha = Acc.a;
        // the slip is the body's material point's at the touching point (it rolls)
        const V3<double> touching = x - radius * normal;
        for (int64_t t = moving_start[id]; t < moving_start[id + 1]; ++t) {
          const int col = int(moving[t]);
          const S6<double> Sc = w.S[col];
          An[col] = dot(normal, Sc.b + cross(Sc.a, x));
          const V3<double> v = Sc.b + cross(Sc.a, touching);
          At[col] = dot(tangents[0], v), At[n + col] = dot(tangents[1], v);
        }
      }
      gap[i] = dot(normal, x) - radius - d[7], bias_n[i] = -dot(normal, bias);
      const V3<double> rolling = bias + radius * cross(normal, alpha);
      bt[0] = -dot(tangents[0], rolling), bt[1] = -dot(tangents[1], rolling);
    }
    // (a limit's tangent rows are zero: the loops over the coordinates below skip them)
    const bool plane = kind == PLANE;
    double rates[2] = {0.0, 0.0};
    for (int col = 0; col < n && plane; ++col) rates[0] += At[col] * w.qd[col], rates[1] += At[n + col] * w.qd[col];
    slip[2 * i] = rates[0], slip[2 * i + 1] = rates[1];
    // a sliding contact's direction where it slips forwards: its slip's, turned below `rest`
    // into the one it started in, `v + slow_turn (rest − |v|) d` (`sliding_now`)
    const double* given = c.direction + m * 2 * k + 2 * i;
    const double slow = c.slow_turn * ::fmax(c.rest[m] - ::hypot(rates[0], rates[1]), 0.0);
    const double turned[2] = {rates[0] + slow * given[0], rates[1] + slow * given[1]};
    const double length = ::hypot(turned[0], turned[1]);
    const bool turn = mode[i] == SLIDING && rates[0] * given[0] + rates[1] * given[1] > 0;
    direction[2 * i] = turn ? turned[0] / length : given[0], direction[2 * i + 1] = turn ? turned[1] / length : given[1];
    // the sliding friction's direction on the coordinates (the solve reads K's column only
    // where the contact slides), then a sticking contact's tangent rows scaled by √weight (its
    // share of the friction; the solve reads them only where it sticks)
    slide[i] = mode[i] == SLIDING && c.mu[i] > 0 ? 1.0 : 0.0, root[i] = ::sqrt(weight[i]);
    for (int col = 0; col < n && slide[i] != 0; ++col)
      K[col * k + i] = c.mu[i] * (At[col] * direction[2 * i] + At[n + col] * direction[2 * i + 1]);
    const bool stick = mode[i] == STICKING;
    closing[pe + i] = mode[i] != OPEN ? 1.0 : 0.0, rhs[pe + i] = mode[i] != OPEN ? bias_n[i] : 0.0;
    for (int e = 0; e < 2; ++e) {
      closing[pe + k + 2 * i + e] = stick ? 1.0 : 0.0, rhs[pe + k + 2 * i + e] = stick ? root[i] * bt[e] : 0.0;
      for (int col = 0; col < n && stick && plane; ++col) At[e * n + col] *= root[i];
    }
  }
  double* x = a.qacc + m * n;
  double health[3];
  contact::solve(s.solve, n, P, k, pe, M, s.Q, R, rhs, closing, K, slide, false, c.rank_floor, c.cut, c.well, x,
                 a.force + m * n, lam, slide_lam, s.unused, s.unused + k, health);
  double *normal = c.normal + m * k, *tangent = c.tangent + m * 2 * k, *rate = c.rate + m * k, *out = c.health + m * 3;
  bool solvable = health[2] > c.pivot_floor;
  for (int i = 0; i < k; ++i) {
    solvable = solvable && ::fabs(slide_lam[i]) < INFINITY;
    normal[i] = mode[i] != OPEN ? lam[pe + i] : 0.0;
    for (int e = 0; e < 2; ++e)
      tangent[2 * i + e] = (mode[i] == STICKING ? root[i] * lam[pe + k + 2 * i + e] : 0.0) -
                           slide[i] * c.mu[i] * normal[i] * direction[2 * i + e];
    double Ax = 0.0;
    for (int col = 0; col < n; ++col) Ax += R[size_t(pe + i) * n + col] * x[col];
    rate[i] = Ax - bias_n[i];
  }
  out[0] = health[0], out[1] = health[1], out[2] = solvable ? 1.0 : 0.0;
}

// the contact dynamics' further arguments and results; `tiles` (a CPU's) lays the members out
// as on a GPU, where they always are
#define UKJAX_CONTACT_INPUTS                                                                                     \
  ffi::Buffer<ffi::S64> contact_index, ffi::Buffer<ffi::F64> contact_data, ffi::Buffer<ffi::F64> friction_b,    \
      ffi::Buffer<ffi::F64> mode_b, ffi::Buffer<ffi::F64> direction_b, ffi::Buffer<ffi::F64> weight_b,          \
      ffi::Buffer<ffi::F64> rest_b, double rank_floor, double cut, double well, double pivot_floor,             \
      double slow_turn, int64_t tiles, ffi::ResultBuffer<ffi::F64> qacc, ffi::ResultBuffer<ffi::F64> force,      \
      ffi::ResultBuffer<ffi::F64> normal_out, ffi::ResultBuffer<ffi::F64> tangent_out,                          \
      ffi::ResultBuffer<ffi::F64> rate_out, ffi::ResultBuffer<ffi::F64> gap_out,                                \
      ffi::ResultBuffer<ffi::F64> slip_out, ffi::ResultBuffer<ffi::F64> health_out
#define UKJAX_CONTACT_BINDING(binding)                                                                              \
  f64_results<8>(f64_buffers<6>(UKJAX_TREE_BINDING(binding).Arg<ffi::Buffer<ffi::S64>>())                          \
                     .Attr<double>("rank_floor")                                                                    \
                     .Attr<double>("cut")                                                                           \
                     .Attr<double>("well")                                                                          \
                     .Attr<double>("pivot_floor")                                                                   \
                     .Attr<double>("slow_turn")                                                                     \
                     .Attr<int64_t>("tiles"))

#define UKJAX_CONTACT_CALL                                                                                    \
  contact_index, contact_data, friction_b, mode_b, direction_b, weight_b, rest_b, rank_floor, cut, well,      \
      pivot_floor, slow_turn, tiles, qacc, force, normal_out, tangent_out, rate_out, gap_out, slip_out,       \
      health_out

// The contact dynamics' inputs and results in `Contacts` (q̈ and the constraint force in `a`'s)
static Contacts contact_arguments(Args& a, UKJAX_CONTACT_INPUTS) {
  Contacts c;
  c.k = int(friction_b.dimensions()[0]), c.width = int(contact_data.dimensions()[1]);
  c.index = contact_index.typed_data(), c.data = contact_data.typed_data(), c.mu = friction_b.typed_data();
  c.mode = mode_b.typed_data(), c.direction = direction_b.typed_data(), c.weight = weight_b.typed_data();
  c.rest = rest_b.typed_data();
  c.rank_floor = rank_floor, c.cut = cut, c.well = well, c.pivot_floor = pivot_floor, c.slow_turn = slow_turn;
  a.qacc = qacc->typed_data(), a.force = force->typed_data(), c.normal = normal_out->typed_data();
  c.tangent = tangent_out->typed_data(), c.rate = rate_out->typed_data(), c.gap = gap_out->typed_data();
  c.slip = slip_out->typed_data(), c.health = health_out->typed_data();
  return c;
}

// The contact solve at fixed modes alone (`UkContactSolve`: the XLA route's
// `_unilateral.solve_modes`, which hands it M, Q and the rows) of a batch of states, state `s`
// at `s` × its size in each array; inputs and results as `contact::solve` takes them
struct ContactSolve {
  int n, P, k, p;
  bool scales;
  double floor, cut, well;
  const double *M, *Q, *R, *b, *closing, *K, *slide;
  double *x, *force, *lam, *slide_lam, *mobility, *free_rate, *health;

  HD void operator()(const contact::ContactWork& w, int64_t s) const {
    const int64_t nn = n, PP = P, kk = k;
    contact::solve(w, n, P, k, p, M + s * nn * nn, Q + s * nn, R + s * PP * nn, b + s * PP, closing + s * PP,
                   K + s * nn * kk, slide + s * kk, scales, floor, cut, well, x + s * nn, force + s * nn,
                   lam + s * PP, slide_lam + s * kk, mobility + s * kk, free_rate + s * kk, health + s * 3);
  }
};

#define UKJAX_SOLVE_INPUTS                                                                                         \
  ffi::Buffer<ffi::F64> Mb, ffi::Buffer<ffi::F64> Qb, ffi::Buffer<ffi::F64> Rb, ffi::Buffer<ffi::F64> bb,          \
      ffi::Buffer<ffi::F64> closing_b, ffi::Buffer<ffi::F64> Kb, ffi::Buffer<ffi::F64> slide_b, int64_t p_eq,      \
      int64_t scales, double floor, double cut, double well, int64_t space, ffi::ResultBuffer<ffi::F64> x_out,   \
      ffi::ResultBuffer<ffi::F64> force_out, ffi::ResultBuffer<ffi::F64> lam_out,                               \
      ffi::ResultBuffer<ffi::F64> slide_out, ffi::ResultBuffer<ffi::F64> mobility_out,                          \
      ffi::ResultBuffer<ffi::F64> free_out, ffi::ResultBuffer<ffi::F64> health_out
#define UKJAX_SOLVE_BINDING(binding)                                                                                 \
  f64_results<7>(f64_buffers<7>(binding)                                                                             \
                     .Attr<int64_t>("p")                                                                             \
                     .Attr<int64_t>("scales")                                                                        \
                     .Attr<double>("floor")                                                                          \
                     .Attr<double>("cut")                                                                            \
                     .Attr<double>("well")                                                                           \
                     .Attr<int64_t>("space"))

// The solve's buffers in `ContactSolve`, and the batch's states (its leading dimensions)
static ContactSolve solve_arguments(int64_t& batch, UKJAX_SOLVE_INPUTS) {
  ContactSolve c;
  c.n = int(Qb.dimensions().back()), c.P = int(bb.dimensions().back()), c.k = int(slide_b.dimensions().back());
  c.p = int(p_eq), c.scales = scales != 0, c.floor = floor, c.cut = cut, c.well = well;
  c.M = Mb.typed_data(), c.Q = Qb.typed_data(), c.R = Rb.typed_data(), c.b = bb.typed_data();
  c.closing = closing_b.typed_data(), c.K = Kb.typed_data(), c.slide = slide_b.typed_data();
  c.x = x_out->typed_data(), c.force = force_out->typed_data(), c.lam = lam_out->typed_data();
  c.slide_lam = slide_out->typed_data(), c.mobility = mobility_out->typed_data();
  c.free_rate = free_out->typed_data(), c.health = health_out->typed_data();
  batch = int64_t(Qb.element_count()) / std::max(c.n, 1);
  return c;
}

#define UKJAX_SOLVE_CALL                                                                                          \
  Mb, Qb, Rb, bb, closing_b, Kb, slide_b, p_eq, scales, floor, cut, well, space, x_out, force_out, lam_out,         \
      slide_out, mobility_out, free_out, health_out

#ifdef UKJAX_CUDA

__global__ void tree_kernel(Args a, char* space, Slices plan, int64_t first, int64_t count) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  Carver carver = plan.carver(space, i);
  solve<double>(a, Work<double>(carver, a), first + i);
}

__global__ void contacts_kernel(Args a, Contacts c, char* space, Slices plan, int64_t first, int64_t count) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  Carver carver = plan.carver(space, i);
  contact::Bump bump{plan.own(space, i)};
  tree_contacts(a, c, Work<double>(carver, a), ContactScratch(bump, a.n, a.p + 3 * c.k, c.k), first + i);
}

// The stream's memory pool keeps what it holds: its default gives it back to the system at
// every synchronisation, and the next call's work space was mapped again (on an H200, 4.6 ms
// of a 12 ms Cassie solve at 32 768 members; a simulation of them ran 0.65 M steps/s, 1.12 M
// with the pool kept)
static cudaError_t keep_pool() {
  int device = 0;
  cudaError_t error = cudaGetDevice(&device);
  cudaMemPool_t pool;
  if (error == cudaSuccess) error = cudaDeviceGetDefaultMemPool(&pool, device);
  uint64_t keep = UINT64_MAX;
  if (error == cudaSuccess) error = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
  return error;
}

// `launch(space, first, count, blocks)` on each slice of the batch's B members (`plan`), `blocks`
// of `THREADS` threads, one a member, in a work space from the stream's memory pool, freed in the
// stream's order after the kernels (XLA's scratch allocator refused it on jax 0.11.2)
constexpr int THREADS = 128;
template <class Launch>
static ffi::Error on_gpu(cudaStream_t stream, const Slices& plan, int64_t B, const char* name, Launch launch) {
  void* work = nullptr;
  static const cudaError_t kept = keep_pool();
  cudaError_t error = kept == cudaSuccess ? cudaMallocAsync(&work, plan.bytes, stream) : kept;
  if (error == cudaSuccess) {
    for (int64_t first = 0; first < B && error == cudaSuccess; first += plan.slice) {
      const int64_t count = std::min(plan.slice, B - first);
      launch(static_cast<char*>(work), first, count, unsigned((count + THREADS - 1) / THREADS));
      error = cudaGetLastError();
    }
    cudaError_t freed = cudaFreeAsync(work, stream);
    if (error == cudaSuccess) error = freed;
  }
  if (error != cudaSuccess) return ffi::Error::Internal(std::string(name) + ": " + cudaGetErrorString(error));
  return ffi::Error::Success();
}

static ffi::Error UkTreeCudaImpl(cudaStream_t stream, UKJAX_TREE_INPUTS, UKJAX_TREE_SOLVED) {
  Args a = arguments(UKJAX_TREE_CALL);
  a.qacc = qacc->typed_data(), a.force = force->typed_data(), a.health = health->typed_data();
  const int64_t B = qpos.dimensions()[0];
  const Slices plan = slices(a, B, space, 0);
  return on_gpu(stream, plan, B, "ukjax's tree kernel", [&](char* work, int64_t first, int64_t count, unsigned blocks) {
    tree_kernel<<<blocks, THREADS, 0, stream>>>(a, work, plan, first, count);
  });
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(UkTreeCuda, UkTreeCudaImpl,
                              UKJAX_TREE_SOLVED_BINDING(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()));

static ffi::Error UkTreeContactsCudaImpl(cudaStream_t stream, UKJAX_TREE_INPUTS, UKJAX_CONTACT_INPUTS) {
  Args a = arguments(UKJAX_TREE_CALL);
  const Contacts c = contact_arguments(a, UKJAX_CONTACT_CALL);
  const int64_t B = qpos.dimensions()[0];
  const Slices plan = slices(a, B, space, scratch_bytes(a.n, a.p + 3 * c.k, c.k));
  return on_gpu(stream, plan, B, "ukjax's contact kernel", [&](char* work, int64_t first, int64_t count, unsigned blocks) {
    contacts_kernel<<<blocks, THREADS, 0, stream>>>(a, c, work, plan, first, count);
  });
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(UkTreeContactsCuda, UkTreeContactsCudaImpl,
                              UKJAX_CONTACT_BINDING(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()));

__global__ void contact_solve_kernel(ContactSolve solve, char* space, Slices plan, int64_t first, int64_t count) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  contact::Bump bump{plan.own(space, i)};
  solve(contact::ContactWork(bump, solve.n, solve.P, solve.k), first + i);
}

static ffi::Error UkContactSolveCudaImpl(cudaStream_t stream, UKJAX_SOLVE_INPUTS) {
  int64_t B = 0;
  const ContactSolve solve = solve_arguments(B, UKJAX_SOLVE_CALL);
  const Slices plan = slices(0, B, space, contact::work_bytes(solve.n, solve.P, solve.k));
  return on_gpu(stream, plan, B, "ukjax's contact solve", [&](char* work, int64_t first, int64_t count, unsigned blocks) {
    contact_solve_kernel<<<blocks, THREADS, 0, stream>>>(solve, work, plan, first, count);
  });
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(UkContactSolveCuda, UkContactSolveCudaImpl,
                              UKJAX_SOLVE_BINDING(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()));

#else

// `each(work, own, member)` for every member of the batch: a chunk of lanes at a time in one
// work space, or (one lane) the members one after another, in the GPU's layout and slices or,
// not `tiles` or one member, in one compact work space, with `extra` bytes of their own at `own`
template <class Each>
static ffi::Error members(const Args& a, int64_t B, int64_t space, Each each, size_t extra = 0, bool tiles = true) {
  if (B % TAIL) return ffi::Error::InvalidArgument("the batch must be a multiple of the lanes per chunk");
  // kept by each thread from one call to the next: a simulation calls for one state at a time
  static thread_local std::vector<double> memory;
  if constexpr (C > 1) {
    // the chunks of C lanes, then of TAIL, each width in a work space of its own
    int64_t b0 = 0;
    auto chunks = [&](auto lanes, int64_t width, int64_t end) {
      using T = decltype(lanes);
      Carver sizing{nullptr, 1, 0};
      Work<T>(sizing, a);
      memory.resize(sizing.used / sizeof(double) + sizeof(T) / sizeof(double));
      Carver carver{reinterpret_cast<char*>(memory.data()), 1, 0};
      Work<T> work(carver, a);
      for (; b0 + width <= end; b0 += width) each(work, nullptr, b0);
    };
    chunks(Lanes<C>(), C, B);
    if constexpr (TAIL < C) chunks(Lanes<TAIL>(), TAIL, B);
  } else if (tiles && B > 1) {  // one state: its values side by side, not a tile apart
    const Slices plan = slices(a, B, space, extra);
    memory.resize(plan.bytes / sizeof(double) + 1);
    char* base = reinterpret_cast<char*>(memory.data());
    for (int64_t m = 0; m < B; ++m) {
      Carver carver = plan.carver(base, m % plan.slice);
      each(Work<double>(carver, a), plan.own(base, m % plan.slice), m);
    }
  } else {
    Carver sizing{nullptr, 1, 0};
    Work<double>(sizing, a);
    memory.resize((sizing.used + extra) / sizeof(double) + 1);
    char* base = reinterpret_cast<char*>(memory.data());
    Carver carver{base, 1, 0};
    const Work<double> work(carver, a);
    for (int64_t m = 0; m < B; ++m) each(work, base + sizing.used, m);
  }
  return ffi::Error::Success();
}

static ffi::Error UkTreeImpl(UKJAX_TREE_INPUTS, UKJAX_TREE_SOLVED) {
  Args a = arguments(UKJAX_TREE_CALL);
  a.qacc = qacc->typed_data(), a.force = force->typed_data(), a.health = health->typed_data();
  return members(a, qpos.dimensions()[0], space, [&](const auto& work, char*, int64_t m) { solve(a, work, m); });
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(UkTree, UkTreeImpl, UKJAX_TREE_SOLVED_BINDING(ffi::Ffi::Bind()));

// M and Q alone (`RigidBodyTree.dynamics`), with the kinematics and motion behind them (what a
// system with contacts builds its rows from): it solves them elsewhere
static ffi::Error UkTreeDynamicsImpl(UKJAX_TREE_INPUTS, ffi::ResultBuffer<ffi::F64> mass_out,
                                     ffi::ResultBuffer<ffi::F64> forces_out, ffi::ResultBuffer<ffi::F64> rotations,
                                     ffi::ResultBuffer<ffi::F64> positions, ffi::ResultBuffer<ffi::F64> twists,
                                     ffi::ResultBuffer<ffi::F64> velocities, ffi::ResultBuffer<ffi::F64> biases) {
  Args a = arguments(UKJAX_TREE_CALL);
  a.mass_matrix = mass_out->typed_data(), a.forces = forces_out->typed_data();
  a.rotations = rotations->typed_data(), a.positions = positions->typed_data(), a.twists = twists->typed_data();
  a.velocities = velocities->typed_data(), a.biases = biases->typed_data();
  return members(a, qpos.dimensions()[0], space, [&](const auto& work, char*, int64_t m) { dynamics(a, work, m); });
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(UkTreeDynamics, UkTreeDynamicsImpl, f64_results<7>(UKJAX_TREE_BINDING(ffi::Ffi::Bind())));

#if UKJAX_LANES == 1
// The contact dynamics of the batch, one member after another: in one compact work space (the
// GPU's layout puts a member's values a tile apart: Cassie's M alone then spans 300 KiB), or,
// `tiles`, in the GPU's layout and slices, which the tests run on a CPU
static ffi::Error UkTreeContactsImpl(UKJAX_TREE_INPUTS, UKJAX_CONTACT_INPUTS) {
  Args a = arguments(UKJAX_TREE_CALL);
  const Contacts c = contact_arguments(a, UKJAX_CONTACT_CALL);
  const int P = a.p + 3 * c.k;
  auto each = [&](const Work<double>& work, char* own, int64_t m) {
    contact::Bump bump{own};
    tree_contacts(a, c, work, ContactScratch(bump, a.n, P, c.k), m);
  };
  return members(a, qpos.dimensions()[0], space, each, scratch_bytes(a.n, P, c.k), tiles != 0);
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(UkTreeContacts, UkTreeContactsImpl, UKJAX_CONTACT_BINDING(ffi::Ffi::Bind()));

// The contact solve alone, one state after another in one work space, kept by each thread from
// one call to the next (a simulation calls this for one state at a time; allocating it per state
// cost a tenth of a contact solve on Cassie)
static ffi::Error UkContactSolveImpl(UKJAX_SOLVE_INPUTS) {
  int64_t B = 0;
  const ContactSolve solve = solve_arguments(B, UKJAX_SOLVE_CALL);
  static thread_local std::vector<double> memory;
  memory.resize(contact::work_bytes(solve.n, solve.P, solve.k) / sizeof(double) + 1);
  contact::Bump bump{reinterpret_cast<char*>(memory.data())};
  const contact::ContactWork work(bump, solve.n, solve.P, solve.k);
  for (int64_t s = 0; s < B; ++s) solve(work, s);
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(UkContactSolve, UkContactSolveImpl, UKJAX_SOLVE_BINDING(ffi::Ffi::Bind()));
#endif

#endif
