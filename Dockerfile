# kgate: Kafka-protocol proxy.
#   docker build -t kgate .
#   docker run --rm -v "$PWD/kgate.yaml:/etc/kgate/kgate.yaml:ro" -p 9192-9448:9192-9448 kgate
# Arguments after the image name replace the default "-c /etc/kgate/kgate.yaml" (they go to `kgate run`).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

COPY . /src
RUN pip install /src \
    && rm -rf /src \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin kgate \
    && mkdir -p /etc/kgate

USER kgate
WORKDIR /tmp

# Bootstrap listener of the default layout; node ports follow it (9193-9448 for 256 nodes).
EXPOSE 9192 9193-9448

ENTRYPOINT ["kgate", "run"]
CMD ["-c", "/etc/kgate/kgate.yaml"]
