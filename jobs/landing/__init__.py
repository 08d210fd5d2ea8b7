"""The landing zone, a folder or an S3 bucket: CloudTrail's delivered layout (layout), a bucket's objects fetched into
the landing cache (bucket), their SQS notifications (sqs, notifications).
"""

# The modules other packages import; the rest are this package's own (tests/test_layout.py).
__all__ = ["bucket", "layout", "sqs"]
