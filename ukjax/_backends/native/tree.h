// The U-K solve of a rigid-body tree for one member or a chunk of lanes: its equations of motion
// (`assemble`), the solve (`uk_solve`), and the handlers' two uses of them, the acceleration
// (`solve`) and M and Q alone with what they were computed from (`dynamics`). Included by
// `kernels.cc`.
#pragma once

#include "layout.h"

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
