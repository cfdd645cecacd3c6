"""Robots from files: rigid-body trees and everything MJCF and URDF describe of them. Public
names are re-exported by `ukjax.models`.

One concept a module; each imports only the modules above it in this list and ukjax's own
ground floor (`_arrays`, `_constraints`, `_systems`, `_jit`, `_animate`):

- `spatial`: spatial algebra and rotations (twists, wrenches, stacked 3 × 3 products);
- `joints`: the joint kinds (hinge, slide, ball, free), the tree's topology, the forward
  kinematics and MuJoCo's velocity map;
- `algorithms`: `M` (composite rigid bodies), bias forces (recursive Newton–Euler), the
  bodies' and points' motion, each reading one `Kinematics`;
- `tree`: `RigidBodyTree`, the system;
- `equalities`: `Connect`, `Weld`, `JointCoupling`, `TendonCoupling`, `SiteConstraint`;
- `shapes`: the primitive shapes' signed distances (plane, sphere, capsule, box, cylinder);
- `contacts`: joint limits and contacts of spheres, capsules and boxes with planes, of
  spheres with any shape, of segments with segments;
- `rings`: a cylinder's rims against planes at their lowest points;
- `broadphase`: where a tree has more contact pairs than the narrowed solve holds, the rows
  of the pairs nearest contact only (bounding spheres);
- `actuators`: MuJoCo's actuators and the system they drive;
- `parameters`: `FileParameters`, a file's physical parameters by name, for fitting;
- `model`: `Model`, what the importer (and the source papers' builders) return;
- `mjcf`: the MJCF/URDF importer, by MuJoCo's own compiler.
- `kernels`: the U-K solve of a tree as one compiled C++ call (`kernels.cc`), which `simulate`
  runs for the systems it covers (the one module the engine's `_simulate` and `_batch` import
  from here).
"""
