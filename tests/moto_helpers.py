"""An S3-compatible server on 127.0.0.1 for tests: moto in server mode (the dev extra), one bucket.

Shared by the rollout (`tests/test_ray_cluster.py`) and scoring (`tests/test_score_uri.py`)
tests of storage URIs. The server runs in its own session and is stopped by its session id.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from net_helpers import free_port
from ray_cluster_helpers import stop_session

BUCKET = "safevla-test"


@contextlib.contextmanager
def moto_s3() -> Iterator[dict]:
    """Starts moto on a free port and creates BUCKET; yields os.environ plus the AWS_* variables for it."""
    pytest.importorskip("moto", reason="moto is not installed: pip install 'safevla-bench[dev]'")
    pytest.importorskip("boto3")
    port = free_port()
    server = subprocess.Popen([str(Path(sys.executable).with_name("moto_server")), "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                s3_client(env).create_bucket(Bucket=BUCKET)
                break
            except Exception:  # noqa: BLE001 - the server is still starting
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        yield env
    finally:
        stop_session(server.pid, grace_s=5)
        server.wait(timeout=10)


def s3_client(env: dict):
    import boto3
    return boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], aws_access_key_id="testing",
                        aws_secret_access_key="testing", region_name="us-east-1")


def upload_tree(env: dict, local: Path, prefix: str) -> None:
    client = s3_client(env)
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        client.upload_file(str(path), BUCKET, f"{prefix}/{path.relative_to(local).as_posix()}")


def get_bytes(env: dict, key: str) -> bytes:
    return s3_client(env).get_object(Bucket=BUCKET, Key=key)["Body"].read()


def keys(env: dict, prefix: str) -> list[str]:
    pages = s3_client(env).get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return sorted(o["Key"] for page in pages for o in page.get("Contents", []))
