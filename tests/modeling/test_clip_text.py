"""CLIP's text encoder with learned prompts, the supervised contrastive loss and CLIP-ReID's
image-to-text loss, at tiny widths, against open_clip's own forward and the formulas."""
import math

import pytest
import torch

from reid.config import get_cfg
from reid.modeling import build_model
from reid.modeling.backbones import clip as clip_module
from reid.modeling.backbones.clip import ClipSpec
from reid.modeling.backbones.pretrained import PretrainedWeightsError
from reid.modeling.clip_text import PromptedText, TextHead, prompt_slots, text_state
from reid.modeling.losses import supervised_contrastive_loss
from reid.modeling.meta_arch.clipreid_prompts import PromptLearning, build_prompt_learning

open_clip = pytest.importorskip("open_clip", reason="CLIP needs open_clip (pip install 'circle-reid[clip]')")

SPEC = ClipSpec("vit", 32, (2,), 2, 16, 16, "ViT-B-16", text_width=16, text_heads=2, text_layers=2)
TEMPLATE = "A photo of a X X X X person."


def _open_clip_text(width=16, seed=0):
    from open_clip.model import QuickGELU
    from open_clip.transformer import TextTransformer

    torch.manual_seed(seed)
    text = TextTransformer(width=width, heads=2, layers=2, output_dim=16, act_layer=QuickGELU)
    with torch.no_grad():
        for p in text.parameters():  # far from initialisation: a wrong wiring cannot agree by accident
            p.normal_(0, 0.2)
    return text


def test_the_prompt_of_word_embeddings_is_open_clips_text_feature_of_those_words():
    ref = _open_clip_text()
    text = PromptedText(SPEC, TEMPLATE, 2, state=text_state(ref.state_dict()), source="ref")
    words = open_clip.tokenize(["A photo of a red blue green tall person.", "A photo of a cat dog car bus person."])
    _, first, end = prompt_slots(TEMPLATE)
    assert (first, end) == (5, 9)  # <start> a photo of a | x x x x | person . <end>
    with torch.no_grad():
        text.cls_ctx.copy_(ref.token_embedding(words[:, first:end]))
        torch.testing.assert_close(text(torch.tensor([0, 1])), ref(words), rtol=0, atol=1e-6)
    assert [n for n, p in text.named_parameters() if p.requires_grad] == ["cls_ctx"]
    assert not hasattr(text, "token_embedding")  # used once for the prefix and suffix, not kept


def test_a_text_encoder_of_another_width_is_one_line():
    with pytest.raises(PretrainedWeightsError) as err:
        PromptedText(SPEC, TEMPLATE, 2, state=text_state(_open_clip_text(width=32).state_dict()), source="wide.pt")
    message = str(err.value)
    assert "\n" not in message and "wide.pt" in message and "MODEL.BACKBONE.PRETRAINED_PATH" in message


@pytest.mark.parametrize("template, message", [
    ("A photo of a person.", "has no X word"),
    ("A X photo of a X person.", "X words in more than one place"),
    ("A photo of a X X person " + "very " * 80, "longer than CLIP's 75 tokens"),
])
def test_a_template_without_one_run_of_x_words_is_one_line(template, message):
    with pytest.raises(ValueError, match=message):
        prompt_slots(template)


def test_supervised_contrastive_loss_is_the_formula():
    g = torch.Generator().manual_seed(0)
    a, c = torch.randn(5, 4, generator=g), torch.randn(6, 4, generator=g)
    ya, yc = torch.tensor([0, 1, 1, 2, 0]), torch.tensor([1, 0, 2, 2, 1, 0])
    want = 0.0
    for i in range(5):
        denom = sum(math.exp(float(a[i] @ c[j]) / 0.5) for j in range(6))
        pos = [j for j in range(6) if yc[j] == ya[i]]
        want += -sum(math.log(math.exp(float(a[i] @ c[p]) / 0.5) / denom) for p in pos) / len(pos)
    got = supervised_contrastive_loss(a, c, ya, yc, temperature=0.5)
    assert abs(float(got) - want / 5) < 1e-5
    with pytest.raises(ValueError, match="no contrast feature of its label"):
        supervised_contrastive_loss(a, c, torch.tensor([0, 1, 1, 2, 7]), yc)


def test_the_first_stage_model_gives_both_directions_and_every_identitys_text():
    torch.manual_seed(0)
    model = PromptLearning(PromptedText(SPEC, TEMPLATE, 3))
    feats, labels = torch.randn(4, 16), torch.tensor([0, 2, 2, 1])
    losses = model(feats, labels)
    text = model.text(labels)
    torch.testing.assert_close(losses["loss_i2t"], supervised_contrastive_loss(feats, text, labels, labels))
    torch.testing.assert_close(losses["loss_t2i"], supervised_contrastive_loss(text, feats, labels, labels))
    sum(losses.values()).backward()
    assert model.text.cls_ctx.grad is not None and model.text.cls_ctx.grad[[0, 1, 2]].abs().sum() > 0
    torch.testing.assert_close(model.text_features(batch=2), model.text(torch.arange(3)).detach())


def test_the_first_stage_reads_the_text_side_of_an_openai_file(tmp_path, monkeypatch):
    monkeypatch.setitem(clip_module.CLIP_SPECS, "clip_vit_b16", SPEC)
    ref = _open_clip_text()
    path = tmp_path / "ViT-B-16.pt"
    torch.save({**ref.state_dict(), "visual.proj": torch.zeros(32, 16)}, path)
    cfg = get_cfg()
    cfg.MODEL.BACKBONE.NAME, cfg.MODEL.BACKBONE.PRETRAINED_PATH = "clip_vit_b16", str(path)
    model = build_prompt_learning(cfg, 2)
    torch.testing.assert_close(model.text.text_projection, ref.text_projection)
    torch.save({"visual.proj": torch.zeros(32, 16)}, path)
    with pytest.raises(ValueError, match="holds no CLIP text encoder, which MODEL.CLIPREID.PROMPT_LEARNING needs"):
        build_prompt_learning(cfg, 2)


def test_the_second_stage_adds_the_image_to_text_cross_entropy(monkeypatch):
    monkeypatch.setitem(clip_module.CLIP_SPECS, "clip_vit_b16", SPEC)
    cfg = get_cfg()
    cfg.MODEL.META_ARCHITECTURE, cfg.MODEL.BACKBONE.NAME, cfg.MODEL.BACKBONE.PRETRAINED = "clipreid", "clip_vit_b16", False
    cfg.INPUT.SIZE_TRAIN = cfg.INPUT.SIZE_TEST = [64, 32]
    cfg.MODEL.HEADS.NAME, cfg.MODEL.HEADS.NUM_CLASSES = "linear", 3
    cfg.MODEL.LOSSES.NAMES, cfg.MODEL.LOSSES.ID.LABEL_SMOOTH = ["identity"], 0.1
    cfg.MODEL.CLIPREID.PROMPT_LEARNING, cfg.MODEL.CLIPREID.I2T_WEIGHT = True, 0.7
    torch.manual_seed(0)
    model = build_model(cfg).train()
    images, targets = torch.rand(4, 3, 64, 32), torch.tensor([0, 1, 2, 1])
    with pytest.raises(RuntimeError, match="text features are not set"):
        model(images, targets)  # never a silent constant loss before the first stage
    text = torch.randn(3, 16)
    model.text_head.set_features(text)
    torch.manual_seed(1)
    losses = model(images, targets)
    proj = model.branch_features(images)[2]
    logits = proj @ text.t()
    log_p = torch.log_softmax(logits, dim=1)
    want = -(0.9 * log_p[torch.arange(4), targets] + 0.1 * log_p.mean(dim=1)).mean()
    torch.testing.assert_close(losses["loss_i2t"], 0.7 * want, rtol=1e-5, atol=1e-6)
    assert "text_head.features" in model.state_dict()
    with pytest.raises(ValueError, match="do not fit the model's"):
        model.text_head.set_features(torch.randn(4, 16))
    assert isinstance(model.text_head, TextHead)
