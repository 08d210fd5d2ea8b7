"""The ingest job: new landing files into the events table and the quarantine, exactly once.

    cli.py           the command line -> one IngestConfig (config.py); main(): lock, session, run, gate, exit code
    run.py           one run as named steps: recover, plan the files, stream them, record the success, report
    stream.py        the streaming query: manifests in, de-duplicated rows out (extract -> transform -> load)
    batch_writer.py  the query's foreachBatch body: a batch's statistics, then its two outputs

`python -m jobs.cloudtrail_ingest` and `spark-submit jobs/cloudtrail_ingest.py` run cli.main.
"""
