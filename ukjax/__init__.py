"""ukjax: differentiable constrained multibody dynamics by the Udwadia–Kalaba equation."""

from . import models as models
from ._animate import Sketch as Sketch
from ._animate import animate as animate
from ._batch import simulate_batch as simulate_batch
from ._constraints import (
    AbstractConstraint as AbstractConstraint,
)
from ._constraints import (
    AbstractHolonomic as AbstractHolonomic,
)
from ._constraints import (
    AbstractNonholonomic as AbstractNonholonomic,
)
from ._constraints import (
    AbstractSystemConstraint as AbstractSystemConstraint,
)
from ._constraints import (
    AccelerationConstraint as AccelerationConstraint,
)
from ._constraints import (
    Baumgarte as Baumgarte,
)
from ._constraints import (
    ConstraintRows as ConstraintRows,
)
from ._constraints import (
    Holonomic as Holonomic,
)
from ._constraints import (
    Nonholonomic as Nonholonomic,
)
from ._control import ClosedLoop as ClosedLoop
from ._control import ServoControl as ServoControl
from ._control import ServoSolution as ServoSolution
from ._core import (
    UKSolution as UKSolution,
)
from ._core import (
    constraint_force as constraint_force,
)
from ._core import (
    udwadia_kalaba as udwadia_kalaba,
)
from ._fit import (
    FitResult as FitResult,
)
from ._fit import (
    LeastSquaresResult as LeastSquaresResult,
)
from ._fit import (
    MultipleShooting as MultipleShooting,
)
from ._fit import (
    fit as fit,
)
from ._fit import (
    fit_least_squares as fit_least_squares,
)
from ._fit import (
    real_stability_limit as real_stability_limit,
)
from ._fit import (
    torque_residuals as torque_residuals,
)
from ._fit import (
    trajectory_residuals as trajectory_residuals,
)
from ._fit import (
    tune_baumgarte as tune_baumgarte,
)
from ._simulate import (
    RK4 as RK4,
)
from ._simulate import (
    Solution as Solution,
)
from ._simulate import (
    Status as Status,
)
from ._simulate import (
    simulate as simulate,
)
from ._simulate import (
    stiff_solver as stiff_solver,
)
from ._systems import (
    AbstractSystem as AbstractSystem,
)
from ._systems import (
    AbstractUnconstrainedSystem as AbstractUnconstrainedSystem,
)
from ._systems import (
    ComposedSystem as ComposedSystem,
)
from ._systems import (
    ConstrainedSystem as ConstrainedSystem,
)
from ._systems import (
    ConstraintLevel as ConstraintLevel,
)
from ._systems import (
    Dynamics as Dynamics,
)
from ._systems import (
    ExplicitSystem as ExplicitSystem,
)
from ._systems import (
    Forced as Forced,
)
from ._systems import (
    LagrangianSystem as LagrangianSystem,
)

__version__ = "0.1.0"
