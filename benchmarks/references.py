"""Independent references, shared by the tests and the benchmarks: the closed forms the source
papers print, transcribed as printed, the same mechanisms built in Pinocchio, closed chains
integrated on MuJoCo's own functions with their loops held by a KKT solve, the U-K solve at
40 digits, and the speed of MuJoCo's C step."""

import time

import mpmath as mp
import mujoco
import numpy as np
import pinocchio as pin
from mujoco import rollout

SCARA_W = 0.4 * np.pi


def seed001_A_b(t, q, qd, l1=0.2, l2=0.25):
    """The SCARA paper [2] eq. 49: the SCARA trajectory constraint in second-order form."""
    s1, c1, s12, c12 = np.sin(q[0]), np.cos(q[0]), np.sin(q[0] + q[1]), np.cos(q[0] + q[1])
    A = np.array([[-l1 * c1 - l2 * c12, -l2 * c12, 0, 0], [-l1 * s1 - l2 * s12, -l2 * s12, 0, 0], [1, 1, 1, 0], [0, 0, 0, 1]])
    b = np.array(
        [
            -qd[0] ** 2 * l1 * s1 - (qd[0] + qd[1]) ** 2 * l2 * s12 - 0.05 * SCARA_W**2 * np.sin(SCARA_W * t),
            qd[0] ** 2 * l1 * c1 + (qd[0] + qd[1]) ** 2 * l2 * c12 - 0.05 * SCARA_W**2 * np.cos(SCARA_W * t),
            0,
            0,
        ]
    )
    return A, b


def seed001_baumgarte_b(t, q, qd, alpha, beta, l1=0.2, l2=0.25):
    """The SCARA paper [2] eq. 54: the Baumgarte-stabilized right-hand side."""
    s1, c1, s12, c12 = np.sin(q[0]), np.cos(q[0]), np.sin(q[0] + q[1]), np.cos(q[0] + q[1])
    w = SCARA_W
    phid = np.array(
        [
            -qd[0] * l1 * c1 - (qd[0] + qd[1]) * l2 * c12 - 0.05 * w * np.cos(w * t),
            -qd[0] * l1 * s1 - (qd[0] + qd[1]) * l2 * s12 + 0.05 * w * np.sin(w * t),
            qd[0] + qd[1] + qd[2],
            qd[3] - 0.02,
        ]
    )
    phi = np.array(
        [
            -l1 * s1 - l2 * s12 - 0.05 * np.sin(w * t),
            l1 * c1 + l2 * c12 - 0.35 - 0.05 * np.cos(w * t),
            q[0] + q[1] + q[2],
            q[3] - 0.02 * t,
        ]
    )
    return seed001_A_b(t, q, qd, l1, l2)[1] - alpha * phid - beta * phi


def seed002_appendix(m, l, I, g, th, thd):
    """The servo-control paper [3] appendix A2–A4: `M`, `C q̇` and `G` of the 5-link chain in absolute angles."""
    n = len(m)
    tail = [m[i + 1 :].sum() for i in range(n)]
    coef = np.array([[(m[max(i, j)] / 2 + tail[max(i, j)]) * l[i] * l[j] for j in range(n)] for i in range(n)])
    d = th[:, None] - th[None, :]
    M = coef * np.cos(d)
    M[np.diag_indices(n)] = [(m[i] / 4 + tail[i]) * l[i] ** 2 + I[i] for i in range(n)]
    C = coef * np.sin(d) * thd[None, :]
    C[np.diag_indices(n)] = 0.0
    G = np.array([(m[i] / 2 + tail[i]) * g * l[i] * np.cos(th[i]) for i in range(n)])
    return M, C @ thd, G


def seed000_eq14(link_a, link_b, q, qd):
    """The parallel-robot paper [1] eq. 14: `M_i` and `C_i q̇` of one subsystem, `q_i = (qa, qb, xa, ya)`."""
    (L, ra, ma, Ia), (_, rb, mb, Ib) = link_a, link_b
    qa, qb = q[0], q[1]
    qad, qbd = qd[0], qd[1]
    s, c, sab, cab = np.sin(qa), np.cos(qa), np.sin(qa + qb), np.cos(qa + qb)
    k = ma * ra + mb * L
    M = np.array(
        [
            [Ia + Ib + ma * ra**2 + mb * (L**2 + rb**2 + 2 * L * rb * np.cos(qb)), Ib + mb * (rb**2 + L * rb * np.cos(qb)), -(k * s + mb * rb * sab), k * c + mb * rb * cab],
            [Ib + mb * (rb**2 + L * rb * np.cos(qb)), Ib + mb * rb**2, -mb * rb * sab, mb * rb * cab],
            [-(k * s + mb * rb * sab), -mb * rb * sab, ma + mb, 0.0],
            [k * c + mb * rb * cab, mb * rb * cab, 0.0, ma + mb],
        ]
    )
    C = np.zeros((4, 4))
    C[0, 0] = -mb * L * rb * qbd * np.sin(qb)
    C[0, 1] = -mb * L * rb * (qad + qbd) * np.sin(qb)
    C[1, 0] = mb * L * rb * qad * np.sin(qb)
    C[2, 0] = -qad * (k * c + mb * rb * cab)
    C[2, 1] = -mb * rb * (2 * qad + qbd) * cab
    C[3, 0] = -qad * (k * s + mb * rb * sab)
    C[3, 1] = -mb * rb * (2 * qad + qbd) * sab
    return M, C @ np.asarray(qd)


def _finish(model):
    data = model.createData()

    def dynamics(q, qd):
        """Pinocchio's `M` (CRBA) and `C q̇ + G` (RNEA at zero acceleration)."""
        M = pin.crba(model, data, np.asarray(q, dtype=float))
        M = np.triu(M) + np.triu(M, 1).T
        return M, pin.rnea(model, data, np.asarray(q, dtype=float), np.asarray(qd, dtype=float), np.zeros(model.nv))

    return dynamics


def pinocchio_planar(chain):
    """`dynamics(q, qd)` of a `PlanarChain` built in Pinocchio: revolute-z joints (relative
    angles) after two prismatic joints for a floating base (Pinocchio's order: x, y, angles)."""
    model = pin.Model()
    parent = 0
    if chain.floating_base:
        parent = model.addJoint(parent, pin.JointModelPX(), pin.SE3.Identity(), "x")
        parent = model.addJoint(parent, pin.JointModelPY(), pin.SE3.Identity(), "y")
        offset = np.zeros(3)
    else:
        offset = np.array([*np.asarray(chain.base), 0.0])
    lengths, com = np.asarray(chain.lengths), np.asarray(chain.com)
    for i in range(chain.num_links):
        placement = pin.SE3(np.eye(3), offset if i == 0 else np.array([lengths[i - 1], 0.0, 0.0]))
        parent = model.addJoint(parent, pin.JointModelRZ(), placement, f"joint{i}")
        inertia = pin.Inertia(float(chain.masses[i]), np.array([*com[i], 0.0]), np.diag([1e-3, 1e-3, float(chain.inertias[i])]))
        model.appendBodyToJoint(parent, inertia, pin.SE3.Identity())
    model.gravity.linear = np.array([*np.asarray(chain.gravity), 0.0])
    return _finish(model)


def pinocchio_scara(arm):
    """`dynamics(q, qd)` of the SCARA arm (the SCARA paper [2]) built in Pinocchio."""
    model = pin.Model()
    parent = 0
    placements = [(0.0, 0.0, 0.0), (0.0, float(arm.l1), 0.0), (0.0, float(arm.l2), 0.0), (0.0, 0.0, 0.0)]
    centres = [(0.0, float(arm.r1), 0.0), (0.0, float(arm.r2), 0.0), (0.0, 0.0, 0.0), (0.0, 0.0, float(arm.l0))]
    for i, joint in enumerate([pin.JointModelRZ(), pin.JointModelRZ(), pin.JointModelRZ(), pin.JointModelPZ()]):
        parent = model.addJoint(parent, joint, pin.SE3(np.eye(3), np.array(placements[i])), f"j{i}")
        inertia = pin.Inertia(float(arm.m[i]), np.array(centres[i]), np.diag([1e-3, 1e-3, float(arm.Iz[i])]))
        model.appendBodyToJoint(parent, inertia, pin.SE3.Identity())
    model.gravity.linear = np.array([0.0, 0.0, -float(arm.g)])
    return _finish(model)


def _kkt(M, f, J, Jdot_v):
    """The constrained acceleration of `M v̇ = f + Jᵀλ`, `J v̇ = −J̇v` (least squares: a planar
    loop written in 3D gives dependent rows)."""
    p = J.shape[0]
    K = np.block([[M, J.T], [J, np.zeros((p, p))]])
    return np.linalg.lstsq(K, np.concatenate([f, -Jdot_v]), rcond=1e-12)[0][: M.shape[0]]


def mujoco_kkt_acceleration(mjm, d, qpos, qvel, h=1e-6):
    """A closed chain's acceleration from MuJoCo's terms only, with its equalities held exactly:
    `mj_fullM`, `qfrc_passive + qfrc_actuator − qfrc_bias` (at `d.ctrl`), the equality rows of
    `efc_J`, and `J̇v` by central differences along `mj_integratePos`."""

    def terms(qpos):
        d.qpos[:], d.qvel[:] = qpos, qvel
        mujoco.mj_forward(mjm, d)
        M = np.zeros((mjm.nv, mjm.nv))
        mujoco.mj_fullM(mjm, d, M)
        J = d.efc_J.reshape(d.nefc, mjm.nv)[: d.ne].copy()
        return M, d.qfrc_passive + d.qfrc_actuator - d.qfrc_bias, J

    M, f, J = terms(qpos)
    rates = []
    for sign in (1, -1):
        moved = qpos.copy()
        mujoco.mj_integratePos(mjm, moved, qvel, sign * h)
        rates.append(terms(moved)[2] @ qvel)
    return _kkt(M, f, J, (rates[0] - rates[1]) / (2 * h))


def mujoco_kkt_flow(mjm, ctrl=0.0):
    """`f(t, y)` of the state `y = (qpos, qvel)` under `mujoco_kkt_acceleration` at a constant
    `ctrl`, for `scipy.integrate.solve_ivp`: `qpos` moves as MuJoCo's joints define (free joints'
    linear velocity in the world, angular velocities in the body's frame)."""
    d = mujoco.MjData(mjm)
    d.ctrl[:] = ctrl
    quaternions = []  # (qpos address, qvel address) of each joint quaternion
    for j in range(mjm.njnt):
        kind, a, v = mjm.jnt_type[j], int(mjm.jnt_qposadr[j]), int(mjm.jnt_dofadr[j])
        if kind == mujoco.mjtJoint.mjJNT_FREE:
            quaternions.append((a + 3, v + 3))
        elif kind == mujoco.mjtJoint.mjJNT_BALL:
            quaternions.append((a, v))
    plain = np.setdiff1d(np.arange(mjm.nv), [v + i for _, v in quaternions for i in range(3)])
    linear = np.setdiff1d(np.arange(mjm.nq), [a + i for a, _ in quaternions for i in range(4)])

    def flow(t, y):
        qpos, qvel = y[: mjm.nq].copy(), y[mjm.nq :]
        rate = np.zeros(mjm.nq)
        rate[linear] = qvel[plain]
        for a, v in quaternions:
            qpos[a : a + 4] /= np.linalg.norm(qpos[a : a + 4])
            # u̇ = ½ u ⊗ (0, ω), ω in the body's frame (as `mj_integratePos`; `mju_derivQuat`
            # takes ω in the world's)
            mujoco.mju_mulQuat(rate[a : a + 4], qpos[a : a + 4], np.r_[0.0, 0.5 * qvel[v : v + 3]])
        return np.concatenate([rate, mujoco_kkt_acceleration(mjm, d, qpos, qvel)])

    return flow


def high_precision_acceleration(M, Q, A, b, cut=1e-10):
    """The U-K acceleration of double-precision `M, Q, A, b` taken as exact, at 40 digits:
    `B = A L⁻ᵀ` from `M = L Lᵀ`, its SVD, and `B`'s directions at or below `cut` times its
    largest singular value left out.

    **Returns:**

    `(sigma, kept, qdd, uncut)`: the singular values relative to the largest, which of them
    are kept, the acceleration, and the acceleration with no direction left out but those
    whose singular value is exactly zero (round-off inverted too; at MuJoCo's `qpos0` itself a
    planar loop's rows are dependent in the doubles as well).
    """
    with mp.workdps(40):
        M, Q, A, b = (mp.matrix(np.asarray(x).tolist()) for x in (M, Q, A, b))
        L = mp.cholesky(M)
        a = mp.cholesky_solve(M, Q)
        U, S, V = mp.svd_r((mp.inverse(L) * A.T).T)
        e = b - A * a
        sigma = np.array([float(s / S[0]) for s in S])

        def solve(kept):
            z = sum((((U[:, i].T * e)[0] / S[i]) * V[i, :].T for i in kept), mp.matrix(M.rows, 1))
            return np.array((a + mp.lu_solve(L.T, z)).tolist(), dtype=float)[:, 0]

        kept = sigma > cut
        return sigma, kept, solve(np.flatnonzero(kept).tolist()), solve([i for i in range(len(S)) if S[i]])


def mujoco_c_rate(models, starts, seconds, ctrl=None):
    """Simulated seconds per wall-clock second of MuJoCo's C step over a batch: `rollout` on one
    thread, no Python in its loop (the baseline every speed ratio of the contact benchmarks is
    taken against).

    **Arguments:**

    - `models`: one `MjModel` per member (the same sizes), or one for all.
    - `starts`: each member's `(qpos, qvel)`.
    - `seconds`: how long each member runs, at the models' own time step.
    - `ctrl`: controls held through the run, shape (nu,) (default: none).

    **Returns:**

    The batch's simulated seconds per wall-clock second (best of three).
    """
    models = list(models) if isinstance(models, (list, tuple)) else [models] * len(starts)
    data, spec = mujoco.MjData(models[0]), mujoco.mjtState.mjSTATE_FULLPHYSICS
    initial = np.empty((len(starts), mujoco.mj_stateSize(models[0], spec)))
    for state, model, (qpos, qvel) in zip(initial, models, starts):
        mujoco.mj_resetData(model, data)
        data.qpos[:], data.qvel[:] = qpos, qvel
        mujoco.mj_getState(model, data, state, spec)
    steps = round(seconds / models[0].opt.timestep)
    control = None if ctrl is None else np.asarray(ctrl, dtype=float)[None, None, :]
    walls = []
    for _ in range(3):
        start = time.perf_counter()
        rollout.rollout(models, data, initial, control, nstep=steps)
        walls.append(time.perf_counter() - start)
    return len(starts) * seconds / min(walls)
