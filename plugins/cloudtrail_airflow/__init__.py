"""Airflow-side helpers for the CloudTrail DAGs: run parameters, their validation, callbacks.

Nothing here imports Spark or Great Expectations; the DAG file imports this at parse time.
"""
