"""Meta architectures: ``META_ARCH_REGISTRY``, keyed by ``MODEL.META_ARCHITECTURE``.

Every entry is a class taking the config; instances follow the model contract in
docs/architecture.md (train: weighted loss dict, ``last_stats``; eval: ``[B, D]``) and
expose ``feature_dim``.
"""
from reid.utils.registry import Registry

from .baseline import Baseline
from .clipreid import ClipReID
from .mgn import MGN
from .transreid import TransReID

META_ARCH_REGISTRY = Registry("MODEL.META_ARCHITECTURE")
META_ARCH_REGISTRY.register("baseline")(Baseline)
META_ARCH_REGISTRY.register("mgn")(MGN)
META_ARCH_REGISTRY.register("transreid")(TransReID)
META_ARCH_REGISTRY.register("clipreid")(ClipReID)

__all__ = ["META_ARCH_REGISTRY", "Baseline", "ClipReID", "MGN", "TransReID"]
