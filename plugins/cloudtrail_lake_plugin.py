"""Registers the "CloudTrail lake" page (cloudtrail_airflow/lake_view.py) with the Airflow 3 UI.

The API server mounts the page's FastAPI app at /cloudtrail; the UI shows it under Browse
as "CloudTrail lake", and on every DAG run as a "Lake" tab (an iframe of the run's view).
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from cloudtrail_airflow.lake_view import app


class CloudTrailLakePlugin(AirflowPlugin):
    name = "cloudtrail_lake"
    fastapi_apps = [{"app": app, "url_prefix": "/cloudtrail", "name": "CloudTrail lake"}]
    external_views = [
        {"name": "CloudTrail lake", "href": "/cloudtrail/", "destination": "nav", "category": "browse", "url_route": "cloudtrail_lake"},
        {"name": "Lake", "href": "/cloudtrail/runs/{DAG_ID}/{RUN_ID}", "destination": "dag_run", "url_route": "cloudtrail_lake_run"},
    ]
