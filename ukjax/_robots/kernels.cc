// The whole U-K acceleration of a rigid-body tree for B states in one XLA FFI call, the batch
// the minor axis (`UkTree`): kinematics (hinge, slide, ball and free joints), M by composite
// bodies, the bias forces by recursive Newton–Euler, joint damping, springs and armature, the
// quaternions' norm rows folded in as `RigidBodyTree.dynamics` folds them, `connect` rows as
// `Connect._rows` writes them (Baumgarte-stabilized), the fixed tendons' armature, and what the
// caller evaluates (forces applied from outside, further constraint rows) added; then the U-K
// solve (`Solver`). The library's formulas, in world-frame spatial vectors; every value is a
// vector of C lanes, a loop the compiler vectorizes. Built and called by `kernels.py`, which
// checks that a system is made only of what this file and the caller model.
#include <cmath>
#include <cstdint>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

// lanes per chunk: 8, 16, 32, 64 gave 8.9, 6.3, 4.5, 5.0 µs per Cassie solve; built with 1 too,
// for one state at a time
#ifndef UKJAX_LANES
#define UKJAX_LANES 32
#endif
constexpr int C = UKJAX_LANES;

struct L {
  double x[C];
};
static inline L lanes(double a) {
  L r;
  for (int l = 0; l < C; ++l) r.x[l] = a;
  return r;
}
static inline L operator+(const L& a, const L& b) {
  L r;
  for (int l = 0; l < C; ++l) r.x[l] = a.x[l] + b.x[l];
  return r;
}
static inline L operator-(const L& a, const L& b) {
  L r;
  for (int l = 0; l < C; ++l) r.x[l] = a.x[l] - b.x[l];
  return r;
}
static inline L operator*(const L& a, const L& b) {
  L r;
  for (int l = 0; l < C; ++l) r.x[l] = a.x[l] * b.x[l];
  return r;
}
static inline L operator*(double a, const L& b) {
  L r;
  for (int l = 0; l < C; ++l) r.x[l] = a * b.x[l];
  return r;
}
static inline L operator/(const L& a, const L& b) {
  L r;
  for (int l = 0; l < C; ++l) r.x[l] = a.x[l] / b.x[l];
  return r;
}
static inline L& operator+=(L& a, const L& b) {
  for (int l = 0; l < C; ++l) a.x[l] += b.x[l];
  return a;
}
static inline L& operator-=(L& a, const L& b) {
  for (int l = 0; l < C; ++l) a.x[l] -= b.x[l];
  return a;
}
static inline L lsin(const L& a) {
  L r;
  for (int l = 0; l < C; ++l) r.x[l] = std::sin(a.x[l]);
  return r;
}
static inline L lcos(const L& a) {
  L r;
  for (int l = 0; l < C; ++l) r.x[l] = std::cos(a.x[l]);
  return r;
}
static inline L lsqrt(const L& a) {
  L r;
  for (int l = 0; l < C; ++l) r.x[l] = std::sqrt(a.x[l]);
  return r;
}

struct V3 {
  L v[3];
};
struct M3 {
  L m[3][3];
};
static V3 vconst(const double* a) { return {lanes(a[0]), lanes(a[1]), lanes(a[2])}; }
static M3 mconst(const double* a) {
  M3 r;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) r.m[i][j] = lanes(a[3 * i + j]);
  return r;
}
static M3 eye() {
  M3 r;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) r.m[i][j] = lanes(i == j ? 1.0 : 0.0);
  return r;
}
static V3 operator+(const V3& a, const V3& b) { return {a.v[0] + b.v[0], a.v[1] + b.v[1], a.v[2] + b.v[2]}; }
static V3 operator-(const V3& a, const V3& b) { return {a.v[0] - b.v[0], a.v[1] - b.v[1], a.v[2] - b.v[2]}; }
static V3 operator*(const L& s, const V3& a) { return {s * a.v[0], s * a.v[1], s * a.v[2]}; }
static V3 operator*(double s, const V3& a) { return {s * a.v[0], s * a.v[1], s * a.v[2]}; }
static L dot(const V3& a, const V3& b) { return a.v[0] * b.v[0] + a.v[1] * b.v[1] + a.v[2] * b.v[2]; }
static V3 cross(const V3& a, const V3& b) {
  return {a.v[1] * b.v[2] - a.v[2] * b.v[1], a.v[2] * b.v[0] - a.v[0] * b.v[2], a.v[0] * b.v[1] - a.v[1] * b.v[0]};
}
static V3 mv(const M3& A, const V3& x) {
  V3 r;
  for (int i = 0; i < 3; ++i) r.v[i] = A.m[i][0] * x.v[0] + A.m[i][1] * x.v[1] + A.m[i][2] * x.v[2];
  return r;
}
static V3 mtv(const M3& A, const V3& x) {  // Aᵀ x
  V3 r;
  for (int i = 0; i < 3; ++i) r.v[i] = A.m[0][i] * x.v[0] + A.m[1][i] * x.v[1] + A.m[2][i] * x.v[2];
  return r;
}
static M3 mm(const M3& A, const M3& B) {
  M3 r;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) r.m[i][j] = A.m[i][0] * B.m[0][j] + A.m[i][1] * B.m[1][j] + A.m[i][2] * B.m[2][j];
  return r;
}
static M3 mmt(const M3& A, const M3& B) {  // A Bᵀ
  M3 r;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) r.m[i][j] = A.m[i][0] * B.m[j][0] + A.m[i][1] * B.m[j][1] + A.m[i][2] * B.m[j][2];
  return r;
}
static M3 madd(const M3& A, const M3& B) {
  M3 r;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) r.m[i][j] = A.m[i][j] + B.m[i][j];
  return r;
}

// a twist (ω, v) or a wrench (n, f) about the world origin
struct S6 {
  V3 a, b;
};
static S6 s6add(const S6& x, const S6& y) { return {x.a + y.a, x.b + y.b}; }
static L s6dot(const S6& x, const S6& y) { return dot(x.a, y.a) + dot(x.b, y.b); }
static S6 motion_cross(const S6& V, const S6& S) { return {cross(V.a, S.a), cross(V.a, S.b) + cross(V.b, S.a)}; }
static S6 force_cross(const S6& V, const S6& F) { return {cross(V.a, F.a) + cross(V.b, F.b), cross(V.a, F.b)}; }
struct Inertia {
  L m;
  V3 h;
  M3 I;
};
static S6 apply(const Inertia& J, const S6& S) {
  return {mv(J.I, S.a) + cross(J.h, S.b), J.m * S.b + cross(S.a, J.h)};
}

static M3 quaternion_matrix(L w, L x, L y, L z) {
  L norm = lsqrt(w * w + x * x + y * y + z * z);
  w = w / norm, x = x / norm, y = y / norm, z = z / norm;
  M3 R;
  L one = lanes(1.0);
  R.m[0][0] = one - 2.0 * (y * y + z * z), R.m[0][1] = 2.0 * (x * y - w * z), R.m[0][2] = 2.0 * (x * z + w * y);
  R.m[1][0] = 2.0 * (x * y + w * z), R.m[1][1] = one - 2.0 * (x * x + z * z), R.m[1][2] = 2.0 * (y * z - w * x);
  R.m[2][0] = 2.0 * (x * z - w * y), R.m[2][1] = 2.0 * (y * z + w * x), R.m[2][2] = one - 2.0 * (x * x + y * y);
  return R;
}
// E(u) (3 × 4), ω = 2 E(u) u̇ in the body frame
static void rate_map(const L* u, L E[3][4]) {
  const L &w = u[0], &x = u[1], &y = u[2], &z = u[3];
  L zero = lanes(0.0);
  E[0][0] = zero - x, E[0][1] = w, E[0][2] = z, E[0][3] = zero - y;
  E[1][0] = zero - y, E[1][1] = zero - z, E[1][2] = w, E[1][3] = x;
  E[2][0] = zero - z, E[2][1] = y, E[2][2] = zero - x, E[2][3] = w;
}

// The U-K solve of one chunk: `M = Lᵀ D L` following the elimination tree, leaves first
// (MuJoCo's `mj_factorM`, in place on M's pattern), then the constraint force through the Gram
// matrix of W = D^{-1/2} L⁻ᵀ Aᵀ: rows whose squared norm is at or below `zero_row` times the largest
// left out, the others normalised, pivots at or below `floor` dropped. Results: q̈ in x, the
// constraint force Aᵀλ in f, and `uk_solve`'s diagnostics: `inconsistency` (‖B z − e‖ over
// ‖e‖ + ‖B‖‖z‖ with B = A L⁻ᵀ, whose norms W's share) and `fault`, 1 where M is not positive
// definite.
struct Solver {
  int n, p;
  std::vector<std::vector<int>> anc;  // each coordinate's ancestors in the elimination tree
  std::vector<L> x, f, D, z, u, r, e, s, inv, W, G;
  L inconsistency, fault;

  Solver(const std::vector<int>& parent, int p)
      : n(int(parent.size())), p(p), anc(parent.size()), x(n), f(n), D(n), z(n), u(n), r(p), e(p), s(p),
        inv(p), W((size_t)p * n), G((size_t)p * p) {
    for (int c = 0; c < n; ++c)
      for (int a = parent[c]; a >= 0; a = parent[a]) anc[c].push_back(a);
  }

  // E: M's entries (n × n, row c holding M[c][a] for the ancestors a of c, and the diagonal),
  // factored in place; Q (n), A (p × n), b (p)
  void solve(std::vector<L>& E, const std::vector<L>& Q, const std::vector<L>& A, const std::vector<L>& b,
             double floor, double zero_row) {
    auto Mx = [&](int i, int j) -> L& { return E[(size_t)i * n + j]; };
    for (int c = n - 1; c >= 0; --c) {
      L dk = Mx(c, c);
      const auto& ac = anc[c];
      for (size_t ai = 0; ai < ac.size(); ++ai) {
        int i = ac[ai];
        L tmp = Mx(c, i) / dk;
        Mx(i, i) -= tmp * Mx(c, i);
        for (size_t aj = ai + 1; aj < ac.size(); ++aj) Mx(i, ac[aj]) -= tmp * Mx(c, ac[aj]);
      }
      for (int i : ac) Mx(c, i) = Mx(c, i) / dk;
      D[c] = dk;
    }
    fault = lanes(0.0);
    for (int c = 0; c < n; ++c)
      for (int l = 0; l < C; ++l)
        if (!(D[c].x[l] > 0 && D[c].x[l] < INFINITY)) fault.x[l] = 1.0;
    auto solve_transposed = [&](L* y) {
      for (int c = n - 1; c >= 0; --c)
        for (int i : anc[c]) y[i] -= Mx(c, i) * y[c];
    };
    auto solve_L = [&](L* y) {
      for (int c = 0; c < n; ++c)
        for (int i : anc[c]) y[c] -= Mx(c, i) * y[i];
    };
    for (int c = 0; c < n; ++c) x[c] = Q[c];
    solve_transposed(x.data());
    for (int c = 0; c < n; ++c) x[c] = x[c] / D[c];
    solve_L(x.data());
    for (int c = 0; c < n; ++c) f[c] = lanes(0.0);
    inconsistency = lanes(0.0);
    if (!p) return;
    for (int c = 0; c < n; ++c) z[c] = lanes(1.0) / lsqrt(D[c]);  // D^{-1/2}
    for (int i = 0; i < p; ++i) {
      L* wi = &W[(size_t)i * n];
      for (int c = 0; c < n; ++c) wi[c] = A[(size_t)i * n + c];
      solve_transposed(wi);
      for (int c = 0; c < n; ++c) wi[c] = wi[c] * z[c];
      r[i] = b[i];
      for (int c = 0; c < n; ++c) r[i] -= A[(size_t)i * n + c] * x[c];
      e[i] = r[i];
      for (int j = 0; j <= i; ++j) {
        L gij = lanes(0.0);
        for (int c = 0; c < n; ++c) gij += wi[c] * W[(size_t)j * n + c];
        G[i * p + j] = G[j * p + i] = gij;
      }
    }
    L largest = lanes(0.0), frobenius = lanes(0.0);  // ‖B‖²
    for (int i = 0; i < p; ++i) {
      frobenius += G[i * p + i];
      for (int l = 0; l < C; ++l) largest.x[l] = std::fmax(largest.x[l], G[i * p + i].x[l]);
    }
    for (int i = 0; i < p; ++i)
      for (int l = 0; l < C; ++l) {
        double gi = G[i * p + i].x[l];
        s[i].x[l] = gi > zero_row * largest.x[l] ? std::sqrt(gi) : 0.0;
        inv[i].x[l] = s[i].x[l] > 0 ? 1.0 / s[i].x[l] : 0.0;  // N⁻¹, zero for a zero row
      }
    for (int i = 0; i < p; ++i) {
      r[i] = r[i] * inv[i];
      for (int j = 0; j < p; ++j) G[i * p + j] = G[i * p + j] * inv[i] * inv[j];
    }
    for (int j = 0; j < p; ++j) {
      L pivot = G[j * p + j];
      for (int l = 0; l < C; ++l) inv[j].x[l] = pivot.x[l] > floor ? 1.0 / pivot.x[l] : 0.0;
      for (int i = p - 1; i > j; --i) {
        L col = G[i * p + j] * inv[j];
        for (int m = j + 1; m <= i; ++m) G[i * p + m] -= col * G[m * p + j];
        G[i * p + j] = col;
      }
    }
    for (int i = 0; i < p; ++i)
      for (int j = 0; j < i; ++j) r[i] -= G[i * p + j] * r[j];
    for (int i = 0; i < p; ++i) r[i] = r[i] * inv[i];
    for (int i = p - 1; i >= 0; --i)
      for (int j = i + 1; j < p; ++j) r[i] -= G[j * p + i] * r[j];
    for (int i = 0; i < p; ++i)
      for (int l = 0; l < C; ++l) r[i].x[l] = s[i].x[l] > 0 ? r[i].x[l] / s[i].x[l] : 0.0;
    L znorm = lanes(0.0), rnorm = lanes(0.0), enorm = lanes(0.0);
    for (int c = 0; c < n; ++c) {
      u[c] = lanes(0.0);
      for (int i = 0; i < p; ++i) u[c] += W[(size_t)i * n + c] * r[i];
      znorm += u[c] * u[c];
      z[c] = u[c] * z[c];
      for (int i = 0; i < p; ++i) f[c] += A[(size_t)i * n + c] * r[i];
    }
    for (int i = 0; i < p; ++i) {
      L Bz = lanes(0.0);
      for (int c = 0; c < n; ++c) Bz += W[(size_t)i * n + c] * u[c];
      rnorm += (Bz - e[i]) * (Bz - e[i]), enorm += e[i] * e[i];
    }
    for (int l = 0; l < C; ++l) {
      double scale = std::sqrt(enorm.x[l]) + std::sqrt(frobenius.x[l] * znorm.x[l]);
      inconsistency.x[l] = std::sqrt(rnorm.x[l]) / (scale > 0 ? scale : 1.0);
    }
    solve_L(z.data());
    for (int c = 0; c < n; ++c) x[c] += z[c];
  }

  // this chunk's results into the (B, n), (B, n) and (B, 2) outputs from member b0: the batch
  // first, as `vmap` holds it, so that no transposition surrounds the call
  void store(double* qacc, double* force, double* health, int64_t b0) const {
    for (int l = 0; l < C; ++l) {
      for (int c = 0; c < n; ++c) qacc[(b0 + l) * n + c] = x[c].x[l], force[(b0 + l) * n + c] = f[c].x[l];
      health[2 * (b0 + l)] = inconsistency.x[l], health[2 * (b0 + l) + 1] = fault.x[l];
    }
  }
};

enum Kind { HINGE = 0, SLIDE = 1, BALL = 2, FREE = 3 };

static ffi::Error UkTreeImpl(
    // structure: parents (b), joint bodies, kinds, first coordinates and dofs (J), connects'
    // bodies (k, 2; -1 the world)
    ffi::Buffer<ffi::S64> parents, ffi::Buffer<ffi::S64> joint_body, ffi::Buffer<ffi::S64> joint_kind,
    ffi::Buffer<ffi::S64> joint_coord, ffi::Buffer<ffi::S64> joint_dof, ffi::Buffer<ffi::S64> connect_bodies,
    // parameters
    ffi::Buffer<ffi::F64> body_pos, ffi::Buffer<ffi::F64> body_rot, ffi::Buffer<ffi::F64> mass,
    ffi::Buffer<ffi::F64> com, ffi::Buffer<ffi::F64> inertia, ffi::Buffer<ffi::F64> axis, ffi::Buffer<ffi::F64> anchor,
    ffi::Buffer<ffi::F64> reference, ffi::Buffer<ffi::F64> armature, ffi::Buffer<ffi::F64> damping,
    ffi::Buffer<ffi::F64> stiffness, ffi::Buffer<ffi::F64> spring_ref, ffi::Buffer<ffi::F64> gravity,
    ffi::Buffer<ffi::F64> connect_anchors, ffi::Buffer<ffi::F64> tendon_coef, ffi::Buffer<ffi::F64> tendon_arm,
    ffi::Buffer<ffi::F64> gains,  // Baumgarte's α, β on the connect rows
    // the states (B, n), the forces applied from outside (B, n) and further rows A (B, r, n), b (B, r)
    ffi::Buffer<ffi::F64> Qpos, ffi::Buffer<ffi::F64> Qvel, ffi::Buffer<ffi::F64> Applied, ffi::Buffer<ffi::F64> RowsA,
    ffi::Buffer<ffi::F64> Rowsb, double alpha, double beta, double floor, double zero_row,
    ffi::ResultBuffer<ffi::F64> qacc, ffi::ResultBuffer<ffi::F64> force, ffi::ResultBuffer<ffi::F64> health) {
  const int b = int(parents.dimensions()[0]);
  const int J = int(joint_body.dimensions()[0]);
  const int k = int(connect_bodies.dimensions()[0]);
  const int T = int(tendon_arm.dimensions()[0]);
  const int r = int(Rowsb.dimensions()[1]);
  const int64_t B = Qpos.dimensions()[0], n = Qpos.dimensions()[1];
  if (B % C) return ffi::Error::InvalidArgument("the batch must be a multiple of the lanes per chunk");
  const int64_t* par = parents.typed_data();
  const int64_t* jb = joint_body.typed_data();
  const int64_t* jk = joint_kind.typed_data();
  const int64_t* jc = joint_coord.typed_data();
  const int64_t* jd = joint_dof.typed_data();
  const int64_t* cb = connect_bodies.typed_data();
  // per coordinate: its body, its joint, its index within the joint; the coordinates' elimination
  // tree (M's pattern: coordinates of the body's ancestors and earlier ones of its own body)
  std::vector<int> cbody(n), cjoint(n), cindex(n), cparent(n);
  std::vector<int> nquat;  // first coordinate of each quaternion
  for (int j = 0; j < J; ++j) {
    int size = jk[j] == BALL ? 4 : jk[j] == FREE ? 7 : 1;
    for (int i = 0; i < size; ++i) cbody[jc[j] + i] = int(jb[j]), cjoint[jc[j] + i] = j, cindex[jc[j] + i] = i;
    if (jk[j] == BALL) nquat.push_back(int(jc[j]));
    if (jk[j] == FREE) nquat.push_back(int(jc[j]) + 3);
  }
  // the last coordinate at or above each body (-1: none); a body's first coordinate hangs from
  // its parent's, the others from the coordinate before them
  std::vector<int> below(b, -1);
  for (int c = 0; c < n; ++c) below[cbody[c]] = c;
  for (int i = 0; i < b; ++i)
    if (below[i] < 0) below[i] = par[i] >= 0 ? below[par[i]] : -1;
  for (int c = 0; c < n; ++c) {
    int i = cbody[c];
    cparent[c] = (c > 0 && cbody[c - 1] == i) ? c - 1 : (par[i] >= 0 ? below[par[i]] : -1);
  }
  const int p = int(nquat.size()) + 3 * k + r;
  // M is factored following the coordinates' tree, or densely where tendons couple branches
  std::vector<int> chain(n);
  for (int c = 0; c < n; ++c) chain[c] = c - 1;
  Solver solver(T ? chain : cparent, p);
  std::vector<std::vector<int>> anc(n);  // each coordinate's ancestors in the tree
  for (int c = 0; c < n; ++c)
    for (int a = cparent[c]; a >= 0; a = cparent[a]) anc[c].push_back(a);
  // "before" a coordinate: the motion of its body's parent and of its body's earlier joints (a
  // free joint's translations come before its rotation; a quaternion's coordinates are one motion)
  auto group = [&](int c) { return 2 * cjoint[c] + ((jk[cjoint[c]] == FREE && cindex[c] >= 3) ? 1 : 0); };
  // per body: the coordinates that move it (its own and its ancestors'); per coordinate: the
  // earlier coordinates of its own body whose motion comes before it
  std::vector<std::vector<int>> moving(b), before_of(n);
  for (int i = 0; i < b; ++i)
    for (int c = 0; c < n; ++c)
      for (int a = i; a >= 0; a = int(par[a]))
        if (cbody[c] == a) moving[i].push_back(c);
  for (int c = 0; c < n; ++c)
    for (int l = 0; l < n; ++l)
      if (cbody[l] == cbody[c] && group(l) < group(c)) before_of[c].push_back(l);

  const double* bp = body_pos.typed_data();
  const double* br = body_rot.typed_data();
  const double* ms = mass.typed_data();
  const double* cm = com.typed_data();
  const double* in = inertia.typed_data();
  const double* ax = axis.typed_data();
  const double* an = anchor.typed_data();
  const double* ref = reference.typed_data();
  const double* arm = armature.typed_data();
  const double* dmp = damping.typed_data();
  const double* stf = stiffness.typed_data();
  const double* spr = spring_ref.typed_data();
  const double* g = gravity.typed_data();
  const double* ca = connect_anchors.typed_data();
  const double* qpos = Qpos.typed_data();
  const double* qvel = Qvel.typed_data();
  const double* applied = Applied.typed_data();
  const double* tc = tendon_coef.typed_data();
  const double* ta = tendon_arm.typed_data();
  const double ga = gains.typed_data()[0], gb = gains.typed_data()[1];
  const double* rows_A = RowsA.typed_data();
  const double* rows_b = Rowsb.typed_data();

  std::vector<M3> Rw(b), Rl(b), Ra(J);
  std::vector<V3> pw(b), pl(b), pa(J);
  std::vector<S6> S(n), motion(n), Vb(b), Ab(b);
  std::vector<Inertia> Ib(b), Ic(b);
  std::vector<L> q(n), qd(n), Qf(n), bvec(p);
  std::vector<L> E((size_t)n * n), A((size_t)p * n);
  auto Mx = [&](int i, int j) -> L& { return E[(size_t)i * n + j]; };

  for (int64_t b0 = 0; b0 < B; b0 += C) {
    for (int c = 0; c < n; ++c)
      for (int l = 0; l < C; ++l) q[c].x[l] = qpos[(b0 + l) * n + c], qd[c].x[l] = qvel[(b0 + l) * n + c];
    // kinematics: each body's frame in its parent's, its joints applied in order
    for (int i = 0; i < b; ++i) {
      bool free = false;
      for (int j = 0; j < J; ++j)
        if (jb[j] == i && jk[j] == FREE) free = true;
      Rl[i] = free ? eye() : mconst(br + 9 * i);
      pl[i] = free ? vconst(std::vector<double>(3, 0.0).data()) : vconst(bp + 3 * i);
    }
    for (int j = 0; j < J; ++j) {
      int i = int(jb[j]), c = int(jc[j]);
      M3 R;
      V3 t;
      V3 a = vconst(ax + 3 * j), o = vconst(an + 3 * j);
      if (jk[j] == HINGE) {
        L th = q[c] - lanes(ref[c]), sn = lsin(th), cs = lanes(1.0) - lcos(th);
        M3 K;
        L zero = lanes(0.0);
        K.m[0][0] = zero, K.m[0][1] = zero - a.v[2], K.m[0][2] = a.v[1];
        K.m[1][0] = a.v[2], K.m[1][1] = zero, K.m[1][2] = zero - a.v[0];
        K.m[2][0] = zero - a.v[1], K.m[2][1] = a.v[0], K.m[2][2] = zero;
        M3 K2 = mm(K, K);
        R = eye();
        for (int u = 0; u < 3; ++u)
          for (int v = 0; v < 3; ++v) R.m[u][v] += sn * K.m[u][v] + cs * K2.m[u][v];
        t = o - mv(R, o);
      } else if (jk[j] == SLIDE) {
        R = eye();
        t = (q[c] - lanes(ref[c])) * a;
      } else if (jk[j] == BALL) {
        R = quaternion_matrix(q[c], q[c + 1], q[c + 2], q[c + 3]);
        t = o - mv(R, o);
      } else {
        R = quaternion_matrix(q[c + 3], q[c + 4], q[c + 5], q[c + 6]);
        t = {q[c], q[c + 1], q[c + 2]};
      }
      pl[i] = pl[i] + mv(Rl[i], t);
      Rl[i] = mm(Rl[i], R);
      Ra[j] = Rl[i], pa[j] = pl[i];
    }
    for (int i = 0; i < b; ++i) {
      if (par[i] < 0) {
        Rw[i] = Rl[i], pw[i] = pl[i];
      } else {
        Rw[i] = mm(Rw[par[i]], Rl[i]);
        pw[i] = pw[par[i]] + mv(Rw[par[i]], pl[i]);
      }
    }
    // the coordinates' twists
    for (int j = 0; j < J; ++j) {
      int i = int(jb[j]), c = int(jc[j]);
      M3 Rp = par[i] >= 0 ? Rw[par[i]] : eye();
      V3 pp = par[i] >= 0 ? pw[par[i]] : vconst(std::vector<double>(3, 0.0).data());
      M3 R = mm(Rp, Ra[j]);
      V3 pj = pp + mv(Rp, pa[j]);
      V3 a = mv(R, vconst(ax + 3 * j));
      V3 o = jk[j] == FREE ? pj : pj + mv(R, vconst(an + 3 * j));
      V3 zero3 = vconst(std::vector<double>(3, 0.0).data());
      if (jk[j] == HINGE) S[c] = {a, cross(o, a)};
      if (jk[j] == SLIDE) S[c] = {zero3, a};
      if (jk[j] == BALL || jk[j] == FREE) {
        int u0 = jk[j] == FREE ? c + 3 : c;
        if (jk[j] == FREE)
          for (int e = 0; e < 3; ++e) {
            double unit[3] = {0, 0, 0};
            unit[e] = 1;
            S[c + e] = {zero3, vconst(unit)};
          }
        L Em[3][4];
        rate_map(&q[u0], Em);
        for (int col = 0; col < 4; ++col) {
          V3 w = 2.0 * mv(R, V3{Em[0][col], Em[1][col], Em[2][col]});
          S[u0 + col] = {w, cross(o, w)};
        }
      }
    }
    // spatial inertias about the origin, and composite ones (children after parents)
    for (int i = 0; i < b; ++i) {
      V3 c = pw[i] + mv(Rw[i], vconst(cm + 3 * i));
      M3 I = mmt(mm(Rw[i], mconst(in + 9 * i)), Rw[i]);
      L cc = dot(c, c);
      for (int u = 0; u < 3; ++u)
        for (int v = 0; v < 3; ++v) I.m[u][v] += ms[i] * ((u == v ? cc : lanes(0.0)) - c.v[u] * c.v[v]);
      Ib[i] = {lanes(ms[i]), ms[i] * c, I};
      Ic[i] = Ib[i];
    }
    for (int i = b - 1; i >= 0; --i)
      if (par[i] >= 0) {
        Inertia& P = Ic[par[i]];
        P.m += Ic[i].m, P.h = P.h + Ic[i].h, P.I = madd(P.I, Ic[i].I);
      }
    // M on the tree's pattern (zero elsewhere), plus the tendons' armature a cᵀc
    for (size_t e = 0; e < E.size(); ++e) E[e] = lanes(0.0);
    for (int j = 0; j < n; ++j) {
      S6 F = apply(Ic[cbody[j]], S[j]);
      Mx(j, j) = s6dot(S[j], F);
      for (int a : anc[j]) Mx(j, a) = s6dot(S[a], F);
    }
    // bias forces by recursive Newton–Euler, gravity as an upward acceleration of the base
    for (int c = 0; c < n; ++c) motion[c] = {qd[c] * S[c].a, qd[c] * S[c].b};
    V3 zero3 = vconst(std::vector<double>(3, 0.0).data());
    for (int i = 0; i < b; ++i) {
      S6 V = par[i] >= 0 ? Vb[par[i]] : S6{zero3, zero3};
      S6 A0 = par[i] >= 0 ? Ab[par[i]] : S6{zero3, zero3};
      S6 Vbody = V;
      for (int c = 0; c < n; ++c) {
        if (cbody[c] != i) continue;
        S6 before = V;
        for (int l : before_of[c]) before = s6add(before, motion[l]);
        A0 = s6add(A0, motion_cross(before, motion[c]));
        Vbody = s6add(Vbody, motion[c]);
      }
      Vb[i] = Vbody, Ab[i] = A0;
    }
    std::vector<S6> wrench(b);
    V3 up = vconst(g);
    for (int i = 0; i < b; ++i) {
      S6 A = {Ab[i].a, Ab[i].b - up};
      wrench[i] = s6add(apply(Ib[i], A), force_cross(Vb[i], apply(Ib[i], Vb[i])));
    }
    for (int i = b - 1; i >= 0; --i)
      if (par[i] >= 0) wrench[par[i]] = s6add(wrench[par[i]], wrench[i]);
    for (int c = 0; c < n; ++c) {
      Qf[c] = lanes(0.0) - s6dot(S[c], wrench[cbody[c]]);
      for (int l = 0; l < C; ++l) Qf[c].x[l] += applied[(b0 + l) * n + c];
    }
    // armature and damping per degree of freedom, springs on hinges and slides
    for (int j = 0; j < J; ++j) {
      int c = int(jc[j]), d = int(jd[j]);
      if (jk[j] == HINGE || jk[j] == SLIDE) {
        Mx(c, c) += lanes(arm[d]);
        Qf[c] -= dmp[d] * qd[c] + stf[c] * (q[c] - lanes(spr[c]));
        continue;
      }
      if (jk[j] == FREE) {
        for (int e = 0; e < 3; ++e) Mx(c + e, c + e) += lanes(arm[d + e]), Qf[c + e] -= dmp[d + e] * qd[c + e];
        c += 3, d += 3;
      }
      L Em[3][4];
      rate_map(&q[c], Em);
      for (int u = 0; u < 4; ++u)
        for (int v = 0; v <= u; ++v) {
          L add = lanes(0.0);
          for (int e = 0; e < 3; ++e) add += 4.0 * arm[d + e] * Em[e][u] * Em[e][v];
          Mx(c + u, c + v) += add;
        }
      for (int u = 0; u < 4; ++u) {
        L force = lanes(0.0);
        for (int e = 0; e < 3; ++e) {
          L rate = Em[e][0] * qd[c] + Em[e][1] * qd[c + 1] + Em[e][2] * qd[c + 2] + Em[e][3] * qd[c + 3];
          force += 4.0 * dmp[d + e] * Em[e][u] * rate;
        }
        Qf[c + u] -= force;
      }
    }
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < n; ++i)
        for (int j = 0; j <= i; ++j) Mx(i, j) += lanes(ta[t] * tc[t * n + i] * tc[t * n + j]);
    // rows: the quaternions' norms (folded into M and Q), the connects, then the further ones
    for (size_t e = 0; e < A.size(); ++e) A[e] = lanes(0.0);
    for (size_t row = 0; row < nquat.size(); ++row) {
      int c = nquat[row];
      L uu = lanes(0.0), uud = lanes(0.0), udud = lanes(0.0), trace = lanes(0.0);
      for (int e = 0; e < 4; ++e) uu += q[c + e] * q[c + e], uud += q[c + e] * qd[c + e], udud += qd[c + e] * qd[c + e], trace += Mx(c + e, c + e);
      L gamma = 0.25 * trace;
      L rhs = lanes(0.0) - 2.0 * udud - alpha * (2.0 * uud) - beta * (uu - lanes(1.0));
      for (int u = 0; u < 4; ++u) {
        A[row * n + c + u] = 2.0 * q[c + u];
        Qf[c + u] += 2.0 * gamma * rhs * q[c + u];
        for (int v = 0; v <= u; ++v) Mx(c + u, c + v) += 4.0 * gamma * q[c + u] * q[c + v];
      }
      bvec[row] = rhs;
    }
    for (int e = 0; e < k; ++e) {
      // each end: position, velocity Jacobian columns and the rates at q̈ = 0
      V3 xe[2], bias[2], w = zero3, alpha1 = zero3;
      M3 R1 = eye();
      std::vector<V3> Jc[2] = {std::vector<V3>(n, zero3), std::vector<V3>(n, zero3)};
      std::vector<V3> Jw(n, zero3);
      for (int side = 0; side < 2; ++side) {
        int body = int(cb[2 * e + side]);
        V3 local = vconst(ca + 6 * e + 3 * side);
        if (body < 0) {
          xe[side] = local, bias[side] = zero3;
          continue;
        }
        xe[side] = pw[body] + mv(Rw[body], local);
        V3 vel = Vb[body].b + cross(Vb[body].a, xe[side]);
        bias[side] = Ab[body].b + cross(Ab[body].a, xe[side]) + cross(Vb[body].a, vel);
        for (int c : moving[body]) {
          Jc[side][c] = S[c].b + cross(S[c].a, xe[side]);
          if (side == 0) Jw[c] = S[c].a;
        }
        if (side == 0) R1 = Rw[body], w = Vb[body].a, alpha1 = Ab[body].a;
      }
      V3 rv = xe[0] - xe[1], rd = zero3;
      for (int c = 0; c < n; ++c) rd = rd + qd[c] * (Jc[0][c] - Jc[1][c]);
      for (int c = 0; c < n; ++c) {
        V3 col = mtv(R1, (Jc[0][c] - Jc[1][c]) + cross(rv, Jw[c]));
        for (int u = 0; u < 3; ++u) A[(nquat.size() + 3 * e + u) * n + c] = col.v[u];
      }
      V3 bb = bias[0] - bias[1] + cross(rv, alpha1) - 2.0 * cross(w, rd) + cross(w, cross(w, rv));
      V3 rhs = mtv(R1, bb), phi = mtv(R1, rv);  // Φ, and Φ̇ = A q̇ below
      for (int u = 0; u < 3; ++u) {
        int row = int(nquat.size()) + 3 * e + u;
        L phid = lanes(0.0);
        for (int c = 0; c < n; ++c) phid += A[row * n + c] * qd[c];
        bvec[row] = lanes(0.0) - rhs.v[u] - ga * phid - gb * phi.v[u];
      }
    }
    for (int e = 0; e < r; ++e) {
      int row = int(nquat.size()) + 3 * k + e;
      for (int l = 0; l < C; ++l) {
        bvec[row].x[l] = rows_b[(b0 + l) * r + e];
        for (int c = 0; c < n; ++c) A[row * n + c].x[l] = rows_A[((b0 + l) * r + e) * n + c];
      }
    }
    solver.solve(E, Qf, A, bvec, floor, zero_row);
    solver.store(qacc->typed_data(), force->typed_data(), health->typed_data(), b0);
  }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(UkTree, UkTreeImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::S64>>()
                                  .Arg<ffi::Buffer<ffi::S64>>()
                                  .Arg<ffi::Buffer<ffi::S64>>()
                                  .Arg<ffi::Buffer<ffi::S64>>()
                                  .Arg<ffi::Buffer<ffi::S64>>()
                                  .Arg<ffi::Buffer<ffi::S64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Attr<double>("alpha")
                                  .Attr<double>("beta")
                                  .Attr<double>("floor")
                                  .Attr<double>("zero_row")
                                  .Ret<ffi::Buffer<ffi::F64>>()
                                  .Ret<ffi::Buffer<ffi::F64>>()
                                  .Ret<ffi::Buffer<ffi::F64>>());
