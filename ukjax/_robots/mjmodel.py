"""MuJoCo's compiled model (`mujoco.MjModel`): compiling a file, and reading names, rotations,
option flags and joint kinds, shared by the importer and its contacts."""

import os

import numpy as np

# mjtJoint: free, ball, slide, hinge
_KINDS = {0: "free", 1: "ball", 2: "slide", 3: "hinge"}


def compile_model(source: str | os.PathLike, kind: str):
    """MuJoCo's compiled model of an MJCF or URDF file, or of an MJCF string; a clear error
    where there is no such file or MuJoCo refuses it."""
    import mujoco

    text = str(source)
    if kind == "MJCF" and text.lstrip().startswith("<"):
        where, load = "the MJCF string", lambda: mujoco.MjModel.from_xml_string(text)
    else:
        if not os.path.isfile(text):
            raise FileNotFoundError(f"No {kind} file at {text!r}.")
        where, load = repr(text), lambda: mujoco.MjModel.from_xml_path(text)
    try:
        return load()
    except ValueError as error:
        raise ValueError(f"MuJoCo could not compile {where} ({kind}): {error}") from None


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
