// The XLA FFI handlers' inputs, attributes and results, and their unpacking into `Args`,
// `Contacts` and `ContactSolve`: shared by the CPU's handlers (`cpu.h`) and the GPU's (`gpu.h`).
// Included by `kernels.cc`.
#pragma once

#include <utility>

#include "tree_contacts.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

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
