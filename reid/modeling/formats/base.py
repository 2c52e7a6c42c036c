"""What every foreign checkpoint format provides, and the steps they share.

A format (one module per toolkit: ``fastreid.py``, ``torchreid.py``) recognises its state
dicts by their key names, maps them onto this toolkit's model strictly, and says which
config settings a file needs. It is registered in ``formats/__init__.py`` as a
:class:`WeightsFormat`; loading code asks the registry, never a format by name.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Sequence, Tuple

import torch
from torch import nn

State = Mapping[str, torch.Tensor]


class ForeignWeightsError(ValueError):
    """A foreign checkpoint does not fit the model it is loaded into (one-line message)."""


@dataclass
class ConvertedWeights:
    """A foreign state dict under this toolkit's names.

    Attributes:
        state: tensors under this toolkit's names, ready for ``load_state_dict``.
        mapping: ``(foreign key, our key)`` pairs in file order; a key split over several
            foreign tensors appears once per tensor, as ``name[lo:hi]``.
        notes: what was dropped or assumed, one sentence each.
        head_dropped: the file's identity classifier was not loaded although the model has
            a head (the head keeps its initialisation).
        naming: the format's naming generation, when it has several (fast-reid "v1.x" or "v0.x").
        architecture: what the file holds ("Baseline", "MGN", "osnet_x0_25", ...).
        label: the format's name in messages ("fast-reid", "torchreid").
    """

    state: Dict[str, torch.Tensor]
    mapping: List[Tuple[str, str]] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    head_dropped: bool = False
    naming: str = ""
    architecture: str = ""
    label: str = ""

    @property
    def description(self) -> str:
        """E.g. "fast-reid MGN checkpoint (v0.x naming)" or "torchreid osnet_x0_25 checkpoint"."""
        naming = f" ({self.naming} naming)" if self.naming else ""
        return f"{self.label} {self.architecture} checkpoint{naming}"


@dataclass(frozen=True)
class WeightsFormat:
    """One foreign checkpoint format, as the registry holds it.

    Attributes:
        label: the format's name in messages ("fast-reid").
        detect: whether a state dict (``module.`` prefix already removed) is in this format.
        convert: ``convert(state, model, source)`` -> :class:`ConvertedWeights`; raises a
            :class:`ForeignWeightsError` naming the first key that does not fit.
        suggest_config: the ``KEY VALUE`` settings a state dict needs, with a shipped config.
        classifier_classes: the class count of the file's identity classifier (0: none).
        markers: a few of the key names that identify the format (for messages).
    """

    label: str
    detect: Callable[[Mapping[str, object]], bool]
    convert: Callable[[State, nn.Module, str], ConvertedWeights]
    suggest_config: Callable[[State], str]
    classifier_classes: Callable[[State], int]
    markers: str


def format_value(value: object) -> str:
    """A config value as the command line takes it (lists without spaces)."""
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(str(v) for v in value) + "]"
    return str(value)


def head_modules(model: nn.Module) -> Dict[str, nn.Module]:
    """Our identity heads by state-dict prefix: {"head.": ...} (Baseline), {"heads.i.": ...} (MGN),
    plus {"local_heads.i.": ...} (TransReID's JPM branches)."""
    found: Dict[str, nn.Module] = {}
    head = getattr(model, "head", None)
    if isinstance(head, nn.Module):
        found["head."] = head
    for attr in ("heads", "local_heads"):
        heads = getattr(model, attr, None)
        if isinstance(heads, nn.ModuleList):
            found.update({f"{attr}.{i}.": h for i, h in enumerate(heads)})
    return found


def place_classifier(model: nn.Module, classifier: Dict[str, Tuple[str, torch.Tensor]],
                     own: Mapping[str, torch.Tensor], result: ConvertedWeights, label: str) -> None:
    """Load the file's classifier (``{our key: (their key, tensor)}``) into our head(s) when it fits.

    Otherwise it is dropped with a note (``result.head_dropped`` when the model has a head,
    which then keeps its initialisation); evaluation never needs it.
    """
    heads = head_modules(model)
    if not classifier:
        if heads:
            result.head_dropped = True
            result.notes.append("the checkpoint has no identity classifier; the model's head starts from scratch")
        return
    first = next(iter(classifier.values()))[1]
    parts = len({k.rsplit(".", 1)[0] for k in classifier})  # weight and bias of one head count once
    count = f"{first.shape[0]} classes" if parts == 1 else f"{parts} x {first.shape[0]} classes"
    what = f"{label}'s identity classifier ({count})"
    if not heads:
        result.notes.append(f"{what} not loaded: this model has no identity head (evaluation does not need one)")
        return
    head_keys = {prefix + name for prefix, h in heads.items() for name in h.state_dict()}
    why = ""
    if set(classifier) != head_keys:
        missing, extra = sorted(head_keys - set(classifier)), sorted(set(classifier) - head_keys)
        why = f"the model's heads ({len(heads)}, tensors {', '.join(sorted(head_keys)[:3])}) do not take it"
        if missing:
            why += f" ({missing[0]} has no counterpart)"
        elif extra:
            why += f" ({classifier[extra[0]][0]} has no counterpart in the model)"
        if getattr(model, "layout", None) == "concat":
            why += "; MODEL.MGN.LOSS_LAYOUT per_branch would load it"
    else:
        bad = [k for k, (_, v) in classifier.items() if tuple(own[k].shape) != tuple(v.shape)]
        if bad:
            why = (f"the model's head has {own[bad[0]].shape[0]} classes (MODEL.HEADS.NUM_CLASSES), "
                   f"the checkpoint's {classifier[bad[0]][1].shape[0]}")
    if why:
        result.head_dropped = True
        result.notes.append(f"{what} dropped: {why}; the model's head starts from scratch")
        return
    for ours, (theirs, value) in classifier.items():
        result.state[ours] = value
        result.mapping.append((theirs, ours))


def misfit(key: str, value: torch.Tensor, target: str, own: Mapping[str, torch.Tensor]) -> str:
    """Why the file's tensor `key` cannot become the model's `target` ("" when it can)."""
    if target not in own:
        return f"{key} has no counterpart in this model (no {target})"
    if value.shape != own[target].shape:
        return (f"{key} has shape {tuple(value.shape)} in the checkpoint but {target} has "
                f"{tuple(own[target].shape)} in this model")
    return ""


def mapping_table(mapping: Sequence[Tuple[str, str]]) -> str:
    """The key mapping as aligned text, one ``foreign key -> our key`` per line."""
    width = max((len(a) for a, _ in mapping), default=0)
    return "\n".join(f"{a.ljust(width)} -> {b}" for a, b in mapping)


__all__ = [
    "ConvertedWeights",
    "ForeignWeightsError",
    "State",
    "WeightsFormat",
    "format_value",
    "head_modules",
    "mapping_table",
    "misfit",
    "place_classifier",
]
