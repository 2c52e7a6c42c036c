"""What every foreign checkpoint format provides, and the steps they share.

A format (one module per toolkit: ``fastreid.py``, ``torchreid.py``) recognises its state
dicts by their key names, maps them onto this toolkit's model strictly, and says which
config settings a file needs. It is registered in ``formats/__init__.py`` as a
:class:`WeightsFormat`; loading code asks the registry, never a format by name.

The mapping itself is :func:`map_state`: a format gives it a rename function (usually a table
of ``(pattern, replacement)`` rules, :func:`rename_by_rules`, whose replacements are our key
names or :class:`Target` entries for the special cases: identity classifiers, tensors that are
pieces of one of ours, tensors to reshape or transpose, tensors dropped with a note) and the
one-line error it raises (:func:`refusal`); the walk, the per-key check (:func:`misfit`), the
classifier and the report of our tensors left unfilled are the same for every format.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Callable, Dict, List, Mapping, MutableMapping, Optional, Sequence, Tuple, Type, Union

import torch
from torch import nn

from reid.config.sie_keys import sie_prefix

from ..backbones.pos_embed import patch_grid
from ..state_fit import misfit, part_of

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
    plus {"local_heads.i.": ...} (TransReID's JPM branches) and {"proj_head.": ...} (CLIP-ReID's
    head on the projected feature)."""
    found: Dict[str, nn.Module] = {}
    for attr in ("head", "proj_head"):
        head = getattr(model, attr, None)
        if isinstance(head, nn.Module):
            found[f"{attr}."] = head
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


def settings_text(settings: Mapping[str, object]) -> str:
    """Config settings as command-line overrides: ``"KEY VALUE KEY VALUE ..."``."""
    return " ".join(f"{k} {format_value(v)}" for k, v in settings.items())


def classifier_rows(state: Mapping[str, torch.Tensor], *keys: str) -> int:
    """Classes of a file's identity classifier: the rows of the first of `keys` it has (0: none)."""
    for key in keys:
        if key in state:
            return int(state[key].shape[0])
    return 0


def refusal(error: Type[ForeignWeightsError], label: str, source: str, description: str, what: str,
            needs: str = "") -> ForeignWeightsError:
    """The one-line refusal of a file that does not fit: ``"<label> checkpoint <source> (<description>)
    does not fit this model: <what>. It needs <needs>."`` (the last sentence only with `needs`)."""
    where = f"{label} checkpoint {source}" if source else f"{label} checkpoint"
    return error(f"{where} ({description}) does not fit this model: {what}." + (f" It needs {needs}." if needs else ""))


def vit_description(settings: Mapping[str, object]) -> List[str]:
    """The parts of a ViT file's one-line description that its settings give: the backbone name,
    the patch stride and SIE's camera count (TransReID's and CLIP-ReID's formats)."""
    what = [str(settings["MODEL.BACKBONE.NAME"])]
    node = sie_prefix(what[0])
    if f"{node}.STRIDE_SIZE" in settings:
        what.append(f"stride {settings[f'{node}.STRIDE_SIZE'][0]}")
    if settings.get(f"{node}.SIE_CAMERA"):
        what.append(f"SIE {settings[f'{node}.NUM_CAMERAS']} cameras")
    return what


def vit_settings(settings: MutableMapping[str, object], node: str, positions: int, sizes: Sequence[Tuple[int, int]],
                 strides: Sequence[int], sie: Optional[torch.Tensor], patch: int = 16, stride: bool = True) -> None:
    """Add a ViT file's input size, patch stride and SIE settings (config node `node`) to `settings`:
    the first of `sizes` and `strides` whose grid of `patch`-pixel patches has `positions` cells (none
    when no size has; `stride` False: the size alone), and SIE's camera count, the rows of `sie`."""
    found = next(((size, s) for size in sizes for s in strides
                  if math.prod(patch_grid(size, patch, s)) == positions), None)
    if found:
        settings["INPUT.SIZE_TRAIN"] = list(found[0])
        settings["INPUT.SIZE_TEST"] = list(found[0])
        if stride:
            settings[f"{node}.STRIDE_SIZE"] = [found[1], found[1]]
    settings[f"{node}.SIE_CAMERA"] = sie is not None
    if sie is not None:
        settings[f"{node}.NUM_CAMERAS"] = int(sie.shape[0])


# ------------------------------------------------------------------ key mapping
@dataclass(frozen=True)
class Target:
    """Where one tensor of a foreign file goes (what a format's rename function returns).

    Attributes:
        key: our key; "" when the tensor is not loaded (see `note`).
        head: part of the file's identity classifier: loaded by :func:`place_classifier`
            when the model's heads take it, else dropped with a note.
        part: which of the pieces (`pieces`) of our tensor this tensor is, when our tensor is
            their concatenation along dim 0 (fast-reid's 8 per-feature BatchNorms in our one
            neck; q, k, v in one fused qkv projection).
        pieces: the names of all the pieces, in order ("b1", "b2", ...; "q", "k", "v").
        whole: what the pieces are, for the message naming a missing one ("per-feature BatchNorms").
        adapt: ``adapt(value, ours)`` -> the file's tensor in our layout (a transpose, a reshape),
            before the shape check; ``ours`` is the model's tensor.
        note: with an empty `key`: why the tensor is not loaded (one note per distinct text; ""
            drops it silently).
    """

    key: str
    head: bool = False
    part: int = 0
    pieces: Tuple[str, ...] = ()
    whole: str = "pieces"
    adapt: Optional[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = None
    note: str = ""


def dropped(note: str = "") -> Target:
    """A :class:`Target` for a tensor that is not loaded, with the note that says why."""
    return Target("", note=note)


Rename = Callable[[str], Union[str, Target, None]]
#: A rule's replacement: a template of our key (``re.Match.expand``: ``r"neck.\1"``), a Target whose
#: key is such a template, or a function of the match giving our key or a Target (None: no counterpart).
Replacement = Union[str, Target, Callable[[re.Match], Union[str, Target, None]]]


def rename_by_rules(rules: Sequence[Tuple[str, Replacement]]) -> Callable[[str], Optional[Target]]:
    r"""A rename function from a table of ``(pattern, replacement)`` rules: the first pattern that
    matches the whole key gives its replacement (see ``Replacement``); no match: None (the key
    has no counterpart here).

    E.g. ``[(r"classifier\.(.+)", Target(r"head.\1", head=True)), (r"fc\.(.+)", r"embedding.\1"),
    (r".+", r"backbone.\g<0>")]``.
    """
    compiled = [(re.compile(pattern), replacement) for pattern, replacement in rules]

    def rename(key: str) -> Optional[Target]:
        for pattern, replacement in compiled:
            match = pattern.fullmatch(key)
            if match is None:
                continue
            if isinstance(replacement, Target):
                return replace(replacement, key=match.expand(replacement.key)) if replacement.key else replacement
            if isinstance(replacement, str):
                return Target(match.expand(replacement))
            return as_target(replacement(match))
        return None

    return rename


def as_target(found: Union[str, Target, None]) -> Optional[Target]:
    """A rename function's answer as a :class:`Target` (a plain string is our key)."""
    return Target(found) if isinstance(found, str) else found


def keep_counters(key: str, ours: torch.Tensor) -> Optional[str]:
    """The default of :func:`map_state`'s `keep`: a BatchNorm's step counter the file lacks (files of
    torch < 0.4.1) keeps the model's, silently; any other tensor of ours must come from the file."""
    return "" if key.endswith("num_batches_tracked") else None


def _add_note(result: ConvertedWeights, note: str) -> None:
    if note and note not in result.notes:
        result.notes.append(note)


def map_state(state: State, model: nn.Module, rename: Rename, fail: Callable[[str], ForeignWeightsError],
              result: ConvertedWeights, *, unmapped: str = "this model",
              keep: Callable[[str, torch.Tensor], Optional[str]] = keep_counters,
              fill_kept: bool = True) -> ConvertedWeights:
    """Map the foreign state dict `state` onto `model` strictly, into `result` (which names the format).

    Every tensor of the file is renamed (`rename`: our key, a :class:`Target`, or None), checked
    (:func:`misfit`) and placed in ``result.state`` with its ``(foreign key, our key)`` pair in
    ``result.mapping``; pieces of one of our tensors are concatenated; the identity classifier is
    loaded or dropped with a note (:func:`place_classifier`). Each of our tensors (bar the
    identity heads) must come from the file, unless ``keep(key, ours)`` gives a note for it ("" for
    none): then it keeps the model's value (put into ``result.state`` with `fill_kept`).

    Args:
        fail: builds the format's one-line error from what does not fit (:func:`refusal`).
        unmapped: what a key the rename has no rule for has no counterpart in ("this toolkit's MGN").

    Raises:
        ForeignWeightsError: from `fail`, naming the first key (in file order) that does not fit,
        or the first of our tensors the file does not fill.
    """
    own = model.state_dict()
    classifier: Dict[str, Tuple[str, torch.Tensor]] = {}
    collected: Dict[str, List[Optional[torch.Tensor]]] = {}
    wholes: Dict[str, Target] = {}
    for key, value in state.items():
        if not isinstance(value, torch.Tensor):
            raise fail(f"{key} is not a tensor")
        target = as_target(rename(key))
        if target is None:
            raise fail(misfit(key, value, None, own, model=unmapped))
        if not target.key:
            _add_note(result, target.note)
            continue
        if target.head:
            classifier[target.key] = (key, value)
            continue
        if target.adapt is not None and target.key in own:
            value = target.adapt(value, own[target.key])
        part = (target.part, len(target.pieces)) if target.pieces else None
        problem = misfit(key, value, target.key, own, part=part)
        if problem:
            raise fail(problem)
        if part is None:
            result.state[target.key] = value
            result.mapping.append((key, target.key))
            continue
        collected.setdefault(target.key, [None] * part[1])[part[0]] = value
        wholes[target.key] = target
        result.mapping.append((key, part_of(target.key, own[target.key], part)[0]))
    for key, pieces in collected.items():
        if any(p is None for p in pieces):
            absent = wholes[key].pieces[pieces.index(None)]
            raise fail(f"{key} needs all {len(pieces)} {wholes[key].whole} but {absent}'s is missing")
        # A 0-d tensor (a BatchNorm's step counter) is the same in every piece.
        result.state[key] = pieces[0].clone() if own[key].dim() == 0 else torch.cat(pieces)
    head_prefixes = tuple(head_modules(model))
    for key, value in own.items():
        if key in result.state or (head_prefixes and key.startswith(head_prefixes)):
            continue
        note = keep(key, value)
        if note is None:
            raise fail(f"this model's {key} has no counterpart in the checkpoint")
        _add_note(result, note)
        if fill_kept:
            result.state[key] = value
    place_classifier(model, classifier, own, result, result.label)
    return result


def mapping_table(mapping: Sequence[Tuple[str, str]]) -> str:
    """The key mapping as aligned text, one ``foreign key -> our key`` per line."""
    width = max((len(a) for a, _ in mapping), default=0)
    return "\n".join(f"{a.ljust(width)} -> {b}" for a, b in mapping)


__all__ = [
    "ConvertedWeights",
    "ForeignWeightsError",
    "Rename",
    "Replacement",
    "State",
    "Target",
    "WeightsFormat",
    "as_target",
    "classifier_rows",
    "dropped",
    "format_value",
    "head_modules",
    "keep_counters",
    "map_state",
    "mapping_table",
    "misfit",
    "part_of",
    "place_classifier",
    "refusal",
    "rename_by_rules",
    "settings_text",
    "vit_description",
    "vit_settings",
]
