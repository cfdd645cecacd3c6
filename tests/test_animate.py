"""Animations: the GIF has one frame per drawn time, each frame draws the model's own
kinematics (read back from the artists), a batch overlays its members; and every public name
has an entry in the documentation's API reference."""

import types
from pathlib import Path

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image

import ukjax
from ukjax import models

ROOT = Path(__file__).parent.parent


def _data(line):
    data = np.stack(line.get_data_3d() if hasattr(line, "get_data_3d") else line.get_data(), axis=1)
    return data[np.all(np.isfinite(data), axis=1)]


def _drawn(fig, member=0, members=1):
    """(links, points, gaps) of a batch member as drawn in the figure's last frame: a line per
    part of the links, then the points, then the gaps."""
    lines = fig.axes[0].lines
    per = len(lines) // members
    mine = lines[per * member : per * (member + 1)]
    return [np.concatenate([_data(line) for line in mine[:-2]]), _data(mine[-2]), _data(mine[-1])]


def test_a_tree_with_its_loop(tmp_path):
    """The four-bar file (planar in x–z, written in 3D): drawn in 2D in its plane, with its
    closure's gap and its ground link, its parts in different colours; the last frame's
    points are the bodies' origins at the last time; the title's violation has its unit."""
    model = models.from_mjcf(ROOT / "examples" / "fourbar.xml", keyframe="swinging")
    robot = ukjax.ConstrainedSystem(model.system, model.constraints)
    sol = ukjax.simulate(robot, model.q0, model.qd0, 0.0, 0.5, ts=jnp.linspace(0.0, 0.5, 11))
    path = tmp_path / "fourbar.gif"
    fig = ukjax.animate(robot, sol, path, every=2, violation={"loop closure": ([0, 1, 2], "m")})
    assert Image.open(path).n_frames == 6  # saves 0, 2, …, 10
    assert fig.axes[0].name == "rectilinear" and fig.axes[0].get_ylabel() == "z [m]"
    links, points, gaps = _drawn(fig)
    origins = np.asarray(eqx.filter_jit(lambda tree, q: tree.kinematics(q).positions)(model.system, sol.q[-1]))
    np.testing.assert_allclose(points[: len(origins)], origins[:, [0, 2]], atol=1e-12)
    # the connect's two anchors coincide: the gap is a zero-length segment
    assert gaps.shape == (2, 2) and np.linalg.norm(gaps[0] - gaps[1]) < 1e-8
    # the ground link joins the two fixed pivots, (0, 0) and (0.4, 0)
    assert any(np.allclose(l, [[0.0, 0.0], [0.4, 0.0]], atol=1e-12) for l in np.split(links, len(links) // 2))
    colours = {line.get_color() for line in fig.axes[0].lines[:-2]}
    assert len(colours) == len(fig.axes[0].lines) - 2 >= 3  # the crank's branch, the ground, the loop
    assert "loop closure" in fig.axes[0].get_title() and fig.axes[0].get_title().endswith(" m")


def test_a_planar_chain_batch_overlaid(tmp_path):
    """A batch of three planar chains: three members drawn, each at its own joints."""
    chain = ukjax.models.PlanarChain([1.0, 0.8], [1.0, 1.0], [0.5, 0.4], [0.1, 0.1])
    q0 = jnp.array([[0.1, 0.2], [0.5, -0.3], [1.0, 0.4]])
    sol = ukjax.simulate_batch(chain, q0, jnp.zeros_like(q0), 0.0, 0.3, ts=jnp.linspace(0.0, 0.3, 4))
    fig = ukjax.animate(chain, sol, tmp_path / "chains.gif")
    assert len(fig.axes[0].lines) == 3 * 3 and Image.open(tmp_path / "chains.gif").n_frames == 4
    for member in range(3):
        links, points, gaps = _drawn(fig, member, members=3)
        np.testing.assert_allclose(points, chain.joint_positions(sol.q[member, -1]), atol=1e-12)
        assert links.shape == (4, 2) and gaps.shape == (0, 2)


@pytest.mark.long
def test_a_composed_system_draws_its_parts(tmp_path):
    """The parallel-robot paper's robot: three floating two-link chains composed, bases fixed and
    ends joined by point constraints; every chain's joints and every gap drawn."""
    model = models.parallel_2dof()
    robot = ukjax.ConstrainedSystem(model.system, model.constraints)
    sol = ukjax.simulate(robot, model.q0, model.qd0, 0.0, 0.2, ts=jnp.linspace(0.0, 0.2, 5))
    fig = ukjax.animate(robot, sol, tmp_path / "parallel.gif")
    assert Image.open(tmp_path / "parallel.gif").n_frames == 5
    links, points, gaps = _drawn(fig)
    composed = model.system
    joints = np.concatenate(
        [composed.parts[name].joint_positions(composed.part(sol.q[-1], name)) for name in composed.names]
    )
    np.testing.assert_allclose(points[: len(joints)], joints, atol=1e-12)
    # two ends per segment: a gap per constraint, two links per chain
    assert gaps.shape[0] == 2 * len(model.constraints) and len(links) == 2 * 2 * 3


def test_bad_requests_are_refused(tmp_path):
    system = ukjax.ExplicitSystem(M=lambda t, q: jnp.eye(1), Q=lambda t, q, qd: -q)
    sol = ukjax.simulate(system, jnp.ones(1), jnp.zeros(1), 0.0, 0.1, ts=jnp.linspace(0.0, 0.1, 3))
    with pytest.raises(NotImplementedError, match="does not say how it is drawn"):
        ukjax.animate(system, sol, tmp_path / "x.gif")
    with pytest.raises(ValueError, match=".gif or .mp4"):
        ukjax.animate(system, sol, tmp_path / "x.png")


def _public(module):
    return sorted(n for n in dir(module) if not n.startswith("_") and not isinstance(getattr(module, n), types.ModuleType))


def test_every_public_name_has_a_reference_entry():
    """Each public name of `ukjax` and `ukjax.models` appears as a `:::` entry of the API
    pages and has a docstring (`mkdocs build --strict` in CI renders them)."""
    pages = "\n".join(p.read_text() for p in (ROOT / "docs" / "api").glob("*.md"))
    entries = {line.split()[1] for line in pages.splitlines() if line.startswith("::: ")}
    expected = {f"ukjax.{n}" for n in _public(ukjax)} | {f"ukjax.models.{n}" for n in _public(models)}
    expected |= {f"ukjax.examples.{n}" for n in _public(ukjax.examples) if n != "Path"}
    assert expected - entries == set()
    assert entries - expected == set()
