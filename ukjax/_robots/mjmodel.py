"""Reading MuJoCo's compiled model (`mujoco.MjModel`): names, rotations, option flags and joint
kinds, shared by the importer and its contacts."""

import numpy as np

# mjtJoint: free, ball, slide, hinge
_KINDS = {0: "free", 1: "ball", 2: "slide", 3: "hinge"}


def _name(mjm, objtype, index: int, fallback: str) -> str:
    import mujoco

    return mujoco.mj_id2name(mjm, objtype, index) or f"{fallback}{index}"


def _rotation(quat) -> np.ndarray:
    import mujoco

    R = np.empty(9)
    mujoco.mju_quat2Mat(R, np.asarray(quat, dtype=float))
    return R.reshape(3, 3)


def _disabled(mjm, *flags: str) -> bool:
    """Whether any of MuJoCo's `<option><flag …="disable"/>` flags (`"GRAVITY"`, …) is set."""
    import mujoco

    return any(mjm.opt.disableflags & int(getattr(mujoco.mjtDisableBit, f"mjDSBL_{f}")) for f in flags)
