"""Spark as the jobs use it: the session (session), Spark's own logs and state read and mended where Spark has no API
(logs, state), the tables" sinks (sinks), and the ingest checkpoint (checkpoint).
"""

from jobs import exported

# What other packages may use (jobs/__init__.py, tests/test_layout.py).
__all__ = [
    "CLASS_ARCHIVE_QUIET",
    "CheckpointError",
    "CheckpointSnapshot",
    "JobSession",
    "LastSuccess",
    "LogEntry",
    "STREAM_CONF",
    "SourceLog",
    "WRITTEN_BY_BATCH",
    "batch_time",
    "checkpoint_location",
    "class_archive",
    "class_archive_size",
    "classic_jvm",
    "for_table_reads",
    "forget_batch",
    "last_commit",
    "local_path",
    "make_folder",
    "make_state_folders",
    "missing_for_rollback",
    "open_for_ingest",
    "planned_batch_id",
    "read_source_log",
    "relocate_source_log",
    "record_success",
    "rewrite_compaction",
    "rollback_checkpoint",
    "set_state_partitions",
    "sink_batch",
    "sink_log",
    "sink_log_files",
    "source_file",
    "source_offset",
    "spark_session",
    "state_folder",
    "state_partitions",
    "state_version_files",
    "stop_state_stores",
    "stream_id",
    "write_tables",
]


def __getattr__(name: str) -> object:
    return exported(__name__, name)
