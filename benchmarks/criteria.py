"""The contact laws at every step, after Le Lidec et al. (arXiv 2304.06372): how far each
simulator's contact forces and velocities at a step's end are from Signorini's condition,
Coulomb's cone and the maximum dissipation principle, on `tumbling.py`'s scene at 2 ms.

For every contact and every step, from the step's forces (ukjax: its impulses over `h`;
MuJoCo: `mj_contactForce` in the contact frame) and the contact points' relative velocity
after the step through the contacts where the step starts (the rows its problem is posed on:
ukjax's contact rows, MuJoCo's contact Jacobians, applied to the velocity the step ends with):

- Signorini: `λ_N |v_N|` (W; a pushing contact neither approaches nor leaves), the same with
  the gap where the step starts in it, `λ_N |v_N + g/h|` (Anitescu and Potra's form: a
  contact that pushes arrives at the surface at the step's end), and the penetration at the
  step's end, `max(−g, 0)` (m);
- Coulomb's cone: `max(‖λ_T‖ − μ λ_N, 0)` (N);
- maximum dissipation: `|λ_T · v_T + μ λ_N ‖v_T‖|` (W; a sliding contact's friction at the
  cone's edge against its slip).

Printed: the largest of each over the steps and contacts of one member (2 s, 1000 steps),
and the 99th percentile over the steps of each step's largest. ukjax steps by `ukjax.step`
(its default implicit forces), MuJoCo by `mj_step` at its defaults (pyramidal cone,
`solref` 0.02).

    python benchmarks/criteria.py [--t1 2] [--member 0]
"""

import argparse

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

import mujoco  # noqa: E402

import ukjax  # noqa: E402
from benchmarks.tumbling import scene, starts  # noqa: E402

H = 2e-3


def laws(normal, tangent, vn, vt, mu, gap, start_gap):
    """Each step's largest violation of each law over its contacts: forces `normal` (k,),
    `tangent` (k, 2), velocities `vn` (k,), `vt` (k, 2), friction `mu` (k,), gaps where the
    step ends and where it starts (k,)."""
    slip = np.linalg.norm(vt, axis=-1)
    return {
        "Signorini (W)": np.max(normal * np.abs(vn), initial=0),
        "with the gap (W)": np.max(normal * np.abs(vn + start_gap / H), initial=0),
        "penetration (m)": float(np.max(-gap, initial=0)) + 0.0,
        "Coulomb (N)": np.max(np.linalg.norm(tangent, axis=-1) - mu * normal, initial=0),
        "dissipation (W)": np.max(np.abs(np.sum(tangent * vt, axis=-1) + mu * normal * slip), initial=0),
    }


def run_ukjax(xml, member, t1):
    model = ukjax.models.from_mjcf(xml)
    system = ukjax.ConstrainedSystem(model.system, model.constraints + model.unilateral)
    q, qd = model.state_from_mujoco(*member)

    @jax.jit
    def one(q, qd):
        # the step's problem is posed on the contacts' rows where it starts: its velocities
        # after the step through those rows, its gaps where it ends
        start = system.constraint_levels(0.0, q, qd)[-1].contacts
        out = ukjax.step(system, 0.0, q, qd, H)
        k = start.size
        vn, vt = start.normal.A @ out.qd, (start.tangent.A @ out.qd).reshape(k, 2)
        end = system.constraint_levels(0.0, out.q, out.qd)[-1].contacts.normal.phi
        return out, vn, vt, end, start.friction, start.normal.phi

    rows = []
    for _ in range(round(t1 / H)):
        out, vn, vt, gap, mu, start_gap = one(q, qd)
        assert bool(out.converged) and bool(out.projected)
        q, qd = out.q, out.qd
        # impulses over the step: its average forces
        rows.append(
            laws(*(np.asarray(x) for x in (out.normal / H, out.tangent / H, vn, vt, mu, gap, start_gap)))
        )
    return rows


def run_mujoco(xml, member, t1):
    mj = mujoco.MjModel.from_xml_string(xml)
    data = mujoco.MjData(mj)
    data.qpos[:], data.qvel[:] = member
    force = np.zeros(6)
    jacobians = np.zeros((2, 3, mj.nv)), np.zeros((3, mj.nv))
    rows = []
    for _ in range(round(t1 / mj.opt.timestep)):
        # the contacts, their forces and Jacobians where the step starts (mj_step's own
        # solve), the velocities the step ends with
        mujoco.mj_forward(mj, data)
        normal, tangent, J, mu, start_gap = [], [], [], [], []
        for i in range(data.ncon):
            contact = data.contact[i]
            mujoco.mj_contactForce(mj, data, i, force)
            relative = np.zeros((3, mj.nv))
            for sign, geom in ((-1, contact.geom1), (1, contact.geom2)):
                mujoco.mj_jac(mj, data, jacobians[0][0], jacobians[1], contact.pos, mj.geom_bodyid[geom])
                relative += sign * jacobians[0][0]
            normal.append(force[0])
            tangent.append(force[1:3].copy())
            J.append(contact.frame.reshape(3, 3) @ relative)
            mu.append(contact.friction[0])
            start_gap.append(contact.dist)
        mujoco.mj_step(mj, data)
        mujoco.mj_kinematics(mj, data)
        mujoco.mj_collision(mj, data)
        local = np.array([j @ data.qvel for j in J]).reshape(-1, 3)
        gap = np.array([data.contact[i].dist for i in range(data.ncon)])
        arrays = (
            np.array(normal),
            np.array(tangent).reshape(-1, 2),
            local[:, 0],
            local[:, 1:],
            np.array(mu),
            gap,
            np.array(start_gap),
        )
        rows.append(laws(*arrays))
    return rows


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--t1", type=float, default=2.0)
    parser.add_argument("--member", type=int, default=0)
    args = parser.parse_args()
    xml = scene()
    member = starts(mujoco.MjModel.from_xml_string(xml), args.member + 1)[args.member]
    results = {
        "ukjax (time-stepping, 2 ms)": run_ukjax(xml, member, args.t1),
        "MuJoCo (defaults, 2 ms)": run_mujoco(xml, member, args.t1),
    }
    names = list(next(iter(results.values()))[0])
    print(
        f"tumbling.py's scene, member {args.member}, {args.t1:g} s at 2 ms: each law's largest violation "
        "over the steps (and the 99th percentile of each step's largest)"
    )
    print(f"{'':28s}" + "".join(f"{name:>26s}" for name in names))
    for label, rows in results.items():
        cells = []
        for name in names:
            values = np.array([row[name] for row in rows])
            cells.append(f"{np.max(values):12.1e} ({np.percentile(values, 99):8.1e})")
        print(f"{label:28s}" + "".join(f"{cell:>26s}" for cell in cells))


if __name__ == "__main__":
    main()
