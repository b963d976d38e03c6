"""Listing a folder another writer creates at that moment.

pyarrow's local listing, when the folder is missing, checks whether it exists after all,
and fails if it does: a folder made in between (fetch partition 1 committing its first
chunk while partition 0 resumes and lists the same segment's ``fetched/``) failed a fetch
partition in CI. The race is made certain here by a file system that creates the folder
when first asked to list it, and answers as pyarrow's local listing does then.
"""

from __future__ import annotations

import pyarrow.fs as pafs
import pytest

from cycles.storage.store import Store


class FolderMadeWhileListing(pafs.FileSystemHandler):
    """The local file system, but the first listing of a missing folder creates it (the
    other writer) and fails as pyarrow's own listing does when that happens."""

    def __init__(self):
        self.local = pafs.LocalFileSystem()
        self.raced = False

    def get_file_info_selector(self, selector):
        if not self.raced and not self.local.get_file_info(selector.base_dir).type == pafs.FileType.Directory:
            self.raced = True
            self.local.create_dir(selector.base_dir)
            (pafs.LocalFileSystem().open_output_stream(selector.base_dir + "/part-00001-c00001.parquet")
             .close())
            raise FileNotFoundError(f"Cannot list directory '{selector.base_dir}'")
        return self.local.get_file_info(selector)

    # The rest is the local file system's.
    def get_type_name(self): return "raced-local"
    def equals(self, other): return self is other
    def get_file_info(self, paths): return self.local.get_file_info(paths)
    def create_dir(self, path, recursive): self.local.create_dir(path, recursive=recursive)
    def delete_dir(self, path): self.local.delete_dir(path)
    def delete_dir_contents(self, path, missing_dir_ok=False): self.local.delete_dir_contents(path, missing_dir_ok)
    def delete_root_dir_contents(self): raise NotImplementedError
    def delete_file(self, path): self.local.delete_file(path)
    def move(self, src, dest): self.local.move(src, dest)
    def copy_file(self, src, dest): self.local.copy_file(src, dest)
    def open_input_stream(self, path): return self.local.open_input_stream(path)
    def open_input_file(self, path): return self.local.open_input_file(path)
    def open_output_stream(self, path, metadata): return self.local.open_output_stream(path)
    def open_append_stream(self, path, metadata): return self.local.open_append_stream(path)
    def normalize_path(self, path): return path


def test_a_folder_made_while_it_is_listed_is_listed_not_an_error(tmp_path):
    store = Store(tmp_path / "data")
    folder = store.root / "segments" / "s1" / "fetched"
    # Positive control: the raw listing fails on the race, allow_not_found notwithstanding.
    raw = pafs.PyFileSystem(FolderMadeWhileListing())
    with pytest.raises(FileNotFoundError):
        raw.get_file_info(pafs.FileSelector(str(tmp_path / "other"), allow_not_found=True))
    store.fs = pafs.PyFileSystem(FolderMadeWhileListing())
    assert [p.name for p in store.list(folder, "part-*.parquet")] == ["part-00001-c00001.parquet"]
