"""Spark jobs of the CloudTrail lake (shipped to the cluster as jobs.zip)."""
