// The tree kernel's work space and what it reads: arrays cut from one piece of memory
// (`Carver`), the tree's structure (`Section`), the handlers' arguments (`Args`), the rows'
// sparsity (`Rows`), a member's work space (`Work`) and the GPU's layout of members in tiles
// and slices (`Slices`). Included by `kernels.cc`.
#pragma once

#include <algorithm>

#include "spatial.h"

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

// The members in the GPU's layout take a work space of at most `space` bytes: the batch runs in
// slices of `slice` members (all of them where they fit), and a slice in tiles of `TILE`
// members, a warp's, each tile's work space in one piece: value k of the i-th member of a slice
// at `k × TILE + i mod TILE` in tile `i / TILE`, then each member's `extra` bytes of its own (the
// contact solve's, whose arrays a member reads whole). Laid out `k × slice + i`, a member's
// values would lie a slice's width apart (`benchmarks/gpu.py`).
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
