"""ukjax: differentiable constrained multibody dynamics by the Udwadia–Kalaba equation."""

import typing

# The public names are imported where they are first used (`__getattr__` below): a command
# that reads back a kept program runs it before it imports the engine (equinox and diffrax
# alone take half a second).
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
    from ._control import (
        ClosedLoop as ClosedLoop,
        ServoControl as ServoControl,
        ServoSolution as ServoSolution,
    )
    from ._core import (
        UKSolution as UKSolution,
        constraint_force as constraint_force,
        udwadia_kalaba as udwadia_kalaba,
    )
    from ._dynamics import ConstraintLevel as ConstraintLevel, Dynamics as Dynamics
    from ._fit import (
        AbstractParameters as AbstractParameters,
        FitResult as FitResult,
        fit as fit,
        fit_least_squares as fit_least_squares,
    )
    from ._implicit import (
        AbstractForces as AbstractForces,
        ExplicitForces as ExplicitForces,
        ImplicitForces as ImplicitForces,
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
    from ._stability import real_stability_limit as real_stability_limit
    from ._statistics import LeastSquaresResult as LeastSquaresResult
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
    from ._time_stepping import StepResult as StepResult, TimeStepping as TimeStepping, step as step
    from ._tuning import tune_baumgarte as tune_baumgarte
    from ._unilateral import (
        AbstractUnilateral as AbstractUnilateral,
        ContactRows as ContactRows,
        Unilateral as Unilateral,
    )

__version__ = "0.1.0"


# The same names by the module that defines them, read by `__getattr__` (the block above is
# for type checkers and the API reference; `tests/test_house.py` holds the two alike).
_SUBMODULES = ("examples", "models")
_NAMES = {
    "._animate": ("AbstractDrawn", "Sketch", "animate"),
    "._backends._backend": ("AbstractBackend", "AutoBackend", "TreeKernel", "XLABackend"),
    "._batch": ("simulate_batch",),
    "._composed": ("ComposedSystem",),
    "._constraints": (
        "AbstractConstraint",
        "AbstractDrawnConstraint",
        "AbstractHolonomic",
        "AbstractNonholonomic",
        "AbstractSystemConstraint",
        "AccelerationConstraint",
        "Baumgarte",
        "ConstraintRows",
        "Holonomic",
        "Nonholonomic",
    ),
    "._control": ("ClosedLoop", "ServoControl", "ServoSolution"),
    "._core": ("UKSolution", "constraint_force", "udwadia_kalaba"),
    "._dynamics": ("ConstraintLevel", "Dynamics"),
    "._fit": ("AbstractParameters", "FitResult", "fit", "fit_least_squares"),
    "._implicit": ("AbstractForces", "ExplicitForces", "ImplicitForces"),
    "._projection": ("Projection",),
    "._residuals": ("MultipleShooting", "torque_residuals", "trajectory_residuals"),
    "._simulate": ("simulate",),
    "._solution": ("ContactRecord", "Solution", "Status"),
    "._solvers": ("RK4", "stiff_solver"),
    "._stability": ("real_stability_limit",),
    "._statistics": ("LeastSquaresResult",),
    "._systems": (
        "AbstractSized",
        "AbstractSystem",
        "AbstractUnconstrainedSystem",
        "AbstractWrapper",
        "ConstrainedSystem",
        "ExplicitSystem",
        "Forced",
        "LagrangianSystem",
    ),
    "._time_stepping": ("StepResult", "TimeStepping", "step"),
    "._tuning": ("tune_baumgarte",),
    "._unilateral": ("AbstractUnilateral", "ContactRows", "Unilateral"),
}
# each public name: its module, and its name there (None: the name is the module)
_EXPORTS = {name: (f"{__name__}.{name}", None) for name in _SUBMODULES} | {
    name: (f"{__name__}{module}", name) for module, names in _NAMES.items() for name in names
}
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
