"""The landing zone, a folder or an S3 bucket: CloudTrail's delivered layout (layout), a bucket's objects fetched into
the landing cache (bucket), their SQS notifications (sqs, notifications) and what the lake keeps of them
(kept_notifications).
"""

from jobs import exported

# What other packages may use (jobs/__init__.py, tests/test_layout.py).
__all__ = [
    "BucketLanding",
    "FETCH_THREADS",
    "FILE_NAME",
    "Fetched",
    "Older",
    "Received",
    "Skipped",
    "aws_logs",
    "day_folders",
    "delivered_at",
    "delivery_date",
    "delivery_order",
    "delivery_path",
    "depth",
    "estimate",
    "exists",
    "is_bucket",
    "keep_asset_events",
    "kept",
    "listed",
    "log_files_in",
    "newest_deliveries",
    "newest_of",
    "place",
    "queue_url_default",
    "receive",
    "refused",
    "region_prefixes",
    "relative",
    "s3_client",
    "sqs_client",
]


def __getattr__(name: str) -> object:
    return exported(__name__, name)
