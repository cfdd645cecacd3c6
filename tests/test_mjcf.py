"""MJCF/URDF import: the rigid-body tree against MuJoCo and Pinocchio, the equality constraints
against MuJoCo's residuals and the KKT form, imported seed mechanisms against the hand-built
models, bad files."""

import re
import warnings
from pathlib import Path

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pinocchio as pin
import pytest
from PIL import Image

import ukjax
from ukjax import models
from ukjax.cli.main import main

# Jitted model evaluations: evaluated op by op, the unrolled kernels dispatch thousands of
# scalar operations.
mass = eqx.filter_jit(lambda system, q: system.mass_matrix(0.0, q))
forces = eqx.filter_jit(lambda system, q, qd: system.forces(0.0, q, qd))
# `call(f, *args)` is `f(*args)` compiled as one program: evaluated op by op, every operation
# of a tree's kinematics is compiled on its own (most of these tests' time).
call = eqx.filter_jit(lambda f, *args: f(*args))


EXAMPLES = Path(__file__).parent.parent / "examples"

# Seven joints and a branch: offsets, rotated body and inertial frames, a full inertia tensor,
# two joints on one body, a slide, a joint reference, armature, damping and a spring.
ARM = """<mujoco model="arm7">
  <option gravity="0.3 -0.2 -9.81"><flag contact="disable"/></option>
  <worldbody>
    <body name="l1" pos="0.1 0 0.3" quat="0.9 0.1 0.2 0.1">
      <joint name="j1" axis="0 0 1" armature="0.02" damping="0.3"/>
      <inertial pos="0.01 0.02 0.1" mass="2.1" fullinertia="0.03 0.02 0.025 0.001 -0.002 0.003"/>
      <body name="l2" pos="0 0.05 0.2" euler="20 10 0">
        <joint name="j2" axis="0 1 0.2" pos="0 0 0.02" stiffness="3" springref="0.2"/>
        <inertial pos="0.1 0 0.02" quat="0.8 0.2 0.1 0.3" mass="1.7" diaginertia="0.02 0.015 0.01"/>
        <body name="l3" pos="0.25 0 0">
          <joint name="j3" type="slide" axis="1 0.1 0" armature="0.1"/>
          <joint name="j4" axis="1 0 0" pos="0.02 0.01 0" ref="0.3"/>
          <inertial pos="0.05 0.01 -0.02" mass="1.1" diaginertia="0.01 0.012 0.008"/>
          <body name="l4" pos="0.2 0 0" quat="0.7 0 0.7 0">
            <joint name="j5" axis="0 0 1" damping="0.1"/>
            <inertial pos="0 0 0.05" mass="0.8" diaginertia="0.004 0.005 0.003"/>
            <body name="l5" pos="0 0 0.15">
              <joint name="j6" axis="0 1 0"/>
              <inertial pos="0 0.02 0.04" mass="0.5" diaginertia="0.002 0.002 0.001"/>
              <body name="l6" pos="0 0 0.1">
                <joint name="j7" axis="1 0 0"/>
                <inertial pos="0.01 0 0.02" mass="0.3" diaginertia="0.001 0.0012 0.0009"/>
                <site name="tip" pos="0 0 0.08"/>
              </body>
            </body>
          </body>
        </body>
      </body>
      <body name="branch" pos="-0.1 0 0.1">
        <joint name="b1" type="slide" axis="0 0 1"/>
        <inertial pos="0 0 0" mass="0.4" diaginertia="0.001 0.001 0.001"/>
      </body>
    </body>
  </worldbody>
</mujoco>"""

# A spatial loop: two arms with skew hinge axes, joined by a ball joint (`connect`).
SPATIAL_LOOP = """<mujoco model="spatial_loop">
  <option><flag contact="disable"/></option>
  <worldbody>
    <body name="a1" pos="0 0 0">
      <joint name="a1" axis="0 0 1"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0.1" size="0.02" mass="0.6"/>
      <body name="a2" pos="0.3 0 0.1">
        <joint name="a2" axis="0 1 0.3"/>
        <geom type="capsule" fromto="0 0 0 0.1 0.3 0" size="0.02" mass="0.4"/>
      </body>
    </body>
    <body name="b1" pos="0.5 0.4 0">
      <joint name="b1" axis="1 0 0"/>
      <geom type="capsule" fromto="0 0 0 0 0 0.2" size="0.02" mass="0.5"/>
      <body name="b2" pos="0 0 0.2">
        <joint name="b2" axis="0.3 0.2 1"/>
        <joint name="b3" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 -0.1 -0.1 -0.1" size="0.02" mass="0.3"/>
      </body>
    </body>
  </worldbody>
  <equality><connect body1="a2" body2="b2" anchor="0.1 0.3 0"/></equality>
</mujoco>"""

# A weld and a polynomial joint coupling.
WELD = """<mujoco model="weld">
  <option><flag contact="disable"/></option>
  <worldbody>
    <body name="a" pos="0 0 1">
      <joint name="a1" axis="0 0 1"/>
      <joint name="a2" axis="0 1 0" pos="0 0 0.1"/>
      <geom type="box" size="0.1 0.05 0.02" pos="0.1 0 0" mass="1"/>
      <body name="b" pos="0.3 0 0" euler="10 20 30">
        <joint name="b1" type="slide" axis="1 0 0"/>
        <joint name="b2" axis="0 1 0"/>
        <joint name="b3" axis="1 0 0"/>
        <joint name="b4" axis="0 0 1"/>
        <geom type="box" size="0.1 0.05 0.02" mass="0.5"/>
      </body>
    </body>
    <body name="c" pos="0.5 0.2 1">
      <joint name="c1" axis="1 0 0"/>
      <joint name="c2" axis="0 1 0"/>
      <joint name="c3" axis="0 0 1"/>
      <geom type="sphere" size="0.05" mass="0.3"/>
    </body>
  </worldbody>
  <equality>
    <weld body1="b" body2="c" anchor="0.1 0 0"/>
    <joint joint1="a2" joint2="c2" polycoef="0 0.5 0.2 0 0"/>
  </equality>
</mujoco>"""

# Seed 001's SCARA arm (parameters of `models.ScaraArm()`): only the inertias about z enter.
SCARA = """<mujoco model="scara">
  <option gravity="0 0 -9.81"><flag contact="disable"/></option>
  <worldbody>
    <body name="link1">
      <joint name="q1" axis="0 0 1"/>
      <inertial pos="0 0.1 0" mass="20" diaginertia="0.135 0.135 0.27"/>
      <body name="link2" pos="0 0.2 0">
        <joint name="q2" axis="0 0 1"/>
        <inertial pos="0 0.125 0" mass="15" diaginertia="0.155 0.155 0.31"/>
        <body name="link3" pos="0 0.25 0">
          <joint name="q3" axis="0 0 1"/>
          <inertial pos="0 0 0" mass="15" diaginertia="0.01 0.01 0.02"/>
          <body name="link4">
            <joint name="q4" type="slide" axis="0 0 1"/>
            <inertial pos="0 0 0" mass="0.5" diaginertia="0.00005 0.00005 0.0001"/>
            <site name="tool"/>
          </body>
        </body>
      </body>
    </body>
  </worldbody>
</mujoco>"""


def _mujoco_state(xml: str, q, qd):
    mjm = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(mjm)
    d.qpos[:], d.qvel[:] = q, qd
    mujoco.mj_forward(mjm, d)
    M = np.zeros((mjm.nv, mjm.nv))
    mujoco.mj_fullM(mjm, d, M)
    return mjm, d, M


@pytest.mark.parametrize(
    "xml",
    [
        ARM,
        SPATIAL_LOOP,
        WELD,
        SCARA,
        models.PARALLEL_2DOF_MJCF.read_text(),
        (EXAMPLES / "fourbar.xml").read_text(),
    ],
    ids=["arm7", "spatial_loop", "weld", "scara", "parallel_2dof", "fourbar"],
)
def test_tree_matches_mujoco(xml):
    tree = models.from_mjcf(xml).system
    rng = np.random.default_rng(0)
    for _ in range(3):
        q, qd = rng.normal(size=len(tree.joint_names)), rng.normal(size=len(tree.joint_names))
        mjm, d, M = _mujoco_state(xml, q, qd)
        kin = call(tree.kinematics, jnp.asarray(q))
        np.testing.assert_allclose(mass(tree, jnp.asarray(q)), M, atol=1e-10, rtol=0)
        np.testing.assert_allclose(
            forces(tree, jnp.asarray(q), jnp.asarray(qd)),
            d.qfrc_passive - d.qfrc_bias,
            atol=1e-10,
            rtol=0,
        )
        np.testing.assert_allclose(kin.positions, d.xpos[1:], atol=1e-12)
        np.testing.assert_allclose(kin.rotations, d.xmat[1:].reshape(-1, 3, 3), atol=1e-12)
        for s, name in enumerate(tree.site_names):
            np.testing.assert_allclose(call(tree.site_position, jnp.asarray(q), name), d.site_xpos[s], atol=1e-12)


def _kkt(M, Q, A, b):
    n, p = M.shape[0], A.shape[0]
    K = np.block([[M, A.T], [A, np.zeros((p, p))]])
    return np.linalg.solve(K, np.concatenate([Q, b]))[:n]


def _in_world_axes(tree, constraint, q):
    """A constraint's residual as MuJoCo's `efc_pos` writes it: a `connect` gap in world axes
    (ukjax writes it in `body1`'s)."""
    residual = constraint.residual(tree, 0.0, q)
    if isinstance(constraint, models.Connect):
        return tree.body_pose(q, constraint.body1)[0] @ residual
    return residual


@pytest.mark.parametrize(
    "xml",
    [SPATIAL_LOOP, WELD, (EXAMPLES / "fourbar.xml").read_text()],
    ids=["spatial_loop", "weld", "fourbar"],
)
def test_equalities_match_mujoco_and_kkt(xml):
    model = models.from_mjcf(xml)
    csys = ukjax.ConstrainedSystem(model.system, model.constraints)
    rng = np.random.default_rng(1)
    q, qd = model.q0 + 0.3 * rng.normal(size=model.q0.shape), rng.normal(size=model.q0.shape)

    @eqx.filter_jit  # one program for all of them: each compiled alone took most of the test
    def evaluate(csys, q, qd):
        return (
            csys.violation(0.0, model.q0, model.qd0)[0],
            [_in_world_axes(csys.system, c, q) for c in csys.constraints],
            csys.rows(0.0, q, qd),
            csys.mass_matrix(0.0, q),
            csys.forces(0.0, q, qd),
            csys.acceleration(0.0, q, qd),
        )

    start, ours, rows, M, Q, qdd = evaluate(csys, jnp.asarray(q), jnp.asarray(qd))
    np.testing.assert_allclose(start, 0.0, atol=1e-14)  # MuJoCo closes the loops at qpos0
    mjm, d, _ = _mujoco_state(xml, q, qd)
    # MuJoCo's rows, in the same order: connect 3, weld 6 (position, quaternion error), joint 1
    np.testing.assert_allclose(np.concatenate(ours), d.efc_pos[: sum(map(len, ours))], atol=1e-12)
    # the accelerations against the KKT form on the rows that are not identically zero (a planar
    # loop written in 3D has one)
    A, b = np.asarray(rows.A), np.asarray(rows.b)
    kept = np.linalg.norm(A, axis=1) > 1e-12
    expected = _kkt(np.asarray(M), np.asarray(Q), A[kept], b[kept])
    np.testing.assert_allclose(qdd, expected, rtol=1e-9, atol=1e-9)


def test_spatial_rows_equal_automatic_differentiation():
    """`Connect` and `SiteConstraint` build their rows from joint twists; the generic route
    differentiates the same residual twice with `jax.jvp`."""
    rng = np.random.default_rng(4)
    spatial = models.from_mjcf(SPATIAL_LOOP)
    loop, tree = spatial.constraints[0], spatial.system
    scara = models.from_mjcf(SCARA).system
    site = models.SiteConstraint(scara, "tool", models.scara_reference, axes=(0, 2))
    cases = [
        (loop, tree, lambda t, q: loop.residual(tree, t, q), 5),
        (
            site,
            scara,
            lambda t, q: (scara.site_position(q, "tool") - models.scara_reference(t))[np.array([0, 2])],
            4,
        ),
    ]
    for constraint, system, residual, n in cases:
        q, qd = jnp.asarray(rng.normal(size=n)), jnp.asarray(rng.normal(size=n))
        ours = call(constraint.system_rows, system, 0.7, q, qd)
        generic = call(ukjax.Holonomic(residual).rows, 0.7, q, qd)
        for field in ("A", "b", "phi", "phid"):
            np.testing.assert_allclose(getattr(ours, field), getattr(generic, field), atol=1e-13)
    q = jnp.asarray(rng.normal(size=4))
    np.testing.assert_allclose(
        call(scara.site_jacobian, q, "tool"), call(jax.jacfwd(lambda q: scara.site_position(q, "tool")), q), atol=1e-14
    )


def test_closed_chains_hold_in_a_batch():
    model = models.from_mjcf(SPATIAL_LOOP)
    csys = ukjax.ConstrainedSystem(model.system, model.constraints)
    A = np.asarray(call(csys.rows, 0.0, model.q0, model.qd0).A)
    null = np.linalg.svd(A)[2][3:]  # consistent initial velocities
    qd0 = jnp.asarray(np.random.default_rng(2).normal(size=(4, 2)) @ null)
    sol = ukjax.simulate_batch(
        csys,
        jnp.broadcast_to(model.q0, (4, 5)),
        qd0,
        0.0,
        1.0,
        ts=jnp.linspace(0, 1, 11),
        rtol=1e-11,
        atol=1e-11,
    )
    assert bool(jnp.all(sol.status == ukjax.Status.SUCCESS))
    assert float(jnp.max(jnp.abs(sol.phi))) < 1e-9
    assert float(jnp.max(jnp.abs(sol.q[:, -1] - sol.q[:, 0]))) > 1e-2  # it moved


def test_scara_from_mjcf_matches_hand_built():
    seed = models.scara()
    tree = models.from_mjcf(SCARA).system
    np.testing.assert_allclose(
        mass(tree, seed.q0 + 0.2), mass(seed.system, seed.q0 + 0.2), atol=1e-12
    )
    imported = ukjax.ConstrainedSystem(
        tree,
        [
            models.SiteConstraint(tree, "tool", models.scara_reference),
            ukjax.Holonomic(lambda t, q: q[0] + q[1] + q[2]),
        ],
    )
    hand_built = ukjax.ConstrainedSystem(seed.system, seed.constraints)
    ts = jnp.linspace(0.0, 2.0, 21)
    a, b = (
        ukjax.simulate(s, seed.q0, seed.qd0, 0.0, 2.0, ts=ts, rtol=1e-11, atol=1e-11)
        for s in (imported, hand_built)
    )
    np.testing.assert_allclose(a.q, b.q, atol=1e-9)


def test_parallel_robot_from_mjcf_matches_hand_built():
    seed = models.parallel_2dof()
    model = models.from_mjcf(models.PARALLEL_2DOF_MJCF, keyframe="start")
    angles = np.array([0, 1, 4, 5, 8, 9])
    np.testing.assert_allclose(model.q0, seed.q0[angles], atol=1e-15)
    torques = jnp.array([0.02, -0.01, 0.005])
    imported = ukjax.ConstrainedSystem(
        ukjax.Forced(model.system, lambda t, q, qd: model.actuation @ torques), model.constraints
    )
    hand = jnp.zeros(12).at[jnp.array([0, 4, 8])].set(torques)
    hand_built = ukjax.ConstrainedSystem(ukjax.Forced(seed.system, lambda t, q, qd: hand), seed.constraints)
    ts = jnp.linspace(0.0, 0.5, 6)
    a = ukjax.simulate(imported, model.q0, model.qd0, 0.0, 0.5, ts=ts, rtol=1e-11, atol=1e-11)
    b = ukjax.simulate(hand_built, seed.q0, seed.qd0, 0.0, 0.5, ts=ts, rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(a.q, b.q[:, angles], atol=1e-9)
    assert float(jnp.max(jnp.abs(a.q[-1] - a.q[0]))) > 1e-3


URDF = """<robot name="arm">
  <link name="base"/>
  <link name="l1"><inertial><origin xyz="0.1 0 0.05" rpy="0.1 0.2 0.3"/><mass value="2"/>
    <inertia ixx="0.03" iyy="0.02" izz="0.025" ixy="0.001" ixz="-0.002" iyz="0.003"/></inertial></link>
  <link name="l2"><inertial><origin xyz="0 0.2 0"/><mass value="1.5"/>
    <inertia ixx="0.02" iyy="0.01" izz="0.02" ixy="0" ixz="0" iyz="0"/></inertial></link>
  <link name="l3"><inertial><origin xyz="0.05 0 0"/><mass value="0.7"/>
    <inertia ixx="0.004" iyy="0.005" izz="0.003" ixy="0" ixz="0" iyz="0"/></inertial></link>
  <link name="l4"><inertial><origin xyz="0 0 0.02"/><mass value="0.3"/>
    <inertia ixx="0.001" iyy="0.001" izz="0.0015" ixy="0" ixz="0" iyz="0"/></inertial></link>
  <joint name="r1" type="revolute"><parent link="base"/><child link="l1"/><origin xyz="0 0 0.1"/>
    <axis xyz="0 0 1"/><limit lower="-3" upper="3" effort="10" velocity="10"/></joint>
  <joint name="r2" type="revolute"><parent link="l1"/><child link="l2"/><origin xyz="0.2 0 0.1" rpy="0.3 0 0.2"/>
    <axis xyz="0 1 0"/><limit lower="-3" upper="3" effort="10" velocity="10"/></joint>
  <joint name="p3" type="prismatic"><parent link="l2"/><child link="l3"/><origin xyz="0 0.3 0"/>
    <axis xyz="0 1 0"/><limit lower="-1" upper="1" effort="10" velocity="10"/></joint>
  <joint name="r4" type="revolute"><parent link="l3"/><child link="l4"/><origin xyz="0.1 0 0" rpy="0 0.5 0"/>
    <axis xyz="1 0 0"/><limit lower="-3" upper="3" effort="10" velocity="10"/></joint>
</robot>"""


def test_urdf_matches_pinocchio_and_mujoco(tmp_path):
    path = tmp_path / "arm.urdf"
    path.write_text(URDF)
    with pytest.warns(UserWarning, match=r"actuatorfrcrange clamps of r1, r2, p3, r4"):
        model = models.from_urdf(path)
    tree = model.system
    assert tree.joint_names == ("r1", "r2", "p3", "r4") and model.constraints == ()
    # the URDF's limits, exact (unilateral), in radians and metres
    (limits,) = model.unilateral
    assert limits.joints == tree.joint_names
    np.testing.assert_allclose(np.asarray(limits.upper), mujoco.MjModel.from_xml_path(str(path)).jnt_range[:, 1])
    robot = pin.buildModelFromXML(URDF)
    data = robot.createData()
    rng = np.random.default_rng(3)
    for _ in range(3):
        q, qd = rng.normal(size=4), rng.normal(size=4)
        M = pin.crba(robot, data, q)
        M = np.triu(M) + np.triu(M, 1).T
        bias = pin.rnea(robot, data, q, qd, np.zeros(4))
        np.testing.assert_allclose(mass(tree, jnp.asarray(q)), M, atol=1e-10)
        np.testing.assert_allclose(forces(tree, jnp.asarray(q), jnp.asarray(qd)), -bias, atol=1e-10)
        mjm = mujoco.MjModel.from_xml_path(str(path))
        d = mujoco.MjData(mjm)
        d.qpos[:], d.qvel[:] = q, qd
        mujoco.mj_forward(mjm, d)
        np.testing.assert_allclose(
            forces(tree, jnp.asarray(q), jnp.asarray(qd)), -d.qfrc_bias, atol=1e-10
        )


def test_unsupported_features_named_in_one_warning():
    xml = ARM.replace('<flag contact="disable"/>', "").replace(
        '<joint name="j6" axis="0 1 0"/>', '<joint name="j6" axis="0 1 0" range="-1 1"/>'
    )
    xml = xml.replace(
        '<site name="tip" pos="0 0 0.08"/>', '<site name="tip" pos="0 0 0.08"/><geom size="0.02"/>'
    )
    xml = xml.replace(
        '<inertial pos="0 0 0" mass="0.4"', '<geom type="ellipsoid" size="0.02 0.02 0.03"/><inertial pos="0 0 0" mass="0.4"'
    )
    xml = xml.replace(
        "</worldbody>",
        '</worldbody><actuator><position joint="j1" kp="10"/><motor joint="j2" gear="3"/></actuator>',
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = models.from_mjcf(xml)
    assert len(caught) == 1
    message = str(caught[0].message)
    # a sphere and an ellipsoid on moving bodies: a pair the unilateral constraints do not model
    # (yet), named; the limit on j6 is modelled (model.unilateral), and so is the position actuator
    assert (
        "contacts other than those of planes, spheres, capsules, boxes and cylinders (1 geom pairs" in message
        and "limit" not in message
        and "actuator" not in message
    )
    assert model.unilateral[0].joints == ("j6",)
    np.testing.assert_array_equal(model.actuation[:, 1], np.eye(8)[1] * 3)
    np.testing.assert_array_equal(model.actuation[:, 0], 0.0)


def test_log_cholesky_tree_is_the_tree():
    """An imported tree through log-Cholesky parameters: the same dynamics, every θ physical."""
    tree = models.from_mjcf(ARM).system
    consistent = models.LogCholeskyChain(tree)
    rng = np.random.default_rng(5)
    q, qd = jnp.asarray(rng.normal(size=8)), jnp.asarray(rng.normal(size=8))
    np.testing.assert_allclose(mass(consistent, q), mass(tree, q), atol=1e-12)
    np.testing.assert_allclose(forces(consistent, q, qd), forces(tree, q, qd), atol=1e-12)
    other = eqx.tree_at(
        lambda m: m.theta, consistent, consistent.theta + jnp.asarray(rng.normal(size=consistent.theta.shape))
    )
    masses, _, inertias = other.physical().inertial()
    assert bool(jnp.all(masses > 0)) and bool(jnp.all(jnp.linalg.eigvalsh(inertias) > 0))


def test_bad_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.xml"):
        models.from_mjcf(tmp_path / "nowhere.xml")
    with pytest.raises(ValueError, match="MuJoCo could not compile the MJCF string"):
        models.from_mjcf("<mujoco><worldbody><body></worldbody></mujoco>")
    ball = '<mujoco><worldbody><body name="b"><joint name="shoulder" type="ball"/><geom size="0.1"/></body></worldbody></mujoco>'
    assert models.from_mjcf(ball).system.num_coordinates == 4  # quaternion coordinates
    with pytest.raises(ValueError, match="free joint must be the only joint of a body hung from the world"):
        models.RigidBodyTree([-1, 0], [1], ["free"], np.zeros((2, 3)), np.stack([np.eye(3)] * 2),
                             np.zeros((1, 3)), np.zeros((1, 3)), np.ones(2), np.zeros((2, 3)),
                             np.stack([np.eye(3)] * 2))
    with pytest.raises(ValueError, match="no joints"):
        models.from_mjcf('<mujoco><worldbody><body name="b"><geom size="0.1"/></body></worldbody></mujoco>')
    with pytest.raises(KeyError, match="No keyframe 'nope'"):
        models.from_mjcf(EXAMPLES / "fourbar.xml", keyframe="nope")
    tree = models.from_mjcf(ARM).system
    with pytest.raises(KeyError, match="No site named 'hand'"):
        tree.site_position(jnp.zeros(8), "hand")


def test_gradient_reaches_imported_parameters():
    model = models.from_mjcf(EXAMPLES / "fourbar.xml", keyframe="swinging")

    @jax.jit
    def final_angle(masses):
        tree = eqx.tree_at(lambda t: t.masses, model.system, masses)
        csys = ukjax.ConstrainedSystem(tree, model.constraints)
        rk4 = dict(solver=ukjax.RK4(), adaptive=False, dt0=0.01, adjoint=diffrax.ForwardMode())
        return ukjax.simulate(csys, model.q0, model.qd0, 0.0, 0.3, **rk4).q[-1, 0]

    masses = model.system.masses
    grad = jax.jacfwd(final_angle)(masses)
    h = 1e-5
    for i in range(3):
        step = jnp.zeros(3).at[i].set(h)
        fd = (final_angle(masses + step) - final_angle(masses - step)) / (2 * h)
        assert abs(grad[i] - fd) <= 1e-6 * max(1.0, abs(fd)), (i, grad[i], fd)
    assert float(jnp.max(jnp.abs(grad))) > 1e-3


def test_simulate_command(tmp_path, capfd):
    """A line per stage (no carriage returns in a pipe), an animation of every saved time, and
    a clear error for a bad keyframe instead of a traceback."""
    out = tmp_path / "fourbar.png"
    args = ["--no-cache", "simulate", str(EXAMPLES / "fourbar.xml"), "--t1", "1", "--saves", "21", "--out", str(out)]
    main(args + ["--keyframe", "swinging", "--gif", str(tmp_path / "fourbar.gif")])
    text, err = capfd.readouterr()
    assert "3 bodies, 3 joints, 1 constraints (3 rows)" in text and "status SUCCESS" in text
    assert Image.open(tmp_path / "fourbar.gif").n_frames == 21 and "(21 frames)" in text
    assert float(re.search(r"max constraint violation (\S+)", text).group(1)) < 1e-9
    assert out.stat().st_size > 10_000
    assert "\r" not in text + err and "simulating 1 s ...\n  done in" in text
    with pytest.raises(SystemExit) as exit_:
        main(args + ["--keyframe", "flying"])
    assert exit_.value.code == 2
    assert "ukjax simulate: error: No keyframe 'flying'" in capfd.readouterr().err


def test_constraints_read_the_tree_they_constrain():
    """A geometry edit through `eqx.tree_at` (what a geometry fit does) reaches the loop
    closure: the rocker's pivot moved 5 cm along x opens the loop by 5 cm, and the closure's
    derivatives with respect to the pivots are ∓ the identity (the loop's ends at q = 0)."""
    model = models.from_mjcf((EXAMPLES / "fourbar.xml").read_text())
    csys = ukjax.ConstrainedSystem(model.system, model.constraints)
    rocker = model.system.body_names.index("rocker")
    coupler = model.system.body_names.index("coupler")

    def closure(positions):
        moved = eqx.tree_at(lambda s: s.system.body_positions, csys, positions)
        return moved.violation(0.0, model.q0, model.qd0)[0]

    positions = model.system.body_positions
    np.testing.assert_allclose(call(closure, positions.at[rocker, 0].add(0.05)), [-0.05, 0, 0], atol=1e-14)
    jac = call(jax.jacfwd(closure), positions)
    np.testing.assert_allclose(jac[:, rocker], -np.eye(3), atol=1e-14)
    np.testing.assert_allclose(jac[:, coupler], np.eye(3), atol=1e-14)
    # outside a system there is no tree to read: said, not guessed
    with pytest.raises(TypeError, match="reads the system it constrains"):
        model.constraints[0].rows(0.0, model.q0, model.qd0)
    # one copy of each parameter in the system: a fit names it once, by its place in the tree
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(csys)[0]]
    assert [p for p in paths if p.endswith(".masses")] == [".system.masses"]


def test_weld_rotation_error_vanishes_only_when_welded():
    """MuJoCo's quaternion error: 1 at a half turn (`½ vee(E − Eᵀ)` was 0 there), and the
    projection from 2.8 rad lands on the welded pose (it went to π)."""
    xml = """<mujoco><option><flag contact="disable"/></option><worldbody><body name="a" pos="0 0 1">
      <joint name="h" axis="0 0 1"/><geom size="0.1" mass="1"/></body></worldbody>
      <equality><weld body1="a"/></equality></mujoco>"""
    model = models.from_mjcf(xml)
    weld = model.constraints[0]
    for angle in (0.3, 2.8, np.pi):
        _, d, _ = _mujoco_state(xml, [angle], [0.0])
        np.testing.assert_allclose(call(weld.residual, model.system, 0.0, jnp.array([angle])), d.efc_pos[:6], atol=1e-14)
    assert abs(d.efc_pos[5]) == pytest.approx(1.0)
    csys = ukjax.ConstrainedSystem(model.system, model.constraints)
    q = csys.project(0.0, jnp.array([2.8]), jnp.array([0.0])).q
    assert np.cos(float(q[0])) == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(call(csys.violation, 0.0, q, jnp.zeros(1))[0], 0.0, atol=1e-12)


FLAGS = """<mujoco><option>{flags}</option>
  <worldbody><body name="a" pos="0 0 1">
    <joint name="h1" axis="0 1 0" stiffness="3" springref="0.4" damping="0.5"/>
    <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="1"/>
    <body name="b" pos="0.3 0 0"><joint name="h2" axis="0 1 0"/>
      <geom type="capsule" fromto="-0.05 0 0 0.3 0 0.1" size="0.03" mass="0.5"/></body>
  </body></worldbody>
  <equality><joint joint1="h2" joint2="h1" polycoef="0 0.5 0 0 0"/></equality>
  <actuator><motor name="m" joint="h1" gear="2" ctrlrange="-1 1"/></actuator></mujoco>"""


@pytest.mark.parametrize("flag", ["", "gravity", "spring", "damper", "equality", "actuation", "filterparent"])
def test_option_flags_are_honoured(flag):
    """`<flag X="disable"/>` switches off in ukjax what it switches off in MuJoCo; the
    parent–child geoms overlap, and are a contact only where MuJoCo's filter lets them be."""
    xml = FLAGS.format(flags=f'<flag {flag}="disable"/>' if flag else "")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = models.from_mjcf(xml)
    q, qd, ctrl = np.array([0.3, -0.2]), np.array([0.7, -1.1]), np.array([0.6])
    mjm, d, _ = _mujoco_state(xml, q, qd)
    d.ctrl[:] = ctrl
    mujoco.mj_forward(mjm, d)
    ours = forces(model.system, jnp.asarray(q), jnp.asarray(qd)) + model.actuation @ ctrl
    np.testing.assert_allclose(ours, d.qfrc_passive - d.qfrc_bias + d.qfrc_actuator, atol=1e-12)
    assert len(model.constraints) == (0 if flag == "equality" else 1) == mjm.neq * (flag != "equality")
    message = " ".join(str(w.message) for w in caught)
    # the overlapping capsules' contacts are built (end spheres against the other capsule)
    assert "contacts" not in message
    assert (len(model.unilateral) > 0) == (d.ncon > 0) == (flag == "filterparent")
    # the motor's ctrlrange clamps a command beyond it, in `controlled` as in MuJoCo
    d.ctrl[:] = [1.6]
    mujoco.mj_forward(mjm, d)
    driven = forces(model.controlled(lambda t, q, qd: jnp.array([1.6])), jnp.asarray(q), jnp.asarray(qd))
    np.testing.assert_allclose(driven, d.qfrc_passive - d.qfrc_bias + d.qfrc_actuator, atol=1e-12)


def test_start_projected_onto_the_files_equalities():
    """`polycoef[0] ≠ 0`: `qpos0` violates the joint equality by 0.1; the start is projected
    (and the move reported) instead of simulated as it is."""
    xml = FLAGS.format(flags="").replace('polycoef="0 0.5', 'polycoef="0.1 0.5')
    with pytest.warns(UserWarning, match="violates its equality constraints by 1.00e-01; it was projected"):
        model = models.from_mjcf(xml)
    csys = ukjax.ConstrainedSystem(model.system, model.constraints)
    np.testing.assert_allclose(call(csys.violation, 0.0, model.q0, model.qd0)[0], 0.0, atol=1e-12)
    assert float(jnp.linalg.norm(model.q0)) == pytest.approx(0.1 / np.sqrt(1.25), rel=1e-9)  # the nearest point


def test_sites_on_the_world_body():
    """A `connect` to a site on the world body (the benchmark's coordinated robots have one)."""
    xml = """<mujoco><worldbody><site name="anchor" pos="0.5 0 0.2"/>
      <body name="a"><joint name="h1" axis="0 1 0"/><geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02"/>
        <body name="b" pos="0.3 0 0"><joint name="h2" axis="0 1 0"/>
          <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02"/><site name="tip" pos="0.3 0 0"/></body></body>
      </worldbody><equality><connect site1="tip" site2="anchor"/></equality></mujoco>"""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the start is projected onto the loop
        model = models.from_mjcf(xml)
    q = jnp.array([0.4, -0.9])
    _, d, _ = _mujoco_state(xml, np.asarray(q), np.zeros(2))
    # one program (op by op, every operation of the kinematics compiles on its own)
    evaluate = eqx.filter_jit(lambda tree, c, q: (tree.site_position(q, "anchor"), _in_world_axes(tree, c, q)))
    anchor, gap = evaluate(model.system, model.constraints[0], q)
    np.testing.assert_allclose(anchor, d.site_xpos[0], atol=1e-14)
    np.testing.assert_allclose(gap, d.efc_pos[:3], atol=1e-12)


def test_example_files_ship_with_the_package(tmp_path, monkeypatch):
    """`ukjax.examples.path` finds the example files from any directory (the README's snippet
    ran only from the repository's root); an unknown name lists the files there are."""
    monkeypatch.chdir(tmp_path)
    model = models.from_mjcf(ukjax.examples.path("fourbar.xml"), keyframe="swinging")
    assert model.system.joint_names == ("crank", "coupler", "rocker")
    with pytest.raises(FileNotFoundError, match=r"fourbar\.xml.*gripper\.xml"):
        ukjax.examples.path("fivebar.xml")
