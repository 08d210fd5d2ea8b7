"""The ingest job: new landing files into the events table and the quarantine, exactly once.

    command.py       the command line -> one IngestConfig (config.py); main(): lock, session, run, gate, exit code
    run.py           one run as named steps: recover, plan the files, stream them, record the success, report
    stream.py        the streaming query: manifests in, de-duplicated rows out (extract -> transform -> load)
    batch_writer.py  the query's foreachBatch body: a batch's statistics, then its two outputs
    config.py        the run's one config object
    deliveries.py    an S3 landing's deliveries: the queue's notifications fetched into the landing cache

`python -m jobs.cloudtrail_ingest` and `spark-submit jobs/cloudtrail_ingest.py` run command.main.
"""

from jobs import exported

# What other packages may use (jobs/__init__.py, tests/test_layout.py).
__all__ = [
    "build_session",
    "where_read",
]


def __getattr__(name: str) -> object:
    return exported(__name__, name)
