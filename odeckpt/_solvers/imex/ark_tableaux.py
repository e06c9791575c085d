"""Coefficients of the IMEX additive Runge–Kutta methods (`KenCarp3/4/5`, `Sil3`),
checked when defined against the additive order conditions (each part's and the
coupling ones, up to the method's order, for the solution, the embedded method and the
dense output), so a transcription error fails at import time.

References:
    C. A. Kennedy & M. H. Carpenter (2003), "Additive Runge–Kutta schemes for
    convection–diffusion–reaction equations", Appl. Numer. Math. 44, 139–181: Tables
    (ARK3(2)4L[2]SA, ARK4(3)6L[2]SA, ARK5(4)8L[2]SA) and their dense-output
    coefficients `b*_ij`.
    J. S. Whitaker & S. K. Kar (2013), "Implicit–explicit Runge–Kutta methods for
    fast–slow wave problems", Mon. Weather Rev. 141(10), 3426–3434.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from odeckpt._solvers.runge_kutta.order_conditions import (
    TABLE_RTOL,
    THETAS,
    Rows,
    additive_defects,
    check_close,
    lower_matrix,
)


@dataclasses.dataclass(frozen=True)
class ImexTableau:
    """An additive Runge–Kutta method: explicit in `f_E`, diagonally implicit in `f_I`.

    With `kE_j = f_E(t0 + c_j h, Z_j)` and `kI_j = f_I(t0 + c_j h, Z_j)`, stage `i` is

        Z_i = y0 + h sum_{j<i} explicit_ij kE_j + h sum_{j<=i} implicit_ij kI_j,

    an equation in `kI_i` when the diagonal entry `implicit_ii` is nonzero (the first
    stage is explicit in both parts: `Z_1 = y0`). `y1 = y0 + h sum_j (b_E,j kE_j +
    b_I,j kI_j)`; the error estimate is the same sum with `b - b_hat`.

    With `dense` given (`dense[i][r-1]` is Kennedy & Carpenter's `b*_ir`, the same for
    both parts), `y(t0 + theta h) = y0 + h sum_i sum_r b*_ir theta^r (kE_i + kI_i)`;
    without it the solver interpolates by cubic Hermite, which needs the last stage to
    end the step (`Z_s = y1`, checked).

    `predictor[i]` is the earlier stage whose implicit slope starts stage `i`'s
    Newton iteration: the one nearest in `c` (the latest of equals).
    """

    name: str
    c: tuple[float, ...]
    explicit: Rows  # row i: explicit_i0 .. explicit_i(i-1)
    implicit: Rows  # row i: implicit_i0 .. implicit_ii (the diagonal last)
    b_explicit: tuple[float, ...]
    b_implicit: tuple[float, ...]
    b_hat_explicit: tuple[float, ...]
    b_hat_implicit: tuple[float, ...]
    order: int
    embedded_order: int
    dense: Rows | None = None
    dense_order: int | None = None

    def __post_init__(self) -> None:
        s = self.stages
        if any(len(row) != i for i, row in enumerate(self.explicit)) or len(self.explicit) != s:
            raise ValueError(f"{self.name}: `explicit` must have {s} strictly lower rows.")
        if any(len(row) != i + 1 for i, row in enumerate(self.implicit)) or self.implicit[0][0]:
            raise ValueError(f"{self.name}: `implicit` must have {s} lower rows, the first 0.")
        for what, matrix in (
            ("explicit", self.explicit_matrix),
            ("implicit", self.implicit_matrix),
        ):
            check_close(self.name, f"c != row sums of the {what} tableau", self.c, matrix.sum(1))
        alphas = (self.explicit_matrix, self.implicit_matrix)
        _check_additive(
            self.name, "the solution", alphas, (self.b_explicit, self.b_implicit), self.order
        )
        _check_additive(self.name, "the embedded method", alphas,
               (self.b_hat_explicit, self.b_hat_implicit), self.embedded_order)  # fmt: skip
        if not any(self.b_err_explicit + self.b_err_implicit):
            raise ValueError(f"{self.name}: `b_hat == b` gives no error estimate.")
        self._check_dense(alphas)

    def _check_dense(self, alphas) -> None:
        if self.dense is None:
            ends = (self.explicit_matrix[-1], self.implicit_matrix[-1])
            what = "Hermite dense output needs the last stage to end the step"
            check_close(self.name, what, np.concatenate(ends), self.b_explicit + self.b_implicit)
            return
        check_close(self.name, "dense output needs b_E == b_I", self.b_explicit, self.b_implicit)
        check_close(self.name, "dense output at theta = 1 must be y1",
                     [sum(row) for row in self.dense], self.b_explicit)  # fmt: skip
        for theta in THETAS:
            weights = self.dense_weights(theta)
            _check_additive(self.name, "the dense output", alphas, (weights, weights),
                   self.dense_order or 1, theta)  # fmt: skip

    @property
    def stages(self) -> int:
        return len(self.c)

    @property
    def explicit_matrix(self) -> np.ndarray:
        return lower_matrix(self.explicit, self.stages)

    @property
    def implicit_matrix(self) -> np.ndarray:
        return lower_matrix(self.implicit, self.stages)

    @property
    def diagonal(self) -> tuple[float, ...]:
        """The implicit tableau's diagonal: `0` for the first stage."""
        return tuple(float(row[-1]) for row in self.implicit)

    @property
    def b_err_explicit(self) -> tuple[float, ...]:
        return tuple(x - y for x, y in zip(self.b_explicit, self.b_hat_explicit, strict=True))

    @property
    def b_err_implicit(self) -> tuple[float, ...]:
        return tuple(x - y for x, y in zip(self.b_implicit, self.b_hat_implicit, strict=True))

    @property
    def dense_rows(self) -> Rows | None:
        """Rows `beta_r` of `y(t0 + theta h) = y0 + h sum_r theta^r beta_r . k`."""
        if self.dense is None:
            return None
        return tuple(tuple(row[r] for row in self.dense) for r in range(len(self.dense[0])))

    def dense_weights(self, theta: float) -> np.ndarray:
        rows = self.dense_rows or ()
        return sum((theta ** (r + 1) * np.asarray(row) for r, row in enumerate(rows)),
                   np.zeros(self.stages))  # fmt: skip

    @property
    def predictor(self) -> tuple[int, ...]:
        """For each stage, the earlier stage nearest in `c` (`0` for the first)."""
        return tuple(
            0 if i == 0 else min(range(i), key=lambda j: (abs(self.c[j] - self.c[i]), -j))
            for i in range(self.stages)
        )


def _check_additive(name: str, what: str, alphas, weights, order: int, theta: float = 1.0) -> None:
    for tree, defect, scale in additive_defects(alphas, weights, order, theta):
        if abs(defect) > TABLE_RTOL * max(1.0, scale):
            raise ValueError(
                f"{name}: {what} violates the additive order condition for coloured tree "
                f"{tree} (theta={theta}): defect {defect:.3e}."
            )


def _kencarp(name, gamma, c, explicit, implicit, b, b_hat, order, dense) -> ImexTableau:
    """A Kennedy–Carpenter ARK: stiffly accurate ESDIRK part (last implicit row `b`),
    both parts with the same weights, dense output of order 2 (ARK3) or 3."""
    s = len(b)
    implicit_rows = ((0.0,), *((*row, gamma) for row in implicit), (*b[:-1], gamma))
    return ImexTableau(
        name=name, c=(0.0, *c), explicit=((), *explicit),
        implicit=implicit_rows[:s], b_explicit=b, b_implicit=b,
        b_hat_explicit=b_hat, b_hat_implicit=b_hat, order=order, embedded_order=order - 1,
        dense=dense, dense_order=min(order - 1, 3),
    )  # fmt: skip


# fmt: off
_G3 = 1767732205903 / 4055673282236
KENCARP3 = _kencarp(
    "ARK3(2)4L[2]SA", _G3,
    c=(2 * _G3, 3 / 5, 1.0),
    explicit=(
        (2 * _G3,),
        (5535828885825 / 10492691773637, 788022342437 / 10882634858940),
        (6485989280629 / 16251701735622, -4246266847089 / 9704473918619,
         10755448449292 / 10357097424841),
    ),
    implicit=(
        (_G3,),
        (2746238789719 / 10658868560708, -640167445237 / 6845629431997),
    ),
    b=(1471266399579 / 7840856788654, -4482444167858 / 7529755066697,
       11266239266428 / 11593286722821, _G3),
    b_hat=(2756255671327 / 12835298489170, -10771552573575 / 22201958757719,
           9247589265047 / 10645013368117, 2193209047091 / 5459859503100),
    order=3,
    dense=(
        (4655552711362 / 22874653954995, -215264564351 / 13552729205753),
        (-18682724506714 / 9892148508045, 17870216137069 / 13817060693119),
        (34259539580243 / 13192909600954, -28141676662227 / 17317692491321),
        (584795268549 / 6622622206610, 2508943948391 / 7218656332882),
    ),
)
"""Kennedy & Carpenter's ARK3(2)4L[2]SA: 4 stages, order 3 (embedded 2), L-stable
stiffly accurate ESDIRK part, second-order dense output."""

_G4 = 1 / 4
KENCARP4 = _kencarp(
    "ARK4(3)6L[2]SA", _G4,
    c=(1 / 2, 83 / 250, 31 / 50, 17 / 20, 1.0),
    explicit=(
        (1 / 2,),
        (13861 / 62500, 6889 / 62500),
        (-116923316275 / 2393684061468, -2731218467317 / 15368042101831,
         9408046702089 / 11113171139209),
        (-451086348788 / 2902428689909, -2682348792572 / 7519795681897,
         12662868775082 / 11960479115383, 3355817975965 / 11060851509271),
        (647845179188 / 3216320057751, 73281519250 / 8382639484533,
         552539513391 / 3454668386233, 3354512671639 / 8306763924573, 4040 / 17871),
    ),
    implicit=(
        (_G4,),
        (8611 / 62500, -1743 / 31250),
        (5012029 / 34652500, -654441 / 2922500, 174375 / 388108),
        (15267082809 / 155376265600, -71443401 / 120774400, 730878875 / 902184768,
         2285395 / 8070912),
    ),
    b=(82889 / 524892, 0.0, 15625 / 83664, 69875 / 102672, -2260 / 8211, _G4),
    b_hat=(4586570599 / 29645900160, 0.0, 178811875 / 945068544, 814220225 / 1159782912,
           -3700637 / 11593932, 61727 / 225920),
    order=4,
    dense=(
        (6943876665148 / 7220017795957, -54480133 / 30881146,
         6818779379841 / 7100303317025),
        (0.0, 0.0, 0.0),
        (7640104374378 / 9702883013639, -11436875 / 14766696,
         2173542590792 / 12501825683035),
        (-20649996744609 / 7521556579894, 174696575 / 18121608,
         -31592104683404 / 5083833661969),
        (8854892464581 / 2390941311638, -12120380 / 966161,
         61146701046299 / 7138195549469),
        (-11397109935349 / 6675773540249, 3843 / 706, -17219254887155 / 4939391667607),
    ),
)
"""Kennedy & Carpenter's ARK4(3)6L[2]SA: 6 stages, order 4 (embedded 3), L-stable
stiffly accurate ESDIRK part, third-order dense output."""

_G5 = 41 / 200
KENCARP5 = _kencarp(
    "ARK5(4)8L[2]SA", _G5,
    c=(41 / 100, 2935347310677 / 11292855782101, 1426016391358 / 7196633302097,
       92 / 100, 24 / 100, 3 / 5, 1.0),
    explicit=(
        (41 / 100,),
        (367902744464 / 2072280473677, 677623207551 / 8224143866563),
        (1268023523408 / 10340822734521, 0.0, 1029933939417 / 13636558850479),
        (14463281900351 / 6315353703477, 0.0, 66114435211212 / 5879490589093,
         -54053170152839 / 4284798021562),
        (14090043504691 / 34967701212078, 0.0, 15191511035443 / 11219624916014,
         -18461159152457 / 12425892160975, -281667163811 / 9011619295870),
        (19230459214898 / 13134317526959, 0.0, 21275331358303 / 2942455364971,
         -38145345988419 / 4862620318723, -1 / 8, -1 / 8),
        (-19977161125411 / 11928030595625, 0.0, -40795976796054 / 6384907823539,
         177454434618887 / 12078138498510, 782672205425 / 8267701900261,
         -69563011059811 / 9646580694205, 7356628210526 / 4942186776405),
    ),
    implicit=(
        (_G5,),
        (41 / 400, -567603406766 / 11931857230679),
        (683785636431 / 9252920307686, 0.0, -110385047103 / 1367015193373),
        (3016520224154 / 10081342136671, 0.0, 30586259806659 / 12414158314087,
         -22760509404356 / 11113319521817),
        (218866479029 / 1489978393911, 0.0, 638256894668 / 5436446318841,
         -1179710474555 / 5321154724896, -60928119172 / 8023461067671),
        (1020004230633 / 5715676835656, 0.0, 25762820946817 / 25263940353407,
         -2161375909145 / 9755907335909, -211217309593 / 5846859502534,
         -4269925059573 / 7827059040749),
    ),
    b=(-872700587467 / 9133579230613, 0.0, 0.0, 22348218063261 / 9555858737531,
       -1143369518992 / 8141816002931, -39379526789629 / 19018526304540,
       32727382324388 / 42900044865799, _G5),
    b_hat=(-975461918565 / 9796059967033, 0.0, 0.0, 78070527104295 / 32432590147079,
           -548382580838 / 3424219808633, -33438840321285 / 15594753105479,
           3629800801594 / 4656183773603, 4035322873751 / 18575991585200),
    order=5,
    dense=(
        (-17674230611817 / 10670229744614, 43486358583215 / 12773830924787,
         -9257016797708 / 5021505065439),
        (0.0, 0.0, 0.0),
        (0.0, 0.0, 0.0),
        (65168852399939 / 7868540260826, -91478233927265 / 11067650958493,
         26096422576131 / 11239449250142),
        (15494834004392 / 5936557850923, -79368583304911 / 10890268929626,
         92396832856987 / 20362823103730),
        (-99329723586156 / 26959484932159, -12239297817655 / 9152339842473,
         30029262896817 / 10175596800299),
        (-19024464361622 / 5461577185407, 115839755401235 / 10719374521269,
         -26136350496073 / 3983972220547),
        (-6511271360970 / 6095937251113, 5843115559534 / 2180450260947,
         -5289405421727 / 3760307252460),
    ),
)
"""Kennedy & Carpenter's ARK5(4)8L[2]SA: 8 stages, order 5 (embedded 4), L-stable
stiffly accurate ESDIRK part, third-order dense output."""

SIL3 = ImexTableau(
    name="SIL3",
    c=(0.0, 1 / 3, 2 / 3, 1.0),
    explicit=((), (1 / 3,), (1 / 6, 1 / 2), (1 / 2, -1 / 2, 1.0)),
    implicit=((0.0,), (1 / 6, 1 / 6), (1 / 3, 0.0, 1 / 3), (3 / 8, 0.0, 3 / 8, 1 / 4)),
    b_explicit=(1 / 2, -1 / 2, 1.0, 0.0),
    b_implicit=(3 / 8, 0.0, 3 / 8, 1 / 4),
    b_hat_explicit=(1 / 2, -1.0, 2.0, -1 / 2),
    b_hat_implicit=(1 / 4, 0.0, 3 / 4, 0.0),
    order=2,
    embedded_order=2,
)
# fmt: on
"""Whitaker & Kar's IMEX method (diffrax's `Sil3`): 4 stages, the last ending the step;
order 2 (its explicit part alone is also of order 2 only: `sum_i b_i c_i^2 = 7/18`), an
embedded pair of order 2 too, so the error estimate is of the error's own order; cubic
Hermite dense output."""
