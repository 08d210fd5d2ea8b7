"""Baseline B: the recipe from Spark's guide a new user starts from, the floor the product must beat.

python bench/baseline_recipe.py LANDING OUT     prints {"work_s": ..., "rows": ...}

An availableNow file stream with a schema, an event-time watermark and dropDuplicatesWithinWatermark
on eventID, and Spark's Parquet file sink partitioned by date. It does less than the product: no
quarantine, no rescued fields, no ledger, no gate, and its watermark on event time drops late events.
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
spark = spark_session("baseline_recipe")  # the product's shared settings (UTC, listing in the driver, the JVM's collector)
record = T.StructType([T.StructField(n, T.StringType() if n == "eventTime" else t) for n, t, _ in RECORD_FIELDS])
started = time.monotonic()
files = (
    spark.readStream.schema(T.StructType([T.StructField("Records", T.ArrayType(record))]))
    .option("multiLine", True)
    .option("maxFilesPerTrigger", 100)
    .json(f"{landing}/{landing_glob()}")
)
events = (
    files.select(F.explode("Records").alias("r"))
    .select("r.*")
    .withColumn("eventTime", F.try_to_timestamp("eventTime", F.lit(EVENT_TIME_FORMAT)))
    .withColumn(EVENT_DATE, F.to_date("eventTime"))
)
query = (
    events.withWatermark("eventTime", "2 days")
    .dropDuplicatesWithinWatermark(["eventID"])
    .writeStream.format("parquet")
    .option("path", out)
    .option("checkpointLocation", f"{out}-checkpoint")
    .partitionBy(EVENT_DATE)
    .trigger(availableNow=True)
    .start()
)
query.awaitTermination()
work = time.monotonic() - started
print(json.dumps({"work_s": work, "rows": spark.read.parquet(out).count()}))
