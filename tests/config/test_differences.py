"""Which settings a resumed run may change: keys outside RESUME_FREE_KEYS must match the checkpoint's."""
from reid.config import get_cfg
from reid.config.differences import RESUME_FREE_KEYS, changed_keys, describe_changes


def test_only_keys_that_change_the_training_are_reported_with_both_values():
    before, after = get_cfg(), get_cfg()
    after.SOLVER.BASE_LR = before.SOLVER.BASE_LR * 2
    after.INPUT.SIZE_TRAIN = [384, 128]
    after.OUTPUT_DIR, after.DATASETS.ROOT, after.MODEL.DEVICE = "elsewhere", "/data2", "cuda"
    after.DATALOADER.NUM_WORKERS, after.SOLVER.LOG_PERIOD, after.TEST.EVAL_PERIOD = 0, 1, 7
    changes = changed_keys(before, after)
    assert changes == [("INPUT.SIZE_TRAIN", [256, 128], [384, 128]),
                       ("SOLVER.BASE_LR", before.SOLVER.BASE_LR, after.SOLVER.BASE_LR)]
    assert describe_changes(changes[:1]) == "INPUT.SIZE_TRAIN (checkpoint [256, 128], now [384, 128])"


def test_a_tuple_and_a_list_of_the_same_values_are_no_change():
    before, after = get_cfg(), get_cfg()
    after.INPUT.SIZE_TRAIN = tuple(before.INPUT.SIZE_TRAIN)
    assert changed_keys(before, after) == []


def test_settings_learning_without_labels_computes_with_are_never_free():
    # UDA extracts and clusters with these: a change alters the pseudo-labels it trains on.
    assert not {"TEST.FLIP", "TEST.AMP", "TEST.METRIC", "TEST.VAL_IDS", "SEED"} & RESUME_FREE_KEYS
    assert not any(k.startswith(("UDA.", "MODEL.HEADS.", "INPUT.", "MODEL.LOSSES.")) for k in RESUME_FREE_KEYS)


def test_how_features_are_extracted_is_free_only_without_learning_without_labels():
    from reid.config.differences import EXTRACTION_KEYS, resume_free_keys

    cfg = get_cfg()
    assert EXTRACTION_KEYS <= resume_free_keys(cfg)
    cfg.UDA.ENABLED = True  # the clusters it trains on come from features extracted so
    assert not EXTRACTION_KEYS & resume_free_keys(cfg)


def test_every_test_time_rerank_setting_is_free_but_the_clustering_neighbours_are_not():
    # Re-ranking runs at evaluation only; UDA's neighbour pass makes the pseudo-labels it trains on.
    before, after = get_cfg(), get_cfg()
    for key in before.TEST.RERANK.keys():
        assert f"TEST.RERANK.{key}" in RESUME_FREE_KEYS, key
    after.TEST.RERANK.NEIGHBOURS, after.TEST.RERANK.APPROX_MIN_SIZE = "ivf", 1000
    after.UDA.NEIGHBOURS = "exact"
    assert [k for k, _, _ in changed_keys(before, after)] == ["UDA.NEIGHBOURS"]
