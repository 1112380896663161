"""The one table of replacement modes (:data:`REPLACEMENT_TABLE`): what replaces a constant head, by name.

The config schema (:data:`papa.core.fields.Replacement`), the command line's choices, the patch
(:mod:`papa.core.head_patch`) and the probe's protocol text read it; ``papa`` is the paper's constant, the others are
its controls (uniform attention, a zero output, the head's mean output per position). The module imports nothing (no
torch): every layer may read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class Replacement:
    """What a replaced head outputs: ``o_h = rownorm(M_h ⊙ m mᵀ) V_h + m ⊙ μ_h`` (``[B, L, d]``).

    Attributes:
        matrix: ``M_h [L, L]`` — ``"constants"``: the estimated ``C_h`` (PAPA); ``"ones"``: uniform over the real
            tokens (the mean of their ``V``); ``"zeros"``: the ``V`` term is 0.
        stored_output: add ``μ_h [L, d]`` (``ConstantSet.output_means``); else ``μ = 0``.
        words: what the replaced heads are, in the protocol's words (``"replaced by uniform attention"``).
    """

    name: str
    matrix: Literal["constants", "ones", "zeros"]
    words: str
    stored_output: bool = False

    def matrices(self, constants: Any) -> Any:
        """``M`` for one layer's replaced heads, from their estimated constants (a tensor ``[n, L, L]``) → ``[n, L, L]``
        (same dtype and device)."""
        if self.matrix == "constants":
            return constants
        return constants.new_ones(constants.shape) if self.matrix == "ones" else constants.new_zeros(constants.shape)


#: name → replacement, in the order every listing uses.
REPLACEMENT_TABLE: dict[str, Replacement] = {
    entry.name: entry
    for entry in (
        Replacement("papa", "constants", "constant"),
        Replacement("uniform", "ones", "replaced by uniform attention"),
        Replacement("zero", "zeros", "replaced by zero"),
        Replacement("mean", "zeros", "replaced by their mean outputs", stored_output=True),
    )
}
REPLACEMENTS: tuple[str, ...] = tuple(REPLACEMENT_TABLE)
