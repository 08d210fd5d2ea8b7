"""Baseline A: a plain Spark batch job, the same engine and schema with no bookkeeping.

python bench/baseline_spark.py LANDING OUT     prints {"work_s": ..., "rows": ...}
"""

import json
import sys
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from jobs.schema import EVENT_TIME_FORMAT, RECORD_FIELDS
from jobs.source_retention import landing_glob

landing, out = sys.argv[1], sys.argv[2]
spark = (
    SparkSession.builder.master("local[*]").config("spark.driver.memory", "2g").config("spark.sql.session.timeZone", "UTC").getOrCreate()
)
# The record schema with eventTime read as text (parsed below, as the product does).
record = T.StructType([T.StructField(n, T.StringType() if n == "eventTime" else t) for n, t, _ in RECORD_FIELDS])
started = time.monotonic()
files = (
    spark.read.schema(T.StructType([T.StructField("Records", T.ArrayType(record))]))
    .option("multiLine", True)
    .json(f"{landing}/{landing_glob()}")
)
events = files.select(F.explode("Records").alias("r")).select("r.*")
events = events.withColumn("eventTime", F.try_to_timestamp("eventTime", F.lit(EVENT_TIME_FORMAT))).withColumn(
    "event_date", F.to_date("eventTime")
)
events.write.mode("overwrite").partitionBy("event_date").parquet(out)
work = time.monotonic() - started
print(json.dumps({"work_s": work, "rows": spark.read.parquet(out).count()}))
