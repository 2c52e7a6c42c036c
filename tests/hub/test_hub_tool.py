"""tools/hub.py: list, show, download and verify, against a server on the loopback interface."""
import hashlib
import importlib
import os

import pytest

from reid.cli import hub as cli_hub

from .file_server import FileServer

DATA = os.urandom(50_000)


@pytest.fixture
def zoo(tmp_path, monkeypatch):
    from reid.hub.catalogue import HubEntry

    monkeypatch.setenv("REID_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("REID_OFFLINE", raising=False)
    with FileServer() as server:
        server.files["/a.pth"] = DATA
        server.files["/b.pth"] = DATA[::-1]
        entries = (
            HubEntry("zoo/a", "osnet", "torchreid", "configs/MSMT17/osnet_x0_25_torchreid.yml", "a.pth",
                     (server.url + "/a.pth",), "MSMT17", hashlib.sha256(DATA).hexdigest(), len(DATA),
                     {"R-1": 61.4, "mAP": 29.5}, "https://zoo.example/page"),
            HubEntry("zoo/b", "bot", "fastreid", "configs/Market1501/bot_resnet50.yml", "b.pth", (server.url + "/b.pth",),
                     "Market-1501"),
        )
        monkeypatch.setattr(importlib.import_module("reid.hub.catalogue"), "ENTRIES", entries)
        yield server, tmp_path / "home" / "hub"


def test_list_show_download_verify(zoo, capsys):
    server, home = zoo
    assert cli_hub.main(["list"]) == 0
    out = capsys.readouterr().out
    assert "zoo/a" in out and "R-1 61.4 / mAP 29.5" in out and "2 model(s)" in out
    assert cli_hub.main(["list", "--family", "osnet"]) == 0 and "zoo/b" not in capsys.readouterr().out
    assert cli_hub.main(["verify"]) == 0 and "No file in the cache yet" in capsys.readouterr().out
    assert cli_hub.main(["download", "zoo/a", "zoo/b"]) == 0
    assert (home / "zoo" / "a.pth").read_bytes() == DATA and (home / "zoo" / "b.pth").read_bytes() == DATA[::-1]
    capsys.readouterr()
    assert cli_hub.main(["show", "zoo/b"]) == 0
    out = capsys.readouterr().out
    assert f"recorded on first download: {hashlib.sha256(DATA[::-1]).hexdigest()}" in out and "present" in out
    assert cli_hub.main(["verify"]) == 0
    out = capsys.readouterr().out
    assert "zoo/a: ok" in out and "zoo/b: ok" in out and "(recorded on first download)" in out
    (home / "zoo" / "b.pth").write_bytes(DATA)  # replaced after the first download
    assert cli_hub.main(["verify", "zoo/b"]) == 1 and "zoo/b: FAILED" in capsys.readouterr().out


def test_unknown_names_and_families_are_one_line(zoo, capsys):
    server, _ = zoo
    assert cli_hub.main(["download", "zoo/a", "zoo/c"]) == 1  # every name checked before anything is fetched
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert err.startswith("error: 'zoo/c' is not in the catalogue of published weights. Did you mean zoo/")
    assert "zoo/a" in err and "zoo/b" in err and err.endswith("`python tools/hub.py list` shows every name.")
    assert server.requests == []
    assert cli_hub.main(["list", "--family", "resnet"]) == 1
    assert "--family 'resnet' is not one of: osnet" in capsys.readouterr().err
