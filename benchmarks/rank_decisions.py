"""Rank decisions near MuJoCo's `qpos0` on Cassie, every route against a 40-digit solve.

Off the keyframe Cassie's loop rows are exactly dependent (each plantar-rod loop is planar),
so the acceleration depends on where a solve cuts. For states about `qpos0` (joints turned by
`0.03 k` rad for k = 0, 1, 2, then by 0.3 rad; random rates), this takes the library's
`M, Q, A, b`, the 40-digit SVD of `B = A L⁻ᵀ` from those same doubles, and prints the gap
between kept singular values and round-off, then each route's largest difference from the
reference acceleration (every cut inside the gap gives the same) relative to its largest
entry: the library's XLA route (`uk_solve`, the SVD's cut-off), its compiled tree kernel (the
route `simulate` takes for a tree on a CPU; left out without a C++ compiler), and the solve
that inverts the round-off too (no cut).

    python benchmarks/rank_decisions.py [--states 6] [--hinges]

`--hinges`: the prototype's Cassie of the speed issue (pelvis fixed, each ball joint written
as three hinges).
"""

import argparse
import re
import tempfile
import warnings
from pathlib import Path

import equinox as eqx
import jax
import mujoco
import numpy as np

import ukjax
from benchmarks.references import high_precision_acceleration
from ukjax import models
from ukjax.cli.bench import CASSIE
from ukjax._core import uk_solve
from ukjax._backends import _tree_kernel as kernels


def cassie_file(hinges: bool) -> str:
    """The file's Cassie, or with `hinges` the prototype's, written to a temporary file."""
    if not hinges:
        return str(CASSIE)
    axes = (("x", "1 0 0"), ("y", "0 1 0"), ("z", "0 0 1"))
    xml = re.sub(
        r'<joint name="([\w-]+)" type="ball" damping="0.01"/>',
        lambda m: "".join(
            f'<joint name="{m[1]}-{a}" type="hinge" axis="{v}" damping="0.01"/>' for a, v in axes
        ),
        CASSIE.read_text().replace("<freejoint/>", ""),
    )
    path = Path(tempfile.mkdtemp()) / "cassie.xml"
    path.write_text(re.sub(r"<keyframe>.*?</keyframe>", "", xml, flags=re.DOTALL))
    return str(path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--states", type=int, default=6)
    parser.add_argument("--hinges", action="store_true")
    args = parser.parse_args()
    jax.config.update("jax_enable_x64", True)
    path = cassie_file(args.hinges)
    mjm = mujoco.MjModel.from_xml_path(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # limits named
        model = models.from_mjcf(path)
    system = ukjax.ConstrainedSystem(model.system, model.constraints)
    dynamics = eqx.filter_jit(lambda s, q, qd: s.dynamics(0.0, q, qd))
    routes = {"XLA route": jax.jit(lambda q, qd, M, Q, A, b: uk_solve(M, Q, A, b, None, "svd"))}
    if kernels.can_run(system, jax.numpy.float64, "cpu"):
        bound = ukjax.TreeKernel().bind(system, jax.numpy.float64, "cpu")
        routes["tree kernel"] = jax.jit(lambda q, qd, *_: kernels.solve(bound, 0.0, q, qd))
    rng = np.random.default_rng(1)
    print(
        f"Cassie{' with hinges' if args.hinges else ''}, n {system.num_coordinates}, "
        "largest |q̈ − reference| / |reference|:"
    )
    for k in range(args.states):
        qpos = mjm.qpos0 + (0.3 if k >= 3 else 0.03 * k) * rng.standard_normal(mjm.nq)
        for j in range(mjm.njnt):
            a = int(mjm.jnt_qposadr[j]) + (3 if mjm.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE else 0)
            if mjm.jnt_type[j] in (mujoco.mjtJoint.mjJNT_FREE, mujoco.mjtJoint.mjJNT_BALL):
                qpos[a : a + 4] /= np.linalg.norm(qpos[a : a + 4])
        q, qd = model.state_from_mujoco(qpos, 0.5 * rng.standard_normal(mjm.nv))
        d = dynamics(system, q, qd)
        (level,) = d.levels
        sigma, kept, exact, uncut = high_precision_acceleration(d.M, d.Q, level.rows.A, level.rows.b)
        smallest_kept, largest_cut = sigma[kept].min(), sigma[~kept].max(initial=0.0)
        scale = np.max(np.abs(exact))
        errors = {
            name: np.max(np.abs(np.asarray(route(q, qd, d.M, d.Q, level.rows.A, level.rows.b).acceleration) - exact))
            / scale
            for name, route in routes.items()
        }
        errors["no cut"] = np.max(np.abs(uncut - exact)) / scale
        print(
            f"  state {k}: p {level.rows.A.shape[0]}, kept σ ≥ {smallest_kept:.1e}, cut σ ≤ {largest_cut:.1e} "
            "(of the largest); " + ", ".join(f"{name} {error:.1e}" for name, error in errors.items())
        )


if __name__ == "__main__":
    main()
