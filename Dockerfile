# The one gpuchain image: operator, device plugin, feature discovery, exporter, MIG manager and
# validators are all `gpuchain <command>`. Driver and toolkit operands use NVIDIA's own images.
#
#   docker build -t ghcr.io/gpuchain/gpuchain:0.1.0 .
#
# The default user is root because node agents need it (device plugin sockets under
# /var/lib/kubelet, MIG changes); the operator Deployment runs as UID 65532 (see the Helm chart).

FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install --no-cache-dir build==1.2.2 \
 && python -m build --wheel --outdir /dist

FROM python:3.11-slim-bookworm
LABEL org.opencontainers.image.title="gpuchain" \
      org.opencontainers.image.description="The Kubernetes GPU chain: operator, device plugin, discovery, exporter, MIG manager, validators" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    NVIDIA_VISIBLE_DEVICES=void
COPY --from=build /dist/*.whl /tmp/
RUN pip install --no-cache-dir /tmp/*.whl \
 && rm -f /tmp/*.whl \
 && gpuchain --version
ENTRYPOINT []
CMD ["gpuchain", "--help"]
