"""fast-reid's model zoo as catalogue entries: BoT, AGW, SBS and MGN on people, and the vehicle models.

Every file and number below is the one fast-reid's MODEL_ZOO.md publishes (``SOURCE``; R-1 / mAP /
mINP in percent, one V100, no re-ranking). Its ResNeSt (S50) models are left out: this toolkit has
no ResNeSt backbone. MGN on MSMT17 has no published file.

The person files were uploaded to the v0.1.1 release in July/August 2020, with fast-reid's v0.x key
names (``heads.bnneck.*``, ``heads.classifier.weight``, ``b1_pool.*`` for MGN, the pixel statistics in
the state) and the padded stem max pool fast-reid used until 2020-08-14: their configs
(``*_fastreid_zoo.yml``) set ``MODEL.BACKBONE.STEM_POOL pad`` and, for MGN, the conv + BN + ReLU
reduction of that time. One person file came later (MSMT17 SBS R101-ibn, 2020-08-31, with new
numbers): its config keeps the ceil-mode pool of the code of that date. The vehicle files were added
on 2021-01-27, after that change, and use the shipped vehicle configs as they are.

Each entry is a dict of :class:`reid.hub.catalogue.HubEntry` fields (the catalogue builds the
entries, so the two modules do not import each other).
"""
from __future__ import annotations

from typing import Any, Dict, Tuple

SOURCE = "https://github.com/JDAI-CV/fast-reid/blob/master/MODEL_ZOO.md"
RELEASE = "https://github.com/JDAI-CV/fast-reid/releases/download/v0.1.1/"

#: fast-reid's file prefix -> (our config folder, dataset name).
_PERSON_SETS = {"market": ("Market1501", "Market-1501"), "duke": ("DukeMTMC", "DukeMTMC-reID"),
                "msmt": ("MSMT17", "MSMT17")}
#: fast-reid's backbone tag -> (the tag in our names, the backbone part of our config names).
_BACKBONES = {"R50": ("r50", "resnet50"), "R50-ibn": ("r50_ibn", "resnet50_ibn"),
              "R101-ibn": ("r101_ibn", "resnet101_ibn")}
#: (file prefix, model, backbone tag, R-1, mAP, mINP), in MODEL_ZOO.md's order.
_PERSON = (
    ("market", "bot", "R50", 94.4, 86.1, 59.4), ("market", "bot", "R50-ibn", 94.9, 87.6, 64.1),
    ("market", "bot", "R101-ibn", 95.4, 88.9, 67.4),
    ("market", "agw", "R50", 95.3, 88.2, 66.3), ("market", "agw", "R50-ibn", 95.1, 88.7, 67.1),
    ("market", "agw", "R101-ibn", 95.5, 89.5, 69.5),
    ("market", "sbs", "R50", 95.4, 88.2, 64.8), ("market", "sbs", "R50-ibn", 95.7, 89.3, 67.5),
    ("market", "sbs", "R101-ibn", 96.3, 90.3, 70.0),
    ("market", "mgn", "R50-ibn", 95.8, 89.8, 67.7),
    ("duke", "bot", "R50", 87.2, 77.0, 42.1), ("duke", "bot", "R50-ibn", 89.3, 79.6, 45.2),
    ("duke", "bot", "R101-ibn", 91.2, 81.2, 47.5),
    ("duke", "agw", "R50", 89.0, 79.9, 46.1), ("duke", "agw", "R50-ibn", 90.5, 80.8, 47.6),
    ("duke", "agw", "R101-ibn", 91.7, 82.3, 50.0),
    ("duke", "sbs", "R50", 90.3, 80.3, 46.5), ("duke", "sbs", "R50-ibn", 90.8, 81.2, 47.0),
    ("duke", "sbs", "R101-ibn", 91.9, 83.6, 51.5),
    ("duke", "mgn", "R50-ibn", 91.1, 82.0, 46.8),
    ("msmt", "bot", "R50", 74.1, 50.2, 10.4), ("msmt", "bot", "R50-ibn", 77.0, 54.4, 12.5),
    ("msmt", "bot", "R101-ibn", 81.0, 59.4, 15.6),
    ("msmt", "agw", "R50", 78.3, 55.6, 12.9), ("msmt", "agw", "R50-ibn", 81.2, 59.7, 15.3),
    ("msmt", "agw", "R101-ibn", 82.0, 61.4, 17.3),
    ("msmt", "sbs", "R50", 81.8, 58.4, 13.9), ("msmt", "sbs", "R50-ibn", 83.9, 60.6, 15.2),
    ("msmt", "sbs", "R101-ibn", 84.8, 62.8, 16.3),
)
_NOTES = {
    "bot": "BoT (bag of tricks): average pooling, BNNeck, test feature after the neck.",
    "agw": "AGW: non-local blocks, GeM pooling with a learned p, BNNeck, test feature after the neck, 256x128.",
    "sbs": "SBS (stronger baseline): non-local blocks, GeM pooling with a learned p, BNNeck, 384x128.",
    "mgn": "MGN: 8 features of 256 (3 global, 5 stripes), each reduced by conv + BN + ReLU and a BNNeck.",
}
_STEM = ("Uploaded July/August 2020 (v0.x key names): the config sets MODEL.BACKBONE.STEM_POOL pad, the "
         "stem pool of fast-reid's code then; if measured numbers fall clearly short, try STEM_POOL ceil.")
_STEM_LATE = ("Uploaded 2020-08-31 with new numbers, after fast-reid's ceil-mode stem pool (2020-08-14): the "
              "config keeps STEM_POOL ceil; if measured numbers fall clearly short, try STEM_POOL pad.")


def _person(prefix: str, model: str, tag: str, r1: float, m_ap: float, minp: float) -> Dict[str, Any]:
    folder, dataset = _PERSON_SETS[prefix]
    short, backbone = _BACKBONES[tag]
    filename = f"{prefix}_{model}_{tag}.pth"
    late = (prefix, model, tag) == ("msmt", "sbs", "R101-ibn")
    return dict(name=f"fastreid/{prefix}_{model}_{short}", family=model, format="fastreid",
                config=f"configs/{folder}/{model}_{backbone}_fastreid_zoo.yml", filename=filename,
                urls=(RELEASE + filename,), dataset=dataset, reported={"R-1": r1, "mAP": m_ap, "mINP": minp},
                source=SOURCE, notes=f"{_NOTES[model]} {_STEM_LATE if late else _STEM}")


_VEHICLE_NOTE = "Uploaded 2021-01-27, after fast-reid's ceil-mode stem pool (as the config)."
#: The vehicle models: (name, file, config, dataset, reported numbers, notes).
_VEHICLES = (
    ("fastreid/veri_sbs_r50_ibn", "veri_sbs_R50-ibn.pth", "configs/VeRi/sbs_resnet50_ibn.yml", "VeRi-776",
     {"R-1": 97.0, "mAP": 81.9, "mINP": 46.3},
     "SBS R50-ibn at 256x256. " + _VEHICLE_NOTE),
    ("fastreid/vehicleid_bot_r50_ibn", "vehicleid_bot_R50-ibn.pth", "configs/VehicleID/bot_resnet50_ibn.yml",
     "VehicleID", {"R-1": 86.6, "R-5": 97.9, "medium R-1": 82.9, "medium R-5": 96.0, "large R-1": 80.6,
                   "large R-5": 93.9},
     "BoT R50-ibn at 256x256, fixed-p GeM. R-1 / R-5 on the small test set (the config's, 800 vehicles); "
     "DATASETS.VEHICLEID.TEST_SIZE 1600 / 2400 for medium / large; trained on 4 P40 GPUs. " + _VEHICLE_NOTE),
    ("fastreid/veriwild_bot_r50_ibn", "veriwild_bot_R50-ibn.pth", "configs/VERIWild/bot_resnet50_ibn.yml",
     "VERI-Wild", {"R-1": 96.4, "mAP": 87.7, "mINP": 69.2, "medium R-1": 95.1, "medium mAP": 83.5,
                   "medium mINP": 61.2, "large R-1": 92.5, "large mAP": 77.3, "large mINP": 49.8},
     "BoT R50-ibn at 256x256, fixed-p GeM. Numbers on the small test set (the config's, 3000 vehicles); "
     "DATASETS.VERIWILD.TEST_SIZE 5000 / 10000 for medium / large; trained on 4 P40 GPUs. " + _VEHICLE_NOTE),
)


def _entries() -> Tuple[Dict[str, Any], ...]:
    found = [_person(*row) for row in _PERSON]
    for name, filename, config, dataset, reported, notes in _VEHICLES:
        found.append(dict(name=name, family="vehicle", format="fastreid", config=config, filename=filename,
                          urls=(RELEASE + filename,), dataset=dataset, reported=reported, source=SOURCE,
                          notes=notes))
    return tuple(found)


#: fast-reid's published files, as HubEntry fields.
FASTREID: Tuple[Dict[str, Any], ...] = _entries()

__all__ = ["FASTREID", "RELEASE", "SOURCE"]
