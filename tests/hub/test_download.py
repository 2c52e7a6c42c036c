"""Fetching published weights for real, from a server on the loopback interface: a direct file, Google
Drive's confirmation page, a cut connection resumed, a wrong hash, an HTML page instead of the file, the
cache, offline mode and the Hugging Face cache (reid/hub)."""
import hashlib
import os
import zipfile

import pytest

from reid.hub import catalogue as catalogue_module
from reid.hub.catalogue import HubEntry
from reid.hub.download import DownloadError, Expected, download
from reid.hub.resolve import fetch_entry, looks_like_name, resolve_weights

from .file_server import FileServer

DATA = os.urandom(300_000) + b"end"  # not HTML, not a zip: a stand-in for a .pth file
SHA = hashlib.sha256(DATA).hexdigest()


@pytest.fixture
def server():
    with FileServer() as s:
        yield s


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("REID_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("REID_OFFLINE", raising=False)
    return tmp_path / "home" / "hub"


def _entries(monkeypatch, *entries):
    monkeypatch.setattr(catalogue_module, "ENTRIES", tuple(entries))


def _entry(name, urls, sha256=SHA, size=len(DATA)):
    return HubEntry(name=name, family="osnet", format="torchreid", config="configs/MSMT17/osnet_x0_25_torchreid.yml",
                    filename=name.split("/")[1] + ".pth", urls=tuple(urls), dataset="MSMT17", sha256=sha256, size=size)


def _leftovers(folder):
    return sorted(p.name for p in folder.rglob("*") if p.name.endswith((".part", ".tmp")))


def test_a_direct_file_downloads_once_and_is_verified_on_every_use(server, home, monkeypatch):
    server.files["/osnet.pth"] = DATA
    _entries(monkeypatch, _entry("zoo/osnet", [server.url + "/osnet.pth"]))
    logs = []
    path = fetch_entry(catalogue_module.entry("zoo/osnet"), logs.append)
    assert path == str(home / "zoo" / "osnet.pth") and open(path, "rb").read() == DATA
    assert any("Downloading zoo/osnet from" in line for line in logs)
    assert len(server.requests) == 1
    # the second use reads the cache (no request), verifying it; a changed byte is refused, not used
    assert resolve_weights("zoo/osnet").path == path and len(server.requests) == 1
    with open(path, "r+b") as f:
        f.write(b"X")
    with pytest.raises(DownloadError, match="has sha256 .* not the expected"):
        resolve_weights("zoo/osnet")


def test_google_drive_confirmation_page_is_followed_to_the_file(server, home, monkeypatch):
    server.drive["1AbC-dEf_G"] = DATA
    monkeypatch.setenv("REID_GDRIVE_URL", server.url)
    _entries(monkeypatch, _entry("zoo/drive", ["gdrive://1AbC-dEf_G"]))
    path = fetch_entry(catalogue_module.entry("zoo/drive"), lambda line: None)
    assert open(path, "rb").read() == DATA
    assert [p for p, _ in server.requests] == ["/uc", "/download"]


def test_google_drive_quota_page_is_one_line_and_nothing_is_kept(server, home, monkeypatch):
    monkeypatch.setenv("REID_GDRIVE_URL", server.url)
    _entries(monkeypatch, _entry("zoo/popular", ["gdrive://QUOTA"]))
    with pytest.raises(DownloadError) as e:
        fetch_entry(catalogue_module.entry("zoo/popular"), lambda line: None)
    msg = str(e.value)
    assert "\n" not in msg and "Too many users have viewed or downloaded this file recently" in msg
    assert "Fetch https://drive.google.com/uc?export=download&id=QUOTA by hand" in msg
    assert not (home / "zoo" / "popular.pth").exists() and _leftovers(home) == []


def test_a_cut_connection_resumes_where_it_stopped(server, home, monkeypatch):
    server.files["/big.pth"] = DATA
    server.cut.add("/big.pth")
    _entries(monkeypatch, _entry("zoo/big", [server.url + "/big.pth"]))
    path = fetch_entry(catalogue_module.entry("zoo/big"), lambda line: None)
    assert open(path, "rb").read() == DATA
    # the first request got half; the second asked for the rest only
    assert server.requests == [("/big.pth", None), ("/big.pth", f"bytes={(len(DATA)) // 2}-")]


def test_a_cut_left_by_an_earlier_run_is_resumed_by_the_next(server, tmp_path):
    server.files["/big.pth"] = DATA
    server.cut.add("/big.pth")
    dest = str(tmp_path / "big.pth")
    with pytest.raises(DownloadError, match=r"bytes are kept in .*big.pth.part and the next try resumes"):
        download(server.url + "/big.pth", dest, Expected(SHA, len(DATA)), "zoo/big", retries=1)
    assert os.path.getsize(dest + ".part") == len(DATA) // 2 and not os.path.exists(dest)
    assert download(server.url + "/big.pth", dest, Expected(SHA, len(DATA)), "zoo/big", retries=1) == SHA
    assert open(dest, "rb").read() == DATA and not os.path.exists(dest + ".part")


def test_a_server_that_ignores_range_starts_over(server, tmp_path):
    server.files["/f.pth"] = DATA
    server.ignore_range = True
    dest = str(tmp_path / "f.pth")
    with open(dest + ".part", "wb") as f:
        f.write(b"garbage from before")
    assert download(server.url + "/f.pth", dest, Expected(SHA), "zoo/f") == SHA
    assert open(dest, "rb").read() == DATA


def test_a_wrong_hash_is_refused_and_the_next_source_is_tried(server, home, monkeypatch):
    server.files["/replaced.pth"] = DATA[::-1]  # the host replaced the file
    server.files["/mirror.pth"] = DATA
    _entries(monkeypatch, _entry("zoo/osnet", [server.url + "/replaced.pth", server.url + "/mirror.pth"]))
    path = fetch_entry(catalogue_module.entry("zoo/osnet"), lambda line: None)
    assert open(path, "rb").read() == DATA
    # with only the replaced file, nothing is kept and the line says why
    os.remove(path)
    _entries(monkeypatch, _entry("zoo/osnet", [server.url + "/replaced.pth"]))
    with pytest.raises(DownloadError) as e:
        fetch_entry(catalogue_module.entry("zoo/osnet"), lambda line: None)
    assert "\n" not in str(e.value) and f"not the expected {SHA}" in str(e.value) and "replaced or damaged" in str(e.value)
    assert not os.path.exists(path) and _leftovers(home) == []


def test_an_html_page_instead_of_the_file_is_never_kept(server, home, monkeypatch):
    server.html.add("/login.pth")
    _entries(monkeypatch, _entry("zoo/private", [server.url + "/login.pth"]))
    with pytest.raises(DownloadError, match="served an HTML page instead of the file"):
        fetch_entry(catalogue_module.entry("zoo/private"), lambda line: None)
    assert list((home / "zoo").iterdir()) == [home / "zoo" / "private.pth.lock"]


def test_without_a_published_hash_the_first_download_records_one(server, home, monkeypatch):
    server.files["/new.pth"] = DATA
    _entries(monkeypatch, _entry("zoo/new", [server.url + "/new.pth"], sha256=None, size=None))
    logs = []
    path = fetch_entry(catalogue_module.entry("zoo/new"), logs.append)
    assert open(path + ".sha256").read().split()[0] == SHA
    assert any(f"recorded {SHA}" in line for line in logs)
    # the host later serves other bytes: a fresh download must match the recorded hash
    os.remove(path)
    server.files["/new.pth"] = DATA[::-1]
    with pytest.raises(DownloadError, match=f"not the expected {SHA}"):
        fetch_entry(catalogue_module.entry("zoo/new"), lambda line: None)


def test_offline_uses_the_cache_and_names_the_missing_file(server, home, monkeypatch):
    server.files["/osnet.pth"] = DATA
    _entries(monkeypatch, _entry("zoo/osnet", [server.url + "/osnet.pth"]), _entry("zoo/other", [server.url + "/x.pth"]))
    path = fetch_entry(catalogue_module.entry("zoo/osnet"), lambda line: None)
    monkeypatch.setenv("REID_OFFLINE", "1")
    before = len(server.requests)
    assert resolve_weights("zoo/osnet").path == path and len(server.requests) == before
    with pytest.raises(DownloadError) as e:
        resolve_weights("zoo/other")
    msg = str(e.value)
    assert "zoo/other is not in the cache" in msg and str(home / "zoo" / "other.pth") in msg
    assert f"fetch {server.url}/x.pth by hand" in msg and len(server.requests) == before


def test_no_network_is_one_line_with_the_address_to_fetch_by_hand(home, monkeypatch):
    # a port on the loopback interface where nothing listens: the connection is refused
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    _entries(monkeypatch, _entry("zoo/osnet", [f"http://127.0.0.1:{port}/osnet.pth"]))
    with pytest.raises(DownloadError) as e:
        resolve_weights("zoo/osnet")
    msg = str(e.value)
    assert "\n" not in msg and "Could not fetch zoo/osnet" in msg and "refused" in msg.lower()
    assert f"Fetch http://127.0.0.1:{port}/osnet.pth by hand and put it at {home / 'zoo' / 'osnet.pth'}" in msg


def test_a_zip_bomb_is_refused_before_anything_reads_it(server, home, monkeypatch, tmp_path):
    from reid.hub import download as download_module

    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("archive/data/0", b"\0" * (8 << 20))  # 8 MB of zeros pack into a few KB
    server.files["/bomb.pth"] = bomb.read_bytes()
    monkeypatch.setattr(download_module, "ZIP_MIN_BYTES", 1 << 20)
    _entries(monkeypatch, _entry("zoo/bomb", [server.url + "/bomb.pth"], sha256=None, size=None))
    with pytest.raises(DownloadError, match="zip bomb"):
        fetch_entry(catalogue_module.entry("zoo/bomb"), lambda line: None)
    assert not (home / "zoo" / "bomb.pth").exists()


@pytest.mark.parametrize("kind, message", [("file", "is a file, not a folder"), ("read-only", "is read-only")])
def test_a_cache_that_cannot_be_written_is_one_line(server, home, monkeypatch, kind, message):
    server.files["/osnet.pth"] = DATA
    if kind == "file":
        home.parent.mkdir(parents=True)
        home.write_text("x")
    else:  # (root may write into a folder without write permission: the check is what is tested)
        home.mkdir(parents=True)
        real_access = os.access
        monkeypatch.setattr(os, "access", lambda p, mode: False if str(p).startswith(str(home)) else real_access(p, mode))
    _entries(monkeypatch, _entry("zoo/osnet", [server.url + "/osnet.pth"]))
    with pytest.raises(DownloadError, match=message) as e:
        resolve_weights("zoo/osnet")
    assert "REID_HOME" in str(e.value) and "\n" not in str(e.value) and server.requests == []


def test_names_paths_and_suggestions(home, monkeypatch, tmp_path):
    from reid.hub.catalogue import UnknownModelError

    _entries(monkeypatch, _entry("torchreid/osnet_x0_25_msmt17", ["http://127.0.0.1:9/never"]))
    assert looks_like_name("torchreid/osnet_x0_25_msmt17") and looks_like_name("hf://org/repo/file.pth")
    assert looks_like_name("torchreid/osnet_x0_25_msmt")  # the publisher is known: a misspelt name
    assert not looks_like_name("runs/model_final.pth") and not looks_like_name("someone/model")
    local = tmp_path / "torchreid" / "osnet_x0_25_msmt17"
    local.parent.mkdir()
    local.write_bytes(b"x")
    monkeypatch.chdir(tmp_path)
    assert not looks_like_name("torchreid/osnet_x0_25_msmt17")  # an existing path stays a path
    monkeypatch.chdir(home.parent.parent)
    with pytest.raises(UnknownModelError) as e:
        resolve_weights("torchreid/osnet_x0_25_msmt")
    assert "Did you mean torchreid/osnet_x0_25_msmt17?" in str(e.value) and "tools/hub.py list" in str(e.value)


def test_a_part_file_that_is_a_link_is_never_written_through(server, home, monkeypatch, tmp_path):
    server.files["/osnet.pth"] = DATA
    _entries(monkeypatch, _entry("zoo/osnet", [server.url + "/osnet.pth"]))
    mine = tmp_path / "my_notes.txt"
    mine.write_text("mine")
    (home / "zoo").mkdir(parents=True)
    (home / "zoo" / "osnet.pth.part").symlink_to(mine)
    with pytest.raises(DownloadError, match=r"osnet.pth.part is not a plain file of the download .* remove it"):
        resolve_weights("zoo/osnet")
    assert mine.read_text() == "mine" and server.requests == []


@pytest.mark.parametrize("kind", ["folder", "link", "fifo"])
def test_a_cache_entry_that_is_not_the_file_is_one_line_and_kept(server, home, monkeypatch, tmp_path, kind):
    server.files["/osnet.pth"] = DATA
    _entries(monkeypatch, _entry("zoo/osnet", [server.url + "/osnet.pth"]))
    path = home / "zoo" / "osnet.pth"
    path.parent.mkdir(parents=True)
    target = tmp_path / "elsewhere.pth"
    target.write_bytes(DATA)  # a link to the right bytes is still not the cache's own file
    {"folder": lambda: path.mkdir(), "link": lambda: path.symlink_to(target), "fifo": lambda: os.mkfifo(path)}[kind]()
    with pytest.raises(DownloadError, match="as a link, a folder or a special file") as e:
        resolve_weights("zoo/osnet")
    assert "\n" not in str(e.value) and os.path.lexists(path) and target.read_bytes() == DATA and server.requests == []


def test_a_host_that_sends_more_than_the_file_is_cut_off(server, tmp_path):
    server.files["/endless.pth"] = DATA + DATA
    dest = str(tmp_path / "f.pth")
    with pytest.raises(DownloadError, match=f"sent more than {len(DATA):,} bytes"):
        download(server.url + "/endless.pth", dest, Expected(SHA, len(DATA)), "zoo/f")
    assert not os.path.exists(dest) and not os.path.exists(dest + ".part")
