# kgate: Kafka-protocol proxy.
#   docker build -t kgate .
#   docker run --rm -v "$PWD/kgate.yaml:/etc/kgate/kgate.yaml:ro" -p 9192-9448:9192-9448 -p 9190:9190 kgate
# Arguments after the image name replace the default "-c /etc/kgate/kgate.yaml" (they go to `kgate run`).
# No container engine runs where kgate is developed: tools/check_image.py checks these steps without one
# (tests/unit/test_check_image.py runs it in CI); see docs/deployment.md.

# -- build: kgate's wheel, from the source tree, its hot modules compiled -----------------------------
# KGATE_WHEEL_COMPILED=1 (setup.py) compiles the request path's modules with mypyc: 25-32 % fewer
# instructions per request than pure Python (docs/performance.md). It needs a C compiler and mypy;
# both stay in this stage. The pinned build tools (docker/build-requirements.txt) and the runtime
# lock are installed without resolving anything.
FROM python:3.11.7-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
COPY requirements.lock docker/build-requirements.txt /tmp/
RUN pip install --no-deps -r /tmp/requirements.lock -r /tmp/build-requirements.txt
COPY . /src
RUN KGATE_WHEEL_COMPILED=1 pip wheel --no-deps --no-build-isolation --wheel-dir /wheels /src

# -- run: the pinned dependencies, then the wheel without resolving anything again ---------------------
FROM python:3.11.7-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

COPY requirements.lock /tmp/requirements.lock
COPY --from=build /wheels /tmp/wheels
RUN pip install --no-deps -r /tmp/requirements.lock \
    && pip install --no-deps /tmp/wheels/*.whl \
    && pip check \
    && rm -rf /tmp/wheels /tmp/requirements.lock \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin kgate \
    && mkdir -p /etc/kgate
COPY docker/kgate.yaml /etc/kgate/kgate.yaml

USER 10001:10001
WORKDIR /tmp

# 9190: the admin listener (/livez, /readyz, /metrics; admin.listen). 9192: the bootstrap listener of
# the default layout; node ports follow it (9193-9448 for 256 nodes).
EXPOSE 9190 9192 9193-9448

# /readyz: listeners bound, upstream answering, not draining. `kgate healthcheck` uses urllib (no curl
# in slim) and finds the port in the same config file.
HEALTHCHECK --interval=10s --timeout=5s --start-period=15s --retries=3 \
    CMD ["kgate", "healthcheck", "-c", "/etc/kgate/kgate.yaml"]

# SIGTERM drains (proxy.drain_timeout_s); keep the orchestrator's stop timeout above it.
STOPSIGNAL SIGTERM
ENTRYPOINT ["kgate", "run"]
CMD ["-c", "/etc/kgate/kgate.yaml"]
