"""Baseline C: a Spark batch job that drops duplicate eventIDs, the same engine and schema with no bookkeeping.

python bench/baseline_dedup.py LANDING OUT     prints {"work_s": ..., "rows": ...}
"""

import json
import sys
import time

from pyspark.sql import functions as F
from pyspark.sql import types as T

from jobs.lake import EVENT_DATE
from jobs.landing.layout import landing_glob
from jobs.records.schema import EVENT_TIME_FORMAT, RECORD_FIELDS
from jobs.spark.session import spark_session

landing, out = sys.argv[1], sys.argv[2]
spark = spark_session("baseline_dedup")  # the product's shared settings (UTC, listing in the driver, the JVM's collector)
record = T.StructType([T.StructField(n, T.StringType() if n == "eventTime" else t) for n, t, _ in RECORD_FIELDS])
started = time.monotonic()
files = (
    spark.read.schema(T.StructType([T.StructField("Records", T.ArrayType(record))]))
    .option("multiLine", True)
    .json(f"{landing}/{landing_glob()}")
)
events = files.select(F.explode("Records").alias("r")).select("r.*").dropDuplicates(["eventID"])
events = events.withColumn("eventTime", F.try_to_timestamp("eventTime", F.lit(EVENT_TIME_FORMAT))).withColumn(
    EVENT_DATE, F.to_date("eventTime")
)
events.write.mode("overwrite").partitionBy(EVENT_DATE).parquet(out)
work = time.monotonic() - started
print(json.dumps({"work_s": work, "rows": spark.read.parquet(out).count()}))
