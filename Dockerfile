# One image for every part of tts-knee: Locust master and workers, the collector sidecar,
# the dashboard and the simulator. See docker-compose.yml.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY tts_knee tts_knee
COPY runformat runformat
COPY analysis analysis
COPY locustfiles locustfiles
COPY collectors collectors
COPY dashboard dashboard
COPY testbed testbed
COPY configs configs
RUN pip install --no-cache-dir '.[piper,grpc]'
# Locust web UI, master port, collector, dashboard, simulator
EXPOSE 8089 5557 9300 8090 8300
CMD ["tts-knee", "run", "--help"]
