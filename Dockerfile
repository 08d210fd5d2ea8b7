# The JVM helpers (jobs/java/), compiled against the pinned Spark's jars, and the JVM dependencies (tools/jars/), fetched
# and checked, in a stage of their own.
FROM python:3.11.11-slim-bookworm AS helpers
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jdk-headless maven \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/cloudtrail
COPY requirements.lock .
RUN pip install --no-cache-dir "$(grep -E '^pyspark==' requirements.lock)"
COPY jobs/java jobs/java
COPY tools/__init__.py tools/package.py tools/
COPY tools/jars tools/jars
RUN python -m tools.package build/cloudtrail.jar && python -m tools.package build/jars

# The stand-in for AWS (docker-compose.yml's aws-stand-in, profile `stand-in`): moto's server, as the tests run it.
FROM python:3.11.11-slim-bookworm AS aws-stand-in
WORKDIR /opt/cloudtrail
COPY requirements-dev.lock .
RUN pip install --no-cache-dir "moto[server]==$(sed -n 's/^moto==//p' requirements-dev.lock)"
COPY tools/__init__.py tools/aws_stand_in.py tools/
USER nobody

# One image for the Airflow services and the Spark master and workers: same Python, same pyspark.
# Runtime only (requirements.lock): no compilers, no test tools; runs as an unprivileged user.
FROM python:3.11.11-slim-bookworm
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 50000 --create-home cloudtrail \
    && mkdir -p /opt/airflow /data/logs \
    && chown cloudtrail /opt/airflow /data/logs
WORKDIR /opt/cloudtrail
COPY requirements.lock .
RUN pip install --no-cache-dir -r requirements.lock
COPY dags dags
COPY jobs jobs
COPY plugins plugins
COPY expectations expectations
COPY tools tools
RUN python -m tools.package build/jobs.zip
COPY --from=helpers /opt/cloudtrail/build/cloudtrail.jar build/cloudtrail.jar
COPY --from=helpers /opt/cloudtrail/build/jars build/jars
ENV PYTHONPATH=/opt/cloudtrail:/opt/cloudtrail/plugins \
    CLOUDTRAIL_HOME=/opt/cloudtrail \
    PYSPARK_PYTHON=/usr/local/bin/python \
    GX_ANALYTICS_ENABLED=False
USER cloudtrail
