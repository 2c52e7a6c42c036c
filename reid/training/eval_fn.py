"""The evaluation a training run makes every ``TEST.EVAL_PERIOD`` epochs: the validation split (which
selects a model), then each test set of ``DATASETS.TESTS``. The engine takes it as a callback, so
that it never imports evaluation; this is where the two meet."""
from __future__ import annotations

import logging
from typing import Callable, List

from reid.evaluation.evaluator import evaluate_model, format_draws, format_table
from reid.evaluation.eval_sets import TestSets


def make_eval_fn(
    cfg, val_query: list, val_gallery: list, test_sets: TestSets, logger: logging.Logger
) -> Callable[..., List[dict]]:
    """``eval_fn(model, epoch)`` for the trainer: the validation split (if any), then each test set.

    `test_sets` holds the query and gallery lists (and protocol) of DATASETS.TESTS, loaded before
    training so that a bad test set stops the run before it trains. Only validation records select
    a model. A gallery-draws test set's records are the means over its draws.
    """

    def eval_fn(model, epoch: int, when: str = "") -> List[dict]:
        """`when` titles the tables (default: "after epoch <epoch>")."""
        records = []
        if val_query:
            res = evaluate_model(cfg, model, val_query, val_gallery, rerank=False)
            # The validation identities come from the training datasets: named after them.
            records.append({"split": "val", "dataset": "+".join(map(str, cfg.DATASETS.NAMES)), **res.metrics["plain"]})
        for name, test in test_sets.items():
            res = evaluate_model(cfg, model, test.query, test.gallery, protocol=test.protocol, junk_pids=test.junk_pids)
            for row, metrics in res.metrics.items():
                label = name if row == "plain" else f"{name}+{row}"
                records.append({"split": "test", "dataset": label, **metrics})
            title = f"{name} {when or f'after epoch {epoch}'}"
            if res.draws:
                title += f" (mean of {res.draws['num_draws']} gallery draws)"
                logger.info("\n%s", format_draws(res, title=f"{title}, with the standard deviation:"))
            else:
                logger.info("\n%s", format_table(res.metrics, title=f"{title}:"))
        return records

    return eval_fn


__all__ = ["make_eval_fn"]
