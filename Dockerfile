# One image for every part of tts-knee: Locust master and workers, the collector sidecar,
# the dashboard and the simulator. See docker-compose.yml.
FROM python:3.11-slim
# The package is built from /src and installed. The commands run in /app, which holds only
# what they name by path, the locustfile: a tts_knee/ folder there would stand in front of the
# installed package (Locust and python -m put the working directory first on the path).
COPY pyproject.toml README.md /src/
COPY tts_knee /src/tts_knee
COPY runformat /src/runformat
COPY audio /src/audio
COPY analysis /src/analysis
COPY locustfiles /src/locustfiles
COPY collectors /src/collectors
COPY dashboard /src/dashboard
COPY testbed /src/testbed
COPY configs /src/configs
RUN pip install --no-cache-dir '/src[piper,grpc,asr,otel]'
WORKDIR /app
COPY locustfiles/tts.py locustfiles/tts.py
# Locust web UI, master port, collector, live metrics (--metrics-port), dashboard, simulator
EXPOSE 8089 5557 9300 9310 8090 8300
CMD ["tts-knee", "run", "--help"]
