"""Configs from someone else: alias bombs, recursive anchors, deep nesting, huge files, files that
are not configs, and configs stored in checkpoints that point at other files."""
import os

import pytest

from reid.config import FILE_KEYS, ConfigError, get_cfg, load_config, load_config_from_text, merge_from_text
from reid.config.yaml_text import MAX_BYTES, MAX_DEPTH, MAX_NODES, parse_yaml_text, YamlTextError

SECRET = "s3cr3t-line-of-a-private-file"


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """`levels` anchors, each a list of `width` aliases of the previous: width**levels values."""
    lines = ["a0: &a0 [" + ", ".join(['"x"'] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines) + f"\nMODEL:\n  BACKBONE:\n    NAME: [*a{levels - 1}, *a{levels - 1}]\n"


def test_an_alias_bomb_is_refused_before_it_expands_and_the_message_stays_short(tmp_path):
    text = alias_bomb()
    assert len(text) < 600  # a few hundred bytes that would expand to 9**9 * 2 values
    path = tmp_path / "bomb.yml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=rf"bomb.yml cannot be used as a config: it expands to more than "
                                          rf"{MAX_NODES:,} values") as err:
        load_config(str(path))
    assert len(str(err.value)) < 400 and "\n" not in str(err.value)


def test_moderate_aliases_still_work(tmp_path):
    path = tmp_path / "ok.yml"
    path.write_text("INPUT:\n  SIZE_TRAIN: &size [128, 64]\n  SIZE_TEST: *size\n")
    assert load_config(str(path)).INPUT.SIZE_TEST == [128, 64]
    assert parse_yaml_text("a: &x [1, 2]\nb: *x\nc: *x\n") == {"a": [1, 2], "b": [1, 2], "c": [1, 2]}


def test_a_recursive_anchor_and_deep_nesting_are_refused(tmp_path):
    with pytest.raises(YamlTextError, match="contains an alias of itself"):
        parse_yaml_text("a: &x [1, *x]\n")
    with pytest.raises(YamlTextError, match=f"more than {MAX_DEPTH} levels"):
        parse_yaml_text("a: " + "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5))


@pytest.mark.slow
def test_nesting_deep_enough_to_exhaust_the_parsers_stack_is_one_error():
    with pytest.raises(YamlTextError, match="levels deep"):
        parse_yaml_text("a: " + "[" * 5_000 + "]" * 5_000)


def test_a_huge_or_binary_or_special_file_is_refused_without_reading_it_whole(tmp_path):
    big = tmp_path / "big.yml"
    big.write_text("# " + "x" * MAX_BYTES + "\n")
    with pytest.raises(ConfigError, match="big.yml.*larger than 1024 kB"):
        load_config(str(big))
    binary = tmp_path / "weights.yml"
    binary.write_bytes(b"\x80\x02\x93\xff\x00" * 100)
    with pytest.raises(ConfigError, match="weights.yml is not UTF-8 text"):
        load_config(str(binary))
    fifo = tmp_path / "fifo.yml"
    os.mkfifo(fifo)  # reading it would block forever
    with pytest.raises(ConfigError, match=r"fifo.yml is a FIFO \(named pipe\), not a file; name a .yml"):
        load_config(str(fifo))


def test_invalid_yaml_is_located_but_never_quoted(tmp_path):
    private = tmp_path / "private.yml"
    private.write_text(f"root:{SECRET}:1:2: x\n  : : {SECRET}\n")
    with pytest.raises(ConfigError, match=r"private.yml cannot be used as a config: it is not valid YAML \(.* at line "
                                          r"\d+, column \d+\)") as err:
        load_config(str(private))
    assert SECRET not in str(err.value)


def test_errors_name_the_base_file_that_holds_the_mistake(tmp_path):
    (tmp_path / "base.yml").write_text("SOLVER:\n  BASE_LRR: 0.1\n")
    (tmp_path / "child.yml").write_text("_BASE_: base.yml\nSOLVER:\n  MAX_EPOCH: 3\n")
    with pytest.raises(ConfigError, match=r"base.yml: unknown config key SOLVER.BASE_LRR") as err:
        load_config(str(tmp_path / "child.yml"))
    assert "child.yml" not in str(err.value)


def test_a_stored_config_may_not_name_a_base_file_and_the_file_is_never_read(tmp_path, monkeypatch):
    private = tmp_path / "shadow"
    private.write_text(f"{SECRET}\n")
    opened = []
    real_open = open

    def spy(file, *args, **kwargs):
        opened.append(os.fspath(file) if not isinstance(file, int) else file)
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", spy)
    with pytest.raises(ConfigError, match=r"Checkpoint model.pth names _BASE_ .*shadow.*not read here.*"
                                          r"self-contained") as err:
        load_config_from_text(f"_BASE_: {private}\nSOLVER:\n  MAX_EPOCH: 3\n", "Checkpoint model.pth")
    assert SECRET not in str(err.value) and str(private) not in opened


def test_a_stored_config_sets_no_file_or_folder_key(tmp_path):
    text = "\n".join([
        f"OUTPUT_DIR: {tmp_path}/.ssh", "MODEL:", "  WEIGHTS: /etc/passwd", "  BACKBONE:",
        "    PRETRAINED_PATH: /root/x.pth", "    NAME: resnet18", "DATASETS:", "  ROOT: /", "  CUSTOM:",
        "    TRAIN_LIST: /etc/hosts",
    ]) + "\n"
    scratch = get_cfg()
    assert merge_from_text(scratch, text, "Checkpoint c.pth") == [
        "OUTPUT_DIR", "MODEL.WEIGHTS", "MODEL.BACKBONE.PRETRAINED_PATH", "DATASETS.ROOT", "DATASETS.CUSTOM.TRAIN_LIST"]
    cfg = load_config_from_text(text, "Checkpoint c.pth", ["DATASETS.ROOT", "/data"])
    defaults = get_cfg()
    assert cfg.MODEL.BACKBONE.NAME == "resnet18"  # other keys are taken
    assert cfg.OUTPUT_DIR == defaults.OUTPUT_DIR and cfg.MODEL.WEIGHTS == ""
    assert cfg.MODEL.BACKBONE.PRETRAINED_PATH == "" and cfg.DATASETS.CUSTOM.TRAIN_LIST == ""
    assert cfg.DATASETS.ROOT == "/data"  # the command line still sets them


def test_every_key_that_names_a_path_is_a_file_key():
    """A new key that names a file or folder must join FILE_KEYS, or stored configs could set it."""
    cfg = get_cfg()

    def walk(node, prefix=""):
        for k, v in node.items():
            if hasattr(v, "items"):
                yield from walk(v, f"{prefix}{k}.")
            else:
                yield f"{prefix}{k}", v

    named = [k for k, v in walk(cfg) if isinstance(v, str)
             and k.rsplit(".", 1)[-1].endswith(("DIR", "PATH", "ROOT", "LIST", "WEIGHTS", "FILE"))]
    assert named and sorted(named) == sorted(FILE_KEYS)


def test_values_that_size_memory_are_bounded(tmp_path):
    with pytest.raises(ConfigError, match=r"INPUT.SIZE_TEST \[100000, 128\] is out of range.*\[1, 4096\]"):
        load_config(None, ["INPUT.SIZE_TEST", "[100000, 128]"])
    with pytest.raises(ConfigError, match="Checkpoint x.pth: TEST.IMS_PER_BATCH"):
        load_config_from_text("TEST:\n  IMS_PER_BATCH: 1000000000\n", "Checkpoint x.pth")


def test_an_enormous_integer_is_one_line(tmp_path):
    path = tmp_path / "digits.yml"
    path.write_text("SEED: " + "9" * 5000 + "\n")
    with pytest.raises(ConfigError, match="digits.yml cannot be used as a config: it holds a value that cannot be read"):
        load_config(str(path))
