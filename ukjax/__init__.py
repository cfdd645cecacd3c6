"""ukjax: differentiable constrained multibody dynamics by the Udwadia–Kalaba equation."""

import typing


# The public names are imported where they are first used (`__getattr__` below reads this block):
# a command that reads back a kept program runs it before it imports the engine (equinox and
# diffrax alone take half a second).
if typing.TYPE_CHECKING:
    from . import examples as examples, models as models
    from ._animate import AbstractDrawn as AbstractDrawn, Sketch as Sketch, animate as animate
    from ._backends._backend import (
        AbstractBackend as AbstractBackend,
        AutoBackend as AutoBackend,
        TreeKernel as TreeKernel,
        XLABackend as XLABackend,
    )
    from ._batch import simulate_batch as simulate_batch
    from ._composed import ComposedSystem as ComposedSystem
    from ._constraints import (
        AbstractConstraint as AbstractConstraint,
        AbstractDrawnConstraint as AbstractDrawnConstraint,
        AbstractHolonomic as AbstractHolonomic,
        AbstractNonholonomic as AbstractNonholonomic,
        AbstractSystemConstraint as AbstractSystemConstraint,
        AccelerationConstraint as AccelerationConstraint,
        Baumgarte as Baumgarte,
        ConstraintRows as ConstraintRows,
        Holonomic as Holonomic,
        Nonholonomic as Nonholonomic,
    )
    from ._control import ClosedLoop as ClosedLoop, ServoControl as ServoControl, ServoSolution as ServoSolution
    from ._core import (
        UKSolution as UKSolution,
        constraint_force as constraint_force,
        udwadia_kalaba as udwadia_kalaba,
    )
    from ._fit import (
        AbstractParameters as AbstractParameters,
        FitResult as FitResult,
        fit as fit,
        fit_least_squares as fit_least_squares,
    )
    from ._projection import Projection as Projection
    from ._residuals import (
        MultipleShooting as MultipleShooting,
        torque_residuals as torque_residuals,
        trajectory_residuals as trajectory_residuals,
    )
    from ._simulate import simulate as simulate
    from ._solution import ContactRecord as ContactRecord, Solution as Solution, Status as Status
    from ._solvers import RK4 as RK4, stiff_solver as stiff_solver
    from ._statistics import LeastSquaresResult as LeastSquaresResult
    from ._dynamics import ConstraintLevel as ConstraintLevel, Dynamics as Dynamics
    from ._systems import (
        AbstractSized as AbstractSized,
        AbstractSystem as AbstractSystem,
        AbstractUnconstrainedSystem as AbstractUnconstrainedSystem,
        AbstractWrapper as AbstractWrapper,
        ConstrainedSystem as ConstrainedSystem,
        ExplicitSystem as ExplicitSystem,
        Forced as Forced,
        LagrangianSystem as LagrangianSystem,
    )
    from ._unilateral import (
        AbstractUnilateral as AbstractUnilateral,
        ContactRows as ContactRows,
        Unilateral as Unilateral,
    )
    from ._stability import real_stability_limit as real_stability_limit
    from ._tuning import tune_baumgarte as tune_baumgarte

__version__ = "0.1.0"


def _exports() -> dict[str, tuple[str, str | None]]:
    """Each public name's module and the name there (None: the name is the module), as the
    imports under `TYPE_CHECKING` above say."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    (block,) = (node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "typing.TYPE_CHECKING")
    exports = {}
    for node in block.body:
        for alias in node.names:
            if node.module is None:
                exports[alias.asname] = (f"{__name__}.{alias.name}", None)
            else:
                exports[alias.asname] = (f"{__name__}.{node.module}", alias.name)
    return exports


_EXPORTS = _exports()
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    import importlib

    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = _EXPORTS[name]
    value = importlib.import_module(module)
    if attribute is not None:
        value = getattr(value, attribute)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
