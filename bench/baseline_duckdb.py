"""Baseline B: DuckDB, one COPY from the gzipped JSON to event-date partitioned Parquet.

python bench/baseline_duckdb.py LANDING OUT     prints {"work_s": ..., "rows": ...}
"""

import json
import sys
import time

import duckdb

from jobs.lake import EVENT_DATE

landing, out = sys.argv[1], sys.argv[2]
db = duckdb.connect()
db.execute("SET preserve_insertion_order = false")  # lets the partitioned COPY stream instead of buffering
started = time.monotonic()
db.execute(f"""
    COPY (
        SELECT r->>'eventVersion' AS eventVersion, r->'userIdentity' AS userIdentity,
               (r->>'eventTime')::TIMESTAMPTZ AS eventTime, r->>'eventSource' AS eventSource, r->>'eventName' AS eventName,
               r->>'awsRegion' AS awsRegion, r->>'sourceIPAddress' AS sourceIPAddress, r->>'userAgent' AS userAgent,
               r->>'errorCode' AS errorCode, r->>'errorMessage' AS errorMessage,
               CAST(r->'requestParameters' AS VARCHAR) AS requestParameters, CAST(r->'responseElements' AS VARCHAR) AS responseElements,
               CAST(r->'additionalEventData' AS VARCHAR) AS additionalEventData, r->>'requestID' AS requestID, r->>'eventID' AS eventID,
               (r->>'readOnly')::BOOLEAN AS readOnly, r->'resources' AS resources, r->>'eventType' AS eventType,
               r->>'recipientAccountId' AS recipientAccountId, r->'tlsDetails' AS tlsDetails,
               CAST((r->>'eventTime')::TIMESTAMPTZ AS DATE) AS {EVENT_DATE}
        FROM (SELECT unnest(Records) AS r FROM read_json('{landing}/AWSLogs/*/CloudTrail/*/*/*/*/*.json.gz',
                                                        columns = {{Records: 'JSON[]'}}))
    ) TO '{out}' (FORMAT parquet, PARTITION_BY ({EVENT_DATE}), OVERWRITE_OR_IGNORE)
""")
work = time.monotonic() - started
print(json.dumps({"work_s": work, "rows": db.execute(f"select count(*) from read_parquet('{out}/*/*.parquet')").fetchall()[0][0]}))
