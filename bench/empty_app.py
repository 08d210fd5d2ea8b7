"""An empty Spark application: the floor any spark-submit pays (JVM, session, stop)."""

from pyspark.sql import SparkSession

SparkSession.builder.appName("empty").getOrCreate().stop()
