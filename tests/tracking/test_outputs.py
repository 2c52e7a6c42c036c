"""A tracking tool's --output: never another tool's results, never its own inputs, one run at a time."""
from __future__ import annotations

import os

import pytest

from reid.tracking.outputs import OWNER_FILE, claim_output, output_owner
from reid.utils.run_lock import RunFolderBusyError
from tests._tools import load_tool
from tests.tracking.sequence_files import write_sequence


def test_one_folder_holds_one_tools_results(tmp_path):
    out = str(tmp_path / "out")
    claim_output(out, "track").release()
    assert output_owner(out) == "track" and open(os.path.join(out, OWNER_FILE)).read() == "track\n"
    claim_output(out, "track").release()  # the same tool again: its own results, replaced
    with pytest.raises(ValueError, match=r"--output .*out holds the results of tools/track.py, and "
                                         r"tools/link_cameras.py would mix its own with them"):
        claim_output(out, "link_cameras")
    older = tmp_path / "older"  # a folder of results written before the owner file existed
    older.mkdir()
    (older / "identities.json").write_text("{}")
    with pytest.raises(ValueError, match="holds the results of tools/link_cameras.py"):
        claim_output(str(older), "track")
    assert sorted(os.listdir(older)) == ["identities.json"]  # refused before anything is written


def test_inputs_inside_what_the_tool_writes_or_an_output_inside_an_input_are_refused(tmp_path):
    (tmp_path / "L" / "tracks").mkdir(parents=True)
    (tmp_path / "L" / "tracks" / "c1.txt").write_text("1,1,0,0,10,20,1,-1,-1,-1\n")
    with pytest.raises(ValueError, match=r"the input .*L/tracks lies in .*L/tracks, where tools/link_cameras.py "
                                         r"writes its results: they would replace it"):
        claim_output(str(tmp_path / "L"), "link_cameras", inputs=[str(tmp_path / "L" / "tracks")], writes=["tracks"])
    with pytest.raises(ValueError, match=r"--output .*seqs/out lies inside the input .*seqs"):
        claim_output(str(tmp_path / "seqs" / "out"), "track", inputs=[str(tmp_path / "seqs")])
    assert open(tmp_path / "L" / "tracks" / "c1.txt").read() == "1,1,0,0,10,20,1,-1,-1,-1\n"


def test_a_second_run_at_once_is_refused(tmp_path):
    out = str(tmp_path / "out")
    first = claim_output(out, "track")
    try:
        with pytest.raises(RunFolderBusyError, match="choose another --output folder"):
            claim_output(out, "track")
    finally:
        first.release()


def test_link_cameras_refuses_to_write_over_its_input_tracks_in_one_line(tmp_path, capsys):
    seqs = tmp_path / "seqs"
    write_sequence(str(seqs / "c1"), det="1,-1,5,5,20,40,0.9,-1,-1,-1\n")
    tracks = tmp_path / "L" / "tracks"
    tracks.mkdir(parents=True)
    (tracks / "c1.txt").write_text("1,1,5,5,20,40,1,-1,-1,-1\n")
    rc = load_tool("link_cameras").main(["--sequences", str(seqs), "--tracks", str(tracks), "--output",
                                         str(tmp_path / "L"), "--threshold", "0.5", "--weights", "missing.pth"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and "where tools/link_cameras.py writes its results" in err[0]
    assert (tracks / "c1.txt").read_text() == "1,1,5,5,20,40,1,-1,-1,-1\n"


def test_an_earlier_runs_reports_go_when_the_folder_is_taken_and_nothing_else(tmp_path):
    from reid.tracking.outputs import claim_output

    out = tmp_path / "out"
    claim_output(str(out), "track").release()
    for name in ("metrics.json", "summary.md", "notes.txt"):
        (out / name).write_text("earlier")
    claim_output(str(out), "track", reports=["metrics.json", "summary.md", "tracking_gain.png"]).release()
    assert sorted(os.listdir(out)) == [".circle-reid-tool", ".run.lock", "notes.txt"]
