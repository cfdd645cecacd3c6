"""MJCF and URDF models, read by MuJoCo's own compiler, as rigid-body trees with exact constraints."""

import os
import warnings

import jax.numpy as jnp
import numpy as np

from .._jit import jit
from .._systems import ConstrainedSystem
from .actuators import Actuators
from .collisions import _unilateral
from .equalities import Connect, JointCoupling, TendonCoupling, Weld
from .mjmodel import _KINDS, _disabled, _name, _rotation, compile_model
from .model import Model
from .tree import RigidBodyTree

_DEFAULT_SOLREF = np.array([0.02, 1.0])
_DEFAULT_SOLIMP = np.array([0.9, 0.95, 0.001, 0.5, 2.0])


def _coordinate_stiffness(mjm) -> np.ndarray:
    """Joint stiffness per coordinate (`nq`): hinges and slides; quaternions get none (their
    springs are named in the warning)."""
    out = np.zeros(mjm.nq)
    for j in range(mjm.njnt):
        if _KINDS[int(mjm.jnt_type[j])] in ("hinge", "slide"):
            out[mjm.jnt_qposadr[j]] = mjm.jnt_stiffness[j]
    return out


def _unsupported(mjm) -> list[str]:
    """What the file holds that the tree does not model, each as a phrase (what its
    `<option>` flags switch off is not there to model)."""
    import mujoco

    found = []
    constraints_on = not _disabled(mjm, "CONSTRAINT")
    if np.any(mjm.dof_frictionloss) and constraints_on and not _disabled(mjm, "FRICTIONLOSS"):
        found.append("joint friction loss")
    spatial = [_name(mjm, mujoco.mjtObj.mjOBJ_TENDON, t, "tendon") for t in range(mjm.ntendon) if not _fixed(mjm, t)]
    if spatial:
        found.append(f"spatial tendons ({', '.join(spatial)}) and what acts through them")
    tendon_extras = [
        what
        for what, present in (
            ("limits", np.any(mjm.tendon_limited) and constraints_on and not _disabled(mjm, "LIMIT")),
            ("friction loss", np.any(mjm.tendon_frictionloss) and constraints_on and not _disabled(mjm, "FRICTIONLOSS")),
            ("polynomial stiffness or damping", np.any(mjm.tendon_stiffnesspoly) or np.any(mjm.tendon_dampingpoly)),
            ("actuator force ranges", np.any(mjm.tendon_actfrclimited)),
        )
        if present
    ]
    if tendon_extras:
        found.append(f"tendon {', '.join(tendon_extras)}")
    branched = [_name(mjm, mujoco.mjtObj.mjOBJ_TENDON, t, "tendon") for t in _branched_armature(mjm)]
    if branched:
        found.append(
            f"armature of tendons coupling joints in different branches ({', '.join(branched)}): added in full "
            "as a cᵀc, as the kinetic energy gives it, where MuJoCo keeps only the pairs of a joint and its "
            "ancestors, so M and q̈ differ from MuJoCo's"
        )
    if np.any(mjm.body_gravcomp) and not _disabled(mjm, "GRAVITY"):
        found.append("gravity compensation")
    sprung = [
        _name(mjm, mujoco.mjtObj.mjOBJ_JOINT, j, "joint")
        for j in range(mjm.njnt)
        if mjm.jnt_stiffness[j] and _KINDS[int(mjm.jnt_type[j])] in ("ball", "free")
    ]
    if sprung and not _disabled(mjm, "SPRING"):
        found.append(f"stiffness of ball and free joints ({', '.join(sprung)})")
    if np.any(mjm.dof_dampingpoly) or np.any(mjm.jnt_stiffnesspoly):
        found.append("polynomial damping or stiffness")
    if mjm.opt.density or mjm.opt.viscosity or np.any(mjm.opt.wind):
        found.append("fluid forces (density, viscosity, wind)")
    if _equalities_on(mjm):
        soft = [
            i
            for i in range(mjm.neq)
            if not np.allclose(mjm.eq_solref[i], _DEFAULT_SOLREF)
            or not np.allclose(mjm.eq_solimp[i], _DEFAULT_SOLIMP)
        ]
        if soft:
            found.append(f"solref/solimp of {len(soft)} equality constraint(s) (imposed exactly here)")
        inactive = [i for i in range(mjm.neq) if not mjm.eq_active0[i]]
        if inactive:
            found.append(f"{len(inactive)} inactive equality constraint(s) (left out)")
    if not _disabled(mjm, "ACTUATION"):
        joints = [_name(mjm, mujoco.mjtObj.mjOBJ_JOINT, j, "joint") for j in np.flatnonzero(mjm.jnt_actfrclimited)]
        if joints:
            found.append(f"actuatorfrcrange clamps of {', '.join(joints)}")
    return found


def _fixed(mjm, tendon: int) -> bool:
    """Whether the tendon is fixed: every wrap a hinge or slide joint."""
    wraps = range(mjm.tendon_adr[tendon], mjm.tendon_adr[tendon] + mjm.tendon_num[tendon])
    return all(
        mjm.wrap_type[w] == 1 and _KINDS[int(mjm.jnt_type[mjm.wrap_objid[w]])] in ("hinge", "slide") for w in wraps
    )


def _branched_armature(mjm) -> list[int]:
    """The fixed tendons with armature whose joints are not all on one chain of ancestors
    (MuJoCo adds their armature to `M` only between a degree of freedom and its ancestors)."""

    def ancestors(dof: int) -> set[int]:
        out = set()
        while dof >= 0:
            out.add(dof)
            dof = int(mjm.dof_parentid[dof])
        return out

    found = []
    for t in range(mjm.ntendon):
        if not (mjm.tendon_armature[t] and _fixed(mjm, t)):
            continue
        wraps = range(mjm.tendon_adr[t], mjm.tendon_adr[t] + mjm.tendon_num[t])
        dofs = [int(mjm.jnt_dofadr[mjm.wrap_objid[w]]) for w in wraps if mjm.wrap_prm[w]]
        if any(a not in ancestors(b) and b not in ancestors(a) for a in dofs for b in dofs):
            found.append(t)
    return found


def _tendons(mjm) -> dict:
    """The fixed tendons' arguments of `RigidBodyTree` (coefficients per coordinate, passive
    parameters as the file's flags leave them)."""
    import mujoco

    fixed = [t for t in range(mjm.ntendon) if _fixed(mjm, t)]
    coefficients = {}
    for t in fixed:
        c = np.zeros(mjm.nq)
        for w in range(mjm.tendon_adr[t], mjm.tendon_adr[t] + mjm.tendon_num[t]):
            c[mjm.jnt_qposadr[mjm.wrap_objid[w]]] += mjm.wrap_prm[w]
        coefficients[_name(mjm, mujoco.mjtObj.mjOBJ_TENDON, t, "tendon")] = c
    return dict(
        tendons=coefficients,
        tendon_stiffness=(0 if _disabled(mjm, "SPRING") else 1) * mjm.tendon_stiffness[fixed],
        tendon_damping=(0 if _disabled(mjm, "DAMPER") else 1) * mjm.tendon_damping[fixed],
        tendon_armature=mjm.tendon_armature[fixed],
        tendon_lengthspring=mjm.tendon_lengthspring[fixed].reshape(-1, 2),
    )


def _equalities_on(mjm) -> bool:
    return not _disabled(mjm, "EQUALITY", "CONSTRAINT")


def _actuation(mjm, tree: RigidBodyTree, notes: list[str]) -> tuple[np.ndarray | None, Actuators | None]:
    """`B_u` of the plain joint motors (force = gear · gain · ctrl), and every actuator as
    MuJoCo applies it; those it cannot be (activation dynamics, muscles, site or body
    transmissions, spatial tendons) act with zero force and are named."""
    import mujoco

    if not mjm.nu:
        return None, None
    B = np.zeros((mjm.nq, mjm.nu))
    targets, gear, gain, bias, others = [], np.zeros(mjm.nu), np.zeros((mjm.nu, 3)), np.zeros((mjm.nu, 3)), []
    for a in range(mjm.nu):
        trn, target = int(mjm.actuator_trntype[a]), int(mjm.actuator_trnid[a, 0])
        # on a hinge or a slide, MuJoCo applies a joint-in-parent transmission as a joint one
        joint = trn in (int(mujoco.mjtTrn.mjTRN_JOINT), int(mujoco.mjtTrn.mjTRN_JOINTINPARENT)) and _KINDS[
            int(mjm.jnt_type[target])
        ] in ("hinge", "slide")
        tendon = trn == int(mujoco.mjtTrn.mjTRN_TENDON) and _fixed(mjm, target)
        gaintype, biastype = int(mjm.actuator_gaintype[a]), int(mjm.actuator_biastype[a])
        supported = (
            (joint or tendon)
            and mjm.actuator_dyntype[a] == int(mujoco.mjtDyn.mjDYN_NONE)
            and gaintype in (int(mujoco.mjtGain.mjGAIN_FIXED), int(mujoco.mjtGain.mjGAIN_AFFINE))
            and biastype in (int(mujoco.mjtBias.mjBIAS_NONE), int(mujoco.mjtBias.mjBIAS_AFFINE))
        )
        if not supported:
            others.append(_name(mjm, mujoco.mjtObj.mjOBJ_ACTUATOR, a, "actuator"))
            targets.append(("joint", 0))
            continue
        if tendon:
            targets.append(("tendon", tree.tendon_index(_name(mjm, mujoco.mjtObj.mjOBJ_TENDON, target, "tendon"))))
        else:
            targets.append(("joint", int(mjm.jnt_qposadr[target])))
        gear[a] = mjm.actuator_gear[a, 0]
        affine_gain = gaintype == int(mujoco.mjtGain.mjGAIN_AFFINE)
        gain[a] = mjm.actuator_gainprm[a, :3] if affine_gain else [mjm.actuator_gainprm[a, 0], 0, 0]
        if biastype == int(mujoco.mjtBias.mjBIAS_AFFINE):
            bias[a] = mjm.actuator_biasprm[a, :3]
        if joint and not affine_gain and biastype == int(mujoco.mjtBias.mjBIAS_NONE):
            B[targets[-1][1], a] = gear[a] * gain[a, 0]
    if _disabled(mjm, "ACTUATION"):  # MuJoCo applies no actuator force at all
        B, gear = 0 * B, 0 * gear
    if others:
        notes.append(f"actuators with activation dynamics, muscles or other transmissions ({', '.join(others)}: no force)")
    actuators = Actuators(
        [_name(mjm, mujoco.mjtObj.mjOBJ_ACTUATOR, a, "actuator") for a in range(mjm.nu)],
        targets,
        gear,
        gain,
        bias,
        mjm.actuator_ctrlrange,
        mjm.actuator_forcerange,
        mjm.actuator_ctrllimited.astype(bool) & (not _disabled(mjm, "CLAMPCTRL")),
        mjm.actuator_forcelimited.astype(bool),
    )
    return B, actuators


def _constraints(mjm, tree: RigidBodyTree) -> tuple:
    import mujoco

    def body(i: int) -> str:
        return "world" if i == 0 else tree.body_names[i - 1]

    out = []
    for i in range(mjm.neq if _equalities_on(mjm) else 0):
        if not mjm.eq_active0[i]:
            continue
        kind, data = mujoco.mjtEq(int(mjm.eq_type[i])), mjm.eq_data[i]
        one, two = int(mjm.eq_obj1id[i]), int(mjm.eq_obj2id[i])
        label = _name(mjm, mujoco.mjtObj.mjOBJ_EQUALITY, i, "equality")
        # each site as (its body, its position there)
        sites = mjm.eq_objtype[i] == int(mujoco.mjtObj.mjOBJ_SITE) and [
            tree.site(_name(mjm, mujoco.mjtObj.mjOBJ_SITE, s, "site")) for s in (one, two)
        ]
        if kind == mujoco.mjtEq.mjEQ_CONNECT and sites:
            out.append(Connect(tree, *sites[0], *sites[1]))
        elif kind == mujoco.mjtEq.mjEQ_CONNECT:
            out.append(Connect(tree, body(one), data[0:3], body(two), data[3:6]))
        elif kind == mujoco.mjtEq.mjEQ_WELD:
            if sites:
                # the two sites' frames coincide: a body weld with the sites' frames folded in
                (body1, position), (body2, anchor) = sites
                rotation = _rotation(mjm.site_quat[one]) @ _rotation(mjm.site_quat[two]).T
            else:
                body1, body2 = body(one), body(two)
                anchor, position, rotation = data[0:3], data[3:6], _rotation(data[6:10])
            if data[10] == 0:
                # torquescale 0: MuJoCo's rotation rows vanish, the anchor alone is held
                out.append(Connect(tree, body1, position, body2, anchor))
            else:
                out.append(Weld(tree, body1, body2, anchor, position, rotation))
        elif kind == mujoco.mjtEq.mjEQ_JOINT:
            joint = lambda j: _name(mjm, mujoco.mjtObj.mjOBJ_JOINT, j, "joint")
            out.append(JointCoupling(tree, joint(one), None if two < 0 else joint(two), data[0:5]))
        elif kind == mujoco.mjtEq.mjEQ_TENDON and all(_fixed(mjm, t) for t in (one, two) if t >= 0):
            tendon = lambda t: _name(mjm, mujoco.mjtObj.mjOBJ_TENDON, t, "tendon")
            out.append(TendonCoupling(tree, tendon(one), None if two < 0 else tendon(two), data[0:5]))
        else:
            raise ValueError(
                f"Equality {label!r} of type {kind.name} is not supported (connect, weld, joint and fixed-tendon ones are)."
            )
    return tuple(out)


def _from_compiled(mjm, kind: str, keyframe: str | int | None) -> Model:
    import mujoco

    if mjm.njnt == 0:
        raise ValueError(f"The {kind} model has no joints: nothing in it moves.")
    bodies = range(1, mjm.nbody)
    joint_order = np.argsort(mjm.jnt_qposadr)
    names = {
        obj: [_name(mjm, obj, i, label) for i in range(count)]
        for obj, label, count in (
            (mujoco.mjtObj.mjOBJ_BODY, "body", mjm.nbody),
            (mujoco.mjtObj.mjOBJ_JOINT, "joint", mjm.njnt),
            (mujoco.mjtObj.mjOBJ_SITE, "site", mjm.nsite),
        )
    }
    inertial = [_rotation(mjm.body_iquat[b]) for b in bodies]
    tree = RigidBodyTree(
        parents=[int(mjm.body_parentid[b]) - 1 for b in bodies],
        joint_bodies=[int(mjm.jnt_bodyid[j]) - 1 for j in joint_order],
        joint_kinds=[_KINDS[int(mjm.jnt_type[j])] for j in joint_order],
        body_positions=mjm.body_pos[1:],
        body_rotations=np.stack([_rotation(mjm.body_quat[b]) for b in bodies]),
        joint_axes=mjm.jnt_axis[joint_order],
        joint_anchors=mjm.jnt_pos[joint_order],
        masses=mjm.body_mass[1:],
        coms=mjm.body_ipos[1:],
        inertias=np.stack([R @ np.diag(mjm.body_inertia[b]) @ R.T for R, b in zip(inertial, bodies)]),
        reference=mjm.qpos0,
        armature=mjm.dof_armature,
        damping=0 * mjm.dof_damping if _disabled(mjm, "DAMPER") else mjm.dof_damping,
        stiffness=(0 if _disabled(mjm, "SPRING") else 1) * _coordinate_stiffness(mjm),
        spring_reference=mjm.qpos_spring,
        gravity=0 * mjm.opt.gravity if _disabled(mjm, "GRAVITY") else mjm.opt.gravity,
        body_names=names[mujoco.mjtObj.mjOBJ_BODY][1:],
        joint_names=[names[mujoco.mjtObj.mjOBJ_JOINT][j] for j in joint_order],
        sites={
            names[mujoco.mjtObj.mjOBJ_SITE][s]: (int(mjm.site_bodyid[s]) - 1, mjm.site_pos[s])
            for s in range(mjm.nsite)
        },
        **_tendons(mjm),
    )
    notes = _unsupported(mjm)
    actuation, actuators = _actuation(mjm, tree, notes)
    constraints = _constraints(mjm, tree)
    unilateral = _unilateral(mjm, tree, notes)
    if notes:
        warnings.warn(
            f"The {kind} model holds what ukjax does not model, left out: " + "; ".join(notes) + ".",
            stacklevel=3,
        )
    if keyframe is None:
        q0, qvel0 = mjm.qpos0, np.zeros(mjm.nv)
    else:
        index = (
            keyframe
            if isinstance(keyframe, int)
            else mujoco.mj_name2id(mjm, mujoco.mjtObj.mjOBJ_KEY, keyframe)
        )
        if not 0 <= index < mjm.nkey:
            names = [_name(mjm, mujoco.mjtObj.mjOBJ_KEY, k, "") for k in range(mjm.nkey)]
            raise KeyError(
                f"No keyframe {keyframe!r}; the model has "
                + (f"{mjm.nkey}: {', '.join(names)} (a name or an index)." if mjm.nkey else "none.")
            )
        q0, qvel0 = mjm.key_qpos[index], mjm.key_qvel[index]
    ctrl = None if actuators is None else jnp.asarray(np.zeros(mjm.nu) if keyframe is None else mjm.key_ctrl[index])
    q0, qd0 = tree.state_from_mujoco(jnp.asarray(q0, float), jnp.asarray(qvel0, float))
    q0, qd0 = _consistent_start(tree, constraints, q0, qd0, kind)
    return Model(
        tree,
        constraints,
        q0,
        qd0,
        (),
        None if actuation is None else jnp.asarray(actuation),
        actuators,
        unilateral,
        ctrl,
        float(mjm.opt.timestep),
    )


# One compiled program: evaluated op by op, each operation of the rows compiles on its own.
@jit
def _largest_violation(system, q, qd):
    return jnp.max(jnp.abs(jnp.concatenate(system.violation(0.0, q, qd))))


def _consistent_start(tree, constraints, q0, qd0, kind: str):
    """The file's start, projected onto its equalities where it violates them (a URDF
    `mimic` offset, `polycoef[0] ≠ 0`, sites that do not meet at `qpos0`), with a warning
    that says by how much it was moved."""
    if not constraints:
        return q0, qd0
    system = ConstrainedSystem(tree, constraints)
    off = float(_largest_violation(system, q0, qd0))
    if off <= 1e-10:
        return q0, qd0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a miss is said below, in the file's terms
        start = system.project(0.0, q0, qd0)
    message = f"The {kind} model's start (keyframe or qpos0) violates its equality constraints by {off:.2e}; "
    if not start.success:
        left = float(jnp.max(jnp.abs(start.phi)))
        warnings.warn(
            message + f"projecting it did not converge (still {left:.2e} off), so it is kept as it is: "
            "start from a keyframe that closes the loops, or project a start yourself (ConstrainedSystem.project).",
            stacklevel=4,
        )
        return q0, qd0
    warnings.warn(
        message + f"it was projected onto them: q moved by {float(jnp.linalg.norm(start.q - q0)):.2e}, q̇ by "
        f"{float(jnp.linalg.norm(start.qd - qd0)):.2e}.",
        stacklevel=4,
    )
    return start.q, start.qd


def from_mjcf(source: str | os.PathLike, *, keyframe: str | int | None = None) -> Model:
    """A mechanism from an MJCF model (compiled by MuJoCo, `mujoco` package).

    The body tree becomes a [`ukjax.models.RigidBodyTree`][] (hinge, slide, ball and free
    joints, quaternions kept as MuJoCo writes them; masses, inertial frames, armature, damping,
    springs, fixed tendons, gravity), the file's `connect`, `weld` (between bodies or sites; with
    `torquescale="0"` the anchor point alone, as in MuJoCo), `joint` and `tendon` equalities
    become exact constraints ([`ukjax.models.Connect`][], [`ukjax.models.Weld`][],
    [`ukjax.models.JointCoupling`][], [`ukjax.models.TendonCoupling`][]), its actuators
    [`ukjax.models.Actuators`][] (and its plain joint motors the actuation matrix), its joint
    ranges and the contacts of its spheres, capsules and boxes with planes fixed in the world
    and with each other exact unilateral constraints ([`ukjax.models.JointLimits`][],
    [`ukjax.models.PlaneContacts`][], [`ukjax.models.ShapeContacts`][], in
    `model.unilateral`). The file's `<option>` flags are
    honoured, and a start that violates the equalities is projected onto them. What the tree
    does not model (other contacts, spatial tendons, soft constraint parameters, activation
    dynamics) is named in one warning, and so is the one
    place where ukjax is exact and MuJoCo is not: a fixed tendon's `armature` coupling joints in
    different branches enters `M` in full here (`a cᵀc`, what the kinetic energy gives), where
    MuJoCo keeps only the pairs of a joint and its ancestors.

    **Arguments:**

    - `source`: an XML string, or the path of an `.xml` file.
    - `keyframe`: a keyframe's name or index for `q0`, `qd0` (default: `qpos0`, at rest).

    **Returns:**

    A [`ukjax.models.Model`][]: `system` (the tree), `constraints`, `q0`, `qd0`, `actuation`,
    `actuators` (`None` without actuators; `model.controlled(ctrl_fn)` drives them),
    `unilateral` and `ctrl` (the keyframe's controls); `model.full_system()` is the whole
    system the file describes, limits, contacts and the keyframe's controls included.
    """
    return _from_compiled(compile_model(source, "MJCF"), "MJCF", keyframe)


def from_urdf(path: str | os.PathLike, *, keyframe: str | int | None = None) -> Model:
    """A mechanism from a URDF file, read by MuJoCo's URDF compiler; as
    [`ukjax.models.from_mjcf`][] (URDF has no loop closures: `constraints` is empty).

    **Arguments:**

    - `path`: the `.urdf` file.
    - `keyframe`: as for `from_mjcf`.

    **Returns:**

    A [`ukjax.models.Model`][].
    """
    return _from_compiled(compile_model(path, "URDF"), "URDF", keyframe)
