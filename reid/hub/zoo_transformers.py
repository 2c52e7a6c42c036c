"""TransReID's and CLIP-ReID's released re-ID models as catalogue entries.

TransReID (``TRANSREID_SOURCE``, its README's "Trained Models and logs (Size 256)" table): the ViT
baseline (stride 16, no SIE, no JPM) and TransReID* (stride 12, SIE, JPM) with ViT-B and DeiT-B
weights, on MSMT17, Market-1501, DukeMTMC-reID, Occluded-Duke, VeRi-776 and VehicleID; the numbers
are the README's (mAP | R-1; VehicleID R-1 | R-5). Its VeRi-776 TransReID* files are left out: they
index SIE by camera and viewpoint (SIE_VIEW), which this toolkit does not implement, so their
features would differ.

CLIP-ReID (``CLIPREID_SOURCE``, its README's "Trained models and test logs" table): CNN (CLIP RN50)
and ViT (CLIP ViT-B/16) baselines, the two-stage CLIP-ReID models, and ViT-CLIP-ReID with SIE and
overlapping patches, on the same six sets. The README gives no numbers per file (only the
re-ranked MSMT17 result of the SIE-OLP model), so the others have none here. Its vehicle SIE-OLP
files are left out (VeRi-776's SIE uses viewpoints; VehicleID has no camera labels, so the file's
SIE table is not known here).

PersonViT's fine-tuned models are published in the Hugging Face repository lakeAGI/PersonViTReID,
whose file paths could not be read here; they are not in the catalogue yet.

Occluded-Duke has configs (``configs/OccludedDuke/``) that build the models; this toolkit has no
reader for that dataset. Each entry is a dict of :class:`reid.hub.catalogue.HubEntry` fields.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

TRANSREID_SOURCE = "https://github.com/damo-cv/TransReID#trained-models-and-logs-size-256"
CLIPREID_SOURCE = "https://github.com/Syliz517/CLIP-ReID#trained-models-and-test-logs"

#: Dataset key -> (our config folder, dataset name), in the column order of both READMEs.
_SETS = {
    "msmt17": ("MSMT17", "MSMT17"),
    "market1501": ("Market1501", "Market-1501"),
    "dukemtmc": ("DukeMTMC", "DukeMTMC-reID"),
    "occ_duke": ("OccludedDuke", "Occluded-Duke"),
    "veri": ("VeRi", "VeRi-776"),
    "vehicleid": ("VehicleID", "VehicleID"),
}
_VEHICLES = ("veri", "vehicleid")

# ------------------------------------------------------------------ TransReID
#: Per model: (config file name, description, per dataset (Drive id, first number, second number)).
#: The numbers are mAP, R-1 (VehicleID: R-1, R-5), as the README gives them.
_TRANSREID = {
    "vit_base": ("vit_base_transreid_baseline.yml", "TransReID's ViT-B/16 baseline (stride 16, no SIE, no JPM)", {
        "msmt17": ("1iF5JNPw9xi-rLY3Ri9EY-PFAkK6Vg_Pf", 61.8, 81.8),
        "market1501": ("1crYsKRrW4eUq6abT4KK8_atMLFsbq56W", 87.1, 94.6),
        "dukemtmc": ("17GQqFuTleAZWLD92AtEd1c_dnTyZHl4k", 79.6, 89.0),
        "occ_duke": ("1uHX5j7yepalN1EINdF9lzrT3iDWj-pr9", 53.8, 61.1),
        "veri": ("1Qu13CS5MK1ANsXoYgkX5Kji383SbQbn9", 79.0, 96.6),
        "vehicleid": ("1loUlRlM9DCiIAkq5mpL4LrJiUC3G3fMp", 83.5, 96.7)}),
    "vit_transreid": ("vit_base_transreid.yml", "TransReID* on ViT-B/16 (overlapping patches, SIE, JPM)", {
        "msmt17": ("1x6Na97ycxS0t2Dn_0iRKWe1U5ccIqASK", 67.8, 85.3),
        "market1501": ("11p4RjmpCGGAS-876VEt7OoFrUeHTUlyO", 89.0, 95.1),
        "dukemtmc": ("1BipxoqyThefQviJzuJIKtFJvNblIlPGN", 82.2, 90.7),
        "occ_duke": ("1VJg4rTA43TCHkR9hTIBu8S2Sy1KiTnSJ", 59.5, 67.4),
        "vehicleid": ("13ArCZutLuFrAoZpBuuk1y3EW91cYubmU", 85.2, 97.4)}),
    "deit_transreid": ("vit_base_transreid.yml", "TransReID* from DeiT-B weights (the same ViT-B/16 model)", {
        "msmt17": ("1WSUD0gKjGIG_gzTc2izH_y-EuDzweN95", 66.3, 84.0),
        "market1501": ("1cbUK2KozdPSoewzvF0ucFQnZ0yfZiu_H", 88.5, 95.1),
        "dukemtmc": ("1ltaX9zGFO31Wwwu47K9c4WTTBZVLdzLw", 81.9, 90.7),
        "occ_duke": ("1YJkBiMb5oVBnO6GXYW3Y_hFkR-Pl5ikC", 57.7, 65.2),
        "vehicleid": ("1YC8dvKiCg5qCKpRc4kHemaUdFdBePkAk", 86.0, 97.6)}),
}
_TRANSREID_NOTES = {
    "occ_duke": " Occluded-Duke: TransReID's config uses a patch stride of 11 there (the config's).",
    "vehicleid": " VehicleID: TransReID tests 10 times and reports the mean; 800-vehicle test set.",
}


def _transreid_config(model: str, key: str) -> str:
    if model == "deit_transreid" and key == "vehicleid":  # its config normalises with ImageNet's mean and std
        return "configs/VehicleID/deit_base_transreid.yml"
    return f"configs/{_SETS[key][0]}/{_TRANSREID[model][0]}"


def _transreid() -> Tuple[Dict[str, Any], ...]:
    found = []
    for model, (_, what, files) in _TRANSREID.items():
        for key, (drive_id, first, second) in files.items():
            reported = {"R-1": first, "R-5": second} if key == "vehicleid" else {"R-1": second, "mAP": first}
            sie = " SIE needs each image's camera id (tools/extract.py list files, tools/test.py)." if (
                model != "vit_base" and key != "vehicleid") else ""
            found.append(dict(
                name=f"transreid/{model}_{key}", family="transreid", format="transreid",
                config=_transreid_config(model, key), filename=f"transreid_{model}_{key}.pth",
                urls=(f"gdrive://{drive_id}",), dataset=_SETS[key][1], reported=reported, source=TRANSREID_SOURCE,
                notes=f"{what}.{sie}{_TRANSREID_NOTES.get(key, '')}"))
    return tuple(found)


# ------------------------------------------------------------------ CLIP-ReID
#: Per model: (description, per dataset Drive id), in the README's row order.
_CLIPREID = {
    "rn50_baseline": ("CLIP-ReID's CNN baseline (CLIP RN50 fine-tuned, no text prompts)", (
        "1s-nZMp-LHG0h4dFwvyP_YNBLTijLcrb0", "15E4K9eGXMlqOGE1RAgXQjF4MzrFobGim", "1f9ZgJZSph7kV7xjhfBVIjFG0hwgeSsSy",
        "1gdokL9QoldUOiaRUGJ1fS0BXEnHGM8MX", "1crKPNqQaf0WA9x7xW5MqCrOGxLlDy1ee", "1pTd6ZFzTJINmZ-0eJWReHqTMEgg775Vw")),
    "rn50_clipreid": ("CLIP-ReID's two stages on CLIP RN50", (
        "1VdlC1ld3NrQC5Jcx0hntXRb-UaR3tMtr", "1sBqCr5LxKcO9J2V0IvLQPb0wzwVzIZUp", "1XXycuux__uDd9WKwaTAQ4W1RjLqnUphq",
        "1naz7QjzYlC2qe4SHxjxss4tP81KRCrMj", "18s8NkQQwLOgLLpXZwaLed2L-L6ZYrXUN", "1iotObjA5EmVG2-wj7iUy8ZVD7y0XMMeQ")),
    "vit_baseline": ("CLIP-ReID's ViT baseline (CLIP ViT-B/16 fine-tuned, stride 16, no SIE)", (
        "1I715ZWacRvEGLiju1bZ9xcmUhhFx0aN6", "1XKUcP4LEpWr4Ah6sVdXNveUo4bAsVyjt", "13qSSyi87Bkj3Qq-UKy3646vuIyIaE7Mt",
        "1bjgAbg9DE0niEQ9PTyywt8asjpCOKhfX", "1LeqWNuTGM87JpbhR6tMK2u91ckwlYI1T", "1Nxowc7pvvNPG6O-TV4aRaL5BgdzJ1Dl9")),
    "vit_clipreid": ("CLIP-ReID's two stages on CLIP ViT-B/16 (stride 16, no SIE)", (
        "1BVaZo93kOksYLjFNH3Gf7JxIbPlWSkcO", "1GnyAVeNOg3Yug1KBBWMKKbT2x43O5Ch7", "1ldjSkj-7pXAWmx8on5x0EftlCaolU4dY",
        "1FduvrwOWurHtYyockakn2hBrbGH0qJzH", "1RyfHdOBI2pan_wIGSim5-l6cM4S2WN8e", "168BLegHHxNqatW5wx1YyL2REaThWoof5")),
    "vit_clipreid_sie_olp": ("CLIP-ReID's two stages on CLIP ViT-B/16 with SIE (coefficient 1.0) and overlapping "
                             "patches (stride 12)", (
        "1sPZbWTv2_stXBGutjHMvE87pAbSAgVaz", "1K32xrosw0gPrxYCWXER81mhWObEW5-d4", "1zkHLrLy3z9lP0cR2MVQtr4ujoC6eQLKP",
        "18RU-3_QUr2fehUjW_RfeIllbCDUaZZvP", None, None)),
}
#: Configs of this toolkit with CLIP-ReID's training recipe for a file; the others take the config of
#: the same architecture (the image model is the same; the text side of two-stage files is not loaded).
_CLIPREID_RECIPES = {
    ("rn50_clipreid", "market1501"): "clip_rn50_clipreid.yml",
    ("vit_clipreid", "market1501"): "clip_vit_b16_clipreid.yml",
    ("vit_clipreid", "msmt17"): "clip_vit_b16_clipreid.yml",
    ("vit_clipreid", "veri"): "clip_vit_b16_clipreid.yml",
    ("vit_clipreid", "vehicleid"): "clip_vit_b16_clipreid.yml",
    ("vit_clipreid_sie_olp", "msmt17"): "clip_vit_b16_clipreid_sie_olp.yml",
}
_CLIPREID_ARCHITECTURES = {"rn50": "clip_rn50_baseline.yml", "vit": "clip_vit_b16_baseline.yml",
                           "vit_sie": "clip_vit_b16_sie_olp.yml"}


def _clipreid_config(model: str, key: str) -> str:
    recipe = _CLIPREID_RECIPES.get((model, key))
    if recipe is None:
        arch = "rn50" if model.startswith("rn50") else ("vit_sie" if model.endswith("sie_olp") else "vit")
        recipe = _CLIPREID_ARCHITECTURES[arch]
    return f"configs/{_SETS[key][0]}/{recipe}"


def _clipreid_reported(model: str, key: str) -> Dict[str, float]:
    if (model, key) == ("vit_clipreid_sie_olp", "msmt17"):
        return {"R-1 re-ranked": 91.1, "mAP re-ranked": 86.7}  # the README's only number (with re-ranking)
    return {}


def _clipreid() -> Tuple[Dict[str, Any], ...]:
    found = []
    for model, (what, ids) in _CLIPREID.items():
        for key, drive_id in zip(_SETS, ids):
            if drive_id is None:
                continue
            notes = f"{what}."
            if model.endswith("clipreid") or model.endswith("sie_olp"):
                notes += " The file also holds the learned prompts and CLIP's text encoder, which are not loaded."
            if model.endswith("sie_olp"):
                notes += " SIE needs each image's camera id (tools/extract.py list files, tools/test.py)."
            if key in _VEHICLES:
                notes += " 256x256 inputs."
            reported: Optional[Dict[str, float]] = _clipreid_reported(model, key)
            if not reported:
                notes += " CLIP-ReID's README gives no number for this file (see its paper)."
            found.append(dict(
                name=f"clipreid/{model}_{key}", family="clipreid", format="clipreid",
                config=_clipreid_config(model, key), filename=f"clipreid_{model}_{key}.pth",
                urls=(f"gdrive://{drive_id}",), dataset=_SETS[key][1], reported=reported or {},
                source=CLIPREID_SOURCE, notes=notes))
    return tuple(found)


#: TransReID's and CLIP-ReID's published files, as HubEntry fields.
TRANSFORMERS: Tuple[Dict[str, Any], ...] = _transreid() + _clipreid()

__all__ = ["CLIPREID_SOURCE", "TRANSFORMERS", "TRANSREID_SOURCE"]
