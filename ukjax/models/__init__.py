"""Model builders, the source papers' mechanisms, and robots from MJCF and URDF files (built in
`ukjax._robots`, re-exported here)."""

from .._robots.actuators import Actuated as Actuated, Actuators as Actuators
from .._robots.contacts import (
    JointLimits as JointLimits,
    PlaneContacts as PlaneContacts,
    SegmentContacts as SegmentContacts,
    ShapeContacts as ShapeContacts,
)
from .._robots.equalities import (
    Connect as Connect,
    JointCoupling as JointCoupling,
    SiteConstraint as SiteConstraint,
    TendonCoupling as TendonCoupling,
    Weld as Weld,
)
from .._robots.joints import Kinematics as Kinematics
from .._robots.mjcf import from_mjcf as from_mjcf, from_urdf as from_urdf
from .._robots.model import Model as Model
from .._robots.parameters import FileParameters as FileParameters
from .._robots.rim_faces import RimFaceContacts as RimFaceContacts
from .._robots.rings import RingContacts as RingContacts
from .._robots.segment_shapes import SegmentShapeContacts as SegmentShapeContacts
from .._robots.tree import RigidBodyTree as RigidBodyTree
from ._excitation import SineInputs as SineInputs
from ._mechanisms import (
    PARALLEL_2DOF_LINKS as PARALLEL_2DOF_LINKS,
    PARALLEL_2DOF_MJCF as PARALLEL_2DOF_MJCF,
    PARALLEL_2DOF_Q0 as PARALLEL_2DOF_Q0,
    ObjectTrajectory as ObjectTrajectory,
    PointTrajectory as PointTrajectory,
    SpringLength as SpringLength,
    TwoMassSpring as TwoMassSpring,
    coordinated_robots as coordinated_robots,
    parallel_2dof as parallel_2dof,
    two_mass_spring as two_mass_spring,
)
from ._planar import PlanarChain as PlanarChain
from ._points import JointPoint as JointPoint, PointConstraint as PointConstraint
from ._scara import (
    ScaraArm as ScaraArm,
    ScaraTrajectory as ScaraTrajectory,
    scara as scara,
    scara_chain as scara_chain,
    scara_reference as scara_reference,
)
from ._serial import (
    LogCholeskyChain as LogCholeskyChain,
    SerialChain as SerialChain,
    from_log_cholesky as from_log_cholesky,
    log_cholesky as log_cholesky,
    prismatic as prismatic,
    revolute as revolute,
)
