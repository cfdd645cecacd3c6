"""Ready mechanisms from the seed papers."""

from ._scara import (
    Model as Model,
    ScaraArm as ScaraArm,
    ScaraTrajectory as ScaraTrajectory,
    scara as scara,
    scara_reference as scara_reference,
)
