// The handlers for a CPU: chunks of lanes, or one lane with the members one after another.
// Included by `kernels.cc`.
#pragma once

#include <vector>

#include "bindings.h"

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
// GPU's layout puts a member's values a tile apart, and a large M then spans hundreds of KiB), or,
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
