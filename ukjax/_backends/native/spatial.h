// Three-vectors, 3 x 3 matrices, spatial twists and wrenches, inertias and quaternions on a
// scalar type T (a double or `Lanes<W>`). Included by `kernels.cc`.
#pragma once

#include "lanes.h"

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
