# h5feed producer image: the producer extra only (no TensorFlow), non-root, with an init.
#   docker build -t h5feed-producer .
#   docker run --rm -v /data:/data:ro -v /etc/h5feed/keys:/keys:ro \
#     -e H5FEED_CONNECT=tcp://trainer:5555 -e H5FEED_KEY=/keys/producer1.key_secret \
#     -e H5FEED_SERVER_KEY=/keys/trainer.key h5feed-producer
# A --connect beyond loopback without keys is refused (exit 2) unless H5FEED_INSECURE=1.
# The secret key must be readable by uid 10001 (the user below): chown it, mode 0400/0600.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY h5feed ./h5feed
# Wheels of h5feed (base install: numpy, h5py, pyzmq, msgpack, OpenCV headless) and dumb-init.
RUN python3 -m pip wheel --no-cache-dir --wheel-dir /wheels . dumb-init

FROM python:3.11-slim
RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin h5feed
COPY --from=build /wheels /wheels
RUN python3 -m pip install --no-cache-dir --no-index --find-links /wheels h5feed dumb-init \
    && rm -rf /wheels
USER h5feed
ENV H5FEED_DATA_ROOT=/data \
    H5FEED_HEALTH_FILE=/tmp/h5feed-producer.health \
    H5FEED_CACHE_DIR=/tmp/h5feed-index \
    PYTHONUNBUFFERED=1
# dumb-init is PID 1: it forwards SIGTERM to the producer and reaps what exits.
ENTRYPOINT ["dumb-init", "--"]
CMD ["h5feed", "produce"]
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
    CMD ["h5feed", "health", "/tmp/h5feed-producer.health"]
