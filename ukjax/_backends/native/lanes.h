// The arithmetic of the tree kernel on one double, or on `Lanes<W>`: W states side by side, a
// loop the compiler vectorizes. Included by `kernels.cc`.
#pragma once

#include <cmath>
#include <cstdint>

#include "contact_solve.h"  // `HD`: host and device code

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
