"""What a probing run is asked to do, as frozen values: :class:`ProbeSettings` (how its probes train and are scored)
holding a :class:`DataSettings` (which examples it reads and draws).

:func:`papa.probing.experiment.run_probes` takes one, with keyword overrides by field name
(``run_probes(lm, "sst2", seeds=[42, 43], max_train_examples=500)``: :meth:`ProbeSettings.with_options` puts each
name where it belongs). The defaults are the paper's probe (lr 2e-5, 15 epochs, the final epoch reported).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from papa.core.errors import PapaError


@dataclass(frozen=True)
class DataSettings:
    """Which examples a run reads and how its probes draw from them.

    ``max_length``/``relayout``: the encoder's input layout; ``max_train_examples``/``max_eval_examples``: a seeded
    subset (``data_seed``; None: the whole split); ``data_dir``: the local task folder (None: ``$PAPA_DATA_DIR``,
    else the hub). With ``pool_examples``, features are extracted once for a pool from which each probe seed draws
    its own ``max_train_examples`` + ``heldout_examples``; without, ``selection="heldout"`` holds out a seeded
    ``heldout_fraction`` of the training subset."""

    max_length: int = 64
    relayout: bool = True
    max_train_examples: int | None = 1000
    max_eval_examples: int | None = None
    data_seed: int = 0
    data_dir: str | None = None
    pool_examples: int | None = None
    heldout_examples: int | None = None
    heldout_fraction: float = 0.1


@dataclass(frozen=True)
class ProbeSettings:
    """How the probes of one run train and are scored, one probe per ``(lr, seed)`` of ``lrs × seeds`` (``lrs``
    None: ``[lr]``).

    ``mode``: ``cached`` features (extracted once, eval mode) or ``faithful`` (the live encoder, train mode);
    ``replacement``: what replaces the constant heads (:data:`papa.core.replacements.REPLACEMENT_TABLE`);
    ``probe_input``: ``all`` hidden states or ``embeddings`` only (the attention-free floor); ``selection``: the
    reported epoch, ``final`` or the best ``heldout`` one; ``patience``: early stopping on the held-out score
    (``epochs`` the cap); ``dev_every_epoch=False``: the dev split scored once, by the reported probe;
    ``score_dev=False``: never (lr selection); ``eval_chunk_examples``: scored that many examples at a time;
    ``use_cache``: read and write the on-disk feature cache."""

    mode: str = "cached"
    replacement: str = "papa"
    seeds: tuple[int, ...] = (42,)
    lr: float = 2e-5
    lrs: tuple[float, ...] | None = None
    epochs: int = 15
    batch_size: int = 16
    probe_input: str = "all"
    selection: str = "final"
    patience: int | None = None
    dev_every_epoch: bool = True
    score_dev: bool = True
    eval_chunk_examples: int | None = None
    use_cache: bool = True
    data: DataSettings = field(default_factory=DataSettings)

    def __post_init__(self) -> None:
        object.__setattr__(self, "seeds", tuple(self.seeds))  # a list is accepted, kept as a tuple
        if self.lrs is not None:
            object.__setattr__(self, "lrs", tuple(self.lrs))

    @property
    def rates(self) -> tuple[float, ...]:
        """The lrs tried, in order: ``lrs``, else ``(lr,)``."""
        return self.lrs if self.lrs is not None else (self.lr,)

    def with_options(self, **options: object) -> ProbeSettings:
        """A copy with ``options`` replaced, each by its field name, whether it is a :class:`ProbeSettings` or a
        :class:`DataSettings` field (``data=`` replaces the data settings whole)."""
        own, data = _names(ProbeSettings), _names(DataSettings)
        unknown = sorted(set(options) - own - data)
        if unknown:
            raise PapaError(
                f"Unknown probe option{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}",
                f"Use fields of ProbeSettings ({', '.join(sorted(own))}) or DataSettings ({', '.join(sorted(data))}).",
            )
        base = dataclasses.replace(self, **{k: v for k, v in options.items() if k in own})
        data_options = {k: v for k, v in options.items() if k in data}
        return dataclasses.replace(base, data=dataclasses.replace(base.data, **data_options)) if data_options else base


def _names(kind: type) -> set[str]:
    return {f.name for f in dataclasses.fields(kind)}


def one_seed(settings: ProbeSettings, seed: int | None) -> ProbeSettings:
    """``settings`` for one probe seed: ``seed``, else the settings' only seed."""
    if seed is not None:
        return dataclasses.replace(settings, seeds=(seed,))
    if len(settings.seeds) != 1:
        fix = "Pass seed=..., or call run_probes for several seeds."
        raise PapaError(f"run_probe trains one seed, and the settings hold {len(settings.seeds)}", fix)
    return settings
