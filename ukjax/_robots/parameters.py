"""An imported robot's physical parameters named as its file names them, for fitting."""

import equinox as eqx
import jax
import numpy as np
from jaxtyping import Array

from .._fit import AbstractParameters
from .actuators import Actuators
from .tree import RigidBodyTree

# the six entries of a symmetric inertia, each set where it stands in the 3 × 3 matrix
_INERTIA = (("xx", ((0, 0),)), ("yy", ((1, 1),)), ("zz", ((2, 2),)), ("xy", ((0, 1), (1, 0))), ("xz", ((0, 2), (2, 0))), ("yz", ((1, 2), (2, 1))))


def _tuple(names) -> tuple[str, ...]:
    return (names,) if isinstance(names, str) else tuple(names)


def _one(model, kind: type, what: str):
    found = [x for x in jax.tree.leaves(model, is_leaf=lambda x: isinstance(x, kind)) if isinstance(x, kind)]
    if len(found) != 1:
        raise ValueError(f"FileParameters needs a model with exactly one {kind.__name__} ({what}); found {len(found)}.")
    return found[0]


class FileParameters(AbstractParameters):
    """Physical parameters of an imported robot by the names in its file, to fit with
    `where=FileParameters(...)` in [`ukjax.fit_least_squares`][] and [`ukjax.fit`][]: each
    is one scalar, reported by name (`"mass of link2"`, `"damping of elbow"`) with its
    standard error, in its own units. The model given to the fit may be the tree or any system
    around it (`model.full_system()`): the tree and its actuators are found in it.

    **Arguments** (each a name or a sequence of names; default none):

    - `masses`, `coms`, `inertias`: bodies' masses; centres of mass (three each, in the body's
      frame: `[x]`, `[y]`, `[z]`); inertias about the centre of mass in the body's frame (six
      each: `[xx]`, `[yy]`, `[zz]`, `[xy]`, `[xz]`, `[yz]`, a product set on both sides).
    - `damping`, `armature`: joints' (one per degree of freedom: three for a ball joint).
    - `stiffness`: hinges' and slides' springs.
    - `gains`: actuators' gains (`gainprm[0]`; a position servo's bias `biasprm[1] = −kp` is
      set with it, as MuJoCo's `kp` sets both).

    A joint's friction loss is not modelled (the importer says so) and cannot be fitted.
    """

    masses: tuple[str, ...] = eqx.field(static=True, default=(), converter=_tuple)
    coms: tuple[str, ...] = eqx.field(static=True, default=(), converter=_tuple)
    inertias: tuple[str, ...] = eqx.field(static=True, default=(), converter=_tuple)
    damping: tuple[str, ...] = eqx.field(static=True, default=(), converter=_tuple)
    armature: tuple[str, ...] = eqx.field(static=True, default=(), converter=_tuple)
    stiffness: tuple[str, ...] = eqx.field(static=True, default=(), converter=_tuple)
    gains: tuple[str, ...] = eqx.field(static=True, default=(), converter=_tuple)

    def _parts(self, model):
        """Per leaf in use: the leaf and its entries as `(flat index, coefficient, name)` per
        parameter (each a list of entries sharing that name)."""
        tree = _one(model, RigidBodyTree, "a robot tree")
        parts = []

        def bodies(names):
            return [(name, tree.body_index(name)) for name in names]

        if self.masses:
            parts.append((tree.masses, [[((b,), 1.0, f"mass of {name}")] for name, b in bodies(self.masses)]))
        if self.coms:
            parts.append(
                (tree.coms, [[((3 * b + i,), 1.0, f"com of {name} [{'xyz'[i]}]")] for name, b in bodies(self.coms) for i in range(3)])
            )
        if self.inertias:
            parts.append(
                (
                    tree.inertias,
                    [
                        [(tuple(9 * b + 3 * i + j for i, j in places), 1.0, f"inertia of {name} [{label}]")]
                        for name, b in bodies(self.inertias)
                        for label, places in _INERTIA
                    ],
                )
            )
        for field, names in (("damping", self.damping), ("armature", self.armature)):
            if names:
                parts.append((getattr(tree, field), [[((d,), 1.0, label)] for label, d in self._dofs(tree, field, names)]))
        if self.stiffness:
            rows = []
            for name in self.stiffness:
                kind = tree.joint_kinds[tree.joint_names.index(name)] if name in tree.joint_names else None
                if kind not in ("hinge", "slide"):
                    tree.joint_index(name)  # raises for an unknown joint
                    raise ValueError(f"Joint {name!r} is a {kind} joint: springs are fitted for hinges and slides.")
                rows.append([((tree.joint_index(name),), 1.0, f"stiffness of {name}")])
            parts.append((tree.stiffness, rows))
        if self.gains:
            actuators = _one(model, Actuators, "the file's actuators, as model.full_system() or controlled() holds them")
            gain, bias, gains, biases = np.asarray(actuators.gain), np.asarray(actuators.bias), [], []
            for name in self.gains:
                if name not in actuators.names:
                    raise ValueError(f"No actuator {name!r}; the actuators are {', '.join(actuators.names)}.")
                a = actuators.names.index(name)
                gains.append([((3 * a,), 1.0, f"gain of {name}")])
                # a position servo's kp is its gain and minus its bias on the position
                biases.append([((3 * a + 1,), -1.0, f"gain of {name}")] if gain[a, 0] != 0 and bias[a, 1] == -gain[a, 0] else [])
            parts.append((actuators.gain, gains))
            parts.append((actuators.bias, biases))
        return parts

    @staticmethod
    def _dofs(tree, field: str, names) -> list[tuple[str, int]]:
        out = []
        for name in names:
            if name not in tree.joint_names:
                tree.joint_index(name)  # raises for an unknown joint, naming the joints
            j = tree.joint_names.index(name)
            start = tree.joint_dofs[j]
            count = {"hinge": 1, "slide": 1, "ball": 3, "free": 6}[tree.joint_kinds[j]]
            out += [(f"{field} of {name}" + (f" [{i}]" if count > 1 else ""), start + i) for i in range(count)]
        return out

    def __call__(self, model) -> tuple[Array, ...]:
        # read from the structure alone: `eqx.tree_at` calls it on a model of placeholders
        tree = _one(model, RigidBodyTree, "a robot tree")
        fields = ("masses", "coms", "inertias", "damping", "armature", "stiffness")
        leaves = tuple(getattr(tree, field) for field in fields if getattr(self, field))
        if self.gains:
            actuators = _one(model, Actuators, "the file's actuators")
            leaves += (actuators.gain, actuators.bias)
        return leaves

    def names(self, model) -> tuple[str, ...]:
        names = []
        for _, rows in self._parts(model):
            for row in rows:
                for _, _, name in row:
                    if name not in names:
                        names.append(name)
        return tuple(names)

    def entries(self, model):
        index = {name: j for j, name in enumerate(self.names(model))}
        out = []
        for _, rows in self._parts(model):
            flat, which, coefficient = [], [], []
            for row in rows:
                for places, c, name in row:
                    for i in places:
                        flat.append(int(i))
                        which.append(index[name])
                        coefficient.append(float(c))
            out.append((tuple(flat), tuple(which), tuple(coefficient)))
        return tuple(out)
