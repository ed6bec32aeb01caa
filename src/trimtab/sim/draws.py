"""The first draws of numpy's default generator for a seed of four 32-bit words, computed without building one.

Owns SeededDraws: `np.random.default_rng([a, b, c, d]).random(2)` for many (c, d) under fixed (a, b), as the
same floats. A job-level failure is drawn from a generator seeded per (job, attempt), once per attempt; building
that generator (SeedSequence, PCG64, Generator) costs about 16 us, mostly numpy's fixed cost per object. Here the
pool mixing of numpy's SeedSequence (for exactly four entropy words: numpy/random/bit_generator.pyx), PCG64's
seeding and its XSL-RR output (numpy/random/src/pcg64) are written out on Python integers, the steps that depend
on (a, b) alone done once. Entropy outside four 32-bit words goes to numpy itself."""

from __future__ import annotations

import numpy as np

_M32 = 0xFFFFFFFF
_M64 = (1 << 64) - 1
_M128 = (1 << 128) - 1
_MULT_A, _INIT_B, _MULT_B = 0x931E8875, 0x8B51F9DD, 0x58F38DED
_MIX_L, _MIX_R = 0xCA01F9DD, 0x4973F715
_PCG_MULT = 0x2360ED051FC65DA44385DF649FCCF645
_TO_UNIT = 1.0 / 9007199254740992.0  # 2**-53: numpy's double from the top 53 bits of a 64-bit output
# SeedSequence's hash constant at each of the 16 hashmix steps of mixing a 4-word pool (data-independent), and
# generate_state's at each of its 8 output words
_HC = [0x43B0D7E5 * pow(_MULT_A, i, 1 << 32) & _M32 for i in range(17)]
_HB = [_INIT_B * pow(_MULT_B, i, 1 << 32) & _M32 for i in range(9)]


def _hashmix(value: int, step: int) -> int:
    value = ((value ^ _HC[step]) * _HC[step + 1]) & _M32
    return value ^ (value >> 16)


def _mix(x: int, y: int) -> int:
    r = (_MIX_L * x - _MIX_R * y) & _M32
    return r ^ (r >> 16)


class SeededDraws:
    """`draws(c, d)` == `np.random.default_rng([a, b, c, d]).random(2).tolist()` for this instance's (a, b).

    Callers: Faults.job_failure_point (a: the fault seed, b: the concern, c: the job id's crc32, d: the attempt).
    SeedSequence hashes the four words into a pool, then mixes each word (source 0 to 3) into the three others;
    the rounds of sources 0 and 1 leave words 0 and 1 depending on (a, b) alone and add a constant to words 2 and
    3, so only the rounds of sources 2 and 3 run per draw."""

    def __init__(self, a: int, b: int) -> None:
        self.a, self.b = a, b
        self._one_word_each = 0 <= a <= _M32 and 0 <= b <= _M32  # else numpy: more than four words
        p0, p1 = _hashmix(a, 0), _hashmix(b, 1)
        p1 = _mix(p1, _hashmix(p0, 4))  # source 0 into word 1 (steps 5, 6: into words 2 and 3)
        into2, into3 = _hashmix(p0, 5), _hashmix(p0, 6)
        p0 = _mix(p0, _hashmix(p1, 7))  # source 1 into word 0 (steps 8, 9: into words 2 and 3)
        self._pool01 = (p0, p1)
        self._into = (into2, _hashmix(p1, 8), into3, _hashmix(p1, 9))

    def draws(self, c: int, d: int) -> tuple[float, float]:
        if not (self._one_word_each and 0 <= c <= _M32 and 0 <= d <= _M32):
            first, second = np.random.default_rng([self.a, self.b, c, d]).random(2).tolist()
            return first, second
        p0, p1 = self._pool01
        into2_0, into2_1, into3_0, into3_1 = self._into
        p2 = _mix(_mix(_hashmix(c, 2), into2_0), into2_1)
        p3 = _mix(_mix(_hashmix(d, 3), into3_0), into3_1)
        p0, p1, p3 = _mix(p0, _hashmix(p2, 10)), _mix(p1, _hashmix(p2, 11)), _mix(p3, _hashmix(p2, 12))
        p0, p1, p2 = _mix(p0, _hashmix(p3, 13)), _mix(p1, _hashmix(p3, 14)), _mix(p2, _hashmix(p3, 15))
        w = [0] * 8  # SeedSequence.generate_state(4, uint64): eight 32-bit words, each uint64 low word first
        for i, p in enumerate((p0, p1, p2, p3, p0, p1, p2, p3)):
            v = ((p ^ _HB[i]) * _HB[i + 1]) & _M32
            w[i] = v ^ (v >> 16)
        init = (w[1] << 96) | (w[0] << 64) | (w[3] << 32) | w[2]
        inc = ((w[5] << 97) | (w[4] << 65) | (w[7] << 33) | (w[6] << 1) | 1) & _M128
        s = ((inc + init) * _PCG_MULT + inc) & _M128  # PCG64's srandom: a step from 0, add the state, a step
        s1 = (s * _PCG_MULT + inc) & _M128
        s2 = (s1 * _PCG_MULT + inc) & _M128
        return _to_unit(s1), _to_unit(s2)


def _to_unit(state: int) -> float:
    """PCG64's XSL-RR output of `state`, as numpy's `random()` makes a double of it."""
    x, rot = ((state >> 64) ^ state) & _M64, state >> 122
    return ((((x >> rot) | (x << (64 - rot))) & _M64) >> 11) * _TO_UNIT
