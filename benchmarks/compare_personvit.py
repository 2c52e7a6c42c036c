"""Proof that PersonViT checkpoints give PersonViT's own features in this toolkit.

PersonViT (Hu et al., 2024, github.com/hustvl/PersonViT) fine-tunes its LUPerson-pretrained ViTs
for re-ID with a copy of TransReID's code (its ``transreid_pytorch`` folder): the same state-dict
layout (``base.*``, ``bottleneck.*``, ``classifier.*``), so its files load through the TransReID
format. What its released recipe changes is the model and the test feature: no SIE, no JPM,
stride 16, the class token after the final norm *before* the BNNeck (``TEST.NECK_FEAT before``),
pixels scaled by 0.5 / 0.5, and a ViT-S of DeiT-S's shape (384 wide, 12 blocks, 6 heads, qkv bias).

The comparison is ``compare_transreid``'s, run on PersonViT's code: for each variant below it
writes seeded crops as image files, builds PersonViT's ``make_model`` in PersonViT's environment,
fills it with seeded weights, saves ``model.state_dict()`` as its training does, loads it back with
its ``load_param`` (and checks that every tensor arrived: that function skips misfits silently),
computes the features as its ``do_inference`` does, then compares them with this toolkit's through
``MODEL.WEIGHTS`` and ``tools/extract.py --config-file configs/Market1501/vit_small_personvit.yml
--weights FILE``. Run it with this repository's environment:

    python benchmarks/compare_personvit.py --personvit-python /path/to/env/bin/python \\
        --personvit-repo /path/to/PersonViT

(the environment needs torch, torchvision, yacs and Pillow). ``--fixture
tests/fixtures/personvit_reference.npz`` also writes the CI fixture (4 PNG crops per variant at
128x64, layouts and features only). Variants PersonViT's code can build but this toolkit cannot
(``STEM_CONV`` "ics" models with a convolutional stem, ``REDUCE_FEAT_DIM``, ``POOLING``) are not
compared: their files are refused in one line (docs/inference.md).
"""
from __future__ import annotations

import os
import sys
from typing import Dict

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare_transreid as lineage  # noqa: E402  (the comparison itself)

CONFIG = "configs/Market1501/vit_small_personvit.yml"
_BASE = ["MODEL.BACKBONE.NAME", "vit_base_transreid"]
#: name -> PersonViT's settings (its config keys) and this repository's overrides of CONFIG.
ARCHS: Dict[str, Dict[str, object]] = {
    # Its released recipe (configs/market/vit_small.yml and vit_base.yml): plain ViT, stride 16.
    "vit_small": {"theirs": {"TRANSFORMER_TYPE": "vit_small_patch16_224_TransReID"}, "opts": []},
    "vit_base": {"theirs": {"TRANSFORMER_TYPE": "vit_base_patch16_224_TransReID"}, "opts": _BASE},
    # The same code with SIE and JPM switched on (PersonViT keeps TransReID's options).
    "vit_small_sie_jpm": {"theirs": {"TRANSFORMER_TYPE": "vit_small_patch16_224_TransReID", "SIE_CAMERA": True,
                                     "JPM": True},
                          "opts": ["MODEL.META_ARCHITECTURE", "transreid", "MODEL.TRANSREID.SIE_CAMERA", True,
                                   "MODEL.TRANSREID.NUM_CAMERAS", lineage.NUM_CAMERAS]},
}

PERSONVIT = lineage.Family(
    label="PersonViT", option="personvit", repo="a checkout of github.com/hustvl/PersonViT",
    code_dir="transreid_pytorch", config=CONFIG, archs=ARCHS, script=os.path.abspath(__file__),
    # "none": its constructors load MODEL.PRETRAIN_PATH for "imagenet" and "self".
    theirs={"PRETRAIN_CHOICE": "none", "STRIDE_SIZE": [16, 16]})


def main(argv=None) -> int:
    return lineage.main(argv, PERSONVIT, __doc__)


if __name__ == "__main__":
    sys.exit(main())
