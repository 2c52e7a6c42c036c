"""Meta architectures: ``META_ARCH`` registry keyed by ``MODEL.META_ARCHITECTURE``.

Every entry is a class taking the config; instances follow the model contract in
docs/architecture.md (train: weighted loss dict, ``last_stats``; eval: ``[B, D]``) and
expose ``feature_dim``.
"""
from reid.utils.registry import Registry

from .baseline import Baseline
from .clipreid import ClipReID
from .mgn import MGN
from .transreid import TransReID

META_ARCH = Registry("MODEL.META_ARCHITECTURE")
META_ARCH.register("baseline")(Baseline)
META_ARCH.register("mgn")(MGN)
META_ARCH.register("transreid")(TransReID)
META_ARCH.register("clipreid")(ClipReID)

__all__ = ["META_ARCH", "Baseline", "ClipReID", "MGN", "TransReID"]
