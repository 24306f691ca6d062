"""The cluster tier's real servers for the Python tests: SeaweedFS S3 and redis-server on
127.0.0.1, started by testing/remote/servers.sh (the same script the C++ tests use) and stopped
at the end. Yields a dict of the addresses, with the AWS credentials put into os.environ (the
engines read the standard chain); skips with the reason when the server binaries are missing."""

from __future__ import annotations

import os
import subprocess
import tempfile

import pytest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "testing", "remote",
                      "servers.sh")


def start_servers():
    d = tempfile.mkdtemp(prefix="rangekv-remote-")
    env = dict(os.environ, RANGEKV_SERVERS_OWNER_PID=str(os.getpid()))
    proc = subprocess.run(["bash", SCRIPT, "start", d], env=env, capture_output=True, text=True,
                          timeout=120)
    if proc.returncode == 77:
        pytest.skip(f"cluster tier servers unavailable: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    values = {}
    with open(os.path.join(d, "env")) as f:
        for line in f:
            k, _, v = line.strip().partition("=")
            values[k] = v
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"):
        os.environ[k] = values[k]
    return d, values


def stop_servers(d):
    subprocess.run(["bash", SCRIPT, "stop", d], capture_output=True, timeout=60)
    subprocess.run(["rm", "-rf", d])
