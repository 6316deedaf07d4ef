FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY fabricmon fabricmon
COPY collectors collectors
COPY twin twin
COPY frontend frontend
COPY manage.py ./
RUN pip install --no-cache-dir .
# glibc malloc: keep no freed bursts (fabricmon/demo.py MALLOC_ENV says why)
ENV MALLOC_ARENA_MAX=2 MALLOC_MMAP_THRESHOLD_=131072
EXPOSE 8000
CMD ["python", "-m", "fabricmon.serve", "-b", "0.0.0.0", "-p", "8000", "fabricmon.asgi:application"]
