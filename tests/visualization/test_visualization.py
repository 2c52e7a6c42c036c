"""Ranked-result pictures, query selection, index.html / CSV and tools/visualize.py."""
from __future__ import annotations

import csv
import os
from html.parser import HTMLParser

import cv2
import numpy as np
import pytest

from reid.evaluation import evaluate_rank
from reid.visualization import (
    rank_gallery,
    select_queries,
    visualize_from_features,
    visualize_ranked_results,
)
from reid.visualization.tiles import IGNORED_COLOR, MATCH_COLOR, MISMATCH_COLOR, QUERY_COLOR, TileGeometry
from tests._tools import load_tool

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Gallery of the constructed example: (pid, camid, distance to query 0, fill colour RGB).
# Query 0 is pid 1, camera 0. g0 is junk (same pid, same camera); g3 and g4 tie at 0.30,
# so the stable order puts g3 first.
GALLERY = [
    (1, 0, 0.05, (250, 250, 0)),
    (2, 1, 0.10, (0, 0, 250)),
    (1, 1, 0.20, (250, 0, 250)),
    (3, 0, 0.30, (0, 250, 250)),
    (1, 2, 0.30, (250, 120, 0)),
    (4, 1, 0.90, (120, 0, 120)),
]
QUERY_FILL = (40, 200, 40)
IMG_H, IMG_W = 128, 64


def _write_person(path: str, fill) -> str:
    """A 128x64 picture: grey background and a filled body rectangle (RGB `fill`)."""
    img = np.full((IMG_H, IMG_W, 3), 200, np.uint8)
    img[16:112, 12:52] = fill[::-1]  # cv2 writes BGR
    cv2.imwrite(path, img)
    return path


@pytest.fixture
def example(tmp_path):
    """Query list, gallery list and distance matrix of the constructed example (2 queries)."""
    img_dir = tmp_path / "imgs"
    img_dir.mkdir()
    query = [
        (_write_person(str(img_dir / "q0.png"), QUERY_FILL), 1, 0),
        (_write_person(str(img_dir / "q1.png"), (90, 90, 90)), 2, 2),
    ]
    gallery = [(_write_person(str(img_dir / f"g{i}.png"), c), pid, cam) for i, (pid, cam, _, c) in enumerate(GALLERY)]
    dist = np.array([[g[2] for g in GALLERY], [0.5, 0.1, 0.6, 0.7, 0.8, 0.2]])
    return query, gallery, dist


def _tile_layout(picture: np.ndarray, tile_height: int = 128):
    """x of each tile's left edge and y of the tile row's top, from the documented layout."""
    geom = TileGeometry.for_height(tile_height, IMG_W / IMG_H)
    margin, gap = 2 * geom.border, 4 * geom.border
    y0 = picture.shape[0] - geom.height
    xs = [margin] + [margin + geom.width + gap + i * (geom.width + geom.border) for i in range(20)]
    return geom, xs, y0


def _read(path: str) -> np.ndarray:
    return cv2.cvtColor(cv2.imread(path), cv2.COLOR_BGR2RGB)


def test_rank_gallery_follows_protocol_and_stable_ties():
    pids = np.array([g[0] for g in GALLERY])
    cams = np.array([g[1] for g in GALLERY])
    dist = np.array([g[2] for g in GALLERY])
    row = rank_gallery(dist, 1, 0, pids, cams, topk=4)
    assert row.gallery_index.tolist() == [1, 2, 3, 4]  # junk g0 left out, tie g3 before g4
    assert row.rank.tolist() == [1, 2, 3, 4]
    assert row.match.tolist() == [False, True, False, True]
    assert not row.ignored.any()
    junk = rank_gallery(dist, 1, 0, pids, cams, topk=4, show_junk=True)
    assert junk.gallery_index.tolist() == [0, 1, 2, 3, 4]
    assert junk.rank.tolist() == [0, 1, 2, 3, 4]
    assert junk.ignored.tolist() == [True, False, False, False, False]
    assert not junk.match[0]  # an ignored entry is never counted as a match
    # pid -1 is just another identity, as in evaluate_rank (the loaders drop Market's junk)
    pids_j = pids.copy()
    pids_j[1] = -1
    minus = rank_gallery(dist, 1, 0, pids_j, cams, topk=4)
    assert minus.gallery_index.tolist() == [1, 2, 3, 4] and not minus.match[0]
    ap = evaluate_rank(dist[None], np.array([1]), pids_j, np.array([0]), cams, max_rank=4)["all_AP"][0]
    hits = minus.rank[minus.match]  # the matches' ranks on the picture: 2 and 4
    assert hits.tolist() == [2, 4]
    assert ap == pytest.approx(np.mean(np.arange(1, len(hits) + 1) / hits))  # the metric uses those ranks
    # a gallery smaller than K gives a shorter row
    assert len(rank_gallery(dist, 1, 0, pids, cams, topk=50)) == 5
    with pytest.raises(ValueError, match="topk"):
        rank_gallery(dist, 1, 0, pids, cams, topk=0)


def test_select_queries_modes_and_notes():
    ap = np.array([0.5, np.nan, 0.1, 0.9, 0.1, 0.7])
    worst = select_queries(ap, "worst", k=3)
    assert worst.indices.tolist() == [2, 4, 0]  # equal APs keep index order
    assert any("no valid gallery match" in n for n in worst.notes)
    assert select_queries(ap, "best", k=2).indices.tolist() == [3, 5]
    r1, r2 = select_queries(ap, "random", k=3, seed=7), select_queries(ap, "random", k=3, seed=7)
    assert r1.indices.tolist() == r2.indices.tolist() and 1 not in r1.indices
    assert len(select_queries(ap, "random", k=100).indices) == 5  # capped at the valid queries
    paths = [f"/data/q/{i:04d}_c1.jpg" for i in range(6)]
    given = select_queries(ap, "indices", indices=[3, 1, 3], names=["0005_c1.jpg"], paths=paths)
    assert given.indices.tolist() == [3, 5]  # NaN query 1 skipped, repeat dropped, name resolved
    assert any("query 1" in n and "skipped" in n for n in given.notes)
    with pytest.raises(ValueError, match="No query image is named 'nope.jpg'"):
        select_queries(ap, "indices", names=["nope.jpg"], paths=paths)
    with pytest.raises(IndexError, match="out of range"):
        select_queries(ap, "indices", indices=[6])
    with pytest.raises(ValueError, match="Unknown query selection mode"):
        select_queries(ap, "median")
    with pytest.raises(ValueError, match="needs query indices"):
        select_queries(ap, "indices")


def test_picture_borders_colours_at_ranks(example, tmp_path):
    query, gallery, dist = example
    out = tmp_path / "out"
    res = visualize_ranked_results(dist, query, gallery, str(out), topk=4, mode="indices", indices=[0],
                                   all_AP=np.array([0.6, 0.4]), tile_height=128, image_format="png")
    (pic,) = res.pictures
    path = out / pic.image_file
    assert path.is_file() and path.stat().st_size > 1000
    img = _read(str(path))
    geom, xs, y0 = _tile_layout(img)
    # width: margins, query tile, the wide gap, then 4 result tiles with border-wide gaps
    assert img.shape[1] == 4 * geom.border + 5 * geom.width + 4 * geom.border + 3 * geom.border
    assert geom.image_h == 128 and geom.image_w == 64  # the dataset's aspect ratio is kept
    yc = y0 + geom.border + geom.image_h // 2
    fills = [GALLERY[i][3] for i in (1, 2, 3, 4)]
    colours = [MISMATCH_COLOR, MATCH_COLOR, MISMATCH_COLOR, MATCH_COLOR]
    assert tuple(img[yc, xs[0] + geom.border // 2]) == QUERY_COLOR
    assert tuple(img[yc, xs[0] + geom.width // 2]) == QUERY_FILL
    for i, (colour, fill) in enumerate(zip(colours, fills), start=1):
        assert tuple(img[yc, xs[i] + geom.border // 2]) == colour, f"left border of tile {i}"
        assert tuple(img[y0 + geom.border // 2, xs[i] + geom.width // 2]) == colour, f"top border of tile {i}"
        assert tuple(img[yc, xs[i] + geom.width // 2]) == fill, f"image of tile {i}"
    # the junk image (yellow) appears nowhere
    assert not np.all(img == np.array(GALLERY[0][3], np.uint8), axis=2).any()
    assert [r.ranked.gallery_index.tolist() for r in pic.rows] == [[1, 2, 3, 4]]


def test_junk_shown_greyed_when_asked(example, tmp_path):
    query, gallery, dist = example
    res = visualize_ranked_results(dist, query, gallery, str(tmp_path / "o"), topk=4, mode="indices", indices=[0],
                                   all_AP=np.array([0.6, 0.4]), tile_height=128, image_format="png", show_junk=True,
                                   write_report=False)
    img = _read(os.path.join(res.output_dir, res.pictures[0].image_file))
    geom, xs, y0 = _tile_layout(img)
    yc = y0 + geom.border + geom.image_h // 2
    assert tuple(img[yc, xs[1] + geom.border // 2]) == IGNORED_COLOR
    r, g, b = (int(v) for v in img[yc, xs[1] + geom.width // 2])
    assert r == g == b and r > 128  # washed-out grey, not the yellow original
    assert tuple(img[yc, xs[2] + geom.border // 2]) == MISMATCH_COLOR  # rank 1 follows
    assert res.html_path is None and not os.path.exists(os.path.join(res.output_dir, "index.html"))


def test_gallery_smaller_than_k_and_jpeg_default(example, tmp_path):
    query, gallery, dist = example
    res = visualize_ranked_results(dist, query, gallery, str(tmp_path / "o"), topk=50, num_queries=2,
                                   all_AP=np.array([0.6, 0.4]), tile_height=128)
    assert [p.query_index for p in res.pictures] == [1, 0]  # worst first
    for p in res.pictures:
        assert p.image_file.endswith(".jpg")
        img = _read(os.path.join(res.output_dir, p.image_file))
        geom, xs, y0 = _tile_layout(img)
        n = len(p.rows[0].ranked)
        assert img.shape[1] == 4 * geom.border + (n + 1) * geom.width + 4 * geom.border + (n - 1) * geom.border
    assert len(res.pictures[1].rows[0].ranked) == 5  # query 0: 6 gallery images minus 1 junk


class _IndexParser(HTMLParser):
    """Collects query rows (data-query-index), list items by class, and image sources."""

    def __init__(self):
        super().__init__()
        self.queries, self.items, self.imgs, self._li = [], [], [], None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and a.get("class") == "query":
            self.queries.append(int(a["data-query-index"]))
        elif tag == "li":
            self._li = [a.get("class"), ""]
        elif tag == "img":
            self.imgs.append(a["src"])

    def handle_data(self, data):
        if self._li is not None:
            self._li[1] += data

    def handle_endtag(self, tag):
        if tag == "li" and self._li is not None:
            self.items.append(tuple(self._li))
            self._li = None


def test_index_html_lists_every_query_and_escapes_names(example, tmp_path):
    query, gallery, dist = example
    odd = os.path.join(os.path.dirname(gallery[2][0]), "a<b>&'c.png")
    os.rename(gallery[2][0], odd)
    gallery[2] = (odd, gallery[2][1], gallery[2][2])
    res = visualize_ranked_results(dist, query, gallery, str(tmp_path / "o"), topk=3, num_queries=5,
                                   all_AP=np.array([0.6, 0.4]), tile_height=128, image_format="png")
    text = open(res.html_path, encoding="utf-8").read()
    assert "a<b>" not in text and "a&lt;b&gt;&amp;" in text
    parser = _IndexParser()
    parser.feed(text)
    assert sorted(parser.queries) == [0, 1]
    assert parser.imgs == [p.image_file for p in res.pictures]
    assert all(os.path.isfile(os.path.join(res.output_dir, s)) for s in parser.imgs)
    q0_items = parser.items[3:6]  # query 1 is drawn first (worse AP)
    assert [c for c, _ in q0_items] == ["mismatch", "match", "mismatch"]
    assert "a<b>&'c.png" in q0_items[1][1]

    with open(res.csv_path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == sum(len(r.ranked) for p in res.pictures for r in p.rows) == 6
    q0 = [r for r in rows if r["query_index"] == "0"]
    assert [int(r["gallery_index"]) for r in q0] == [1, 2, 3]
    assert [int(r["match"]) for r in q0] == [0, 1, 0]
    assert [float(r["distance"]) for r in q0] == pytest.approx([0.1, 0.2, 0.3])
    assert float(q0[0]["AP"]) == pytest.approx(0.6)
    assert q0[1]["gallery_path"] == odd


def test_rerank_order_shown_and_both_rows(example, tmp_path):
    query, gallery, dist = example
    rerank = dist[:, ::-1].copy()  # reversed gallery order: a different ranking
    res = visualize_ranked_results(dist, query, gallery, str(tmp_path / "o"), topk=3, mode="indices", indices=[0],
                                   rerank_distmat=rerank, both_rows=True, tile_height=128, image_format="png")
    (pic,) = res.pictures
    assert [r.label for r in pic.rows] == ["original", "re-ranked"]
    assert pic.rows[0].ranked.gallery_index.tolist() == [1, 2, 3]
    # re-ranked: stable ascending order of the reversed row, junk g0 left out
    expected = [int(i) for i in np.argsort(rerank[0], kind="stable") if i != 0][:3]
    assert pic.rows[1].ranked.gallery_index.tolist() == expected
    # APs come from evaluate_rank on each distance matrix
    from reid.evaluation import evaluate_rank

    ids = ([1, 2], [g[1] for g in gallery], [0, 2], [g[2] for g in gallery])
    assert pic.rows[0].ap == pytest.approx(evaluate_rank(dist, *ids)["all_AP"][0])
    assert pic.rows[1].ap == pytest.approx(evaluate_rank(rerank, *ids)["all_AP"][0])
    img = _read(os.path.join(res.output_dir, pic.image_file))
    geom = TileGeometry.for_height(128, 0.5)
    assert img.shape[0] > 2 * geom.height  # two rows stacked
    single = visualize_ranked_results(dist, query, gallery, str(tmp_path / "s"), topk=3, mode="indices", indices=[0],
                                      rerank_distmat=rerank, tile_height=128, write_report=False)
    assert [r.label for r in single.pictures[0].rows] == ["re-ranked"]
    with pytest.raises(ValueError, match="both_rows=True needs rerank_distmat"):
        visualize_ranked_results(dist, query, gallery, str(tmp_path / "x"), both_rows=True)


def test_bad_inputs_name_the_problem(example, tmp_path):
    query, gallery, dist = example
    with pytest.raises(ValueError, match=r"distmat has shape \(2, 5\) but there are 2 queries and 6 gallery"):
        visualize_ranked_results(dist[:, :5], query, gallery, str(tmp_path / "o"))
    with pytest.raises(ValueError, match="all_AP has 3 values for 2 queries"):
        visualize_ranked_results(dist, query, gallery, str(tmp_path / "o"), all_AP=np.zeros(3))
    with pytest.raises(ValueError, match="3 query features for 2 query images"):
        visualize_from_features(np.zeros((3, 4)), np.zeros((6, 4)), query, gallery, str(tmp_path / "o"))
    missing = [("/nonexistent/q.png", 1, 0), query[1]]
    with pytest.raises(FileNotFoundError, match="/nonexistent/q.png.*image_root"):
        visualize_ranked_results(dist, missing, gallery, str(tmp_path / "o"), mode="indices", indices=[0],
                                 all_AP=np.array([0.5, 0.5]))


def _features_npz(path, query, gallery, qf, gf):
    np.savez(
        path,
        query_feats=qf.astype(np.float32), gallery_feats=gf.astype(np.float32),
        query_pids=np.array([q[1] for q in query]), gallery_pids=np.array([g[1] for g in gallery]),
        query_camids=np.array([q[2] for q in query]), gallery_camids=np.array([g[2] for g in gallery]),
        query_paths=np.array([q[0] for q in query]), gallery_paths=np.array([g[0] for g in gallery]),
    )
    return str(path)


def test_tools_visualize_from_saved_features(example, tmp_path, capsys):
    query, gallery, _ = example
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(5, 8))
    qf = centres[[q[1] for q in query]] + 0.3 * rng.normal(size=(2, 8))
    gf = centres[[g[1] for g in gallery]] + 0.3 * rng.normal(size=(6, 8))
    npz = _features_npz(tmp_path / "feats.npz", query, gallery, qf, gf)
    tool = load_tool("visualize")
    out = tmp_path / "vis"
    rc = tool.main([npz, "-o", str(out), "--topk", "3", "--rerank", "--k1", "3", "--k2", "1", "--both-rows",
                    "--format", "png", "--tile-height", "128"])
    assert rc == 0, capsys.readouterr().err
    assert (out / "index.html").is_file() and (out / "ranked_results.csv").is_file()
    assert len(list(out.glob("*.png"))) == 2
    rc = tool.main([npz, "-o", str(tmp_path / "v2"), "--queries", "q1.png", "0", "--show-junk"])
    assert rc == 0
    assert sorted(os.listdir(tmp_path / "v2"))[:2] == ["001_q00001_q1.jpg", "002_q00000_q0.jpg"]
    assert tool.main([str(tmp_path / "missing.npz"), "-o", str(out)]) == 1
    assert "missing.npz" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        tool.main(["--help"])
    assert e.value.code == 0
    assert "Examples" in capsys.readouterr().out


def test_visualize_from_features_accepts_features_objects(example, tmp_path):
    """tools/test.py passes reid.evaluation Features (torch feats) and may pass its distmats/APs."""
    import torch
    from reid.evaluation import evaluate_rank
    from reid.evaluation.extract import Features

    query, gallery, dist = example
    qfe = Features(torch.zeros(2, 4), np.array([1, 2]), np.array([0, 2]), [q[0] for q in query])
    gfe = Features(torch.zeros(6, 4), np.array([g[1] for g in gallery]), np.array([g[2] for g in gallery]),
                   [g[0] for g in gallery])
    ap = evaluate_rank(dist, qfe.pids, gfe.pids, qfe.camids, gfe.camids)["all_AP"]
    res = visualize_from_features(qfe.feats, gfe.feats, qfe, gfe, str(tmp_path / "o"), topk=2, num_queries=1,
                                  distmat=dist, all_AP=ap, tile_height=128)
    assert len(res.pictures) == 1 and res.pictures[0].rows[0].ap == pytest.approx(np.nanmin(ap))


def test_rerun_removes_only_its_own_old_pictures(example, tmp_path, caplog):
    query, gallery, dist = example
    out = tmp_path / "o"
    out.mkdir()
    # Pictures of an earlier, larger run (both formats) and files that only look similar.
    old = ["001_q00001_q1.jpg", "017_q00042_0002_c1s1_000451_03.jpg", "020_q00007_x.png"]
    keep = ["notes.txt", "my_q00001_photo.jpg", "001_summary.jpg", "001_q00001_q1.jpg.bak"]
    for name in old + keep:
        (out / name).write_bytes(b"x")
    (out / "sub").mkdir()
    (out / "sub" / "002_q00003_y.jpg").write_bytes(b"x")  # sub-folders are not the tool's
    with caplog.at_level("INFO", logger="reid.visualization"):
        res = visualize_ranked_results(dist, query, gallery, str(out), topk=3, num_queries=1,
                                       all_AP=np.array([0.6, 0.4]), tile_height=128)
    pictures = sorted(n for n in os.listdir(out) if n.endswith((".jpg", ".png")))
    assert pictures == sorted([res.pictures[0].image_file, "my_q00001_photo.jpg", "001_summary.jpg"])
    assert all((out / n).exists() for n in keep) and (out / "sub" / "002_q00003_y.jpg").exists()
    assert "Removed 3 ranked-result pictures" in caplog.text and str(out) in caplog.text


def test_camid_is_labelled_as_such(example, tmp_path):
    from reid.visualization.items import as_items
    from reid.visualization.ranked_list import _caption

    query, gallery, dist = example
    caption = _caption("original", 0.5, 1, as_items(query), multi=False)
    assert "camid 2" in caption[1] and "cam 2" not in caption[1]
    res = visualize_ranked_results(dist, query, gallery, str(tmp_path / "o"), topk=3, num_queries=1,
                                   all_AP=np.array([0.6, 0.4]), tile_height=128)
    text = open(res.html_path, encoding="utf-8").read()
    assert "pid 2, camid 2" in text and "cam 2" not in text and "0-based" in text


def test_visualize_help_names_the_document_with_the_feature_format(capsys):
    tool = load_tool("visualize")
    with pytest.raises(SystemExit):
        tool.main(["--help"])
    out = capsys.readouterr().out
    assert "docs/evaluation.md" in out and "docs/architecture.md" not in out
    assert os.path.isfile(os.path.join(ROOT, "docs", "evaluation.md"))
    assert "## Feature files" in open(os.path.join(ROOT, "docs", "evaluation.md"), encoding="utf-8").read()


def test_make_examples_creates_its_output_folder_first(tmp_path, monkeypatch):
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "_docs_make_examples", os.path.join(ROOT, "docs", "images", "make_examples.py"))
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)

    class Stop(Exception):
        pass

    def stop(*args, **kwargs):  # stands in for the slow part (feature extraction, ~20 s)
        raise Stop

    monkeypatch.setattr(script, "histogram_data", stop)
    out = tmp_path / "new" / "images"
    with pytest.raises(Stop):
        script.main(["--out", str(out), "--work", str(tmp_path / "work")])
    assert out.is_dir()


def test_tile_heights_are_bounded_as_image_sides_are():
    from reid.config import value_range

    high = value_range("INPUT.SIZE_TEST")[1]
    assert TileGeometry.for_height(high, 0.5).image_h == high
    with pytest.raises(ValueError, match=rf"Tile height {high + 1} px is larger than any image a model reads; use at "
                                         rf"most {high}"):
        TileGeometry.for_height(high + 1, 0.5)
    with pytest.raises(ValueError, match="too small to read; use at least 32"):
        TileGeometry.for_height(31, 0.5)
