"""The importer against MuJoCo on randomly generated files: bodies with random frames and
inertias, every joint kind, sites, a fixed tendon, actuators (a joint-in-parent transmission
among them) and equalities (connect, a weld between sites, a weld with `torquescale="0"`, a
joint coupling). At a few fixed seeds and random states: `M`, the bias, passive and actuator
forces, site positions, every equality's residual (a site weld's rotation error in length: its
axis is written in another frame) and the unconstrained acceleration agree with MuJoCo's to
round-off (in MuJoCo's velocities, `v = G q̇`)."""

import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

from ukjax import models

# one worker for the module: the seeds' files share one structure, so its programs compile once
pytestmark = pytest.mark.xdist_group("random_mjcf")


def _vector(rng, size, scale=1.0):
    return " ".join(f"{x:.6f}" for x in scale * rng.normal(size=size))


def _quaternion(rng):
    u = rng.normal(size=4)
    return " ".join(f"{x:.6f}" for x in u / np.linalg.norm(u))


def random_mjcf(seed: int) -> str:
    """A chain with a branch below a free root: hinge, ball and slide joints, every frame,
    inertia, axis, anchor, gain and coefficient random."""
    rng = np.random.default_rng(seed)
    # one structure for every seed (the values differ): the seeds share their compiled programs
    kinds = ["hinge", "ball", "slide", "hinge"]

    def body(k, inner=""):
        joint = f'<joint name="j{k}" type="{kinds[k]}" axis="{_vector(rng, 3)}" pos="{_vector(rng, 3, 0.1)}"'
        if kinds[k] != "ball":
            joint += f' damping="{rng.uniform(0, 0.3):.4f}" armature="{rng.uniform(0, 0.1):.4f}"'
            joint += f' stiffness="{rng.uniform(0, 2):.4f}" springref="{rng.normal():.4f}"'
        return (
            f'<body name="b{k}" pos="{_vector(rng, 3, 0.3)}" quat="{_quaternion(rng)}">{joint}/>'
            f'<inertial pos="{_vector(rng, 3, 0.05)}" quat="{_quaternion(rng)}" mass="{rng.uniform(0.5, 2):.4f}"'
            f' diaginertia="{" ".join(f"{x:.5f}" for x in rng.uniform(0.02, 0.035, 3))}"/>'
            f'<site name="s{k}" pos="{_vector(rng, 3, 0.2)}" quat="{_quaternion(rng)}"/>{inner}</body>'
        )

    chain = body(0, body(1, body(2)))  # b0 ⊃ b1 ⊃ b2, and b3 on the root beside b0
    scalar = [f"j{k}" for k in range(4) if kinds[k] != "ball"]
    return f"""<mujoco><option gravity="{_vector(rng, 3, 5)}"><flag contact="disable"/></option>
      <worldbody><site name="fixed" pos="{_vector(rng, 3)}" quat="{_quaternion(rng)}"/>
        <body name="root" pos="0 0 1"><freejoint name="root"/>
          <inertial pos="0 0 0" mass="3" diaginertia="0.1 0.08 0.05"/>
          <site name="sroot" pos="{_vector(rng, 3, 0.2)}"/>{chain}{body(3)}</body></worldbody>
      <tendon><fixed name="t"><joint joint="{scalar[0]}" coef="{rng.normal():.4f}"/>
        <joint joint="{scalar[1]}" coef="{rng.normal():.4f}"/></fixed></tendon>
      <actuator><motor joint="{scalar[0]}" gear="{rng.uniform(0.5, 2):.4f}"/>
        <general jointinparent="{scalar[1]}" gainprm="{rng.uniform(1, 3):.4f}" biasprm="0 {-rng.uniform(1, 3):.4f} 0"
          biastype="affine"/>
        <position tendon="t" kp="{rng.uniform(1, 5):.4f}"/></actuator>
      <equality><connect body1="b2" body2="b3" anchor="{_vector(rng, 3, 0.1)}"/>
        <weld site1="s1" site2="fixed"/>
        <weld body1="b3" body2="world" torquescale="0" anchor="{_vector(rng, 3, 0.1)}"/>
        <joint joint1="{scalar[1]}" joint2="{scalar[0]}" polycoef="0.1 0.5 0.2 0 0"/></equality></mujoco>"""


def _random_state(mjm, rng):
    qpos = mjm.qpos0 + 0.5 * rng.normal(size=mjm.nq)
    for j in range(mjm.njnt):
        if mjm.jnt_type[j] in (0, 1):  # free and ball joints: a unit quaternion
            a = mjm.jnt_qposadr[j] + (3 if mjm.jnt_type[j] == 0 else 0)
            qpos[a : a + 4] /= np.linalg.norm(qpos[a : a + 4])
    return qpos, rng.normal(size=mjm.nv), rng.normal(size=mjm.nu)


@eqx.filter_jit
def _evaluate(model, q, qd, ctrl):
    driven = model.controlled(lambda t, q, qd: ctrl)
    tree = model.system
    residuals = [c.residual(tree, 0.0, q) for c in model.constraints]
    frames = [tree.body_pose(q, c.body1)[0] if isinstance(c, models.Connect) else jnp.eye(len(r)) for c, r in zip(model.constraints, residuals)]
    return (
        tree.mass_matrix(0.0, q),
        driven.forces(0.0, q, qd),
        driven.acceleration(0.0, q, qd),
        jnp.stack([tree.site_position(q, name) for name in tree.site_names]),
        [R @ r for R, r in zip(frames, residuals)],  # in world axes, as MuJoCo's efc_pos
        tree.velocity_map(q),
    )


@pytest.mark.parametrize("seed", [0, 1])
def test_random_files_agree_with_mujoco(seed):
    xml = random_mjcf(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the start is projected onto the equalities, and said so
        model = models.from_mjcf(xml)
    mjm = mujoco.MjModel.from_xml_string(xml)
    assert [type(c).__name__ for c in model.constraints] == ["Connect", "Weld", "Connect", "JointCoupling"]
    free = mujoco.MjModel.from_xml_string(xml.replace('<flag contact="disable"/>', '<flag constraint="disable"/>'))
    d, dfree = mujoco.MjData(mjm), mujoco.MjData(free)
    rng = np.random.default_rng(seed)
    for _ in range(2):
        qpos, qvel, ctrl = _random_state(mjm, rng)
        for data in (d, dfree):
            data.qpos[:], data.qvel[:], data.ctrl[:] = qpos, qvel, ctrl
        mujoco.mj_forward(mjm, d)
        mujoco.mj_forward(free, dfree)
        M = np.zeros((mjm.nv, mjm.nv))
        mujoco.mj_fullM(mjm, d, M)
        q, qd = model.state_from_mujoco(qpos, qvel)
        Mq, Q, qdd, sites, residuals, G = (jax.tree.map(np.asarray, x) for x in _evaluate(model, q, qd, jnp.asarray(ctrl)))
        np.testing.assert_allclose(Mq, G.T @ M @ G, atol=1e-11)
        np.testing.assert_allclose(Q, G.T @ (d.qfrc_passive - d.qfrc_bias + d.qfrc_actuator), atol=1e-10)
        np.testing.assert_allclose(sites, d.site_xpos, atol=1e-12)
        np.testing.assert_allclose(G @ qdd, dfree.qacc, rtol=1e-9, atol=1e-9)
        rows = d.efc_type == mujoco.mjtConstraint.mjCNSTR_EQUALITY
        for i, ours in enumerate(residuals):
            theirs = d.efc_pos[rows & (d.efc_id == i)]
            position = min(len(ours), 3)
            np.testing.assert_allclose(theirs[:position], ours[:position], atol=1e-12, err_msg=f"equality {i}")
            if len(ours) == 6:
                # the site weld's rotation error, sin(θ/2) about the axis: ukjax writes the axis
                # in body2's frame, MuJoCo in site2's, so the two agree in length
                np.testing.assert_allclose(np.linalg.norm(theirs[3:]), np.linalg.norm(ours[3:]), atol=1e-12)
            else:
                # a weld with torquescale 0: MuJoCo keeps its rotation rows at zero
                np.testing.assert_allclose(theirs[len(ours) :], 0.0, atol=1e-12)


def test_tendon_armature_across_branches_is_exact_and_said():
    """Two sibling slides coupled by a fixed tendon with armature `a`: ukjax's `M` is the
    kinetic energy's, `diag(m) + a c cᵀ`, where MuJoCo's keeps only ancestor pairs (no
    off-diagonal term); the import says so, naming the tendon."""
    xml = """<mujoco><option gravity="0 0 0"><flag contact="disable"/></option><worldbody>
      <body name="a"><joint name="x" type="slide" axis="1 0 0"/><geom size="0.1" mass="1"/></body>
      <body name="b" pos="0 1 0"><joint name="y" type="slide" axis="1 0 0"/><geom size="0.1" mass="2"/></body>
      </worldbody><tendon><fixed name="belt" armature="0.5"><joint joint="x" coef="1"/><joint joint="y" coef="-1"/>
      </fixed></tendon></mujoco>"""
    with pytest.warns(UserWarning, match=r"armature of tendons coupling joints in different branches \(belt\)"):
        model = models.from_mjcf(xml)
    M = np.asarray(eqx.filter_jit(lambda tree, q: tree.mass_matrix(0.0, q))(model.system, jnp.zeros(2)))
    c = np.array([1.0, -1.0])
    np.testing.assert_allclose(M, np.diag([1.0, 2.0]) + 0.5 * np.outer(c, c), atol=1e-14)
    mjm = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(mjm)
    mujoco.mj_forward(mjm, d)
    theirs = np.zeros((2, 2))
    mujoco.mj_fullM(mjm, d, theirs)
    assert theirs[0, 1] == 0.0 and M[0, 1] == -0.5  # the difference the warning names
