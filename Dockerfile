# One image for web, worker and beat (docker-compose.yml picks the command).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    CPR_VAR_DIR=/app/var \
    CPR_DATA_DIR=/app/data \
    HOST=0.0.0.0

WORKDIR /app
COPY pyproject.toml README.md ./
COPY common ./common
COPY config ./config
COPY bots ./bots
COPY proxy ./proxy
COPY telemetry ./telemetry
COPY templates ./templates
COPY manage.py ./
RUN pip install --no-cache-dir . \
    && useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin cpr \
    && mkdir -p /app/var /app/data \
    && chown -R cpr /app/var /app/data

USER 10001
EXPOSE 8000
CMD ["python", "-m", "config.run", "web"]
