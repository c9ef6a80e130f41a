"""`safevla score` from and into S3 (moto on 127.0.0.1) against local paths; prints one JSON line.

    python benchmarks/bench_score_uri.py [--episodes 60] [--repeats 3]

Work: the first N episodes of the bundled demo archive (with their scene XMLs), scored
with the local engine, 1 process. Each repeat, alternately:

- local_s: archive and store on local disk (siblings), a fresh store;
- s3_cold_s: s3://bucket/archive into a fresh s3://bucket/store, empty cache (download
  + score + upload: what a first run on a new machine pays);
- s3_warm_s: the same into another fresh store with the archive already mirrored
  (score + upload);
- s3_rerun_s: the cold run's store again: everything already scored (list + pull tables).

Medians are reported, with ratios against local_s of the same run, and whether the S3
store's Parquet equals the local store's byte for byte. moto runs in this machine's
memory, so the figures are the code path's overhead, not a real network's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "assets" / "demo" / "archive"
BUCKET = "safevla-bench"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_moto(port: int) -> subprocess.Popen:
    import boto3
    server = subprocess.Popen([str(Path(sys.executable).with_name("moto_server")), "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}")
    for _ in range(120):
        try:
            client.create_bucket(Bucket=BUCKET)
            return server
        except Exception:  # noqa: BLE001 - still starting
            time.sleep(0.5)
    server.kill()
    raise SystemExit("moto_server did not start")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-score-uri-"))
    port = free_port()
    os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                       "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"})
    server = start_moto(port)
    try:
        import boto3
        from scoring.store.score_uri import score_with_uris
        from scoring.store.write import score_archive
        archive = work / "local" / "archive"
        files = sorted(DEMO.rglob("*.npz"))[:args.episodes]
        for f in [*files, *sorted((DEMO / "models").iterdir())]:
            (archive / f.relative_to(DEMO)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, archive / f.relative_to(DEMO))
        client = boto3.client("s3")
        for f in sorted(p for p in archive.rglob("*") if p.is_file()):
            client.upload_file(str(f), BUCKET, f"archive/{f.relative_to(archive).as_posix()}")
        archive_bytes = sum(p.stat().st_size for p in archive.rglob("*") if p.is_file())

        def timed(fn) -> float:
            start = time.perf_counter()
            summary = fn()
            assert not summary.errors, summary.errors
            return time.perf_counter() - start

        figures = {k: [] for k in ("local_s", "s3_cold_s", "s3_warm_s", "s3_rerun_s")}
        identical = True
        for r in range(args.repeats):
            store = work / "local" / f"store{r}"
            figures["local_s"].append(timed(lambda: score_archive([str(archive)], store, progress=False)))
            os.environ["SAFEVLA_CACHE"] = str(work / f"cache{r}")
            cold = f"s3://{BUCKET}/cold{r}"
            figures["s3_cold_s"].append(timed(lambda: score_with_uris(
                [f"s3://{BUCKET}/archive"], cold, score=score_archive, progress=False)))
            figures["s3_warm_s"].append(timed(lambda: score_with_uris(
                [f"s3://{BUCKET}/archive"], f"s3://{BUCKET}/warm{r}", score=score_archive, progress=False)))
            figures["s3_rerun_s"].append(timed(lambda: score_with_uris(
                [f"s3://{BUCKET}/archive"], cold, score=score_archive, progress=False)))
            for table in ("episodes.parquet", "spec_results.parquet"):
                remote = client.get_object(Bucket=BUCKET, Key=f"cold{r}/{table}")["Body"].read()
                identical &= remote == (store / table).read_bytes()
        med = {k: round(statistics.median(v), 3) for k, v in figures.items()}
        local = med["local_s"]
        print(json.dumps({"bench": "score_uri", "episodes": len(files), "archive_mb": round(archive_bytes / 1e6, 1),
                          "repeats": args.repeats, **med,
                          "s3_cold_over_local": round(med["s3_cold_s"] / local, 2),
                          "s3_warm_over_local": round(med["s3_warm_s"] / local, 2),
                          "s3_rerun_over_local": round(med["s3_rerun_s"] / local, 2),
                          "local_episodes_per_s": round(len(files) / local, 1),
                          "s3_cold_episodes_per_s": round(len(files) / med["s3_cold_s"], 1),
                          "parquet_identical": bool(identical)}))
    finally:
        server.terminate()
        server.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
