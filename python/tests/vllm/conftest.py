"""The vLLM connector tests start real vLLM engines (minutes): they run from
scripts/vllm_test.sh (RANGEKV_VLLM_TESTS=1) and are skipped elsewhere, e.g. when
scripts/python_test.sh collects python/tests."""

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

if os.environ.get("RANGEKV_VLLM_TESTS") != "1":
    collect_ignore_glob = ["test_*.py"]
else:
    pytest.importorskip("vllm")
    pytest.importorskip("transformers")


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory) -> str:
    from harness import make_model

    return make_model(tmp_path_factory.mktemp("model"))
