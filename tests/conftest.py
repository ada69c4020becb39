import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")


@pytest.fixture()
def srv():
    """A local fake OpenAI-compatible model server (glasses_rag/testing/fake_model_server.py), stopped after the test."""
    from glasses_rag.testing.fake_model_server import FakeOpenAIServer

    with FakeOpenAIServer() as s:
        yield s
