"""Fixed tendons, tendon equalities and MuJoCo's actuators, against MuJoCo: the gripper of
examples/gripper.xml (two four-bar fingers, a joint equality, a tendon with a spring, a `general`
position actuator with affine bias on it); Cassie's motors are checked in test_quaternions."""

import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

import ukjax
from ukjax import models

GRIPPER = Path(__file__).parent.parent / "examples" / "gripper.xml"


def mujoco_forces(mjm, qpos, qvel, ctrl):
    d = mujoco.MjData(mjm)
    d.qpos[:], d.qvel[:], d.ctrl[:] = qpos, qvel, ctrl
    mujoco.mj_forward(mjm, d)
    return d.qfrc_passive - d.qfrc_bias + d.qfrc_actuator, d


def test_gripper_forces_equal_mujocos():
    """`model.controlled(ctrl).forces` against `qfrc_passive − qfrc_bias + qfrc_actuator` at
    random states, controls inside and outside `ctrlrange` (clamped as MuJoCo clamps), and
    the tendon's spring on both sides of its dead band."""
    model = models.from_mjcf(GRIPPER)
    mjm = mujoco.MjModel.from_xml_path(str(GRIPPER))
    assert model.system.tendon_names == ("grip",) and model.actuators.names == ("grip",)

    @jax.jit
    def forces(q, qd, ctrl):
        return model.controlled(lambda t, q, qd: ctrl).forces(0.0, q, qd)

    rng = np.random.default_rng(0)
    for ctrl in (0.3, -0.45, 2.0, -5.0):
        q, qd = rng.normal(scale=0.4, size=6), rng.normal(size=6)
        expected, _ = mujoco_forces(mjm, q, qd, [ctrl])
        np.testing.assert_allclose(forces(jnp.asarray(q), jnp.asarray(qd), jnp.array([ctrl])), expected, atol=1e-9)


def test_gripper_closed_under_control_keeps_its_loops():
    """The controlled gripper with its loops and mirror closed: 1 s of a sinusoidal grip
    command keeps every constraint to 1e-9, and the fingers move."""
    model = models.from_mjcf(GRIPPER)
    system = ukjax.ConstrainedSystem(
        model.controlled(lambda t, q, qd: jnp.array([0.5 * jnp.sin(2 * jnp.pi * t)])), model.constraints
    )
    sol = ukjax.simulate(system, model.q0, model.qd0, 0.0, 1.0, ts=jnp.linspace(0, 1, 21), rtol=1e-10, atol=1e-10)
    assert bool(sol.success)
    assert float(jnp.max(jnp.abs(sol.phi))) < 1e-9 and float(jnp.max(jnp.abs(sol.phid))) < 1e-9
    assert float(jnp.max(jnp.abs(sol.q[:, 0]))) > 0.05


def test_tendon_equality_and_motor_kinds():
    """A `tendon` equality against MuJoCo's `efc_pos`, and `motor`, `position` and `velocity`
    actuators on joints (two on one joint: their forces summed there) and a motor on a tendon
    against `qfrc_actuator`; `actuation` keeps the plain motor's column."""
    xml = """<mujoco><option><flag contact="disable"/></option><worldbody>
      <body><joint name="a" axis="0 1 0"/><geom size="0.05" mass="1"/>
        <body pos="0.2 0 0"><joint name="b" axis="0 1 0" ref="0.3"/><geom size="0.05" mass="1"/>
          <body pos="0.2 0 0"><joint name="c" type="slide" axis="1 0 0"/><geom size="0.05" mass="1"/></body>
        </body></body></worldbody>
      <tendon><fixed name="t1"><joint joint="a" coef="1"/><joint joint="b" coef="0.5"/></fixed>
        <fixed name="t2"><joint joint="c" coef="2"/></fixed></tendon>
      <equality><tendon tendon1="t1" tendon2="t2" polycoef="0.01 0.5 0.2 0 0"/></equality>
      <actuator><motor joint="a" gear="3"/><position joint="b" kp="4" kv="0.3" forcerange="-1 1"/>
        <velocity joint="c" kv="2"/><position joint="a" kp="2" kv="0.1"/><motor tendon="t1" gear="2"/>
      </actuator></mujoco>"""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the start is projected onto the tendon equality
        model = models.from_mjcf(xml)
    mjm = mujoco.MjModel.from_xml_string(xml)
    q, qd, ctrl = np.array([0.4, -0.3, 0.1]), np.array([0.5, 1.0, -0.7]), np.array([0.2, 0.9, -0.4, -0.1, 0.6])
    expected, d = mujoco_forces(mjm, q, qd, ctrl)
    coupling = model.constraints[0]
    assert isinstance(coupling, models.TendonCoupling)

    @jax.jit  # one program: evaluated eagerly, the tree compiles operation by operation
    def ours(q, qd):
        forces = model.controlled(lambda t, q, qd: jnp.asarray(ctrl)).forces(0.0, q, qd)
        return forces, coupling.residual(model.system, 0.0, q)

    forces, residual = ours(jnp.asarray(q), jnp.asarray(qd))
    np.testing.assert_allclose(forces, expected, atol=1e-12)
    np.testing.assert_allclose(residual, d.efc_pos[:1], atol=1e-14)
    np.testing.assert_array_equal(model.actuation[:, 0], [3.0, 0.0, 0.0])
    np.testing.assert_array_equal(model.actuation[:, 1:], 0.0)  # not plain motors: through controlled()

