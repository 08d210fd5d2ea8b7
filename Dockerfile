# One image for the Airflow services and the Spark master/worker: same Python, same pyspark.
FROM python:3.11-slim-bookworm
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps make \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/cloudtrail
COPY requirements.lock .
RUN pip install --no-cache-dir -r requirements.lock
COPY . .
RUN make build/jobs.zip PY=python STAMP=
ENV PYTHONPATH=/opt/cloudtrail:/opt/cloudtrail/plugins \
    CLOUDTRAIL_HOME=/opt/cloudtrail \
    PYSPARK_PYTHON=/usr/local/bin/python
