// A tree's acceleration under joint limits and plane contacts in given modes (`tree_contacts`),
// and the contact solve at fixed modes alone (`ContactSolve`), both on `contact_solve.h`.
// Included by `kernels.cc`.
#pragma once

#include "tree.h"

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
// (`kernels.in_modes`: `_acceleration.solve_system` for a tree with joint limits and spheres on
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
