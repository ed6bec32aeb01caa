"""SeededDraws gives the floats numpy's default generator gives for the same four seed words."""

from __future__ import annotations

import random
import zlib

import numpy as np
import pytest

from trimtab.sim.draws import SeededDraws


@pytest.mark.parametrize("seed", [0, 1, 7, 2**31, 2**32 - 1, 2**32, 2**40 + 3])
def test_draws_are_numpys(seed: int) -> None:
    rnd = random.Random(seed)
    draws = SeededDraws(seed, 4)
    for _ in range(300):
        crc = zlib.crc32(f"job-{rnd.randrange(10**6)}".encode())
        attempt = rnd.choice([0, 1, 2, 3, rnd.randrange(1000), 2**32 - 1, 2**32 + 5])
        assert list(draws.draws(crc, attempt)) == np.random.default_rng([seed, 4, crc, attempt]).random(2).tolist()


def test_other_concerns_and_bad_seeds() -> None:
    assert list(SeededDraws(3, 0).draws(0, 0)) == np.random.default_rng([3, 0, 0, 0]).random(2).tolist()
    with pytest.raises(ValueError):
        SeededDraws(-1, 4).draws(1, 1)  # numpy refuses negative entropy; so does the fast path's fallback
