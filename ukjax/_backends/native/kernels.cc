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
//
// The parts, each a file of this directory: `lanes.h` (the arithmetic on lanes), `spatial.h`
// (spatial algebra), `layout.h` (work space, structure, arguments), `tree.h` (the tree's solve),
// `tree_contacts.h` (its contact dynamics), `contact_solve.h` (the contact solve's linear
// algebra), `bindings.h` (the handlers' arguments), `cpu.h` and `gpu.h` (the handlers).

#ifdef UKJAX_CUDA
#include "gpu.h"
#else
#include "cpu.h"
#endif
