"""The compiled tree kernel (`ukjax/_robots/kernels.cc`) against the library's XLA route, which
the MuJoCo, Pinocchio and KKT tests check, on a tree with every joint kind and loops."""

import os
import subprocess
import sys
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ukjax
from ukjax import models
from ukjax._backends import _tree_kernel as kernels
from ukjax._unilateral import OPEN, SLIDING, STICKING, Modes

pytestmark = pytest.mark.xdist_group("kernels")

# Every joint kind (a free body carrying a ball-jointed one; hinges with a reference angle,
# armature, damping and a spring; a slide), gravity off the axes, a loop between two branches,
# a point of the ball-jointed body pinned in space, and two actuators.
EVERY_KIND = """<mujoco model="every_kind">
  <option gravity="0.3 -0.2 -9.81"><flag contact="disable"/></option>
  <worldbody>
    <body name="float" pos="0 0 1" quat="0.9 0.1 0.2 0.1">
      <joint name="free" type="free" damping="0.1" armature="0.01"/>
      <inertial pos="0.01 0.02 0" mass="1.5" fullinertia="0.03 0.02 0.025 0.001 -0.002 0.003"/>
      <body name="socket" pos="0.2 0 0" euler="10 20 0">
        <joint name="ball" type="ball" pos="0.01 0 0" damping="0.2" armature="0.03"/>
        <inertial pos="0.1 0 0" quat="0.8 0.2 0.1 0.3" mass="0.7" diaginertia="0.02 0.015 0.01"/>
      </body>
    </body>
    <body name="arm" pos="0.1 0.2 0.3" quat="0.7 0 0.7 0">
      <joint name="h1" axis="0 0 1" armature="0.02" damping="0.3" ref="0.2"/>
      <inertial pos="0 0.02 0.1" mass="2.1" diaginertia="0.03 0.02 0.025"/>
      <body name="fore" pos="0 0.05 0.2">
        <joint name="h2" axis="0 1 0.2" pos="0 0 0.02" stiffness="3" springref="0.2"/>
        <joint name="s1" type="slide" axis="1 0.1 0" armature="0.1" stiffness="2" damping="0.4"/>
        <inertial pos="0.05 0.01 -0.02" mass="1.1" diaginertia="0.01 0.012 0.008"/>
      </body>
    </body>
    <body name="link" pos="0.4 0.2 0.3">
      <joint name="h3" axis="1 0 0"/>
      <inertial pos="0 0 0.05" mass="0.8" diaginertia="0.004 0.005 0.003"/>
    </body>
  </worldbody>
  <equality>
    <connect body1="fore" body2="link" anchor="0.1 0 0"/>
    <connect body1="socket" body2="world" anchor="0.05 0 0"/>
  </equality>
  <actuator>
    <motor joint="h1" gear="2"/>
    <position joint="s1" kp="5"/>
  </actuator>
</mujoco>"""


# and with a fixed tendon across two branches (its armature couples them: M factored densely)
# and a joint equality (rows the kernel is handed)
TENDON = EVERY_KIND.replace(
    "  </equality>",
    """    <joint joint1="h3" joint2="h2" polycoef="0.1 0.5 0.2 0 0"/>
  </equality>
  <tendon>
    <fixed name="across" stiffness="0.5" damping="0.05" armature="0.3" springlength="-0.1 0.1">
      <joint joint="h1" coef="1"/><joint joint="h3" coef="-0.5"/><joint joint="s1" coef="0.2"/>
    </fixed>
  </tendon>""",
)


def _driven(xml):
    with warnings.catch_warnings():
        # the tendon's armature across branches named; the start projected onto the loops
        warnings.simplefilter("ignore")
        model = models.from_mjcf(xml)
    # controls that depend on time and state: the actuators' forces are evaluated in XLA
    driven = model.controlled(lambda t, q, qd: jnp.stack([jnp.sin(3 * t) + q[7], 0.1 - qd[9]]))
    return ukjax.ConstrainedSystem(driven, model.constraints), model.q0


@pytest.fixture(scope="module")
def loops():
    system, q0 = _driven(EVERY_KIND)
    if kernels.covered(system) is None or not kernels.can_run(system, jnp.float64, jax.default_backend()):
        pytest.skip("no compiler builds the kernel for this device (the XLA route runs instead)")
    return system, q0


def _bound(system):
    """`system` bound to the tree kernel (`ukjax.TreeKernel`): an unbound one is pure XLA."""
    return ukjax.TreeKernel().bind(system, jnp.float64, jax.default_backend())


_CHUNKS = "ukjax_tree_32" if jax.default_backend() == "cpu" else "ukjax_tree_1"


def _states(q0, members, seed):
    rng = np.random.default_rng(seed)
    # quaternions off unit length too: the norm rows' stabilization acts
    q = np.asarray(q0)[None] + 0.3 * rng.standard_normal((members, q0.shape[0]))
    return jnp.asarray(q), jnp.asarray(rng.standard_normal(q.shape))


@eqx.filter_jit
def _both_routes(system, q, qd):
    """The kernel's solve (the batch mapped through its batching rule) and the XLA route's."""
    kernel = jax.vmap(lambda q, qd: kernels.solve(_bound(system), 0.0, q, qd))(q, qd)
    return kernel, jax.vmap(lambda q, qd: system.solve(0.0, q, qd))(q, qd)


def _relative(x, y):
    return float(jnp.max(jnp.abs(x - y)) / jnp.max(jnp.abs(y)))


def test_kernel_matches_the_xla_route(loops):
    system, q0 = loops
    q, qd = _states(q0, 45, 0)  # 45: a chunk of 32 lanes, one of 8, and 5 padded to 8
    force = None  # the first system's largest constraint force
    tendon = _driven(TENDON)[0]
    # with the tendon and the coupling under scalar Baumgarte gains (the kernel stabilizes the
    # connect rows, XLA the coupling's); under gains given per row (every row stabilized in XLA
    # and handed over). The bare tree runs on the kernel in `test_cassie.py`, against MuJoCo.
    scalar = ukjax.ConstrainedSystem(tendon.system, tendon.constraints, ukjax.Baumgarte(3.0, 2.0))
    per_row = ukjax.ConstrainedSystem(
        system.system, system.constraints, ukjax.Baumgarte(jnp.linspace(1.0, 4.0, 6), jnp.full(6, 2.0))
    )
    for each in (system, scalar, per_row):
        assert kernels.covered(each) is not None
        # the kernel runs: on a CPU its build of chunks, on a GPU the GPU's
        assert _CHUNKS in _both_routes.lower(each, q, qd).as_text()
        kernel, xla = _both_routes(each, q, qd)
        assert _relative(kernel.acceleration, xla.acceleration) < 1e-11
        force = float(jnp.max(jnp.abs(xla.constraint_force))) if force is None else force
        assert float(jnp.max(jnp.abs(kernel.constraint_force - xla.constraint_force))) < 1e-11 * force
        assert bool(jnp.all(kernel.mass_ok)) and bool(jnp.all(xla.mass_ok))
        assert float(jnp.max(kernel.inconsistency)) < 1e-12
    # the build of one lane on the whole batch: the members one by one in the work space's
    # layout on a GPU (tiles of 32 members, the last one part full), the GPU's code compiled for
    # the CPU; and with a work space of one tile, the batch in slices of a tile
    parts = kernels.covered(system)
    outside = jax.vmap(lambda q, qd: kernels._outside(parts, 0.0, q, qd))(q, qd)
    xla = _both_routes(system, q, qd)[1]
    for space in (kernels.SPACE, 1):
        acceleration, force, _ = kernels._call(parts, q, qd, outside, lanes=1, space=space)
        assert _relative(acceleration, xla.acceleration) < 1e-11
        largest = float(jnp.max(jnp.abs(xla.constraint_force)))
        assert float(jnp.max(jnp.abs(force - xla.constraint_force))) < 1e-11 * largest
    # one state: the kernel built for one lane
    single = jax.jit(lambda q, qd: (kernels.solve(_bound(system), 0.0, q, qd), system.solve(0.0, q, qd)))
    assert "ukjax_tree_1" in single.lower(q[0], qd[0]).as_text()
    kernel, xla = single(q[0], qd[0])
    assert _relative(kernel.acceleration, xla.acceleration) < 1e-11
    # a body without mass or inertia on its own hinge: M singular in every member, both say so
    tree = system.system.system
    massless = eqx.tree_at(
        lambda s: (s.system.system.masses, s.system.system.inertias),
        system,
        (tree.masses.at[-1].set(0.0), tree.inertias.at[-1].set(0.0)),
    )
    kernel, xla = _both_routes(massless, q, qd)
    assert not bool(jnp.any(kernel.mass_ok)) and not bool(jnp.any(xla.mass_ok))


def test_kernel_route_is_differentiated_by_the_xla_route(loops):
    system, q0 = loops
    q, qd = _states(q0, 8, 1)

    def accelerations(masses):
        heavier = eqx.tree_at(lambda s: s.system.system.masses, system, masses)
        return jax.vmap(lambda q, qd: kernels.solve(_bound(heavier), 0.0, q, qd).acceleration)(q, qd)

    masses = system.system.system.masses
    direction = jnp.linspace(0.5, 1.5, masses.shape[0])
    _, tangent = jax.jit(lambda m, v: jax.jvp(accelerations, (m,), (v,)))(masses, direction)
    h = 1e-6
    finite = (accelerations(masses + h * direction) - accelerations(masses - h * direction)) / (2 * h)
    assert _relative(tangent, finite) < 1e-6
    weights = jnp.asarray(np.random.default_rng(2).standard_normal(tangent.shape))
    gradient = jax.jit(jax.grad(lambda m: jnp.sum(weights * accelerations(m))))(masses)
    assert abs(float(gradient @ direction - jnp.sum(weights * tangent))) < 1e-9 * float(
        jnp.sum(jnp.abs(weights * tangent))
    )


def test_kernel_dynamics_match_the_xla_route(loops):
    """`M` and `Q` alone (what a system with contacts takes from the kernel), with the
    kinematics and motion the rows are built from (the same call): the tree with the tendon
    across branches, one state and a batch (its lanes padded), a batch whose members have
    masses of their own (the XLA route), and derivatives in both modes, in the masses and
    along q, against central differences."""
    if jax.default_backend() != "cpu":
        pytest.skip("M and Q alone are built for a CPU")
    tree = _driven(TENDON)[0].system.system
    q0 = loops[1]
    q, qd = _states(q0, 40, 4)
    masses = tree.masses * jnp.linspace(0.5, 1.5, 40)[:, None]
    with_masses = lambda m: eqx.tree_at(lambda t: t.masses, tree, m)  # noqa: E731

    def routed(tree, q, qd):  # as the library reaches them: the kernel where it runs
        tree = _bound(tree)
        kin, motion = tree._motion(q, qd)
        return (*tree.dynamics(0.0, q, qd)[:2], kin.rotations, kin.positions, kin.twists, *motion)

    own = jax.vmap(lambda m, q, qd: routed(with_masses(m), q, qd))

    def every(q, qd, masses):
        return (
            jax.vmap(lambda q, qd: routed(tree, q, qd))(q, qd),  # the kernel, chunks of lanes
            routed(tree, q[0], qd[0]),  # the kernel, one lane
            own(masses, q, qd),  # members with masses of their own: the XLA route
            jax.vmap(lambda m, q, qd: kernels._xla_dynamics(with_masses(m), q, qd))(masses, q, qd),
            jax.vmap(lambda q, qd: kernels._xla_dynamics(tree, q, qd))(q, qd),
        )

    # one program for every route (each compiled apart, the test took twice as long)
    text = jax.jit(every).lower(q, qd, masses).as_text()
    assert "ukjax_tree_dynamics_32" in text and "ukjax_tree_dynamics_1" in text
    assert "ukjax_tree_dynamics" not in jax.jit(own).lower(masses, q, qd).as_text()
    chunks, one, mine, mine_xla, xla = jax.jit(every)(q, qd, masses)
    # M, Q, then the bodies' frames, the twists, the bodies' motion
    for tolerance, *values in zip((1e-13, 1e-12, 1e-14, 1e-14, 1e-13, 1e-13, 1e-12), chunks, one, mine, mine_xla, xla):
        assert _relative(values[0], values[4]) < tolerance
        assert _relative(values[1], values[4][0]) < tolerance
        assert _relative(values[2], values[3]) < 1e-13

    def summed(p):  # the masses, and a step s along q: q₀ + s (1, …, 1)
        edited = _bound(eqx.tree_at(lambda t: t.masses, tree, p[:-1]))
        at_q = q[0] + p[-1]
        M, Q = edited.dynamics(0.0, at_q, qd[0])[:2]
        kin, (V, A) = edited._motion(at_q, qd[0])
        return jnp.sum(M * M) + jnp.sum(Q * jnp.linspace(-1.0, 1.0, Q.shape[0])) + jnp.sum(kin.twists * V[0, 0]) + jnp.sum(A**2)

    start = jnp.append(tree.masses, 0.0)
    direction = jnp.linspace(0.5, 1.5, start.shape[0])
    h = 1e-6
    at = jax.jit(summed)  # one program for both points (op by op, each operation compiles apart)
    finite = (at(start + h * direction) - at(start - h * direction)) / (2 * h)
    _, tangent = jax.jit(lambda m, v: jax.jvp(summed, (m,), (v,)))(start, direction)
    gradient = jax.jit(jax.grad(summed))(start)
    assert abs(float(tangent) - float(finite)) < 1e-6 * abs(float(finite))
    assert abs(float(gradient @ direction) - float(finite)) < 1e-6 * abs(float(finite))


def _with_contacts(system):
    """The tree with its loops under joint limits and spheres on planes (on the free body, the
    ball-jointed one, the forearm and one fixed in the world, which no coordinate moves)."""
    driven = system.system
    limits = ukjax.models.JointLimits(driven, ["h1", "s1", "h3"], [-0.3, -0.1, -1.0], [0.4, 0.2, 1.0])
    planes = ukjax.models.PlaneContacts(
        driven,
        ["float", "socket", "fore", "world"],
        [[0.05, -0.02, 0.1], [0.1, 0.0, 0.0], [0.02, 0.01, -0.03], [0.3, 0.1, 0.0]],
        [0.03, 0.0, 0.02, 0.05],
        [[0.0, 0.0, 1.0], [0.1, 0.2, 1.0], [1.0, 0.0, 0.3], [0.0, 0.0, 1.0]],
        [0.0, 0.3, -0.2, -0.1],
        [0.8, 0.5, 0.6, 0.4],
    )
    return ukjax.ConstrainedSystem(driven, system.constraints + (limits, planes))


def _modes(k, seed):
    """Every mode among `k` contacts: the first limits closed and open, the spheres sticking,
    sliding (with the direction turned by its slip where it slips) and open."""
    rng = np.random.default_rng(seed)
    mode = np.full(k, OPEN)
    mode[[0, 4]] = STICKING  # a lower and an upper limit closed (no friction: they stick)
    mode[[-4, -2]] = STICKING
    mode[-3] = SLIDING
    direction = rng.standard_normal((k, 2))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    return Modes(jnp.asarray(mode, jnp.int32), jnp.asarray(direction), jnp.asarray(rng.uniform(0.5, 2.0, k)))


def test_contact_dynamics_match_the_xla_route(loops):
    """The tree's solve with its limits and plane contacts in given modes as one call
    (`kernels.in_modes`: rows, sliding directions and the contact solve in C++) against the
    XLA route (`system.dynamics` and `solve_modes`), at random states, one by one and mapped
    (one call for the batch, on a GPU a thread a member), and in the GPU's layout on a CPU (the
    members in tiles of 32, and in slices of one tile); the forward-mode derivative (the XLA
    route's) against central differences of the kernel."""
    system = _with_contacts(loops[0])
    assert kernels.contacts_covered(system) is not None
    q, qd = _states(loops[1], 40, 5)  # 40: a tile of 32 and one part full
    k = 3 * 2 + 4
    modes = _modes(k, 6)
    # a low `rest` turns a sliding direction to its slip, a high one keeps the one given
    rests = jnp.tile(jnp.array([1e-5, 1e3]), 20)

    def both(q, qd, rest):
        arguments = (system, 0.2, q, qd, modes, rest)
        return kernels._in_modes(_bound(system), *arguments[1:]), kernels._xla_in_modes(*arguments)

    def tiled(q, qd, rest):
        inputs = jax.vmap(lambda q, qd, r: kernels._contact_inputs(system, 0.2, q, qd, modes, r))(q, qd, rest)
        bound = _bound(system)
        return [kernels._contacts_call(bound, q, qd, inputs, tiles=1, space=space) for space in (kernels.SPACE, 1)]

    # one program for every route (each compiled apart, the test took twice as long)
    program = jax.jit(lambda q, qd, r: (both(q[0], qd[0], r[0]), jax.vmap(both)(q, qd, r), tiled(q, qd, r)))
    program = program.lower(q, qd, rests)
    assert "ukjax_tree_contacts" in program.as_text()
    one, mapped, layouts = jax.tree.map(np.asarray, program.compile()(q, qd, rests))
    names = ["q̈", "constraint force", "normal", "tangent", "rate", "health", "gap", "slip", "friction"]
    # the GPU's layout, its results in `_in_modes`' order (the health before the gaps and slips)
    in_order = [(*x[:5], x[7], x[5], x[6]) for x in layouts]
    for results in [one, mapped] + [(x, mapped[1]) for x in in_order]:
        for name, kernel, reference in zip(names, *(jax.tree.leaves(x) for x in results)):
            scale = max(1.0, np.max(np.abs(reference)))
            np.testing.assert_allclose(kernel, reference, rtol=0, atol=1e-11 * scale, err_msg=name)
    assert np.all(mapped[0][5][:, 1:] == 1.0)  # positive definite, solvable
    # a contact sliding, another sticking, a limit closed
    assert np.all(mapped[0][2][:, [0, -3, -2]] != 0)

    summed = _contact_summary(system, q[0], qd[0], modes)

    @jax.jit
    def derivatives():
        h = 1e-6
        return (summed(h) - summed(-h)) / (2 * h), jax.jvp(summed, (0.0,), (1.0,))[1]

    finite, tangent = derivatives()
    assert abs(float(tangent) - float(finite)) < 1e-6 * abs(float(finite))


def _contact_summary(system, q, qd, modes):
    """A scalar of the contact dynamics on the kernel along a step `s` in q and the masses."""
    weights = jnp.asarray(np.random.default_rng(7).standard_normal(q.shape[0]))

    def summed(s):
        heavier = eqx.tree_at(lambda x: x.system.system.masses, system, system.system.system.masses * (1 + s))
        x, force, normal, tangent, *_ = kernels._in_modes(_bound(heavier), 0.2, q + s, qd, modes, 1e-5)
        return jnp.sum(weights * x) + jnp.sum(normal**2) + jnp.sum(tangent)

    return summed


@pytest.mark.slow
def test_contact_dynamics_reverse_mode_against_differences(loops):
    """The kernel's contact dynamics in reverse mode (the XLA route's, transposed) against
    central differences. Out of the default suite: its program compiles in about 30 s on 2
    cores (`pytest -m slow` runs it)."""
    if jax.default_backend() != "cpu":
        pytest.skip("the contact dynamics are built for a CPU")
    system = _with_contacts(loops[0])
    q, qd = _states(loops[1], 1, 5)
    summed = _contact_summary(system, q[0], qd[0], _modes(10, 6))

    @jax.jit
    def derivatives():
        h = 1e-6
        return (summed(h) - summed(-h)) / (2 * h), jax.grad(summed)(0.0)

    finite, gradient = derivatives()
    assert abs(float(gradient) - float(finite)) < 1e-6 * abs(float(finite))


@pytest.mark.filterwarnings("ignore:The simulation starts off its constraints")  # random states
def test_a_failed_member_leaves_the_batch_on_the_kernel(loops):
    system, q0 = loops
    q, qd = _states(q0, 3, 3)
    q = q.at[1, 0].set(jnp.nan)
    ts = jnp.linspace(0.0, 0.05, 3)
    sol = ukjax.simulate_batch(system, q, qd, 0.0, 0.05, ts=ts, dt0=1e-3, adaptive=False)
    assert sol.status.tolist() == [ukjax.Status.SUCCESS, ukjax.Status.NONFINITE_STATE, ukjax.Status.SUCCESS]
    # each good member as a single run (on the kernel built for one lane)
    for member in (0, 2):
        alone = ukjax.simulate(system, q[member], qd[member], 0.0, 0.05, ts=ts, dt0=1e-3, adaptive=False)
        assert _relative(sol.q[member], alone.q) < 1e-12


def test_without_a_compiler_the_xla_route_runs_and_says_so(tmp_path):
    # a fresh process: the build is tried once per process, and its cache is the temporary one
    script = """
import warnings, jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)
import ukjax
from ukjax import models
from ukjax._backends import _tree_kernel as kernels
tree = models.from_mjcf('''<mujoco><worldbody><body><joint type="hinge" axis="0 1 0"/>
<geom type="sphere" size="0.1" pos="0 0 -1" mass="1"/></body></worldbody></mujoco>''').system
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    auto = ukjax.AutoBackend()
    mapped = jax.vmap(lambda q: kernels.solve(auto.bind(tree, q.dtype, "cpu"), 0.0, q, q).acceleration)
    text = jax.jit(mapped).lower(jnp.ones((4, 1))).as_text()
    contacts = auto.bind(ukjax.ConstrainedSystem(tree, [ukjax.Unilateral(lambda t, q: q[0] + 1)]), jnp.float64, "cpu")
    text += jax.jit(lambda q: contacts.solve(0.0, q, q).acceleration).lower(jnp.ones(1)).as_text()
    picked = type(auto.select(contacts, jnp.float64, "cpu")).__name__
print("kernel" if "ukjax_" in text else "xla", picked, *(str(w.message) for w in caught), sep="\\n")
"""
    env = dict(os.environ, CXX=str(tmp_path / "no-such-compiler"), XDG_CACHE_HOME=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    route, picked, *messages = out.stdout.splitlines()
    assert route == "xla" and picked == "XLABackend"
    assert any("could not build its kernels" in m and "no-such-compiler" in m for m in messages)
