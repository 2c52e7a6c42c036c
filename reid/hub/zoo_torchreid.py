"""torchreid's model zoo as catalogue entries: the OSNet family (x1.0 / x0.75 / x0.5 / x0.25, IBN, AIN).

Every file, Drive id and number below is the one torchreid's docs/MODEL_ZOO.md publishes
(``SOURCE``): the same-domain table (Market-1501, DukeMTMC-reID, MSMT17), the cross-domain tables
(Market-1501 <-> DukeMTMC-reID; MSMT17 with ``combineall=True`` tested on Market-1501 and
DukeMTMC-reID) and the multi-source domain-generalisation table (three sources, tested on the
fourth). The ImageNet-pretrained backbones of the same page are not re-ID models and are left out;
so are its non-OSNet models (ResNet50, MLFN, HACNN, MobileNetV2), which have no config here.

Each entry is a dict of :class:`reid.hub.catalogue.HubEntry` fields (the catalogue builds the
entries: this module stays below it, so the two do not import each other). ``config`` is the
config whose test set is the one the reported numbers were measured on, so that ``tools/test.py
--weights NAME`` evaluates where the authors did; ``dataset`` is what the file was trained on.
The two known hashes are those of the x0.25 Market-1501 and MSMT17 files of the same-domain table
(their sizes fit 751 and 1,041 identity classes, the training identities of the two sets).
"""
from __future__ import annotations

from typing import Any, Dict, Tuple

SOURCE = "https://github.com/KaiyangZhou/deep-person-reid/blob/master/docs/MODEL_ZOO.md"

#: Our config folder and torchreid's dataset key, by the name used in entry names.
_DATASETS = {
    "market1501": ("Market1501", "Market-1501"),
    "dukemtmcreid": ("DukeMTMC", "DukeMTMC-reID"),
    "msmt17": ("MSMT17", "MSMT17"),
    "cuhk03": ("CUHK03", "CUHK03"),
}
#: Files whose sha256 and size are known.
_HASHES = {
    "osnet_x0_25_market1501": ("c0ff09177a21417a19bc73bbf5af4eb5d2b097c2074ed35e67819ee6cd93612c", 2462783),
    "osnet_x0_25_msmt17": ("6f57607fed9f502b9efed546108132ee715df5a5b6e6932c6269bacb47f59f99", 3057863),
}
_EUCLIDEAN = ("torchreid reports these numbers with Euclidean distance on unnormalised features "
              "(add TEST.METRIC euclidean to compare)")
_COSINE = "torchreid reports OSNet-AIN's numbers with cosine distance (TEST.METRIC cosine, the default)"

#: Same-domain table: (backbone, dataset, Drive id, R-1, mAP).
_SAME_DOMAIN = (
    ("osnet_x1_0", "market1501", "1vduhq5DpN2q1g4fYEZfPI17MJeh9qyrA", 94.2, 82.6),
    ("osnet_x1_0", "dukemtmcreid", "1QZO_4sNf4hdOKKKzKc-TZU9WW1v6zQbq", 87.0, 70.2),
    ("osnet_x1_0", "msmt17", "112EMUfBPYeYg70w-syK6V6Mx8-Qb9Q1M", 74.9, 43.8),
    ("osnet_x0_75", "market1501", "1ozRaDSQw_EQ8_93OUmjDbvLXw9TnfPer", 93.7, 81.2),
    ("osnet_x0_75", "dukemtmcreid", "1IE3KRaTPp4OUa6PGTFL_d5_KQSJbP0Or", 85.8, 69.8),
    ("osnet_x0_75", "msmt17", "1QEGO6WnJ-BmUzVPd3q9NoaO_GsPNlmWc", 72.8, 41.4),
    ("osnet_x0_5", "market1501", "1PLB9rgqrUM7blWrg4QlprCuPT7ILYGKT", 92.5, 79.8),
    ("osnet_x0_5", "dukemtmcreid", "1KoUVqmiST175hnkALg9XuTi1oYpqcyTu", 85.1, 67.4),
    ("osnet_x0_5", "msmt17", "1UT3AxIaDvS2PdxzZmbkLmjtiqq7AIKCv", 69.7, 37.5),
    ("osnet_x0_25", "market1501", "1z1UghYvOTtjx7kEoRfmqSMu-z62J6MAj", 91.2, 75.0),
    ("osnet_x0_25", "dukemtmcreid", "1eumrtiXT4NOspjyEV4j8cHmlOaaCGk5l", 82.0, 61.4),
    ("osnet_x0_25", "msmt17", "1sSwXSUlj4_tHZequ_iZ8w_Jh0VaRQMqF", 61.4, 29.5),
)
#: Cross-domain, one source to one target: (backbone, source, target, Drive id, R-1, R-5, R-10, mAP).
_CROSS_DOMAIN = (
    ("osnet_ibn_x1_0", "market1501", "dukemtmcreid", "1uWW7_z_IcUmRNPqQOrEBdsvic94fWH37", 48.5, 62.3, 67.4, 26.7),
    ("osnet_ain_x1_0", "market1501", "dukemtmcreid", "14bNFGm0FhwHEkEpYKqKiDWjLNhXywFAd", 52.4, 66.1, 71.2, 30.5),
    ("osnet_ibn_x1_0", "dukemtmcreid", "market1501", "1CNxL1IP0BjcE1TSttiVOID1VNipAjiF3", 57.7, 73.7, 80.0, 26.1),
    ("osnet_ain_x1_0", "dukemtmcreid", "market1501", "1hypJvq8G04SOby6jvF337GEkg5K_bmCw", 61.0, 77.0, 82.5, 30.6),
)
#: MSMT17 (train + test identities) to Market-1501 and DukeMTMC-reID:
#: (backbone, Drive id, Market R-1, Market mAP, Duke R-1, Duke mAP).
_MSMT17_ALL = (
    ("osnet_x1_0", "1IosIFlLiulGIjwW3H8uMRmx3MzPwf86x", 66.6, 37.5, 66.0, 45.3),
    ("osnet_x0_75", "1fhjSS_7SUGCioIf2SWXaRGPqIY9j7-uw", 63.6, 35.5, 65.3, 44.5),
    ("osnet_x0_5", "1DHgmb6XV4fwG3n-CnCM0zdL9nMsZ9_RF", 64.3, 34.9, 65.2, 43.3),
    ("osnet_x0_25", "1Kkx2zW89jq_NETu4u42CFZTMVD5Hwm6e", 59.9, 31.0, 61.5, 39.6),
    ("osnet_ibn_x1_0", "1q3Sj2ii34NlfxA4LvmHdWO_75NDRmECJ", 66.5, 37.2, 67.4, 45.6),
    ("osnet_ain_x1_0", "1SigwBE6mPdqiJMqhuIY4aqC7--5CsMal", 70.1, 43.3, 71.1, 52.7),
)
#: Multi-source domain generalisation (Zhou et al., TPAMI 2021): the target, the short source names
#: used in entry names, and per backbone (Drive id, R-1, mAP).
_TARGETS = (
    ("market1501", "ms_d_c", "MSMT17 + DukeMTMC-reID + CUHK03"),
    ("dukemtmcreid", "ms_m_c", "MSMT17 + Market-1501 + CUHK03"),
    ("cuhk03", "ms_d_m", "MSMT17 + DukeMTMC-reID + Market-1501"),
    ("msmt17", "d_m_c", "DukeMTMC-reID + Market-1501 + CUHK03"),
)
_MULTI_SOURCE = {
    "osnet_x1_0": (("1tuYY1vQXReEd8N8_npUkc7npPDDmjNCV", 72.5, 44.2),
                   ("1UxUI4NsE108UCvcy3O1Ufe73nIVPKCiu", 65.2, 47.0),
                   ("1kAA6qHJvbaJtyh1b39ZyEqWROwUgWIhl", 23.9, 23.3),
                   ("1wAHuYVTzj8suOwqCNcEmu6YdbVnHDvA2", 33.2, 12.6)),
    "osnet_ibn_x1_0": (("14sH6yZwuNHPTElVoEZ26zozOOZIej5Mf", 73.0, 44.9),
                       ("1Sk-2SSwKAF8n1Z4p_Lm_pl0E6v2WlIBn", 64.6, 45.7),
                       ("1actHP7byqWcK4eBE1ojnspSMdo7k2W4G", 25.7, 25.4),
                       ("1BGOSdLdZgqHe2qFafatb-5sPY40JlYfp", 39.8, 16.2)),
    "osnet_ain_x1_0": (("1nIrszJVYSHf3Ej8-j6DTFdWz8EnO42PB", 73.3, 45.8),
                       ("1YjJ1ZprCmaKG6MH2P9nScB9FL_Utf9t1", 65.6, 47.2),
                       ("1IxIg5P0cei3KPOJQ9ZRWDE_Mdrz01ha2", 27.4, 27.1),
                       ("1KcoUKzLmsUoGHI7B6as_Z2fXL50gzexS", 40.2, 16.2)),
}


def _config(backbone: str, tested_on: str) -> str:
    return f"configs/{_DATASETS[tested_on][0]}/{backbone}_torchreid.yml"


def _metric(backbone: str) -> str:
    return _COSINE if backbone.startswith("osnet_ain_") else _EUCLIDEAN


def _entry(model: str, backbone: str, drive_id: str, trained_on: str, tested_on: str,
           reported: Dict[str, float], notes: str) -> Dict[str, Any]:
    sha256, size = _HASHES.get(model, (None, None))
    return dict(name=f"torchreid/{model}", family="osnet", format="torchreid", config=_config(backbone, tested_on),
                filename=f"{model}.pth", urls=(f"gdrive://{drive_id}",), dataset=trained_on, sha256=sha256,
                size=size, reported=reported, source=SOURCE, notes=notes)


def _entries() -> Tuple[Dict[str, Any], ...]:
    found = []
    for backbone, dataset, drive_id, r1, m_ap in _SAME_DOMAIN:
        found.append(_entry(f"{backbone}_{dataset}", backbone, drive_id, _DATASETS[dataset][1], dataset,
                            {"R-1": r1, "mAP": m_ap}, f"Same-domain model. {_metric(backbone)}."))
    for backbone, source, target, drive_id, r1, r5, r10, m_ap in _CROSS_DOMAIN:
        found.append(_entry(f"{backbone}_{source}", backbone, drive_id, _DATASETS[source][1], target,
                            {"R-1": r1, "R-5": r5, "R-10": r10, "mAP": m_ap},
                            f"Cross-domain model: trained on {_DATASETS[source][1]} (colour jitter), numbers on "
                            f"{_DATASETS[target][1]}, the config's test set. {_metric(backbone)}."))
    for backbone, drive_id, m_r1, m_map, d_r1, d_map in _MSMT17_ALL:
        found.append(_entry(f"{backbone}_msmt17_combineall", backbone, drive_id, "MSMT17 (train + test identities)",
                            "market1501", {"R-1": m_r1, "mAP": m_map, "DukeMTMC-reID R-1": d_r1,
                                           "DukeMTMC-reID mAP": d_map},
                            "Cross-domain model trained on all of MSMT17 (combineall=True, so never test it on "
                            "MSMT17); R-1 / mAP on Market-1501 (the config's test set) and on DukeMTMC-reID "
                            f"(DATASETS.TESTS [dukemtmc]). {_metric(backbone)}."))
    for backbone, rows in _MULTI_SOURCE.items():
        for (target, short, sources), (drive_id, r1, m_ap) in zip(_TARGETS, rows):
            found.append(_entry(f"{backbone}_{short}", backbone, drive_id, sources, target, {"R-1": r1, "mAP": m_ap},
                                f"Multi-source domain generalisation: trained on {sources}, numbers on the held-out "
                                f"{_DATASETS[target][1]} (the config's test set). {_metric(backbone)}."))
    return tuple(found)


#: torchreid's OSNet files, as HubEntry fields.
TORCHREID: Tuple[Dict[str, Any], ...] = _entries()

__all__ = ["SOURCE", "TORCHREID"]
