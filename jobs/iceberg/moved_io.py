"""pyiceberg's file IO with one root mapped to another: a moved lake's Iceberg metadata, which names its files under
the lake's old path, read where the lake is now (jobs/iceberg/embedded.py names it by `py-io-impl`)."""

from __future__ import annotations

from pyiceberg.io.pyarrow import PyArrowFile, PyArrowFileIO

from jobs.iceberg.embedded import MOVED_FROM, MOVED_TO, moved


class MovedFileIO(PyArrowFileIO):
    def new_input(self, location: str) -> PyArrowFile:
        old, new = self.properties.get(MOVED_FROM), self.properties.get(MOVED_TO)
        return super().new_input(moved(location, old, new) if old and new else location)
