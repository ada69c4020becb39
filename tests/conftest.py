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
# compiled grammars (glasses_rag/models/vlm/grammar_store.py) go to a folder of this process's own: the tests' many
# small schemas must not push the user's real ones out of ~/.cache/glasses-rag/grammars
if "GLASSES_GRAMMAR_CACHE" not in os.environ:
    import atexit
    import shutil
    import tempfile

    _grammars = tempfile.mkdtemp(prefix="glasses-test-grammars-")
    os.environ["GLASSES_GRAMMAR_CACHE"] = _grammars
    atexit.register(shutil.rmtree, _grammars, ignore_errors=True)


@pytest.fixture()
def srv():
    """A local fake OpenAI-compatible model server (glasses_rag/testing/fake_model_server.py), stopped after the
    test."""
    from glasses_rag.testing.fake_model_server import FakeOpenAIServer

    with FakeOpenAIServer() as s:
        yield s
