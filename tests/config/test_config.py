"""Config loading: defaults, _BASE_ inheritance, overrides, validation messages, round trip."""
import glob
import os
import re

import pytest

from reid.config import ConfigError, get_cfg, load_config, save_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


def test_get_cfg_returns_independent_copies():
    a, b = get_cfg(), get_cfg()
    a.SOLVER.BASE_LR = 1.0
    assert b.SOLVER.BASE_LR != 1.0


def test_every_key_has_a_comment_in_defaults():
    # Each assignment `_C.X.Y = ...` must be preceded by a comment line (the key's doc).
    src = open(os.path.join(ROOT, "reid", "config", "defaults.py")).read().splitlines()
    missing = []
    for i, line in enumerate(src):
        m = re.match(r"^(_C(\.[A-Z0-9_]+)+) = (?!CN\(\))", line)
        if m:
            if not src[i - 1].lstrip().startswith("#"):
                missing.append(m.group(1))
    assert not missing, f"keys without a comment line: {missing}"


def test_base_inheritance_relative_paths_and_override_order(tmp_path):
    write(tmp_path / "base" / "Base.yml", "SOLVER:\n  BASE_LR: 0.1\n  MAX_EPOCH: 7\nSEED: 3\n")
    leaf = write(tmp_path / "leaf" / "leaf.yml", "_BASE_: ../base/Base.yml\nSOLVER:\n  BASE_LR: 0.2\n")
    cfg = load_config(str(leaf), ["SEED", "5"])
    assert cfg.SOLVER.BASE_LR == 0.2  # leaf wins over base
    assert cfg.SOLVER.MAX_EPOCH == 7  # inherited
    assert cfg.SEED == 5  # command line wins over files
    assert cfg.is_frozen()


def test_base_chain_of_two_levels(tmp_path):
    write(tmp_path / "a.yml", "SEED: 1\nOUTPUT_DIR: from_a\n")
    write(tmp_path / "b.yml", "_BASE_: a.yml\nSEED: 2\n")
    c = write(tmp_path / "c.yml", "_BASE_: b.yml\n")
    cfg = load_config(str(c))
    assert (cfg.SEED, cfg.OUTPUT_DIR) == (2, "from_a")


def test_base_loop_is_reported(tmp_path):
    write(tmp_path / "a.yml", "_BASE_: b.yml\n")
    write(tmp_path / "b.yml", "_BASE_: a.yml\n")
    with pytest.raises(ConfigError, match="loop"):
        load_config(str(tmp_path / "a.yml"))


def test_unknown_key_in_file_names_key_file_and_suggestion(tmp_path):
    f = write(tmp_path / "bad.yml", "SOLVER:\n  BASE_LRR: 0.1\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(f))
    msg = str(e.value)
    assert "SOLVER.BASE_LRR" in msg and "bad.yml" in msg and "SOLVER.BASE_LR" in msg


def test_unknown_key_on_command_line_suggests_closest():
    with pytest.raises(ConfigError) as e:
        load_config(None, ["MODEL.HEADS.MARGN", "0.3"])
    assert "MODEL.HEADS.MARGN" in str(e.value) and "MODEL.HEADS.MARGIN" in str(e.value)


@pytest.mark.parametrize(
    "key,value",
    [("SOLVER.BASE_LR", "fast"), ("SOLVER.MAX_EPOCH", "1.5"), ("TEST.FLIP", "1"), ("MODEL.HEADS.NAME", "[1]")],
)
def test_wrong_type_is_rejected_with_key_and_expected_type(key, value):
    with pytest.raises(ConfigError) as e:
        load_config(None, [key, value])
    assert key in str(e.value) and "expects a value of type" in str(e.value)


def test_override_coercions():
    cfg = load_config(
        None,
        ["SOLVER.BASE_LR", "1", "TEST.FLIP", "True", "DATASETS.NAMES", "synthetic", "SOLVER.STEPS", "[3, 5]"],
    )
    assert isinstance(cfg.SOLVER.BASE_LR, float) and cfg.SOLVER.BASE_LR == 1.0
    assert cfg.TEST.FLIP is True
    assert list(cfg.DATASETS.NAMES) == ["synthetic"]
    assert list(cfg.SOLVER.STEPS) == [3, 5]


def test_odd_number_of_overrides():
    with pytest.raises(ConfigError, match="KEY VALUE pairs"):
        load_config(None, ["SEED"])


def test_section_given_a_scalar(tmp_path):
    f = write(tmp_path / "s.yml", "SOLVER: 3\n")
    with pytest.raises(ConfigError, match="SOLVER is a section"):
        load_config(str(f))


def test_missing_file_and_invalid_yaml(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(str(tmp_path / "nope.yml"))
    f = write(tmp_path / "broken.yml", "SOLVER: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(str(f))


def test_saved_config_round_trips(tmp_path):
    cfg = load_config(None, ["SOLVER.BASE_LR", "0.123", "DATASETS.NAMES", "['synthetic', 'market1501']"])
    out = str(tmp_path / "run" / "config.yaml")
    save_config(cfg, out)
    again = load_config(out)
    assert again == cfg


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "configs", "**", "*.yml"), recursive=True)))
def test_every_shipped_config_loads(path):
    from reid.modeling.backbones import BACKBONE_REGISTRY, timm_name
    from reid.modeling.meta_arch import META_ARCH_REGISTRY

    cfg = load_config(path)
    assert cfg.MODEL.META_ARCHITECTURE in META_ARCH_REGISTRY.names()
    assert timm_name(cfg.MODEL.BACKBONE.NAME) is not None or cfg.MODEL.BACKBONE.NAME in BACKBONE_REGISTRY.names()


def test_config_docs_are_current():
    from reid.config.docs import render_config_docs

    doc = os.path.join(ROOT, "docs", "configs.md")
    assert os.path.exists(doc), "docs/configs.md is missing: run python tools/gen_config_docs.py"
    assert open(doc, encoding="utf-8").read() == render_config_docs(), (
        "docs/configs.md is stale: run python tools/gen_config_docs.py"
    )


def test_config_docs_cover_every_key():
    from reid.config.docs import key_comments

    documented = key_comments(os.path.join(ROOT, "reid", "config", "defaults.py"))

    def leaves(node, prefix=""):
        for k, v in node.items():
            if hasattr(v, "items"):
                yield from leaves(v, f"{prefix}{k}.")
            else:
                yield f"{prefix}{k}"

    keys = set(leaves(get_cfg()))
    assert keys == set(documented)
    assert all(documented[k] for k in keys), [k for k in keys if not documented[k]]


# ------------------------------------------------------------------ YAML 1.1 pitfalls, list forms
def test_yaml_exponent_numbers_are_numbers(tmp_path):
    # YAML 1.1 reads 1e-3 (no dot) as the string '1e-3'; the command line reads it as a float.
    f = write(tmp_path / "e.yml", "SOLVER:\n  BASE_LR: 1e-3\n  MAX_EPOCH: 1e2\n  STEPS: [1e1, 2e1]\n"
                                  "INPUT:\n  REA:\n    AREA: [2e-2, 0.4]\n")
    cfg = load_config(str(f))
    assert isinstance(cfg.SOLVER.BASE_LR, float) and cfg.SOLVER.BASE_LR == pytest.approx(1e-3)
    assert cfg.SOLVER.MAX_EPOCH == 100 and isinstance(cfg.SOLVER.MAX_EPOCH, int)
    assert list(cfg.SOLVER.STEPS) == [10, 20]
    assert list(cfg.INPUT.REA.AREA) == pytest.approx([0.02, 0.4])
    assert load_config(None, ["SOLVER.BASE_LR", "1e-3"]).SOLVER.BASE_LR == cfg.SOLVER.BASE_LR


@pytest.mark.parametrize("text", ["SOLVER:\n  MAX_EPOCH: 1.5e0\n", "SOLVER:\n  BASE_LR: fast\n",
                                  "SOLVER:\n  BASE_LR: nan\n", "SOLVER:\n  STEPS: [1e1, 2.5e0]\n"])
def test_yaml_strings_that_are_no_fitting_number_are_refused(tmp_path, text):
    f = write(tmp_path / "bad.yml", text)
    with pytest.raises(ConfigError, match="expects a value of type"):
        load_config(str(f))


def test_yaml_bool_for_a_string_key_explains_the_rule(tmp_path):
    f = write(tmp_path / "amp.yml", "SOLVER:\n  AMP: off\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(f))
    msg = str(e.value)
    assert "SOLVER.AMP" in msg and "amp.yml" in msg and "YAML" in msg
    assert 'quote it: AMP: "off"' in msg
    f = write(tmp_path / "amp2.yml", "TEST:\n  AMP: Yes\n")  # the user's own word is shown
    with pytest.raises(ConfigError, match='quote it: AMP: "Yes"'):
        load_config(str(f))
    f = write(tmp_path / "ok.yml", 'SOLVER:\n  AMP: "off"\nTEST:\n  FLIP: yes\n')
    cfg = load_config(str(f))
    assert cfg.SOLVER.AMP == "off" and cfg.TEST.FLIP is True  # bool keys still take YAML booleans


def test_type_error_shows_the_current_value_not_the_default(tmp_path):
    base = write(tmp_path / "base.yml", "SOLVER:\n  BASE_LR: 0.5\n")
    f = write(tmp_path / "leaf.yml", f"_BASE_: {os.path.basename(base)}\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(f), ["SOLVER.BASE_LR", "fast"])
    assert "current value 0.5" in str(e.value) and "default" not in str(e.value)


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("[custom]", ["custom"]),  # what bash leaves of ["custom"]
        ("[a,b]", ["a", "b"]),
        ("[a, b]", ["a", "b"]),
        ("a,b", ["a", "b"]),
        ("custom", ["custom"]),
        ('["custom"]', ["custom"]),  # Python literals keep working
        ("['a', 'b']", ["a", "b"]),
        ("[]", []),
    ],
)
def test_string_list_keys_take_shell_friendly_forms(raw, expected):
    cfg = load_config(None, ["DATASETS.NAMES", raw, "DATASETS.TESTS", raw])
    assert list(cfg.DATASETS.NAMES) == expected and list(cfg.DATASETS.TESTS) == expected


def test_string_list_forms_only_for_string_lists_and_bad_forms_are_named():
    assert list(load_config(None, ["SOLVER.STEPS", "[3,5]"]).SOLVER.STEPS) == [3, 5]
    with pytest.raises(ConfigError, match="expects a value of type int"):
        load_config(None, ["SOLVER.STEPS", "3,a"])
    for raw, what in (("[a,", "unmatched bracket"), ("a,,b", "empty name")):
        with pytest.raises(ConfigError, match=what) as e:
            load_config(None, ["DATASETS.NAMES", raw])
        assert "DATASETS.NAMES" in str(e.value)
