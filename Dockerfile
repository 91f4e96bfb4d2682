# Stepwise application image: the web server (gunicorn) and the Celery worker run from it.
# Debian's prometheus package is included: the worker serves each job's TSDB with a private,
# read-only copy (playbooks/tsdb_server.py); openssh-client opens SSH tunnels to live jobs (playbooks/tunnel.py).
FROM python:3.12-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN apt-get update \
 && apt-get install -y --no-install-recommends prometheus openssh-client \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app
# Only what the app needs (no .venv, no data/): the source tree is the install (editable), so that
# templates/ and static/ sit next to the packages as settings.BASE_DIR expects.
COPY pyproject.toml manage.py gunicorn.conf.py ./
COPY stepwise ./stepwise
COPY investigations ./investigations
COPY reports ./reports
COPY playbooks ./playbooks
COPY templates ./templates
COPY static ./static
RUN pip install -e .
# PYTHONDONTWRITEBYTECODE keeps the running app from writing bytecode, so the project's is compiled once here:
# without it every `manage.py` command compiles the modules it imports again (0.1-0.2 s of CPU a start).
RUN python -m compileall -q stepwise investigations reports playbooks

# Collected at build time with a throwaway key and data dir, so nothing secret lands in the image.
# Hashed names and gzip/brotli copies, served compressed and cached for a year (settings.py).
ENV STEPWISE_STATIC_ROOT=/app/staticfiles \
    STEPWISE_STATIC_COLLECTED=1
RUN SECRET_KEY=build-time-only-not-a-secret-0123456789abcdef STEPWISE_DATA_DIR=/tmp/build-data \
    python manage.py collectstatic --noinput -v 0 && rm -rf /tmp/build-data

RUN useradd --system --uid 10001 --home-dir /app stepwise \
 && mkdir -p /data \
 && chown stepwise /data
USER stepwise
ENV STEPWISE_DATA_DIR=/data \
    STEPWISE_BIND=0.0.0.0:8000

EXPOSE 8000
CMD ["gunicorn", "stepwise.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3", "--threads", "4", "--access-logfile", "-"]
