"""Every claim of benchmarks/reproduce_seeds.py as a test: the seeds' printed equations and
results, reproduced."""

import pytest

from benchmarks.reproduce_seeds import CLAIMS


# One worker runs them all: several claims share one cached simulation (functools.cache).
@pytest.mark.xdist_group("seeds")
@pytest.mark.parametrize("claim", CLAIMS, ids=[c.name for c in CLAIMS])
def test_seed_claim(claim):
    value, passed = claim.check()
    assert passed, f"{claim.name}: paper {claim.paper}, ukjax {value}"
