"""simulate_batch: the same answers as vmap over simulate, on one device (whole or in chunks)
and sharded over four (in a process of four CPU devices), and split across two processes."""

import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ukjax
from ukjax import models

FIXED = dict(solver=ukjax.RK4(), adaptive=False, dt0=0.01)


def batch_case():
    m = models.coordinated_robots()
    system = ukjax.ConstrainedSystem(m.system, m.constraints)
    q0 = jnp.broadcast_to(m.q0, (7, 5))
    # Velocities along the constraints (the chain's joint-5 tip fixed), one member NaN.
    directions = 0.3 * jnp.sin(jnp.arange(5.0) + jnp.arange(7.0)[:, None])
    qd0 = jax.jit(jax.vmap(lambda v: system.project(0.0, m.q0, v).qd))(directions)
    return system, q0, qd0.at[3, 0].set(jnp.nan)


def vmapped(system, q0, qd0, axes=None, t1=1.0, **kwargs):
    run = lambda s, a, b: ukjax.simulate(s, a, b, 0.0, t1, throw=False, **kwargs)
    return jax.vmap(run, in_axes=(axes, 0, 0))(system, q0, qd0)


def test_bad_input():
    system, q0, qd0 = batch_case()
    with pytest.raises(ValueError, match="batch, n"):
        ukjax.simulate_batch(system, q0[0], qd0[0], 0.0, 1.0)
    with pytest.raises(TypeError, match="throw"):
        ukjax.simulate_batch(system, q0, qd0, 0.0, 1.0, throw=True)
    with pytest.raises(ValueError, match="system_axes"):
        ukjax.simulate_batch(system, q0, qd0, 0.0, 1.0, system_axes=(0, 0))


SHARDED = textwrap.dedent(
    """
    import jax, jax.numpy as jnp, numpy as np, equinox as eqx
    jax.config.update("jax_enable_x64", True)
    import ukjax
    from tests.test_batch import FIXED, batch_case, vmapped
    assert len(jax.devices()) == 4
    system, q0, qd0 = batch_case()
    # The masses vary across the batch; members 1 and 2 start alike, so they differ by their
    # masses alone. One program per route: the vmapped reference, one device, all four.
    qd0 = qd0.at[2].set(qd0[1])
    masses = jnp.linspace(1.0, 1.5, 7)[:, None] * system.system.masses
    varied = eqx.tree_at(lambda s: s.system.masses, system, masses)
    axes = eqx.tree_at(lambda s: s.system.masses, jax.tree.map(lambda _: None, system), 0, is_leaf=lambda x: x is None)
    ts = jnp.linspace(0.0, 1.0, 6)
    ref = vmapped(varied, q0, qd0, axes, ts=ts, **FIXED)
    assert list(ref.status) == [0, 0, 0, ukjax.Status.NONFINITE_STATE, 0, 0, 0]
    assert np.max(np.abs(ref.phi[ref.success])) < 1e-5  # RK4 drift at h = 0.01, no stabilization
    assert float(jnp.max(jnp.abs(ref.q[1] - ref.q[2]))) > 1e-3  # the masses did matter
    for devices in (jax.devices()[:1], None):  # one device; 7 members over all 4
        sol = ukjax.simulate_batch(varied, q0, qd0, 0.0, 1.0, ts=ts, system_axes=axes, devices=devices, **FIXED)
        np.testing.assert_array_equal(sol.status, ref.status)
        np.testing.assert_allclose(sol.q, ref.q, rtol=0, atol=1e-12)
        np.testing.assert_allclose(sol.phi, ref.phi, rtol=0, atol=1e-12)
    # one member a device (run without vmap): the first four members over the four devices
    first = eqx.tree_at(lambda s: s.system.masses, system, masses[:4])
    sol = ukjax.simulate_batch(first, q0[:4], qd0[:4], 0.0, 1.0, ts=ts, system_axes=axes, **FIXED)
    np.testing.assert_array_equal(sol.status, ref.status[:4])
    np.testing.assert_allclose(sol.q, ref.q[:4], rtol=0, atol=1e-12)
    # one device taking its members two at a time (as a large batch on CPU is taken in chunks
    # that fit the cache): 7 members padded to 8, the masses mapped with their members
    ukjax._batch._CHUNK_BYTES = 2 * 8 * 5 * 5
    assert ukjax._batch._chunk(7, 5, q0.dtype, "cpu") == 2
    sol = ukjax.simulate_batch(varied, q0, qd0, 0.0, 1.0, ts=ts, system_axes=axes, devices=jax.devices()[:1], **FIXED)
    np.testing.assert_array_equal(sol.status, ref.status)
    np.testing.assert_allclose(sol.q, ref.q, rtol=0, atol=1e-12)
    print("sharded ok")
    """
)


@pytest.mark.long
def test_sharded_over_four_cpu_devices_equals_vmap():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, JAX_NUM_CPU_DEVICES="4", JAX_PLATFORMS="cpu", PYTHONPATH=root)
    result = subprocess.run(
        [sys.executable, "-c", SHARDED], env=env, cwd=root, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "sharded ok" in result.stdout


# Two processes on this machine, one CPU device each, joined by jax.distributed (the README's
# recipe for several machines): each sees both devices, and the batch is split across them.
DISTRIBUTED = textwrap.dedent(
    """
    import json
    import sys
    import jax
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=sys.argv[2], num_processes=2, process_id=int(sys.argv[1]))
    import jax.numpy as jnp
    import numpy as np
    import ukjax
    from ukjax import models

    m = models.coordinated_robots()
    system = ukjax.ConstrainedSystem(m.system, m.constraints)
    q0 = jnp.broadcast_to(m.q0, (6, 5))
    qd0 = jnp.array(json.loads(sys.argv[3]))  # the parent's, projected onto the constraints
    fixed = dict(solver=ukjax.RK4(), adaptive=False, dt0=0.01)
    assert len(jax.devices()) == 2 and len(jax.local_devices()) == 1
    sol = ukjax.simulate_batch(system, q0, qd0, 0.0, 0.5, **fixed)
    assert {shard.device for shard in sol.q.addressable_shards} == set(jax.local_devices())
    local = np.concatenate([np.asarray(s.data) for s in sol.q.addressable_shards])
    rows = np.concatenate([np.arange(6)[s.index[0]] for s in sol.q.addressable_shards])
    print(json.dumps({"rows": rows.tolist(), "q": local.tolist()}))
    """
)


@pytest.mark.long
def test_two_processes_under_jax_distributed():
    import socket

    with socket.socket() as s:
        s.bind(("localhost", 0))
        address = f"localhost:{s.getsockname()[1]}"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, JAX_NUM_CPU_DEVICES="1", JAX_PLATFORMS="cpu", PYTHONPATH=root)
    m = models.coordinated_robots()
    system = ukjax.ConstrainedSystem(m.system, m.constraints)
    directions = 0.3 * jnp.sin(jnp.arange(5.0) + jnp.arange(6.0)[:, None])
    qd0 = jax.jit(jax.vmap(lambda v: system.project(0.0, m.q0, v).qd))(directions)
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", DISTRIBUTED, str(i), address, json.dumps(np.asarray(qd0).tolist())],
            env=env,
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    # The reference, computed here while the two processes run (each held its members only).
    ref = vmapped(system, jnp.broadcast_to(m.q0, (6, 5)), qd0, **FIXED, t1=0.5).q
    outputs = [p.communicate(timeout=600) for p in processes]
    for i, (p, (out, err)) in enumerate(zip(processes, outputs)):
        assert p.returncode == 0, err[-3000:]
        held = json.loads(out.strip().splitlines()[-1])
        assert held["rows"] == [3 * i, 3 * i + 1, 3 * i + 2]
        np.testing.assert_allclose(held["q"], ref[np.array(held["rows"])], rtol=0, atol=1e-12)


@pytest.mark.long
def test_large_batch_with_degenerate_rows():
    """A spherical pendulum held in a plane, written with a zero row (a planar loop written in
    3D), a duplicated row and a nearly dependent one: a batch of 4096 on one device moves as
    the plain planar pendulum (before the fix every member of a batch ≥ 700 went NaN)."""
    gravity = jnp.array([0.0, -9.81, 0.0])
    point = ukjax.ExplicitSystem(lambda t, q: jnp.eye(3), lambda t, q, qd: gravity)

    def rows(t, q):
        rod, plane = q @ q - 1.0, q[2]
        return jnp.stack([rod, plane, 0.0 * q[0], rod, rod + 1e-6 * plane])

    degenerate = ukjax.ConstrainedSystem(point, ukjax.Holonomic(rows))
    plain = ukjax.ConstrainedSystem(point, ukjax.Holonomic(lambda t, q: jnp.stack([q @ q - 1.0, q[2]])))
    angles = jnp.linspace(0.1, 3.0, 4096)
    q0 = jnp.stack([jnp.sin(angles), -jnp.cos(angles), 0 * angles], axis=1)
    run = dict(ts=jnp.array([0.0, 0.2]), solver=ukjax.RK4(), adaptive=False, dt0=0.01)
    sol = ukjax.simulate_batch(degenerate, q0, jnp.zeros_like(q0), 0.0, 0.2, devices=jax.devices()[:1], **run)
    ref = jax.jit(jax.vmap(lambda q: ukjax.simulate(plain, q, jnp.zeros(3), 0.0, 0.2, **run).q))(q0[::64])
    assert np.all(np.asarray(sol.status) == ukjax.Status.SUCCESS)
    np.testing.assert_allclose(sol.q[::64], ref, rtol=0, atol=1e-12)
