"""ukjax: differentiable constrained multibody dynamics by the Udwadia–Kalaba equation."""

from . import examples as examples, models as models
from ._animate import Sketch as Sketch, animate as animate
from ._batch import simulate_batch as simulate_batch
from ._constraints import (
    AbstractConstraint as AbstractConstraint,
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
    FitResult as FitResult,
    LeastSquaresResult as LeastSquaresResult,
    MultipleShooting as MultipleShooting,
    fit as fit,
    fit_least_squares as fit_least_squares,
    real_stability_limit as real_stability_limit,
    torque_residuals as torque_residuals,
    trajectory_residuals as trajectory_residuals,
    tune_baumgarte as tune_baumgarte,
)
from ._simulate import (
    RK4 as RK4,
    Solution as Solution,
    Status as Status,
    simulate as simulate,
    stiff_solver as stiff_solver,
)
from ._systems import (
    AbstractSystem as AbstractSystem,
    AbstractUnconstrainedSystem as AbstractUnconstrainedSystem,
    ComposedSystem as ComposedSystem,
    ConstrainedSystem as ConstrainedSystem,
    ConstraintLevel as ConstraintLevel,
    Dynamics as Dynamics,
    ExplicitSystem as ExplicitSystem,
    Forced as Forced,
    LagrangianSystem as LagrangianSystem,
    Projection as Projection,
)

__version__ = "0.1.0"
