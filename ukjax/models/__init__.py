"""Model builders and the seeds' mechanisms."""

from ._actuators import Actuated as Actuated
from ._actuators import Actuators as Actuators
from ._excitation import SineInputs as SineInputs
from ._mechanisms import (
    PARALLEL_2DOF_LINKS as PARALLEL_2DOF_LINKS,
)
from ._mechanisms import (
    PARALLEL_2DOF_MJCF as PARALLEL_2DOF_MJCF,
)
from ._mechanisms import (
    PARALLEL_2DOF_Q0 as PARALLEL_2DOF_Q0,
)
from ._mechanisms import (
    ObjectTrajectory as ObjectTrajectory,
)
from ._mechanisms import (
    PointTrajectory as PointTrajectory,
)
from ._mechanisms import (
    SpringLength as SpringLength,
)
from ._mechanisms import (
    TwoMassSpring as TwoMassSpring,
)
from ._mechanisms import (
    coordinated_robots as coordinated_robots,
)
from ._mechanisms import (
    parallel_2dof as parallel_2dof,
)
from ._mechanisms import (
    two_mass_spring as two_mass_spring,
)
from ._mjcf import from_mjcf as from_mjcf
from ._mjcf import from_urdf as from_urdf
from ._planar import PlanarChain as PlanarChain
from ._points import JointPoint as JointPoint
from ._points import PointConstraint as PointConstraint
from ._scara import (
    Model as Model,
)
from ._scara import (
    ScaraArm as ScaraArm,
)
from ._scara import (
    ScaraTrajectory as ScaraTrajectory,
)
from ._scara import (
    scara as scara,
)
from ._scara import (
    scara_chain as scara_chain,
)
from ._scara import (
    scara_reference as scara_reference,
)
from ._serial import (
    LogCholeskyChain as LogCholeskyChain,
)
from ._serial import (
    SerialChain as SerialChain,
)
from ._serial import (
    from_log_cholesky as from_log_cholesky,
)
from ._serial import (
    log_cholesky as log_cholesky,
)
from ._serial import (
    prismatic as prismatic,
)
from ._serial import (
    revolute as revolute,
)
from ._tree import (
    Connect as Connect,
)
from ._tree import (
    JointCoupling as JointCoupling,
)
from ._tree import (
    Kinematics as Kinematics,
)
from ._tree import (
    RigidBodyTree as RigidBodyTree,
)
from ._tree import (
    SiteConstraint as SiteConstraint,
)
from ._tree import (
    TendonCoupling as TendonCoupling,
)
from ._tree import (
    Weld as Weld,
)
